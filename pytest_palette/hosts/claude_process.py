"""One Claude Code CLI process that carries a whole conversation: `claude -p --input-format stream-json`.

The CLI's start is most of what a short turn costs it (about 0.5 CPU-s and 0.5 s of wall before its first model
request: its JavaScript, settings, plugins, skills, certificates; benchmarks/bench_claude_turn.py). Started once per
conversation, it reads each user message as one line of JSON on its standard input and answers each as it does a
print-mode run: a `system/init` line (the skills it discovered), the turn's messages, and the turn's own `result` —
its usage, `num_turns`, `stop_reason` and errors are the turn's, and `total_cost_usd` the session's running total, as
on `--resume`.

The stream is read from pipes, line by line, until the turn's `result`: a turn ends when the CLI says so, not when
its process exits. Its standard error is read as it comes, into the turn's own file.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

#: How long the CLI may take to exit once its input has ended (it writes its session and flushes) before it is stopped.
EXIT_GRACE = 5.0
#: The most of a stream read at once.
CHUNK = 1 << 20
#: How often a turn that hears nothing looks whether the CLI is still there.
WATCH = 1.0


class TimedOut(Exception):
    """The turn's time ran out before the CLI's `result` line (the process still runs)."""


def user_line(message: str, session_id: str) -> bytes:
    """A user message as the CLI reads it with `--input-format stream-json` (the Agent SDK's shape)."""
    return (json.dumps({"type": "user", "message": {"role": "user", "content": message},
                        "parent_tool_use_id": None, "session_id": session_id}) + "\n").encode("utf-8")


def is_result(line: bytes) -> bool:
    """Whether a line of the stream is a turn's end: its `result`."""
    if b'"result"' not in line:
        return False
    try:
        event = json.loads(line)
    except ValueError:
        return False
    return isinstance(event, dict) and event.get("type") == "result"


class CliProcess:
    """The CLI, started with pipes on its standard streams, in a process group of its own."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, start_new_session=True)
        assert self.process.stdin and self.process.stdout and self.process.stderr
        self._stdin: IO[bytes] | None = self.process.stdin
        self._out, self._err = self.process.stdout, self.process.stderr
        for stream in (self._stdin, self._out, self._err):
            os.set_blocking(stream.fileno(), False)
        self._rest = b""  # an unfinished line of stdout

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process.poll() is None and self._stdin is not None

    def turn(self, message: bytes, out: IO[bytes], err: IO[bytes], timeout: float,
             heard: Callable[[bytes], None] = lambda line: None) -> bool:
        """Send `message` and copy the stream to `out` (each line also to `heard`) and standard error to `err`,
        until the turn's `result` line (True) or the end of the stream (False: the CLI exited). TimedOut when
        `timeout` runs out first."""
        deadline = time.monotonic() + timeout
        pending = message
        with selectors.DefaultSelector() as selector:
            selector.register(self._out, selectors.EVENT_READ)
            selector.register(self._err, selectors.EVENT_READ)
            if self._stdin is not None and pending:
                selector.register(self._stdin, selectors.EVENT_WRITE)
            elif pending:
                return False  # its input already ended: nothing will answer
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimedOut
                events = selector.select(min(left, WATCH))
                if not events and self.process.poll() is not None:
                    # It exited, and something it started still holds the pipe: what is there is all there is.
                    chunk = self._read(self._out)
                    return self._lines(chunk or b"", out, heard, err) or self._ended(out, heard, err)
                for key, _ in events:
                    if key.fileobj is self._stdin:
                        pending = self._write(pending)
                        if not pending or self._stdin is None:
                            selector.unregister(key.fileobj)
                    elif key.fileobj is self._err:
                        chunk = self._read(self._err)
                        if chunk:
                            err.write(chunk)
                        elif chunk is not None:  # its end
                            selector.unregister(self._err)
                    else:
                        chunk = self._read(self._out)
                        if chunk is None:
                            continue
                        if not chunk:
                            return self._ended(out, heard, err)
                        if self._lines(chunk, out, heard, err):
                            return True

    def _lines(self, chunk: bytes, out: IO[bytes], heard: Callable[[bytes], None], err: IO[bytes]) -> bool:
        """Copy the whole lines of `chunk` (after what was left of the last one); True at the turn's `result`."""
        *lines, self._rest = (self._rest + chunk).split(b"\n")
        for line in lines:
            out.write(line + b"\n")
            heard(line)
            if is_result(line):
                self._drain(err)
                return True
        return False

    def _ended(self, out: IO[bytes], heard: Callable[[bytes], None], err: IO[bytes]) -> bool:
        """The stream ended before a `result`: its last line, if it had no newline, is copied too."""
        if self._rest:
            out.write(self._rest)
            heard(self._rest)
            self._rest = b""
        self._drain(err)
        return False

    def end(self, err: IO[bytes] | None = None, grace: float = EXIT_GRACE) -> int:
        """End the conversation: close its input, let the CLI exit within `grace` (else stop it), and give its
        exit status. What it still writes to standard error goes to `err`."""
        self._close_input()
        deadline = time.monotonic() + grace
        while self.process.poll() is None and time.monotonic() < deadline:
            for stream in (self._out, self._err):  # a full pipe would keep it from exiting
                chunk = self._read(stream)
                if chunk and stream is self._err and err is not None:
                    err.write(chunk)
            time.sleep(0.02)
        if self.process.poll() is None:
            stop(self.process, grace)
        for stream in (self._out, self._err):
            stream.close()
        return self.process.wait()

    def stop(self, grace: float = EXIT_GRACE) -> None:
        """Stop the CLI and everything in its process group at once (a turn out of time)."""
        self._close_input()
        stop(self.process, grace)
        for stream in (self._out, self._err):
            stream.close()

    def _write(self, pending: bytes) -> bytes:
        assert self._stdin is not None
        try:
            written = os.write(self._stdin.fileno(), pending[:CHUNK])
        except BlockingIOError:
            return pending
        except (BrokenPipeError, OSError):  # it exited: what it streamed says why
            self._close_input()
            return b""
        return pending[written:]

    def _close_input(self) -> None:
        if self._stdin is not None:
            try:
                self._stdin.close()
            except OSError:
                pass
            self._stdin = None

    def _drain(self, err: IO[bytes]) -> None:
        chunk = self._read(self._err)
        if chunk:
            err.write(chunk)

    @staticmethod
    def _read(stream: IO[bytes]) -> bytes | None:
        """What the stream holds now; b"" at its end, None when nothing is there yet."""
        try:
            return os.read(stream.fileno(), CHUNK)
        except BlockingIOError:
            return None
        except (OSError, ValueError):  # closed
            return b""


def stop(process: subprocess.Popen[bytes], grace: float) -> None:
    """Stop a process and everything it started in its process group: TERM, a grace, then KILL the group.

    The KILL goes to the group even when the process itself has exited: a tool's child may ignore TERM.
    (deck.py's builds start their own sessions, so they are not in this group.)
    """
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=grace)
