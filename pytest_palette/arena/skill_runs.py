"""The record of the skill's runs: every run of one of the skill's scripts, as it ran, kept by the harness where the
agent can neither edit nor delete it.

The skill's trace is written inside the sandbox, where the agent can rewrite it; the host's record of commands reads
a call from the command line's words, which `S=start; deck.py $S`, `eval`, a loop or a copied script hide. So a
script that speaks this record's protocol (PROTOCOL; Palette's deck.py does) tells the harness of each run as it
happens, over a socket bound into the item's sandbox at SOCKET (or named by VARIABLE, unconfined). The harness does
not take the script's word for what ran: as a run begins, the script waits while the harness reads from the kernel
the process's arguments (/proc/<pid>/cmdline), its interpreter and its folder, and hashes the file those arguments
run against the skill's own scripts — wherever the agent copied it. A run that cannot be shown to be one of the
skill's scripts carries its doubt, and the judge does not pass an item on a run it cannot read. What the run parsed
and how it ended are added as they come; each is one line of `skill-runs.jsonl`, in the item's folder outside the
sandbox, timed on the harness's clock.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import socket
import socketserver
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import msgspec

from . import untrusted
from .command_log import (
    CLOCK_SLACK,
    NOT_FOUND,
    SUBCOMMAND,
    CommandRun,
    append_line,
    clock,
    invocations,
    shown_line,
    written_out,
)

#: What a script says first, so the record knows it speaks this protocol (and a skill whose scripts hold these words
#: is one whose runs the record expects).
PROTOCOL = "palette-skill-runs/1"
#: Where the socket is inside an item's sandbox: a fixed place, so a command cannot point the script elsewhere.
SOCKET = PurePosixPath("/run/palette/skill-runs.sock")
#: Where an unconfined run's scripts are told to find it (with no sandbox there is no fixed place to bind it).
VARIABLE = "PALETTE_SKILL_RECORD"
#: The record's file, in the item's folder beside the host's record of commands.
RECORD_NAME = "skill-runs.jsonl"

#: Bounds on what one item's scripts can make the harness hold: connections at once, runs in all, one message.
_OPEN_AT_ONCE = 64
_RUNS = 5_000
_HELLO_BYTES = 256 * 1024
_MESSAGE_BYTES = 2 * 1024 * 1024
#: How long a connection may take to say what it is before it is let go.
_HELLO_SECONDS = 30.0
#: Runs refused (over a bound, not speaking the protocol) named one by one; the rest only end the record's trust.
_DROPS_NAMED = 16
#: A script is no larger than this (deck.py is 40 KB); a larger file is not one of the skill's.
_SCRIPT_BYTES = 4 * 1024 * 1024
#: Exit codes of a command whose script never started (the shell found no interpreter, or could not run it).
_NEVER_STARTED = frozenset({NOT_FOUND, 126})


class Began(msgspec.Struct, tag="began", frozen=True):
    """A run began: what the kernel says of its process, read while the script waited."""

    run: int
    at: float
    pid: int
    #: The process's arguments as the kernel holds them.
    argv: tuple[str, ...]
    #: The file those arguments run, absolute, as the process names it ("" when it could not be told).
    script: str
    #: Why the run is not known to be one of the skill's scripts ("" when it is).
    doubt: str = ""


class Parsed(msgspec.Struct, tag="parsed", frozen=True):
    """What the script's own parser read from those arguments."""

    run: int
    command: str
    args: dict[str, Any] = {}


class Ended(msgspec.Struct, tag="ended", frozen=True):
    """The run ended: the exit code and answer the script gave, or None and "" when it ended without saying."""

    run: int
    at: float
    exit_code: int | None = None
    stdout: str = ""


class Dropped(msgspec.Struct, tag="dropped", frozen=True):
    """A connection the record did not take (over a bound, or silent): a run may have gone unrecorded."""

    at: float
    why: str


Event = Began | Parsed | Ended | Dropped
_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(Event).decode


@dataclass(frozen=True)
class SkillRun:
    """One run, its events put together."""

    run: int
    at: float
    pid: int
    argv: tuple[str, ...]
    script: str
    doubt: str
    command: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    #: None while it ran when the record was read (or when it ended without a word and the item first).
    ended_at: float | None = None
    exit_code: int | None = None
    stdout: str = ""

    @property
    def line(self) -> str:
        """The arguments as a command line, for the words of a note (clipped)."""
        shown = " ".join(self.argv)
        return shown if len(shown) <= 200 else shown[:197] + "..."


@dataclass(frozen=True)
class Record:
    """An item's record of its skill's runs as read back: the runs, and what was dropped or not read."""

    runs: tuple[SkillRun, ...]
    dropped: tuple[str, ...] = ()


def read(path: Path) -> Record | None:
    """The record at `path`; None when the item kept none (its skill does not speak the protocol, or it ran before
    the record existed). Read as a regular file, no further than its bound: a saved run may come from anywhere."""
    try:
        data, clipped = untrusted.read_head(path.parent, PurePosixPath(path.name), untrusted.COMMANDS_BYTES)
    except FileNotFoundError:
        return None
    except (OSError, untrusted.Refused) as error:
        return Record((), (f"the record of the skill's runs could not be read ({error})",))
    began: dict[int, Began] = {}
    parsed: dict[int, Parsed] = {}
    ended: dict[int, Ended] = {}
    dropped: list[str] = []
    for line in data.splitlines():
        try:
            event = _decode(line)
        except msgspec.DecodeError:
            continue  # a line cut by its bound
        if isinstance(event, Began):
            began.setdefault(event.run, event)
        elif isinstance(event, Parsed):
            parsed.setdefault(event.run, event)
        elif isinstance(event, Ended):
            ended.setdefault(event.run, event)
        else:
            dropped.append(event.why)
    if clipped:
        dropped.append(f"the record of the skill's runs is larger than {untrusted.COMMANDS_BYTES // 2**20} MiB: "
                       "only its start was read")
    runs = []
    for number, start in sorted(began.items(), key=lambda item: item[1].at):
        said, end = parsed.get(number), ended.get(number)
        runs.append(SkillRun(number, start.at, start.pid, start.argv, start.script, start.doubt,
                             said.command if said else None, dict(said.args) if said else {},
                             end.at if end else None, end.exit_code if end else None, end.stdout if end else ""))
    return Record(tuple(runs), tuple(dropped))


# -- what the judge reads ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Reading:
    """The calls a record shows, in the shape of the skill's trace lines, with what could not be read: `doubts`
    (the item cannot pass on them) and `notes`."""

    calls: list[dict[str, Any]]
    doubts: tuple[str, ...]
    notes: tuple[str, ...]


def calls_in(record: Record, commands: Iterable[CommandRun], scripts: Collection[str]) -> Reading:
    """The skill's calls as its record shows them, each beside the command line the host saw run it, and — held
    against the host's record of commands (runs of one of the skill's `scripts` by name) — what the two cannot
    agree on. A run not shown to be the skill's script, a run the host saw that never reached the record (a copy
    of the script that does not report), or a connection the record dropped: each is a doubt, in words that name
    it. A run outside every command the host saw (a process the agent left running) is judged, and noted."""
    runs = sorted(record.runs, key=lambda run: run.at)
    by_host = sorted(commands, key=lambda run: run.started_at)
    calls: list[dict[str, Any]] = []
    doubts: list[str] = [f"the record of the skill's runs dropped a run ({why}): what it did cannot be told"
                         for why in record.dropped]
    notes: list[str] = []
    outside: list[str] = []
    for run in runs:
        if run.doubt:
            if run.doubt == GONE and run.command is None and run.exit_code is None:
                notes.append(f"a run of the skill's script at {clock(run.at)} ended before the harness could look "
                             "at it, and did nothing (it waits for the harness before it starts)")
                continue
            doubts.append(f"a run at {clock(run.at)} (`{run.line}`) could not be shown to be the skill's script: "
                          f"{run.doubt}; what it did cannot be told")
            continue
        if run.command is None:
            if run.ended_at is None or run.exit_code is None:
                doubts.append(f"a run of the skill's script at {clock(run.at)} (`{run.line}`) never said what it "
                              "would do (killed, or still starting when the evidence was read): what it did cannot "
                              "be told")
            continue  # its parser refused the arguments: it did nothing
        if run.command not in run.argv[1:]:
            doubts.append(f"a run at {clock(run.at)} (`{run.line}`) says it ran {run.command!r}, which its "
                          "arguments do not name: what it did cannot be told")
            continue
        host = _window(by_host, run.at)
        if host is None:
            outside.append(f"{run.command} at {clock(run.at)}")
        ended = run.ended_at if run.ended_at is not None else run.at
        calls.append({"at": run.at, "command": run.command, "args": run.args, "seconds": round(ended - run.at, 3),
                      "exit_code": run.exit_code, "stdout": run.stdout, "from": "record",
                      "line": shown_line(host.command) if host is not None else run.line})
    doubts += _unrecorded(runs, by_host, scripts)
    if outside:
        notes.append(f"the skill ran outside every command the host saw ({', '.join(outside[:4])}"
                     f"{f' and {len(outside) - 4} more' if len(outside) > 4 else ''}): a process the agent left "
                     "running, or code the host ran itself; judged from the record of its runs")
    return Reading(calls, tuple(doubts), tuple(notes))


def _unrecorded(runs: list[SkillRun], commands: list[CommandRun], scripts: Collection[str]) -> list[str]:
    """The runs of the skill's script the host saw in its commands' words that no run of the record accounts for,
    in words: each could have been anything (a copy of the script that does not report)."""
    taken: set[int] = set()
    found: list[str] = []
    for command in commands:
        if command.exit_code in _NEVER_STARTED:
            continue  # its interpreter never started: the record could hold nothing (a rule of its own names it)
        # Runs inside the command first, then those within the clocks' slack of it (a neighbour's, perhaps).
        inside = sorted((run for run in runs if _within(run.at, command)),
                        key=lambda run: not _within(run.at, command, 0.0))
        for word, _ in invocations(command.command, scripts):
            expanded = not written_out(word)
            if not (expanded or SUBCOMMAND.fullmatch(word)):
                continue  # a file named after the script (`wc -l deck.py plan.md`): not a run
            match = next((run for run in inside if id(run) not in taken and
                          (expanded or run.command == word or (run.command is None and word in run.argv))), None)
            if match is not None:
                taken.add(id(match))
                continue
            found.append(f"the host saw `{shown_line(command.command, 160)}` run the skill's script ({word}) at "
                         f"{clock(command.started_at)}, but no run of it reached the record of the skill's runs: "
                         "what it did cannot be told")
    return found


def _window(commands: list[CommandRun], at: float) -> CommandRun | None:
    """The command the host saw running at `at`: the last that holds it, else the nearest within the clocks' slack."""
    holding = [command for command in commands if _within(at, command, 0.0)]
    if holding:
        return holding[-1]
    near = [command for command in commands if _within(at, command)]
    return min(near, key=lambda command: min(abs(at - command.started_at), abs(at - command.ended_at)), default=None)


def _within(at: float, command: CommandRun, slack: float = CLOCK_SLACK) -> bool:
    return command.started_at - slack <= at <= command.ended_at + slack


# -- what the harness runs -----------------------------------------------------------------------------------------

#: The doubt of a run whose process was gone before the harness looked at it.
GONE = "its process had ended before the harness could look at it"


def speaks_protocol(scripts: Path) -> bool:
    """Whether a skill's scripts (its `scripts/` folder) tell the record of their runs: one of them names PROTOCOL."""
    if not scripts.is_dir():
        return False
    for path in scripts.iterdir():
        with contextlib.suppress(OSError):
            if path.is_file() and PROTOCOL.encode() in path.read_bytes()[:_SCRIPT_BYTES]:
                return True
    return False


def digests(scripts: Path) -> frozenset[str]:
    """The SHA-256 of each of a skill's scripts: a run is of the skill's script when it runs a file of one of them."""
    return frozenset(hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(scripts.iterdir())
                     if path.is_file() and path.suffix != ".pyc")


class Recorder:
    """One item's record of its skill's runs: the socket its scripts tell, and the thread that listens, checks each
    run against the kernel and writes it down. `belongs(pid)` says whether a process is one of the item's."""

    def __init__(self, path: Path, scripts: frozenset[str], belongs: Callable[[int], bool], work: Path) -> None:
        self.path = path
        self.scripts = scripts
        self.belongs = belongs
        self.work = work
        self.folder = Path(tempfile.mkdtemp(prefix="palette-runs-"))  # 0700: no other user of the machine reaches it
        self.socket = self.folder / "s"
        self._lock = threading.Lock()
        self._count = 0
        self._numbered = 0
        self._open = 0
        self._drops = 0
        #: The process at the other end of each connection being served, by its thread.
        self._peers: dict[int, int] = {}
        self._idle = threading.Condition(self._lock)
        self._server: _Server | None = None
        path.touch()

    def start(self) -> Recorder:
        server = _Server(str(self.socket), self)
        os.chmod(self.socket, 0o666)  # the item's user id connects through the bind; the folder keeps others out
        self._server = server
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.5}, daemon=True,
                         name=f"skill-runs {self.path.parent.name}").start()
        return self

    def settle(self, timeout: float = 10.0) -> None:
        """Wait (bounded) until every run whose process has ended is written down — the last answer of a command that
        just returned may still be on its way — leaving the runs still running (a hold left in the background)."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while time.monotonic() < deadline and (self._open > len(self._peers) or
                                                   not all(map(_running, self._peers.values()))):
                self._idle.wait(0.05)

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        shutil.rmtree(self.folder, ignore_errors=True)  # our own socket's folder, made in __init__

    # -- one connection --------------------------------------------------------------------------------------

    def admit(self) -> bool:
        with self._lock:
            if self._open >= _OPEN_AT_ONCE or self._count >= _RUNS:
                why = (f"more than {_OPEN_AT_ONCE} at once" if self._open >= _OPEN_AT_ONCE else
                       f"more than {_RUNS} runs in one item")
                self._dropped(why)
                return False
            self._open += 1
            self._count += 1
            return True

    def finished(self) -> None:
        with self._idle:
            self._open -= 1
            self._peers.pop(threading.get_ident(), None)
            self._idle.notify_all()

    def _dropped(self, why: str) -> None:
        self._drops += 1
        if self._drops <= _DROPS_NAMED:
            self.write(Dropped(round(time.time(), 3), why))

    def write(self, event: Event) -> None:
        append_line(self.path, _encode(event))

    def serve(self, connection: socket.socket) -> None:
        at = round(time.time(), 3)
        pid = _peer(connection)
        with self._lock:
            self._numbered += 1
            number = self._numbered
            self._peers[threading.get_ident()] = pid
        connection.settimeout(_HELLO_SECONDS)
        reader = connection.makefile("rb")
        try:
            hello = _message(reader.readline(_HELLO_BYTES + 1), _HELLO_BYTES)
        except OSError:
            hello = None
        if hello is None or hello.get("protocol") != PROTOCOL:
            with self._lock:
                self._dropped("a connection that did not speak the record's protocol")
            return
        argv, script, doubt = examine(pid, hello, self.scripts, self.work, self.belongs)
        self.write(Began(number, at, pid, argv, script, doubt))
        try:
            connection.sendall(b"ok\n")  # the nod: the script goes on
            connection.settimeout(None)  # a hold lasts as long as the script holds; its end closes this
            while True:
                message = _message(reader.readline(_MESSAGE_BYTES + 1), _MESSAGE_BYTES)
                if message is None:
                    break
                if isinstance(message.get("command"), str) and isinstance(message.get("args"), dict):
                    self.write(Parsed(number, message["command"][:200], _bounded_args(message["args"])))
                elif "exit_code" in message:
                    code = message.get("exit_code")
                    self.write(Ended(number, round(time.time(), 3), code if isinstance(code, int) else None,
                                     str(message.get("stdout", ""))))
                    return
        except OSError:
            pass
        self.write(Ended(number, round(time.time(), 3)))  # it ended without saying how: killed


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, address: str, recorder: Recorder) -> None:
        self.recorder = recorder
        super().__init__(address, _Handler)

    def verify_request(self, request: Any, client_address: Any) -> bool:
        return self.recorder.admit()


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        recorder = self.server.recorder
        try:
            recorder.serve(self.request)
        finally:
            recorder.finished()


def _peer(connection: socket.socket) -> int:
    """The connecting process's id, from the kernel (in this process's pid namespace)."""
    pid, _, _ = struct.unpack("3i", connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                          struct.calcsize("3i")))
    return int(pid)


def _running(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie has closed its connections already)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            state = handle.read(512).rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def _message(line: bytes, limit: int) -> dict[str, Any] | None:
    if not line or len(line) > limit or not line.endswith(b"\n"):
        return None
    try:
        message = json.loads(line)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def _bounded_args(args: dict[str, Any]) -> dict[str, Any]:
    """The arguments a script parsed, as the judge reads them: names and plain values, long text clipped."""
    return {str(name)[:64]: _bounded(value) for name, value in list(args.items())[:64]}


def _bounded(value: Any) -> Any:
    if isinstance(value, str):  # clipped as deck.py clips an argument in its trace
        return value if len(value) <= 600 else f"{value[:600]}… [+{len(value) - 600} chars]"
    if isinstance(value, list):
        return [str(item)[:600] for item in value[:32]]
    return value if value is None or isinstance(value, (int, float, bool)) else str(value)[:600]


# -- is it the skill's script? -------------------------------------------------------------------------------------

def examine(pid: int, hello: Mapping[str, Any], scripts: Collection[str], work: Path,
            belongs: Callable[[int], bool]) -> tuple[tuple[str, ...], str, str]:
    """The kernel's arguments of process `pid`, the file they run, and why it is not shown to be one of the skill's
    `scripts` (their SHA-256; "" when it is): the process is one of the item's, run by a Python interpreter of this
    machine (`interpreted`) on a file — not `-c`, `-m` or standard input — with the very arguments the script
    reported, in the folder it reported; that file, read where the process sees it, is one of the skill's."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = tuple(os.fsdecode(part) for part in handle.read(_HELLO_BYTES).split(b"\0")[:-1])
    except OSError:
        return (), "", GONE
    if not argv:
        return argv, "", GONE  # a zombie: its arguments are gone with its memory
    if not belongs(pid):
        return argv, "", "its process is not one of this item's"
    said, cwd = hello.get("argv"), hello.get("cwd")
    if not (isinstance(said, list) and said and all(isinstance(word, str) for word in said)
            and isinstance(cwd, str) and cwd.startswith("/")):
        return argv, "", "it did not say its arguments and folder as the record's protocol asks"
    position = script_position(argv)
    if position is None:
        return argv, "", "its interpreter was not told to run a file (it ran -c, -m or standard input)"
    if list(argv[position:]) != said:
        return argv, "", "the arguments it reported are not those the kernel gave it"
    if ".." in PurePosixPath(cwd).parts:
        return argv, "", f"it reported its folder as {cwd}, which is not a folder's own name"
    script = os.path.normpath(said[0] if said[0].startswith("/") else os.path.join(cwd, said[0]))
    try:
        unknown = interpreted(pid, work)
        if unknown:
            return argv, script, unknown
        root = Path(f"/proc/{pid}/root")
        here = os.stat(f"/proc/{pid}/cwd")
        if (here.st_dev, here.st_ino) != untrusted.folder_identity(root, PurePosixPath(cwd).relative_to("/")):
            return argv, script, f"it reported its folder as {cwd}, which is not the folder it ran in"
        content = untrusted.read_bytes(root, PurePosixPath(script).relative_to("/"), _SCRIPT_BYTES)
    except untrusted.Refused as refused:
        return argv, script, f"{script}: {refused.why}"
    except (OSError, ValueError):
        return argv, script, GONE
    if hashlib.sha256(content).hexdigest() not in scripts:
        return argv, script, f"{script} is not one of the skill's scripts (its content differs)"
    return argv, script, ""


def script_position(argv: tuple[str, ...]) -> int | None:
    """Where the script's own arguments begin in a Python interpreter's (its file, then what it is given), by
    Python's options; None when it runs no file (`-c`, `-m`, `-` or nothing)."""
    index = 1
    while index < len(argv):
        word = argv[index]
        if word == "--":
            return index + 1 if index + 1 < len(argv) else None
        if word == "-" or not word.startswith("-"):
            return None if word == "-" else index
        if word.startswith("--"):
            index += 2 if word == "--check-hash-based-pycs" else 1
            continue
        for offset, letter in enumerate(word[1:], 1):
            if letter in "cm":
                return None
            if letter in "WX":  # its value is the rest of the word, or the next word
                index += 0 if offset + 1 < len(word) else 1
                break
        index += 1
    return None


#: What a Python interpreter's file is called (python3, python3.11, python3.13t …).
_PYTHON = re.compile(r"python[0-9.]*[a-z]?")


def interpreted(pid: int, work: Path) -> str:
    """Why process `pid` is not known to run a Python interpreter of this machine ("" when it is): its program must
    be named as one, and be this machine's own file at that place — not a file of the agent's folder, nor one of
    its sandbox's own (another program copied or linked under a Python's name is neither)."""
    try:
        shown = os.readlink(f"/proc/{pid}/exe")
        ran = os.stat(f"/proc/{pid}/exe")
    except OSError:
        return GONE
    if not _PYTHON.fullmatch(os.path.basename(shown)):
        return f"it was not run by a Python interpreter ({shown})"
    try:
        here = os.stat(shown)
    except OSError:
        here = None
    inside = shown == str(work) or shown.startswith(str(work).rstrip("/") + "/")
    if inside or here is None or (here.st_dev, here.st_ino) != (ran.st_dev, ran.st_ino):
        return f"its interpreter {shown} is a file of the agent's own, not this machine's"
    return ""
