"""How outcomes are shown: the one vocabulary (word, emoji, CSS class per outcome) and the one cell formatter that
the terminal table, the step summary, the Markdown report and the site all print a case × host cell with.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from . import stats
from .record import Outcome
from .stats import MeanScore
from .tally import Cell

#: A cell's outcome: a run's own, or `mixed` (some judged runs passed), or `none` (the case did not run there).
CellOutcome = Literal["pass", "fail", "mixed", "error", "skipped", "none"]


@dataclass(frozen=True)
class Look:
    """How one outcome is shown."""

    outcome: CellOutcome
    #: In a cell, a line, a badge and the site's filter: quiet when it passed, loud when it did not.
    word: str
    #: Before a Markdown cell, where there is no colour.
    emoji: str

    @property
    def css(self) -> str:
        """The class site.css colours it with."""
        return f"o-{self.outcome}"


#: Every outcome's look, in the order the site's filter lists them.
LOOKS: dict[CellOutcome, Look] = {look.outcome: look for look in (
    Look("pass", "pass", "✅"), Look("fail", "FAIL", "❌"), Look("mixed", "some passed", "◐"),
    Look("error", "ERROR", "⚠"), Look("skipped", "skip", ""), Look("none", "did not run", ""))}
#: How a run's outcome is shown wherever one is printed.
MARK: dict[Outcome, str] = {outcome: LOOKS[outcome].word for outcome in ("pass", "fail", "error", "skipped")}
#: What a cell that did not run shows.
ABSENT = "—"


def cell_outcome(cell: Cell | None) -> CellOutcome:
    """pass (every judged run passed), fail (none did), mixed, error (no verdict, an error), skipped, none."""
    if cell is None:
        return "none"
    if cell.n == 0:
        return "error" if cell.errors else "skipped"
    return "pass" if cell.passes == cell.n else "fail" if cell.passes == 0 else "mixed"


def cell_count(cell: Cell) -> str:
    """What the judged runs came to: `pass` or `FAIL` for a cell of one run, `passes/n` judged runs for several,
    `ERROR ×k` or `skip` when none was judged."""
    if cell.n == 0:
        return f"{MARK['error']} ×{cell.errors}" if cell.errors else MARK["skipped"]
    if cell.total == 1:
        return MARK["pass"] if cell.passes else MARK["fail"]
    return f"{cell.passes}/{cell.n}"


def mean_text(score: MeanScore | None, said: str = "") -> str:
    """A mean score with its 95% interval where there is one: `0.92 (0.74–1.00)`, or `0.92 (95% 0.74–1.00)` with
    `said="95% "`; `—` for none."""
    if score is None:
        return ABSENT
    low, high = score.interval or (0.0, 0.0)
    return f"{score.mean:.2f}" + (f" ({said}{low:.2f}–{high:.2f})" if score.interval else "")


def cell_score(cell: Cell) -> str:
    """The judged runs' mean score where it is below 1 (a cell that passed every run scores 1): `0.75`, or
    `0.83±0.14` (mean ± standard deviation) over runs that scored differently; empty when no score is known."""
    score = cell.score
    if score is None or score.mean >= 1:
        return ""
    return f"{score.mean:.2f}" + (f"±{score.sd:.2f}" if score.sd >= 0.005 else "")


def cell_text(cell: Cell | None, scored: bool = True) -> str:
    """The cell in a few characters: its count, its score where below 1, `+kE` beside it for errors apart from the
    judged runs; `—` when the case did not run there. `scored=False` leaves the score out (whether two hosts
    agree on a case is read from the outcomes)."""
    if cell is None:
        return ABSENT
    errors = f" +{cell.errors}E" if cell.errors and cell.n else ""
    score = cell_score(cell) if scored else ""
    return cell_count(cell) + (f" {score}" if score else "") + errors


def table_lines(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    """A Markdown table: the header, its rule, a line per row; a `|` in a cell escaped."""
    return [_row(header), _row(["---"] * len(header)), *(_row(r) for r in rows)]


def _row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(text.replace("|", "\\|") for text in cells) + " |"


def cell_detail(cell: Cell | None) -> str:
    """The cell's text (`cell_text`), then its median slides, worst polls, and errors and skips: the Markdown
    report's case-by-case table."""
    if cell is None:
        return ABSENT
    head = " ".join(filter(None, (LOOKS[cell_outcome(cell)].emoji, cell_count(cell), cell_score(cell))))
    if cell.n == 0:
        return head
    extra = apart(cell.errors, cell.skipped)
    slides = stats.weighted_median(dict(cell.slides))
    polls = max(cell.polls) if cell.polls else None
    parts = [head, f"{number(slides)} sl" if slides is not None else "? sl", f"{polls}p" if polls is not None else "?p"]
    return " · ".join(parts) + (f" (+{extra})" if extra != "—" else "")


def cell_line(cell: Cell | None) -> str:
    """The cell's text, then its median slides and seconds and its worst polls: the terminal table's columns."""
    if cell is None:
        return cell_text(cell)
    slides = sorted(s for s, count in cell.slides.items() for _ in range(count) if s)
    seconds = sorted(cell.seconds)
    polls = max(cell.polls) if cell.polls else None
    shown_slides = f"{slides[len(slides) // 2]}sl" if slides else "-"
    shown_seconds = f"{seconds[len(seconds) // 2]:.1f}s" if seconds else "—"
    shown_polls = f"{polls}p" if polls is not None else ""
    return f"{cell_text(cell):<5} {shown_slides:>4} {shown_seconds:>7} {shown_polls:>3}"


def number(value: float | None, unit: str = "") -> str:
    """A count or a measure: whole when it is, else to one decimal; "—" when not known."""
    if value is None:
        return "—"
    text = f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"
    return text + unit


def apart(errors: int, skipped: int) -> str:
    """The runs outside every denominator, in words ("2 errors, 1 skipped"); "—" when none."""
    parts = ([f"{errors} error{'s' * (errors != 1)}"] if errors else []) + ([f"{skipped} skipped"] if skipped else [])
    return ", ".join(parts) or "—"
