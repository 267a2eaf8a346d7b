"""What the site's score charts show, as numbers: a host's runs' scores binned, and each host's mean score run by
run, one series per skill hash. The drawing is the templates' (macros.html: inline SVG, coloured by site.css), so
a page still opens offline from disk with no script and no image file.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..results.model import Column
from .matrix import MatrixColumn, RunView

#: Bins of a score histogram: 0–0.1, …, 0.9–1.0 (the last holds 1.0, a pass).
BINS = 10
#: Series colours site.css defines (`.s-0` …): skills beyond them share a colour, told apart by their labels.
COLOURS = 6


@dataclass(frozen=True)
class Bin:
    low: float
    high: float
    count: int

    @property
    def label(self) -> str:
        return f"{self.low:.1f}–{self.high:.1f}"


@dataclass(frozen=True)
class Histogram:
    """A column's judged runs by score; the runs with no known score (written before checks) are counted apart."""

    host: str  # the column's label
    title: str
    bins: list[Bin]
    unscored: int
    full: int  # runs that scored 1: passes (every check held)

    @property
    def runs(self) -> int:
        return sum(b.count for b in self.bins)

    @property
    def tallest(self) -> int:
        return max((b.count for b in self.bins), default=0)


def bin_of(score: float) -> int:
    """The bin of a score: [k/10, (k+1)/10), the last one closed. The epsilon keeps 0.3 (3.0000000000000004
    tenths, or just under 3 after rounding elsewhere) in the bin it is written in."""
    return min(max(int(score * BINS + 1e-9), 0), BINS - 1)


def histogram(scores: Iterable[float], unscored: int, host: str, title: str) -> Histogram:
    counts = [0] * BINS
    full = 0
    for score in scores:
        counts[bin_of(score)] += 1
        full += score >= 1
    return Histogram(host, title, [Bin(k / BINS, (k + 1) / BINS, n) for k, n in enumerate(counts)], unscored, full)


def column_histogram(column: MatrixColumn) -> Histogram:
    """The scores of every judged run of the column, each repeat counted."""
    report, label = column.run.report, column.column.label
    cells = [cell for case in report.cases if (cell := report.cell(case, label)) is not None]
    return histogram((s for cell in cells for s in cell.scores), column.column.unscored, label,
                     f"Scores of {label}'s judged runs in {column.run.run_id}")


@dataclass(frozen=True)
class Point:
    run_id: str
    index: int  # the run's place in start order, from 0
    score: float  # the host's mean score over its cases in that run
    cases: int


@dataclass(frozen=True)
class Series:
    skill: str  # the skill hash (or hashes) the host's runs were made with
    points: list[Point]
    colour: int  # the skill's colour (site.css `.s-<n>`), the same on every host's chart


@dataclass(frozen=True)
class Trend:
    """One host's mean score in each run, in the order the runs started; a series per skill hash, so that a change
    of SKILL.md is a change of series."""

    host: str
    runs: list[str]  # every run's id in start order: the x axis, shared by the site's trends
    series: list[Series]

    @property
    def rows(self) -> list[tuple[Point, Series]]:
        """Every point with its series, in run order: the chart's numbers as a table."""
        return sorted(((p, s) for s in self.series for p in s.points), key=lambda row: row[0].index)


def in_start_order(runs: list[RunView]) -> list[RunView]:
    """The runs by when their first item started (a run's id or folder name need not sort by time)."""
    return sorted(runs, key=lambda run: min(r.usage.started_at for r in run.records))


def _series_key(column: Column) -> str:
    """A column's series: its skill hash — and a replay of a recorded run is a series of its own, for it measured
    the harness, not the model again (docs/runs.md, "Replay")."""
    return ", ".join(column.skill_hashes) + (" (replayed)" if "replay" in column.providers else "")


def trends(runs: list[RunView]) -> list[Trend]:
    """Per host, its mean score run by run; none for fewer than two runs (a point is not a trend)."""
    if len(runs) < 2:
        return []
    ordered = in_start_order(runs)
    skills = list(dict.fromkeys(_series_key(c) for run in ordered for c in run.report.columns))
    found: dict[str, dict[str, list[Point]]] = {}
    for index, run in enumerate(ordered):
        for column in run.report.columns:
            score = column.score
            if score is None:
                continue
            skill = _series_key(column)
            found.setdefault(column.host, {}).setdefault(skill, []).append(
                Point(run.run_id, index, score.mean, score.n))
    ids = [run.run_id for run in ordered]
    return [Trend(host, ids, [Series(skill, points, skills.index(skill) % COLOURS)
                              for skill, points in sorted(series.items(), key=lambda s: skills.index(s[0]))])
            for host, series in sorted(found.items())]
