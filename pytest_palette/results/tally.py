"""Records counted per (case, host, terms): the one aggregation behind the terminal table, `report` and `compare`.

Within a cell, runs are counted by what they found — (outcome, failures, judged facts) — so what reads a cell
works once per distinct result, not once per run: a thousand identical passes are one entry with a count.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from operator import attrgetter

from ..cases import DEFAULT_MAX_POLLS
from . import stats
from .checks import derived_score
from .ledger import Reading, latest
from .record import Judged, Record, Terms, Usage

#: Usage fields a report sums per column (the rest are times, reported by their own metrics, and where the
#: cost came from, counted apart; why turns ended is counted by the ERRORs that name it).
SUMMED = tuple(name for name in Usage.__struct_fields__
               if name not in ("seconds", "started_at", "ended_at", "cost_source", "stops"))

Result = tuple[str, tuple[str, ...], "Judged | None"]  # (outcome, failures, judged)


@dataclass
class Cell:
    """One case under one host and terms (or merged across them): its runs, counted by what they found."""

    runs: Counter[Result] = field(default_factory=Counter)
    seconds: list[float] = field(default_factory=list)  # of judged runs that reported a time

    def merge(self, other: Cell) -> Cell:
        return Cell(self.runs + other.runs, self.seconds + other.seconds)

    @cached_property
    def outcomes(self) -> Counter[str]:
        """Runs per outcome."""
        return _counted((outcome, count) for (outcome, _, _), count in self.runs.items())

    @property
    def passes(self) -> int:
        return self.outcomes["pass"]

    @property
    def fails(self) -> int:
        return self.outcomes["fail"]

    @property
    def errors(self) -> int:
        return self.outcomes["error"]

    @property
    def skipped(self) -> int:
        return self.outcomes["skipped"]

    @property
    def n(self) -> int:
        """Judged runs: errors and skips are not verdicts and stay out of every denominator."""
        return self.passes + self.fails

    @property
    def total(self) -> int:
        return sum(self.runs.values())

    def rate(self) -> tuple[int, int]:
        return self.passes, self.n

    def judged(self) -> Iterable[tuple[Judged, int]]:
        """The judged facts of each pass and fail, with how many runs found them."""
        return ((facts, count) for (_, _, facts), count in self.runs.items() if facts is not None)

    @cached_property
    def slides(self) -> Counter[int]:
        return _counted((facts.slides, count) for facts, count in self.judged() if facts.slides is not None)

    @cached_property
    def polls(self) -> Counter[int]:
        return _counted((facts.polls, count) for facts, count in self.judged() if facts.polls is not None)

    @cached_property
    def failures(self) -> Counter[str]:
        """Each failed rule of the failed runs, with how many runs failed it."""
        return _counted((failure, count) for (out, failures, _), count in self.runs.items() if out == "fail"
                        for failure in failures or ("(no failure recorded)",))

    @cached_property
    def host_errors(self) -> Counter[str]:
        return _counted((message, count) for (out, failures, _), count in self.runs.items() if out == "error"
                        for message in failures or ("(no error recorded)",))

    @cached_property
    def scores(self) -> list[float]:
        """Each judged run's score (results/checks.py), where it is known: a record written before checks that
        failed a scored check has none, and is counted in `unscored` instead of guessed."""
        found: list[float] = []
        for (outcome, failures, facts), count in self.runs.items():
            score = derived_score(outcome, failures, facts)
            if score is not None:
                found += [score] * count
        return found

    @property
    def unscored(self) -> int:
        return self.n - len(self.scores)

    @cached_property
    def score(self) -> stats.MeanScore | None:
        """The judged runs' mean score, its spread and interval; None when no score is known."""
        return stats.mean_score(self.scores)

    @cached_property
    def chains(self) -> Counter[tuple[str, ...]]:
        """The call chains of the failed runs: what the agent did instead."""
        return _counted((facts.calls, count) for (out, _, facts), count in self.runs.items()
                        if out == "fail" and facts is not None)


def _counted(pairs: Iterable[tuple[object, int]]) -> Counter:  # type: ignore[type-arg]
    counter: Counter = Counter()  # type: ignore[type-arg]
    for key, count in pairs:
        counter[key] = counter.get(key, 0) + count  # get(): Counter's += goes through __missing__ in Python
    return counter


@dataclass
class Group:
    """The runs of one host under one set of terms: what cannot be counted per distinct result."""

    runs: set[str] = field(default_factory=set)  # run ids
    first_start: float = math.inf
    last_end: float = -math.inf
    #: Per summed usage field, the values the runs reported (a host that does not count reports none).
    reported: dict[str, list[float]] = field(default_factory=lambda: {name: [] for name in SUMMED})
    #: Runs with a cost, by where it came from (Usage.cost_source; "" in records that did not say).
    cost_from: Counter[str] = field(default_factory=Counter)
    #: Runs that reported tokens and no cost: no price was known for their model.
    unpriced: int = 0

    def merge(self, other: Group) -> None:
        self.runs |= other.runs
        self.first_start = min(self.first_start, other.first_start)
        self.last_end = max(self.last_end, other.last_end)
        for name, values in other.reported.items():
            self.reported[name] += values
        self.cost_from.update(other.cost_from)
        self.unpriced += other.unpriced

    def total(self, name: str) -> float | None:
        """The field's total over the runs that reported it (None when none did); fsum, so shards read in any
        order give the same total."""
        values = self.reported[name]
        if not values:
            return None
        return sum(values) if type(values[0]) is int else math.fsum(values)  # a field holds one type


@dataclass
class Tally:
    """The latest record of every item, counted per (case, host, terms)."""

    cells: dict[tuple[str, str, Terms], Cell] = field(default_factory=dict)
    groups: dict[tuple[str, Terms], Group] = field(default_factory=dict)
    case_hashes: dict[str, set[str]] = field(default_factory=dict)
    records: int = 0  # read, superseded ones included
    superseded: int = 0
    skipped: int = 0  # ledger lines that were not records
    files: list[str] = field(default_factory=list)
    #: The latest records of task families' items, kept whole for the report's details of each task.
    family_records: list[Record] = field(default_factory=list)

    def __len__(self) -> int:
        return self.records - self.superseded


def tally(records: Reading | Iterable[Record]) -> Tally:
    """Count records (a ledger `Reading`, or records of one session): the latest of each item only."""
    reading = records if isinstance(records, Reading) else latest(records)
    result = Tally(records=reading.records, superseded=reading.superseded, skipped=reading.skipped,
                   files=list(reading.files))
    # One Python step per record, to sort it into its cell; everything after is per cell, in C-level passes.
    by_cell: dict[tuple[str, str, Terms], list[Record]] = {}
    for record in reading.latest.values():
        key = (record.case, record.host, record.terms)
        if record.family is not None:
            result.family_records.append(record)
        found = by_cell.get(key)
        if found is None:
            by_cell[key] = [record]
        else:
            found.append(record)
    for (case, host, terms), kept in by_cell.items():
        usages = [r.usage for r in kept]
        judged = [r.usage for r in kept if r.judged is not None]
        result.cells[(case, host, terms)] = Cell(
            Counter((r.outcome, r.failures, r.judged) for r in kept),
            [s for s in map(_SECONDS, judged) if s is not None])
        group = result.groups.get((host, terms))
        if group is None:
            group = result.groups[(host, terms)] = Group()
        group.merge(Group(runs={r.run_id for r in kept}, first_start=min(map(_STARTED, usages)),
                          last_end=max(map(_ENDED, usages)),
                          reported={name: [v for v in map(getter, usages) if v is not None]
                                    for name, getter in _SUMMED_GETTERS},
                          cost_from=Counter(u.cost_source or "" for u in usages if u.cost_usd is not None),
                          unpriced=sum(1 for u in usages if u.cost_usd is None
                                       and (u.input_tokens is not None or u.output_tokens is not None))))
        result.case_hashes.setdefault(case, set()).update(r.case_hash for r in kept)
    return result


_SECONDS, _STARTED, _ENDED = (attrgetter(name) for name in ("seconds", "started_at", "ended_at"))
_SUMMED_GETTERS = [(name, attrgetter(name)) for name in SUMMED]


def case_mean_score(cells: Iterable[Cell]) -> stats.MeanScore | None:
    """The mean score over cases — each case's mean over its runs, so a case run more often weighs no more —
    with the cases' spread and a 95% interval over them; None when no case has a known score."""
    return stats.mean_score(cell.score.mean for cell in cells if cell.score is not None)


def judged_polls(facts: Judged) -> int | None:
    """The polls the ceiling judged: those that did not wait (older records: all of them)."""
    return facts.polls if facts.spins is None else facts.spins


def ceiling(facts: Judged) -> int:
    """The run's poll ceiling: its case's own, or (schema-1 records did not say) the judge's default."""
    return DEFAULT_MAX_POLLS if facts.max_polls is None else facts.max_polls


def triggered(facts: Judged) -> tuple[bool, bool]:
    """Whether the run's case needed the skill, and whether the run used it. Records written before near misses
    were judged did not say: every case then needed the skill, and it was used when any call of it was made."""
    expected = True if facts.skill_expected is None else facts.skill_expected
    used = bool(facts.calls) if facts.skill_used is None else facts.skill_used
    return expected, used


@dataclass(frozen=True)
class Triggers:
    """Whether the skill fired when it should and stayed silent when it should not, over judged runs (each repeat
    counts): recall over the runs whose case needed the skill, precision over the runs that used it."""

    needed: int = 0  # runs whose case needed the skill
    needed_and_used: int = 0
    used: int = 0  # runs that used it, needed or not
    near_misses: int = 0  # runs whose case needed no skill

    @property
    def recall(self) -> tuple[int, int]:
        return self.needed_and_used, self.needed

    @property
    def precision(self) -> tuple[int, int]:
        return self.needed_and_used, self.used

    def recall_text(self) -> str:
        return ratio(*self.recall)

    def precision_text(self) -> str:
        """n/a without a near miss to stay silent on: every use was then needed, whatever the agent did."""
        return ratio(*self.precision) if self.near_misses else "n/a (no near-miss case)"

    def text(self) -> str:
        """`recall 33/33 = 100% · precision 33/35 = 94%`."""
        return f"recall {self.recall_text()} · precision {self.precision_text()}"


def triggers(cells: Iterable[Cell]) -> Triggers:
    """The trigger counts over the judged runs of `cells`."""
    needed = needed_and_used = used = near_misses = 0
    for cell in cells:
        for facts, count in cell.judged():
            expected, fired = triggered(facts)
            needed += count * expected
            needed_and_used += count * (expected and fired)
            used += count * fired
            near_misses += count * (not expected)
    return Triggers(needed, needed_and_used, used, near_misses)


def ratio(part: int, whole: int) -> str:
    """`33/33 = 100%`; `n/a (0/0)` where there is nothing to divide by."""
    return f"{part}/{whole} = {part / whole:.0%}" if whole else "n/a (0/0)"
