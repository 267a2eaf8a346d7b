"""Where `make test`'s time goes: the suite run as make runs it, with each test's CPU seconds (its own and its
children's: the sessions, sandboxes and clients it started) and wall seconds, summed per module.

    python benchmarks/bench_suite.py [--top 25] [-- extra pytest arguments, e.g. tests/test_site.py]

A shared sweep (tests/sweeps.py) is counted in the test that ran it first. Issue 23's targets: under 8 minutes on
2 idle cores, under 12 with both busy.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=25, help="modules and tests to list (default 25)")
    parser.add_argument("--workers", default="3", help="xdist workers, as make test (default 3)")
    parser.add_argument("pytest_args", nargs="*", help="after --: what to run instead of tests/")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-suite-") as folder:
        # As make test: the venv's bin first on PATH, bytecode written. The plugin is found from the project's
        # folder (no PYTHONPATH: the tests would pass it on to the agent's sandbox).
        env = {**os.environ, "SUITE_CPU_DIR": folder, "PYTHONDONTWRITEBYTECODE": "",
               "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
        started, began = time.monotonic(), time.time()
        done = subprocess.run([sys.executable, "-m", "pytest", *(args.pytest_args or ["tests"]), "-n", args.workers,
                               "--dist", "worksteal", "--timeout", "600", "-p", "benchmarks.suite_cpu", "-q"],
                              cwd=REPO, env=env, capture_output=True, text=True, check=False)
        wall = time.monotonic() - started
        rows: list[tuple[str, float, float]] = []
        processes = 0.0
        ends: dict[str, float] = {}
        for path in Path(folder).glob("*.json"):
            saved = json.loads(path.read_text())
            rows += [tuple(row) for row in saved["rows"]]
            processes += saved["cpu"]
            if len(saved.get("span", [])) == 2:
                ends[path.stem] = saved["span"][1] - began
    print(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-2000:])
    cpu = sum(row[1] for row in rows)
    print(f"wall {wall / 60:.1f} min · CPU of the tests {cpu:,.0f} s (of the pytest processes in all "
          f"{processes:,.0f} s) · {cpu / wall:.2f} cores busy on average")
    # A worker that ran out of tests long before the last one did is a core left idle at the end.
    print("each worker's last test ended at: " + ", ".join(f"{name} {end / 60:.1f} min"
                                                           for name, end in sorted(ends.items())))
    modules: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    for name, spent, took in rows:
        module = modules[name.split("::")[0]]
        module[0] += spent
        module[1] += took
    print(f"\n{'CPU s':>7} {'wall s':>7}  module")
    for name, (spent, took) in sorted(modules.items(), key=lambda kv: -kv[1][0])[:args.top]:
        print(f"{spent:7.0f} {took:7.0f}  {name}")
    print(f"\n{'CPU s':>7} {'wall s':>7}  test")
    for name, spent, took in sorted(rows, key=lambda row: -row[1])[:args.top]:
        print(f"{spent:7.0f} {took:7.0f}  {name[:150]}")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
