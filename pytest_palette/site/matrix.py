"""The matrix: cases × (run, host) columns, each cell the report's own count of its runs, with the items behind it.

Each run is reported on its own, as `palette-bench report` would report it: two runs side by side are two sets of
columns, never pooled into one.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from ..results.markdown import Table, score_text
from ..results.markdown import tables as report_tables
from ..results.marks import LOOKS, CellOutcome, Look, cell_outcome, cell_text
from ..results.model import Column, Report, build_report
from ..results.record import Record
from ..results.tally import Cell
from .item import Item


@dataclass
class RunView:
    folder: Path
    run_id: str
    report: Report
    records: list[Record]

    @cached_property
    def tables(self) -> dict[str, Table]:
        """The report's tables as `palette-bench report` prints them: the numbers the page shows are these texts."""
        return report_tables(self.report)


@dataclass
class MatrixColumn:
    key: str  # unique over the site: "<run>/<label>"
    run: RunView
    column: Column

    @property
    def title(self) -> str:
        return self.column.label

    @property
    def score_text(self) -> str:
        """The host's mean score over its cases with its 95% interval, as the report says it."""
        return score_text(self.column)

    @property
    def at_k(self) -> list[tuple[int, str, str]]:
        """(k, pass@k, score@k) as the report's pass@k table says them, for each k."""
        header, rows = self.run.tables["pass_k"]
        row = next((r for r in rows if r[0] == self.column.label), None)
        if row is None:
            return []
        shown = dict(zip(header, row, strict=True))
        return [(k, shown[f"pass@{k}"], shown[f"score@{k}"]) for k in self.run.report.ks]


@dataclass
class MatrixCell:
    column: MatrixColumn
    cell: Cell | None
    items: list[Item] = field(default_factory=list)
    thumb: str | None = None  # the site's path to a small image of the first slide of the cell's first deck

    @property
    def outcome(self) -> CellOutcome:
        """The cell's colour: pass (every judged run), fail (none), mixed, error (no verdict), skipped, none."""
        return cell_outcome(self.cell)

    @property
    def look(self) -> Look:
        return LOOKS[self.outcome]

    @property
    def link(self) -> Item | None:
        """The item the cell opens: its first failed run when one failed (the one to look at), else its first."""
        return next((i for i in self.items if i.outcome == "fail"), self.items[0] if self.items else None)

    @property
    def text(self) -> str:
        return cell_text(self.cell)


@dataclass
class MatrixRow:
    """One case across the matrix's columns (a comparison page's row is `comparison.Row`: a change)."""

    case: str
    tags: tuple[str, ...]
    cells: list[MatrixCell]


@dataclass
class Matrix:
    runs: list[RunView]
    columns: list[MatrixColumn]
    rows: list[MatrixRow]

    @property
    def hosts(self) -> list[str]:
        return sorted({c.column.host for c in self.columns})

    @property
    def tags(self) -> list[str]:
        return sorted({t for row in self.rows for t in row.tags})


Items = dict[tuple[str, str, str, int], Item]


def cell_items(items: Items, folder: Path, case: str, host: str) -> list[Item]:
    """The runs of one (case, host) of one run, by run index: 1, 2, … as far as they go."""
    found: list[Item] = []
    for k in itertools.count(1):
        item = items.get((str(folder), case, host, k))
        if item is None:
            return found
        found.append(item)
    return found


def run_view(folder: Path, records: list[Record]) -> RunView:
    run_ids = sorted({r.run_id for r in records})
    # Never refused for mixed terms: the groups are shown side by side, as `report --allow-mixed` shows them.
    return RunView(folder, ", ".join(run_ids), build_report(records, allow_mixed=True), records)


def build(runs: list[RunView], items: Items) -> Matrix:
    """The matrix over `runs`; `items` by (folder, case, host, run index) — folder as str, one per run."""
    columns = [MatrixColumn(f"{run.run_id}/{column.label}", run, column) for run in runs
               for column in run.report.columns]
    cases = sorted({case for run in runs for case in run.report.cases})
    tags: dict[str, set[str]] = {}
    by_cell: dict[tuple[str, str, str], list[Item]] = {}
    for run in runs:
        for record in run.records:
            found = items.get((str(run.folder), record.case, record.host, record.run_index))
            tags.setdefault(record.case, set()).update(record.tags)
            label = run.report.labels.get((record.host, record.terms))
            if found is not None and label is not None:
                by_cell.setdefault((f"{run.run_id}/{label}", record.case, record.host), []).append(found)
    rows = []
    for case in cases:
        cells = []
        for column in columns:
            cell = column.run.report.cell(case, column.column.label)
            own = sorted(by_cell.get((column.key, case, column.column.host), []), key=lambda i: i.record.run_index)
            cells.append(MatrixCell(column, cell, own))
        rows.append(MatrixRow(case, tuple(sorted(tags.get(case, ()))), cells))
    return Matrix(runs, columns, rows)

