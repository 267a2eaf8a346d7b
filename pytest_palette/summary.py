"""The cross-host table printed at the end of a session: one row per case, one column per host.

Built on the controller from report properties only, so it reads the same with and without xdist.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

OUTCOMES = ("pass", "FAIL", "ERROR", "skip")


@dataclass(frozen=True)
class Cell:
    """One (case, host) result as the table shows it."""

    case: str
    host: str
    outcome: str
    model: str = ""
    slides: int | None = None
    seconds: float | None = None
    polls: int | None = None
    failures: tuple[str, ...] = ()


def cell_from_properties(properties: Iterable[tuple[str, object]], outcome: str) -> Cell | None:
    """A cell from an item's user properties, or None for an item that is not a palette case."""
    props = dict(properties)
    if "case" not in props or "host" not in props:
        return None

    def number(key: str) -> float | None:
        value = props.get(key)
        return None if value in (None, "") else float(str(value))

    failures = props.get("failures")
    slides, polls = number("slides"), number("polls")
    return Cell(
        case=str(props["case"]), host=str(props["host"]), outcome=outcome, model=str(props.get("model", "")),
        slides=None if slides is None else int(slides), seconds=number("seconds"),
        polls=None if polls is None else int(polls),
        failures=tuple(json.loads(str(failures))) if failures else (),
    )


def merge(cells: Sequence[Cell]) -> Cell:
    """Repeats of one (case, host) as one cell: `passes/n` over the runs that reached a verdict."""
    if len(cells) == 1:
        return cells[0]
    judged = [c for c in cells if c.outcome in ("pass", "FAIL")]
    errors = sum(c.outcome == "ERROR" for c in cells)
    outcome = f"{sum(c.outcome == 'pass' for c in judged)}/{len(judged)}" + (f"+{errors}E" if errors else "")
    slides = sorted(c.slides for c in judged if c.slides)
    seconds = sorted(c.seconds for c in cells if c.seconds is not None)
    polls = [c.polls for c in judged if c.polls is not None]
    failures = tuple(dict.fromkeys(f for c in cells for f in c.failures))
    first = cells[0]
    return Cell(first.case, first.host, outcome, first.model, slides[len(slides) // 2] if slides else None,
                seconds[len(seconds) // 2] if seconds else None, max(polls) if polls else None, failures)


def _cell_text(cell: Cell | None) -> str:
    if cell is None:
        return "—"
    slides = f"{cell.slides}sl" if cell.slides else "-"
    seconds = f"{cell.seconds:.1f}s" if cell.seconds is not None else "—"
    polls = f"{cell.polls}p" if cell.polls is not None else ""
    return f"{cell.outcome:<5} {slides:>4} {seconds:>7} {polls:>3}"


def render(cells: Sequence[Cell], hosts: Sequence[str]) -> list[str]:
    """The table's lines: header, rows (with failures under disagreeing rows), warnings, footer."""
    if not cells:
        return []
    columns = list(hosts) + sorted({c.host for c in cells} - set(hosts))
    cases = list(dict.fromkeys(c.case for c in cells))
    groups: dict[tuple[str, str], list[Cell]] = {}
    for cell in cells:
        groups.setdefault((cell.case, cell.host), []).append(cell)
    by_key = {key: merge(group) for key, group in groups.items()}
    width = max(len("case"), *(len(name) for name in cases)) + 2
    column = max(24, *(len(h) + 2 for h in columns))
    lines = ["case".ljust(width) + "".join(h.ljust(column) for h in columns).rstrip()]
    disagreements = 0
    everywhere = 0
    for case in cases:
        row = [by_key.get((case, host)) for host in columns]
        lines.append(case.ljust(width) + "".join(_cell_text(c).ljust(column) for c in row).rstrip())
        present = [c for c in row if c is not None]
        outcomes = {c.outcome for c in present}
        if len(present) == len(columns):
            everywhere += 1
        disagree = len(outcomes) > 1
        disagreements += disagree
        if disagree or len(columns) == 1:
            for cell in present:
                if cell.outcome in ("pass", "skip") or (not cell.failures and "/" in cell.outcome):
                    continue
                prefix = f"{cell.host}: " if len(columns) > 1 else ""
                for failure in cell.failures or ("(no failure recorded)",):
                    lines.append(" " * (width + 2) + f"↳ {prefix}{failure}")
    models = {c.host: c.model for c in cells if c.model}
    if len(set(models.values())) > 1:
        lines.append("! the hosts did not run the same model, so differences above are model *and* scaffold: "
                     + ", ".join(f"{h}={m}" for h, m in models.items()))
    for host in columns:
        # The footer counts runs, so repeats are counted one by one.
        counts = {outcome: sum(1 for c in cells if c.host == host and c.outcome == outcome) for outcome in OUTCOMES}
        lines.append(f"{host}: {counts['pass']} passed, {counts['FAIL']} failed, {counts['ERROR']} errored"
                     + (f", {counts['skip']} skipped" if counts["skip"] else "")
                     + (f" · model {models[host]}" if host in models else ""))
    if len(columns) > 1:
        tail = (f"{disagreements} discriminate between hosts" if disagreements
                else "the hosts agreed everywhere they overlapped — nothing here distinguishes them")
        lines.append(f"{len(cases)} case(s) · {everywhere} run on every host · {tail}")
    return lines
