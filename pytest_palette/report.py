"""`palette-bench report RUN_OR_FOLDER`: every results.jsonl under a folder, as Markdown and JSON.

The report is built from a columnar `ledger.Table`, so a million records cost 76 bytes each and the
aggregation runs in C-level passes (Counter over zipped columns) rather than a Python loop per record.
Everything printed is sorted by name, so shards read in any order give the same report.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import stats
from .ledger import CONFIG_FIELDS, LEDGER_NAME, SHAPE_FIELDS, LedgerError, Table, ledger_files, load_table

#: The judge's default poll budget: the seed counts cases at it and over it.
POLL_CEILING = 12
_OUT, _FAILURES, _SLIDES, _PLEX, _DECK, _POLLS, _CALLS, _CEXP, _CREACH, _EEXP, _ECALL, _REPLAN = range(
    len(SHAPE_FIELDS))
_MODEL, _PROVIDER, _SKILL, _FINGERPRINT, _VERSION, _SCAFFOLD = range(len(CONFIG_FIELDS))
JUDGED = ("pass", "fail")


class ReportError(Exception):
    """Records that cannot honestly be reported together (or nothing to report)."""


@dataclass
class Cell:
    """One case on one host: outcome counts and what its judged runs left."""

    passes: int = 0
    fails: int = 0
    errors: int = 0
    skipped: int = 0
    slides: Counter[int] = field(default_factory=Counter)
    polls: Counter[int] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)
    host_errors: Counter[str] = field(default_factory=Counter)
    chains: Counter[tuple[str, ...]] = field(default_factory=Counter)

    @property
    def n(self) -> int:
        """Judged runs: errors and skips are not verdicts and stay out of every denominator."""
        return self.passes + self.fails

    @property
    def total(self) -> int:
        return self.n + self.errors + self.skipped

    def rate(self) -> tuple[int, int]:
        return self.passes, self.n


@dataclass
class Column:
    """One host (or, in a mixed report, one host under one skill hash and fingerprint)."""

    label: str
    host: str
    group: str = ""
    models: list[str] = field(default_factory=list)
    providers: list[str] = field(default_factory=list)
    scaffold: list[str] = field(default_factory=list)
    skill_hashes: list[str] = field(default_factory=list)
    fingerprints: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    passes: int = 0
    fails: int = 0
    errors: int = 0
    skipped: int = 0
    pass_at: dict[int, tuple[float | None, int]] = field(default_factory=dict)
    pass_hat: dict[int, tuple[float | None, int]] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    cost_usd: float | None = None
    tokens: dict[str, int] | None = None

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

    def cell(self, case: str, label: str) -> Cell | None:
        return self.cells.get((case, label))


# ---------------------------------------------------------------------------------------------- building


def _table(records: Table | Iterable[dict[str, Any]]) -> Table:
    if isinstance(records, Table):
        return records
    table = Table()
    try:
        table.add_records(records)
    except LedgerError as error:
        raise ReportError(f"not a valid ledger record: {error}") from error
    return table


def _picker(table: Table, rows: list[int] | None) -> Callable[[str], Iterator[Any]]:
    """Iterate a column over the surviving rows only (all of them when nothing was dropped)."""

    def pick(name: str) -> Iterator[Any]:
        column = table.columns[name]
        return iter(column) if rows is None else map(column.__getitem__, rows)

    return pick


Config = tuple[Any, ...]


@dataclass
class Group:
    """The per-run numbers of one (host, configuration): what cannot be derived from shapes."""

    seconds: list[float] = field(default_factory=list)  # judged runs that reported a time
    first_start: float = math.inf
    last_end: float = -math.inf
    costs: list[float] = field(default_factory=list)
    tokens: list[int] | None = None  # [input, output], None when no run reported tokens
    runs: set[str] = field(default_factory=set)

    def merge(self, other: Group) -> None:
        self.seconds += other.seconds
        self.first_start = min(self.first_start, other.first_start)
        self.last_end = max(self.last_end, other.last_end)
        self.costs += other.costs
        if other.tokens is not None:
            self.tokens = [a + b for a, b in zip(self.tokens or [0, 0], other.tokens, strict=True)]
        self.runs |= other.runs


@dataclass
class Summary:
    """Everything the report needs from the rows, keyed by values (not ids), so partial summaries from
    several reader processes merge by addition."""

    combos: Counter[tuple[str, str, Config, tuple[Any, ...]]] = field(default_factory=Counter)
    groups: dict[tuple[str, Config], Group] = field(default_factory=dict)
    case_hashes: set[tuple[str, str]] = field(default_factory=set)

    def merge(self, other: Summary) -> None:
        self.combos.update(other.combos)
        for key, group in other.groups.items():
            if key in self.groups:
                self.groups[key].merge(group)
            else:
                self.groups[key] = group
        self.case_hashes |= other.case_hashes


def summarise(table: Table, rows: list[int] | None = None) -> Summary:
    """One pass of C-level counting over the rows (all, or the survivors): (case, host, config, shape)
    counts, and per (host, config) the times, costs, tokens and run ids, through row masks."""
    pick = _picker(table, rows)
    hosts, configs, cases = table.hosts.items, table.configs.items, table.cases.items
    pairs = list(zip(pick("host"), pick("config"), strict=True))
    index = {pair: i for i, pair in enumerate(dict.fromkeys(pairs))}
    group_of = list(map(index.__getitem__, pairs))
    keys = [(hosts[h], configs[c]) for h, c in index]
    summary = Summary()
    shapes = table.shapes.items
    for (case, g, shape), count in Counter(zip(pick("case"), group_of, pick("shape"), strict=True)).items():
        host, config = keys[g]
        summary.combos[(cases[case], host, config, shapes[shape])] += count
    judged_shape = [shape[_OUT] in JUDGED for shape in shapes]
    judged = list(map(judged_shape.__getitem__, pick("shape")))
    for g, key in enumerate(keys):
        mask = list(map(g.__eq__, group_of)) if len(keys) > 1 else [True] * len(group_of)
        group = summary.groups[key] = Group()
        group.seconds = [x for x in itertools.compress(pick("seconds"), map(bool.__and__, mask, judged)) if x == x]
        group.first_start = min(itertools.compress(pick("started"), mask), default=math.inf)
        group.last_end = max(itertools.compress(pick("ended"), mask), default=-math.inf)
        group.costs = [x for x in itertools.compress(pick("cost"), mask) if x == x]  # NaN: not reported
        tokens_in = [x for x in itertools.compress(pick("tokens_in"), mask) if x >= 0]  # -1: not reported
        if tokens_in:
            group.tokens = [sum(tokens_in), sum(x for x in itertools.compress(pick("tokens_out"), mask) if x >= 0)]
    for g, run in set(zip(group_of, pick("run"), strict=True)):
        summary.groups[keys[g]].runs.add(table.runs.items[run])
    summary.case_hashes = {(cases[c], table.case_hashes.items[h])
                           for c, h in set(zip(pick("case"), pick("case_hash"), strict=True))}
    return summary


def _columns_for(summary: Summary, allow_mixed: bool
                 ) -> tuple[dict[tuple[str, Config], int], list[Column], dict[str, tuple[str, str]]]:
    """Which column each (host, configuration) lands in; refuse mixed measurements unless allowed."""
    combos = list(summary.groups)
    skills = sorted({config[_SKILL] for _, config in combos})
    per_host: dict[str, set[str]] = {}
    for host, config in combos:
        per_host.setdefault(host, set()).add(config[_FINGERPRINT])
    split = {h: fps for h, fps in per_host.items() if len(fps) > 1}
    mixed = len(skills) > 1 or bool(split)
    if mixed and not allow_mixed:
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
    if mixed:
        keys = sorted({(config[_SKILL], config[_FINGERPRINT]) for _, config in combos})
        groups = {key: _letter(i) for i, key in enumerate(keys)}
    by_label: dict[str, Column] = {}
    where: dict[tuple[str, Config], str] = {}
    for host, config in combos:
        group = groups.get((config[_SKILL], config[_FINGERPRINT]), "")
        label = f"{host} [{group}]" if group else host
        column = by_label.setdefault(label, Column(label=label, host=host, group=group))
        _add_unique(column.models, config[_MODEL])
        _add_unique(column.providers, config[_PROVIDER])
        _add_unique(column.skill_hashes, config[_SKILL])
        _add_unique(column.fingerprints, config[_FINGERPRINT])
        _add_unique(column.scaffold, " · ".join(f"{k}={v}" for k, v in config[_SCAFFOLD]))
        where[(host, config)] = label
    ordered = sorted(by_label.values(), key=lambda c: (c.host, c.group))
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


def build_report(records: Table | Iterable[dict[str, Any]], *, allow_mixed: bool = False) -> Report:
    """Aggregate records (a Table from load_table, or validated record dicts) into a Report."""
    table = _table(records)
    if not len(table):
        raise ReportError("no records to report")
    rows, dropped = table.survivors()
    # The readers' summary covers every row: usable only when no duplicate has to be dropped.
    summary = table.summary if rows is None and isinstance(table.summary, Summary) else summarise(table, rows)
    where, columns, groups = _columns_for(summary, allow_mixed)

    cells: dict[tuple[str, str], Cell] = {}
    by_col_shape: Counter[tuple[int, tuple[Any, ...]]] = Counter()
    # Python work per distinct (case, host, config, shape) only, never per run.
    for (case, host, config, shape), count in summary.combos.items():
        col = where[(host, config)]
        key = (case, columns[col].label)
        cell = cells.get(key)
        if cell is None:
            cell = cells[key] = Cell()
        _tally_cell(cell, shape, count)
        by_col_shape[(col, shape)] += count
    metrics = [_MetricTally() for _ in columns]
    for (col, shape), count in by_col_shape.items():
        metrics[col].add(shape, count)
    merged: dict[int, Group] = {}
    for pair, group in summary.groups.items():
        merged.setdefault(where[pair], Group()).merge(group)
    for col, group in merged.items():
        metrics[col].seconds = group.seconds
        metrics[col].first_start, metrics[col].last_end = group.first_start, group.last_end
        column = columns[col]
        column.cost_usd = round(math.fsum(group.costs), 6) if group.costs else None  # fsum: order-free
        column.tokens = {"input": group.tokens[0], "output": group.tokens[1]} if group.tokens else None
        column.runs = sorted(group.runs)

    cases = sorted({case for case, _ in cells})
    max_n = max((cell.n for cell in cells.values()), default=0)
    ks = stats.ks_for(max_n)
    for col, column in enumerate(columns):
        own = [cells[(case, column.label)] for case in cases if (case, column.label) in cells]
        column.passes = sum(c.passes for c in own)
        column.fails = sum(c.fails for c in own)
        column.errors = sum(c.errors for c in own)
        column.skipped = sum(c.skipped for c in own)
        column.pass_at, column.pass_hat = _pass_k(own, ks)
        column.metrics = metrics[col].finish(own)

    disagreements = _disagreements(cases, columns, cells)
    pairs = [Pair(a.label, b.label, stats.paired_test(*_shared_rates(cases, a, b, cells)))
             for a, b in itertools.combinations(columns, 2)]
    report = Report(columns=columns, cases=cases, cells=cells, ks=ks, records=len(table),
                    duplicates_dropped=dropped, skipped_lines=len(table.problems), ledgers=list(table.files),
                    groups=groups, pairs=pairs, disagreements=disagreements, caveats=[])
    report.caveats = _caveats(report, summary)
    return report


def _bump(counter: Counter[Any], key: Any, count: int) -> None:
    counter[key] = counter.get(key, 0) + count  # get(): Counter's += calls __missing__ in Python


def _tally_cell(cell: Cell, shape: tuple[Any, ...], count: int) -> None:
    outcome = shape[_OUT]
    if outcome == "pass":
        cell.passes += count
    elif outcome == "fail":
        cell.fails += count
        for failure in shape[_FAILURES] or ("(no failure recorded)",):
            _bump(cell.failures, failure, count)
        _bump(cell.chains, shape[_CALLS], count)
    elif outcome == "error":
        cell.errors += count
        for message in shape[_FAILURES] or ("(no error recorded)",):
            _bump(cell.host_errors, message, count)
    else:
        cell.skipped += count
    if outcome in JUDGED:
        if shape[_SLIDES] is not None:
            _bump(cell.slides, shape[_SLIDES], count)
        if shape[_POLLS] is not None:
            _bump(cell.polls, shape[_POLLS], count)


class _MetricTally:
    """The seed's metrics for one column, over judged runs, accumulated from shape counts."""

    def __init__(self) -> None:
        self.judged = self.decks = self.plex = 0
        self.calls: Counter[int] = Counter()
        self.polls_total = self.polls_worst = self.at_ceiling = self.over_ceiling = 0
        self.context_expected = self.context_reached = self.edit_expected = self.edit_called = 0
        self.replanned = 0
        self.seconds: list[float] = []
        self.first_start = math.inf
        self.last_end = -math.inf

    def add(self, shape: tuple[Any, ...], count: int) -> None:
        if shape[_OUT] not in JUDGED:
            return
        self.judged += count
        self.decks += count * shape[_DECK]
        self.plex += count * (shape[_DECK] and shape[_PLEX])
        self.calls[len(shape[_CALLS])] += count
        polls = shape[_POLLS]
        if polls is not None:
            self.polls_total += polls * count
            self.polls_worst = max(self.polls_worst, polls)
            self.at_ceiling += count * (polls == POLL_CEILING)
            self.over_ceiling += count * (polls > POLL_CEILING)
        if shape[_CEXP]:
            self.context_expected += count
            self.context_reached += count * shape[_CREACH]
        if shape[_EEXP]:
            self.edit_expected += count
            self.edit_called += count * shape[_ECALL]
        self.replanned += count * shape[_REPLAN]

    def finish(self, cells: list[Cell]) -> dict[str, Any]:
        wall = self.last_end - self.first_start if self.last_end >= self.first_start else None
        return {
            "runs_judged": self.judged,
            "runs_passed": sum(c.passes for c in cells),
            "cases_passed": sum(1 for c in cells if c.n and c.passes == c.n),
            "cases_judged": sum(1 for c in cells if c.n),
            "decks_built": self.decks,
            "decks_with_plex": self.plex,
            "median_case_seconds": stats.median(self.seconds),
            "wall_clock_seconds": wall,
            "median_calls": stats.weighted_median(dict(self.calls)),
            "polls_total": self.polls_total,
            "polls_worst": self.polls_worst,
            "at_poll_ceiling": self.at_ceiling,
            "over_poll_ceiling": self.over_ceiling,
            "context_expected": self.context_expected,
            "context_reached": self.context_reached,
            "edit_expected": self.edit_expected,
            "edit_called": self.edit_called,
            "replanned_after_edit": self.replanned,
        }


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


def _caveats(report: Report, summary: Summary) -> list[str]:
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
    changed = Counter(case for case, _ in summary.case_hashes)
    renamed = sorted(case for case, count in changed.items() if count > 1)
    if renamed:
        notes.append(f"**{len(renamed)} case(s) changed between runs** (more than one case hash): "
                     f"{', '.join(renamed)}. Their runs asked different questions.")
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
    if cell is None:
        return "—"
    if cell.n == 0:
        return f"⚠ ERROR ×{cell.errors}" if cell.errors else "skipped"
    if cell.n == 1:
        head = "✅ pass" if cell.passes else "❌ FAIL"
    else:
        head = f"{'✅' if cell.passes == cell.n else '❌' if not cell.passes else '◐'} {cell.passes}/{cell.n}"
    extra = _apart(cell.errors, cell.skipped)
    slides = stats.weighted_median(dict(cell.slides))
    polls = max(cell.polls) if cell.polls else None
    parts = [head, f"{_num(slides)} sl" if slides is not None else "? sl", f"{polls}p" if polls is not None else "?p"]
    return " · ".join(parts) + (f" (+{extra})" if extra != "—" else "")


def _row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(text.replace("|", "\\|") for text in cells) + " |"


def _table_lines(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    return [_row(header), _row(["---"] * len(header)), *(_row(r) for r in rows)]


def to_markdown(report: Report) -> str:
    """The report as Markdown: scores, pass@k, case by case, disagreements, metrics, and the limits."""
    columns, labels = report.columns, [c.label for c in report.columns]
    lines = ["# Palette skill benchmark — results", "",
             f"{report.records - report.duplicates_dropped} record(s) from {len(report.ledgers)} ledger file(s); "
             "every host is judged by the same rules, from what is on disk.", ""]
    lines += ["## Scores", ""]
    lines += _table_lines(
        ["Host", "Passed", "Errors / skipped", "95% interval (Wilson)", "Model", "Provider", "Scaffold notes",
         "Runs"],
        ([c.label, _of(c.passes, c.n), _apart(c.errors, c.skipped), _interval(c.wilson()), ", ".join(c.models),
          ", ".join(c.providers), "; ".join(s for s in c.scaffold if s) or "—", ", ".join(c.runs)]
         for c in columns))
    usage = [c for c in columns if c.cost_usd is not None or c.tokens is not None]
    if usage:
        lines += ["", "Reported usage: " + "; ".join(
            f"{c.label}: " + ", ".join(([f"${c.cost_usd:.2f}"] if c.cost_usd is not None else [])
                                       + ([f"{c.tokens['input']:,} in / {c.tokens['output']:,} out tokens"]
                                          if c.tokens else [])) for c in usage) + "."]
    if report.pairs:
        lines += ["", "Paired exact test over the cases both hosts judged (sign test on per-case pass rates):", ""]
        lines += _table_lines(["A", "B", "A higher", "B higher", "ties", "p", "verdict"],
                              ([p.a, p.b, str(p.test.b), str(p.test.c), str(p.test.ties), f"{p.test.p:.4g}",
                                p.test.verdict] for p in report.pairs))
    lines += ["", "## pass@k and pass^k", "",
              "pass@k: the chance that at least one of k runs passes (unbiased estimator); pass^k: the chance that "
              "all k pass. Averaged over the cases with at least k judged runs.", ""]
    header = ["Host"] + [f"pass@{k}" for k in report.ks] + [f"pass^{k}" for k in report.ks if k > 1]
    rows = []
    for c in columns:
        cases_n = sum(1 for case in report.cases if (cell := report.cell(case, c.label)) and cell.n)
        rows.append([c.label] + [_k_text(c.pass_at[k], cases_n) for k in report.ks]
                    + [_k_text(c.pass_hat[k], cases_n) for k in report.ks if k > 1])
    lines += _table_lines(header, rows)
    lines += ["", "## Case by case", ""]
    lines += _table_lines(["Case", *labels], ([case] + [_cell_text(report.cell(case, label)) for label in labels]
                                              for case in report.cases))
    lines += ["", f"Cells: passes/n judged runs (pass or FAIL for one run), median slides, worst polls; the judge "
                  f"fails a case above its poll budget ({POLL_CEILING} by default)."]
    lines += _failure_lines(report)
    lines += ["", "## Metrics", ""]
    lines += _table_lines(["Metric", *labels], _metric_rows(columns))
    lines += ["", "## What these numbers are not entitled to say", ""]
    lines += [f"{i}. {note}" for i, note in enumerate(report.caveats, 1)]
    return "\n".join(lines) + "\n"


def _k_text(value: tuple[float | None, int], cases_n: int) -> str:
    mean, over = value
    if mean is None:
        return "— (k > n)"
    return _pct(mean) + ("" if over == cases_n else f" ({over} cases)")


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

    def row(name: str, render: Callable[[dict[str, Any]], str]) -> list[str]:
        return [name, *(render(x) for x in m)]

    return [
        row("Cases passed (every judged run)", lambda x: _of(x["cases_passed"], x["cases_judged"])),
        row("Runs passed", lambda x: _of(x["runs_passed"], x["runs_judged"])),
        row("Decks built", lambda x: _of(x["decks_built"], x["runs_judged"])),
        row("Decks carrying IBM Plex", lambda x: _of(x["decks_with_plex"], x["decks_built"])),
        row("Median case duration", lambda x: _num(x["median_case_seconds"], " s")),
        row("Total wall clock (first start → last end)", lambda x: _minutes(x["wall_clock_seconds"])),
        row("Median Palette calls per case", lambda x: _num(x["median_calls"])),
        row("Status polls (total)", lambda x: str(x["polls_total"])),
        row("Worst case polls", lambda x: f"{x['polls_worst']} / {POLL_CEILING}"),
        row(f"Runs at the poll ceiling (exactly {POLL_CEILING})", lambda x: str(x["at_poll_ceiling"])),
        row(f"Runs over the poll ceiling (> {POLL_CEILING})", lambda x: str(x["over_poll_ceiling"])),
        row("Pasted material reached `--context` (or `--source`)",
            lambda x: _of(x["context_reached"], x["context_expected"])),
        row("Edits routed to `edit`", lambda x: _of(x["edit_called"], x["edit_expected"])),
        row("Revisions discarded by re-planning", lambda x: str(x["replanned_after_edit"])),
    ]


def _minutes(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds / 60:.1f} min"


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
                "median_slides": stats.weighted_median(dict(cell.slides)),
                "worst_polls": max(cell.polls) if cell.polls else None,
                "failures": dict(cell.failures.most_common()), "host_errors": dict(cell.host_errors.most_common())}

    return {
        "schema": 1, "records": report.records, "duplicates_dropped": report.duplicates_dropped,
        "skipped_lines": report.skipped_lines, "ledgers": report.ledgers, "ks": report.ks,
        "groups": {letter: {"skill_hash": s, "fingerprint": f} for letter, (s, f) in report.groups.items()},
        "hosts": [{"label": c.label, "host": c.host, "group": c.group or None, "models": c.models,
                   "providers": c.providers, "scaffold": c.scaffold, "skill_hashes": c.skill_hashes,
                   "fingerprints": c.fingerprints, "runs": c.runs, "passes": c.passes, "fails": c.fails,
                   "errors": c.errors, "skipped": c.skipped, "n": c.n, "wilson": c.wilson(),
                   "pass_at_k": k_map(c.pass_at), "pass_hat_k": k_map(c.pass_hat), "metrics": c.metrics,
                   "cost_usd": c.cost_usd, "tokens": c.tokens} for c in report.columns],
        "cases": [{"case": case, "cells": {label: cell_json(cell) for label in (c.label for c in report.columns)
                                           if (cell := report.cell(case, label)) is not None}}
                  for case in report.cases],
        "paired": [{"a": p.a, "b": p.b, "a_higher": p.test.b, "b_higher": p.test.c, "ties": p.test.ties,
                    "p": p.test.p, "verdict": p.test.verdict} for p in report.pairs],
        "disagreements": report.disagreements,
        "discriminating": f"{len(report.disagreements)} of {len(report.cases)}",
        "caveats": report.caveats,
    }


# ---------------------------------------------------------------------------------------------- command


def load(path: Path) -> Table:
    """The table under `path`; ReportError naming the path when there is nothing to report."""
    if not path.exists():
        raise ReportError(f"{path}: no such file or folder")
    if not ledger_files(path):
        raise ReportError(f"{path}: no {LEDGER_NAME} at or under it — nothing was recorded there")
    table = load_table(path, summarise=summarise)
    if not len(table):
        raise ReportError(f"{path}: its ledger(s) hold no valid record ({len(table.problems)} line(s) skipped)")
    return table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", type=Path, metavar="RUN_OR_FOLDER",
                        help="a run folder, or a folder of runs or shards: every results.jsonl under it is read")
    parser.add_argument("--out", type=Path, help="write the Markdown here instead of printing it")
    parser.add_argument("--json", type=Path, help="also write the numbers as JSON here")
    parser.add_argument("--allow-mixed", action="store_true",
                        help="report records of different skill hashes or fingerprints side by side (never pooled)")


def run(args: argparse.Namespace) -> int:
    try:
        report = build_report(load(args.run), allow_mixed=args.allow_mixed)
    except ReportError as error:
        print(f"palette-bench report: {error}", file=sys.stderr)
        return 2
    if args.json:
        _write(args.json, json.dumps(to_json(report), indent=2, ensure_ascii=False) + "\n")
    emit_markdown(to_markdown(report), args.out, also=args.json)
    return 0


def emit_markdown(markdown: str, out: Path | None, also: Path | None = None) -> None:
    """The Markdown to `out`, saying what was written (and `also`, written beside it), or to stdout."""
    if out is None:
        sys.stdout.write(markdown)
        return
    _write(out, markdown)
    print(f"wrote {out}" + (f" and {also}" if also else ""))


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
