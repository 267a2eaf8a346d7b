"""The call record of our own: every shell command a host saw its agent run, beside the skill's trace.

The skill's trace (`$PALETTE_TRACE`) is what the skill chooses to write; a skill without a tracer writes none.
Every host runs its agent's commands itself (react's shell, CUGA's run_command, the Claude Code CLI's Bash
tool, whose stream says what ran), so each writes one line per command here: the command line, when it
started and ended, its exit code and its output. The evidence reads the skill's calls back out of these lines
when the skill left no trace, and names a disagreement when it left one.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import itertools
import math
import os
import re
import shlex
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from . import untrusted

#: The reference skill's entry point; a command that runs it is a call of the skill. Another skill's are the
#: files of its own `scripts/` folder (`SkillCard.script_names`), given to the functions below.
SKILL_SCRIPT = "deck.py"
#: Where one shell command ends and the next begins, for a line that runs several.
_SEPARATORS = frozenset({"&&", "||", ";", "|", "&", ";;", "(", ")"})
#: Output kept per command: a plan's full text fits, a runaway command's log does not.
OUTPUT_LIMIT = 20_000
#: A here-document: `<<WORD` (or `<<-'WORD'`, `<<"WORD"`) to the end of its line, then its body up to WORD.
_HEREDOC = re.compile(r"<<-?[ \t]*(['\"]?)(\w+)\1([^\n]*)\n.*?\n[ \t]*\2[ \t]*(?:\n|$)", re.DOTALL)

#: The exit code of a command its shell could not find (or whose `#!` interpreter env could not find).
NOT_FOUND = 127
#: How a shell says a name did not resolve: dash, bash, zsh, and env looking up a `#!` line's interpreter.
_MISSING = re.compile(r"^(?:[^\n]*?: )?(?:line \d+: )?(?P<sh>[^\s:'\"]+): (?:command )?not found$"
                      r"|command not found: (?P<zsh>\S+)$"
                      r"|\benv: [‘'\"]?(?P<env>[^\s‘’'\"]+)[’'\"]?: No such file or directory$", re.MULTILINE)


Record = TypeVar("Record")


class CommandRun(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """One command a host ran for its agent, as the host saw it."""

    command: str
    started_at: float
    ended_at: float
    #: None when the host cannot tell (a command stopped by a time limit, a client that does not say).
    exit_code: int | None
    stdout: str
    stderr: str = ""


class CommandLog:
    """An item's record of commands, one JSON line each, appended as they end (a host may give None: no log).

    `watch`, when given, hears of each command as it starts (`started`) and returns what to call as it ends:
    the live progress lines, which cannot wait for the record.

    The file exists from the start, empty until a command ends: an agent that ran no command has a record too (of
    none), against which a trace it wrote some other way (the CLI's Write tool) holds no call."""

    def __init__(self, path: Path, watch: Callable[[str, float], Callable[[], None]] | None = None) -> None:
        self.path = path
        self.watch = watch
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()

    @contextlib.contextmanager
    def started(self, command: str, at: float) -> Iterator[None]:
        """Around a command the host runs itself: its watch hears when it starts and when it ends."""
        ended = self.watch(command, at) if self.watch is not None else None
        try:
            yield
        finally:
            if ended is not None:
                ended()

    def add(self, command: str, started_at: float, ended_at: float, exit_code: int | None, stdout: str,
            stderr: str = "") -> None:
        run = CommandRun(command, round(started_at, 3), round(ended_at, 3), exit_code, stdout[:OUTPUT_LIMIT],
                         stderr[:OUTPUT_LIMIT])
        self.path.parent.mkdir(parents=True, exist_ok=True)
        append_line(self.path, msgspec.json.encode(run))


def append_line(path: Path, line: bytes) -> None:
    """`line` and a newline at the end of `path`, in one write with O_APPEND: never interleaved with another's."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(descriptor, line + b"\n")
    finally:
        os.close(descriptor)


def not_found(text: str) -> list[tuple[str, str, bool]]:
    """Each name a shell's output (`text`) says it could not find, with its line, and whether it was the
    interpreter of a `#!` line (env's words) rather than a command name."""
    missing = []
    for match in _MISSING.finditer(text):
        name = next(part for part in match.groups() if part)
        missing.append((name, text[text.rfind("\n", 0, match.start()) + 1:match.end()], bool(match.group("env"))))
    return missing


def read(path: Path) -> list[CommandRun]:
    """The commands recorded at `path`, in the order they started; [] when there is no record."""
    return sorted(records(path, CommandRun), key=lambda run: run.started_at)


def in_turns(runs: Sequence[CommandRun], starts: Sequence[float | None]) -> list[list[CommandRun]]:
    """The commands of each turn, the turns sent at `starts`: those that started from its message to the next message
    sent at a known time (the last's to the end), so none is in two turns. A turn whose time was not kept holds none,
    but when no turn's was (a conversation held by hand, an earlier version's) the last holds them all."""
    placed: list[list[CommandRun]] = [[] for _ in starts]
    if placed and all(start is None for start in starts):
        placed[-1] = list(runs)
        return placed
    for number, begin in enumerate(starts):
        end = next((later for later in starts[number + 1:] if later is not None), None)
        if begin is not None:
            placed[number] = [run for run in runs if run.started_at >= begin and (end is None or run.started_at < end)]
    return placed


def records(path: Path, kind: type[Record]) -> list[Record]:
    """The lines of a harness's record of JSON lines at `path` (the commands', the code's), each read as `kind`, in
    the order written; [] when there is no record. A saved run may come from anywhere: it is read through no link
    and no further than its bound, and a line that does not read (a host killed mid-write) is skipped."""
    try:
        lines = untrusted.read_head(path.parent, Path(path.name), untrusted.COMMANDS_BYTES)[0].splitlines()
    except (OSError, untrusted.Refused):
        return []
    decoder = msgspec.json.Decoder(kind)
    found = []
    for line in lines:
        try:
            found.append(decoder.decode(line))
        except msgspec.DecodeError:
            continue
    return found


def skill_calls(runs: list[CommandRun], scripts: Collection[str] = (SKILL_SCRIPT,)) -> list[dict[str, Any]]:
    """The skill's calls in the commands (runs of any of its `scripts`), shaped like its trace lines (`at`,
    `command`, `args`, `seconds`, `exit_code`, `stdout`), each marked `"from": "host"`. A command line that runs
    the skill twice gives two calls that share its times and output; a call the agent made some other way (from
    a script of its own) is not seen here."""
    calls = []
    for run in runs:
        for subcommand, args in invocations(run.command, scripts):
            if written_out(subcommand) and not SUBCOMMAND.fullmatch(subcommand):
                continue  # a file named beside the script (`wc -l deck.py plan.md`), not a run of it
            calls.append({"at": run.started_at, "command": subcommand, "args": args,
                          "seconds": round(run.ended_at - run.started_at, 3), "exit_code": run.exit_code,
                          "stdout": run.stdout, "from": "host", "line": shown_line(run.command)})
    return calls


def without_heredocs(command: str) -> str:
    """The command with each here-document's body taken out (what it writes is data, not commands): pasted
    material written to a file may mention the skill's script or hold unbalanced quotes."""
    return _HEREDOC.sub(lambda found: f"<<{found.group(2)}{found.group(3)}\n", command)


#: Commands whose argument is a command line of its own: `eval …`, `sh -c '…'` (bash, dash, zsh …).
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash"})
#: How deep a command line run by another is read (`bash -c "eval '…'"`): far past what a person writes.
_NESTED = 4


def invocations(command: str, scripts: Collection[str] = (SKILL_SCRIPT,),
                depth: int = 0) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each run of one of the skill's `scripts` (file names) in a shell command line: its subcommand and its
    options, named as the script's parser names them (`--hold-seconds 0` → `hold_seconds: 0.0`). A command line
    that `eval` or `sh -c` runs is read too. The subcommand is the word as written: where the shell writes it
    (`$S`, a loop's variable, `$(…)`), only the skill's own record of its runs can say what it was."""
    try:
        lexer = shlex.shlex(without_heredocs(command), posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: not a command line this record can read
        return
    for start, token in enumerate(tokens):
        rest: list[str] = []
        for word in tokens[start + 1:]:
            if word in _SEPARATORS:
                break
            rest.append(word)
        name = Path(token).name
        if depth < _NESTED and (token == "eval" or (name in _SHELLS and rest[:1] == ["-c"])):
            # What it runs is one word (quoted) or the words after it: read as a command line of its own. Words
            # that are the outer line's own (`eval python3 deck.py start`) are read there, not twice.
            inner = rest[1:2] if token != "eval" else rest
            if token != "eval" or len(rest) == 1:
                yield from invocations(" ".join(inner), scripts, depth + 1)
            continue
        if name not in scripts:
            continue
        if rest and not rest[0].startswith("-"):
            yield rest[0], _options(rest[1:])


def shown_line(command: str, width: int = 300) -> str:
    """A command line as a note or a call names it: on one line, clipped."""
    flat = " ".join(command.split())
    return flat if len(flat) <= width else flat[:width - 3] + "..."


def written_out(word: str) -> bool:
    """Whether a subcommand word is as the script received it, not one the shell writes (`$S`, `` `…` ``)."""
    return "$" not in word and "`" not in word


#: A word that could be a subcommand: not a path, a file name or an option (`wc -l deck.py plan.md` runs nothing).
SUBCOMMAND = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


def _options(words: list[str]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    index = 0
    while index < len(words):
        word = words[index]
        index += 1
        if not word.startswith("--"):
            continue
        name, has_value, value = word[2:].partition("=")
        if not has_value:
            if index < len(words) and not words[index].startswith("--"):
                value, index = words[index], index + 1
            else:
                options[name.replace("-", "_")] = True
                continue
        options[name.replace("-", "_")] = _number(value) if name == "hold-seconds" else value
    return options


def _number(value: str) -> float | str:
    try:
        return float(value)
    except ValueError:
        return value


#: How far a trace line's time may lie outside the command that ran it before the difference is named: both clocks
#: are this machine's and each side rounds to the millisecond (the host's window is wider than the call by the
#: sandbox's start, a tenth of a second or more, on react, cuga and claude alike).
CLOCK_SLACK = 0.05
#: How many calls a note lists before it counts the rest.
_LISTED = 4
#: deck.py's own clip of a long answer in its trace line.
_CLIPPED = re.compile(r"… \[\+\d+ chars\]$")


@dataclass(frozen=True)
class Against:
    """How a note names the record a trace is held against: the host's record of commands, or the record of the
    skill's runs (`skill_runs`)."""

    ran_at: str = "the host ran it at"
    not_run: str = "at times the host did not run them"
    times: str = "the host's times are judged"
    differs: str = "differs from what the host saw"
    judged: str = "the host's is judged"
    lacks: str = "lacks calls the host saw run"
    lacking: str = "they are judged from the host's record"
    unseen: str = "has calls the host never saw run"
    unjudged: str = ("they are not judged (a call the host's record cannot read, such as one from a script of the "
                     "agent's, is not judged either)")
    clock: str = "the host's clock"


HOST = Against()
RUNS = Against(ran_at="it ran at", not_run="at times they did not run",
               times="the times of the record of the skill's runs are judged",
               differs="differs from the record of the skill's runs", judged="the record's is judged",
               lacks="lacks runs its record holds", lacking="they are judged from the record",
               unseen="has calls no run of its record made", unjudged="they are not judged",
               clock="the harness's clock")


def reconcile(traced: list[dict[str, Any]], seen: list[dict[str, Any]],
              against: Against = HOST) -> tuple[list[dict[str, Any]], tuple[str, ...]]:
    """The calls to judge from the skill's trace and the host's record of its calls (`skill_calls`), and what the
    two disagree on, in words (naming the record as `against` says).

    The trace is written inside the sandbox, where the agent can rewrite it; the record is written by the harness,
    outside, on its clock. So the record decides which calls ran, in which order and when: each of its calls is
    paired with the trace line of the same name whose time lies within that command (else, in order, with the next
    line of that name), and that line adds what only the skill knew — its answer, its arguments after the shell
    expanded them, its own time within the command. A time outside the command, a duration longer than it, an
    answer the command did not print, a number its command line does not hold: the record's is judged. A call the
    trace lacks is judged from the record; a line no command of the record ran is not judged. Each is named."""
    # By name, in the trace's order (for pairing by order) and by time (for pairing by time): a trace of any length
    # is paired in one pass over it, not one per command.
    named: dict[str, list[int]] = {}
    timed: dict[str, list[tuple[float, int]]] = {}
    for position, line in enumerate(traced):
        name, at = str(line.get("command")), line.get("at")
        named.setdefault(name, []).append(position)
        if isinstance(at, (int, float)) and math.isfinite(at):
            timed.setdefault(name, []).append((float(at), position))
    for entries in timed.values():
        entries.sort()
    pairs: dict[int, int] = {}
    used: set[int] = set()
    for index, call in enumerate(seen):  # the line whose time lies within the command
        entries = timed.get(call["command"], [])
        for at, position in itertools.islice(entries, bisect.bisect_left(entries, (call["at"] - CLOCK_SLACK, -1)),
                                             None):
            if at > call["at"] + call["seconds"] + CLOCK_SLACK:
                break
            if position not in used:
                pairs[index] = position
                used.add(position)
                break
    for index, call in enumerate(seen):  # else the next line of that name: its time is not the command's
        found = next((i for i in named.get(call["command"], ()) if i not in used), None) \
            if index not in pairs else None
        if found is not None:
            pairs[index] = found
            used.add(found)
    # Calls of one command line share its times and its output: the trace alone tells their answers apart.
    runs = collections.Counter((call["at"], call["seconds"]) for call in seen)
    calls: list[dict[str, Any]] = []
    moved: list[str] = []
    changed: list[str] = []
    for index, call in enumerate(seen):
        if index not in pairs:
            calls.append(call)
            continue
        line = traced[pairs[index]]
        judged, differences = _checked(line, call, runs[call["at"], call["seconds"]] > 1, against)
        calls.append(judged)
        if not _within(line.get("at"), call, CLOCK_SLACK):
            moved.append(f"{call['command']} at {clock(line.get('at'))} ({against.ran_at} "
                         f"{clock(call['at'])}–{clock(call['at'] + call['seconds'])})")
        if differences:
            changed.append(f"{call['command']} at {clock(call['at'])} ({'; '.join(differences)})")
    missing = [f"{call['command']} at {clock(call['at'])}" for index, call in enumerate(seen) if index not in pairs]
    unseen = [index for index in range(len(traced)) if index not in used]
    unseen_words = [f"{traced[i].get('command')} at {clock(traced[i].get('at'))}" for i in unseen[:_LISTED]]
    notes = []
    if moved:
        notes.append(f"the skill's trace puts calls {against.not_run}: {_listed(moved)}; {against.times}")
    if changed:
        notes.append(f"the skill's trace {against.differs}: {_listed(changed)}; {against.judged}")
    if missing:
        notes.append(f"the skill's trace {against.lacks}: {_listed(missing)}; {against.lacking}")
    if unseen:
        notes.append(f"the skill's trace {against.unseen}: {_listed(unseen_words, len(unseen))}; {against.unjudged}")
    return calls, tuple(notes)


def _checked(line: dict[str, Any], call: dict[str, Any], shared: bool,
             against: Against = HOST) -> tuple[dict[str, Any], list[str]]:
    """A trace line bounded by the record of the command that ran it (`shared` with other calls of the skill), and
    what had to be bounded, in words."""
    start, seconds = float(call["at"]), float(call["seconds"])
    at, took = _finite(line.get("at")), _finite(line.get("seconds"))
    differences = []
    if took is not None and took > seconds + CLOCK_SLACK:
        differences.append(f"it took {took:g} s in the trace but {seconds:g} s by {against.clock}")
    traced_args: dict[str, Any] = line["args"] if isinstance(line.get("args"), dict) else {}
    args: dict[str, Any] = {}
    for key, value in call["args"].items():
        theirs = traced_args.get(key)
        # The command line's words, except where the shell expanded them ($VAR, $(…), `…`) and only the skill
        # saw the result; a number or a flag is read from the command line whatever the trace says.
        expanded = isinstance(value, str) and isinstance(theirs, str) and ("$" in value or "`" in value)
        if not isinstance(value, str) and theirs is not None and theirs != value:
            differences.append(f"--{key.replace('_', '-')} is {theirs!r} in the trace but {value!r} on the command "
                               "line")
        args[key] = theirs if expanded else value
    # The command's output is the call's answer (and fuller: the trace clips it), unless the command line ran
    # several calls; then the trace's, if the command printed it.
    stdout = line.get("stdout")
    said = _CLIPPED.sub("", stdout).strip() if isinstance(stdout, str) else ""  # a trace may keep no answer
    if said and said not in call["stdout"]:
        differences.append("its answer in the trace is not what the command printed")
    if not (shared and said and said in call["stdout"]):
        stdout = call["stdout"]
    judged = {**line, "at": min(max(at, start), start + seconds) if at is not None else start,
              "command": call["command"], "args": args, "stdout": stdout,
              "seconds": min(took, seconds) if took is not None and took >= 0 else seconds}
    return judged, differences


def _finite(value: object) -> float | None:
    """A number a trace line gives, or None for anything else (NaN and infinities too: they compare with nothing)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _within(at: object, call: dict[str, Any], slack: float) -> bool:
    number = _finite(at)
    return number is not None and call["at"] - slack <= number <= call["at"] + call["seconds"] + slack


def clock(at: object) -> str:
    """A time on the machine's clock as people read it (UTC, to the hundredth of a second)."""
    if not isinstance(at, (int, float)) or not math.isfinite(at) or not 0 <= at < 1e11:
        return f"{at!r}"
    moment = datetime.fromtimestamp(at, timezone.utc)
    return f"{moment:%H:%M:%S}.{moment.microsecond // 10_000:02d}"


def _listed(items: list[str], total: int | None = None) -> str:
    """The first few items, and how many more there are (of `total`, when only the first few were put in words)."""
    more = (len(items) if total is None else total) - len(items[:_LISTED])
    return ", ".join(items[:_LISTED]) + (f" and {more} more" if more else "")
