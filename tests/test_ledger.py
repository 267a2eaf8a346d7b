"""The ledger: atomic appends from many processes, torn lines, bad lines, runs and their ledgers, latest wins."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import msgspec
import pytest
from ledger_records import as_record, in_parallel, is_valid, record

from pytest_palette.results import ledger
from pytest_palette.results.ledger import LedgerWarning, append, find, latest, load, read
from pytest_palette.results.record import RecordError, from_json


def line(fields: dict[str, Any]) -> str:
    """A record as the current version writes it."""
    return as_record(fields).to_json().decode() + "\n"


def test_append_writes_one_compact_line_in_schema_order_and_creates_folders(tmp_path: Path) -> None:
    path = tmp_path / "run" / "nested" / "results.jsonl"
    append(path, as_record(record(failures=["ünïcode — fine"], outcome="fail")))
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n") and text.count("\n") == 1
    assert text.startswith('{"schema":2,"run_id":') and ", " not in text and "ünïcode" in text
    assert list(read(path)) == [as_record(record(failures=["ünïcode — fine"], outcome="fail"))]


def test_append_refuses_a_record_that_would_not_read_back_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    good = as_record(record())
    for bad in (msgspec.structs.replace(good.usage, seconds=float("nan")),
                msgspec.structs.replace(good.usage, seconds=float("inf")),
                msgspec.structs.replace(good.usage, seconds=-1.0)):
        with pytest.raises(RecordError, match=r"^(record|usage\.seconds): "):
            append(path, msgspec.structs.replace(good, usage=bad))
    with pytest.raises(RecordError, match="run_index"):
        append(path, msgspec.structs.replace(good, run_index=0))
    assert not path.exists()


def _append_many(path: str, worker: int, count: int) -> None:
    for i in range(count):
        # Long failure text makes each line ~10 KB: several pages, more than a pipe's atomic size.
        append(path, as_record(record(run_id=f"w{worker}", run_index=i + 1, outcome="fail",
                                      failures=[f"{worker}:{i}:" + "x" * 10_000])))


def test_concurrent_appends_from_several_processes_leave_only_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    in_parallel(_append_many, path, workers=4, count=150)
    lines = path.read_bytes().split(b"\n")
    assert lines.pop() == b""
    assert len(lines) == 600
    seen = set()
    for text in lines:
        parsed = from_json(text)  # every line whole: no interleaving, no tearing
        seen.add((parsed.run_id, parsed.run_index))
    assert len(seen) == 600


def test_a_torn_last_line_is_ignored_with_a_warning_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    append(path, as_record(record(run_index=1)))
    append(path, as_record(record(run_index=2)))
    with path.open("a") as handle:
        handle.write('{"schema":2,"run_id":"20261130-1')  # kill -9 mid-write
    with pytest.warns(LedgerWarning, match=rf"{path}:3: torn last line"):
        records = list(load(path).latest.values())
    assert [r.run_index for r in records] == [1, 2]


def test_an_append_after_a_torn_line_starts_a_fresh_line(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    append(path, as_record(record(run_index=1)))
    with path.open("a") as handle:
        handle.write('{"schema":2,"case":"thr')
    append(path, as_record(record(run_index=2)))  # resume after the crash
    with pytest.warns(LedgerWarning, match=rf"{path}:2: not JSON"):
        records = list(load(path).latest.values())
    assert [r.run_index for r in records] == [1, 2]


def test_a_record_glued_to_a_torn_fragment_is_salvaged(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text('{"schema":2,"case":"tor' + line(record(run_index=7)))  # an old writer: no fresh line
    with pytest.warns(LedgerWarning, match=":1: a torn fragment was glued"):
        [salvaged] = load(path).latest.values()
    assert salvaged.run_index == 7


def test_a_whole_last_record_without_newline_is_kept_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(line(record()).rstrip("\n"))
    with pytest.warns(LedgerWarning, match="no newline"):
        reading = load(path)
    assert len(reading.latest) == 1 and reading.skipped == 0


def test_bad_lines_in_the_middle_are_skipped_with_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    good = line(record())
    bad_record = json.dumps(record(outcome="unknown"))
    path.write_text(good + "not json at all\n" + "\n" + bad_record + "\n" + line(record(run_index=2)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reading = load(path)
    assert len(reading.latest) == 2 and reading.skipped == 2
    messages = [str(w.message) for w in caught if issubclass(w.category, LedgerWarning)]
    assert messages == [f"{path}:2: not JSON (a torn write?): skipped",
                        f"{path}:4: invalid record: outcome: unknown outcome 'unknown' "
                        "(expected one of pass, fail, error, skipped)"]


def test_warnings_are_capped_per_file_and_the_rest_counted(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text("garbage\n" * 30 + line(record()))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reading = load(path)
    assert len(reading.latest) == 1 and reading.skipped == 30
    messages = [str(w.message) for w in caught]
    assert len(messages) == ledger.WARNINGS_PER_FILE + 1
    assert messages[-1] == f"{path}: 10 more bad line(s) skipped"


def test_lines_across_block_boundaries_are_read_once_each_in_order(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "results.jsonl"
    for index in range(1, 9):
        append(path, as_record(record(run_index=index, outcome="fail", failures=["y" * index * 37])))
    with path.open("a") as handle:
        handle.write("garbage\n")
    append(path, as_record(record(run_index=9)))
    size = path.stat().st_size
    expected = list(range(1, 10))
    for block in (1, 7, 100, 333, 1000, size):  # blocks smaller than a line, cutting lines anywhere
        monkeypatch.setattr(ledger, "_BLOCK", block)
        with pytest.warns(LedgerWarning, match=rf"{path}:9: not JSON"):
            assert [r.run_index for r in read_all(path)] == expected, f"block of {block} bytes"


def read_all(path: Path) -> list[Any]:
    problems: list[tuple[int, str]] = []
    found = list(read(path, problems))
    for number, message in problems:
        warnings.warn(f"{path}:{number}: {message}", LedgerWarning, stacklevel=2)
    return found


MUTATIONS: list[dict[str, Any]] = [
    {}, {"run_index": True}, {"run_index": 0}, {"run_index": 2**31}, {"seconds": "1"}, {"seconds": 3},
    {"seconds": None}, {"seconds": -1.5}, {"has_plex": 0}, {"outcome": "PASS"}, {"outcome": "error"},
    {"schema": 3}, {"schema": True}, {"failures": [None]}, {"failures": [["x"]]}, {"failures": [{"a": 1}]},
    {"calls": ["a", 1]}, {"tags": [1]}, {"tags": [["x"]]}, {"tokens": {"input": 1, "output": 2}},
    {"tokens": {"input": 1}}, {"tokens": {"input": True, "output": 2}}, {"tokens": {"input": 1, "output": 2, "x": 3}},
    {"tokens": {"input": 2**63 - 1, "output": 2}}, {"tokens": {"input": 2**63, "output": 2}},
    {"scaffold": {"a": 1}}, {"scaffold": {"a": ["b"]}}, {"run_id": ""}, {"host": ""}, {"case": ""},
    {"cost_usd": False}, {"cost_usd": -0.5}, {"started_at": None}, {"slides": 3.0}, {"polls": None},
    {"model": None},
]


@pytest.mark.parametrize("change", MUTATIONS, ids=[json.dumps(m) for m in MUTATIONS])
def test_every_read_path_agrees_on_what_a_record_is(tmp_path: Path, change: dict[str, Any]) -> None:
    """A line alone, a block of lines, and a block with a bad neighbour: one answer, one message."""
    candidate = record(**change)
    valid = is_valid(candidate)
    text = json.dumps(candidate, separators=(",", ":"))
    path = tmp_path / "results.jsonl"
    path.write_text("\n".join([text] * 3) + "\n")  # a block of such lines: the block path
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reading = load(path)
    assert (len(reading.latest), reading.skipped) == ((1, 0) if valid else (0, 3))
    mixed = tmp_path / "mixed" / "results.jsonl"
    mixed.parent.mkdir()
    mixed.write_text(text + "\nnot json\n")  # a block with a bad line: read line by line
    with warnings.catch_warnings(record=True) as line_by_line:
        warnings.simplefilter("always")
        assert len(load(mixed).latest) == int(valid)
    if not valid:
        with pytest.raises(RecordError) as refused:
            as_record(candidate)
        said = {str(w.message).split(": invalid record: ")[-1] for w in caught + line_by_line
                if "invalid record" in str(w.message)}
        assert said == {str(refused.value)}


@pytest.mark.parametrize(("change", "message"), [
    ({"run_index": True}, "run_index: expected int, got bool"),
    ({"run_index": 0}, "run_index: expected int >= 1"),
    ({"seconds": "12"}, "seconds: expected float | null, got str"),
    ({"seconds": -1}, "seconds: expected float >= 0.0"),
    ({"has_plex": 1}, "has_plex: expected bool, got int"),
    ({"outcome": "passed"}, "outcome: unknown outcome 'passed' (expected one of pass, fail, error, skipped)"),
    ({"schema": 3}, "schema: invalid value 3 (a schema this version does not read: expected 1 or 2)"),
    ({"failures": ["ok", 3]}, "failures[1]: expected str, got int"),
    ({"calls": "plan"}, "calls: expected array, got str"),
    ({"tokens": {"input": 1}}, "tokens.output: missing"),
    ({"tokens": {"input": 1, "output": -2}}, "tokens.output: expected int >= 0"),
    ({"tokens": {"input": 2**63, "output": 2}}, "tokens.input: expected int <= 9223372036854775807"),
    ({"scaffold": {"recursion_limit": 80}}, "scaffold[...]: expected str, got int"),
    ({"case": ""}, "case: expected str of length >= 1"),
])
def test_a_refused_record_names_the_field_and_the_problem(change: dict[str, Any], message: str) -> None:
    with pytest.raises(RecordError) as refused:
        as_record(record(**change))
    assert str(refused.value) == message


def test_missing_and_unknown_keys_and_non_objects_are_named() -> None:
    missing = record()
    del missing["fingerprint"]
    with pytest.raises(RecordError, match=r"^fingerprint: missing$"):
        as_record(missing)
    with pytest.raises(RecordError, match=r"^verdict: unknown key"):
        as_record({**record(), "verdict": "pass"})
    with pytest.raises(RecordError, match=r"^record: expected object, got array"):
        from_json(b"[1, 2]")


def test_a_run_is_a_folder_with_a_ledger_at_its_top_and_shards_merge(tmp_path: Path) -> None:
    append(tmp_path / "shard-1" / "run" / "results.jsonl", as_record(record(run_index=1)))
    append(tmp_path / "shard-2" / "run" / "results.jsonl", as_record(record(run_index=2)))
    append(tmp_path / "shard-2" / "run" / "results.shard-2-of-3.jsonl", as_record(record(run_index=3)))
    append(tmp_path / ".hidden" / "results.jsonl", as_record(record(run_index=4)))
    (tmp_path / "shard-2" / "run" / "other.jsonl").write_text("not a ledger\n")
    assert sorted(r.run_index for r in load(tmp_path).latest.values()) == [1, 2, 3]
    assert [p.relative_to(tmp_path).as_posix() for p in find(tmp_path).ledgers] == [
        "shard-1/run/results.jsonl", "shard-2/run/results.jsonl", "shard-2/run/results.shard-2-of-3.jsonl"]


def test_a_ledger_inside_a_run_is_never_read_and_is_named_as_ignored(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "r1"
    append(run / "results.jsonl", as_record(record()))
    forged = run / "react" / "three_slides" / "work" / "results.jsonl"
    append(forged, as_record(record(case="invented")))
    with pytest.warns(LedgerWarning, match=rf"{forged}: ignored — not a ledger of the run {run}"):
        reading = load(tmp_path / "runs")
    assert [r.case for r in reading.latest.values()] == ["three_slides"]
    assert reading.files == [str(run / "results.jsonl")]


def test_a_run_is_marked_before_its_first_conversation_so_an_agent_cannot_start_one(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "killed"
    ledger.open_run(run / "results.jsonl")  # the first item's setup, before its agent starts
    append(run / "react" / "three_slides" / "work" / "results.jsonl", as_record(record(case="invented")))
    with pytest.warns(LedgerWarning, match="ignored"):
        reading = load(tmp_path / "runs")
    assert reading.latest == {} and reading.files == [str(run / "results.jsonl")]
    ledger.open_run(run / "results.jsonl")  # again, as every item does: nothing is lost
    append(run / "results.jsonl", as_record(record()))
    ledger.open_run(run / "results.jsonl")
    assert len(list(read(run / "results.jsonl"))) == 1


def test_the_latest_record_of_an_item_wins(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    append(path, as_record(record(outcome="error", failures=["HostError: boom"])))
    append(path, as_record(record(run_index=2)))
    append(path, as_record(record(outcome="fail", failures=["late"])))  # the resumed re-run of run 1
    reading = load(path)
    assert reading.records == 3 and reading.superseded == 1
    assert [r.outcome for r in reading.latest.values()] == ["fail", "pass"]


def test_across_shard_ledgers_the_record_that_ended_last_wins(tmp_path: Path) -> None:
    # A shard's errored item, re-run by a resume that writes the run's own ledger (read first, by name).
    append(tmp_path / "results.shard-1-of-2.jsonl",
           as_record(record(outcome="error", failures=["boom"], started_at=100.0, ended_at=110.0)))
    append(tmp_path / "results.jsonl", as_record(record(started_at=200.0, ended_at=250.0)))
    [winner] = load(tmp_path).latest.values()
    assert winner.outcome == "pass"
    assert [r.outcome for r in latest([as_record(record(ended_at=5.0)),
                                       as_record(record(outcome="fail", failures=["x"], ended_at=4.0))]
                                      ).latest.values()] == ["pass"]


def test_equal_parts_of_records_are_shared_not_copied(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    for index in range(1, 4):
        append(path, as_record(record(run_index=index)))
    first, second, third = load(path).latest.values()
    assert first.terms is second.terms is third.terms and first.judged is third.judged
