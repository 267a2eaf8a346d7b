"""The report over a tally of records: scores, pass@k and pass^k, intervals, metrics, caveats — as Markdown
and as JSON. Everything printed is sorted by name, so shards read in any order give the same report.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ..cases import DEFAULT_MAX_POLLS
from . import lift, stats, tasks
from .ledger import Reading
from .marks import ABSENT, LOOKS, cell_count, cell_outcome, cell_score, mean_text, table_lines
from .prices import money
from .record import NO_SKILL, Record, Terms
from .tally import SUMMED, Cell, Group, Tally, Triggers, case_mean_score, ceiling, judged_polls, tally, triggers


class ReportError(Exception):
    """Records that cannot honestly be reported together (or nothing to report)."""


@dataclass(frozen=True)
class Metrics:
    """A column's metrics over its judged runs: the report's Metrics table, and its JSON's `metrics` (`to_json`)."""

    runs_judged: int = 0
    runs_passed: int = 0
    #: Cases every judged run of which passed, of the cases with a judged run.
    cases_passed: int = 0
    cases_judged: int = 0
    decks_built: int = 0
    decks_with_plex: int = 0
    median_case_seconds: float | None = None
    #: The first start to the last end, errors and skips included.
    wall_clock_seconds: float | None = None
    median_calls: float | None = None
    polls_total: int = 0
    #: The most judged polls of any run, and that run's ceiling (of equal counts, the one nearest its ceiling).
    polls_worst: int = 0
    polls_worst_ceiling: int = DEFAULT_MAX_POLLS
    at_poll_ceiling: int = 0
    over_poll_ceiling: int = 0
    context_expected: int = 0
    context_reached: int = 0
    edit_expected: int = 0
    edit_called: int = 0
    replanned_after_edit: int = 0
    #: Counts, each run counted: the rows and readers compute recall and precision from them.
    triggers: Triggers = field(default_factory=Triggers)

    def to_json(self) -> dict[str, Any]:
        """The JSON report's `metrics`: one key per field, in this order, with `triggers` as an object."""
        return asdict(self)


@dataclass
class Column:
    """One host (or, in a mixed report, one host under one skill hash and fingerprint)."""

    label: str
    host: str
    group: str = ""
    models: list[str] = field(default_factory=list)
    providers: list[str] = field(default_factory=list)
    scaffold: list[str] = field(default_factory=list)
    #: Where the agent's commands ran: "bubblewrap", "unconfined".
    sandboxes: list[str] = field(default_factory=list)
    skill_hashes: list[str] = field(default_factory=list)
    fingerprints: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    passes: int = 0
    fails: int = 0
    errors: int = 0
    skipped: int = 0
    pass_at: dict[int, tuple[float | None, int]] = field(default_factory=dict)
    pass_hat: dict[int, tuple[float | None, int]] = field(default_factory=dict)
    metrics: Metrics = field(default_factory=Metrics)
    #: Per summed usage field (tokens, cost, turns, …): the total over the runs that reported it, else None.
    usage: dict[str, float | None] = field(default_factory=dict)
    #: Per summed usage field: how many runs reported it.
    usage_runs: dict[str, int] = field(default_factory=dict)
    #: Runs with a cost, by where it came from ("provider", "prices"; "" when the record did not say).
    cost_from: dict[str, int] = field(default_factory=dict)
    #: Runs that reported tokens but no cost, and the models they ran (no price was known for them).
    unpriced: int = 0
    unpriced_models: list[str] = field(default_factory=list)
    #: A baseline column's judged runs by what the agent did about a deck (`lift.instead`); empty otherwise.
    instead: Counter[str] = field(default_factory=Counter)
    #: The mean score over the cases (each case's mean over its runs) with a 95% interval; score@k per k, as
    #: pass@k is: (mean over the cases with at least k scored runs, how many cases that is).
    score: stats.MeanScore | None = None
    score_at: dict[int, tuple[float | None, int]] = field(default_factory=dict)
    #: Judged runs whose score is not known (records written before checks that failed a scored check).
    unscored: int = 0

    @property
    def baseline(self) -> bool:
        """Whether no skill was installed for this column's runs (`--palette-skill none`)."""
        return lift.is_baseline(self.skill_hashes)

    @property
    def n(self) -> int:
        return self.passes + self.fails

    def wilson(self) -> tuple[float, float] | None:
        return stats.wilson(self.passes, self.n)


@dataclass
class Pair:
    a: str
    b: str
    test: stats.PairedTest
    #: The signed-rank test on the cases' mean scores, over the cases both scored.
    scores: stats.SignedRankTest = field(default_factory=lambda: stats.signed_rank_test(()))


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
        _add_unique(column.providers, terms.provider)
        _add_unique(column.skill_hashes, terms.skill_hash)
        _add_unique(column.fingerprints, terms.fingerprint)
        _add_unique(column.scaffold, " · ".join(f"{k}={v}" for k, v in terms.scaffold))
        _add_unique(column.sandboxes, terms.sandbox)
        where[(host, terms)] = label
    ordered = sorted(by_label.values(), key=lambda c: (c.host, c.group == lift.WITHOUT_SKILL, c.group))
    for column in ordered:
        for values in (column.models, column.providers, column.scaffold, column.skill_hashes, column.fingerprints):
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
    report.caveats = _caveats(report, counted)
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


def _caveats(report: Report, counted: Tally) -> list[str]:
    """What the numbers are not entitled to say, in words."""
    notes: list[str] = []
    ns = [cell.n for cell in report.cells.values() if cell.n]
    if not ns or max(ns) <= 1:
        notes.append("**One run per cell.** One run per cell is a reason to look, not a ranking: a one-case "
                     "difference can be a coin flip.")
    else:
        low, high = min(ns), max(ns)
        span = f"n = {low}" if low == high else f"n = {low} to {high}"
        widest = max((w[1] - w[0] for col in report.columns if (w := col.wilson())), default=0.0)
        notes.append(f"**Few repeats: {span} judged runs per cell.** pass@k is only defined for k ≤ n, and the "
                     f"widest 95% interval above spans {widest:.0%}. The host interval pools runs of different "
                     "cases, which are not one coin: read it as a rough band, and the paired test as the comparison.")
    models = {col.label: col.models for col in report.columns}
    if len({tuple(m) for m in models.values()}) > 1:
        notes.append("**Different models across hosts** (" + "; ".join(f"{label}: {', '.join(m)}"
                                                                       for label, m in models.items())
                     + "): not like-for-like. A column answers \"which product builds better decks\", not \"which "
                       "scaffold drives the skill better\".")
    labels = [col.label for col in report.columns]
    if len(labels) > 1:
        missing = [case for case in report.cases if any((case, label) not in report.cells for label in labels)]
        if missing:
            notes.append(f"**{len(missing)} case(s) did not run on every host:** {', '.join(missing)}.")
        unjudged = [case for case in report.cases if case not in missing
                    and any(report.cells[(case, label)].n == 0 for label in labels)]
        if unjudged:
            notes.append(f"**{len(unjudged)} case(s) have no verdict on some host** (only errors or skips): "
                         f"{', '.join(unjudged)}.")
        k, total = len(report.disagreements), len(report.cases)
        notes.append(f"**{k} of {total} cases discriminate** between the hosts."
                     + (" The rest agree and cost the same time to run." if k else
                        " Nothing in this case set distinguishes them."))
    errors = sum(col.errors for col in report.columns)
    skipped = sum(col.skipped for col in report.columns)
    if errors or skipped:
        notes.append(f"**{errors} errored and {skipped} skipped run(s) are outside every denominator:** they are "
                     "neither passes nor failures. Resume re-runs the errored ones.")
    if report.groups:
        notes.append("**Mixed measurements, shown side by side and never pooled:** " + "; ".join(
            f"[{letter}] skill {skill} · fingerprint {fp}" for letter, (skill, fp) in report.groups.items()) + ".")
    renamed = sorted(case for case, hashes in counted.case_hashes.items() if len(hashes) > 1)
    if renamed:
        notes.append(f"**{len(renamed)} case(s) changed between runs** (more than one case hash): "
                     f"{', '.join(renamed)}. Their runs asked different questions.")
    notes += [f"**A stale lockfile.** {said}." for said in tasks.stale_lockfiles(counted.family_records)]
    if report.duplicates_dropped:
        notes.append(f"{report.duplicates_dropped} duplicate record(s) (same run, case, host and run index) were "
                     "dropped, keeping the last written: a resumed run appends its re-run after the original.")
    if report.skipped_lines:
        notes.append(f"{report.skipped_lines} ledger line(s) were unreadable and skipped (see the warnings).")
    return notes


# ---------------------------------------------------------------------------------------------- writing


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def _interval(bounds: tuple[float, float] | None) -> str:
    return "—" if bounds is None else f"{bounds[0]:.1%} – {bounds[1]:.1%}"


def _num(value: float | None, unit: str = "") -> str:
    if value is None:
        return "—"
    text = f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"
    return text + unit


def _of(part: int, whole: int) -> str:
    return f"{part}/{whole}" if whole else "—"


def _apart(errors: int, skipped: int) -> str:
    parts = ([f"{errors} error{'s' * (errors != 1)}"] if errors else []) + ([f"{skipped} skipped"] if skipped else [])
    return ", ".join(parts) or "—"


def _cell_text(cell: Cell | None) -> str:
    """The cell's count after its outcome's emoji, then its median slides, worst polls, and errors and skips."""
    if cell is None:
        return ABSENT
    head = " ".join(filter(None, (LOOKS[cell_outcome(cell)].emoji, cell_count(cell), cell_score(cell))))
    if cell.n == 0:
        return head
    extra = _apart(cell.errors, cell.skipped)
    slides = stats.weighted_median(dict(cell.slides))
    polls = max(cell.polls) if cell.polls else None
    parts = [head, f"{_num(slides)} sl" if slides is not None else "? sl", f"{polls}p" if polls is not None else "?p"]
    return " · ".join(parts) + (f" (+{extra})" if extra != "—" else "")


Table = tuple[list[str], list[list[str]]]


def tables(report: Report) -> dict[str, Table]:
    """The report's tables as text, (header, rows) each: what the Markdown and the HTML site both show."""
    columns = report.columns
    scores = (["Host", "Passed", "Errors / skipped", "95% interval (Wilson)", "Mean score (95% interval)", "Model",
               "Provider", "Commands", "Scaffold notes", "Runs"],
              [[c.label, _of(c.passes, c.n), _apart(c.errors, c.skipped), _interval(c.wilson()), score_text(c),
                ", ".join(c.models), ", ".join(c.providers), " and ".join(c.sandboxes),
                "; ".join(s for s in c.scaffold if s) or "—", ", ".join(c.runs)] for c in columns])
    paired = (["A", "B", "A higher", "B higher", "ties", "p", "verdict"],
              [[p.a, p.b, str(p.test.b), str(p.test.c), str(p.test.ties), f"{p.test.p:.4g}", p.test.verdict]
               for p in report.pairs])
    paired_scores = (["A", "B", "A scores higher", "B scores higher", "ties", "W+", "p", "verdict"],
                     [[p.a, p.b, str(p.scores.better), str(p.scores.worse), str(p.scores.ties), f"{p.scores.w_plus:g}",
                       f"{p.scores.p:.4g}" + ("" if p.scores.exact else " (normal approx.)"), p.scores.verdict]
                      for p in report.pairs])
    header = (["Host"] + [f"pass@{k}" for k in report.ks] + [f"pass^{k}" for k in report.ks if k > 1]
              + [f"score@{k}" for k in report.ks])
    rows = []
    for c in columns:
        cases_n = sum(1 for case in report.cases if (cell := report.cell(case, c.label)) and cell.n)
        rows.append([c.label] + [_k_text(c.pass_at[k], cases_n) for k in report.ks]
                    + [_k_text(c.pass_hat[k], cases_n) for k in report.ks if k > 1]
                    + [_k_text(c.score_at[k], cases_n, score=True) for k in report.ks])
    metrics = (["Metric", *(c.label for c in columns)], _metric_rows(columns))
    return {"scores": scores, "paired": paired, "paired_scores": paired_scores, "pass_k": (header, rows),
            "metrics": metrics}


def score_text(column: Column) -> str:
    """A host's mean score with its 95% interval (over its cases), and the runs it could not score."""
    score = column.score
    if score is None:
        return "—"
    text = mean_text(score)
    if score.n < column.metrics.cases_judged:
        text += f" over {score.n} of {column.metrics.cases_judged} cases"
    return text + (f"; {column.unscored} run(s) unscored (written before checks)" if column.unscored else "")


def to_markdown(report: Report) -> str:
    """The report as Markdown: scores, pass@k, case by case, disagreements, metrics, and the limits."""
    columns, labels = report.columns, [c.label for c in report.columns]
    shown = tables(report)
    lines = ["# Palette skill benchmark — results", "",
             f"{report.records - report.duplicates_dropped} record(s) from {len(report.ledgers)} ledger file(s); "
             "every host is judged by the same rules, from what is on disk.", ""]
    if report.lifts:
        skills = [s for c in columns if not c.baseline for s in c.skill_hashes]
        lines += ["## Is the skill better than no skill?", "", lift.intro(skills), "",
                  *table_lines(*lift.table(report.lifts)), ""]
    lines += ["## Scores", ""]
    lines += table_lines(*shown["scores"])
    unconfined = [c.label for c in columns if "unconfined" in c.sandboxes]
    if unconfined:
        lines += ["", f"{unconfined_words(unconfined)}."]
    lines += _cost_lines(columns)
    graded = [(c.label, texts) for c in columns if (texts := _grader_texts(c))]
    if graded:
        lines += ["", "The model-graded checks (rubric, validity) took, apart from the agents: "
                  + "; ".join(f"{label}: {', '.join(texts)}" for label, texts in graded) + "."]
    usage = [(c.label, texts) for c in columns if (texts := _usage_texts(c))]
    if usage:
        lines += ["", "Reported usage: " + "; ".join(f"{label}: {', '.join(texts)}" for label, texts in usage) + "."]
    lines += ["", "Score: each run's score in [0, 1] from its checks (0 when a gate failed; docs/judge.md), averaged "
                  "per case, then over the cases; the interval is a 95% t interval over the cases."]
    if report.pairs:
        lines += ["", "Paired exact test over the cases both hosts judged (sign test on per-case pass rates):", ""]
        lines += table_lines(*shown["paired"])
        lines += ["", "Paired test on scores over the cases both hosts scored (Wilcoxon signed-rank on per-case mean "
                      "scores, exact for small n):", ""]
        lines += table_lines(*shown["paired_scores"])
    lines += ["", "## pass@k, pass^k and score@k", "",
              "pass@k: the chance that at least one of k runs passes (unbiased estimator); pass^k: the chance that "
              "all k pass; score@k: the expected best score of k runs. Averaged over the cases with at least k "
              "judged runs.", ""]
    lines += table_lines(*shown["pass_k"])
    lines += ["", "## Case by case", ""]
    lines += table_lines(["Case", *labels], ([case] + [_cell_text(report.cell(case, label)) for label in labels]
                                              for case in report.cases))
    lines += ["", f"Cells: passes/n judged runs (pass or FAIL for one run), the mean score where below 1 (± its "
                  f"spread over runs), median slides, worst polls; the judge "
                  f"fails a case with more polls that did not wait for the work than its budget "
                  f"({DEFAULT_MAX_POLLS} unless the case sets its own)."]
    lines += _failure_lines(report)
    lines += _instead_lines(report)
    lines += tasks.markdown(report.tasks, report.ks)
    lines += ["", "## Metrics", ""]
    lines += table_lines(*shown["metrics"])
    lines += ["", "## What these numbers are not entitled to say", ""]
    lines += [f"{i}. {note}" for i, note in enumerate(report.caveats, 1)]
    return "\n".join(lines) + "\n"


#: Usage fields the tokens-and-cost table shows; every other summed field is listed in words after it.
COSTED = ("input_tokens", "output_tokens", "cost_usd")
#: Where a column's cost came from, in words.
COST_FROM = {"provider": "reported by the client", "prices": "your --palette-prices table",
             "": "recorded (its source not said)"}


def unconfined_words(hosts: list[str]) -> str:
    """What it means that the agent's commands on `hosts` ran unconfined, in one sentence (the report, `show`)."""
    return (f"Unconfined: the agent's commands on {', '.join(hosts)} ran without the sandbox (--palette-sandbox "
            "none, a person's own agent, or a run recorded before it existed): they could read the scripted "
            "replies and the caller's files, and reach the network")


def _cost_lines(columns: list[Column]) -> list[str]:
    """Tokens and cost per host, where each cost came from, and which model had no price."""
    if not any(c.usage_runs.get(name) for c in columns for name in COSTED):
        return []
    lines = ["", "Tokens and cost, as each host's client reported its tokens; a cost from the client where it "
                 "reports one, else from your price table, else none:", ""]
    rows = []
    for c in columns:
        tokens_in, tokens_out, cost = (c.usage.get(name) for name in COSTED)
        counted = c.usage_runs.get("input_tokens", 0) or c.usage_runs.get("output_tokens", 0)
        per_run = ((tokens_in or 0) + (tokens_out or 0)) / counted if counted else None
        priced = c.usage_runs.get("cost_usd", 0)
        sources = [f"{COST_FROM.get(source, source)}" + (f" ({n} runs)" if len(c.cost_from) > 1 else "")
                   for source, n in c.cost_from.items()]
        if c.unpriced:
            sources.append(f"no price for {', '.join(c.unpriced_models)}: pass --palette-prices"
                           + (f" ({c.unpriced} runs)" if priced else ""))
        rows.append([c.label, _count(tokens_in), _count(tokens_out), _count(per_run), _usd(cost),
                     _usd(cost / priced if cost is not None and priced else None), "; ".join(sources) or "—"])
    lines += table_lines(["Host", "Input tokens", "Output tokens", "Tokens per run (in + out)", "Cost", "Cost per run",
                           "Cost from"], rows)
    rehearsed = [c.label for c in columns if c.cost_from.get("prices")
                 and any(p == "rehearsal" for p in c.providers)]
    if rehearsed:
        lines += ["", f"The cost of {', '.join(rehearsed)} is your price table applied to the rehearsal model's "
                      "estimated tokens: a scripted stand-in ran, nothing was charged."]
    return lines


def _count(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def _usd(value: float | None) -> str:
    return "—" if value is None else money(value)


#: The graders' usage, reported on a line of its own: never summed into the agent's.
GRADED = ("grader_input_tokens", "grader_output_tokens", "grader_cost_usd")


def _grader_texts(column: Column) -> list[str]:
    tokens_in, tokens_out, cost = (column.usage.get(name) for name in GRADED)
    texts = []
    if tokens_in is not None or tokens_out is not None:
        texts.append(f"{tokens_in or 0:,.0f} in / {tokens_out or 0:,.0f} out tokens")
    if cost is not None:
        texts.append(money(cost))
    return texts


def _usage_texts(column: Column) -> list[str]:
    """A column's other reported totals (turns, and any count added to the record) as "<total> <field name>"."""
    texts = []
    for name, total in column.usage.items():
        if total is None or name in COSTED or name in GRADED:
            continue
        texts.append(f"{total:,}" if isinstance(total, int) else f"{total:,.2f}")
        texts[-1] += f" {name.replace('_', ' ')}"
    return texts


def _k_text(value: tuple[float | None, int], cases_n: int, score: bool = False) -> str:
    mean, over = value
    if mean is None:
        return "— (k > n)"
    return (f"{mean:.2f}" if score else _pct(mean)) + ("" if over == cases_n else f" ({over} cases)")


def _instead_lines(report: Report) -> list[str]:
    """For the columns that ran with no skill: what the agent did about a deck, in all and case by case."""
    baseline = [c for c in report.columns if c.baseline]
    counted = lift.instead_table((c.label, c.instead) for c in baseline)
    if counted is None:
        return []

    def did(cell: Cell | None) -> str:
        done = lift.instead([cell]) if cell is not None else Counter()
        if len(done) == 1 and sum(done.values()) == 1:
            return next(iter(done))
        return "; ".join(f"{what} ×{n}" for what, n in done.most_common()) or "—"

    return ["", "## What the agent did instead (no skill)", "", lift.INSTEAD, "", *table_lines(*counted), "",
            *table_lines(["Case", *(c.label for c in baseline)],
                         ([case, *(did(report.cell(case, c.label)) for c in baseline)] for case in report.cases))]


def _failure_lines(report: Report) -> list[str]:
    if len(report.columns) == 1:
        label = report.columns[0].label
        lines = ["", "## Failures", ""]
        failing = [case for case in report.cases if (c := report.cell(case, label)) and (c.fails or c.errors)]
        if not failing:
            return [*lines, "None. Every judged run passed."]
        for case in failing:
            failed = report.cells[(case, label)]
            lines.append(f"- **{case}** ({_of(failed.passes, failed.n)}): " + _failure_text(failed))
            if failed.chains:
                chain, _ = failed.chains.most_common(1)[0]
                lines.append(f"  - calls: {' → '.join(chain) or 'none'}")
        return lines
    lines = ["", "## Where the hosts disagree", ""]
    if not report.disagreements:
        return [*lines, "Nowhere: the hosts agreed on every case they both judged."]
    for case in report.disagreements:
        lines.append(f"- **{case}**")
        for column in report.columns:
            cell = report.cell(case, column.label)
            if cell is None:
                lines.append(f"  - {column.label}: did not run")
            elif not (cell.fails or cell.errors):
                lines.append(f"  - {column.label} ({_of(cell.passes, cell.n)}): passed every judged run")
            else:
                lines.append(f"  - {column.label} ({_of(cell.passes, cell.n)}): {_failure_text(cell)}")
    return lines


def _failure_text(cell: Cell) -> str:
    def counted(counter: Counter[str], prefix: str = "") -> list[str]:
        return [f"{prefix}{text}" + (f" (×{count})" if count > 1 else "") for text, count in counter.most_common()]

    return "; ".join(counted(cell.failures) + counted(cell.host_errors, "error: "))


def _metric_rows(columns: list[Column]) -> list[list[str]]:
    m = [c.metrics for c in columns]

    def row(name: str, render: Callable[[Metrics], str]) -> list[str]:
        return [name, *(render(x) for x in m)]

    return [
        row("Cases passed (every judged run)", lambda x: _of(x.cases_passed, x.cases_judged)),
        row("Runs passed", lambda x: _of(x.runs_passed, x.runs_judged)),
        row("Decks built", lambda x: _of(x.decks_built, x.runs_judged)),
        row("Decks carrying IBM Plex", lambda x: _of(x.decks_with_plex, x.decks_built)),
        row("Median case duration", lambda x: _num(x.median_case_seconds, " s")),
        row("Total wall clock (first start → last end)", lambda x: _minutes(x.wall_clock_seconds)),
        row("Median Palette calls per case", lambda x: _num(x.median_calls)),
        row("Status polls (total)", lambda x: str(x.polls_total)),
        row("Worst case polls that did not wait", lambda x: f"{x.polls_worst} / {x.polls_worst_ceiling}"),
        row("Runs at their case's poll ceiling", lambda x: str(x.at_poll_ceiling)),
        row("Runs over their case's poll ceiling", lambda x: str(x.over_poll_ceiling)),
        row("Pasted material reached `--context` (or `--source`)",
            lambda x: _of(x.context_reached, x.context_expected)),
        row("Edits routed to `edit`", lambda x: _of(x.edit_called, x.edit_expected)),
        row("Revisions discarded by re-planning", lambda x: str(x.replanned_after_edit)),
        row("Trigger recall: the skill used where the request needed it",
            lambda x: x.triggers.recall_text()),
        row("Trigger precision: the skill needed where it was used",
            lambda x: x.triggers.precision_text()),
    ]


def _minutes(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds / 60:.1f} min"


def _score_json(score: stats.MeanScore | None) -> dict[str, Any] | None:
    return None if score is None else {"mean": score.mean, "sd": score.sd, "n": score.n,
                                       "interval": list(score.interval) if score.interval else None}


def _signed_rank_json(test: stats.SignedRankTest) -> dict[str, Any]:
    return {"test": "wilcoxon signed-rank", "a_higher": test.better, "b_higher": test.worse, "ties": test.ties,
            "w_plus": test.w_plus, "p": test.p, "exact": test.exact, "verdict": test.verdict}


def to_json(report: Report) -> dict[str, Any]:
    """The same numbers as the Markdown, for machines."""

    def k_map(values: dict[int, tuple[float | None, int]]) -> dict[str, Any]:
        return {str(k): {"value": v, "cases": n} for k, (v, n) in values.items()}

    def cell_json(cell: Cell) -> dict[str, Any]:
        return {"passes": cell.passes, "fails": cell.fails, "errors": cell.errors, "skipped": cell.skipped,
                "n": cell.n, "wilson": stats.wilson(cell.passes, cell.n),
                "pass_at_k": {str(k): stats.pass_at_k(cell.n, cell.passes, k) if cell.n else None
                              for k in report.ks},
                "pass_hat_k": {str(k): stats.pass_hat_k(cell.n, cell.passes, k) if cell.n else None
                               for k in report.ks},
                "score": _score_json(cell.score), "unscored": cell.unscored,
                "score_at_k": {str(k): stats.score_at_k(cell.scores, k) if cell.scores else None for k in report.ks},
                "median_slides": stats.weighted_median(dict(cell.slides)),
                "worst_polls": max(cell.polls) if cell.polls else None,
                "failures": dict(cell.failures.most_common()), "host_errors": dict(cell.host_errors.most_common())}

    return {
        "schema": 2, "records": report.records, "duplicates_dropped": report.duplicates_dropped,
        "skipped_lines": report.skipped_lines, "ledgers": report.ledgers, "ks": report.ks,
        "groups": {letter: {"skill_hash": s, "fingerprint": f} for letter, (s, f) in report.groups.items()},
        "hosts": [{"label": c.label, "host": c.host, "group": c.group or None, "models": c.models,
                   "providers": c.providers, "scaffold": c.scaffold, "sandboxes": c.sandboxes,
                   "skill_hashes": c.skill_hashes,
                   "fingerprints": c.fingerprints, "runs": c.runs, "passes": c.passes, "fails": c.fails,
                   "errors": c.errors, "skipped": c.skipped, "n": c.n, "wilson": c.wilson(),
                   "pass_at_k": k_map(c.pass_at), "pass_hat_k": k_map(c.pass_hat), "score": _score_json(c.score),
                   "score_at_k": k_map(c.score_at), "unscored": c.unscored, "metrics": c.metrics.to_json(),
                   "usage": c.usage, "usage_runs": c.usage_runs, "cost_from": c.cost_from,
                   "unpriced": {"runs": c.unpriced, "models": c.unpriced_models},
                   "baseline": c.baseline, "instead": dict(c.instead.most_common())} for c in report.columns],
        "cases": [{"case": case, "cells": {label: cell_json(cell) for label in (c.label for c in report.columns)
                                           if (cell := report.cell(case, label)) is not None}}
                  for case in report.cases],
        "paired": [{"a": p.a, "b": p.b, "a_higher": p.test.b, "b_higher": p.test.c, "ties": p.test.ties,
                    "p": p.test.p, "verdict": p.test.verdict, "scores": _signed_rank_json(p.scores)}
                   for p in report.pairs],
        "lift": [{"host": h.host, "with_skill": {"passes": h.with_skill[0], "n": h.with_skill[1]},
                  "without": {"passes": h.without[0], "n": h.without[1]}, "lift": h.lift, "shared": h.shared,
                  "skill_higher": h.test.b, "no_skill_higher": h.test.c, "ties": h.test.ties, "p": h.test.p,
                  "verdict": h.test.verdict} for h in report.lifts],
        "disagreements": report.disagreements,
        "discriminating": f"{len(report.disagreements)} of {len(report.cases)}",
        "caveats": report.caveats,
        "tasks": tasks.to_json(report.tasks, report.ks),
    }
