"""The rules hook: a skill's judge rules and its own `expect:` keys, registered from a conftest.py.

The end-to-end proof — a second skill run on react, cuga and claude from a project of its own — is
tests/test_own_skill.py; here each part of the hook is shown failing and passing.
"""

from __future__ import annotations

import hashlib
import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_palette.cases import Case, CaseFileError, load_cases
from pytest_palette.judge import PALETTE, judge
from pytest_palette.judge.evidence import Evidence
from pytest_palette.rules import Failure, Finding, Note, RulesMissing, SkillRules, rules_for

CASE = """
- name: notes
  covers: a changelog from release notes
  request: Write the changelog for 2.1
  expect:
    changelog: {entries: 3}
"""


def entries_at_least_one(value: object) -> None:
    if not isinstance(value, dict) or not isinstance(value.get("entries"), int) or value["entries"] < 1:
        raise ValueError("give entries: N, a whole number of 1 or more")


def evidence(tmp_path: Path, calls: tuple[dict[str, object], ...] = ()) -> Evidence:
    return Evidence(workspace=tmp_path, pptx=None, slides=0, has_plex=False, size=0, decks=(), calls=calls)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cases.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_a_skills_own_keys_are_kept_for_its_rules_and_survive_the_saved_case(tmp_path: Path) -> None:
    [case] = load_cases(write(tmp_path, CASE), namespaces={"changelog": entries_at_least_one})
    assert case.expect.of("changelog") == {"entries": 3}
    assert case.expect.of("other", "none") == "none"
    again = Case.from_json(case.to_json())
    assert again.expect == case.expect and again.digest() == case.digest()


def test_a_case_without_own_keys_keeps_the_digest_it_had_before_the_hook(tmp_path: Path) -> None:
    [case] = load_cases(write(tmp_path, "- {name: plain, covers: x, request: Build a 3-slide deck}\n"))
    # The digest before the hook: the four fields, `expect` as its plain dict. Unchanged, so the ledgers written
    # before still pair with today's cases.
    before = {"deck": True, "slides": None, "edit": False, "context": False, "max_polls": 12}
    payload = json.dumps([case.request, case.context, list(case.replies), before], sort_keys=True)
    assert case.digest() == hashlib.sha256(payload.encode()).hexdigest()[:12]


def test_a_wrong_own_value_is_refused_at_its_line_in_the_skills_words(tmp_path: Path) -> None:
    path = write(tmp_path, CASE.replace("{entries: 3}", "{entries: none}"))
    with pytest.raises(CaseFileError) as raised:
        load_cases(path, namespaces={"changelog": entries_at_least_one})
    assert raised.value.line == 6
    assert "changelog: give entries: N, a whole number of 1 or more" in str(raised.value)


def test_a_key_no_registered_skill_owns_is_an_error_naming_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(CaseFileError) as raised:
        load_cases(write(tmp_path, CASE))  # no skill registered "changelog"
    assert raised.value.line == 6 and "unknown key 'changelog'" in str(raised.value)
    with pytest.raises(CaseFileError) as raised:
        load_cases(write(tmp_path, CASE.replace("changelog:", "changelgo:")), namespaces={"changelog": None})
    assert "known: skill, deck" in str(raised.value) and str(raised.value).endswith(", changelog)")


def test_an_own_value_must_be_plain_data(tmp_path: Path) -> None:
    with pytest.raises(CaseFileError, match="must hold plain values"):
        load_cases(write(tmp_path, CASE.replace("{entries: 3}", "2026-12-01")), namespaces={"changelog": None})


def test_the_judge_applies_the_rules_it_is_given_with_their_blame_and_notes(tmp_path: Path) -> None:
    [case] = load_cases(write(tmp_path, CASE), namespaces={"changelog": None})

    def rules(case: Case, found: Evidence) -> Iterator[Finding]:
        wanted = case.expect.of("changelog")["entries"]
        written = [i for i, call in enumerate(found.calls) if call.get("command") == "write"]
        if len(written) != 1:
            yield Failure(f"the changelog was written {len(written)} times", tuple(written))
        if wanted > 2:
            yield "plain words are a failure too"
        yield Note("a note is not a failure")

    verdict = judge(case, evidence(tmp_path, ({"command": "write"}, {"command": "write"})), "react",
                    SkillRules(rules), "changelog")
    assert verdict.failures == ("the changelog was written 2 times", "plain words are a failure too")
    assert verdict.blame == ((0, 1), ())
    assert verdict.notes == ("a note is not a failure",) and verdict.rules == "changelog"
    passing = judge(case, evidence(tmp_path, ({"command": "write"},)), "react",
                    SkillRules(lambda c, e: [Note("only a note")]), "changelog")
    assert passing.ok and passing.notes == ("only a note",)


def test_palettes_rules_are_the_default_and_a_skill_without_rules_is_named() -> None:
    assert rules_for(PALETTE, {PALETTE: SkillRules(lambda c, e: [])}).expect is None
    with pytest.raises(RulesMissing, match=r"the skill 'changelog' has no judge rules \(rules are registered for: "
                                           r"palette\).*pytest_palette_add_rules"):
        rules_for("changelog", {PALETTE: SkillRules(lambda c, e: [])})


SKILL = """---
name: changelog
description: Writes CHANGELOG.md from a request, through a plan the user approves.
---
Run `python3 skills/changelog/scripts/changelog.py plan --request "<request>"`.
"""

RULES_CONFTEST = """
from pytest_palette.rules import SkillRules

def check(value):
    if not isinstance(value, dict) or set(value) - {"entries"}:
        raise ValueError("only 'entries' is known")

def pytest_palette_add_rules(rules, config):
    rules["changelog"] = SkillRules(judge=lambda case, evidence: [], expect=check)
"""


def test_a_skill_whose_rules_nobody_registered_stops_the_session_naming_the_flag(pytester: pytest.Pytester) -> None:
    skill = pytester.mkdir("skills") / "changelog"
    skill.mkdir()
    (skill / "SKILL.md").write_text(SKILL, encoding="utf-8")
    pytester.mkdir("cases")
    (pytester.path / "cases" / "c.yaml").write_text(CASE, encoding="utf-8")
    result = pytester.runpytest("--co", "-q", f"--palette-skill={skill}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--palette-skill {skill}: the skill 'changelog' has no judge rules*"
                                 "pytest_palette_add_rules*"])


def test_a_conftests_rules_let_its_cases_give_their_own_keys(pytester: pytest.Pytester) -> None:
    skill = pytester.mkdir("skills") / "changelog"
    skill.mkdir()
    (skill / "SKILL.md").write_text(SKILL, encoding="utf-8")
    pytester.makeconftest(RULES_CONFTEST)
    pytester.mkdir("cases")
    (pytester.path / "cases" / "c.yaml").write_text(CASE, encoding="utf-8")
    result = pytester.runpytest("--co", "-q", f"--palette-skill={skill}")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["*notes[[]react[]]*"])
    (pytester.path / "cases" / "c.yaml").write_text(CASE.replace("entries: 3", "entry: 3"), encoding="utf-8")
    result = pytester.runpytest("--co", "-q", f"--palette-skill={skill}")
    result.stdout.fnmatch_lines(["*c.yaml:6: 'expect' of case 'notes': changelog: only 'entries' is known*"])


def test_a_skill_may_not_take_a_name_palette_gives_its_own_keys(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("from pytest_palette.rules import SkillRules\n"
                          "def pytest_palette_add_rules(rules, config):\n"
                          "    rules['slides'] = SkillRules(judge=lambda case, evidence: [])\n")
    result = pytester.runpytest("--co", "-q")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*a skill named 'slides' would take a key of Palette's own*"])


def test_a_conftest_replaces_the_good_rehearsal_agent_and_adds_its_own(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("from pytest_palette.rehearsal.policy import RehearsalPolicy\n"
                          "class Mine(RehearsalPolicy):\n    name = 'mine'\n"
                          "def pytest_palette_add_rehearsals(agents, config):\n"
                          "    agents['rehearsal'] = Mine\n    agents['sloppy'] = Mine\n")
    pytester.makepyfile(test_agent="""
        from pytest_palette.models import rehearsal_policy
        from pytest_palette.run.session import SESSION

        def test_agent(request):
            assert type(rehearsal_policy(request.config.stash[SESSION].settings.model)).__name__ == "Mine"
        """)
    assert pytester.runpytest("-q", "-p", "no:randomly").ret == pytest.ExitCode.OK
    assert pytester.runpytest("-q", "--model=rehearsal:sloppy").ret == pytest.ExitCode.OK
    result = pytester.runpytest("-q", "--model=rehearsal:nope")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*no scripted rehearsal agent named 'nope'; known: *sloppy*"])


AGENTS_CONFTEST = """
from pytest_palette.rehearsal.policy import RehearsalPolicy

class Careful(RehearsalPolicy):
    name = "careful"

class Sloppy(RehearsalPolicy):
    name = "sloppy"
    known_bad = True

def pytest_palette_add_rehearsals(agents, config):
    agents["careful"] = Careful
    agents["sloppy"] = Sloppy
"""


@pytest.mark.end_to_end
@pytest.mark.parametrize(("agent", "said"), [("careful", "scripted stand-in"), ("sloppy", "known-bad scripted agent")])
def test_a_projects_agent_is_named_for_what_it_declares_in_the_terminal_the_record_and_the_site(
        pytester: pytest.Pytester, agent: str, said: str) -> None:
    from pytest_palette.results.ledger import load

    pytester.makeconftest(AGENTS_CONFTEST)
    pytester.mkdir("cases")
    (pytester.path / "cases" / "c.yaml").write_text(
        "- {name: pptx, covers: x, tags: [trigger], request: What does pptx stand for?, expect: {skill: false}}\n",
        encoding="utf-8")
    result = pytester.runpytest("-p", "no:cacheprovider", f"--model=rehearsal:{agent}", "--palette-run-id=r",
                                "--palette-html=site")
    result.assert_outcomes(passed=1)
    label = f"rehearsal:{agent} ({said}, not a language model)"
    result.stdout.fnmatch_lines([f"palette: hosts react · model {label}", f"react: 1 passed*· model {label}*"])
    [record] = load(pytester.path / "runs" / "r").latest.values()
    assert record.terms.model == f"rehearsal:{agent}" and record.terms.label == label
    [item] = (pytester.path / "site" / "items").rglob("*.html")
    assert f"<dt>Model</dt><dd>{label}</dd>" in item.read_text(encoding="utf-8")
    assert ("known-bad" in label) is (agent == "sloppy")
