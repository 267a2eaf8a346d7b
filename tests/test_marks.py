"""The outcome vocabulary and the one cell formatter: every place that prints a case × host cell says the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ledger_records import record, records

from pytest_palette.results import step_summary
from pytest_palette.results.markdown import to_markdown
from pytest_palette.results.marks import LOOKS, MARK, cell_outcome, cell_text
from pytest_palette.results.model import build_report
from pytest_palette.results.table import render, session_matrix_of
from pytest_palette.results.tally import tally
from pytest_palette.site import matrix

ERROR: dict[str, Any] = {"outcome": "error", "failures": ["HostError: timed out"], "slides": None, "polls": None}
SKIP: dict[str, Any] = {"outcome": "skipped", "failures": ["budget exhausted"]}
FAIL: dict[str, Any] = {"outcome": "fail", "failures": ["asked for 3 slides, got 2"]}
#: Each case's runs (their outcomes), and the cell the formatter makes of them, and its outcome.
CELLS: dict[str, tuple[list[dict[str, Any]], str, str]] = {
    "passed": ([{}], "pass", "pass"),
    "failed": ([FAIL], "FAIL", "fail"),
    "errored": ([ERROR], "ERROR ×1", "error"),
    "skipped": ([SKIP], "skip", "skipped"),
    "all_passed": ([{}, {}], "2/2", "pass"),
    "some_passed": ([{}, FAIL, ERROR], "1/2 +1E", "mixed"),
    "errors_only": ([ERROR, ERROR, SKIP], "ERROR ×2", "error"),
    "pass_and_skip": ([{}, SKIP], "1/1", "pass"),
}


def test_every_surface_prints_a_cell_with_the_one_formatter() -> None:
    shown = records(record(case=case, run_index=i, **fields) for case, (runs, _, _) in CELLS.items()
                    for i, fields in enumerate(runs, 1))
    counted = tally(shown)
    table = render(session_matrix_of(shown, ["react"]))
    summary = step_summary.markdown(shown, ["react"])
    markdown = to_markdown(build_report(shown))
    [row_of] = [{row.case: row.cells[0] for row in matrix.build([matrix.run_view(Path("run"), shown)], {}).rows}]
    for case, (_, text, outcome) in CELLS.items():
        [cell] = [c for (name, _, _), c in counted.cells.items() if name == case]
        assert (cell_text(cell), cell_outcome(cell)) == (text, outcome), case
        assert any(line.startswith(f"{case} ") and f" {text} " in line for line in table), (case, table)
        assert f"| {case} | {text} |" in summary
        # The Markdown report: the count after the outcome's emoji; its errors in words, after the details.
        head = " ".join(filter(None, (LOOKS[outcome].emoji, text.split(" +")[0])))
        assert f"| {case} | {head}" in markdown, case
        assert (row_of[case].text, row_of[case].outcome, row_of[case].look.css) == (text, outcome, f"o-{outcome}")
    assert cell_text(None) == "—" and cell_outcome(None) == "none"


def test_a_runs_mark_and_the_filters_words_come_from_one_table() -> None:
    assert MARK == {"pass": "pass", "fail": "FAIL", "error": "ERROR", "skipped": "skip"}
    assert [(look.outcome, look.word) for look in LOOKS.values()][:5] == [
        ("pass", "pass"), ("fail", "FAIL"), ("mixed", "some passed"), ("error", "ERROR"), ("skipped", "skip")]
