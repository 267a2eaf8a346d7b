"""The pytest plugin, driven through pytester: collection, ids, errors, hosts, the table and JUnit."""

from __future__ import annotations

import json
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_palette.arena import leftovers

CASES = """
- name: three_slides
  covers: a plain yes builds what was asked
  tags: [approval, core]
  request: Build a 3-slide deck on prompt caching
  expect:
    slides: 3
- name: held_off
  covers: no deck without approval
  tags: [trap]
  request: Build a 3-slide deck on tides
  replies: ["actually, hold off for now"]
  expect:
    deck: false
"""

# A second column for tables: the same scaffold with the skill inlined, registered the way a project would.
TWIN_HOST = """
from pytest_palette.hosts.react import ReactHost

class Twin(ReactHost):
    name = "twin"
    def configure(self, given, *, skill=True):
        super().configure(given, skill=skill)
        self.eager = True

def pytest_palette_add_hosts(hosts, config):
    hosts["twin"] = Twin()
"""

BROKEN_HOSTS = """
from pytest_palette.hosts.base import Host, HostError, HostSession

class Crashes(HostSession):
    def send(self, message, timeout):
        raise HostError("the client crashed")

class CrashingHost(Host):
    name = "crashing"
    def open(self, workspace, skill, env, route, settings, sandbox):
        return Crashes()

class CannotStart(Host):
    name = "nostart"
    def open(self, workspace, skill, env, route, settings, sandbox):
        raise RuntimeError("no binary named claude-ish on PATH")

def pytest_palette_add_hosts(hosts, config):
    hosts["crashing"] = CrashingHost()
    hosts["nostart"] = CannotStart()
"""


def test_cases_collect_as_items_with_host_ids_and_co_runs_nothing(pytester: pytest.Pytester, cases: Path) -> None:
    pytester.makeconftest(TWIN_HOST)
    result = pytester.runpytest("--co", "-q", "--host", "react,twin")
    result.stdout.fnmatch_lines([
        "cases/cases.yaml::three_slides[[]react[]]", "cases/cases.yaml::three_slides[[]twin[]]",
        "cases/cases.yaml::held_off[[]react[]]", "cases/cases.yaml::held_off[[]twin[]]", "4 tests collected*",
    ])
    assert not (pytester.path / "runs").exists()


def test_a_case_file_named_on_the_command_line_is_collected_wherever_it_lives(pytester: pytest.Pytester) -> None:
    elsewhere = pytester.mkdir("my_repo")
    (elsewhere / "mine.yaml").write_text(CASES)
    (elsewhere / "not_cases.yaml").write_text("just: config\n")
    result = pytester.runpytest("my_repo/mine.yaml", "--co", "-q")
    result.stdout.fnmatch_lines(["my_repo/mine.yaml::three_slides[[]react[]]", "2 tests collected*"])


@pytest.mark.end_to_end
def test_a_run_passes_prints_the_table_and_keeps_inputs_and_outputs(pytester: pytest.Pytester, cases: Path) -> None:
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "palette: hosts react · model rehearsal (scripted stand-in, not a language model)",
        "palette: skill * (*) · reference engine*",
        "*palette summary*",
        "case*react",
        "three_slides*pass*3sl*",
        "held_off*pass*-*",
        "react: 2 passed, 0 failed, 0 errored*",
    ])
    [run] = (pytester.path / "runs").iterdir()
    item = run / "react" / "three_slides"
    assert (item / "input" / "request.txt").read_text() == "Build a 3-slide deck on prompt caching\n"
    assert (item / "input" / "replies.txt").read_text() == "yes\n"
    assert (item / "output" / "three_slides.pptx").stat().st_size >= 20_000
    assert len(list((item / "output").glob("slide-*.png"))) == 3 and (item / "output" / "plan.md").is_file()
    assert (item / "palette-calls.jsonl").is_file() and (item / "turns.json").is_file()
    # The agent worked beside its inputs, not among them: it never saw the scripted replies.
    assert (item / "work" / "skills" / "palette" / "SKILL.md").is_file()
    assert not list((item / "work").rglob("replies.txt"))


@pytest.mark.end_to_end
def test_each_trace_holds_only_its_own_items_calls(pytester: pytest.Pytester, cases: Path) -> None:
    pytester.makepyfile(test_after="""
        import os
        def test_nothing_leaked():
            assert "PALETTE_TRACE" not in os.environ
    """)
    result = pytester.runpytest("cases", "test_after.py", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)
    [run] = (pytester.path / "runs").iterdir()
    held = (run / "react" / "held_off" / "palette-calls.jsonl").read_text()
    built = (run / "react" / "three_slides" / "palette-calls.jsonl").read_text()
    assert "tides" in held and "tides" not in built and '"start"' not in held


@pytest.mark.end_to_end
@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_junit_carries_the_properties_on_every_testcase(pytester: pytest.Pytester, cases: Path,
                                                        xdist: list[str]) -> None:
    pytester.makeconftest(TWIN_HOST)
    result = pytester.runpytest_subprocess("--host", "react", "--host", "twin", "--junitxml=out.xml",
                                           "-p", "no:cacheprovider", *xdist)
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["case*react*twin", "three_slides*pass*3sl*pass*3sl*",
                                 "2 case(s) · 2 run on every host · the hosts agreed everywhere*"])
    testcases = ET.parse(pytester.path / "out.xml").getroot().iter("testcase")
    seen = []
    for testcase in testcases:
        props = {p.get("name"): p.get("value") for p in testcase.iter("property")}
        assert {"host", "model", "verdict", "slides", "polls", "seconds", "calls", "skill_hash"} <= set(props)
        assert props["verdict"] == "pass" and props["model"].startswith("rehearsal")
        assert props["score"] == "1.0" and set(json.loads(props["checks"]).values()) == {1.0}
        seen.append((testcase.get("name"), props["host"], props["calls"]))
    assert sorted(seen)[0][:2] == ("held_off[react]", "react")
    assert ("three_slides[twin]", "twin", "find plan find start status") in seen
    assert len(seen) == 4


@pytest.mark.end_to_end
def test_a_failing_verdict_is_a_failure_with_every_rule_in_words(pytester: pytest.Pytester) -> None:
    pytester.mkdir("cases")
    (pytester.path / "cases" / "c.yaml").write_text(textwrap.dedent("""
        - name: wrong_count
          covers: the judge compares the slide count exactly
          tags: [edit]
          request: Build a 3-slide deck on prompt caching
          expect:
            slides: 4
    """))
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "palette case wrong_count[[]react[]] failed:",
        "  ↳ asked for 4 slides, got 3",
        "  ↳ the user asked for a change but edit-plan was never called (calls: find, plan, find, start, status)",
        "  score: 0.33 — failed: slides, edit",
        "  calls: find → plan → find → start → status",
        "wrong_count*FAIL 0.33*3sl*",
    ])


def test_a_host_failure_is_an_error_of_the_run_not_a_verdict(pytester: pytest.Pytester, cases: Path) -> None:
    pytester.makeconftest(BROKEN_HOSTS)
    result = pytester.runpytest("--host", "crashing,nostart", "-p", "no:cacheprovider", "-k", "three_slides")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines([
        "*host crashing failed: turn 1 failed: the client crashed",
        "*(an error of the run, not a verdict on the skill)",
        "*host nostart failed: could not start: RuntimeError: no binary named claude-ish on PATH",
        "three_slides*ERROR*ERROR*",
        "crashing: 0 passed, 0 failed, 1 errored*",
    ])


@pytest.mark.end_to_end
def test_a_turn_that_times_out_is_an_error(pytester: pytest.Pytester, cases: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PALETTE_ENGINE_LATENCY", "plan=5")
    result = pytester.runpytest("-k", "three_slides", "--palette-turn-timeout", "1", "-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*host react failed: turn 1 failed: turn timed out after 1 s*"])
    # The failed turn keeps what the agent did before the timeout: its plan call is still holding.
    [run] = (pytester.path / "runs").iterdir()
    [turn] = json.loads((run / "react" / "three_slides" / "turns.json").read_text())["turns"]
    assert turn["error"] == "turn timed out after 1 s"
    assert any(step.startswith("→ bash:") and "deck.py plan" in step for step in turn["steps"]), turn["steps"]
    # …and the plan it was holding (5 s of engine latency) was stopped with the conversation, not left running.
    assert leftovers.processes_of(run / "react" / "three_slides" / "palette-calls.jsonl") == []


@pytest.mark.parametrize(("yaml_text", "line", "message"), [
    ("- name: a\n  covers: x\n  request: r\n  expect:\n    slides: 3\n    slidez: 4\n", 6,
     "unknown key 'slidez' in 'expect' of case 'a' (known: skill, deck, slides, edit, context, max_polls, content, "
     "checks, rubric)"),
    ("- name: a\n  covers: x\n  request: r\n  replys: [yes]\n", 4, "unknown key 'replys' in a case*"),
    ("- name: a\n  covers: x\n  request: r\n  expect:\n    slides: three\n", 5,
     "'expect' of case 'a': 'slides' must be int or null, not str"),
    ("- name: a\n  covers: x\n  request: r\n  expect:\n    deck: 1\n", 5, "*'deck' must be bool, not int"),
    ("- name: Bad-Name\n  covers: x\n  request: r\n", 1,
     "case name 'Bad-Name' must match [[]a-z0-9_[]]+ and be at most 64 characters"),
    ("- name: a\n  request: r\n", 1, "case 'a' needs 'covers'*"),
    ("- name: a\n  covers: x\n  request: r\n  tags: [Core]\n", 4, "tag 'Core' of case 'a' must match*"),
    ("name: a\n", 1, "a case file is a list of cases*"),
    ("- name: a\n  covers: [x\n", 3, "not valid YAML*"),
])
@pytest.mark.end_to_end
def test_a_mistake_in_a_case_file_is_a_collection_error_naming_file_and_line(
        pytester: pytest.Pytester, yaml_text: str, line: int, message: str) -> None:
    pytester.mkdir("cases")
    (pytester.path / "cases" / "bad.yaml").write_text(yaml_text)
    result = pytester.runpytest("--co", "-p", "no:cacheprovider")
    assert result.ret != 0
    result.stdout.fnmatch_lines([f"*cases/bad.yaml:{line}: {message}"])


def test_a_name_used_twice_across_files_is_a_collection_error(pytester: pytest.Pytester) -> None:
    pytester.mkdir("cases")
    (pytester.path / "cases" / "a.yaml").write_text("- name: same\n  covers: x\n  request: r\n")
    (pytester.path / "cases" / "b.yaml").write_text("- name: other\n  covers: x\n  request: r\n"
                                                    "- name: same\n  covers: y\n  request: s\n")
    result = pytester.runpytest("--co", "-p", "no:cacheprovider")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*cases/b.yaml:4: case name 'same' is already used at *cases/a.yaml:1"])


@pytest.mark.end_to_end
def test_an_unset_corpus_variable_errors_those_items_and_the_others_still_run(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PALETTE_BENCH_INPUTS", raising=False)
    pytester.mkdir("cases")
    (pytester.path / "cases" / "c.yaml").write_text(textwrap.dedent("""
        - name: held_off
          covers: no deck without approval
          request: Build a 3-slide deck on tides
          replies: ["not now"]
          expect: {deck: false}
        - documents: "${PALETTE_BENCH_INPUTS}/*.md"
          covers: each corpus document becomes a deck
          tags: [corpus]
          request: Turn this into a deck
        - name: from_file
          covers: a context file that is not there
          request: Turn this into a deck
          context_file: notes/missing.md
    """))
    result = pytester.runpytest("-p", "no:cacheprovider", "--strict-markers")
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines([
        "*documents '${PALETTE_BENCH_INPUTS}/*.md' needs $PALETTE_BENCH_INPUTS, which is not set*",
        "*context_file 'notes/missing.md': no file at *notes/missing.md",
    ])
    # Selecting by the corpus tag still finds the affected case, so it cannot silently resolve to nothing.
    only = pytester.runpytest("-p", "no:cacheprovider", "-m", "corpus")
    only.assert_outcomes(errors=1)


def test_documents_make_one_case_per_file_named_from_its_stem(pytester: pytest.Pytester,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = pytester.mkdir("corpus")
    (corpus / "Q3-Review.md").write_text("# Q3\n\n## Revenue\n- $4.2M\n\n## Hiring\n- 14 engineers\n")
    (corpus / "tiny.md").write_text("# Tiny\n\n## One\n- a point\n")
    monkeypatch.setenv("PALETTE_BENCH_INPUTS", str(corpus))
    pytester.mkdir("cases")
    (pytester.path / "cases" / "c.yaml").write_text(
        '- documents: "${PALETTE_BENCH_INPUTS}/*.md"\n  covers: x\n  tags: [corpus]\n  request: Turn this into a deck\n'
        '- documents: "nowhere/*.md"\n  covers: y\n  request: z\n')
    result = pytester.runpytest("--co", "-q", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["cases/c.yaml::q3_review[[]react[]]", "cases/c.yaml::tiny[[]react[]]",
                                 "cases/c.yaml::c_documents_line5[[]react[]]"])
    run = pytester.runpytest("-p", "no:cacheprovider", "-k", "line5")
    run.stdout.fnmatch_lines(["*documents 'nowhere/*.md' matched no file*"])


def test_tags_are_registered_markers_and_k_selects_by_tag(pytester: pytest.Pytester, cases: Path) -> None:
    by_marker = pytester.runpytest("--co", "-q", "--strict-markers", "-m", "trap")
    by_marker.stdout.fnmatch_lines(["cases/cases.yaml::held_off[[]react[]]", "1/2 tests collected*"])
    by_keyword = pytester.runpytest("--co", "-q", "-k", "core")
    by_keyword.stdout.fnmatch_lines(["cases/cases.yaml::three_slides[[]react[]]", "1/2 tests collected*"])


def test_usage_errors_come_before_any_case_runs(pytester: pytest.Pytester, cases: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("WATSONX_APIKEY", "WATSONX_URL", "WATSONX_PROJECT_ID", "WATSONX_SPACE_ID"):
        monkeypatch.delenv(name, raising=False)
    unknown = pytester.runpytest("--host", "nope")
    assert unknown.ret == pytest.ExitCode.USAGE_ERROR
    unknown.stderr.fnmatch_lines(["*--host nope: no such host; known: *manual*react*"])
    missing = pytester.runpytest("--model", "watsonx:openai/gpt-oss-120b")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines(["*react: --model watsonx:openai/gpt-oss-120b needs WATSONX_APIKEY, WATSONX_URL, "
                                  "WATSONX_PROJECT_ID or WATSONX_SPACE_ID*"])
    assert not (pytester.path / "runs").exists()
    listing = pytester.runpytest("--model", "watsonx", "--co", "-q")
    listing.stdout.fnmatch_lines(["2 tests collected*"])


@pytest.mark.end_to_end
def test_a_project_replaces_a_host_of_the_same_name(pytester: pytest.Pytester, cases: Path) -> None:
    pytester.makeconftest("""
        from pytest_palette.hosts.react import ReactHost
        class Mine(ReactHost):
            def describe(self, route, settings):
                return {"model": route.label, "scaffold": "my own react"}
        def pytest_palette_add_hosts(hosts, config):
            hosts["react"] = Mine()
    """)
    result = pytester.runpytest("-k", "held_off", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["palette: react: scaffold my own react"])


# docs/hosts.md's "A host's own options", as a project writes it: no host is named in the plugin for it.
OWN_OPTIONS = """
from pytest_palette.hosts.base import HostOption, OptionRefused
from pytest_palette.hosts.react import ReactHost

class Mine(ReactHost):
    name = "mine"
    options = (*ReactHost.options, HostOption("mine-steps", "steps my agent may take (default 40)", type=int,
                                              metavar="N"))
    def configure(self, given, *, skill=True):
        super().configure(given, skill=skill)  # react's options, which it keeps
        steps = given.get("mine-steps")
        if steps is not None and steps < 1:
            raise OptionRefused("mine-steps", f"must be at least 1 (got {steps})")
        self.steps = 40 if steps is None else steps
    def describe(self, route, settings):
        return {"model": route.label, "steps": str(self.steps), "eager": str(self.eager)}

def pytest_addoption(parser):
    Mine.add_options(parser)

def pytest_palette_add_hosts(hosts, config):
    hosts["mine"] = Mine()
"""


def test_a_projects_host_adds_and_reads_options_of_its_own(pytester: pytest.Pytester, cases: Path) -> None:
    pytester.makeconftest(OWN_OPTIONS)
    helped = pytester.runpytest("--help")
    helped.stdout.fnmatch_lines(["*--palette-recursion-limit=N*", "*--palette-claude-cli=PATH*",
                                 "*--palette-mine-steps=N", "*steps my agent may take (default 40)"])
    refused = pytester.runpytest("--host", "mine", "--palette-mine-steps", "0", "--co")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["ERROR: --palette-mine-steps must be at least 1 (got 0)"])
    listed = pytester.runpytest("--host", "mine,react", "--palette-mine-steps", "7", "--palette-eager",
                                "--palette-recursion-limit", "9", "--co")
    listed.stdout.fnmatch_lines(["palette: mine: steps 7, eager True",
                                 "palette: react: *skill_loading eager, recursion_limit 9*"])
    default = pytester.runpytest("--host", "mine", "--co")
    default.stdout.fnmatch_lines(["palette: mine: steps 40, eager False"])


@pytest.mark.end_to_end
def test_path_options_work_with_a_space_as_with_an_equals_sign_wherever_the_path_is(
        pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory) -> None:
    import shutil

    from pytest_palette.skill import PACKAGED_SKILLS

    pytester.makeini("[pytest]\ntestpaths = cases\naddopts = -p no:cacheprovider\n")
    pytester.mkdir("cases")
    (pytester.path / "cases" / "cases.yaml").write_text(CASES)
    pytester.makepyfile(test_stray="def test_not_a_case():\n    pass\n")  # collected only if rootdir is lost
    outside = tmp_path_factory.mktemp("elsewhere")
    skill = outside / "my-skill"
    shutil.copytree(PACKAGED_SKILLS / "palette", skill)
    for form in (["--palette-skill", str(skill)], [f"--palette-skill={skill}"]):
        listed = pytester.runpytest("--co", "-q", *form)
        listed.stdout.fnmatch_lines(["cases/cases.yaml::three_slides[[]react[]]", "2 tests collected*"])
        assert "test_stray" not in listed.stdout.str()
    ran = pytester.runpytest("--palette-skill", str(skill), "--palette-run-dir", str(outside / "runs"),
                             "--palette-run-id", "spaced", "--palette-cases", str(pytester.path / "cases"))
    ran.assert_outcomes(passed=2)
    run = outside / "runs" / "spaced"
    assert (run / "results.jsonl").is_file() and "test_stray" not in ran.stdout.str()
    judged = pytester.runpytest("--palette-collect", str(run), "-k", "held_off")
    judged.assert_outcomes(passed=1)
    resumed = pytester.runpytest("--palette-resume", str(run), "--palette-skill", str(skill))
    resumed.assert_outcomes()  # every item already has its verdict: nothing is left to run
    assert "test_stray" not in resumed.stdout.str() + judged.stdout.str()
