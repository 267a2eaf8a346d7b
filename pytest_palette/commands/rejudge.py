"""`palette-bench rejudge RUN`: the current judge over a saved run's workspaces, with no host at all.

Re-scores old runs without paying for agents again, and reports every verdict that changed — after a
judge change, that list is exactly what the change did. A fault found on disk (a backend that crashed, a
machine at a limit) turns a verdict into an error, as it would in a run today.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ..arena.workspace import UnsafeRecord, Workspace, item_label
from ..judge import PALETTE
from ..results.ledger import load
from ..results.record import Record
from ..run import faults
from ..run.conversation import Transcript
from ..run.grading import carried
from ..run.judging import judge_folder
from .show import run_folder


@dataclass(frozen=True)
class ChangedVerdict:
    """An item whose verdict the current judge gives otherwise: what it was, what it is now, and why."""

    label: str
    before: str
    after: str
    failures: tuple[str, ...]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", type=Path, help="a run folder (runs/<run-id>)")


def rejudge(run: Path, records: Iterable[Record] | None = None) -> tuple[int, list[ChangedVerdict], list[str]]:
    """How many verdicts were judged again, which changed, and which items could not be (errors, skips)."""
    judged, changes, unjudgeable = 0, [], []
    for record in load(run).latest.values() if records is None else records:
        try:
            workspace = Workspace.locate(run, record)
        except UnsafeRecord as refused:
            unjudgeable.append(str(refused))
            continue
        label = item_label(record, workspace)
        case = workspace.case()
        if record.judged is None or case is None:
            unjudgeable.append(f"{label}: {record.outcome}, nothing on disk to judge")
            continue
        if (record.judged.rules or PALETTE) != PALETTE:  # a project's rules live in its conftest.py, not loaded here
            unjudgeable.append(f"{label}: judged by the rules of the skill {record.judged.rules!r}, which only a "
                               "pytest session with that project's conftest.py has (--palette-collect RUN)")
            continue
        try:
            started = Transcript.saved(workspace).started
        except (ValueError, TypeError):  # an unreadable turns.json: the calls cannot be placed in turns
            started = ()
        # Whether the machine had room is known only when the item ran: its record then noted the bound of its
        # sandbox that a full disk in its commands' words was. A record without that note (a judge before it)
        # did not ask: the words are the machine's. No grace: the run is over, and a build still running then
        # was already noted when it ran.
        room = any(faults.SANDBOX_FULL in note for note in record.judged.notes)
        judgement = judge_folder(case, workspace, host=record.host, started=started, room=room)
        failures: tuple[str, ...]
        if judgement.verdict is None:  # a fault the judge of then did not know: no verdict after all
            after, failures = "error", (f"{record.host}: {judgement.fault}",)
        else:
            verdict = carried(judgement.verdict, record.judged.checks, record.failures)
            after, failures = "pass" if verdict.ok else "fail", verdict.failures
        judged += 1
        if after != record.outcome or failures != record.failures:
            changes.append(ChangedVerdict(label, record.outcome, after, failures))
    return judged, changes, unjudgeable


def run(args: argparse.Namespace, out: Callable[[str], None] = print) -> int:
    args.run = run_folder(args.run)
    records = list(load(args.run).latest.values())
    if not records:
        out(f"error: no results.jsonl with records under {args.run}")
        return 2
    judged, changes, unjudgeable = rejudge(args.run, records)
    for change in changes:
        out(f"{change.label}: {change.before} → {change.after}")
        out("".join(f"   ↳ {failure}\n" for failure in change.failures).rstrip("\n") or "   (no failures now)")
    for line in unjudgeable:
        out(f"not re-judged: {line}")
    out(f"{judged} verdict(s) re-judged · {len(changes)} changed")
    return 0
