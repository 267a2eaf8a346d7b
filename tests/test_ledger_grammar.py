"""The ledger's fast path (ledger_grammar): it never accepts a line the slow path would refuse, and every line
it accepts becomes exactly the row the slow path (json + Table.sink) would make of it."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from ledger_records import is_valid, record
from test_ledger import MUTATIONS

from pytest_palette import ledger
from pytest_palette import ledger_grammar as grammar
from pytest_palette.ledger import LedgerWarning, Table, load_table, validate

#: Valid records the writer can produce that stress the pattern: escapes, raw non-ASCII, nulls, exponents,
#: integers in number fields, empty lists and objects, the largest run index.
TRICKY: list[dict[str, Any]] = [
    record(),
    record(failures=['asked for "5" slides', "back\\slash", "new\nline", "tab\there", "\u2028 and \x01"]),
    record(case="café — ünïcode ✓", host="ho\"st", run_id="r\\1", calls=[], tags=[], scaffold={}),
    record(seconds=None, cost_usd=None, tokens=None, slides=None, polls=None, turns=None),
    record(seconds=3, cost_usd=0, started_at=17, ended_at=20, tokens={"input": 0, "output": 0}),
    record(seconds=1e-05, cost_usd=1.5e-07, started_at=1.7645e9, ended_at=1.7646e9, slides=-1, polls=0),
    record(tokens={"input": 123456789012, "output": 9}, cost_usd=0.123456),
    record(run_index=2**31 - 1),
    record(run_index=999_999_999),
    record(outcome="error", failures=["HostError: exited 137"], deck=False, has_plex=False, calls=[]),
    record(outcome="skipped", scaffold={"a": "1", "b": "two", "üñ": "\\"}),
    record(model="provider:model/with:colons", provider="", skill_hash="", case_hash="", plugin_version=""),
]


def _line(rec: dict[str, Any]) -> bytes:
    """The record as the writer would serialise it, without validating it first (the mutations are invalid)."""
    ordered = {name: rec[name] for name in ledger.FIELD_NAMES}
    return json.dumps(ordered, ensure_ascii=False, separators=(",", ":")).encode()


def _rows(table: Table) -> list[tuple[Any, ...]]:
    """Every row as decoded values (NaN as a string, so rows compare equal), whatever the interning order."""
    c = table.columns

    def num(value: float) -> Any:
        return "nan" if math.isnan(value) else value

    return [(table.runs.items[c["run"][i]], table.cases.items[c["case"][i]], table.hosts.items[c["host"][i]],
             c["run_index"][i], c["key"][i], table.shapes.items[c["shape"][i]], table.configs.items[c["config"][i]],
             table.case_hashes.items[c["case_hash"][i]], num(c["seconds"][i]), num(c["started"][i]),
             num(c["ended"][i]), num(c["cost"][i]), c["tokens_in"][i], c["tokens_out"][i])
            for i in range(len(table))]


def _by_grammar(lines: list[bytes]) -> Table:
    table = Table()
    rows = grammar.LINES.findall(b"".join(line + b"\n" for line in lines))
    assert len(rows) == len(lines), "every line should match the pattern"
    grammar.Reader(table).add(rows)
    return table


def _by_sink(records: list[dict[str, Any]]) -> Table:
    table = Table()
    table.add_records(json.loads(_line(r)) for r in records)
    return table


@pytest.mark.parametrize("rec", TRICKY, ids=range(len(TRICKY)))
def test_a_tricky_valid_record_matches_and_makes_the_sinks_row(rec: dict[str, Any]) -> None:
    validate(rec)
    line = _line(rec)
    assert grammar.LINE.fullmatch(line), line
    assert _rows(_by_grammar([line])) == _rows(_by_sink([rec]))


def test_many_records_in_one_block_make_the_same_rows_in_the_same_order() -> None:
    records = TRICKY * 3
    records = [{**r, "run_index": i + 1} for i, r in enumerate(records)]
    assert _rows(_by_grammar([_line(r) for r in records])) == _rows(_by_sink(records))


@pytest.mark.parametrize("change", MUTATIONS, ids=[json.dumps(m) for m in MUTATIONS])
def test_the_grammar_never_accepts_what_validate_refuses(change: dict[str, Any]) -> None:
    candidate = record(**change)
    valid = is_valid(candidate)
    line = _line(candidate)
    if grammar.LINE.fullmatch(line) is None:
        return  # the slow path reads it (and says what is wrong when it is invalid)
    table = Table()
    try:
        grammar.Reader(table).add([grammar.LINE.fullmatch(line).groups(b"")])  # type: ignore[union-attr]
        accepted = True
    except grammar.NotFast:
        accepted = False
    assert not accepted or valid, f"the fast path took an invalid record: {change}"
    if accepted:
        assert _rows(table) == _rows(_by_sink([candidate]))


@pytest.mark.parametrize("line", [
    b'{"schema":1,"run_id":"r"}',  # too short
    _line(record()).replace(b'"slides":3', b'"slides":03'),  # a leading zero is not JSON
    _line(record()).replace(b'"seconds":10.0', b'"seconds":NaN'),
    _line(record()).replace(b'"seconds":10.0', b'"seconds":1_0'),  # float() would take it; JSON does not
    _line(record()).replace(b'"core"', b'"co\\xre"'),  # not a JSON escape
    _line(record()).replace(b'"core"', b'"co\x01re"'),  # a raw control character
    _line(record()) + b" ",
])
def test_lines_that_are_not_the_writers_exact_json_do_not_match(line: bytes) -> None:
    assert grammar.LINE.fullmatch(line) is None


def test_bad_utf8_inside_a_string_matches_but_is_left_to_the_slow_path() -> None:
    line = _line(record()).replace(b'"three_slides"', b'"three\xff_slides"')
    match = grammar.LINE.fullmatch(line)
    assert match is not None
    with pytest.raises(grammar.NotFast):
        grammar.Reader(Table()).add([match.groups(b"")])


def test_odd_lines_amid_matching_ones_are_read_in_file_order_with_warnings(tmp_path: Path) -> None:
    records = [record(run_index=i) for i in range(1, 7)]
    lines = [_line(r) for r in records]
    lines[2] = json.dumps(json.loads(lines[2])).encode()  # valid, but spaced: only the slow path reads it
    lines.insert(4, b"")  # a blank line: harmless, skipped without a word
    lines.insert(5, lines[5][:40])  # a torn fragment: skipped with a warning
    lines[6] = lines[6].replace(b'"three_slides"', b'"three\xff_slides"')  # run 5: not UTF-8, skipped
    path = tmp_path / "results.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.warns(LedgerWarning) as caught:
        table = load_table(path)
    assert [str(w.message).split(": ", 1)[1] for w in caught] == [
        "not JSON (a torn write?): skipped", "not JSON (a torn write?): skipped"]
    assert [str(w.message).split(":")[1] for w in caught] == ["6", "7"]
    assert list(table.columns["run_index"]) == [1, 2, 3, 4, 6]
    assert _rows(table) == _rows(_by_sink([r for r in records if r["run_index"] != 5]))


def test_a_big_ledger_read_through_the_grammar_equals_the_slow_read(tmp_path: Path) -> None:
    records = [{**TRICKY[i % 7], "run_index": i + 1, "seconds": i / 7} for i in range(3000)]
    path = tmp_path / "results.jsonl"
    path.write_bytes(b"".join(_line(r) + b"\n" for r in records))
    assert _rows(load_table(path, workers=1)) == _rows(_by_sink(records))


def test_a_run_index_beyond_what_a_record_may_hold_is_left_to_the_slow_path() -> None:
    for index in (2**31, 9_999_999_999):  # ten digits the pattern takes, beyond what a record may hold
        match = grammar.LINE.fullmatch(_line(record(run_index=index)))
        assert match is not None
        with pytest.raises(grammar.NotFast):
            grammar.Reader(Table()).add([match.groups(b"")])
