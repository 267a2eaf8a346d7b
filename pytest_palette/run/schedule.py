"""The order a session's items start in: the longest expected first, so a sweep ends as soon as its slots allow.

A sweep of more items than slots (`--palette-conversations N`, or `-n` workers) ends with its last item. Started in
collection order, the long items that come last start when the rest are done, and the sweep ends a whole item late.
Started longest first, the short ones fill the slots at the end: Graham's LPT rule, within 4/3 of the best order.

An item's expected time is its case's history on its host under the same model, where the ledger has one: the
median conversation time (`usage.seconds`) of its passed and failed runs in the newest runs of the run folder. A
case with no history is ranked by its shape (`units`: its turns, a build, an edit), in seconds where some items
have history (the median seconds per unit among them), else in units. Only CaseItems move: every other test keeps
its place. Sharding picks each shard's items before this, in collection order, so shards on other machines, with
other histories, still split the same way.
"""

from __future__ import annotations

import contextlib
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..cases import Case
from ..results.ledger import read, run_ledgers

#: The newest runs of the run folder read for history, and the largest ledger read: enough to rank, bounded.
HISTORY_RUNS = 20
LEDGER_BYTES = 16 * 2**20
#: Outcomes whose time says how long the case takes (an error or a skip may have ended at any point).
TIMED = ("pass", "fail")


@dataclass(frozen=True)
class Expected:
    """What an item is expected to take, and where the figure came from."""

    seconds: float
    #: "history" (`runs` of the case on the host), "shape" (scaled to seconds by the items with history) or
    #: "units" (the shape alone: no item had history).
    source: str
    runs: int = 0

    def words(self) -> str:
        if self.source == "history":
            return f"{self.seconds:.0f} s (median of {self.runs} run{'s' * (self.runs != 1)})"
        if self.source == "shape":
            return f"{self.seconds:.0f} s (its shape)"
        return f"{self.seconds:g} units (its shape)"


Key = tuple[str, str, str]  # case, host, model as given


def history(run_root: Path, model: str, skip: str | None = None) -> dict[Key, list[float]]:
    """Conversation seconds of each (case, host) under `model` in the newest HISTORY_RUNS runs of `run_root`
    (`skip`: the session's own run, which its workers may be writing as this reads)."""
    try:
        runs = sorted((p for p in run_root.iterdir() if p.is_dir() and p.name != skip and not p.is_symlink()),
                      key=lambda p: p.name, reverse=True)
    except OSError:
        return {}
    found: dict[Key, list[float]] = defaultdict(list)
    read_runs = 0
    for run in runs:
        ledgers = [ledger for ledger in run_ledgers(run) if _small(ledger)]
        if not ledgers:
            continue
        read_runs += 1
        for ledger in ledgers:
            with contextlib.suppress(OSError):
                for record in read(ledger):
                    seconds = record.usage.seconds
                    if record.outcome in TIMED and seconds and record.terms.model == model:
                        found[(record.case, record.host, model)].append(float(seconds))
        if read_runs >= HISTORY_RUNS:
            break
    return dict(found)


def _small(ledger: Path) -> bool:
    try:
        return not ledger.is_symlink() and ledger.stat().st_size <= LEDGER_BYTES
    except OSError:
        return False


def units(case: Case) -> float:
    """A rough rank of a case's length from its shape: each turn is model calls, a build is the longest call of the
    skill (two turns' worth), an edit one more."""
    turns = 1 + len(case.replies)
    return float(turns + 2 * case.expect.deck + case.expect.edit)


def expected(keys: Sequence[tuple[Key, Case]], past: dict[Key, list[float]]) -> list[Expected]:
    """Each item's expected time, in the order given."""
    timed = {key: statistics.median(past[key]) for key, _ in keys if past.get(key)}
    per_unit = [timed[key] / units(case) for key, case in keys if key in timed]
    scale = statistics.median(per_unit) if per_unit else None
    out = []
    for key, case in keys:
        if key in timed:
            out.append(Expected(timed[key], "history", len(past[key])))
        elif scale is not None:
            out.append(Expected(units(case) * scale, "shape"))
        else:
            out.append(Expected(units(case), "units"))
    return out


def longest_first(expect: Sequence[Expected]) -> list[int]:
    """The start order, as indices into `expect`: the longest first; ties keep their collection order."""
    return sorted(range(len(expect)), key=lambda i: (-expect[i].seconds, i))


def said(names: Sequence[str], expect: Sequence[Expected]) -> list[str]:
    """The order in -v: one line, then each item with its expected time and its source."""
    sources: dict[str, int] = defaultdict(int)
    for one in expect:
        sources[one.source] += 1
    by = ", ".join(f"{n} by {s}" for s, n in sources.items())
    return [f"palette: {len(names)} items start longest first ({by}):",
            *(f"  {n:>3}. {name}  {one.words()}" for n, (name, one) in enumerate(zip(names, expect, strict=True), 1))]
