"""The cross-host table printed at the end of a session: one row per case, one column per host.

Rendered from the run's model (results/model.py), as `report` is, over the records the session's items carried on
their reports — so it reads the same with and without xdist.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from .marks import cell_line, cell_text, mean_text
from .model import Column, Report, build_report
from .prices import money
from .record import NO_SKILL, Record, RecordError, from_json
from .tally import Cell

#: The report property that carries an item's record (a JSON line).
RECORD_PROPERTY = "palette.record"


class TableReporter:
    """Collects each palette item's record from its report on the controller and prints the table at the end.

    xdist replays workers' reports here, properties included, so no worker output is needed.
    """

    def __init__(self, hosts: Sequence[str]) -> None:
        self.hosts = list(hosts)
        # Reports arrive in completion order under xdist; rows follow the case files instead.
        self.records: list[tuple[tuple[str, int], Record]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name == RECORD_PROPERTY and (report.when == "call" or not report.passed):
                try:
                    self.records.append(((report.location[0], report.location[1] or 0), from_json(str(value))))
                except RecordError:  # not ours: a user's property of the same name
                    pass

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.records:
            return
        terminalreporter.write_sep("=", "palette summary")
        for line in render(self.matrix()):
            terminalreporter.write_line(line)

    def ordered(self) -> list[Record]:
        """The session's records in the case files' order."""
        return [record for _, record in sorted(self.records, key=lambda pair: pair[0])]

    def matrix(self) -> SessionMatrix:
        """The session's model, in its hosts' and case files' order (the step summary shows the same)."""
        return session_matrix_of(self.ordered(), self.hosts)


def session_matrix_of(records: Sequence[Record], hosts: Sequence[str]) -> SessionMatrix:
    """The model of a session's records (each host's terms side by side, never pooled), in the session's order."""
    return session_matrix(build_report(records, allow_mixed=True), hosts, [r.case for r in records])


@dataclass
class SessionMatrix:
    """A session's cases × hosts, for the terminal table and the step summary (the site's is `site.matrix.Matrix`),
    in the session's order: a view of the run's model, which holds every number shown."""

    report: Report
    cases: list[str]
    #: The session's hosts first, in their order, then any other column the records hold.
    columns: list[Column]

    def cell(self, case: str, column: Column) -> Cell | None:
        return self.report.cell(case, column.label)


def session_matrix(report: Report, hosts: Sequence[str], cases: Sequence[str] = ()) -> SessionMatrix:
    """The model's cells in the session's order: `cases` as the case files list them (the rest after, by name),
    `hosts` as given."""
    order = {host: i for i, host in enumerate(hosts)}
    columns = sorted(report.columns, key=lambda c: (order.get(c.host, len(order)), c.host, c.label))
    known = set(report.cases)
    named = [case for case in dict.fromkeys(cases) if case in known]
    return SessionMatrix(report, named + sorted(known - set(named)), columns)


def render(shown: SessionMatrix) -> list[str]:
    """The table's lines: header, rows (with failures under disagreeing rows), warnings, footer."""
    columns, labels = shown.columns, [c.label for c in shown.columns]
    cells = [cell for case in shown.cases for c in columns if (cell := shown.cell(case, c)) is not None]
    width = max(len("case"), *(len(name) for name in shown.cases)) + 2
    column = max(24, *(len(label) + 2 for label in labels), *(len(cell_line(c)) + 2 for c in cells))
    lines = ["case".ljust(width) + "".join(label.ljust(column) for label in labels).rstrip()]
    for case in shown.cases:
        row = [shown.cell(case, c) for c in columns]
        lines.append(case.ljust(width) + "".join(cell_line(c).ljust(column) for c in row).rstrip())
        present = [(c.label, cell) for c, cell in zip(columns, row, strict=True) if cell is not None]
        if len({cell_text(cell, scored=False) for _, cell in present}) > 1 or len(columns) == 1:
            for label, cell in present:
                failures = [*cell.failures, *cell.host_errors]
                if not (cell.fails or cell.errors):
                    continue
                prefix = f"{label}: " if len(columns) > 1 else ""
                lines += [" " * (width + 2) + f"↳ {prefix}{failure.removeprefix(prefix)}" for failure in failures]
    return lines + footer(shown)


def footer(shown: SessionMatrix) -> list[str]:
    """Below the rows: a warning when the hosts ran different models, a line per host (its runs counted one by
    one, its model, spending and sandbox), its trigger recall and precision when near misses ran, and with several
    hosts how many cases tell them apart."""
    columns = shown.columns
    lines = []
    models = {c.label: ", ".join(c.described) for c in columns}
    if len(set(models.values())) > 1:
        lines.append("! the hosts did not run the same model, so differences above are model *and* scaffold: "
                     + ", ".join(f"{h}={m}" for h, m in models.items()))
    for c in columns:
        lines.append(f"{c.label}: {c.passes} passed, {c.fails} failed, {c.errors} errored"
                     + (f", {c.skipped} skipped" if c.skipped else "")
                     + (f" · model {models[c.label]}" if models[c.label] else "")
                     + (" · skill: none (baseline)" if NO_SKILL in c.skill_hashes else "")
                     + ("" if c.score is None else f" · score {mean_text(c.score, '95% ')}")
                     + _spending(c)
                     + (f" · commands {' and '.join(c.sandboxes)}" if c.sandboxes else ""))
    if any(c.metrics.triggers.near_misses for c in columns):  # only a session with near misses says it
        lines += [f"{c.label} trigger: {c.metrics.triggers.text()}" for c in columns
                  if c.metrics.triggers.needed or c.metrics.triggers.near_misses]
    if len(columns) > 1:
        rows = [[shown.cell(case, c) for c in columns] for case in shown.cases]
        everywhere = sum(all(cell is not None for cell in row) for row in rows)
        disagreements = sum(len({cell_text(cell, scored=False) for cell in row if cell is not None}) > 1
                            for row in rows)
        tail = (f"{disagreements} discriminate between hosts" if disagreements
                else "the hosts agreed everywhere they overlapped — nothing here distinguishes them")
        lines.append(f"{len(shown.cases)} case(s) · {everywhere} run on every host · {tail}")
    return lines


#: Where a host's cost came from, in a few words.
SOURCES = {"provider": "from the client", "prices": "from your --palette-prices", "": "recorded"}


def _spending(column: Column) -> str:
    """A host's tokens and cost for its footer: what its client reported, and where the cost came from (or
    which model had no price)."""
    tokens_in, tokens_out, cost = (column.usage.get(name) for name in ("input_tokens", "output_tokens", "cost_usd"))
    parts = []
    if tokens_in is not None or tokens_out is not None:
        parts.append(f"{tokens_in or 0:,.0f} in / {tokens_out or 0:,.0f} out tokens")
    if cost is not None:
        parts.append(f"{money(cost)} ({', '.join(SOURCES.get(s, s) for s in sorted(column.cost_from))})")
    if column.unpriced_models:
        parts.append(f"no price for {', '.join(column.unpriced_models)}: pass --palette-prices")
    return "".join(f" · {part}" for part in parts)
