"""What the agent's sandbox costs per command (measured here, never asserted by a test).

    python benchmarks/bench_sandbox.py [--runs 200] [--command "python3 -c pass"] [--work FOLDER]

Runs the same command through an item's shell unconfined and inside bubblewrap, alternating, and reports the
median and 90th percentile of each and the median difference. With --work (an item's, runs/<id>/react/<case>/work)
work/ first holds a copy of that folder: the sandbox measures work/ after each command, and an empty one costs
least. Target: the sandbox adds <= 50 ms per command. Exits 1 when the median difference misses it, 2 when
bubblewrap cannot run here.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pytest_palette.arena.sandbox import Sandbox, problem
from pytest_palette.backend import agent_environment
from pytest_palette.hosts.shell import Shell

TARGET = 0.050


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--command", default="true", help="the command timed (default: true, the bare cost)")
    parser.add_argument("--work", type=Path, help="a folder copied into work/ first (default: work/ is empty)")
    args = parser.parse_args()
    missing = problem("bubblewrap")
    if missing:
        print(missing)
        return 2
    times: dict[str, list[float]] = {"unconfined": [], "bubblewrap": []}
    with tempfile.TemporaryDirectory() as scratch:
        item = Path(scratch) / "item"
        if args.work is not None:
            shutil.copytree(args.work, item / "work", symlinks=True)
        else:
            (item / "work").mkdir(parents=True)
        env = agent_environment(item / "palette-calls.jsonl")
        shells = {kind: Shell(item / "work", env, sandbox=Sandbox(item / "work", env, mode,
                                                                   trace=item / "palette-calls.jsonl"))
                  for kind, mode in (("unconfined", "none"), ("bubblewrap", "bubblewrap"))}
        for shell in shells.values():
            shell.sandbox.prepare()
        for _ in range(args.runs):
            for kind, shell in shells.items():
                started = time.perf_counter()
                shell.run(args.command)
                times[kind].append(time.perf_counter() - started)
        for shell in shells.values():
            shell.sandbox.close()
    for kind, seconds in times.items():
        ordered = sorted(seconds)
        print(f"{kind:<11} median {statistics.median(ordered) * 1000:6.1f} ms · "
              f"p90 {ordered[int(len(ordered) * 0.9)] * 1000:6.1f} ms over {len(ordered)} runs of {args.command!r}")
    added = statistics.median(times["bubblewrap"]) - statistics.median(times["unconfined"])
    print(f"the sandbox adds {added * 1000:.1f} ms per command (target <= {TARGET * 1000:.0f} ms)")
    return 0 if added <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
