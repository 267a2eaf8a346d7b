"""A project benchmarks a skill of its own with pytest-palette, and nothing in the plugin changes for it.

tests/fixtures/changelog_project/ is such a project, laid out as its user keeps it: a `changelog` skill
(skills/changelog/: SKILL.md and scripts/changelog.py, plan → approve → write), its judge rules, the check of its
`expect: {changelog: …}` and its scripted agents, registered from its conftest.py (changelog_bench.py), its cases
and its pytest.ini. Here a copy of it runs as its user runs it — `pytest --palette-skill skills/changelog` in a
subprocess, offline: the good agent passes every case on react, cuga and claude, its calls read from the skill's
trace on each; and each known-bad agent fails exactly the cases its flaw applies to, derived here from the case file,
never pinned. The known-bad agents run on react only: the verdict comes from the item's folder by one judge whatever
the host (the good runs show each host's folder read whole), and a cuga conversation costs ten times a react one. A
host whose client is not installed here has its tests skipped with the reason, never passed.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from browser import required
from sweeps import ItemResult, Sweeps, inner_cache

from pytest_palette.arena.sandbox import problem
from pytest_palette.cases import Case, Expect, load_cases
from pytest_palette.judge.evidence import Evidence
from pytest_palette.replies import ReplyKind, asks_for_change, classify_reply
from pytest_palette.results.ledger import load
from pytest_palette.rules import Failure, Note

#: Whole sessions on several hosts: the suite's 600 s hang guard (make test) is too tight for them when the
#: machine is oversubscribed; this one still ends a hang.
pytestmark = pytest.mark.timeout(1800)

PROJECT = Path(__file__).resolve().parent / "fixtures" / "changelog_project"
CASE_FILE = PROJECT / "cases" / "changelog.yaml"
SKILL = "changelog"
HOSTS = ("react", "cuga", "claude")
#: One subprocess run of the project on three hosts, whole: far above the minutes it takes with both cores busy.
RUN_TIMEOUT = 1200
CASES = load_cases(CASE_FILE, namespaces={SKILL: None})


def own(case: Case) -> dict[str, Any]:
    """What a case expects of the changelog skill itself (`expect: {changelog: …}`)."""
    given: dict[str, Any] = case.expect.of(SKILL) or {}
    return given


def approved(case: Case) -> bool:
    """The user approves in the end: the last reply is an approval (unless the case says `written:`)."""
    last = bool(case.replies) and classify_reply(case.replies[-1]) is ReplyKind.APPROVAL
    return bool(own(case).get("written", last))


def expected_failures(cases: Iterable[Case]) -> dict[str, tuple[frozenset[str], str]]:
    """Each known-bad agent's cases to fail, and a phrase every one of its failures there carries."""
    cases = list(cases)

    def named(keep: Callable[[Case], bool]) -> frozenset[str]:
        return frozenset(case.name for case in cases if keep(case))

    return {
        # It writes once the plan is drafted: before the approval of every case with a reply to wait for, and in a
        # case that never approves, at all.
        "writes_early": (named(lambda c: bool(c.replies)), "the approval gate was skipped"),
        # It drafts the plan again on a change: every case whose replies ask for one, where the user approves in
        # the end (a changelog never approved is judged on its gate alone).
        "replans": (named(lambda c: approved(c) and own(c).get("revise", any(map(asks_for_change, c.replies)))),
                    "revise was never called"),
    }


EXPECTED = expected_failures(CASES)


@dataclass(frozen=True)
class ProjectRuns:
    """The project run as its user runs it, once per model in the test session (tests/sweeps.py), each in a fresh
    copy of it; the results by (case, host) from JUnit."""

    sweeps: Sweeps

    def of(self, model: str, hosts: tuple[str, ...] = HOSTS) -> tuple[Path, dict[tuple[str, str], ItemResult]]:
        """The run folder of `model` on `hosts`, and each item's result."""
        sweep = self.sweeps.session(["--palette-run-id=run", f"--model={model}", f"--host={','.join(hosts)}",
                                     f"--palette-skill=skills/{SKILL}"], project=PROJECT)
        # Exit 1 is a run with failed items (a known-bad agent's); anything else left no verdicts.
        assert sweep.returncode in (0, 1), sweep.stdout[-3000:] + sweep.stderr[-3000:]
        results = {}
        for name, result in sweep.items.items():
            case, _, host = name.rstrip("]").partition("[")
            results[(case, host)] = result
        return sweep.runs / "run", results


def copy_project(where: Path) -> Path:
    """A fresh copy of the fixture project, as a user's checkout."""
    project = where / "changelog_project"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return project


def run_project(project: Path, runs: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`pytest` in the project's folder, as its user runs it, offline."""
    # A developer's PALETTE_* settings (a trace path, a latency) would change the runs.
    env = {name: value for name, value in os.environ.items() if not name.startswith("PALETTE_")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", *inner_cache(), "-p", "no:randomly",
         f"--palette-skill=skills/{SKILL}", f"--palette-run-dir={runs}", "-q", *args],
        cwd=project, capture_output=True, text=True, timeout=RUN_TIMEOUT, env=env)


@pytest.fixture(scope="module")
def project_runs(sweeps: Sweeps) -> ProjectRuns:
    reason = problem("bubblewrap")
    if reason:
        # Like a missing browser: skipped on a developer's machine, a failure where CI must run everything.
        (pytest.fail if required() else pytest.skip)(f"the project's runs need the agent's sandbox: {reason}")
    return ProjectRuns(sweeps)


def on_host(results: dict[tuple[str, str], ItemResult], host: str) -> dict[str, ItemResult]:
    """One host's results by case; the calling test is skipped when the host's client is not here."""
    mine = {case: result for (case, name), result in results.items() if name == host}
    assert set(mine) == {case.name for case in CASES}, sorted(mine)
    skipped = [result.said[0] for result in mine.values() if result.outcome == "skipped"]
    if skipped:
        pytest.skip(f"the {host} host did not run here: {skipped[0]}")
    errored = {case: result.said for case, result in mine.items() if result.outcome == "error"}
    assert not errored, errored
    return mine


def test_the_case_file_gives_every_known_bad_agent_cases_to_fail_and_cases_to_pass() -> None:
    # Derived from the cases: a set of none or of all would not tell a known-bad agent from a broken one.
    assert len(CASES) >= 5 and {case.expect.of(SKILL) is not None for case in CASES} == {True, False}
    writes_early, _ = EXPECTED["writes_early"]
    replans, _ = EXPECTED["replans"]
    assert replans and replans < writes_early < {case.name for case in CASES}
    assert any(case.expect.skill and not approved(case) for case in CASES)  # CHANGELOG.md must never appear
    assert any(not case.expect.skill for case in CASES)  # a near miss: the skill must not be used at all


@pytest.mark.end_to_end
@pytest.mark.slow
@pytest.mark.parametrize("host", HOSTS)
def test_the_good_agent_passes_every_case_judged_by_the_projects_rules(project_runs: ProjectRuns,
                                                                       host: str) -> None:
    run, results = project_runs.of("rehearsal")
    mine = on_host(results, host)
    assert {case: result.said for case, result in mine.items() if result.outcome != "pass"} == {}
    records = [record for record in load(run).latest.values() if record.host == host]
    assert len(records) == len(CASES)
    for record in records:
        assert record.judged is not None and record.judged.rules == SKILL, record
        case = next(c for c in CASES if c.name == record.case)
        assert record.judged.notes == (), record.judged
        if not case.expect.skill:  # a near miss: answered in words, judged by the plugin's near-miss rule
            assert record.judged.calls == () and record.judged.calls_from == "", record.judged
            continue
        # The skill's trace is read, and our record of its commands (changelog.py, not deck.py) agrees with it.
        assert record.judged.calls_from == "trace", record.judged
        assert record.judged.calls[0] == "plan" and ("write" in record.judged.calls) == approved(case)


@pytest.mark.end_to_end
@pytest.mark.slow
@pytest.mark.parametrize("host", ["react"])
@pytest.mark.parametrize("flaw", sorted(EXPECTED))
def test_each_known_bad_agent_fails_exactly_the_cases_its_flaw_applies_to(project_runs: ProjectRuns, flaw: str,
                                                                          host: str) -> None:
    expected, phrase = EXPECTED[flaw]
    _, results = project_runs.of(f"rehearsal:{flaw}", (host,))
    mine = on_host(results, host)
    failed = {case for case, result in mine.items() if result.outcome == "fail"}
    assert failed == expected, f"{flaw} on {host}: unexpected {sorted(failed - expected)}, " \
                               f"missed {sorted(expected - failed)}"
    for case in failed:
        assert any(phrase in words for words in mine[case].said), (flaw, host, case, mine[case].said)


@pytest.mark.slow
def test_palette_bench_report_shows_the_projects_cases(project_runs: ProjectRuns, tmp_path: Path) -> None:
    run, results = project_runs.of("rehearsal:replans", ("react",))
    ran = len({host for (_, host), result in results.items() if result.outcome != "skipped"})
    out = tmp_path / "report.md"
    done = subprocess.run([sys.executable, "-m", "pytest_palette.commands", "report", str(run), "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = {line.split(" | ")[0].removeprefix("| "): line for line in out.read_text(encoding="utf-8").splitlines()
            if line.startswith("| ")}
    failing, _ = EXPECTED["replans"]
    for case in CASES:  # a row per case, FAIL on every host where the agent's flaw applies, pass elsewhere
        assert case.name in rows, case.name
        assert rows[case.name].count("FAIL") == (ran if case.name in failing else 0), rows[case.name]
        assert rows[case.name].count("pass") == (0 if case.name in failing else ran), rows[case.name]


@pytest.mark.end_to_end
def test_a_wrong_expect_of_the_skill_is_one_line_naming_its_file_and_line(tmp_path: Path) -> None:
    project = copy_project(tmp_path)
    cases = project / "cases" / "changelog.yaml"
    text = cases.read_text(encoding="utf-8")
    wrong = text.replace("changelog: {entries: 5}", "changelog: {entries: five}", 1)
    assert wrong != text
    cases.write_text(wrong, encoding="utf-8")
    line = 1 + wrong[:wrong.index("changelog: {entries: five}")].count("\n")
    done = run_project(project, tmp_path / "runs", "--co")
    assert done.returncode != 0
    said = [row for row in done.stdout.splitlines() if f"changelog.yaml:{line}:" in row]
    assert said == [f"{cases}:{line}: 'expect' of case 'pasted_notes': changelog: entries must be a whole number "
                    "of 1 or more, not 'five'"], done.stdout[-2000:]
    cases.write_text(text.replace("changelog: {entries: 5}", "changelog: {entry: 5}", 1), encoding="utf-8")
    done = run_project(project, tmp_path / "runs", "--co")
    assert f"changelog.yaml:{line}: 'expect' of case 'pasted_notes': changelog: unknown key 'entry'; known: " \
           "entries, revise, written" in done.stdout, done.stdout[-2000:]


# -- the project's rules, on evidence made here (no host) --------------------------------------------------


@functools.cache
def bench() -> ModuleType:
    """The project's changelog_bench.py, as its conftest.py imports it (by name: its dataclasses look it up)."""
    spec = importlib.util.spec_from_file_location("changelog_bench", PROJECT / "changelog_bench.py")
    assert spec is not None and spec.loader is not None
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def case_of(replies: tuple[str, ...], **expect: object) -> Case:
    own_value = (("changelog", json.dumps(expect, sort_keys=True)),) if expect else ()
    return Case(name="c", covers="x", tags=(), request="Write the changelog for 2.1: add x", context="",
                replies=replies, expect=Expect(own=own_value), path=CASE_FILE, line=1)


def evidence(work: Path, calls: tuple[dict[str, Any], ...], turns: tuple[float, ...]) -> Evidence:
    return Evidence(workspace=work, pptx=None, slides=0, has_plex=False, size=0, decks=(), calls=calls,
                    turns_started=turns)


def write_changelog(work: Path, entries: int) -> None:
    lines = "".join(f"- Entry {n}\n" for n in range(entries))
    (work / "CHANGELOG.md").write_text(f"# Changelog\n\n## [2.1]\n\n### Added\n{lines}", encoding="utf-8")


def test_a_changelog_written_by_hand_or_with_the_wrong_count_fails_in_the_rules_words(tmp_path: Path) -> None:
    rules = bench().changelog_rules
    plan, write = {"command": "plan", "at": 10.0, "exit_code": 0}, {"command": "write", "at": 30.0, "exit_code": 0}
    write_changelog(tmp_path, 2)
    assert list(rules(case_of(("yes",), entries=2), evidence(tmp_path, (plan, write), (5.0, 20.0)))) == []
    assert list(rules(case_of(("yes",), entries=3), evidence(tmp_path, (plan, write), (5.0, 20.0)))) == [
        Failure("asked for 3 entries, CHANGELOG.md has 2", (1,))]
    by_hand = list(rules(case_of(("yes",)), evidence(tmp_path, (plan,), (5.0, 20.0))))
    assert by_hand == ["CHANGELOG.md was not written by `changelog.py write`: its entries are not the approved "
                       "plan's"]


def test_a_write_is_placed_in_its_turn_by_time_and_unknown_turn_times_are_noted(tmp_path: Path) -> None:
    rules = bench().changelog_rules
    plan, write = {"command": "plan", "at": 10.0, "exit_code": 0}, {"command": "write", "at": 12.0, "exit_code": 0}
    write_changelog(tmp_path, 1)
    [early] = rules(case_of(("drop x", "yes")), evidence(tmp_path, (plan, {"command": "revise", "at": 25.0},
                                                                    write), (5.0, 20.0, 40.0)))
    # Its own turn is the opening's (written at 12, reply 1 was sent at 20): the revise came later, so only
    # the write is blamed.
    assert isinstance(early, Failure) and early.calls == (2,)
    assert "written before the user approved" in early.words and "after the opening request" in early.words
    assert list(rules(case_of(("yes",)), evidence(tmp_path, (plan, write), ()))) == [
        Note("the turns' times were not recorded: whether CHANGELOG.md was written before the approval was not "
             "judged")]
    [gate] = rules(case_of(("not now",)), evidence(tmp_path, (plan, write), (5.0, 20.0)))
    assert gate == Failure("CHANGELOG.md was written although the user never approved — the approval gate was "
                           "skipped", (1,))
    (tmp_path / "CHANGELOG.md").unlink()
    [tried] = rules(case_of(("not now",)), evidence(tmp_path, (plan, dict(write, exit_code=1)), (5.0, 20.0)))
    assert isinstance(tried, Failure) and tried.words.startswith("`changelog.py write` was run") and tried.calls == (1,)
    assert list(rules(case_of(("not now",)), evidence(tmp_path, (plan,), (5.0, 20.0)))) == []


@pytest.mark.parametrize(("value", "words"), [
    ([3], "give a mapping of entries, revise, written"),
    ({"entries": 0}, "entries must be a whole number of 1 or more, not 0"),
    ({"entries": True}, "entries must be a whole number of 1 or more, not True"),
    ({"written": "no"}, "written must be true or false, not 'no'"),
    ({"entries": 2, "written": False}, "not with written: false"),
])
def test_the_projects_check_refuses_a_wrong_expect_in_one_line(value: object, words: str) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        bench().check_expect(value)
