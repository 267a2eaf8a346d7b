"""`--palette-skill none`: the same cases with no skill on any host (the baseline), what the agent did instead,
and the skill's lift over it in `report` and `compare`. The hosts' own end-to-end baselines are in
test_cuga_host.py and test_claude_host.py (they need those clients); the whole suite's is in
test_benchmark_suite.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from ledger_records import record, records

from pytest_palette.arena.sandbox import problem as sandbox_problem
from pytest_palette.arena.workspace import Workspace
from pytest_palette.backend import agent_environment
from pytest_palette.commands import main as palette_bench
from pytest_palette.hosts.base import HandedOver, HostSettings
from pytest_palette.hosts.manual import RUN_SHEET, ManualHost
from pytest_palette.hosts.react import ReactHost
from pytest_palette.judge.evidence import BUILD_STATE, deck_by, inspect_deck, read_folder
from pytest_palette.layer.route import route_of
from pytest_palette.models import parse_model
from pytest_palette.rehearsal import outline
from pytest_palette.results import stats
from pytest_palette.results.compare import compare, to_markdown
from pytest_palette.results.ledger import append, load
from pytest_palette.results.lift import NOT_RECORDED, instead
from pytest_palette.results.markdown import to_markdown as report_markdown
from pytest_palette.results.model import ReportError, build_report
from pytest_palette.results.record import NO_SKILL, Judged, from_json
from pytest_palette.results.report_json import to_json
from pytest_palette.results.tally import tally
from pytest_palette.run.conversation import open_sandbox

SANDBOX = "none" if sandbox_problem("bubblewrap") else "bubblewrap"

CASES = """
- name: three_slides
  covers: a plain yes builds what was asked
  request: Build a 3-slide deck on prompt caching
  replies: ["yes"]
  expect: {slides: 3}
- name: held_off
  covers: no deck without approval
  request: Build a 3-slide deck on tides
  replies: ["actually, hold off for now"]
  expect: {deck: false}
"""


# -- the option --------------------------------------------------------------------------------------


def test_none_is_the_baseline_and_a_folder_that_is_not_a_skill_still_names_the_flag(
        pytester: pytest.Pytester, cases: Path) -> None:
    listing = pytester.runpytest("--co", "--palette-skill", "none", "-p", "no:cacheprovider")
    listing.stdout.fnmatch_lines(["palette: skill: none (baseline): no skill is installed on any host*",
                                  "*react: *skill_loading none (--palette-skill none: no skill installed)*"])
    missing = pytester.runpytest("--palette-skill", "nonesuch", "-p", "no:cacheprovider")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines(["*--palette-skill */nonesuch: no SKILL.md there (or 'none' for no skill)*"])
    eager = pytester.runpytest("--palette-skill", "none", "--palette-eager", "-p", "no:cacheprovider")
    assert eager.ret == pytest.ExitCode.USAGE_ERROR
    eager.stderr.fnmatch_lines(["*--palette-eager inlines the skill, and --palette-skill none has none*"])
    assert not (pytester.path / "runs").exists()


@pytest.mark.end_to_end
def test_the_check_still_checks_the_hosts_and_asks_no_backend_for_no_skill(pytester: pytest.Pytester,
                                                                            cases: Path) -> None:
    checked = pytester.runpytest_subprocess("--palette-skill", "none", "--palette-check", "-p", "no:cacheprovider",
                                            f"--palette-sandbox={SANDBOX}")
    assert checked.ret == 0, checked.stdout.str()
    checked.stdout.fnmatch_lines(["palette check: model rehearsal* · skill: none (baseline)",
                                  "backend: *: ready (not asked: no skill is installed, so nothing calls Palette)",
                                  "react: ready"])


@pytest.mark.end_to_end
def test_a_baseline_run_records_terms_no_skill_run_can_be_taken_for(pytester: pytest.Pytester, cases: Path) -> None:
    # PYTHONPATH too: a checkout run from its own folder (a worktree) has deck.py start this package's engine.
    common = ("-p", "no:cacheprovider", f"--palette-sandbox={SANDBOX}", "--palette-sandbox-env=PYTHONPATH")
    without = pytester.runpytest("--palette-skill", "none", "--palette-run-id", "without", *common)
    without.assert_outcomes(passed=1, failed=1)
    without.stdout.fnmatch_lines(["react: 1 passed, 1 failed, 0 errored * · skill: none (baseline)*"])
    with_skill = pytester.runpytest("-k", "held_off", "--palette-run-id", "with", *common)
    with_skill.assert_outcomes(passed=1)
    baseline = {r.case: r for r in load(pytester.path / "runs" / "without").latest.values()}
    skilled = next(iter(load(pytester.path / "runs" / "with").latest.values()))
    terms = baseline["held_off"].terms
    assert terms.skill_hash == NO_SKILL and terms.baseline and not skilled.terms.baseline
    assert terms.fingerprint != skilled.terms.fingerprint
    assert dict(terms.scaffold)["skill_loading"].startswith("none")
    # What the agent did instead, from disk: a deck of its own where the user approved, none where they did not.
    facts = {case: r.judged for case, r in baseline.items()}
    assert facts["three_slides"] is not None and facts["three_slides"].deck_by == "agent"
    assert facts["held_off"] is not None and facts["held_off"].deck_by == "none"
    assert skilled.judged is not None and skilled.judged.deck_by == "none"
    work = pytester.path / "runs" / "without" / "react" / "three_slides" / "work"
    assert (work / "deck.pptx").is_file() and not any((work / name).exists() for name in ("skills", ".claude"))
    assert "the .pptx does not carry IBM Plex" in baseline["three_slides"].failures[0]


# -- the hosts install and offer nothing ----------------------------------------------------------------


def _workspace(tmp_path: Path) -> tuple[Workspace, Any]:
    workspace = Workspace(tmp_path, PurePosixPath("item"))
    workspace.work.mkdir(parents=True)
    sandbox = open_sandbox(workspace, HostSettings(sandbox=SANDBOX))
    sandbox.prepare()
    return workspace, sandbox


def test_react_with_no_skill_offers_no_loader_and_no_catalogue_and_writes_its_own_deck(tmp_path: Path) -> None:
    workspace, sandbox = _workspace(tmp_path)
    session = ReactHost().open(workspace, None, agent_environment(workspace.trace), route_of(parse_model("rehearsal")),
                               HostSettings(sandbox=SANDBOX), sandbox)
    try:
        assert [tool.name for tool in session.tools] == ["bash"] and session.cards == []
        outlined = session.send("Build a 2-slide deck on tides", timeout=120).answer
        done = session.send("yes", timeout=120).answer
    finally:
        session.close()
        sandbox.close()
    assert "## Tides" in outlined and done.startswith("Your deck is ready: ") and "(2 slides)" in done
    assert not (workspace.work / "skills").exists()
    on_disk = read_folder(workspace.work, workspace.trace, 0)
    assert on_disk.pptx is not None and str(on_disk.pptx) in done and on_disk.slides == 2 and not on_disk.has_plex
    assert on_disk.calls == () and deck_by(on_disk) == "agent"


def test_the_manual_host_installs_nothing_and_tells_the_person(tmp_path: Path) -> None:
    workspace, sandbox = _workspace(tmp_path)
    with pytest.raises(HandedOver):
        ManualHost().open(workspace, None, {}, route_of(parse_model("rehearsal")), HostSettings(), sandbox)
    sandbox.close()
    assert not (workspace.work / ".claude").exists()
    assert "no skill (baseline): nothing was installed here" in (workspace.host_folder / RUN_SHEET).read_text()


# -- what it did instead, from disk ----------------------------------------------------------------------


def test_the_deck_it_writes_itself_is_a_real_pptx_that_a_build_did_not_make(tmp_path: Path) -> None:
    drafted = outline.drafted("Build a 4-slide deck on our on-call rotation")
    done = subprocess.run(["bash", "-c", outline.write_command(drafted)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={"PALETTE_PYTHON": sys.executable, "PATH": "/usr/bin:/bin"})
    assert outline.written(done.stdout) == str(tmp_path / "deck.pptx"), done.stderr
    facts = inspect_deck(tmp_path / "deck.pptx")
    assert facts.slides == 4 and not facts.has_plex and facts.size >= 20_000  # what the judge reads as a deck
    assert deck_by(read_folder(tmp_path, tmp_path / "trace.jsonl", 0)) == "agent"
    (tmp_path / BUILD_STATE).write_text("{}")  # the same deck where the skill's script started a build
    assert deck_by(read_folder(tmp_path, tmp_path / "trace.jsonl", 0)) == "palette"
    (tmp_path / "deck.pptx").unlink()
    assert deck_by(read_folder(tmp_path, tmp_path / "trace.jsonl", 0)) == "none"


def test_ledger_lines_written_before_deck_by_still_read(tmp_path: Path) -> None:
    [upgraded] = records([record(skill_hash=NO_SKILL)])  # the first format
    line = json.loads(upgraded.to_json())
    assert line["judged"].pop("deck_by") is None  # written by this version, read by the one before
    older = from_json(json.dumps(line))  # a schema-2 line from before the field
    assert older == upgraded and older.judged is not None and older.judged.deck_by is None
    assert instead(tally([older]).cells.values()) == {NOT_RECORDED: 1}
    assert "deck_by" in Judged.__struct_fields__


# -- the lift in report and compare -------------------------------------------------------------------------

CASE_NAMES = ("alpha", "beta", "gamma", "delta")


def run(skill: str, fails: set[str], run_id: str) -> list[dict[str, Any]]:
    """A run's lines, one per case (in the first format: upgraded as they are read, deck_by not said)."""
    return [record(case=case, skill_hash=skill, fingerprint=f"fp-{skill}", run_id=run_id,
                   outcome="fail" if case in fails else "pass",
                   failures=["the .pptx does not carry IBM Plex — it was not rendered by Palette"] if case in fails
                   else []) for case in CASE_NAMES]


def with_deck_by(items: list[dict[str, Any]], made: dict[str, str]) -> list[Any]:
    """The records as this version writes them: each says who made its deck."""
    out = []
    for item in records(items):
        line = json.loads(item.to_json())
        line["judged"]["deck_by"] = made[item.case]
        out.append(from_json(json.dumps(line)))
    return out


SKILLED = run("aaaaaaaaaaaa", {"gamma"}, "with")
BASELINE = run(NO_SKILL, {"alpha", "beta", "gamma"}, "without")


def test_report_of_a_run_with_the_skill_beside_one_without_shows_the_lift_and_the_paired_test() -> None:
    made = {"alpha": "agent", "beta": "agent", "gamma": "agent", "delta": "none"}
    report = build_report(records(SKILLED) + with_deck_by(BASELINE, made))
    [lift] = report.lifts
    # Skill: 3 of 4; none: 1 of 4 (delta); alpha and beta separate them, gamma and delta tie.
    assert (lift.with_skill, lift.without, lift.test.b, lift.test.c, lift.test.ties) == ((3, 4), (1, 4), 2, 0, 2)
    assert lift.lift == pytest.approx(0.5) and lift.test.p == stats.sign_test_p(2, 0)
    assert [c.label for c in report.columns] == ["react [with skill]", "react [no skill]"]
    text = report_markdown(report)
    assert "## Is the skill better than no skill?" in text
    assert "| react | 3/4 (75%) | 1/4 (25%) | +50 pp | 4 | 2 | 0 | 2 | 0.5 | not distinguishable from noise |" in text
    assert "## What the agent did instead (no skill)" in text and "| react [no skill] | 0 | 3 | 1 |" in text
    assert "| delta | no deck |" in text
    shown = to_json(report)
    assert shown["lift"][0]["lift"] == pytest.approx(0.5)
    assert [h["instead"] for h in shown["hosts"]] == [{}, {"wrote a deck itself": 3, "no deck": 1}]
    # The baseline alone: no lift to show, but what its agent did instead.
    alone = report_markdown(build_report(with_deck_by(BASELINE, made)))
    assert "no skill at all" not in alone and "| react | 0 | 3 | 1 |" in alone
    assert "| alpha | wrote a deck itself |" in alone


def test_a_report_still_refuses_two_skills_and_a_baseline_pooled() -> None:
    other = run("bbbbbbbbbbbb", set(), "other")
    with pytest.raises(ReportError, match="3 skill hashes"):
        build_report(records(SKILLED + BASELINE + other))


@pytest.mark.parametrize("baseline_first", [False, True])
def test_compare_recognises_the_baseline_on_either_side_and_titles_the_lift(baseline_first: bool) -> None:
    sides = (records(BASELINE), records(SKILLED)) if baseline_first else (records(SKILLED), records(BASELINE))
    comparison = compare(*sides)
    [lift] = comparison.lifts
    assert comparison.baseline == ("before" if baseline_first else "after")
    assert (lift.with_skill, lift.without, lift.test.b, lift.test.c) == ((3, 4), (1, 4), 2, 0)
    text = to_markdown(comparison)
    assert text.startswith("# Is the skill better than no skill? — the lift")
    assert "regression" not in text and "| alpha | react | 1/1 | 0/1 | **the skill helps** |" in text
    assert "The skill helps in 2 and hurts in 0 of 4 (case, host) cell(s)." in text


def test_the_report_command_takes_both_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name, items in (("with", SKILLED), ("without", BASELINE)):
        for item in records(items):
            append(tmp_path / name / "results.jsonl", item)
    assert palette_bench(["report", str(tmp_path / "with"), str(tmp_path / "without"),
                          "--json", str(tmp_path / "r.json")]) == 0
    assert "+50 pp" in capsys.readouterr().out
    assert json.loads((tmp_path / "r.json").read_text())["lift"][0]["shared"] == 4
