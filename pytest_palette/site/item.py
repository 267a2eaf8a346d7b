"""One item as its page shows it, read from its folder: the slides, the plan and what each edit changed, the
conversation turn by turn with the commands it ran, the skill's calls on a timeline, and the judge's words
beside the calls that broke each rule.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..arena import code_log, command_log, untrusted
from ..arena.workspace import OUTPUT, PLAN_COPY, PREVIEW, Workspace, item_label
from ..hosts.stops import SAID
from ..judge import PALETTE, answer_of, call_args, evidence
from ..results.checks import COMMON_CHECKS, PALETTE_CHECKS, said, score_of, values_of
from ..results.record import GATE, JUDGED, Check, Record, Value
from ..run.conversation import Transcript

#: Output longer than this many lines is folded on the page.
FOLD_LINES = 12
#: The most of a turn's whole error a page shows (an upstream's answer can be 40 KB and more).
ERROR_FILE_SHOWN = 256 * 1024


@dataclass
class Command:
    """One command the host ran for the agent (our own record)."""

    line: str
    started_at: float
    seconds: float
    exit_code: int | None
    output: str
    errors: str

    @classmethod
    def of(cls, run: command_log.CommandRun) -> Command:
        return cls(line=run.command, started_at=run.started_at, seconds=round(run.ended_at - run.started_at, 3),
                   exit_code=run.exit_code, output=run.stdout, errors=run.stderr)

    @property
    def long(self) -> bool:
        return (self.output.count("\n") + self.errors.count("\n")) > FOLD_LINES or len(self.output) > 2000


@dataclass
class Call:
    """One call of the skill, from its trace (or from our record when it wrote none), placed on the timeline."""

    index: int
    command: str
    args: str
    at: float | None
    seconds: float
    hold: float | None
    state: str  # what it answered: done, running, failed, …
    output: str
    turn: int | None  # which message's turn it was made in (1 = the opening)
    command_line: str | None = None  # the shell command that ran it, when our record has one
    blamed: bool = False


@dataclass
class Turn:
    number: int
    sent: str
    answer: str
    error: str | None
    seconds: float
    steps: list[tuple[str, str]]  # ("call" | "result", text), in the order the host streamed them
    commands: list[Command] = field(default_factory=list)
    #: The code the model gave its client to run in this turn (a host whose model acts in code: cuga).
    code: list[str] = field(default_factory=list)
    tokens: str = ""
    retries: int | None = None
    #: Why it ended (hosts/stops.py); None in records made before it was kept.
    stop: str | None = None
    model_calls: int | None = None
    #: The whole of a long error, as the item's file keeps it (`error_file`), read bounded.
    error_file: str | None = None
    error_whole: str = ""

    @property
    def stopped(self) -> str:
        """Why it ended, in words; "" when it answered or nobody said."""
        return "" if self.stop in (None, "answered") else SAID.get(str(self.stop), str(self.stop))


@dataclass
class Revision:
    """One version of the plan as a call answered it; an edit's shows what it changed."""

    number: int
    command: str
    asked: str  # the change the edit was asked for ("" for a fresh plan)
    text: str
    diff: list[tuple[str, str]]  # (" " | "+" | "-" | "@", line) against the previous revision


@dataclass
class FailureView:
    """One failure of the record as the page shows it: its words beside the calls that broke its rule."""

    words: str
    calls: list[Call]
    #: Why no call is shown: the rule is about what was not done (or what no call the records hold did), or the current
    #: judge reads the item otherwise.
    note: str = ""


@dataclass(frozen=True)
class CheckView:
    """One check of the record as the item's page shows it, with what it asks where the catalogue knows it."""

    check: Check
    about: str
    #: What it expected and observed (`values_of`: the record's, or told from its judged facts).
    values: tuple[Value | None, Value | None] = (None, None)

    @property
    def state(self) -> str:
        """held, failed, or error: its grader failed, which is no verdict on the skill."""
        return "error" if self.check.passed is None else "held" if self.check.passed else "failed"

    @property
    def result(self) -> str:
        return {"error": "error: could not be graded", "held": "held", "failed": "FAILED"}[self.state]

    @property
    def gate(self) -> bool:
        return self.check.role == GATE

    @property
    def expected(self) -> str:
        return said(self.values[0])

    @property
    def observed(self) -> str:
        return said(self.values[1])


def checks_of(record: Record) -> tuple[list[CheckView], float | None, str]:
    """The record's checks, its score, and where the score comes from: "checks" (its own), "derived" (written
    before checks, told from its outcome and words: docs/judge.md), "unknown" (written before checks, a fail that
    does not say by how much), "" (an error or a skip: not judged)."""
    judged = record.judged
    if judged is None or record.outcome not in JUDGED:
        return [], None, ""
    # Palette's catalogue says what its checks ask; a skill's own rules' live in its project's conftest.py.
    known = {**(PALETTE_CHECKS if (judged.rules or PALETTE) == PALETTE else {}), **COMMON_CHECKS}
    views = [CheckView(c, known[c.name].about if c.name in known else "", values_of(c, judged)) for c in judged.checks]
    score = score_of(record)
    return views, score, "checks" if judged.score is not None else "unknown" if score is None else "derived"


@dataclass
class SlideView:
    number: int
    image: str | None  # the page's path to the image, when there is one
    title: str
    lines: list[str]


@dataclass
class Item:
    """Everything an item's page shows."""

    record: Record
    run_folder: Path
    workspace: Workspace
    label: str
    covers: str = ""
    request: str = ""
    context: str = ""
    replies: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    deck: Path | None = None
    #: The deck's previews in output/ by slide number (the slide's own), and why each one not shown is not.
    previews: dict[int, Path] = field(default_factory=dict)
    left_out: dict[int, str] = field(default_factory=dict)
    slides: list[SlideView] = field(default_factory=list)
    slides_note: str = ""
    revisions: list[Revision] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    calls_from: str = ""
    span: float = 0.0  # seconds from the first message to the last call's end: the timeline's width
    turn_marks: list[tuple[int, float]] = field(default_factory=list)  # (turn, offset) on the timeline
    failures: list[FailureView] = field(default_factory=list)
    notes: tuple[str, ...] = ()
    #: Files of the item's folder the site would show but does not: links, not regular files, over their bound.
    refused: list[str] = field(default_factory=list)
    page: str = ""  # the page's path in the site
    checks: list[CheckView] = field(default_factory=list)
    score: float | None = None
    score_from: str = ""  # checks_of's: "checks", "derived", "unknown", or "" when not judged

    @property
    def outcome(self) -> str:
        return self.record.outcome


def read(run_folder: Path, record: Record) -> Item:
    """The item of `record`, from its folder in `run_folder` (what is missing is left empty, never invented).
    A run folder may come from anywhere: its files are read through `untrusted`, and a record that names no
    folder of the run is an UnsafeRecord (arena.workspace)."""
    workspace = Workspace.locate(run_folder, record)
    item = Item(record, run_folder, workspace, item_label(record, workspace))
    item.checks, item.score, item.score_from = checks_of(record)
    case = workspace.case()
    if case is not None:
        item.covers, item.request, item.context, item.replies, item.tags = \
            case.covers, case.request, case.context, case.replies, case.tags
    else:
        item.tags = record.tags
    item.deck = _deck(workspace, record.case, item.refused)
    item.previews, item.left_out = previews(workspace)
    item.refused += item.left_out.values()
    try:
        transcript = Transcript.saved(workspace)
    except (ValueError, TypeError, OSError):
        transcript = Transcript()
    runs = command_log.read(workspace.commands)
    traced = evidence.read_trace(workspace.trace)
    # The calls as the judge reads them (the host's record decides which ran and when: a failure's blame points into
    # these); a project's own rules' skill, whose scripts are not known here, by its trace.
    own = record.judged is not None and (record.judged.rules or PALETTE) != PALETTE
    calls, item.calls_from, notes, _ = (traced, "trace", (), ()) if traced and own else \
        evidence.calls_of(workspace, traced, runs)
    item.notes = record.judged.notes if record.judged else notes
    started = [turn.started_at for turn in transcript.turns if turn.started_at is not None]
    item.turns = _turns(transcript, runs, code_log.read(workspace.own(code_log.CODE_NAME)))
    for turn in item.turns:
        if turn.error_file and re.fullmatch(r"turn-\d+-error\.txt", turn.error_file):
            try:  # a saved run may come from anywhere: read as a regular file of the item's, bounded
                turn.error_whole = untrusted.read_text(workspace.folder, Path(turn.error_file), ERROR_FILE_SHOWN)
            except (OSError, untrusted.Refused) as refused:
                turn.error_whole = f"(not shown: {refused})"
    item.calls = _calls(calls, runs, started)
    origin = min([*started, *(c.at for c in item.calls if c.at is not None)], default=None)
    if origin is not None:
        ends = [c.at + c.seconds for c in item.calls if c.at is not None] + \
               [t.started_at + t.seconds for t in transcript.turns if t.started_at is not None]
        item.span = max(max(ends, default=origin) - origin, 0.001)
        item.turn_marks = [(number, at - origin) for number, at in enumerate(started, 1)]
        for call in item.calls:
            if call.at is not None:
                call.at -= origin
    item.revisions = _revisions(calls)
    item.failures = _failures(item, tuple(str(call.get("command", "?")) for call in calls))
    return item


def _deck(workspace: Workspace, case: str, refused: list[str]) -> Path | None:
    """The deck saved in output/, when it is a regular file of the item's folder within its bound."""
    deck = Path(Workspace.deck_copy(case))
    try:
        with untrusted.open_file(workspace.folder, deck) as handle:
            if os.fstat(handle.fileno()).st_size > untrusted.DECK_BYTES:
                raise untrusted.Refused(deck, f"is larger than {untrusted.DECK_BYTES >> 20} MiB")
    except untrusted.Refused as error:
        refused.append(f"{error.path} {error.why}: not shown")
        return None
    except OSError:
        return None
    return workspace.folder / deck


def previews(workspace: Workspace) -> tuple[dict[int, Path], dict[int, str]]:
    """The deck's slide previews in output/ by slide number, the first PREVIEWS of them: each regular file, and
    for each one that is not (a link, a FIFO …) why it is not shown. A number is the slide's own, whatever is left
    out before it."""
    listing = untrusted.listing(workspace.folder, Path(OUTPUT), lambda name: PREVIEW.fullmatch(name) is not None)
    numbered = {int(m[1]): entry.path for entry in listing.files if (m := PREVIEW.fullmatch(entry.path.name))}
    left_out = {int(m[1]): f"{error.path} {error.why}: not shown" for error in listing.refused
                if (m := PREVIEW.fullmatch(error.path.name))}
    first = sorted(numbered.keys() | left_out.keys())[:untrusted.PREVIEWS]
    return ({n: numbered[n] for n in first if n in numbered},
            {n: left_out[n] for n in first if n in left_out})


def _turns(transcript: Transcript, runs: list[command_log.CommandRun],
           code: Sequence[code_log.CodeBlock] = ()) -> list[Turn]:
    turns = []
    placed = command_log.in_turns(runs, [t.started_at for t in transcript.turns])
    for number, (record, ran) in enumerate(zip(transcript.turns, placed, strict=True), 1):
        steps = [("call" if step.startswith("→") else "result", step.lstrip("→← ").strip())
                 for step in record.steps]
        usage = record.usage or {}
        tokens = " / ".join(f"{usage[k]:,} {label}" for k, label in (("input_tokens", "in"), ("output_tokens", "out"))
                            if isinstance(usage.get(k), int))
        turn = Turn(number=number, sent=record.sent, answer=record.answer, error=record.error,
                    seconds=record.seconds, steps=steps, tokens=tokens, retries=record.retries,
                    code=[block.code for block in code if block.turn == number], stop=record.stop,
                    model_calls=record.model_calls, error_file=record.error_file,
                    commands=[Command.of(r) for r in ran])
        turns.append(turn)
    return turns


def _calls(calls: list[dict[str, Any]], runs: list[command_log.CommandRun], started: list[float]) -> list[Call]:
    placed = []
    for index, call in enumerate(calls):
        at = call.get("at")
        at = float(at) if isinstance(at, (int, float)) else None
        seconds = call.get("seconds")
        hold = call_args(call).get("hold_seconds")
        answer = answer_of(call)
        state = str(answer.get("state") or ("done" if answer.get("done") else "")) or \
            ("failed" if call.get("exit_code") not in (0, None) else "")
        args = {k: v for k, v in call_args(call).items() if k not in {"hold_seconds", "wait"}}
        shown = " ".join(f"--{k} {' '.join(str(v).split())[:160]!s}" for k, v in args.items())
        line = None
        if at is not None:  # the shell command that ran it: the one whose window holds the call's start
            line = next((r.command for r in runs if r.started_at - 0.5 <= at <= r.ended_at + 0.5
                         and str(call.get("command")) in r.command), None)
        turn = sum(1 for s in started if at is not None and s <= at) or None
        placed.append(Call(index=index, command=str(call.get("command", "?")), args=shown, at=at,
                          seconds=float(seconds) if isinstance(seconds, (int, float)) else 0.0,
                          hold=float(hold) if isinstance(hold, (int, float)) else None, state=state,
                          output=str(call.get("stdout", "")), turn=turn, command_line=line))
    return placed


def _revisions(calls: list[dict[str, Any]]) -> list[Revision]:
    """Each plan text a call answered with, in order, and what changed from the one before (a poll that
    answers the same text again is not a revision)."""
    revisions: list[Revision] = []
    for call in calls:
        command = str(call.get("command"))
        text = answer_of(call).get("text")
        if command not in ("plan", "edit", "plan-status") or not isinstance(text, str) or not text.strip():
            continue
        if revisions and revisions[-1].text == text:
            continue
        asked = ""
        if command == "edit":
            args = call_args(call)
            asked = str(args.get("change") or args.get("instruction") or args.get("request") or "")
        previous = revisions[-1].text if revisions else ""
        diff: list[tuple[str, str]] = []
        if revisions:
            for line in difflib.unified_diff(previous.splitlines(), text.splitlines(), lineterm="", n=1):
                if line.startswith(("---", "+++")):
                    continue
                diff.append((line[:1] if line[:1] in "+-@" else " ", line[1:] if line[:1] in "+- " else line))
        revisions.append(Revision(len(revisions) + 1, "edit" if command == "edit" else
                                  ("plan" if command == "plan" else "revised"), asked, text, diff))
    return revisions


def _failures(item: Item, read_now: tuple[str, ...]) -> list[FailureView]:
    """The judge's words as recorded, each beside the calls the record says broke its rule (the record holds the
    whole verdict: the site never judges). `read_now` is the calls as read from the folder for the page, which
    must be the calls the judge read for the record's blame to point into them."""
    record = item.record
    judged = record.judged
    if record.outcome != "fail" or judged is None:
        return [FailureView(words, [], "") for words in record.failures]
    if len(judged.blame) != len(record.failures):
        why = "the record does not say which calls broke its rule (it was written before that was kept)" \
            if judged.calls else ""
        return [FailureView(words, [], why) for words in record.failures]
    if read_now != judged.calls:
        return [FailureView(words, [], "the calls read from the folder now are not those the judge read "
                                       f"({' → '.join(judged.calls) or 'none'}): no call is shown")
                for words in record.failures]
    failures = []
    for words, blamed in zip(record.failures, judged.blame, strict=True):
        shown = [item.calls[i] for i in blamed if i < len(item.calls)]
        for call in shown:
            call.blamed = True
        unblamed = "no call to show: the rule is broken by what was not done, or by what no call the records hold did"
        failures.append(FailureView(words, shown, "" if shown else unblamed))
    return failures


def plan_text(item: Item) -> str:
    """The plan the deck was built from, as saved beside it (a regular file within PLAN_BYTES)."""
    try:
        return untrusted.read_text(item.workspace.folder, Path(PLAN_COPY), untrusted.PLAN_BYTES)
    except untrusted.Refused as error:
        item.refused.append(f"{error.path} {error.why}: not shown")
    except OSError:
        pass
    return item.revisions[-1].text if item.revisions else ""
