"""What a conversation left on disk — the deck and the skill's call trace — read only after every build it
started has ended. Nothing here comes from the agent's words, and nothing the agent left is trusted: every file
is read through `untrusted` (regular files inside their folder, no link followed, each kind bounded), and what
is refused is a note on the item."""

from __future__ import annotations

import fnmatch
import json
import os
import time
import warnings
import zipfile
from collections.abc import Collection
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

from ..arena import command_log, skill_runs, untrusted
from ..arena.workspace import PLAN_COPY, PREVIEW, Workspace
from ..cases import Case
from ..results.record import DeckBy

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
    #: Where `calls` come from: "record" (the harness's record of the skill's runs, `arena/skill_runs.py`), "trace"
    #: (the skill's own), "host" (our record of the commands the agent ran, when the skill wrote no trace), or ""
    #: (none has a call).
    calls_from: str = "trace"
    #: What the reader of the evidence must know: that the calls came from our record, where the two disagree,
    #: and each file of the agent's that was refused (a link, a FIFO, over its bound) or read only in part.
    call_notes: tuple[str, ...] = ()
    #: Our record of every command the agent ran (the host's), read once: the calls and the faults read it.
    commands_run: tuple[command_log.CommandRun, ...] = ()
    #: What the agent answered each message, from turns.json (the harness's record of the conversation); () when
    #: not kept. A rule may ask whether it said anything, never believe what it said.
    answers: tuple[str, ...] = ()
    #: What the agent's folder held of builds as each message was sent (turns.json: `builds_in`); () when not kept.
    builds_before: tuple[tuple[str, ...], ...] = ()
    #: Calls whose doing the evidence cannot tell (a run not shown to be the skill's script, a run the host saw that
    #: never reached the record, a subcommand only the shell knew), in words: the item cannot pass on them.
    doubts: tuple[str, ...] = ()

    @property
    def commands(self) -> list[str]:
        return [str(call.get("command", "?")) for call in self.calls]


def read(workspace: Workspace, grace: float, turns_started: tuple[float, ...] = (),
         scripts: Collection[str] = (command_log.SKILL_SCRIPT,)) -> Evidence:
    """The evidence in an item's folder, after waiting up to `grace` seconds for builds still running;
    `turns_started` is the conversation's (`Transcript.started`). The calls are the skill's trace when it wrote
    one, else our own record of the commands the agent ran (the runs of the skill's `scripts`)."""
    on_disk = read_folder(workspace.work, workspace.trace, grace)
    runs = command_log.read(workspace.commands)
    found = calls_of(workspace, list(on_disk.calls), runs, scripts)
    turns = _turns(workspace.turns)
    return replace(on_disk, turns_started=turns_started, calls=tuple(found.calls), calls_from=found.source,
                   call_notes=on_disk.call_notes + found.notes, commands_run=tuple(runs), answers=_answers(turns),
                   doubts=found.doubts, builds_before=_builds(turns))


def _turns(path: Path) -> list[dict[str, Any]]:
    """The turns turns.json keeps; [] when there is none or it is unreadable (a conversation held by hand keeps
    none), a link, or over its bound."""
    try:
        text = untrusted.read_bytes(path.parent, Path(path.name), untrusted.TURNS_BYTES)
        turns = json.loads(text).get("turns")
    except (OSError, ValueError, AttributeError, untrusted.Refused):
        return []
    if not isinstance(turns, list) or not all(isinstance(turn, dict) for turn in turns):
        return []
    return turns


def turn_answers(path: Path) -> tuple[str, ...]:
    """What the agent answered each message, as turns.json keeps it; () when not kept."""
    return _answers(_turns(path))


def _answers(turns: list[dict[str, Any]]) -> tuple[str, ...]:
    return tuple(str(turn.get("answer") or "") for turn in turns)


def _builds(turns: list[dict[str, Any]]) -> tuple[tuple[str, ...], ...]:
    """What the agent's folder held of builds as each message was sent (`builds_in`), as the turns keep it."""
    return tuple(tuple(found for found in turn.get("builds_before") or () if isinstance(found, str))
                 for turn in turns)


#: How many are named: a folder of hundreds says no more.
_BUILDS_NAMED = 8


def builds_in(work: Path) -> list[str]:
    """The builds the agent's folder holds now — a build's state file (deck.py writes it as the build starts), a
    .pptx — by path inside it, a few: regular files only, no link entered."""
    found = untrusted.listing(work, Path("."), lambda name: name == BUILD_STATE or name.endswith(".pptx"), deep=True)
    return [str(entry.path.relative_to(work)) for entry in found.files[:_BUILDS_NAMED]]


class Calls(NamedTuple):
    """An item's calls as the judge reads them, where they come from, notes, and what cannot be told (`doubts`)."""

    calls: list[dict[str, Any]]
    source: str
    notes: tuple[str, ...]
    doubts: tuple[str, ...] = ()


def calls_of(workspace: Workspace, traced: list[dict[str, Any]] | None = None,
             runs: list[command_log.CommandRun] | None = None,
             scripts: Collection[str] = (command_log.SKILL_SCRIPT,)) -> Calls:
    """An item's calls as the judge reads them, from the record of the skill's runs when it holds any
    (`skill_runs.calls_in`: what ran, whatever the command line said, held against the host's record and the
    trace), else from its trace and our record of its commands (`choose_calls`), each read here unless given; a
    run of one of the skill's `scripts` is a call."""
    traced = read_trace(workspace.trace) if traced is None else traced
    runs = command_log.read(workspace.commands) if runs is None else runs
    record = skill_runs.read(workspace.skill_runs)
    # A record that holds no run is no evidence that nothing ran: the skill's script may never have started (its
    # interpreter missing: a fault of its own), or a host of the user's ran its commands outside the item's sandbox.
    # Our record of the commands and the trace then say what they can, as for a skill that keeps no record.
    if record is not None and (record.runs or record.dropped):
        reading = skill_runs.calls_in(record, runs, scripts)
        notes = reading.notes
        if traced:  # the trace adds nothing the record lacks: only where it disagrees is said
            notes += command_log.reconcile(traced, reading.calls, command_log.RUNS)[1]
        return Calls(reading.calls, "record" if reading.calls else "", notes, reading.doubts)
    seen = command_log.skill_calls(runs, scripts)
    # A subcommand only the shell knew (`$S`, a loop's variable) is not a call the host's words can name: with no
    # record of the skill's runs, what it did cannot be told.
    unread = [call for call in seen if not command_log.written_out(call["command"])]
    doubts = tuple(f"the host saw `{call['line']}` run the skill's script at {command_log.clock(call['at'])}, but "
                   f"its subcommand ({call['command']}) is written by the shell, and the skill keeps no record of its "
                   "runs: what it did cannot be told" for call in unread)
    written = [call for call in seen if command_log.written_out(call["command"])]
    return Calls(*choose_calls(traced, written, workspace.commands.exists()), doubts)


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


def read_folder(work: Path, trace: Path, grace: float) -> Evidence:
    """The evidence under an agent's working folder and in its trace."""
    # Absolute: the deck is read and copied as a path inside `work`, which a path relative to the caller's folder
    # (`palette-bench rejudge runs/<id>`) is not, and every deck would count as unreadable.
    work = work.absolute()
    unfinished = wait_for_builds(work, grace)
    notes: list[str] = []
    deck = newest_deck(work, notes)
    facts = inspect_deck(deck, work, notes) if deck else None
    calls, clipped = trace_of(trace)
    return Evidence(
        workspace=work,
        pptx=deck,
        slides=facts.slides if facts else 0,
        has_plex=facts.has_plex if facts else False,
        size=facts.size if facts else 0,
        decks=tuple(any_deck(work)),
        calls=tuple(calls),
        unfinished=tuple(unfinished),
        call_notes=(*notes, *clipped),
    )


def wait_for_builds(work: Path, grace: float) -> list[Path]:
    """Wait (bounded) until every build started under `work` has recorded its exit; return those that did not.

    A deck that looks complete can exist before its build has ended, so the deck is read only after.
    """
    deadline = time.monotonic() + grace
    while True:
        # Regular files only, no link entered: a folder of links would otherwise walk the whole machine.
        marks = untrusted.listing(work, Path("."), {BUILD_STATE, BUILD_EXIT}.__contains__, deep=True).files
        ended = {mark.path.parent for mark in marks if mark.path.name == BUILD_EXIT}
        running = [mark.path.parent for mark in marks
                   if mark.path.name == BUILD_STATE and mark.path.parent not in ended]
        if not running or time.monotonic() >= deadline:
            return running
        time.sleep(0.1)


def deck_by(evidence: Evidence) -> DeckBy:
    """Who made the deck the workspace holds, from disk: "palette" when it lies in a folder where the skill's
    script started a build (its state file is there), "agent" when a .pptx exists that no build made (the agent
    wrote it itself, say with python-pptx), "none" when there is no .pptx. The deck judged is asked first."""
    decks = ([evidence.pptx] if evidence.pptx is not None else []) or list(evidence.decks)
    if not decks:
        return "none"
    built = (deck for deck in decks if untrusted.is_regular(deck.parent / BUILD_STATE))
    return "palette" if next(built, None) is not None else "agent"


#: Files named one by one in a note that refuses several for one reason.
_NAMED = 3


def save_outputs(case: Case, evidence: Evidence, output: Path, run: untrusted.Budget | None = None) -> Evidence:
    """Copy the deck, the plan and the deck's previews beside the inputs, named after the case: only regular files
    inside the workspace, each within its bound, a preview only when it is a PNG of a slide's size, and all of them
    within the item's bound on what is copied (within what is left of the `run`'s). The evidence comes back with a
    note for each one refused."""
    output.mkdir(parents=True, exist_ok=True)
    if evidence.pptx is None:
        return evidence
    work, notes = evidence.workspace, []
    budget = untrusted.Budget(untrusted.ITEM_COPY_BYTES, "the item's copies", within=run)
    try:
        untrusted.copy(work, evidence.pptx, output / Workspace.deck_copy(case.name).name, untrusted.DECK_BYTES, budget)
    except untrusted.Refused as refused:  # it changed since it was judged, or the run's copies are spent
        notes.append(f"the deck {refused.path} {refused.why}, not copied")
    beside = evidence.pptx.parent.relative_to(work)
    plan = _newest_plan(work, beside, notes)
    if plan is not None:
        _copy_noted(work, plan, output / PLAN_COPY.name, untrusted.PLAN_BYTES, budget, notes)
    notes += _copy_previews(work, beside, output, budget)
    return replace(evidence, call_notes=evidence.call_notes + tuple(notes)) if notes else evidence


def _copy_previews(work: Path, beside: Path, output: Path, budget: untrusted.Budget) -> list[str]:
    """Copy the slide-N.png beside the deck, in slide order, at most PREVIEWS of them; the notes, each reason once
    with the files it refused (an agent may leave thousands)."""
    listing = untrusted.listing(work, beside, lambda name: PREVIEW.fullmatch(name) is not None)
    refused: dict[str, list[str]] = {}
    for each in listing.refused:
        refused.setdefault(each.why, []).append(each.path.name)
    numbered = sorted(listing.files, key=lambda entry: _slide_number(entry.path.name))
    for tried, preview in enumerate(numbered):
        if tried == untrusted.PREVIEWS:  # each one tried counts, copied or not: each costs an open and a read
            refused.setdefault(f"is past the first {untrusted.PREVIEWS} previews", []).extend(
                entry.path.name for entry in numbered[tried:])
            break
        try:
            untrusted.copy(work, preview.path, output / preview.path.name, untrusted.PREVIEW_BYTES, budget,
                           check=untrusted.preview_problem)
        except untrusted.Refused as why:
            refused.setdefault(why.why, []).append(preview.path.name)
        except FileNotFoundError:
            refused.setdefault("was removed before it could be copied", []).append(preview.path.name)
    return [_refused_note(names, why) for why, names in refused.items()]


def _slide_number(name: str) -> tuple[int, str]:
    found = PREVIEW.fullmatch(name)
    return (int(found[1]) if found else 0), name


def _refused_note(names: list[str], why: str) -> str:
    """One note for the previews beside the deck refused for one reason: "slide-8.png beside the deck is a link
    (to …), not copied", or for many "200 files beside the deck (slide-11.png, … and 197 more): each is not a
    PNG image, not copied"."""
    if len(names) == 1:
        return f"{names[0]} beside the deck {why}, not copied"
    shown = ", ".join(names[:_NAMED]) + (f" and {len(names) - _NAMED:,} more" if len(names) > _NAMED else "")
    return f"{len(names):,} files beside the deck ({shown}) each {why}: not copied"


def _newest_plan(work: Path, beside: Path, notes: list[str]) -> Path | None:
    """The newest plan*.md in the workspace, else in the folder above the deck's (when inside the workspace)."""
    for folder in (Path("."), beside.parent):
        plans = untrusted.listing(work, folder, lambda name: fnmatch.fnmatchcase(name, "plan*.md"))
        notes += [f"{refused.path} {refused.why}, not copied as the plan" for refused in plans.refused]
        if plans.files:
            return max(plans.files, key=lambda entry: entry.mtime).path
        if plans.refused:
            return None
    return None


def _copy_noted(work: Path, source: Path, target: Path, limit: int, budget: untrusted.Budget,
                notes: list[str]) -> None:
    try:
        untrusted.copy(work, source, target, limit, budget)
    except untrusted.Refused as refused:
        notes.append(f"{refused.path} {refused.why}, not copied")
    except FileNotFoundError:
        notes.append(f"{source.relative_to(work)} was removed before it could be copied")


@dataclass(frozen=True)
class DeckFacts:
    path: Path
    size: int
    slides: int
    has_plex: bool


#: Lines of a trace warned about one by one; the rest are counted in one warning.
_TRACE_WARNINGS = 10
#: A deck's parts that inspecting it reads whole: no bigger than this each (a zip bomb is refused).
_PART_BYTES = 64 * 1024 * 1024


def inspect_deck(pptx: Path, root: Path | None = None, notes: list[str] | None = None) -> DeckFacts:
    """Slide count and whether slide 1 carries IBM Plex (Palette's renderer forces it). The deck is read as a
    regular file inside `root` (its own folder by default), within DECK_BYTES; otherwise it has no slides, and
    why is added to `notes`."""
    folder, path = (root, pptx) if root is not None else (pptx.parent, Path(pptx.name))
    try:
        with untrusted.open_file(folder, path) as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > untrusted.DECK_BYTES:
                raise untrusted.Refused(pptx, f"is larger than {untrusted.DECK_BYTES // 1024 // 1024} MiB")
            try:
                with zipfile.ZipFile(handle) as archive:
                    names = archive.namelist()
                    slides = sum(1 for n in names if n.startswith("ppt/slides/slide") and n.endswith(".xml"))
                    first = archive.getinfo("ppt/slides/slide1.xml")
                    if first.file_size > _PART_BYTES:
                        return DeckFacts(pptx, size, 0, False)
                    text = archive.read(first).decode("utf-8", "replace")
            except (zipfile.BadZipFile, KeyError, ValueError, NotImplementedError):
                return DeckFacts(pptx, size, 0, False)
    except untrusted.Refused as refused:
        if notes is not None:
            notes.append(f"the deck {refused.path} {refused.why}, not read")
        return DeckFacts(pptx, 0, 0, False)
    except OSError:
        return DeckFacts(pptx, 0, 0, False)
    return DeckFacts(pptx, size, slides, "IBM Plex" in text)


def newest_deck(workspace: Path, notes: list[str] | None = None) -> Path | None:
    """The newest `deck.pptx` of at least MIN_PPTX_BYTES anywhere under the workspace: a regular file, in no
    linked folder (each one that is not is added to `notes`)."""
    listing = untrusted.listing(workspace, Path("."), "deck.pptx".__eq__, deep=True)
    if notes is not None:
        notes += [f"{refused.path} {refused.why}, not read as the deck" for refused in listing.refused]
    decks = [entry for entry in listing.files if entry.size >= MIN_PPTX_BYTES]
    return max(decks, key=lambda entry: entry.mtime).path if decks else None


def any_deck(workspace: Path) -> list[Path]:
    """Every .pptx under the workspace, whatever its name or size: for cases that forbid a deck. A link named
    .pptx counts too (it is left there as one), though it is never read."""
    listing = untrusted.listing(workspace, Path("."), lambda name: name.endswith(".pptx"), deep=True)
    links = [workspace / refused.path for refused in listing.refused if "link" in refused.why]
    return sorted([entry.path for entry in listing.files] + links)


def read_trace(path: Path) -> list[dict[str, Any]]:
    """The call trace's records; a torn or foreign line is skipped with a warning, never fatal (`trace_of`
    says also what was not read)."""
    calls, notes = trace_of(path)
    for note in notes:
        warnings.warn(f"{path.parent}: {note}", stacklevel=2)
    return calls


def trace_of(path: Path) -> tuple[list[dict[str, Any]], tuple[str, ...]]:
    """The call trace's records, and notes: a trace that is a link or not a regular file is not read, and one
    over TRACE_BYTES is read up to it (its last whole line) — never loaded whole. A torn or foreign line is
    skipped with a warning."""
    try:
        data, clipped = untrusted.read_head(path.parent, Path(path.name), untrusted.TRACE_BYTES)
    except FileNotFoundError:
        return [], ()
    except untrusted.Refused as refused:
        return [], (f"the skill's trace {refused.path} {refused.why}: not read",)
    except OSError as error:
        return [], (f"the skill's trace {path.name} could not be read: {error.strerror or error}",)
    notes: tuple[str, ...] = ()
    if clipped:
        data = data[:data.rfind(b"\n") + 1]
        notes = (f"the skill's trace is larger than {untrusted.TRACE_BYTES // 1024 // 1024} MiB: only its first "
                 f"{len(data):,} bytes were read",)
    calls: list[dict[str, Any]] = []
    skipped = 0
    for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            why = "not a JSON line"
        else:
            if isinstance(record, dict):
                calls.append(record)
                continue
            why = f"a JSON {type(record).__name__}, not a call record"
        skipped += 1
        if skipped <= _TRACE_WARNINGS:
            warnings.warn(f"{path}:{number}: {why}, skipped", stacklevel=3)
    if skipped > _TRACE_WARNINGS:
        warnings.warn(f"{path}: {skipped - _TRACE_WARNINGS} more lines that are not call records, skipped",
                      stacklevel=3)
    return calls, notes


def format_call(call: dict[str, Any], width: int = 90) -> str:
    """One trace line as people read it: `plan  1.2s {'request': ..., 'out': 'plan.md'}`."""
    args = {k: v for k, v in (call.get("args") or {}).items() if k not in {"hold_seconds", "wait"}}
    shown = {k: (" ".join(str(v).split())[:width] if isinstance(v, str) else v) for k, v in args.items()}
    return f"{call.get('command', '?'):<12} {float(call.get('seconds', 0)):6.1f}s {shown}"
