"""The ledger's index: reading through it gives exactly the table that parsing the ledger gives, whatever
happened to the ledger (crashes, hand edits, truncation, concurrent writers) — and when it cannot vouch for
the ledger, it says so and the ledger is parsed instead."""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest
from ledger_records import in_parallel, record
from test_ledger_grammar import _rows

from pytest_palette import ledger, ledger_index
from pytest_palette.ledger import Table, append, load_table
from pytest_palette.report import build_report, to_json


def _varied(i: int, **overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "run_index": i, "case": f"case_{i % 4}", "host": ["react", "cuga"][i % 2], "seconds": i / 3,
        "outcome": ["pass", "fail", "error"][i % 3], "failures": [f"rule {i % 5}"] if i % 3 else [],
        "tokens": {"input": i, "output": 2 * i} if i % 2 else None}
    return record(**{**fields, **overrides})


def _write(path: Path, count: int, start: int = 1) -> None:
    for i in range(start, start + count):
        append(path, _varied(i))


def _read_both(path: Path) -> tuple[Table, Table, list[str], list[str]]:
    """(through the index, without it, the warnings of each)."""
    index = ledger_index.paths(path)[0]
    with warnings.catch_warnings(record=True) as first:
        warnings.simplefilter("always")
        indexed = load_table(path)
    aside = index.with_name("aside")
    if index.exists():
        index.rename(aside)
    try:
        with warnings.catch_warnings(record=True) as second:
            warnings.simplefilter("always")
            parsed = load_table(path)
    finally:
        if aside.exists():
            aside.rename(index)
    return indexed, parsed, [str(w.message) for w in first], [str(w.message) for w in second]


def _same(path: Path) -> tuple[Table, list[str]]:
    """Assert the indexed read equals the parsed one (rows, report and warnings); return it and its warnings."""
    indexed, parsed, warned_indexed, warned_parsed = _read_both(path)
    assert _rows(indexed) == _rows(parsed)
    assert to_json(build_report(indexed)) == to_json(build_report(parsed))
    stale = [w for w in warned_indexed if "reading the ledger itself" in w]
    assert [w for w in warned_indexed if w not in stale] == warned_parsed
    return indexed, warned_indexed


def _uses_index(path: Path) -> bool:
    return ledger_index.read(path, path.stat().st_size) is not None


def test_append_writes_an_index_that_reads_exactly_like_the_ledger(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    _write(path, 60)
    index, spans = ledger_index.paths(path)
    assert index.stat().st_size == ledger_index.ROW_SIZE * 61  # the header and one row a record
    spans_lines = spans.read_bytes().splitlines()
    assert len(spans_lines) == len(set(spans_lines))  # each distinct span once
    assert _uses_index(path)
    table, warned = _same(path)
    assert len(table) == 60 and warned == []


def test_a_record_whose_row_was_never_written_is_read_from_the_ledger_in_place(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    _write(path, 5)
    with path.open("ab") as handle:  # killed after its line, before its row
        handle.write(ledger.serialise(_varied(6)))
    _write(path, 4, start=7)
    indexed = ledger_index.read(path, path.stat().st_size)
    assert indexed is not None and [kind for kind, _, _ in indexed.pieces] == ["rows", "gap", "rows"]
    table, warned = _same(path)
    assert list(table.columns["run_index"]) == list(range(1, 11)) and warned == []


def test_records_appended_by_hand_after_the_last_row_are_read_too(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    _write(path, 3)
    with path.open("ab") as handle:
        handle.write(ledger.serialise(_varied(4)) + ledger.serialise(_varied(5)))
    table, _ = _same(path)
    assert list(table.columns["run_index"]) == [1, 2, 3, 4, 5]


def test_a_torn_line_then_appends_warns_as_the_parsed_ledger_does(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    _write(path, 3)
    with path.open("ab") as handle:
        handle.write(ledger.serialise(_varied(4))[:50])  # kill -9 mid-line
    _write(path, 3, start=5)
    table, warned = _same(path)
    assert list(table.columns["run_index"]) == [1, 2, 3, 5, 6, 7]
    assert len(warned) == 1 and f"{path}:4: not JSON" in warned[0]


@pytest.mark.parametrize("where", ["first line", "middle line"])
def test_a_ledger_edited_by_hand_is_parsed_with_a_warning(tmp_path: Path, where: str) -> None:
    path = tmp_path / "results.jsonl"
    _write(path, 6)
    data = path.read_bytes()
    at = data.index(b'"seconds":') + 10 if where == "first line" else data.rindex(b'"rule ') + 6
    path.write_bytes(data[:at] + (b"9" if data[at:at + 1] != b"9" else b"8") + data[at + 1:])  # same length
    table, warned = _same(path)
    assert len(table) == 6
    assert any("has changed since it was indexed" in w and "reading the ledger itself" in w for w in warned)


def test_a_truncated_ledger_reads_only_what_is_left(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    _write(path, 8)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:5]))  # the last three records removed by hand
    assert _uses_index(path)
    table, warned = _same(path)
    assert list(table.columns["run_index"]) == [1, 2, 3, 4, 5] and warned == []


def test_appends_after_a_truncation_are_not_indexed_and_the_stale_index_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    _write(path, 8)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:2]))
    rows_before = ledger_index.paths(path)[0].stat().st_size
    _write(path, 6, start=20)  # the index still claims bytes the ledger now holds differently
    assert ledger_index.paths(path)[0].stat().st_size == rows_before
    table, warned = _same(path)
    assert list(table.columns["run_index"]) == [1, 2, *range(20, 26)]
    assert any("has changed since it was indexed" in w for w in warned)


def test_a_damaged_index_is_refused_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    _write(path, 5)
    index = ledger_index.paths(path)[0]
    data = bytearray(index.read_bytes())
    data[ledger_index.ROW_SIZE * 2 + 8 * ledger_index.SECONDS] ^= 0x40  # a bit of row 2's seconds
    index.write_bytes(bytes(data))
    with pytest.raises(ledger_index.Stale, match="is damaged"):
        ledger_index.read(path, path.stat().st_size)
    table, warned = _same(path)
    assert len(table) == 5 and any("results.jsonl.index is damaged" in w for w in warned)


def test_an_index_without_its_spans_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    _write(path, 4)
    ledger_index.paths(path)[1].unlink()
    with pytest.raises(ledger_index.Stale, match="lacks spans"):
        ledger_index.read(path, path.stat().st_size)
    assert len(_same(path)[0]) == 4


def test_a_foreign_index_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    _write(path, 2)
    ledger_index.paths(path)[0].write_bytes(b"something else entirely\n")
    with pytest.raises(ledger_index.Stale, match="not an index this version reads"):
        ledger_index.read(path, path.stat().st_size)
    _write(path, 1, start=3)  # the writer leaves a foreign file alone
    assert ledger_index.paths(path)[0].read_bytes() == b"something else entirely\n"
    assert len(_same(path)[0]) == 3


def test_rows_written_after_the_ledger_was_measured_are_left_out(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    _write(path, 3)
    size = path.stat().st_size
    _write(path, 2, start=4)  # a writer still running while report reads
    indexed = ledger_index.read(path, size)
    assert indexed is not None and len(indexed.slots[ledger_index.OFFSET]) == 3
    assert indexed.pieces == [("rows", 0, 3)]


def test_a_line_the_grammar_does_not_read_gets_no_row_and_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    _write(path, 2)
    append(path, _varied(3, tokens={"input": 10**18 + 5, "output": 1}))  # 19 digits: beyond the pattern
    _write(path, 2, start=4)
    assert ledger_index.paths(path)[0].stat().st_size == ledger_index.ROW_SIZE * 5
    table, _ = _same(path)
    assert list(table.columns["tokens_in"])[2] == 10**18 + 5


def test_a_torn_spans_line_is_skipped_and_later_spans_still_count(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    _write(path, 2)
    spans = ledger_index.paths(path)[1]
    with spans.open("ab") as handle:
        handle.write(b"0123456789abcdef {\"outc")  # a writer killed mid-span
    ledger_index._known.clear()  # a new process: knows nothing yet
    append(path, _varied(3, failures=["a failure never seen before"], outcome="fail"))
    assert b'\n0123456789abcdef {"outc\n' in spans.read_bytes()
    assert _uses_index(path)
    assert len(_same(path)[0]) == 3


def _append_varied(path: str, worker: int, count: int) -> None:
    for i in range(count):
        append(path, _varied(worker * 1000 + i + 1, failures=[f"w{worker} rule {i % 7}"], outcome="fail"))


def test_concurrent_writers_keep_the_index_in_step_with_the_ledger(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    in_parallel(_append_varied, path, workers=4, count=80)
    indexed = ledger_index.read(path, path.stat().st_size)
    assert indexed is not None and indexed.pieces == [("rows", 0, 320)]  # every line has its row, in order
    table, warned = _same(path)
    assert len(table) == 320 and warned == []


def test_shards_with_and_without_an_index_read_together_like_parsed_ones(tmp_path: Path) -> None:
    _write(tmp_path / "a" / "results.jsonl", 5)
    _write(tmp_path / "b" / "results.jsonl", 5, start=6)
    os.remove(ledger_index.paths(tmp_path / "b" / "results.jsonl")[0])
    shutil.copytree(tmp_path / "a", tmp_path / "plain")
    os.remove(ledger_index.paths(tmp_path / "plain" / "results.jsonl")[0])
    both = load_table(tmp_path)
    assert len(both) == 15 and both.survivors()[1] == 5  # plain/ repeats a/'s records: last wins
    parsed = Table()
    for name in ("a", "b", "plain"):
        parsed.add_records(json.loads(line) for line in (tmp_path / name / "results.jsonl").read_text().splitlines())
    assert _rows(both) == _rows(parsed)
