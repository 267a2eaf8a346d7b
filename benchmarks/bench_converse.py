"""A whole 5-slide conversation with the rehearsal model on the react host: plan, approve, build, report.

Target (issue 2): ≤ 5 s wall for the conversation on a 2-core machine, with the harness's own
overhead reported apart. "Shell" is the wall time of the agent's shell commands (deck.py and the
work it waits for); "harness" is everything else inside the turns: LangGraph, the rehearsal model,
the tool plumbing.

    python benchmarks/bench_converse.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest_palette.hosts.react as react
from pytest_palette.arena.workspace import TRACE_NAME
from pytest_palette.backend import agent_environment
from pytest_palette.hosts.shell import Shell
from pytest_palette.judge.evidence import inspect_deck, newest_deck, read_trace
from pytest_palette.rehearsal.langchain_model import RehearsalChatModel
from pytest_palette.skill import load_skill

TARGET_SECONDS = 5.0


def one_conversation() -> dict[str, float]:
    shell_seconds = 0.0
    real_shell = Shell.run

    def timed_shell(*args: Any, **kwargs: Any) -> str:
        nonlocal shell_seconds
        started = time.perf_counter()
        try:
            return real_shell(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            shell_seconds += time.perf_counter() - started

    Shell.run = timed_shell  # type: ignore[method-assign]
    try:
        with tempfile.TemporaryDirectory() as folder:
            workspace = Path(folder)
            started = time.perf_counter()
            session = react.ReactSession(RehearsalChatModel(), [load_skill("palette")], workspace,
                                         agent_environment(workspace / TRACE_NAME))
            setup = time.perf_counter() - started
            session.send("Build a 5-slide deck on prompt caching", timeout=60)
            session.send("yes", timeout=60)
            wall = time.perf_counter() - started
            deck = newest_deck(workspace)
            if deck is None or inspect_deck(deck).slides != 5:
                raise SystemExit("the conversation did not produce a 5-slide deck")
            calls = read_trace(workspace / TRACE_NAME)
    finally:
        Shell.run = real_shell  # type: ignore[method-assign]
    turns = wall - setup
    return {"wall": wall, "setup": setup, "shell": shell_seconds, "harness": turns - shell_seconds,
            "calls": float(len(calls))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    one_conversation()  # warm the interpreter's caches; not counted
    runs = [one_conversation() for _ in range(args.repeats)]
    for key in ("wall", "setup", "shell", "harness"):
        values = [run[key] for run in runs]
        print(f"{key:>8}: median {statistics.median(values):6.3f} s   max {max(values):6.3f} s")
    print(f"   calls: {int(runs[0]['calls'])} deck.py calls per conversation")
    worst = max(run["wall"] for run in runs)
    verdict = "within" if worst <= TARGET_SECONDS else "OVER"
    print(f"worst conversation {worst:.2f} s: {verdict} the {TARGET_SECONDS:g} s target")
    return 0 if worst <= TARGET_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())
