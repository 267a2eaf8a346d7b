"""The cross-host table printed at the end of a session: one row per case, one column per host.

Rendered from the same tally as `report`, over the records the session's items carried on their reports —
so it reads the same with and without xdist.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from .marks import cell_text, mean_text
from .prices import money
from .record import Record, RecordError, from_json
from .tally import Cell, Group, Tally, case_mean_score, tally, triggers

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
        for line in render(tally(self.ordered()), self.hosts):
            terminalreporter.write_line(line)

    def ordered(self) -> list[Record]:
        """The session's records in the case files' order."""
        return [record for _, record in sorted(self.records, key=lambda pair: pair[0])]


@dataclass
class SessionMatrix:
    """A session's cases × hosts, for the terminal table and the step summary (the site's is `site.matrix.Matrix`):
    each (case, host)'s cell merged across terms, with each host's model and sandboxes."""

    cells: dict[tuple[str, str], Cell]
    cases: list[str]
    #: The session's hosts first, in their order, then any other a record names.
    columns: list[str]
    models: dict[str, str]
    sandboxes: dict[str, set[str]]


def session_matrix(counted: Tally, hosts: Sequence[str]) -> SessionMatrix:
    by_key: dict[tuple[str, str], Cell] = {}
    models: dict[str, str] = {}
    sandboxes: dict[str, set[str]] = {}
    for (case, host, terms), cell in counted.cells.items():
        by_key[(case, host)] = by_key[(case, host)].merge(cell) if (case, host) in by_key else cell
        models[host] = terms.label
        sandboxes.setdefault(host, set()).add(terms.sandbox)
    cases = list(dict.fromkeys(case for case, _ in by_key))
    columns = list(hosts) + sorted({host for _, host in by_key} - set(hosts))
    return SessionMatrix(by_key, cases, columns, models, sandboxes)


def render(counted: Tally, hosts: Sequence[str]) -> list[str]:
    """The table's lines: header, rows (with failures under disagreeing rows), warnings, footer."""
    if not counted.cells:
        return []
    shown = session_matrix(counted, hosts)
    by_key, cases, columns = shown.cells, shown.cases, shown.columns
    width = max(len("case"), *(len(name) for name in cases)) + 2
    column = max(24, *(len(h) + 2 for h in columns), *(len(_text(c)) + 2 for c in by_key.values()))
    lines = ["case".ljust(width) + "".join(h.ljust(column) for h in columns).rstrip()]
    for case in cases:
        row = [by_key.get((case, host)) for host in columns]
        lines.append(case.ljust(width) + "".join(_text(c).ljust(column) for c in row).rstrip())
        present = [(host, c) for host, c in zip(columns, row, strict=True) if c is not None]
        if len({cell_text(c, scored=False) for _, c in present}) > 1 or len(columns) == 1:
            for host, cell in present:
                failures = [*cell.failures, *cell.host_errors]
                if not (cell.fails or cell.errors):
                    continue
                prefix = f"{host}: " if len(columns) > 1 else ""
                lines += [" " * (width + 2) + f"↳ {prefix}{failure.removeprefix(prefix)}" for failure in failures]
    return lines + footer(counted, shown)


def footer(counted: Tally, shown: SessionMatrix) -> list[str]:
    """Below the rows: a warning when the hosts ran different models, a line per host (its runs counted one by
    one, its model, spending and sandbox), its trigger recall and precision when near misses ran, and with several
    hosts how many cases tell them apart."""
    by_key, columns, models, sandboxes = shown.cells, shown.columns, shown.models, shown.sandboxes
    lines = []
    if len(set(models.values())) > 1:
        lines.append("! the hosts did not run the same model, so differences above are model *and* scaffold: "
                     + ", ".join(f"{h}={m}" for h, m in models.items()))
    for host in columns:
        own = [cell for (_, h), cell in by_key.items() if h == host]
        skipped = sum(c.skipped for c in own)
        lines.append(f"{host}: {sum(c.passes for c in own)} passed, {sum(c.fails for c in own)} failed, "
                     f"{sum(c.errors for c in own)} errored" + (f", {skipped} skipped" if skipped else "")
                     + (f" · model {models[host]}" if host in models else "")
                     + (" · skill: none (baseline)" if any(terms.baseline for h, terms in counted.groups if h == host)
                        else "")
                     + _score(own)
                     + _spending(counted, host)
                     + (f" · commands {' and '.join(sorted(sandboxes[host]))}" if host in sandboxes else ""))
    counted_triggers = {host: triggers(c for (_, h), c in by_key.items() if h == host) for host in columns}
    if any(t.near_misses for t in counted_triggers.values()):  # only a session with near misses says it
        lines += [f"{host} trigger: {t.text()}" for host, t in counted_triggers.items() if t.needed or t.near_misses]
    if len(columns) > 1:
        rows = [[by_key.get((case, host)) for host in columns] for case in shown.cases]
        everywhere = sum(all(c is not None for c in row) for row in rows)
        disagreements = sum(len({cell_text(c, scored=False) for c in row if c is not None}) > 1 for row in rows)
        tail = (f"{disagreements} discriminate between hosts" if disagreements
                else "the hosts agreed everywhere they overlapped — nothing here distinguishes them")
        lines.append(f"{len(shown.cases)} case(s) · {everywhere} run on every host · {tail}")
    return lines


def _text(cell: Cell | None) -> str:
    """The cell's text, then its median slides and seconds and its worst polls."""
    if cell is None:
        return cell_text(cell)
    slides = sorted(s for s, count in cell.slides.items() for _ in range(count) if s)
    seconds = sorted(cell.seconds)
    polls = max(cell.polls) if cell.polls else None
    shown_slides = f"{slides[len(slides) // 2]}sl" if slides else "-"
    shown_seconds = f"{seconds[len(seconds) // 2]:.1f}s" if seconds else "—"
    shown_polls = f"{polls}p" if polls is not None else ""
    return f"{cell_text(cell):<5} {shown_slides:>4} {shown_seconds:>7} {shown_polls:>3}"


def _score(cells: list[Cell]) -> str:
    """A host's mean score for its footer: over its cases (each case's mean over its runs), with its 95% interval."""
    score = case_mean_score(cells)
    return "" if score is None else f" · score {mean_text(score, '95% ')}"


#: Where a host's cost came from, in a few words.
SOURCES = {"provider": "from the client", "prices": "from your --palette-prices", "": "recorded"}


def _spending(counted: Tally, host: str) -> str:
    """A host's tokens and cost for its footer: what its client reported, and where the cost came from (or
    which model had no price)."""
    spent = Group()
    unpriced: set[str] = set()
    for (name, terms), group in counted.groups.items():
        if name == host:
            spent.merge(group)
            if group.unpriced:
                unpriced.add(terms.model)
    tokens_in, tokens_out, cost = (spent.total(name) for name in ("input_tokens", "output_tokens", "cost_usd"))
    parts = []
    if tokens_in is not None or tokens_out is not None:
        parts.append(f"{tokens_in or 0:,.0f} in / {tokens_out or 0:,.0f} out tokens")
    if cost is not None:
        parts.append(f"{money(cost)} ({', '.join(SOURCES.get(s, s) for s in sorted(spent.cost_from))})")
    if unpriced:
        parts.append(f"no price for {', '.join(sorted(unpriced))}: pass --palette-prices")
    return "".join(f" · {part}" for part in parts)
