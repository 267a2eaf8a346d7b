"""A comparison page's content: two runs (before → after), or two hosts of one run, case by case with the
regressions first, the paired test, the skill hashes, and the two decks side by side. The numbers are
`palette-bench compare`'s own."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec

from ..results.compare import Change, Comparison, compare
from ..results.record import Record
from .item import Item
from .matrix import Items, RunView, cell_items

#: The order rows are shown in: what got worse first.
_ORDER = {"regression": 0, "improvement": 1, "no verdict": 2, "": 3, "new": 4, "gone": 4}


@dataclass
class Row:
    change: Change
    before: Item | None
    after: Item | None


@dataclass
class ComparisonView:
    title: str
    before: str  # what the "before" side is: a run, or a host of a run
    after: str
    comparison: Comparison
    rows: list[Row] = field(default_factory=list)
    page: str = ""
    #: Two hosts compared on the same cases (of one run, or of two runs that each ran one host): the sides are
    #: hosts, not a before and an after.
    against: bool = False

    @property
    def regressions(self) -> list[Row]:
        return [row for row in self.rows if row.change.flag == "regression"]


def between_runs(a: RunView, b: RunView, items: Items, page: str) -> ComparisonView:
    compared = compare(a.records, b.records)
    if compared.across_hosts:  # not before and after: the same cases on two hosts, each side named by its host
        [(first, second)] = compared.sides.values()
        view = ComparisonView(f"{first} ({a.run_id}) against {second} ({b.run_id}): host against host",
                              f"{first} ({a.run_id})", f"{second} ({b.run_id})", compared, page=page, against=True)
    else:
        view = ComparisonView(f"{a.run_id} → {b.run_id}", a.run_id, b.run_id, compared, page=page)
    # Two runs on different hosts (one CI job per host) are compared host against host: each side's own host.
    view.rows = _rows(compared, lambda change, side: _first(items, (a, b)[side], change.case,
                                                              compared.host_on(change, side)))
    return view


def between_hosts(run: RunView, host_a: str, host_b: str, items: Items, page: str) -> ComparisonView:
    """Host A as "before" and host B as "after", over the cases of one run: both sides are relabelled to one
    name so that `compare` pairs them case by case."""
    pair = f"{host_a} → {host_b}"

    def side(host: str) -> list[Record]:
        return [msgspec.structs.replace(r, host=pair) for r in run.records if r.host == host]

    view = ComparisonView(f"{host_a} → {host_b} in {run.run_id}", f"{host_a} ({run.run_id})",
                          f"{host_b} ({run.run_id})", compare(side(host_a), side(host_b)), page=page, against=True)
    view.rows = _rows(view.comparison, lambda change, index: _first(items, run, change.case, (host_a, host_b)[index]))
    return view


def _rows(comparison: Comparison, item_of: Callable[[Change, int], Item | None]) -> list[Row]:
    rows = [Row(change, item_of(change, 0), item_of(change, 1)) for change in comparison.changes]
    return sorted(rows, key=lambda row: (_ORDER.get(row.change.flag, 5), row.change.case, row.change.host))


def _first(items: Items, run: RunView, case: str, host: str) -> Item | None:
    """The cell's first item: a failed one when any failed (it is the one to look at), else run 1."""
    own = cell_items(items, run.folder, case, host)
    own.sort(key=lambda item: (item.outcome != "fail", item.record.run_index))
    return own[0] if own else None
