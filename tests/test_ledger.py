"""The ledger: validation, atomic appends from many processes, torn lines, shards, the columnar table."""

from __future__ import annotations

import json
import warnings
from array import array
from pathlib import Path
from typing import Any

import pytest
from ledger_records import in_parallel, is_valid, record

from pytest_palette import ledger
from pytest_palette.ledger import LedgerError, LedgerWarning, Table, append, load_table, read_records, validate
from pytest_palette.report import build_report, to_json


def test_a_valid_record_validates() -> None:
    validate(record())
    validate(record(tokens={"input": 5, "output": 0}, cost_usd=0, seconds=None, slides=None, polls=None))


@pytest.mark.parametrize(("change", "message"), [
    ({"run_index": True}, "run_index: expected an integer, got true or false"),
    ({"run_index": 0}, "run_index: expected 1 to"),
    ({"seconds": "12"}, "seconds: expected a number or null, got a string"),
    ({"has_plex": 1}, "has_plex: expected true or false, got an integer"),
    ({"outcome": "passed"}, "outcome: unknown outcome 'passed'"),
    ({"schema": 2}, "schema: expected 1, got 2"),
    ({"failures": ["ok", 3]}, "failures[1]: expected a string"),
    ({"calls": "plan"}, "calls: expected a list"),
    ({"tokens": {"input": 1}}, "tokens: expected exactly the keys input and output"),
    ({"tokens": {"input": 1, "output": -2}}, "tokens.output: expected an integer from 0 to"),
    ({"tokens": {"input": 2**63, "output": 2}}, "tokens.input: expected an integer from 0 to 9223372036854775807"),
    ({"scaffold": {"recursion_limit": 80}}, "scaffold.recursion_limit: expected a string"),
    ({"case": ""}, "case: empty string"),
])
def test_validate_names_the_field_and_the_problem(change: dict[str, Any], message: str) -> None:
    with pytest.raises(LedgerError, match=f"^{_escape(message)}"):
        validate(record(**change))


def _escape(text: str) -> str:
    import re

    return re.escape(text)


def test_validate_reports_missing_and_unknown_keys_and_non_objects() -> None:
    missing = record()
    del missing["fingerprint"]
    with pytest.raises(LedgerError, match=r"^fingerprint: missing$"):
        validate(missing)
    with pytest.raises(LedgerError, match=r"^verdict: unknown key"):
        validate({**record(), "verdict": "pass"})
    with pytest.raises(LedgerError, match=r"^record: expected a JSON object, got a list"):
        validate([1, 2])


MUTATIONS: list[dict[str, Any]] = [
    {}, {"run_index": True}, {"run_index": 0}, {"run_index": 2**31}, {"seconds": "1"}, {"seconds": 3},
    {"seconds": None}, {"has_plex": 0}, {"outcome": "PASS"}, {"outcome": "error"}, {"schema": 2},
    {"schema": True}, {"failures": [None]}, {"failures": [["x"]]}, {"failures": [{"a": 1}]}, {"calls": ["a", 1]},
    {"tags": [1]}, {"tags": [["x"]]}, {"tokens": {"input": 1, "output": 2}}, {"tokens": {"input": 1}},
    {"tokens": {"input": True, "output": 2}}, {"tokens": {"input": 1, "output": 2, "x": 3}},
    {"tokens": {"input": 2**63 - 1, "output": 2}}, {"tokens": {"input": 2**63, "output": 2}},
    {"scaffold": {"a": 1}}, {"scaffold": {"a": ["b"]}}, {"run_id": ""}, {"host": ""}, {"case": ""},
    {"cost_usd": False}, {"started_at": None}, {"slides": 3.0}, {"polls": None}, {"model": None},
]


@pytest.mark.parametrize("change", MUTATIONS, ids=[json.dumps(m) for m in MUTATIONS])
def test_the_readers_fast_path_agrees_with_validate(change: dict[str, Any]) -> None:
    candidate = record(**change)
    valid = is_valid(candidate)
    table = Table()
    assert table.sink()(candidate) is valid
    assert len(table) == int(valid)  # a refused record leaves nothing behind


def test_the_fast_path_refuses_reordered_keys_which_the_slow_path_accepts(tmp_path: Path) -> None:
    shuffled = dict(reversed(list(record().items())))
    assert Table().sink()(shuffled) is False
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(shuffled) + "\n")
    [read] = read_records(path)
    assert list(read) == list(ledger.FIELD_NAMES) and read == record()
    assert len(load_table(path)) == 1


def test_append_writes_one_compact_line_in_schema_order_and_creates_folders(tmp_path: Path) -> None:
    path = tmp_path / "run" / "nested" / "results.jsonl"
    append(path, dict(reversed(list(record(failures=["ünïcode — fine"]).items()))))
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n") and text.count("\n") == 1
    assert text.startswith('{"schema":1,"run_id":') and ", " not in text and "ünïcode" in text
    assert list(read_records(path)) == [record(failures=["ünïcode — fine"])]


def test_append_refuses_an_invalid_record_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    with pytest.raises(LedgerError, match="outcome"):
        append(path, record(outcome="maybe"))
    with pytest.raises(LedgerError, match="record: Out of range float values"):
        append(path, record(seconds=float("nan")))
    assert not path.exists()


def _append_many(path: str, worker: int, count: int) -> None:
    for i in range(count):
        # Long failure text makes each line ~10 KB: several pages, more than a pipe's atomic size.
        append(path, record(run_id=f"w{worker}", run_index=i + 1, failures=[f"{worker}:{i}:" + "x" * 10_000],
                            outcome="fail"))


def test_concurrent_appends_from_several_processes_leave_only_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    in_parallel(_append_many, path, workers=4, count=150)
    lines = path.read_bytes().split(b"\n")
    assert lines.pop() == b""
    assert len(lines) == 600
    seen = set()
    for line in lines:
        parsed = json.loads(line)  # every line whole: no interleaving, no tearing
        validate(parsed)
        seen.add((parsed["run_id"], parsed["run_index"]))
    assert len(seen) == 600


def test_a_torn_last_line_is_ignored_with_a_warning_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    append(path, record(run_index=1))
    append(path, record(run_index=2))
    with path.open("a") as handle:
        handle.write('{"schema":1,"run_id":"20261130-1')  # kill -9 mid-write
    with pytest.warns(LedgerWarning, match=rf"{path}:3: torn last line"):
        records = list(read_records(path))
    assert [r["run_index"] for r in records] == [1, 2]
    with pytest.warns(LedgerWarning, match="torn last line"):
        assert len(load_table(path)) == 2


def test_an_append_after_a_torn_line_starts_a_fresh_line(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    append(path, record(run_index=1))
    with path.open("a") as handle:
        handle.write('{"schema":1,"case":"thr')
    append(path, record(run_index=2))  # resume after the crash
    with pytest.warns(LedgerWarning, match=rf"{path}:2: not JSON"):
        records = list(read_records(path))
    assert [r["run_index"] for r in records] == [1, 2]


def test_a_record_glued_to_a_torn_fragment_is_salvaged(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    line = ledger.serialise(record(run_index=7)).decode()
    path.write_text('{"schema":1,"case":"tor' + line)  # an old writer that did not start a fresh line
    with pytest.warns(LedgerWarning, match=":1: a torn fragment was glued"):
        [salvaged] = read_records(path)
    assert salvaged["run_index"] == 7


def test_a_whole_last_record_without_newline_is_kept_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(ledger.serialise(record()).decode().rstrip("\n"))
    with pytest.warns(LedgerWarning, match="no newline"):
        assert len(list(read_records(path))) == 1


def test_bad_lines_in_the_middle_are_skipped_with_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    good = ledger.serialise(record()).decode()
    bad_record = json.dumps(record(outcome="unknown"))
    path.write_text(good + "not json at all\n" + "\n" + bad_record + "\n" + good)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records = list(read_records(path))
    assert len(records) == 2
    messages = [str(w.message) for w in caught if issubclass(w.category, LedgerWarning)]
    assert messages == [f"{path}:2: not JSON (a torn write?): skipped",
                        f"{path}:4: invalid record: outcome: unknown outcome 'unknown' "
                        "(expected one of pass, fail, error, skipped)"]


def test_warnings_are_capped_per_file_and_the_rest_counted(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text("garbage\n" * 30 + ledger.serialise(record()).decode())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = load_table(path)
    assert len(table) == 1 and len(table.problems) == 30
    messages = [str(w.message) for w in caught]
    assert len(messages) == ledger.WARNINGS_PER_FILE + 1
    assert messages[-1] == f"{path}: 10 more bad line(s) skipped"


def test_every_ledger_under_a_folder_is_read_so_shards_merge(tmp_path: Path) -> None:
    append(tmp_path / "shard-1" / "run" / "results.jsonl", record(run_index=1))
    append(tmp_path / "shard-2" / "run" / "results.jsonl", record(run_index=2))
    append(tmp_path / ".hidden" / "results.jsonl", record(run_index=3))
    (tmp_path / "shard-2" / "run" / "other.jsonl").write_text("not a ledger\n")
    assert sorted(r["run_index"] for r in read_records(tmp_path)) == [1, 2]
    assert [p.parent.parent.name for p in ledger.ledger_files(tmp_path)] == ["shard-1", "shard-2"]


def test_the_last_duplicate_survives(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    append(path, record(outcome="error", failures=["HostError: boom"]))
    append(path, record(run_index=2))
    append(path, record(outcome="pass"))  # the resumed re-run of run 1
    table = load_table(path)
    rows, dropped = table.survivors()
    assert (rows, dropped) == ([1, 2], 1)


def _write_spread(folder: Path, count: int) -> None:
    """`count` records over two files, with a bad line and a duplicate in the second half."""
    hosts = ["react", "claude"]
    for i in range(count):
        target = folder / ("a" if i < count // 2 else "b") / "results.jsonl"
        append(target, record(case=f"case_{i % 7}", host=hosts[i % 2], run_index=i // 14 + 1,
                              outcome=["pass", "fail", "error"][i % 3], seconds=float(i % 13),
                              started_at=1000.0 + i, ended_at=1010.0 + i, polls=i % 14,
                              fingerprint=f"fp-{hosts[i % 2]}"))
    with (folder / "b" / "results.jsonl").open("a") as handle:
        handle.write("garbage\n")
    append(folder / "b" / "results.jsonl", record(case="case_0", host="react", run_index=1,
                                                   fingerprint="fp-react"))


def test_a_parallel_read_equals_a_one_process_read_and_an_indexed_one(tmp_path: Path) -> None:
    _write_spread(tmp_path, 3000)
    with pytest.warns(LedgerWarning, match=r"b/results.jsonl:1501: not JSON"):
        indexed = load_table(tmp_path, workers=3)
    for folder in ("a", "b"):  # without their indexes, the ledgers are parsed (by forked readers if asked)
        ledger.ledger_index.paths(tmp_path / folder / "results.jsonl")[0].unlink()
    with pytest.warns(LedgerWarning, match=r"b/results.jsonl:1501: not JSON"):
        one = load_table(tmp_path, workers=1)
    with pytest.warns(LedgerWarning, match=r"b/results.jsonl:1501: not JSON"):
        three = load_table(tmp_path, workers=3)
    assert len(one) == len(three) == len(indexed) == 3001
    assert one.survivors()[1] == three.survivors()[1] == indexed.survivors()[1] == 1
    assert to_json(build_report(one)) == to_json(build_report(three)) == to_json(build_report(indexed))


def test_split_covers_every_byte_once_in_order() -> None:
    parts = ledger._split([("a", 10), ("b", 5), ("c", 0), ("d", 7)], 3)
    assert len(parts) == 3
    flat = [unit for part in parts for unit in part]
    assert [u for u in flat if u[0] == "a"] == [("a", 0, 8), ("a", 8, 10)]
    assert sum(end - start for _, start, end in flat) == 22


def test_a_file_cut_into_two_ranges_at_any_byte_reads_every_line_exactly_once(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    for index in range(1, 6):
        append(path, record(run_index=index, failures=["y" * index * 7]))
    size = path.stat().st_size
    for cut in range(size + 1):
        table = ledger._load_ranges([(str(path), 0, cut), (str(path), cut, size)])
        assert list(table.columns["run_index"]) == [1, 2, 3, 4, 5], f"cut at byte {cut}"
        assert not table.problems


def test_colliding_key_hashes_fall_back_to_the_exact_check(tmp_path: Path) -> None:
    table = Table()
    table.add_records([record(run_index=1), record(run_index=2), record(run_index=1, outcome="fail")])
    assert table.survivors() == ([1, 2], 1)
    table.columns["key"] = array("q", [7, 7, 7])  # every hash colliding: the exact check still decides
    assert table.survivors() == ([1, 2], 1)
    unique = Table()
    unique.add_records([record(run_index=1), record(run_index=2)])
    unique.columns["key"] = array("q", [7, 7])  # a collision that is no duplicate
    assert unique.survivors() == (None, 0)
