"""Processes a conversation leaves behind when its host fails, found by the trace path in their environment.

Every command an agent runs inherits the conversation's environment, and PALETTE_TRACE there names this
item's trace file and no other. So once a turn has timed out or a host has crashed, the processes still
carrying it — a command the host's client did not stop, a build it started — belong to this item alone, and
stopping them keeps a dead conversation from spending the machine (or writing to its trace) under the next
item. Linux only (/proc): elsewhere nothing is found and nothing is stopped.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

PROC = Path("/proc")


def processes_of(trace: Path) -> list[int]:
    """Process ids whose environment holds PALETTE_TRACE=<trace> (this process excluded)."""
    entry = b"\0PALETTE_TRACE=" + os.fsencode(str(trace)) + b"\0"  # a whole NUL-separated entry
    me = os.getpid()
    found: list[int] = []
    try:
        listing = os.scandir(PROC)
    except OSError:
        return []
    with listing:
        for item in listing:
            if not item.name.isdigit() or int(item.name) == me:
                continue
            try:
                environ = (PROC / item.name / "environ").read_bytes()
            except OSError:  # gone, or not ours to read
                continue
            if entry in b"\0" + environ:
                found.append(int(item.name))
    return found


def stop(trace: Path, grace: float = 2.0) -> list[int]:
    """TERM every process of this conversation, KILL what is left after `grace` seconds; return their ids."""
    stopped = processes_of(trace)
    for pid in stopped:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(pid) for pid in stopped):
        time.sleep(0.05)
    for pid in stopped:
        if _alive(pid):
            _signal(pid, signal.SIGKILL)
    return stopped


def _signal(pid: int, number: signal.Signals) -> None:
    try:
        os.kill(pid, number)
    except (ProcessLookupError, PermissionError):
        pass


def _alive(pid: int) -> bool:
    """Running, and not a zombie waiting for its parent (which counts as stopped)."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"
