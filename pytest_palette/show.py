"""`palette-bench show RUN`: one run in depth — each call with its arguments and output, each failure."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .evidence import TRACE_NAME, format_call, read_trace
from .saved_runs import item_folder, item_label, latest_records, repeated

MARKS = {"pass": "PASS", "fail": "FAIL", "error": "ERROR", "skipped": "SKIP"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", type=Path, help="a run folder (runs/<run-id>)")
    parser.add_argument("--case", action="append", default=[], help="only this case (repeatable)")
    parser.add_argument("--failures", action="store_true", help="only items that failed or errored")
    parser.add_argument("--verbose", action="store_true", help="also the conversation, turn by turn")


def run(args: argparse.Namespace, out: Callable[[str], None] = print) -> int:
    latest = latest_records(args.run)
    if not latest:
        out(f"error: no results.jsonl with records under {args.run}")
        return 2
    records = list(latest.values())
    unknown = set(args.case) - {r["case"] for r in records}
    if unknown:
        out(f"error: no case named {', '.join(sorted(unknown))} in {args.run}")
        return 2
    passed = sum(r["outcome"] == "pass" for r in records)
    models = sorted({f"{r['host']} · {r['model']}" for r in records})
    out(f"run: {args.run.resolve()}")
    out(f"{'; '.join(models)} · {passed}/{len(records)} passed")
    many = repeated(records)
    for record in records:
        if args.case and record["case"] not in args.case:
            continue
        if args.failures and record["outcome"] in ("pass", "skipped"):
            continue
        for line in describe(args.run, record, many, args.verbose):
            out(line)
    return 0


def describe(run: Path, record: dict[str, Any], many: bool, verbose: bool) -> list[str]:
    folder = item_folder(run, record)
    seconds = f"{record['seconds']:.0f}s" if record.get("seconds") is not None else "—"
    lines = [f"── {MARKS[record['outcome']]:<5} {item_label(record, many)}  ({seconds})"]
    definition = folder / "input" / "case.json"
    if definition.is_file():
        lines.append(f"   covers: {json.loads(definition.read_text(encoding='utf-8'))['covers']}")
    lines += [f"   ✗ {failure}" for failure in record["failures"] if record["outcome"] != "pass"]
    deck = folder / "output" / f"{record['case']}.pptx"
    lines.append(f"   deck: {record['slides']} slides, IBM Plex={record['has_plex']}, {deck}" if record["deck"]
                 else "   deck: none")
    calls = read_trace(folder / TRACE_NAME)
    lines.append("   palette calls:" if calls else "   palette calls: (none — the skill was never driven)")
    for call in calls:
        lines.append(f"     {format_call(call)}")
        lines.append(f"       → {' '.join(str(call.get('stdout', '')).split())[:120]}")
    if verbose:
        lines += conversation(folder)
    return lines


def conversation(folder: Path) -> list[str]:
    turns = folder / "turns.json"
    if not turns.is_file():
        return ["   conversation: (not recorded)"]
    lines = ["   conversation:"]
    for turn in json.loads(turns.read_text(encoding="utf-8")).get("turns", []):
        lines.append(f"     user ▸ {turn['sent']}")
        if turn.get("answer"):
            lines.append(f"     agent ◂ {turn['answer']}")
        if turn.get("error"):
            lines.append(f"     error ! {turn['error']}")
    return lines
