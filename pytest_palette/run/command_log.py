"""The call record of our own: every shell command a host saw its agent run, beside the skill's trace.

The skill's trace (`$PALETTE_TRACE`) is what the skill chooses to write; a skill without a tracer writes none.
Every host runs its agent's commands itself (react's shell, CUGA's run_command, the Claude Code CLI's Bash
tool, whose stream says what ran), so each writes one line per command here: the command line, when it
started and ended, its exit code and its output. The evidence reads the skill's calls back out of these lines
when the skill left no trace, and names a disagreement when it left one.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

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
    the live progress lines, which cannot wait for the record."""

    def __init__(self, path: Path, watch: Callable[[str, float], Callable[[], None]] | None = None) -> None:
        self.path = path
        self.watch = watch

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
        line = msgspec.json.encode(run) + b"\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One write with O_APPEND: a line is never interleaved with another's.
        descriptor = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(descriptor, line)
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
    """The commands recorded at `path`, in the order they ended; [] when there is no record. A line that
    does not read (a host killed mid-write) is skipped."""
    try:  # a saved run may come from anywhere: not through a link, and no further than its bound
        lines = untrusted.read_head(path.parent, Path(path.name), untrusted.COMMANDS_BYTES)[0].splitlines()
    except (OSError, untrusted.Refused):
        return []
    runs = []
    for line in lines:
        try:
            runs.append(msgspec.json.decode(line, type=CommandRun))
        except msgspec.DecodeError:
            continue
    return sorted(runs, key=lambda run: run.started_at)


def skill_calls(runs: list[CommandRun], scripts: Collection[str] = (SKILL_SCRIPT,)) -> list[dict[str, Any]]:
    """The skill's calls in the commands (runs of any of its `scripts`), shaped like its trace lines (`at`,
    `command`, `args`, `seconds`, `exit_code`, `stdout`), each marked `"from": "host"`. A command line that runs
    the skill twice gives two calls that share its times and output; a call the agent made some other way (from
    a script of its own) is not seen here."""
    calls = []
    for run in runs:
        for subcommand, args in invocations(run.command, scripts):
            calls.append({"at": run.started_at, "command": subcommand, "args": args,
                          "seconds": round(run.ended_at - run.started_at, 3), "exit_code": run.exit_code,
                          "stdout": run.stdout, "from": "host"})
    return calls


def without_heredocs(command: str) -> str:
    """The command with each here-document's body taken out (what it writes is data, not commands): pasted
    material written to a file may mention the skill's script or hold unbalanced quotes."""
    return _HEREDOC.sub(lambda found: f"<<{found.group(2)}{found.group(3)}\n", command)


def invocations(command: str, scripts: Collection[str] = (SKILL_SCRIPT,)) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each run of one of the skill's `scripts` (file names) in a shell command line: its subcommand and its
    options, named as the script's parser names them (`--hold-seconds 0` → `hold_seconds: 0.0`)."""
    try:
        lexer = shlex.shlex(without_heredocs(command), posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: not a command line this record can read
        return
    for start, token in enumerate(tokens):
        if Path(token).name not in scripts:
            continue
        rest: list[str] = []
        for word in tokens[start + 1:]:
            if word in _SEPARATORS:
                break
            rest.append(word)
        if rest and not rest[0].startswith("-"):
            yield rest[0], _options(rest[1:])


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
