"""Faults: what went wrong outside the agent — the backend, the machine — read from what is on disk.

A fault makes the item an ERROR of the run, never a FAIL of the skill: a backend that crashed or a disk that
filled says nothing about how the agent drove the skill, and the case's scripted replies assumed neither. So
an item whose conversation met a fault gets no verdict, and a resumed run runs it again.

Three sources, all written by something other than the agent's words:
- the skill's answers (its trace, or our record of its calls): a backend stage that ended without an exit code,
  exited 0 without its output, or failed in a way that is not a refusal of the agent's input. A refusal — a
  log ending in one `error: …` line, with no traceback above it — is the agent's doing (an empty instruction,
  a source file that is not there) and is judged as usual;
- the standard error of every command the agent ran: the operating system's own words for a machine at its
  limits (no space left, a read-only file system, an argument list or a file name too long), at the end of a
  line as programs print them, or by the errno's name (ENOSPC, E2BIG …) as a client explaining it does.
  A read-only file system counts only where the agent may write: its sandbox makes everything outside its
  folder, and the skill installed in it, read-only on purpose, and a write refused there is the agent's doing;
  A full disk or quota counts only when the machine's disk under the agent's folder is short of room when the
  item ends: otherwise the command met a bound of its own sandbox (its /tmp, /dev/shm, one file's size), which
  is the agent's doing and becomes a note (`bounds_met`) — and an agent that prints the words cannot turn its
  FAIL into an ERROR;
- a skill whose script never started: every call of it ended with exit 127 and its shell's "python: not found"
  (a command the call names, its interpreter). The machine, or the sandbox's view of it, lacks the interpreter
  the skill's instructions name; the skill was never tried.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..arena.command_log import NOT_FOUND, CommandRun, not_found, without_heredocs
from ..backend import MIN_FREE_BYTES
from ..judge import answer_of

#: strerror texts of the faults a machine, not an agent, causes (ENOSPC, EDQUOT, EROFS, E2BIG, ENAMETOOLONG).
#: Matched at the end of a line or before ": <path>", as Python, bash and coreutils print them.
_MACHINE = re.compile(r"(No space left on device|Disk quota exceeded|Read-only file system|Argument list too "
                      r"long|File name too long)(?::[^\n]*)?$"
                      # or the errno's name, as a client that explains the fault in its own words gives it
                      r"|^[^\n]*\b(?:ENOSPC|EDQUOT|EROFS|E2BIG|ENAMETOOLONG)\b[^\n]*$", re.MULTILINE)
#: A backend's log that holds this crashed; one that ends in `error: …` without it refused the input. The log's
#: tail may have lost the traceback's first line under a deep stack: a frame of it (`  File "…", line 3, in f`) is
#: one too.
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)|^\s*File \"[^\"\n]*\", line \d+", re.MULTILINE)
#: A quoted line is clipped to this many characters: a cause is one line.
_SHOWN = 200
#: The skill's subcommands by the backend stage they report on.
_STAGE = {"plan": "plan", "plan-status": "plan", "edit": "plan", "start": "build", "status": "build"}


#: Where hosts install the skill in the agent's folder (read-only in the sandbox).
_SKILL_FOLDERS = ("skills", ".claude", ".cuga")
#: Paths a line names: quoted, or a word with a slash in it.
_PATHS = re.compile(r"'([^'\n]*/[^'\n]*)'|\"([^\"\n]*/[^\"\n]*)\"|(?<![\w/.])((?:\.{1,2})?/?[\w.+-]+(?:/[\w.+-]*)+)")


def machine_fault(text: str, work: Path | None = None) -> str | None:
    """The line of `text` (a command's standard error, a backend's log) that says the machine is at a limit.
    Given the agent's folder `work`, a read-only file system that names only paths outside it is not one."""
    for match in _MACHINE.finditer(text):
        start = text.rfind("\n", 0, match.start()) + 1
        line = text[start:match.end()]
        if work is not None and ("Read-only file system" in line or "EROFS" in line) and not _names_inside(line, work):
            continue
        return _clip(line)
    return None


def _names_inside(line: str, work: Path) -> bool:
    """Whether `line` names a path inside `work` (relative ones taken from there), or names no path at all."""
    named = [next(part for part in match if part) for match in _PATHS.findall(line)]
    if not named:
        return True
    root = os.path.normpath(work)
    inside = [os.path.relpath(full, root) for path in named
              if (full := os.path.normpath(os.path.join(root, path))).startswith(root + os.sep)]
    return any(relative.split(os.sep, 1)[0] not in _SKILL_FOLDERS for relative in inside)


def backend_fault(call: dict[str, Any]) -> str | None:
    """Why this call's answer shows the backend failing (not refusing the agent's input), or None."""
    answer = answer_of(call)
    if answer.get("state") != "error" or "exit_code" not in answer:
        return None
    tail = answer.get("log_tail") or []
    lines = [str(line) for line in (tail if isinstance(tail, list) else str(tail).splitlines()) if str(line).strip()]
    log = "\n".join(lines)
    stage = f"the backend's {_STAGE.get(str(call.get('command')), 'work')} stage"
    said = f": {_clip(lines[-1])}" if lines else " (its log is empty)"
    machine = machine_fault(log)
    code = answer.get("exit_code")
    if machine:
        return f"{stage} failed on this machine: {machine}"
    if code is None:
        return f"{stage} stopped without recording an exit code (killed?){said}"
    if code == 0:
        return f"{stage} exited 0 without its output: {_clip(str(answer.get('hint', '')))}"
    if lines and lines[-1].lstrip().startswith("error:") and not _TRACEBACK.search(log):
        return None  # the backend refused what the agent asked, in one line: the agent's doing
    return f"{stage} failed with exit code {code}{said}"


def missing_command(calls: Iterable[dict[str, Any]], commands: Iterable[CommandRun]) -> str | None:
    """Why the skill's script never started, when no call of it did: its shell could not find a command the
    call names (the interpreter, `python: not found`, exit 127). The machine lacks it, or the sandbox hides it:
    either way the skill was never tried. One call that started makes it the agent's to judge (a first
    `python` failed, then `python3` worked)."""
    calls = list(calls)
    if not calls or any(call.get("exit_code") != NOT_FOUND for call in calls):
        return None
    started = {call.get("at") for call in calls}
    for run in commands:
        if run.exit_code != NOT_FOUND or run.started_at not in started:
            continue
        for name, line, interpreter in not_found(run.stderr or run.stdout):
            if interpreter or name in without_heredocs(run.command).split():  # the call's own, not a typo's
                return (f"the skill's script could not start: no `{name}` in the agent's shell ({_clip(line)}, "
                        f"exit {NOT_FOUND}): put it on this machine's PATH (docs/sandbox.md)")
    return None


#: A full disk or quota: the machine's, or (when the machine has room) a bound of the agent's sandbox.
_FULL = ("No space left on device", "Disk quota exceeded", "ENOSPC", "EDQUOT")
#: What the sandbox itself says, or the kernel says, when a command meets one of the item's bounds
#: (docs/sandbox.md, "Limits"): a file over its size, a fork over the process count, work/ over its bound.
_BOUNDS = re.compile(r"(File size limit exceeded|File too large|EFBIG|fork[^\n]*Resource temporarily unavailable"
                     r"|palette: work/ holds [^\n]*|palette: the sandbox of this item has ended[^\n]*)")


#: The words of the note a full disk in a command's words becomes while the machine has room (rejudge reads them).
SANDBOX_FULL = "filled a bound of its sandbox"


def has_room(work: Path, need: int = MIN_FREE_BYTES) -> bool:
    """Whether the disk under the agent's folder still has `need` bytes free (the room a run asks for)."""
    try:
        return shutil.disk_usage(work).free >= need
    except OSError:
        return False


def bounds_met(commands: Iterable[CommandRun], room: bool) -> tuple[str, ...]:
    """Notes for the bounds of its sandbox an agent's commands met — each kind once, with the first command that
    met it. A full /tmp or /dev/shm counts here only when the machine has `room` (else it is a fault)."""
    notes: dict[str, str] = {}
    for run in commands:
        # A program's own words for an error; its output may quote anything. A host that keeps no standard error
        # apart (the claude CLI's Bash tool) gives both as one: a note, unlike a fault, may read that.
        text = run.stderr or run.stdout
        said = machine_fault(text) if room else None
        full = next((word for word in _FULL if said and word in said), None)
        if full and "full" not in notes:
            notes["full"] = (f"a command of the agent's {SANDBOX_FULL} ({full}: its /tmp, /dev/shm "
                             f"or one file; the machine had room): {_clip(run.command)}")
        met = _BOUNDS.search(text)
        kind = met.group(1)[:12] if met else ""
        if met and kind not in notes:
            notes[kind] = f"a command of the agent's met a bound of its sandbox ({_clip(met.group(1))}): " \
                          f"{_clip(run.command)}"
    return tuple(notes.values())


def first_fault(calls: Iterable[dict[str, Any]], commands: Iterable[CommandRun], work: Path | None = None,
                room: bool = False) -> str | None:
    """The first fault of an item's conversation (whose agent worked in `work`), in one line, or None. With
    `room` (the machine's disk had room when the item ended) a full disk in a command's words is a bound of its
    sandbox, noted by `bounds_met`, not a fault."""
    calls, commands = list(calls), list(commands)
    for run in commands:
        machine = machine_fault(run.stderr, work)
        if machine and not (room and any(word in machine for word in _FULL)):
            return f"a command the agent ran met a limit of this machine: {machine}"
    missing = missing_command(calls, commands)
    if missing:
        return missing
    for call in calls:
        fault = backend_fault(call)
        if fault:
            return fault
    return None


def _clip(line: str) -> str:
    line = " ".join(line.split())
    return line if len(line) <= _SHOWN else line[:_SHOWN - 1] + "…"
