"""What a run's numbers are not entitled to say, in words: one run per cell, different models, cases not run
everywhere, errors outside the denominators, mixed measurements, changed cases. Part of the run's model
(results/model.py), so every output says the same."""

from __future__ import annotations

from typing import Protocol

from . import tasks
from .columns import Column
from .tally import Cell, Tally


class Measured(Protocol):
    """What the caveats read of the model (results/model.py's Report, which is built with them)."""

    columns: list[Column]
    cases: list[str]
    cells: dict[tuple[str, str], Cell]
    disagreements: list[str]
    groups: dict[str, tuple[str, str]]
    duplicates_dropped: int
    skipped_lines: int


def of(report: Measured, counted: Tally) -> list[str]:
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
