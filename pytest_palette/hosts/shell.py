"""The shell an agent is given: one command at a time, in a fixed working directory, inside the item's sandbox."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..arena.command_log import CommandLog
from ..arena.sandbox import Sandbox
from .base import COMMAND_TIMEOUT, OUTPUT_LIMIT

DEFAULT_OUTPUT_LIMIT = OUTPUT_LIMIT
#: Of a clipped output, the end kept: the exit code and the last error are there.
CLIP_TAIL = 2_000
#: A command longer than this is run from a script file: one argument may hold at most 128 KiB on Linux
#: (MAX_ARG_STRLEN), and `sh -c <command>` would fail with "Argument list too long".
SCRIPT_AFTER = 64 * 1024


def clip(text: str, limit: int) -> str:
    """`text`, or, when it is longer than `limit` characters, its start and its end around a marker that says
    what was cut and how to read it all. The start holds the answer (deck.py's JSON), the end the exit code and
    the last error; Claude Code's Bash tool once cut the middle the same way."""
    if len(text) <= limit:
        return text
    tail = min(limit // 10, CLIP_TAIL)
    head = limit - tail
    marker = (f"… [output clipped: {len(text) - limit:,} of its {len(text):,} characters cut here, over this "
              f"shell's limit of {limit:,} (--palette-output-limit). To read it all, send it to a file and read "
              "that in parts.] …")
    return "\n".join(part for part in (text[:head], marker, text[len(text) - tail:] if tail else "") if part)


@dataclass(frozen=True)
class Ran:
    """What one command did: its output, and its exit code (None when it was stopped or could not start)."""

    stdout: str
    stderr: str
    code: int | None
    timed_out: bool = False
    #: The conversation was over: the command was not run.
    refused: bool = False


class Shell:
    """One conversation's shell: one command at a time in `cwd`, inside `sandbox` (by default unconfined, with
    the sandbox's allow-listed environment), each recorded in `log`.

    Each command gets its own process group, so a time limit or `close()` stops everything it started in the
    foreground; work that deck.py detached runs in a session of its own and survives, as it must. Once closed
    (the turn timed out, the session ended, Ctrl-C) the shell stops the command it is running and runs no
    other: an agent thread the harness could not stop has no way left to act.
    """

    def __init__(self, cwd: Path, env: Mapping[str, str], timeout: float = COMMAND_TIMEOUT,
                 limit: int = DEFAULT_OUTPUT_LIMIT, log: CommandLog | None = None,
                 sandbox: Sandbox | None = None) -> None:
        self.cwd, self.timeout, self.limit, self.log = cwd, timeout, limit, log
        self.sandbox = sandbox or Sandbox(cwd, env, "none")
        self._lock = threading.Lock()
        self._running: subprocess.Popen[str] | None = None
        self.closed = False

    def run(self, command: str) -> str:
        """Run `command` with /bin/sh and render what a model should read back."""
        ran = self.execute(command)
        if ran.refused:
            return "[this conversation is over: the command was not run]"
        if ran.timed_out:
            return (f"[the command was stopped after {self.timeout:g} s by this shell's time limit. That is not "
                    "evidence that it failed: slow work may still be running. Poll for the result instead "
                    "of re-running it.]")
        if ran.code is None:
            return f"[could not run the command: {ran.stderr}]"
        parts = [ran.stdout]
        if ran.stderr:
            parts.append(f"[stderr]\n{ran.stderr}" if ran.stdout else ran.stderr)
        if ran.code:
            parts.append(f"[exit code {ran.code}]")
        text = "\n".join(part.rstrip("\n") for part in parts if part)
        return clip(text, self.limit) if text.strip() else "[no output]"

    def execute(self, command: str, cwd: Path | None = None, env: Mapping[str, str] | None = None,
                timeout: float | None = None, logged: str | None = None) -> Ran:
        """Run `command` with /bin/sh in the sandbox (in `cwd`, with `env` when given: already allow-listed) and
        record it (as `logged`: what the agent wrote, when a client rewrote it); `Ran.code` is None when it could
        not start or was stopped at the time limit."""
        started = time.time()
        shown = command if logged is None else logged
        with fitting(command) as (fitted, script):
            with self._lock:
                if self.closed:
                    return Ran("", "this conversation is over: the command was not run", None, refused=True)
                try:
                    process = subprocess.Popen(
                        self.sandbox.argv(fitted, cwd or self.cwd, extra=[script] if script else []),
                        cwd=cwd or self.cwd, env=dict(env) if env is not None else self.sandbox.env,
                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                        start_new_session=True)
                except OSError as error:
                    if self.log:
                        self.log.add(shown, started, time.time(), None, "", str(error))
                    return Ran("", str(error), None)
                self._running = process
            try:
                with self.log.started(shown, started) if self.log else contextlib.nullcontext():
                    return _finish(process, shown, started, timeout or self.timeout, self.log)
            finally:
                self._running = None

    def close(self) -> None:
        """Run nothing more, and stop the command running now (its whole process group)."""
        with self._lock:
            self.closed = True
            running = self._running
        if running is not None:
            _kill_group(running)


def run_shell(command: str, cwd: Path, env: Mapping[str, str], timeout: float = COMMAND_TIMEOUT,
              limit: int = DEFAULT_OUTPUT_LIMIT, log: CommandLog | None = None) -> str:
    """Run one command in a shell of its own (see `Shell`)."""
    return Shell(cwd, env, timeout, limit, log).run(command)


@contextlib.contextmanager
def fitting(command: str) -> Iterator[tuple[str, Path | None]]:
    """`command`, or, when it is too long to be one argument of `sh -c`, a command that runs it from a script
    file (ours, outside the agent's folder, removed once the command has ended; a sandbox binds it read-only)
    and that file."""
    if len(command.encode()) <= SCRIPT_AFTER:
        yield command, None
        return
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", prefix="palette-command-", suffix=".sh") as script:
        script.write(command)
        script.flush()
        os.chmod(script.name, 0o644)  # a sandboxed command runs as the item's own user
        yield f"/bin/sh {shlex.quote(script.name)}", Path(script.name)


def _finish(process: subprocess.Popen[str], command: str, started: float, timeout: float,
            log: CommandLog | None) -> Ran:
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        stdout, stderr = process.communicate()
        if log:
            log.add(command, started, time.time(), None, stdout, stderr)
        return Ran(stdout, stderr, None, timed_out=True)
    if log:
        log.add(command, started, time.time(), process.returncode, stdout, stderr)
    return Ran(stdout, stderr, process.returncode)


def _kill_group(process: subprocess.Popen[str]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()
