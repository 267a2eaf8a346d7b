"""Ctrl-C in the middle of a turn, as a user gives it: a real pytest session in a process group of its own,
interrupted while its agent waits on a slow backend; then every process the session started is looked for.

Shared by tests/test_interrupts.py (nothing is left running) and benchmarks/bench_interrupt.py (how long the
session takes to end: a figure to report, never a test's assertion).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

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


def interrupt(folder: Path, host: str, conversations: int = 1) -> Interrupted:
    """Run the slow case on `host` in `folder` (`conversations` copies of it, all held at once), press Ctrl-C once
    the backend is drafting in every one, and look."""
    (folder / "cases").mkdir(parents=True, exist_ok=True)
    names = [""] if conversations == 1 else [f"_{n}" for n in range(1, conversations + 1)]
    (folder / "cases" / "slow.yaml").write_text("".join(CASE.format(n=name) for name in names))
    env = {**os.environ, "PALETTE_ENGINE_LATENCY": LATENCY}
    log = (folder / "session.log").open("w+")
    inherited = signal.getsignal(signal.SIGINT)
    command = [sys.executable, "-m", "pytest", "cases", "--host", host, *inner_cache(), "-p",
               "no:randomly", "--palette-turn-timeout", "900", "--palette-conversations", str(conversations)]
    # A terminal's session takes Ctrl-C. An ignored SIGINT is inherited across exec, and Python then installs no
    # KeyboardInterrupt at all: a launcher restores the default before it becomes the session (a C library's
    # system() in this process ignores SIGINT while it runs).
    launcher = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                "os.execv(sys.executable, sys.argv[1:])")
    session = subprocess.Popen(
        [sys.executable, "-c", launcher, *command], cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True)
    watched = psutil.Process(session.pid)
    seen: dict[int, psutil.Process] = {}
    deadline = time.monotonic() + START_BOUND
    try:
        while session.poll() is None and time.monotonic() < deadline:
            seen.update(_of_session(folder, watched))
            if _engines_running(seen) >= conversations:
                break
            time.sleep(0.2)
        if session.poll() is not None:
            log.seek(0)
            said = log.read()
            return Interrupted(host, None, session.returncode, [], said, skipped="skipped" in said.splitlines()[-1])
        seen.update(_of_session(folder, watched))
        sent = time.monotonic()
        os.killpg(session.pid, signal.SIGINT)  # what the terminal does on Ctrl-C: the foreground group
        try:
            session.wait(timeout=END_BOUND)
            seconds: float | None = round(time.monotonic() - sent, 2)
        except subprocess.TimeoutExpired:
            seconds = None
            # Whether the session ignored or blocked the signal, and what this process had when it started it.
            log.write(f"\n[interrupting] SIGINT here when the session started: {inherited}; the session's "
                      f"{_signal_masks(session.pid)}\n")
            log.flush()
            # Where it hangs: pytest's faulthandler prints every thread's stack to the session's log on SIGABRT.
            os.kill(session.pid, signal.SIGABRT)
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
        return Interrupted(host, seconds, session.returncode, left, log.read())
    finally:
        if session.poll() is None:
            os.killpg(session.pid, signal.SIGKILL)
            session.wait()
        for process in _of_session(folder, watched).values():
            try:
                process.kill()
            except psutil.Error:
                pass
        log.close()
