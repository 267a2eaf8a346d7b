"""A column of the run's model (results/model.py): one host (or, in a mixed model, one host under one skill hash
and fingerprint), with its counts, pass@k, score, usage and metrics; and a pair of columns tested against each
other."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from ..cases import DEFAULT_MAX_POLLS
from . import lift, stats
from .tally import Triggers


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
    #: The models as the host described what ran (the rehearsal model named as what it is).
    described: list[str] = field(default_factory=list)
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


