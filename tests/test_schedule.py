"""The order items start in (run/schedule.py) and how xdist hands them out (run/dispatch.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ledger_records import as_record, record

from pytest_palette.cases import load_cases
from pytest_palette.results.ledger import append
from pytest_palette.run import schedule
from pytest_palette.run.dispatch import LongestFirst, is_palette_item
from pytest_palette.run.schedule import Expected

CASES = """
- name: short
  covers: one turn, no deck
  request: What is a slide deck?
  expect: {deck: false, skill: false}
- name: plain
  covers: a yes builds
  request: Build a 3-slide deck on owls
  replies: ["yes"]
  expect: {slides: 3}
- name: edited
  covers: a change, then a yes
  request: Build a 3-slide deck on tides
  replies: ["make it 4", "yes"]
  expect: {slides: 4, edit: true}
"""


def _ran(root: Path, run: str, **fields: object) -> None:
    append(root / run / "results.jsonl", as_record(record(run_id=run, **fields)))


def test_history_is_the_timed_runs_of_each_case_and_host_under_the_model_in_the_newest_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schedule, "HISTORY_RUNS", 2)
    _ran(tmp_path, "20260101-000000-0001", case="plain", seconds=99.0)  # older than the newest two: not read
    _ran(tmp_path, "20260102-000000-0001", case="plain", seconds=10.0)
    _ran(tmp_path, "20260102-000000-0001", case="plain", seconds=12.0, outcome="fail")
    _ran(tmp_path, "20260102-000000-0001", case="plain", seconds=1.0, outcome="error")  # may have ended anywhere
    _ran(tmp_path, "20260102-000000-0001", case="plain", seconds=50.0, model="claude-sonnet")  # another model
    _ran(tmp_path, "20260102-000000-0001", case="plain", seconds=30.0, host="cuga")
    _ran(tmp_path, "20260103-000000-0001", case="edited", seconds=40.0)
    _ran(tmp_path, "20260104-000000-0001", case="edited", seconds=77.0)  # the session's own run: skipped
    (tmp_path / "20260105-000000-0001").mkdir()  # a run with no ledger is not one of the newest two
    assert schedule.history(tmp_path, "rehearsal", skip="20260104-000000-0001") == {
        ("plain", "react", "rehearsal"): [10.0, 12.0], ("plain", "cuga", "rehearsal"): [30.0],
        ("edited", "react", "rehearsal"): [40.0]}


def test_history_never_follows_a_link_nor_reads_a_ledger_past_its_bound(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = tmp_path / "elsewhere"
    _ran(elsewhere, "20260101-000000-0001", case="plain", seconds=10.0)
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "20260101-000000-0001").symlink_to(elsewhere / "20260101-000000-0001")
    (runs / "20260102-000000-0001").mkdir()
    (runs / "20260102-000000-0001" / "results.jsonl").symlink_to(elsewhere / "20260101-000000-0001" / "results.jsonl")
    assert schedule.history(runs, "rehearsal") == {}
    _ran(runs, "20260103-000000-0001", case="plain", seconds=10.0)
    assert schedule.history(runs, "rehearsal") == {("plain", "react", "rehearsal"): [10.0]}
    monkeypatch.setattr(schedule, "LEDGER_BYTES", 10)
    assert schedule.history(runs, "rehearsal") == {}
    assert schedule.history(tmp_path / "nowhere", "rehearsal") == {}


def test_a_case_is_expected_from_its_history_else_from_its_shape(tmp_path: Path) -> None:
    (tmp_path / "cases.yaml").write_text(CASES)
    cases = {case.name: case for case in load_cases(tmp_path / "cases.yaml")}
    keys = [((name, "react", "rehearsal"), case) for name, case in cases.items()]
    # The shape alone: turns, a build, an edit.
    units = [schedule.units(case) for case in cases.values()]
    assert units == [1.0, 4.0, 6.0]
    assert schedule.expected(keys, {}) == [Expected(u, "units") for u in units]
    # With history, the cases without it are put in seconds by the median seconds per unit of those with it.
    past = {("plain", "react", "rehearsal"): [30.0, 10.0, 20.0]}
    assert schedule.expected(keys, past) == [Expected(5.0, "shape"), Expected(20.0, "history", 3),
                                             Expected(30.0, "shape")]
    said = schedule.said(["a", "b"], [Expected(20.0, "history", 3), Expected(5.0, "shape")])
    assert said == ["palette: 2 items start longest first (1 by history, 1 by shape):",
                    "    1. a  20 s (median of 3 runs)", "    2. b  5 s (its shape)"]


def test_the_longest_start_first_and_ties_keep_their_order() -> None:
    expect = [Expected(s, "units") for s in (2.0, 5.0, 2.0, 9.0, 5.0)]
    assert schedule.longest_first(expect) == [3, 1, 4, 0, 2]


class Node:
    """What xdist's scheduler asks of a worker: it is sent indices, and told to end."""

    def __init__(self, name: str) -> None:
        self.sent: list[int] = []
        self.shutting_down = False
        self.gateway = type("Gateway", (), {"id": name})()

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent += indices

    def shutdown(self) -> None:
        self.shutting_down = True


def _scheduler(pytester: pytest.Pytester, ours: bool, count: int) -> tuple[LongestFirst, Node, Node]:
    scheduler = LongestFirst(pytester.parseconfig("--tx", "2*popen"), None, lambda nodeid: ours)
    first, second = Node("gw0"), Node("gw1")
    for node in (first, second):
        scheduler.add_node(node)
        scheduler.add_node_collection(node, [f"cases.yaml::c{n}[react]" for n in range(count)])
    scheduler.schedule()
    return scheduler, first, second


def test_under_xdist_palette_items_go_round_the_workers_one_at_a_time(pytester: pytest.Pytester) -> None:
    scheduler, first, second = _scheduler(pytester, ours=True, count=7)
    # The two longest to different workers, then the next two: each holds the one it runs and the one after.
    assert (first.sent, second.sent) == ([0, 2], [1, 3])
    scheduler.mark_test_complete(second, 1)  # the first free worker takes the next
    assert (first.sent, second.sent) == ([0, 2], [1, 3, 4])
    scheduler.mark_test_complete(second, 3)
    scheduler.mark_test_complete(first, 0)
    assert (first.sent, second.sent) == ([0, 2, 6], [1, 3, 4, 5])
    assert first.shutting_down and second.shutting_down  # none left: each ends after what it holds


def test_under_xdist_a_session_without_palette_items_keeps_xdists_batches(pytester: pytest.Pytester) -> None:
    _, first, second = _scheduler(pytester, ours=False, count=40)
    # xdist's load: consecutive batches, a module's tests together.
    assert first.sent == list(range(len(first.sent))) and len(first.sent) > 2
    assert second.sent[0] == len(first.sent)


def test_the_controller_knows_palette_items_by_their_ids(tmp_path: Path) -> None:
    (tmp_path / "family").mkdir()
    hosts = ("react", "cuga")
    assert is_palette_item("cases/a.yaml::plain[react]", tmp_path, hosts)
    assert is_palette_item("cases/a.yml::plain[cuga-3]", tmp_path, hosts)
    assert is_palette_item("family::task_one[react]", tmp_path, hosts)
    assert not is_palette_item("tests/test_x.py::test_y[react]", tmp_path, hosts)
    assert not is_palette_item("cases/a.yaml::plain[claude]", tmp_path, hosts)
    assert not is_palette_item("cases/a.yaml::plain", tmp_path, hosts)
