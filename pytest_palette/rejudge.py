"""`palette-bench rejudge RUN`: the current judge over a saved run's workspaces, with no host at all.

Re-scores old runs without paying for agents again, and reports every verdict that changed — after a
judge change, that list is exactly what the change did.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .cases import Case
from .evidence import TRACE_NAME
from .judge import judge
from .runner import collect
from .saved_runs import item_folder, item_label, latest_records, repeated


@dataclass(frozen=True)
class Change:
    label: str
    before: str
    after: str
    failures: tuple[str, ...]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", type=Path, help="a run folder (runs/<run-id>)")


def rejudge(run: Path) -> tuple[int, list[Change], list[str]]:
    """How many verdicts were judged again, which changed, and which items could not be (errors, skips)."""
    latest = latest_records(run)
    many = repeated(latest.values())
    judged, changes, unjudgeable = 0, [], []
    for record in latest.values():
        label = item_label(record, many)
        folder = item_folder(run, record)
        definition = folder / "input" / "case.json"
        if record["outcome"] not in ("pass", "fail") or not definition.is_file():
            unjudgeable.append(f"{label}: {record['outcome']}, nothing on disk to judge")
            continue
        case = Case.from_json(json.loads(definition.read_text(encoding="utf-8")))
        # No grace: the run is over, and a build still running then was already noted when it ran.
        verdict = judge(case, collect(folder / "work", folder / TRACE_NAME, 0.0), record["host"])
        judged += 1
        after = "pass" if verdict.ok else "fail"
        if after != record["outcome"] or list(verdict.failures) != record["failures"]:
            changes.append(Change(label, record["outcome"], after, verdict.failures))
    return judged, changes, unjudgeable


def run(args: argparse.Namespace, out: Callable[[str], None] = print) -> int:
    if not latest_records(args.run):
        out(f"error: no results.jsonl with records under {args.run}")
        return 2
    judged, changes, unjudgeable = rejudge(args.run)
    for change in changes:
        out(f"{change.label}: {change.before} → {change.after}")
        out("".join(f"   ↳ {failure}\n" for failure in change.failures).rstrip("\n") or "   (no failures now)")
    for line in unjudgeable:
        out(f"not re-judged: {line}")
    out(f"{judged} verdict(s) re-judged · {len(changes)} changed")
    return 0
