"""What a conversation left on disk — the deck and the skill's call trace — read only after every build it
started has ended. Nothing here comes from the agent's words."""

from __future__ import annotations

import json
import shutil
import time
import warnings
import zipfile
from collections.abc import Collection
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..cases import Case
from ..results.record import DeckBy
from . import command_log
from .workspace import Workspace

#: A failed render can leave a valid but tiny stub; a real deck is larger.
MIN_PPTX_BYTES = 20_000
#: What deck.py leaves beside a build it started, and beside it once that build has ended.
BUILD_STATE = ".palette-build.json"
BUILD_EXIT = ".palette-exit"


@dataclass(frozen=True)
class Evidence:
    """What a conversation left in its workspace, read after every build it started has ended."""

    workspace: Path
    #: The newest deck.pptx of at least MIN_PPTX_BYTES under the workspace, if any.
    pptx: Path | None
    slides: int
    has_plex: bool
    size: int
    #: Every .pptx under the workspace, whatever its name or size: a case that forbids a deck checks these.
    decks: tuple[Path, ...]
    calls: tuple[dict[str, Any], ...]
    #: Builds that were still running when evidence was read (they were waited for and did not end).
    unfinished: tuple[Path, ...] = ()
    #: When each message was sent (the opening, then each reply), from turns.json; () when not recorded (a
    #: conversation held by hand, or a run of an earlier version).
    turns_started: tuple[float, ...] = ()
    #: Where `calls` come from: "trace" (the skill's own), "host" (our record of the commands the agent ran,
    #: when the skill wrote no trace), or "" (neither has a call).
    calls_from: str = "trace"
    #: What the reader of the calls must know: that they came from our record, or where the two disagree.
    call_notes: tuple[str, ...] = ()
    #: Our record of every command the agent ran (the host's), read once: the calls and the faults read it.
    commands_run: tuple[command_log.CommandRun, ...] = ()
    #: What the agent answered each message, from turns.json (the harness's record of the conversation); () when
    #: not kept. A rule may ask whether it said anything, never believe what it said.
    answers: tuple[str, ...] = ()

    @property
    def commands(self) -> list[str]:
        return [str(call.get("command", "?")) for call in self.calls]


def read(workspace: Workspace, grace: float, turns_started: tuple[float, ...] = (),
         scripts: Collection[str] = (command_log.SKILL_SCRIPT,)) -> Evidence:
    """The evidence in an item's folder, after waiting up to `grace` seconds for builds still running;
    `turns_started` is the conversation's (`Transcript.started`). The calls are the skill's trace when it wrote
    one, else our own record of the commands the agent ran (the runs of the skill's `scripts`)."""
    found = collect(workspace.work, workspace.trace, grace)
    runs = command_log.read(workspace.commands)
    calls, source, notes = calls_of(workspace, list(found.calls), runs, scripts)
    return replace(found, turns_started=turns_started, calls=tuple(calls), calls_from=source, call_notes=notes,
                   commands_run=tuple(runs), answers=turn_answers(workspace.turns))


def turn_answers(path: Path) -> tuple[str, ...]:
    """What the agent answered each message, as turns.json keeps it; () when there is none or it is unreadable
    (a conversation held by hand keeps none)."""
    try:
        turns = json.loads(path.read_text(encoding="utf-8")).get("turns")
    except (OSError, ValueError, AttributeError):
        return ()
    if not isinstance(turns, list) or not all(isinstance(turn, dict) for turn in turns):
        return ()
    return tuple(str(turn.get("answer") or "") for turn in turns)


def calls_of(workspace: Workspace, traced: list[dict[str, Any]] | None = None,
             runs: list[command_log.CommandRun] | None = None,
             scripts: Collection[str] = (command_log.SKILL_SCRIPT,),
             ) -> tuple[list[dict[str, Any]], str, tuple[str, ...]]:
    """An item's calls as the judge reads them (`choose_calls`), from its trace and our record of its
    commands (each read here unless given), where a run of one of the skill's `scripts` is a call."""
    traced = read_trace(workspace.trace) if traced is None else traced
    seen = command_log.skill_calls(command_log.read(workspace.commands) if runs is None else runs, scripts)
    return choose_calls(traced, seen, workspace.commands.exists())


def choose_calls(traced: list[dict[str, Any]], seen: list[dict[str, Any]],
                 recorded: bool) -> tuple[list[dict[str, Any]], str, tuple[str, ...]]:
    """The calls to judge, where they come from, and notes. The agent can rewrite the skill's trace (it is written
    inside the sandbox), so when the host kept a record of the commands, the record decides which calls ran and
    when, and the trace adds what only the skill knew of each (`command_log.reconcile`), every disagreement named;
    when the skill wrote no trace, the record alone. Without a record (a conversation held by hand), the trace."""
    if traced and recorded:
        calls, notes = command_log.reconcile(traced, seen)
        source = "" if not calls else "host" if all(call.get("from") == "host" for call in calls) else "trace"
        return calls, source, notes
    if traced:
        return traced, "trace", ()
    if seen:
        return seen, "host", ("judged from the host's record of the commands the agent ran: the skill wrote "
                              "no trace",)
    return [], "", ()


def collect(work: Path, trace: Path, grace: float) -> Evidence:
    """The evidence under an agent's working folder and in its trace."""
    unfinished = wait_for_builds(work, grace)
    deck = newest_deck(work)
    facts = inspect_deck(deck) if deck else None
    return Evidence(
        workspace=work,
        pptx=deck,
        slides=facts.slides if facts else 0,
        has_plex=facts.has_plex if facts else False,
        size=facts.size if facts else 0,
        decks=tuple(any_deck(work)),
        calls=tuple(read_trace(trace)),
        unfinished=tuple(unfinished),
    )


def wait_for_builds(work: Path, grace: float) -> list[Path]:
    """Wait (bounded) until every build started under `work` has recorded its exit; return those that did not.

    A deck that looks complete can exist before its build has ended, so the deck is read only after.
    """
    deadline = time.monotonic() + grace
    while True:
        running = [state.parent for state in work.rglob(BUILD_STATE) if not (state.parent / BUILD_EXIT).exists()]
        if not running or time.monotonic() >= deadline:
            return running
        time.sleep(0.1)


def deck_by(found: Evidence) -> DeckBy:
    """Who made the deck the workspace holds, from disk: "palette" when it lies in a folder where the skill's
    script started a build (its state file is there), "agent" when a .pptx exists that no build made (the agent
    wrote it itself, say with python-pptx), "none" when there is no .pptx. The deck judged is asked first."""
    decks = ([found.pptx] if found.pptx is not None else []) or list(found.decks)
    if not decks:
        return "none"
    built = (deck for deck in decks if (deck.parent / BUILD_STATE).is_file())
    return "palette" if next(built, None) is not None else "agent"


def save_outputs(case: Case, evidence: Evidence, output: Path) -> None:
    """Copy the deck, its previews and the plan beside the inputs, named after the case."""
    output.mkdir(parents=True, exist_ok=True)
    if evidence.pptx is None:
        return
    shutil.copy2(evidence.pptx, output / f"{case.name}.pptx")
    for preview in sorted(evidence.pptx.parent.glob("slide-*.png")):
        shutil.copy2(preview, output / preview.name)
    plans = list(evidence.workspace.glob("plan*.md")) or list(evidence.pptx.parent.parent.glob("plan*.md"))
    if plans:
        shutil.copy2(max(plans, key=lambda p: p.stat().st_mtime), output / "plan.md")


@dataclass(frozen=True)
class DeckFacts:
    path: Path
    size: int
    slides: int
    has_plex: bool


def inspect_deck(pptx: Path) -> DeckFacts:
    """Slide count and whether slide 1 carries IBM Plex (Palette's renderer forces it)."""
    size = pptx.stat().st_size if pptx.exists() else 0
    try:
        with zipfile.ZipFile(pptx) as archive:
            names = archive.namelist()
            slides = sum(1 for n in names if n.startswith("ppt/slides/slide") and n.endswith(".xml"))
            first = archive.read("ppt/slides/slide1.xml").decode("utf-8", "replace")
    except (OSError, zipfile.BadZipFile, KeyError):
        return DeckFacts(pptx, size, 0, False)
    return DeckFacts(pptx, size, slides, "IBM Plex" in first)


def newest_deck(workspace: Path) -> Path | None:
    """The newest `deck.pptx` of at least MIN_PPTX_BYTES anywhere under the workspace."""
    decks = [p for p in workspace.rglob("deck.pptx") if p.is_file() and p.stat().st_size >= MIN_PPTX_BYTES]
    return max(decks, key=lambda p: p.stat().st_mtime) if decks else None


def any_deck(workspace: Path) -> list[Path]:
    """Every .pptx under the workspace, whatever its name or size: for cases that forbid a deck."""
    return sorted(p for p in workspace.rglob("*.pptx") if p.is_file())


def read_trace(path: Path) -> list[dict[str, Any]]:
    """The call trace's records; a torn or foreign line is skipped with a warning, never fatal."""
    if not path.exists():
        return []
    calls: list[dict[str, Any]] = []
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            warnings.warn(f"{path}:{number}: not a JSON line, skipped", stacklevel=2)
            continue
        if not isinstance(record, dict):
            warnings.warn(f"{path}:{number}: a JSON {type(record).__name__}, not a call record, skipped",
                          stacklevel=2)
            continue
        calls.append(record)
    return calls


def format_call(call: dict[str, Any], width: int = 90) -> str:
    """One trace line as people read it: `plan  1.2s {'request': ..., 'out': 'plan.md'}`."""
    args = {k: v for k, v in (call.get("args") or {}).items() if k not in {"hold_seconds", "wait"}}
    shown = {k: (" ".join(str(v).split())[:width] if isinstance(v, str) else v) for k, v in args.items()}
    return f"{call.get('command', '?'):<12} {float(call.get('seconds', 0)):6.1f}s {shown}"
