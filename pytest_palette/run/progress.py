"""Progress a person can follow (`-v`): a line per item and turn, and a line while a command runs long.

    three_slides[react] turn 1 of 2
    three_slides[react] turn 1/2 · running python3 deck.py plan --request 'Build a 3-slide deck…' (10 s)

Each item's conversation reports to an `ItemWatch`: the turn it sends (`hold`) and each command its agent
starts and ends (the host's `CommandLog`, which every built-in host writes). The watch sends these as events to
a sink. On the controller the sink is the `Board`, which writes the lines on pytest's terminal, in step with
its terminal reporter (`_Terminal`: an item's output is captured while it holds its conversation);
a command still running `--palette-progress-after` seconds after it started gets a line then and every
`EVERY` seconds after, from the board's own thread — and a command that ended before that thread saw it that
long still gets one, so every command that ran that long is shown, however busy the machine.

xdist's workers cannot write to the controller's terminal, and xdist forwards only reports. So each worker's
sink is a file of its own (one JSON line per event, one append each) in a folder the controller made outside
the run folder and handed to the workers; the board reads what was added to each file every `TICK` seconds
(events carry their own times, so a late read still says how long a command ran). The board takes one lock
around its own lines and around pytest's per-item output, so a line of either is never cut by the other.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TextIO

import pytest

from ..arena.command_log import without_heredocs
from ..results.redaction import Secrets

#: After the first line for a long command, another this often while it still runs (--help says it too).
EVERY = 30.0
#: How often the board looks at the time and at the workers' files.
TICK = 0.25
#: A command is shown up to this many characters.
SHOWN = 100
#: A program given by its path (`skills/palette/scripts/deck.py`) is shown by its name.
_PROGRAM = re.compile(r"(?<![\w/.-])[\w./-]*/([\w.-]+\.(?:py|sh|js|mjs|rb|pl))\b")


class Sink(Protocol):
    """Where an item's events go: the board (controller) or a worker's file."""

    def send(self, event: dict[str, Any]) -> None: ...


def shown(command: str) -> str:
    """A command as one short line: no here-document bodies, programs by name, whitespace collapsed."""
    text = " ".join(_PROGRAM.sub(r"\1", without_heredocs(command)).split())
    return text if len(text) <= SHOWN else text[:SHOWN - 1] + "…"


class ItemWatch:
    """What one item's conversation reports: each turn as it is sent, each command as it starts and ends."""

    def __init__(self, item: str, sink: Sink) -> None:
        self.item, self.sink = item, sink
        self._ids = itertools.count(1)

    def turn(self, number: int, total: int) -> None:
        self.sink.send({"item": self.item, "kind": "turn", "turn": number, "turns": total})

    def command(self, command: str, started_at: float) -> Callable[[], None]:
        """Report a command that started; the result reports its end."""
        number = next(self._ids)
        self.sink.send({"item": self.item, "kind": "start", "id": number, "command": shown(command),
                        "at": started_at})
        return lambda: self.sink.send({"item": self.item, "kind": "end", "id": number, "at": time.time()})


class FileSink:
    """An xdist worker's events: one JSON line each, appended in one write (threads never tear a line)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def send(self, event: dict[str, Any]) -> None:
        descriptor = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(descriptor, json.dumps(event).encode() + b"\n")
        finally:
            os.close(descriptor)


@dataclass
class _Running:
    command: str
    started: float
    #: When the next line about it is due.
    due: float
    said: bool = False


class Board:
    """The controller's progress lines: from its own process's items directly, from xdist workers' files."""

    def __init__(self, after: float, folder: Path, secrets: Secrets | None = None) -> None:
        self.after, self.folder = after, folder
        #: What every line is scrubbed of before it reaches the terminal (the session's).
        self.secrets = secrets if secrets is not None else Secrets()
        self.lock = threading.RLock()
        self._turns: dict[str, tuple[int, int]] = {}
        self._running: dict[tuple[str, int], _Running] = {}
        self._read: dict[Path, tuple[int, bytes]] = {}  # a worker's file → bytes read, and a line not yet ended
        self._write: Callable[[str], object] | None = None
        self._terminal: _Terminal | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def send(self, event: dict[str, Any]) -> None:
        with self.lock:
            self._say(self._apply(event))

    # -- hooks: the board is a plugin of the controller ------------------------------------------------

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        self._terminal = _Terminal(reporter) if reporter is not None else None
        self._write = self._terminal.line if self._terminal is not None else None
        self._thread = threading.Thread(target=self._follow, name="palette-progress", daemon=True)
        self._thread.start()

    def pytest_sessionfinish(self) -> None:
        """Before the summary: the last events read, every long command that ended unseen said."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._poll()

    def pytest_unconfigure(self) -> None:
        if self._terminal is not None:
            self._terminal.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    # pytest's own lines about an item are written under the board's lock, so neither cuts the other's.
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_logstart(self) -> Generator[None, None, None]:
        with self.lock:
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_logreport(self) -> Generator[None, None, None]:
        with self.lock:
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_logfinish(self) -> Generator[None, None, None]:
        with self.lock:
            return (yield)

    # -- the lines -------------------------------------------------------------------------------------

    def _follow(self) -> None:
        while not self._stop.wait(TICK):
            self._poll()

    def _poll(self) -> None:
        with self.lock:
            lines = [line for event in self._events() for line in self._apply(event)]
            self._say(lines + self._due(time.time()))

    def _events(self) -> list[dict[str, Any]]:
        """What the workers added to their files since the last look (whole lines only)."""
        events = []
        for path in sorted(self.folder.glob("*.jsonl")):
            offset, rest = self._read.get(path, (0, b""))
            try:
                with path.open("rb") as file:
                    file.seek(offset)
                    added = file.read()
            except OSError:
                continue
            *lines, rest = (rest + added).split(b"\n")
            self._read[path] = (offset + len(added), rest)
            for line in lines:
                with contextlib.suppress(ValueError):
                    events.append(json.loads(line))
        return events

    def _apply(self, event: dict[str, Any]) -> list[str]:
        item, kind = str(event.get("item")), event.get("kind")
        if kind == "said":  # whole lines: the order the items start in (run/schedule.py)
            return [str(line) for line in event.get("lines", ())]
        if kind == "turn":
            self._turns[item] = (int(event["turn"]), int(event["turns"]))
            return [f"  {item} turn {event['turn']} of {event['turns']}"]
        if kind == "start":
            started = float(event["at"])
            self._running[(item, int(event["id"]))] = _Running(str(event["command"]), started, started + self.after)
        elif kind == "end":
            running = self._running.pop((item, int(event["id"])), None)
            ended = float(event["at"])
            if running is not None and not running.said and ended - running.started >= self.after:
                return [self._line(item, running, ended, "ran")]
        return []

    def _due(self, now: float) -> list[str]:
        lines = []
        for (item, _), running in self._running.items():
            if now >= running.due:
                lines.append(self._line(item, running, now, "running"))
                running.said = True
                while running.due <= now:
                    running.due += EVERY
        return lines

    def _line(self, item: str, running: _Running, now: float, verb: str) -> str:
        turn = self._turns.get(item)
        where = f" turn {turn[0]}/{turn[1]}" if turn else ""
        return f"  {item}{where} · {verb} {running.command} ({now - running.started:.0f} s)"

    def _say(self, lines: list[str]) -> None:
        if self._write is not None:
            for line in lines:
                self._write(self.secrets.scrub(line))


class _Terminal:
    """Lines on pytest's terminal while an item's output is being captured.

    Most lines come while an item's setup holds its conversation, when pytest captures file descriptor 1 (what
    the terminal reporter writes to) into the item's report. So the lines go to a copy of that descriptor made
    before (at session start, when pytest is not capturing), after ending the line pytest's reporter left open
    (an item's name, before its PASSED), as its own `ensure_newline` would. Where stdout is no descriptor (a
    pytester run in-process), they go through the reporter itself.
    """

    def __init__(self, reporter: Any) -> None:
        self.reporter = reporter
        self.stream: TextIO | None
        try:
            self.stream = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8", errors="replace")
        except (OSError, ValueError, io.UnsupportedOperation):
            self.stream = None

    def line(self, text: str) -> None:
        if self.stream is None:
            self.reporter.write_line(text)
            return
        if self.reporter.currentfspath:  # the reporter's line is still open
            self.stream.write("\n")
            self.reporter.currentfspath = None
        self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
            self.stream = None


def start(config: pytest.Config, after: float, secrets: Secrets | None = None) -> Sink | None:
    """The sink of this process's items with `-v` (None without): a board on the controller, registered as a
    plugin; on an xdist worker, a file in the folder the controller handed it (`for_workers`)."""
    if config.option.verbose <= 0 or config.option.collectonly:
        return None
    if hasattr(config, "workerinput"):
        folder = config.workerinput.get("palette_session", {}).get("progress")
        return FileSink(Path(folder) / f"{config.workerinput['workerid']}.jsonl") if folder else None
    board = Board(after, Path(tempfile.mkdtemp(prefix="palette-progress-")), secrets)
    config.pluginmanager.register(board, "palette-progress")
    return board
