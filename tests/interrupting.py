"""Ctrl-C in the middle of a turn, as a user gives it: a real pytest session in a process group of its own,
interrupted while its agent waits on a slow backend; then every process the session started is looked for. Or
another stop (`Stop`): SIGTERM from GNU timeout or from `kill` to pytest alone, SIGHUP from a closing terminal.

Shared by tests/test_interrupts.py (nothing is left running) and benchmarks/bench_interrupt.py (how long the
session takes to end: a figure to report, never a test's assertion).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psutil
from sweeps import inner_cache

from pytest_palette.arena import leftovers

CASE = """
- name: slow_plan{n}
  covers: an interrupt mid-turn leaves nothing running
  request: Build a 3-slide deck on tides
  replies: ["yes"]
  expect:
    slides: 3
"""
#: The engine drafts for this long: the agent is mid-turn, holding on `deck.py plan`, when Ctrl-C comes.
LATENCY = "plan=600"
#: Bounds on waiting for the session to get there, and to end: a run that exceeds them is broken, not slow.
START_BOUND = 600.0
END_BOUND = 120.0
LEFT_BOUND = 30.0


@dataclass
class Interrupted:
    host: str
    #: Seconds from SIGINT to the session's exit; None when it had not ended within END_BOUND.
    seconds: float | None
    exit_code: int | None
    #: Processes of the session seen before the interrupt, or carrying its items' traces, alive after it.
    left: list[str]
    output: str
    skipped: bool = False
    #: Those running when the session exited and not on their way out (killed, exiting): what the session left to
    #: end on its own, if ever. Empty when the session stopped everything before it exited.
    at_exit: list[str] = field(default_factory=list)


def _of_session(root: Path, session: psutil.Process) -> dict[int, psutil.Process]:
    """The session's processes: its descendants, and anything whose PALETTE_TRACE lies under `root` (a build
    or a CLI in a session of its own, reparented away from the pytest process)."""
    found: dict[int, psutil.Process] = {}
    try:
        for child in session.children(recursive=True):
            found[child.pid] = child
    except psutil.Error:
        pass
    for process in psutil.process_iter():
        try:
            trace = process.environ().get("PALETTE_TRACE", "")
        except (psutil.Error, OSError):
            continue
        if trace.startswith(str(root)):
            found[process.pid] = process
    return found


def _engines_running(processes: dict[int, psutil.Process]) -> int:
    """How many engines are drafting: one a conversation in flight."""
    drafting = 0
    for process in processes.values():
        try:
            drafting += "build-plan" in process.cmdline() and process.is_running()
        except psutil.Error:
            continue
    return drafting


#: A process's flag, in /proc/<pid>/stat, once it is exiting; and SIGKILL's bit in a mask of pending signals.
PF_EXITING = 0x4
SIGKILL_BIT = 1 << (signal.SIGKILL - 1)


def _ending(process: psutil.Process) -> bool:
    """Whether the process has ended or is on its way out: gone, a zombie, exiting, or killed and not yet
    scheduled to die (SIGKILL pending). A bound-free test: a killed process under a busy machine still counts."""
    if not leftovers.running(process):
        return True
    try:
        flags = int(Path(f"/proc/{process.pid}/stat").read_text().rpartition(")")[2].split()[6])
        status = Path(f"/proc/{process.pid}/status").read_text().splitlines()
    except (OSError, ValueError, IndexError):
        return True  # gone meanwhile
    pending = [int(line.split()[1], 16) for line in status if line.startswith(("SigPnd:", "ShdPnd:"))]
    return bool(flags & PF_EXITING) or any(mask & SIGKILL_BIT for mask in pending)


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return ["?"]


def _signal_masks(pid: int) -> str:
    """The process's blocked, ignored and caught signals, as the kernel shows them (hexadecimal masks)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError as error:
        return f"status unreadable ({error})"
    return ", ".join(line.replace("\t", " ") for line in lines if line.startswith(("SigBlk", "SigIgn", "SigCgt")))


def sandbox_env() -> list[str]:
    """A git worktree's PYTHONPATH for the sandbox, which keeps none unless told (as tests/sweeps.py does)."""
    return ["--palette-sandbox-env=PYTHONPATH"] if os.environ.get("PYTHONPATH") else []


@dataclass(frozen=True)
class Stop:
    """How the session is stopped: a signal, and whom it reaches."""

    signum: int
    #: "group": the session's process group, as a terminal sends Ctrl-C; "process": the pytest process alone (`kill
    #: -TERM <pid>`); "timeout": GNU timeout wraps the session and relays the signal it gets as it does on expiry (to
    #: pytest, then to its whole group); "hangup": the session's controlling terminal (a pty) is closed, and the
    #: kernel sends SIGHUP.
    to: str = "group"

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


CTRL_C = Stop(signal.SIGINT)
TIMEOUT = Stop(signal.SIGTERM, "timeout")
KILL_TERM = Stop(signal.SIGTERM, "process")
HANGUP = Stop(signal.SIGHUP, "hangup")

#: The session starts as a terminal's would: Ctrl-C, SIGTERM and SIGHUP at their defaults (an ignored signal is
#: inherited across exec, and a C library's system() in this process ignores SIGINT while it runs), and with
#: `hangup`, the pty on its stdin as its controlling terminal.
LAUNCHER = ("import fcntl, os, signal, sys, termios\n"
            "for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):\n"
            "    signal.signal(number, signal.SIG_DFL)\n"
            "if os.environ.pop('INTERRUPTING_TTY', ''):\n"
            "    fcntl.ioctl(0, termios.TIOCSCTTY, 0)\n"
            "os.execvp(sys.argv[1], sys.argv[1:])\n")


def interrupt(folder: Path, host: str, conversations: int = 1, *, stop: Stop = CTRL_C,
              workers: int = 0) -> Interrupted:
    """Run the slow case on `host` in `folder` (`conversations` copies of it, all held at once on every host of a
    comma-separated `host`; or one at a time on each of `workers` xdist workers), stop it as `stop` says once the
    backend is drafting in every one, and look."""
    hosts = host.split(",")
    (folder / "cases").mkdir(parents=True, exist_ok=True)
    names = [""] if conversations == 1 else [f"_{n}" for n in range(1, conversations + 1)]
    (folder / "cases" / "slow.yaml").write_text("".join(CASE.format(n=name) for name in names))
    drafting = conversations * len(hosts)
    env = {**os.environ, "PALETTE_ENGINE_LATENCY": LATENCY}
    log = (folder / "session.log").open("w+")
    inherited = signal.getsignal(stop.signum)
    held = ["-n", str(workers)] if workers else ["--palette-conversations", str(drafting)]
    command = [sys.executable, "-m", "pytest", "cases", "--host", host, *inner_cache(), "-p", "no:randomly",
               "--palette-turn-timeout", "900", *held, *sandbox_env()]
    if stop.to == "timeout":  # the real coreutils timeout, its own limit far off: the test sends what expiry would
        command = ["timeout", "-s", stop.name, str(int(START_BOUND + END_BOUND) * 2), *command]
    terminal = None
    if stop.to == "hangup":
        terminal, tty = os.openpty()
        env["INTERRUPTING_TTY"] = "1"
        streams: dict[str, Any] = {"stdin": tty, "stdout": tty, "stderr": tty}
    else:
        streams = {"stdin": subprocess.DEVNULL, "stdout": log, "stderr": subprocess.STDOUT}
    session = subprocess.Popen([sys.executable, "-c", LAUNCHER, *command], cwd=folder, env=env,
                               start_new_session=True, **streams)
    if terminal is not None:
        os.close(tty)
        os.set_blocking(terminal, False)
    watched = psutil.Process(session.pid)
    seen: dict[int, psutil.Process] = {}
    deadline = time.monotonic() + START_BOUND
    try:
        while session.poll() is None and time.monotonic() < deadline:
            seen.update(_of_session(folder, watched))
            if _engines_running(seen) >= drafting:
                break
            _read(terminal, log)
            time.sleep(0.2)
        if session.poll() is not None:
            _read(terminal, log)
            log.seek(0)
            said = log.read()
            return Interrupted(host, None, session.returncode, [], said,
                               skipped="skipped" in (said.splitlines() or [""])[-1])
        seen.update(_of_session(folder, watched))
        _read(terminal, log)
        sent = time.monotonic()
        if stop.to == "group":
            os.killpg(session.pid, stop.signum)  # what the terminal does on Ctrl-C: the foreground group
        elif stop.to == "hangup":
            assert terminal is not None
            os.close(terminal)  # the terminal goes: the kernel hangs its session up
            terminal = None
        else:  # the process alone; timeout relays it to pytest, then to the group
            os.kill(session.pid, stop.signum)
        try:
            session.wait(timeout=END_BOUND)
            seconds: float | None = round(time.monotonic() - sent, 2)
            at_exit = [f"{p.pid} {' '.join(_cmdline(p))[:160]}"
                       for p in {**seen, **_of_session(folder, watched)}.values() if not _ending(p)]
        except subprocess.TimeoutExpired:
            seconds, at_exit = None, []
            pytest_process = _pytest_of(watched)
            # Whether the session ignored or blocked the signal, and what this process had when it started it.
            log.write(f"\n[interrupting] {stop.name} here when the session started: {inherited}; the session's "
                      f"{_signal_masks(pytest_process.pid)}\n")
            log.flush()
            # Where it hangs: pytest's faulthandler prints every thread's stack to the session's log on SIGABRT.
            os.kill(pytest_process.pid, signal.SIGABRT)
            try:
                session.wait(timeout=LEFT_BOUND)
            except subprocess.TimeoutExpired:
                pass
        # A process mid-exit is not "left": each gets a bound (not a speed target) to finish dying.
        after = time.monotonic() + LEFT_BOUND
        while True:
            still = [p for p in {**seen, **_of_session(folder, watched)}.values() if leftovers.running(p)]
            if not still or time.monotonic() > after:
                break
            time.sleep(0.2)
        left = [f"{p.pid} {' '.join(_cmdline(p))[:160]}" for p in still]
        log.seek(0)
        return Interrupted(host, seconds, session.returncode, left, log.read(), at_exit=at_exit)
    finally:
        if terminal is not None:
            os.close(terminal)
        if session.poll() is None:
            os.killpg(session.pid, signal.SIGKILL)
            session.wait()
        for process in _of_session(folder, watched).values():
            try:
                process.kill()
            except psutil.Error:
                pass
        log.close()


def _read(terminal: int | None, log: IO[str]) -> None:
    """What the session wrote to its terminal so far, into the log (and out of the pty, which would fill)."""
    if terminal is None:
        return
    while True:
        try:
            chunk = os.read(terminal, 65536)
        except OSError:  # nothing yet (EAGAIN), or EIO: the session has closed its end
            return
        if not chunk:
            return
        log.write(chunk.decode(errors="replace").replace("\r\n", "\n"))
        log.flush()


def _pytest_of(watched: psutil.Process) -> psutil.Process:
    """The session's pytest process: the watched one, or the child timeout started."""
    try:
        return next((child for child in watched.children() if "pytest" in _cmdline(child)), watched)
    except psutil.Error:
        return watched
