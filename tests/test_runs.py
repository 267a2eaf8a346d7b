"""Repeats, the ledger the plugin writes, sharding, resume after kill -9, `show` and `rejudge`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_palette.cases import Case
from pytest_palette.commands import main as palette_bench
from pytest_palette.judge import palette_rules
from pytest_palette.judge import verdict as judge_module
from pytest_palette.judge.evidence import Evidence
from pytest_palette.results.ledger import load
from pytest_palette.rules import Finding, SkillRules

CASES = """
- name: three_slides
  covers: a plain yes builds what was asked
  tags: [core]
  request: Build a 3-slide deck on prompt caching
  expect: {slides: 3}
- name: five_slides
  covers: a change goes through edit
  tags: [edit]
  request: Build a 3-slide deck on tides
  replies: ["make it 5 slides", "yes"]
  expect: {slides: 5}
- name: held_off
  covers: no deck without approval
  request: Build a 3-slide deck on kites
  replies: ["not now"]
  expect: {deck: false}
"""


def only_run(pytester: pytest.Pytester) -> Path:
    [run] = (pytester.path / "runs").iterdir()
    return run


@pytest.mark.end_to_end
def test_repeats_run_each_item_in_its_own_workspace_and_leave_one_record_each(pytester: pytest.Pytester,
                                                                              cases: Path) -> None:
    result = pytester.runpytest("--palette-runs", "2", "-p", "no:cacheprovider", "-k", "three or held")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["three_slides*2/2*3sl*", "held_off*2/2*"])
    run = only_run(pytester)
    records = list(load(run).latest.values())
    assert sorted((r.case, r.run_index) for r in records) == [
        ("held_off", 1), ("held_off", 2), ("three_slides", 1), ("three_slides", 2)]
    assert {(run / "react" / f"three_slides-{k}" / "output" / "three_slides.pptx").is_file() for k in (1, 2)} == {True}
    record = next(r for r in records if r.case == "three_slides")
    judged = record.judged
    assert judged is not None and record.workspace == f"react/three_slides-{record.run_index}"
    assert record.outcome == "pass" and judged.slides == 3 and judged.has_plex and judged.deck
    assert judged.calls == ("find", "plan", "find", "start", "status") and judged.polls == 1
    assert judged.max_polls == 12 and record.terms.model == "rehearsal" and record.run_id == run.name
    assert record.usage.turns == 2
    assert record.usage.ended_at >= record.usage.started_at and len(record.terms.fingerprint) == 16


def test_ids_name_the_repeat(pytester: pytest.Pytester, cases: Path) -> None:
    result = pytester.runpytest("--co", "-q", "--palette-runs", "3", "-k", "held_off")
    result.stdout.fnmatch_lines(["*held_off[[]react-1[]]", "*held_off[[]react-2[]]", "*held_off[[]react-3[]]"])


def test_shards_partition_the_items_exactly_and_spread_a_cases_runs(pytester: pytest.Pytester,
                                                                     cases: Path) -> None:
    def listed(*args: str) -> list[str]:
        out = pytester.runpytest("--co", "-q", "--palette-runs", "3", *args).stdout.lines
        return [line for line in out if "::" in line]

    everything = listed()
    first, second, third = (listed("--palette-shard", f"{i}/3") for i in (1, 2, 3))
    assert len(everything) == 9 and sorted(first + second + third) == sorted(everything)
    assert not set(first) & set(second) and {len(first), len(second), len(third)} == {3}
    for shard in (first, second, third):  # one case's three runs land in three different shards
        assert len({item.split("[")[0] for item in shard}) == 3


def test_a_bad_shard_is_a_usage_error(pytester: pytest.Pytester, cases: Path) -> None:
    for bad in ("3/2", "0/2", "one/two"):
        result = pytester.runpytest("--palette-shard", bad)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([f"*--palette-shard {bad!r}*"])


@pytest.mark.end_to_end
def test_resume_after_kill_9_ends_with_one_record_per_item(pytester: pytest.Pytester, cases: Path) -> None:
    runs = pytester.path / "runs"
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--palette-runs", "2",
         "--palette-run-id", "killed", "-p", "no:xdist"],
        cwd=pytester.path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    ledger = runs / "killed" / "results.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not ledger.exists() or len(ledger.read_text().splitlines()) < 2):
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    before = list(load(ledger).latest.values())
    assert 2 <= len(before) < 6, "the run should have been killed halfway"
    with ledger.open("a") as handle:  # a write cut short by the kill
        handle.write('{"schema": 1, "case": "five_sl')
    resumed = pytester.runpytest("--palette-resume", str(runs / "killed"), "-p", "no:cacheprovider",
                                 "--palette-runs", "2")
    resumed.assert_outcomes(passed=6 - len(before))
    with pytest.warns(UserWarning):
        after = list(load(ledger).latest.values())
    keys = [(r.case, r.run_index) for r in after]
    assert len(keys) == len(set(keys)) == 6
    assert {r.outcome for r in after} == {"pass"}


@pytest.mark.end_to_end
def test_an_existing_run_id_without_resume_is_refused_and_no_byte_of_it_changes(pytester: pytest.Pytester,
                                                                                  cases: Path) -> None:
    pytester.runpytest("--palette-run-id", "first", "-k", "held_off", "-p", "no:cacheprovider").assert_outcomes(
        passed=1)
    run = pytester.path / "runs" / "first"
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    again = pytester.runpytest("--palette-run-id", "first", "-p", "no:cacheprovider")
    assert again.ret == pytest.ExitCode.USAGE_ERROR
    again.stderr.fnmatch_lines(["*--palette-run-id first: */runs/first already holds a run; nothing in it was "
                                "touched. Continue it with --palette-resume */runs/first, or choose another*"])
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


@pytest.mark.end_to_end
def test_a_second_session_on_the_same_run_at_once_is_refused(pytester: pytest.Pytester, cases: Path) -> None:
    import fcntl

    pytester.runpytest("--palette-run-id", "busy", "-k", "held_off", "-p", "no:cacheprovider").assert_outcomes(
        passed=1)
    # Another session holds the run (here: this test, as a running `--palette-resume` would). The first session
    # let it go when it ended, or this would not return at once.
    with (pytester.path / "runs" / "busy" / ".results.jsonl.lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        refused = pytester.runpytest("--palette-resume", "runs/busy", "-p", "no:cacheprovider")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*another pytest session is writing this run's ledger (results.jsonl)*"])


@pytest.mark.end_to_end
def test_a_resumed_item_runs_in_a_new_folder_and_the_earlier_attempt_is_kept(pytester: pytest.Pytester,
                                                                            cases: Path) -> None:
    pytester.runpytest("--palette-run-id", "again", "-k", "held_off", "-p", "no:cacheprovider").assert_outcomes(
        passed=1)
    run = pytester.path / "runs" / "again"
    ledger = run / "results.jsonl"
    # Make the item look errored, so a resume runs it again. Same end time: of two records that ended at once
    # the one read last wins, and the resumed attempt ends later whatever the machine's speed.
    record = json.loads(ledger.read_text().splitlines()[0])
    record.update(outcome="error", judged=None, failures=["react: the host crashed"])
    with ledger.open("a") as handle:
        handle.write(json.dumps(record) + "\n")
    earlier = {p: p.read_bytes() for p in (run / "react" / "held_off").rglob("*") if p.is_file()}
    pytester.runpytest("--palette-resume", "runs/again", "-p", "no:cacheprovider", "-k", "held_off",
                       ).assert_outcomes(passed=1)
    assert {p: p.read_bytes() for p in (run / "react" / "held_off").rglob("*") if p.is_file()} == earlier
    latest = [r for r in load(run).latest.values() if r.case == "held_off"]
    assert [r.workspace for r in latest] == ["react/held_off~2"] and (run / "react" / "held_off~2").is_dir()


@pytest.mark.end_to_end
def test_resume_refuses_a_different_configuration(pytester: pytest.Pytester, cases: Path) -> None:
    pytester.runpytest("--palette-run-id", "first", "-k", "held_off", "-p", "no:cacheprovider").assert_outcomes(
        passed=1)
    refused = pytester.runpytest("--palette-resume", "runs/first", "--palette-recursion-limit", "50")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*written under another configuration*"])


@pytest.mark.end_to_end
def test_show_and_rejudge_read_a_saved_run(pytester: pytest.Pytester, cases: Path,
                                          capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=3)
    run = only_run(pytester)

    assert palette_bench(["show", str(run), "--case", "five_slides", "--verbose"]) == 0
    shown = capsys.readouterr().out
    assert "── pass  five_slides[react]" in shown and "covers: a change goes through edit" in shown
    assert "edit" in shown and "'instruction': 'make it 5 slides'" in shown
    assert "user ▸ make it 5 slides" in shown and "agent ◂ Here is the plan" in shown
    assert "no longer on disk" not in shown
    # Evidence removed after the run (by hand: a run never deletes it) is said to be gone, not shown as there.
    [deck] = run.glob("react/five_slides/output/five_slides.pptx")
    deck.unlink()
    assert palette_bench(["show", str(run), "--case", "five_slides"]) == 0
    assert "five_slides.pptx (no longer on disk: removed after the run)" in capsys.readouterr().out

    assert palette_bench(["rejudge", str(run)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "3 verdict(s) re-judged · 0 changed"

    # A deliberate judge change: from now on every deck must have 4 slides.
    def stricter(case: Case, evidence: Evidence) -> Iterator[Finding]:
        yield from palette_rules(case, evidence)
        if evidence.pptx is not None and evidence.slides != 4:
            yield "four slides or nothing"

    monkeypatch.setattr(judge_module, "PALETTE_RULES", SkillRules(judge=stricter))
    assert palette_bench(["rejudge", str(run)]) == 0
    out = capsys.readouterr().out
    assert "three_slides[react]: pass → fail" in out and "five_slides[react]: pass → fail" in out
    assert "held_off" not in out.split("verdict(s)")[0] and out.splitlines()[-1].endswith("2 changed")


def test_show_names_a_missing_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert palette_bench(["show", str(tmp_path)]) == 2
    assert "no results.jsonl" in capsys.readouterr().out


def comparable(report: dict[str, object]) -> dict[str, object]:
    """A report's numbers with what differs between any two executions (clock times, file paths) left out."""
    data = json.loads(json.dumps(report))
    data.pop("ledgers", None)
    for host in data["hosts"]:
        host["metrics"].pop("median_case_seconds")
        host["metrics"].pop("wall_clock_seconds")
    return data


@pytest.mark.end_to_end
def test_two_shards_reported_together_equal_the_unsharded_run(pytester: pytest.Pytester, cases: Path) -> None:
    from pytest_palette.results.markdown import to_markdown
    from pytest_palette.results.model import build_report
    from pytest_palette.results.report_json import to_json

    common = ["-p", "no:cacheprovider", "--palette-runs", "2", "--palette-run-id", "same", "-k", "three or held"]
    # Folder names of one length: the rehearsal model's token estimate reads the paths in its tool results.
    pytester.runpytest(*common, "--palette-run-dir", "entire").assert_outcomes(passed=4)
    pytester.runpytest(*common, "--palette-run-dir", "shard1", "--palette-shard", "1/2").assert_outcomes(passed=2)
    pytester.runpytest(*common, "--palette-run-dir", "shard2", "--palette-shard", "2/2").assert_outcomes(passed=2)
    shards = pytester.mkdir("shards")
    for name in ("shard1", "shard2"):
        (pytester.path / name).rename(shards / name)
    whole = build_report(load(pytester.path / "entire"))
    merged = build_report(load(shards))
    assert comparable(to_json(merged)) == comparable(to_json(whole))
    assert to_json(merged)["records"] == 4
    def tables(report_text: str) -> list[str]:  # how many ledger files were read is the one honest difference
        return [line for line in report_text.split("## Metrics")[0].splitlines() if "ledger file" not in line]

    assert tables(to_markdown(merged)) == tables(to_markdown(whole))


@pytest.mark.end_to_end
def test_a_ledger_forged_inside_a_workspace_changes_no_number(pytester: pytest.Pytester, cases: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=3)
    run = only_run(pytester)
    capsys.readouterr()

    def outputs() -> dict[str, tuple[str, str]]:
        seen = {}
        commands = {"report": ["report", str(run)], "show": ["show", str(run)], "rejudge": ["rejudge", str(run)],
                    "compare": ["compare", str(run), str(run)]}
        for name, argv in commands.items():
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                assert palette_bench(argv) == 0, name
            seen[name] = (capsys.readouterr().out, "\n".join(str(w.message) for w in caught))
        return seen

    before = outputs()
    # What an agent could leave in its own folder: seven records of passes, one of a case that never ran.
    forged = run / "react" / "three_slides" / "work" / "results.jsonl"
    honest = (run / "results.jsonl").read_text().splitlines()[0]
    lines = [honest.replace('"run_index":1', f'"run_index":{k}') for k in range(2, 8)]
    lines.append(honest.replace('"case":"three_slides"', '"case":"invented"'))
    forged.write_text("\n".join(lines) + "\n")
    after = outputs()
    for name in before:
        assert after[name][0] == before[name][0], name  # not one number moved
        assert f"{forged}: ignored — not a ledger of the run {run}" in after[name][1], name
    assert "invented" not in after["show"][0] and "3/3 passed" in after["show"][0]


POLLER = """
from pytest_palette.hosts.react import ReactHost, ReactSession
from pytest_palette.rehearsal.known_bad import Spins
from pytest_palette.rehearsal.langchain_model import RehearsalChatModel
from pytest_palette.rehearsal.policy import RehearsalPolicy


class FifteenPolls(Spins):
    # Fifteen zero-second polls, then the careful agent's own bound (at most 20 polls a turn).
    polls_per_build = 15

    def polls(self, steps):
        return RehearsalPolicy.polls(self, steps)


class Poller(ReactHost):
    name = "poller"

    def open(self, workspace, skill, env, route, settings, sandbox):
        return ReactSession(RehearsalChatModel(policy=FifteenPolls(), model_name="rehearsal"), [skill],
                            workspace.work, env)


def pytest_palette_add_hosts(hosts, config):
    hosts["poller"] = Poller()
"""


@pytest.mark.end_to_end
def test_a_case_with_its_own_poll_ceiling_is_judged_and_reported_against_it(pytester: pytest.Pytester) -> None:
    from pytest_palette.results.model import build_report

    pytester.makeconftest(POLLER)
    pytester.mkdir("cases")
    (pytester.path / "cases" / "c.yaml").write_text(
        "- name: patient\n  covers: a case that allows more polls\n  request: Build a 3-slide deck on tides\n"
        "  expect: {slides: 3, max_polls: 20}\n"
        "- name: strict\n  covers: the default ceiling\n  request: Build a 3-slide deck on kites\n"
        "  expect: {slides: 3}\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--host", "poller")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["palette case strict[[]poller[]] failed:",
                                 "*status polls did not wait for the work*each is a model round trip*",
                                 "patient*pass*", "strict*FAIL*"])
    reading = load(only_run(pytester))
    patient = next(r for r in reading.latest.values() if r.case == "patient")
    assert patient.judged is not None and patient.judged.max_polls == 20 and 15 <= (patient.judged.polls or 0) <= 20
    # Fifteen zero-second polls: each answers "still running" or repeats a build already collected, except the
    # one that collects it (if the build ended before them) — so 14 or 15 did not wait, on any machine.
    assert patient.judged.spins in (14, 15)
    [column] = build_report(reading).columns
    polls, ceiling = column.metrics.polls_worst, column.metrics.polls_worst_ceiling
    assert column.metrics.over_poll_ceiling == 1  # strict: over its 12
    assert (polls, ceiling) in {(14, 12), (15, 12)}  # the worst run is strict's, against 12
    within = build_report([patient]).columns[0].metrics
    assert (within.over_poll_ceiling, within.polls_worst_ceiling) == (0, 20)
