"""Repeats, the ledger the plugin writes, sharding, resume after kill -9, `show` and `rejudge`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_palette import rejudge as rejudge_module
from pytest_palette.cli import main as palette_bench
from pytest_palette.judge import Verdict
from pytest_palette.ledger import read_records

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


@pytest.fixture
def cases(pytester: pytest.Pytester) -> Path:
    pytester.mkdir("cases")
    path = pytester.path / "cases" / "c.yaml"
    path.write_text(CASES)
    return path


def only_run(pytester: pytest.Pytester) -> Path:
    [run] = (pytester.path / "runs").iterdir()
    return run


def test_repeats_run_each_item_in_its_own_workspace_and_leave_one_record_each(pytester: pytest.Pytester,
                                                                              cases: Path) -> None:
    result = pytester.runpytest("--palette-runs", "2", "-p", "no:cacheprovider", "-k", "three or held")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["three_slides*2/2*3sl*", "held_off*2/2*"])
    run = only_run(pytester)
    records = list(read_records(run))
    assert sorted((r["case"], r["run_index"]) for r in records) == [
        ("held_off", 1), ("held_off", 2), ("three_slides", 1), ("three_slides", 2)]
    assert {(run / "react" / f"three_slides-{k}" / "output" / "three_slides.pptx").is_file() for k in (1, 2)} == {True}
    record = next(r for r in records if r["case"] == "three_slides")
    assert record["outcome"] == "pass" and record["slides"] == 3 and record["has_plex"] and record["deck"]
    assert record["calls"] == ["find", "plan", "find", "start", "status"] and record["polls"] == 1
    assert record["model"] == "rehearsal" and record["run_id"] == run.name and record["turns"] == 2
    assert record["ended_at"] >= record["started_at"] and len(record["fingerprint"]) == 16


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
    before = list(read_records(ledger))
    assert 2 <= len(before) < 6, "the run should have been killed halfway"
    with ledger.open("a") as handle:  # a write cut short by the kill
        handle.write('{"schema": 1, "case": "five_sl')
    resumed = pytester.runpytest("--palette-resume", str(runs / "killed"), "-p", "no:cacheprovider",
                                 "--palette-runs", "2")
    resumed.assert_outcomes(passed=6 - len(before))
    with pytest.warns(UserWarning):
        after = list(read_records(ledger))
    keys = [(r["case"], r["run_index"]) for r in after]
    assert len(keys) == len(set(keys)) == 6
    assert {r["outcome"] for r in after} == {"pass"}


def test_resume_refuses_a_different_configuration(pytester: pytest.Pytester, cases: Path) -> None:
    pytester.runpytest("--palette-run-id", "first", "-k", "held_off", "-p", "no:cacheprovider").assert_outcomes(
        passed=1)
    refused = pytester.runpytest("--palette-resume", "runs/first", "--palette-recursion-limit", "50")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*written under another configuration*"])


def test_show_and_rejudge_read_a_saved_run(pytester: pytest.Pytester, cases: Path,
                                          capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=3)
    run = only_run(pytester)

    assert palette_bench(["show", str(run), "--case", "five_slides", "--verbose"]) == 0
    shown = capsys.readouterr().out
    assert "── PASS  five_slides[react]" in shown and "covers: a change goes through edit" in shown
    assert "edit" in shown and "'instruction': 'make it 5 slides'" in shown
    assert "user ▸ make it 5 slides" in shown and "agent ◂ Here is the plan" in shown

    assert palette_bench(["rejudge", str(run)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "3 verdict(s) re-judged · 0 changed"

    # A deliberate judge change: from now on every deck must have 4 slides.
    real = rejudge_module.judge

    def stricter(case, evidence, host):  # type: ignore[no-untyped-def]
        verdict: Verdict = real(case, evidence, host)
        if evidence.pptx is not None and evidence.slides != 4:
            return Verdict(verdict.case, host, (*verdict.failures, "four slides or nothing"), verdict.slides,
                           verdict.polls, verdict.commands)
        return verdict

    monkeypatch.setattr(rejudge_module, "judge", stricter)
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


def test_two_shards_reported_together_equal_the_unsharded_run(pytester: pytest.Pytester, cases: Path) -> None:
    from pytest_palette.report import build_report, load, to_json, to_markdown

    common = ["-p", "no:cacheprovider", "--palette-runs", "2", "--palette-run-id", "same", "-k", "three or held"]
    pytester.runpytest(*common, "--palette-run-dir", "whole").assert_outcomes(passed=4)
    pytester.runpytest(*common, "--palette-run-dir", "shard1", "--palette-shard", "1/2").assert_outcomes(passed=2)
    pytester.runpytest(*common, "--palette-run-dir", "shard2", "--palette-shard", "2/2").assert_outcomes(passed=2)
    shards = pytester.mkdir("shards")
    for name in ("shard1", "shard2"):
        (pytester.path / name).rename(shards / name)
    whole = build_report(load(pytester.path / "whole"))
    merged = build_report(load(shards))
    assert comparable(to_json(merged)) == comparable(to_json(whole))
    assert to_json(merged)["records"] == 4
    def tables(report_text: str) -> list[str]:  # how many ledger files were read is the one honest difference
        return [line for line in report_text.split("## Metrics")[0].splitlines() if "ledger file" not in line]

    assert tables(to_markdown(merged)) == tables(to_markdown(whole))
