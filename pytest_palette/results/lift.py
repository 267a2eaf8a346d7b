"""Is the skill better than no skill? A run with the skill against a baseline run without it (`--palette-skill
none`): per host, the pass rate each way, the lift (their difference) and the paired exact test over the cases
both judged; and for the baseline, what the agent did instead of driving the skill, read from disk.

`report` shows it when its records hold one run of each, `compare` when one side is the baseline. Both judge
with the same rules: a baseline is measured against Palette's rules, so its decks fail where they are not
Palette's, and a case whose user never approves passes without any skill.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from . import stats
from .record import DECK_BY, NO_SKILL
from .tally import Cell

#: The names of the two sides, wherever a report labels them.
WITH_SKILL = "with skill"
WITHOUT_SKILL = "no skill"
#: A baseline run's deck facts from before `deck_by` was recorded.
NOT_RECORDED = "not recorded"

Rate = tuple[int, int]  # (passes, judged runs)


def is_baseline(skill_hashes: Iterable[str]) -> bool:
    """Whether these skill hashes (a column's, a side's) are all the baseline's: no skill was installed."""
    hashes = set(skill_hashes)
    return bool(hashes) and hashes == {NO_SKILL}


@dataclass(frozen=True)
class HostLift:
    """One host with the skill and without it, over the cases both judged."""

    host: str
    with_skill: Rate
    without: Rate
    #: The existing paired exact test, with the skill as A: b cases where its pass rate is higher, c where the
    #: baseline's is.
    test: stats.PairedTest

    @property
    def shared(self) -> int:
        return self.test.b + self.test.c + self.test.ties

    @property
    def lift(self) -> float | None:
        """The pass rate with the skill minus the rate without it; None when a side judged nothing."""
        (pw, nw), (po, no) = self.with_skill, self.without
        return pw / nw - po / no if nw and no else None


def host_lift(host: str, pairs: Iterable[tuple[Rate, Rate]]) -> HostLift:
    """The lift over (with, without) rates per case; cases without a verdict on either side are left out, as
    the paired test leaves them out."""
    judged = [(w, o) for w, o in pairs if w[1] and o[1]]
    test = stats.paired_test([w for w, _ in judged], [o for _, o in judged])
    return HostLift(host, (sum(w[0] for w, _ in judged), sum(w[1] for w, _ in judged)),
                    (sum(o[0] for _, o in judged), sum(o[1] for _, o in judged)), test)


def instead(cells: Iterable[Cell]) -> Counter[str]:
    """What the agent did about a deck in each judged run of these cells, in words (DECK_BY)."""
    done: Counter[str] = Counter()
    for cell in cells:
        for facts, count in cell.judged():
            done[DECK_BY.get(facts.deck_by or "", NOT_RECORDED)] += count
    return done


def _rate(rate: Rate) -> str:
    passes, n = rate
    return f"{passes}/{n} ({passes / n:.0%})" if n else "—"


def _points(lift: float | None) -> str:
    return "—" if lift is None else f"{lift * 100:+.0f} pp"


def table(lifts: Iterable[HostLift]) -> tuple[list[str], list[list[str]]]:
    """The lift per host as (header, rows): what the Markdown of `report` and `compare` both show."""
    header = ["Host", "With the skill", "Without", "Lift", "Shared cases", "Skill higher", "No skill higher",
              "Ties", "p (exact)", "Verdict"]
    rows = [[h.host, _rate(h.with_skill), _rate(h.without), _points(h.lift), str(h.shared), str(h.test.b),
             str(h.test.c), str(h.test.ties), f"{h.test.p:.4g}", h.test.verdict] for h in lifts]
    return header, rows


def intro(skill: Iterable[str]) -> str:
    """What the lift table compares, and how to read it."""
    return (f"With the skill {', '.join(sorted(set(skill)))} against no skill at all (`--palette-skill {NO_SKILL}`), "
            "both judged by the same rules. Pass rates over the cases both runs judged; the lift is the difference "
            "in percentage points; the paired exact test (sign test over those cases) says whether it is more than "
            "noise.")


#: What the table of what the agent did instead says first.
INSTEAD = ("Without the skill, read from disk: whether a deck exists, and whether a build of the skill's made it "
           "(the baseline installs none, so any deck is one the agent wrote itself).")


def instead_table(columns: Iterable[tuple[str, Counter[str]]]) -> tuple[list[str], list[list[str]]] | None:
    """What each baseline column's agent did instead, counted over its judged runs; None when none judged."""
    shown = [(label, done) for label, done in columns if done]
    if not shown:
        return None
    kinds = [*DECK_BY.values(), *([NOT_RECORDED] if any(done[NOT_RECORDED] for _, done in shown) else [])]
    return ["Host", *kinds], [[label, *(str(done[kind]) for kind in kinds)] for label, done in shown]
