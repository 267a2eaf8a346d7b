"""`palette-bench show RUN`: one run in depth — each call with its arguments and output, each failure."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from ..arena import untrusted
from ..arena.sandbox import UNCONFINED
from ..arena.workspace import UnsafeRecord, Workspace, item_label
from ..judge.evidence import calls_of, format_call
from ..results.checks import said, values_of
from ..results.ledger import LEDGER_NAME, load
from ..results.markdown import unconfined_words
from ..results.marks import MARK
from ..results.record import Record
from ..run.conversation import Transcript


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", type=Path, help="a run folder (runs/<run-id>)")
    parser.add_argument("--case", action="append", default=[], help="only this case (repeatable)")
    parser.add_argument("--failures", action="store_true", help="only items that failed or errored")
    parser.add_argument("--verbose", action="store_true", help="also the conversation, turn by turn")


def run_folder(path: Path) -> Path:
    """The run folder a command was given: the folder itself, or the folder of the results.jsonl given."""
    ledger = path.name == LEDGER_NAME or (path.name.startswith("results.") and path.suffix == ".jsonl")
    return path.parent if ledger and path.is_file() else path


def run(args: argparse.Namespace, out: Callable[[str], None] = print) -> int:
    args.run = run_folder(args.run)
    records = list(load(args.run).latest.values())
    if not records:
        out(f"error: no results.jsonl with records under {args.run}")
        return 2
    unknown = set(args.case) - {r.case for r in records}
    if unknown:
        out(f"error: no case named {', '.join(sorted(unknown))} in {args.run}")
        return 2
    passed = sum(r.outcome == "pass" for r in records)
    models = sorted({f"{r.host} · {r.terms.model}" for r in records})
    out(f"run: {args.run.resolve()}")
    out(f"{'; '.join(models)} · {passed}/{len(records)} passed")
    unconfined = sorted({r.host for r in records if r.terms.sandbox == UNCONFINED})
    if unconfined:
        out(unconfined_words(unconfined))
    for record in records:
        if args.case and record.case not in args.case:
            continue
        if args.failures and record.outcome in ("pass", "skipped"):
            continue
        try:
            workspace = Workspace.locate(args.run, record)
        except UnsafeRecord as refused:
            out(f"── skipped: {refused}")
            continue
        for line in describe(workspace, record, args.verbose):
            out(line)
    return 0


def describe(workspace: Workspace, record: Record, verbose: bool) -> list[str]:
    seconds = f"{record.usage.seconds:.0f}s" if record.usage.seconds is not None else "—"
    lines = [f"── {MARK[record.outcome]:<5} {item_label(record, workspace)}  ({seconds})"]
    case = workspace.case()
    if case is not None:
        lines.append(f"   covers: {case.covers}")
    lines += [f"   ✗ {failure}" for failure in record.failures if record.outcome != "pass"]
    judged = record.judged
    deck = workspace.folder / Workspace.deck_copy(record.case)
    gone = "" if untrusted.is_regular(deck) else \
        " (a link or not a file: not shown)" if deck.is_symlink() or deck.exists() else \
        " (no longer on disk: removed after the run)"
    lines.append(f"   deck: {judged.slides} slides, IBM Plex={judged.has_plex}, {deck}{gone}" if judged and judged.deck
                 else "   deck: none")
    checked = [(check, *values_of(check, judged)) for check in judged.checks] if judged else []
    for check, expected, observed in checked:
        state = "not graded" if check.passed is None else "held" if check.passed else "FAILED"
        told = (expected, observed) != (None, None)
        values = f": expected {said(expected)}, observed {said(observed)}" if told else ""
        lines.append(f"   check {check.name} ({check.role}) {state}{values}")
    calls, source, _, _ = calls_of(workspace)
    lines += [f"   note: {note}" for note in (judged.notes if judged else ())]
    if not calls:
        lines.append("   palette calls: (none — the skill was never driven)")
    else:
        lines.append({"trace": "   palette calls:",
                      "record": "   palette calls (from the record of the skill's runs):"}.get(
                          source, "   palette calls (from the host's record of commands):"))
    for call in calls:
        lines.append(f"     {format_call(call)}")
        lines.append(f"       → {' '.join(str(call.get('stdout', '')).split())[:120]}")
    if verbose:
        lines += conversation(workspace)
    return lines


def conversation(workspace: Workspace) -> list[str]:
    try:
        turns = Transcript.saved(workspace).turns
    except (ValueError, TypeError) as error:
        return [f"   conversation: (not read: {error})"]
    if not turns:
        return ["   conversation: (not recorded)"]
    lines = ["   conversation:"]
    for turn in turns:
        lines.append(f"     user ▸ {turn.sent}")
        if turn.answer:
            lines.append(f"     agent ◂ {turn.answer}")
        if turn.error:
            lines.append(f"     error ! {turn.error}")
    return lines
