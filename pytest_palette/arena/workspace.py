"""One item's folder in its run, laid out here and nowhere else:

    runs/<run-id>/<host>/<case>/      (`<case>-<k>` when every case runs several times)
        input/     request.txt, context.md, replies.txt, case.json — the question, so a number can be reproduced
        work/      the agent's working directory (the skill is installed here; plan.md, deck/ …)
        output/    <case>.pptx, slide-*.png, plan.md — copies of what the agent produced
        palette-calls.jsonl   the skill's call trace
        commands.jsonl        every command the host saw its agent run (our own call record)
        skill-runs.jsonl      every run of the skill's script, as the kernel saw it run (skill_runs)
        code.jsonl            each block of code its model gave the host's client to run (cuga: code_log)
        turns.json            what was sent and answered, turn by turn

The agent works in work/, so it never sees the replies waiting for it in input/.
"""

from __future__ import annotations

import json
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Protocol

from ..cases import MAX_NAME, NAME, Case, item_name
from ..results.record import Record
from . import untrusted
from .command_log import CommandLog
from .skill_runs import RECORD_NAME

TRACE_NAME = "palette-calls.jsonl"
#: output/: the copies of what the agent produced, made once its conversation ended, named here and read by
#: these names (the deck as `<case>.pptx`, the plan beside it, the deck's previews as deck.py names them).
OUTPUT = PurePosixPath("output")
PLAN_COPY = OUTPUT / "plan.md"
#: A slide's preview, as deck.py names it: its number is the slide's.
PREVIEW = re.compile(r"slide-(\d{1,9})\.png")
TURNS_NAME = "turns.json"
COMMANDS_NAME = "commands.jsonl"
#: A host's name as a folder and a page of the site carry it: letters, digits, `_`, `.` and `-`, no `..`.
HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
#: A task family's task id as a record names it (families/layout.py's TASK_ID, bounded as a case name is).
TASK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
#: An item's folder in its host's, after its case: `-k` when cases ran several times, `~n` for a later attempt.
_ITEM_SUFFIX = re.compile(r"(?:-[0-9]+)?(?:~[0-9]+)?")


class Watch(Protocol):
    """Who hears of an item's turns and commands as they happen: the run's progress lines (-v) are one. A
    protocol, so that where the agent acts needs nothing of the run that watches it."""

    def turn(self, number: int, total: int) -> None: ...

    def command(self, command: str, started_at: float) -> Callable[[], None]:
        """A command started; the result is called as it ends."""
        ...


class UnsafeRecord(ValueError):
    """A record (from a saved run's ledger) whose names or folder would step outside its run."""


def record_refusal(record: Record) -> str | None:
    """Why a record read from a ledger names no item folder of its run — a case or host name that is not one, a
    workspace outside `<host>/<case>` — in a few words; None when it is sound."""
    case = record.case
    if not (NAME.fullmatch(case) or (TASK_NAME.fullmatch(case) and ".." not in case)) or len(case) > MAX_NAME:
        return f"its case {case[:80]!r} is not a case name"
    if not HOST_NAME.fullmatch(record.host) or ".." in record.host:
        return f"its host {record.host[:80]!r} is not a host name"
    if record.workspace is not None:
        parts = PurePosixPath(record.workspace).parts
        named = len(parts) == 2 and parts[-1].startswith(case) and _ITEM_SUFFIX.fullmatch(parts[-1][len(case):])
        if not named or parts[0] != record.host:
            return f"its workspace {record.workspace[:80]!r} is not <host>/<case> of its own host and case"
    return None


@dataclass(frozen=True)
class Workspace:
    """Where one item's conversation, evidence and outputs live."""

    folder: Path
    #: The folder relative to its run (`<host>/<case>` or `<host>/<case>-<k>`), as a record names it.
    relative: PurePosixPath
    #: A conversation held by hand in a folder of the user's: the agent works in the folder itself.
    by_hand: bool = False
    #: Who hears of each turn and command as it happens (-v); not part of where the item lives.
    watch: Watch | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, run: Path, host: str, case: str, run_index: int, repeated: bool) -> Workspace:
        relative = PurePosixPath(host, f"{case}-{run_index}" if repeated else case)
        folder = run / relative
        # A name that could step out (`..`, `/`, empty) would make a workspace of the host's folder or worse.
        if folder.parent != run / host or not folder.resolve().is_relative_to((run / host).resolve()) or \
                relative.name in ("", ".", ".."):
            raise ValueError(f"{folder}: a workspace must be a folder of its own inside {run / host}")
        return cls(folder, relative)

    def fresh(self) -> Workspace:
        """This workspace, or — when its folder already holds an earlier attempt (a resumed run) — the first
        `<name>~2`, `<name>~3` … that does not exist: an attempt never replaces another's evidence, and the
        record of each says which folder is its own."""
        if not self.folder.exists():
            return self
        attempt = 2
        while True:
            name = f"{self.relative.name}~{attempt}"
            candidate = Workspace(self.folder.with_name(name), self.relative.with_name(name), self.by_hand,
                                  self.watch)
            if not candidate.folder.exists():
                return candidate
            attempt += 1

    @classmethod
    def locate(cls, run: Path, record: Record) -> Workspace:
        """The folder a record's item ran in. Schema-1 records did not say: a repeated item's folder then is
        `<case>-<k>` when that exists (or k > 1), else `<case>`. A saved run may come from anywhere: a record
        whose names step outside the run, or whose host or item folder is a link, is an UnsafeRecord."""
        refused = record_refusal(record)
        if refused:
            raise UnsafeRecord(f"a record for {record.case[:80]!r} on {record.host[:80]!r}: {refused}")
        if record.workspace is not None:
            found = cls(run / record.workspace, PurePosixPath(record.workspace))
        else:
            repeated = cls.of(run, record.host, record.case, record.run_index, True)
            found = repeated if repeated.folder.is_dir() or record.run_index > 1 else \
                cls.of(run, record.host, record.case, record.run_index, False)
        for folder in (found.folder.parent, found.folder):  # what is read below is read without links
            if folder.is_symlink() or (folder.exists() and not stat.S_ISDIR(folder.lstat().st_mode)):
                raise UnsafeRecord(f"{folder}: a link or a file, not an item's folder of {run}")
        return found

    @classmethod
    def here(cls, folder: Path) -> Workspace:
        """`palette-bench converse`'s: the agent works in `folder`, beside its trace and turns."""
        return cls(folder, PurePosixPath(folder.name), by_hand=True)

    @property
    def host_folder(self) -> Path:
        """The folder of all this host's items in the run (the manual host keeps its run sheet here)."""
        return self.folder.parent

    @property
    def input(self) -> Path:
        return self.folder / "input"

    @property
    def work(self) -> Path:
        return self.folder if self.by_hand else self.folder / "work"

    @property
    def output(self) -> Path:
        return self.folder / OUTPUT

    @staticmethod
    def deck_copy(case: str) -> PurePosixPath:
        """Where output/ keeps the deck of `case`, relative to the item's folder."""
        return OUTPUT / f"{case}.pptx"

    @property
    def trace(self) -> Path:
        return self.folder / TRACE_NAME

    @property
    def commands(self) -> Path:
        """Our own record of the commands the agent ran (`command_log`), beside the skill's trace."""
        return self.own(COMMANDS_NAME)

    @property
    def skill_runs(self) -> Path:
        """The harness's record of every run of the skill's scripts (`skill_runs`), beside the skill's trace."""
        return self.own(RECORD_NAME)

    def command_log(self) -> CommandLog:
        """The record a host writes of each command its agent runs (`commands`); a watch hears of each too."""
        return CommandLog(self.commands, self.watch.command if self.watch is not None else None)

    @property
    def turns(self) -> Path:
        return self.folder / TURNS_NAME

    def own(self, name: str) -> Path:
        """A path for a host's own files (its config, its log): in the item's folder, beside work/, so the agent
        never sees them."""
        return self.folder / ".palette" / name if self.by_hand else self.folder / name

    @property
    def definition(self) -> Path:
        """The case as it was asked, expectations included, so a saved run can be judged again."""
        return self.input / "case.json"

    def prepare(self, case: Case) -> None:
        """A new folder: the case's inputs written, an empty work/ for the agent. Nothing is ever deleted: a
        folder that already exists is another attempt's evidence (FileExistsError; `fresh` picks a new one)."""
        self.folder.parent.mkdir(parents=True, exist_ok=True)
        self.folder.mkdir()  # atomic: two processes can never both claim it
        self.input.mkdir()
        (self.input / "request.txt").write_text(case.request + "\n", encoding="utf-8")
        if case.context:
            (self.input / "context.md").write_text(case.context + "\n", encoding="utf-8")
        (self.input / "replies.txt").write_text("".join(f"{reply}\n" for reply in case.replies), encoding="utf-8")
        self.definition.write_text(json.dumps(case.to_json(), indent=2), encoding="utf-8")
        self.work.mkdir()

    def case(self) -> Case | None:
        """The case this folder was prepared for, or None when it was never prepared (or its case.json is a
        link, not a regular file, or over CASE_BYTES: a saved run is not trusted)."""
        try:
            text = untrusted.read_bytes(self.folder, PurePosixPath("input", "case.json"), untrusted.CASE_BYTES)
        except (OSError, untrusted.Refused):
            return None
        return Case.from_json(json.loads(text))


def item_label(record: Record, workspace: Workspace) -> str:
    """The item's id as pytest printed it: `case[host]`, or `case[host-k]` when cases ran several times."""
    repeated = workspace.relative.name != record.case
    return item_name(record.case, record.host, record.run_index if repeated else None)
