"""Stopping what a failed conversation left running: only its own processes, even those ignoring TERM."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pytest_palette.arena import leftovers

# Ignores SIGTERM, as a tool's child may; says it is ready so the test does not race its start.
STUBBORN = "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); " \
           "time.sleep(60)"


def _start(trace: Path, code: str = "import time; print('ready', flush=True); time.sleep(60)") -> subprocess.Popen[str]:
    env = {**os.environ, "PALETTE_TRACE": str(trace)}
    process = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True,
                               start_new_session=True)  # like a build: its own session, out of any group
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    return process


def test_only_the_conversations_own_processes_are_found(tmp_path: Path) -> None:
    mine, other, longer = (tmp_path / "a" / "palette-calls.jsonl", tmp_path / "b" / "palette-calls.jsonl",
                           tmp_path / "a" / "palette-calls.jsonl2")
    processes = [_start(mine), _start(other), _start(longer)]
    try:
        assert leftovers.processes_of(mine) == [processes[0].pid]
    finally:
        for process in processes:
            process.kill()
            process.wait()


def test_stop_terms_then_kills_what_ignores_term_and_leaves_the_rest(tmp_path: Path) -> None:
    trace, other = tmp_path / "a" / "palette-calls.jsonl", tmp_path / "b" / "palette-calls.jsonl"
    polite, stubborn, bystander = _start(trace), _start(trace, STUBBORN), _start(other)
    try:
        assert sorted(leftovers.stop(trace, grace=0.5)) == sorted([polite.pid, stubborn.pid])
        assert polite.wait(5) == -15 and stubborn.wait(5) == -9  # TERM sufficed; KILL was needed
        assert bystander.poll() is None and leftovers.processes_of(trace) == []
    finally:
        for process in (polite, stubborn, bystander):
            process.kill()
            process.wait()


def test_nothing_to_stop_is_not_an_error(tmp_path: Path) -> None:
    assert leftovers.stop(tmp_path / "palette-calls.jsonl") == []
