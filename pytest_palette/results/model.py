"""The one model of a run, built from records: per cell (case × host), per case and per host, with pass@k, pass^k,
score, score@k, usage, the paired tests, the lift and the caveats. Every output is a writer over it (the terminal
table, the step summary, Markdown, JSON, the site, the exports: docs/runs.md, "Adding an output"), so each
reads the same numbers. Everything is sorted by name, so shards read in any order give the same model.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..cases import DEFAULT_MAX_POLLS
from . import caveats, lift, stats, tasks
from .columns import Column, Metrics, Pair
from .ledger import Reading
from .record import NO_SKILL, Record, Terms
from .tally import SUMMED, Cell, Group, Tally, case_mean_score, ceiling, judged_polls, tally, triggers

# The model's whole surface: an output imports what it reads from here.
__all__ = ["Cell", "Column", "Metrics", "Pair", "Report", "ReportError", "build_report", "score_differences"]


class ReportError(Exception):
    """Records that cannot honestly be reported together (or nothing to report)."""


@dataclass
class Report:
    columns: list[Column]
    cases: list[str]
    cells: dict[tuple[str, str], Cell]
    ks: list[int]
    records: int
    duplicates_dropped: int
    skipped_lines: int
    ledgers: list[str]
    groups: dict[str, tuple[str, str]]
    pairs: list[Pair]
    disagreements: list[str]
    caveats: list[str]
    #: Per host, with the skill against without it, when the records hold one run of each (`lift`).
    lifts: list[lift.HostLift] = field(default_factory=list)
    #: The label of the column each (host, terms) of the records landed in.
    labels: dict[tuple[str, Terms], str] = field(default_factory=dict)
    #: Each task family's task per column (results/tasks.py); [] when the records hold none.
    tasks: list[tasks.TaskDetail] = field(default_factory=list)

    def cell(self, case: str, label: str) -> Cell | None:
        return self.cells.get((case, label))


# ---------------------------------------------------------------------------------------------- building


def _columns_for(counted: Tally, allow_mixed: bool) -> tuple[dict[tuple[str, Terms], int], list[Column],
                                                              dict[str, tuple[str, str]]]:
    """Which column each (host, terms) lands in; refuse mixed measurements unless allowed."""
    combos = list(counted.groups)
    skills = sorted({terms.skill_hash for _, terms in combos})
    per_host: dict[str, set[str]] = {}
    for host, terms in combos:
        per_host.setdefault(host, set()).add(terms.fingerprint)
    split = {h: fps for h, fps in per_host.items() if len(fps) > 1}
    mixed = len(skills) > 1 or bool(split)
    keys = sorted({(terms.skill_hash, terms.fingerprint) for _, terms in combos})
    # One measurement with a skill beside one without any (the baseline): the lift, shown side by side as two
    # groups named for what they are, never pooled.
    lifted = len(keys) == 2 and sum(skill == NO_SKILL for skill, _ in keys) == 1
    if mixed and not allow_mixed and not lifted:
        problems = []
        if len(skills) > 1:
            problems.append(f"{len(skills)} skill hashes ({', '.join(skills)})")
        problems += [f"host {h} under {len(fps)} fingerprints ({', '.join(sorted(fps))})"
                     for h, fps in sorted(split.items())]
        raise ReportError("these records were measured under different terms — " + "; ".join(problems)
                          + ". Pooling them would blend two measurements into one number. Report each run on its "
                          "own, use `compare` for before/after, or pass --allow-mixed to see the groups side by "
                          "side (never pooled).")
    groups: dict[tuple[str, str], str] = {}
    if lifted:
        groups = {key: lift.WITHOUT_SKILL if key[0] == NO_SKILL else lift.WITH_SKILL for key in keys}
    elif mixed:
        groups = {key: _letter(i) for i, key in enumerate(keys)}
    by_label: dict[str, Column] = {}
    where: dict[tuple[str, Terms], str] = {}
    for host, terms in combos:
        group = groups.get((terms.skill_hash, terms.fingerprint), "")
        label = f"{host} [{group}]" if group else host
        column = by_label.setdefault(label, Column(label=label, host=host, group=group))
        _add_unique(column.models, terms.model)
        _add_unique(column.described, terms.label)
        _add_unique(column.providers, terms.provider)
        _add_unique(column.skill_hashes, terms.skill_hash)
        _add_unique(column.fingerprints, terms.fingerprint)
        _add_unique(column.scaffold, " · ".join(f"{k}={v}" for k, v in terms.scaffold))
        _add_unique(column.sandboxes, terms.sandbox)
        where[(host, terms)] = label
    ordered = sorted(by_label.values(), key=lambda c: (c.host, c.group == lift.WITHOUT_SKILL, c.group))
    for column in ordered:
        for values in (column.models, column.described, column.providers, column.scaffold, column.skill_hashes,
                       column.fingerprints):
            values.sort()
    index = {column.label: i for i, column in enumerate(ordered)}
    legend = {letter: key for key, letter in groups.items()}
    return {key: index[label] for key, label in where.items()}, ordered, legend


def _letter(i: int) -> str:
    return chr(ord("A") + i) if i < 26 else f"G{i + 1}"


def _add_unique(values: list[str], value: str) -> None:
    if value not in values:
        values.append(value)


def build_report(records: Tally | Reading | Iterable[Record], *, allow_mixed: bool = False) -> Report:
    """Aggregate records (a Tally, a ledger Reading, or Records) into a Report."""
    counted = records if isinstance(records, Tally) else tally(records)
    if not len(counted):
        raise ReportError("no records to report")
    where, columns, groups = _columns_for(counted, allow_mixed)

    cells: dict[tuple[str, str], Cell] = {}
    for (case, host, terms), cell in counted.cells.items():
        key = (case, columns[where[(host, terms)]].label)
        cells[key] = cells[key].merge(cell) if key in cells else cell
    merged: dict[int, Group] = {}
    for pair, group in counted.groups.items():
        merged.setdefault(where[pair], Group()).merge(group)

    cases = sorted({case for case, _ in cells})
    ks = stats.ks_for(max((cell.n for cell in cells.values()), default=0))
    for col, column in enumerate(columns):
        own = [cells[(case, column.label)] for case in cases if (case, column.label) in cells]
        column.passes = sum(c.passes for c in own)
        column.fails = sum(c.fails for c in own)
        column.errors = sum(c.errors for c in own)
        column.skipped = sum(c.skipped for c in own)
        column.pass_at, column.pass_hat = _pass_k(own, ks)
        group = merged.get(col, Group())
        column.runs = sorted(group.runs)
        column.usage = {name: _rounded(group.total(name)) for name in SUMMED}
        column.usage_runs = {name: len(group.reported[name]) for name in SUMMED}
        column.cost_from = dict(sorted(group.cost_from.items()))
        column.unpriced = group.unpriced
        column.unpriced_models = sorted({terms.model for (host, terms), own in counted.groups.items()
                                         if own.unpriced and where[(host, terms)] == col})
        column.metrics = _metrics(own, group)
        column.score = case_mean_score(own)
        column.score_at = _score_k(own, ks)
        column.unscored = sum(c.unscored for c in own)
        if column.baseline:
            column.instead = lift.instead(own)

    disagreements = _disagreements(cases, columns, cells)
    pairs = [Pair(a.label, b.label, stats.paired_test(*_shared_rates(cases, a, b, cells)),
                  stats.signed_rank_test(score_differences(cases, a.label, b.label, cells)))
             for a, b in itertools.combinations(columns, 2)]
    report = Report(columns=columns, cases=cases, cells=cells, ks=ks, records=counted.records,
                    duplicates_dropped=counted.superseded, skipped_lines=counted.skipped, ledgers=list(counted.files),
                    groups=groups, pairs=pairs, disagreements=disagreements, caveats=[],
                    lifts=_lifts(cases, columns, cells),
                    labels={pair: columns[index].label for pair, index in where.items()})
    report.caveats = caveats.of(report, counted)
    report.tasks = tasks.details(counted.family_records, report.labels)
    return report


def _rounded(value: float | None) -> float | None:
    return value if value is None or isinstance(value, int) else round(value, 6)


def _metrics(cells: list[Cell], group: Group) -> Metrics:
    """The seed's metrics for one column, over its judged runs."""
    judged = decks = plex = polls_total = at_ceiling = over_ceiling = 0
    worst, worst_ceiling = 0, DEFAULT_MAX_POLLS
    context_expected = context_reached = edit_expected = edit_called = replanned = 0
    calls: Counter[int] = Counter()
    for cell in cells:
        for facts, count in cell.judged():
            judged += count
            decks += count * facts.deck
            plex += count * (facts.deck and facts.has_plex)
            calls[len(facts.calls)] += count
            spins = judged_polls(facts)
            if facts.polls is not None:
                polls_total += facts.polls * count
            if spins is not None:
                limit = ceiling(facts)
                if spins > worst or (spins == worst and limit < worst_ceiling):
                    worst, worst_ceiling = spins, limit  # of equal counts, the one nearest its ceiling
                at_ceiling += count * (spins == limit)
                over_ceiling += count * (spins > limit)
            if facts.context_expected:
                context_expected += count
                context_reached += count * facts.context_reached
            if facts.edit_expected:
                edit_expected += count
                edit_called += count * facts.edit_called
            replanned += count * facts.replanned_after_edit
    wall = group.last_end - group.first_start if group.last_end >= group.first_start else None
    return Metrics(
        runs_judged=judged, runs_passed=sum(c.passes for c in cells),
        cases_passed=sum(1 for c in cells if c.n and c.passes == c.n), cases_judged=sum(1 for c in cells if c.n),
        decks_built=decks, decks_with_plex=plex,
        median_case_seconds=stats.median(s for c in cells for s in c.seconds), wall_clock_seconds=wall,
        median_calls=stats.weighted_median(dict(calls)), polls_total=polls_total, polls_worst=worst,
        polls_worst_ceiling=worst_ceiling, at_poll_ceiling=at_ceiling, over_poll_ceiling=over_ceiling,
        context_expected=context_expected, context_reached=context_reached, edit_expected=edit_expected,
        edit_called=edit_called, replanned_after_edit=replanned, triggers=triggers(cells))


def _pass_k(cells: list[Cell], ks: list[int]) -> tuple[dict[int, tuple[float | None, int]],
                                                         dict[int, tuple[float | None, int]]]:
    """Per k: (mean over the cases with at least k judged runs, how many cases that is)."""
    at: dict[int, tuple[float | None, int]] = {}
    hat: dict[int, tuple[float | None, int]] = {}
    for k in ks:
        eligible = [c for c in cells if c.n >= k]
        if not eligible:
            at[k] = hat[k] = (None, 0)
            continue
        at[k] = (sum(stats.pass_at_k(c.n, c.passes, k) or 0.0 for c in eligible) / len(eligible), len(eligible))
        hat[k] = (sum(stats.pass_hat_k(c.n, c.passes, k) or 0.0 for c in eligible) / len(eligible), len(eligible))
    return at, hat


def _score_k(cells: list[Cell], ks: list[int]) -> dict[int, tuple[float | None, int]]:
    """Per k: score@k averaged over the cases with at least k scored runs, and how many cases that is."""
    found: dict[int, tuple[float | None, int]] = {}
    for k in ks:
        eligible = [c.scores for c in cells if len(c.scores) >= k]
        found[k] = (sum(stats.score_at_k(s, k) or 0.0 for s in eligible) / len(eligible), len(eligible)) \
            if eligible else (None, 0)
    return found


def score_differences(cases: Iterable[str], a: str, b: str, cells: Mapping[tuple[str, str], Cell]) -> list[float]:
    """A's mean score minus B's, per case both scored: what the signed-rank test reads."""
    found = []
    for case in cases:
        one, other = cells.get((case, a)), cells.get((case, b))
        if one is not None and other is not None and one.score is not None and other.score is not None:
            found.append(one.score.mean - other.score.mean)
    return found


def _lifts(cases: list[str], columns: list[Column], cells: dict[tuple[str, str], Cell]) -> list[lift.HostLift]:
    """Per host that ran both with the skill and without it: the lift over the cases both ran."""
    found = []
    for host in sorted({c.host for c in columns}):
        sides = {c.baseline: c for c in columns if c.host == host}
        if len(sides) == 2 and len([c for c in columns if c.host == host]) == 2:
            with_skill, without = sides[False].label, sides[True].label
            found.append(lift.host_lift(host, [(cells[(case, with_skill)].rate(), cells[(case, without)].rate())
                                               for case in cases if (case, with_skill) in cells
                                               and (case, without) in cells]))
    return found


def _shared_rates(cases: list[str], a: Column, b: Column, cells: dict[tuple[str, str], Cell]
                  ) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    shared = [case for case in cases if (case, a.label) in cells and (case, b.label) in cells]
    return [cells[(c, a.label)].rate() for c in shared], [cells[(c, b.label)].rate() for c in shared]


def _disagreements(cases: list[str], columns: list[Column], cells: dict[tuple[str, str], Cell]) -> list[str]:
    """Cases whose judged pass rates differ between columns (compared exactly, as fractions)."""
    found = []
    for case in cases:
        rates = {_fraction(*c.rate()) for col in columns if (c := cells.get((case, col.label))) and c.n}
        if len(rates) > 1:
            found.append(case)
    return found


def _fraction(p: int, n: int) -> tuple[int, int]:
    g = math.gcd(p, n)
    return p // g, n // g
