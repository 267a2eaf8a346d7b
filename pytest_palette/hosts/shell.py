"""The shell an agent is given: one command at a time, in a fixed working directory."""

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
from pathlib import Path

from ..run.command_log import CommandLog
from .base import COMMAND_TIMEOUT

DEFAULT_OUTPUT_LIMIT = 24_000
#: A command longer than this is run from a script file: one argument may hold at most 128 KiB on Linux
#: (MAX_ARG_STRLEN), and `sh -c <command>` would fail with "Argument list too long".
SCRIPT_AFTER = 64 * 1024


def clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n… [output truncated, {len(text) - limit} more characters]"


class Shell:
    """One conversation's shell: one command at a time in `cwd`, each recorded in `log`.

    Each command gets its own process group, so a time limit or `close()` stops everything it started in the
    foreground; work that deck.py detached runs in a session of its own and survives, as it must. Once closed
    (the turn timed out, the session ended, Ctrl-C) the shell stops the command it is running and runs no
    other: an agent thread the harness could not stop has no way left to act.
    """

    def __init__(self, cwd: Path, env: Mapping[str, str], timeout: float = COMMAND_TIMEOUT,
                 limit: int = DEFAULT_OUTPUT_LIMIT, log: CommandLog | None = None) -> None:
        self.cwd, self.env, self.timeout, self.limit, self.log = cwd, dict(env), timeout, limit, log
        self._lock = threading.Lock()
        self._running: subprocess.Popen[str] | None = None
        self.closed = False

    def run(self, command: str) -> str:
        """Run `command` with /bin/sh and render what a model should read back."""
        started = time.time()
        with fitting(command) as fitted:
            with self._lock:
                if self.closed:
                    return "[this conversation is over: the command was not run]"
                try:
                    process = subprocess.Popen(
                        ["/bin/sh", "-c", fitted], cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
                except OSError as error:
                    if self.log:
                        self.log.add(command, started, time.time(), None, "", str(error))
                    return f"[could not run the command: {error}]"
                self._running = process
            try:
                return _finish(process, command, started, self.timeout, self.limit, self.log)
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
def fitting(command: str) -> Iterator[str]:
    """`command`, or, when it is too long to be one argument of `sh -c`, a command that runs it from a script
    file (ours, outside the agent's folder, removed once the command has ended)."""
    if len(command.encode()) <= SCRIPT_AFTER:
        yield command
        return
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", prefix="palette-command-", suffix=".sh") as script:
        script.write(command)
        script.flush()
        yield f"/bin/sh {shlex.quote(script.name)}"


def _finish(process: subprocess.Popen[str], command: str, started: float, timeout: float, limit: int,
            log: CommandLog | None) -> str:
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        stdout, stderr = process.communicate()
        if log:
            log.add(command, started, time.time(), None, stdout, stderr)
        return (f"[the command was stopped after {timeout:g} s by this shell's time limit. That is not "
                "evidence that it failed: slow work may still be running. Poll for the result instead "
                "of re-running it.]")
    if log:
        log.add(command, started, time.time(), process.returncode, stdout, stderr)
    parts = [stdout]
    if stderr:
        parts.append(f"[stderr]\n{stderr}" if stdout else stderr)
    if process.returncode:
        parts.append(f"[exit code {process.returncode}]")
    text = "\n".join(part.rstrip("\n") for part in parts if part)
    return clip(text, limit) if text.strip() else "[no output]"


def _kill_group(process: subprocess.Popen[str]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()
