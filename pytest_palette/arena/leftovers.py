"""Processes a conversation leaves behind, found by the trace path in their environment, and stopped.

Every command an agent runs inherits the conversation's environment, and PALETTE_TRACE there names this
item's trace file and no other. So the processes still carrying it — a command the host's client did not stop,
a build it started, a server an agent put in the background — belong to this item alone: they are stopped when
the item ends (pass, fail or error), and at once when its conversation dies (a timeout, a crash, Ctrl-C), so a
dead conversation spends nothing of the machine and writes nothing to its trace under the next item.

psutil reads the environments (/proc on Linux, sysctl on macOS) and signals the processes.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path

import psutil

_OCTAL = re.compile(rb"\\([0-7]{3})")


def processes_of(trace: Path) -> list[int]:
    """Process ids whose environment holds PALETTE_TRACE=<trace>, or whose sandbox has the trace mounted (this
    process excluded)."""
    wanted, me = str(trace), os.getpid()
    found: list[int] = []
    for process in psutil.process_iter():
        if process.pid == me:
            continue
        try:
            if (process.environ().get("PALETTE_TRACE") == wanted or _mounts(process.pid, wanted)) and running(process):
                found.append(process.pid)
        except (psutil.Error, OSError):  # gone, or not ours to read
            continue
    return found


def _mounts(pid: int, path: str) -> bool:
    """Whether `path` is a mount point in the process's mount namespace: a sandboxed command that cleared its
    environment still has the item's trace bound there (not as root, no user id of the item's marks it)."""
    wanted = os.fsencode(path)
    try:
        with open(f"/proc/{pid}/mountinfo", "rb") as mounts:
            # Field 5 is the mount point, with space, tab, newline and backslash written as octal escapes.
            return any(_OCTAL.sub(lambda code: bytes([int(code[1], 8)]), line.split(b" ")[4]) == wanted
                       for line in mounts if line.count(b" ") >= 5)
    except OSError:
        return False


def stop(trace: Path, grace: float = 2.0) -> list[int]:
    """TERM every process of this conversation, KILL what is left after `grace` seconds; return their ids."""
    processes = []
    for pid in processes_of(trace):
        try:
            processes.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    for process in processes:
        _send(process.terminate)
    alive = _wait(processes, grace)
    for process in alive:
        _send(process.kill)
    _wait(alive, grace)
    return [process.pid for process in processes]


def _wait(processes: list[psutil.Process], grace: float) -> list[psutil.Process]:
    """Those still running after up to `grace` seconds. Not psutil.wait_procs: it reaps our own children,
    and a child's Popen must read its real exit status (a killed command is not an exit 0)."""
    deadline = time.monotonic() + grace
    while True:
        alive = [process for process in processes if running(process)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)


def running(process: psutil.Process) -> bool:
    """Still running: not gone, and not a zombie waiting for its parent (which counts as stopped)."""
    try:
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _send(signal_it: Callable[[], None]) -> None:
    try:
        signal_it()
    except psutil.Error:
        pass
