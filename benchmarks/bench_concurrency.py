"""Many conversations at once on one machine (measured here, never asserted by a test).

    python benchmarks/bench_concurrency.py [--profile heavy|light] [--conversations 33] [--host react]

Runs the 33 shipped cases with a slow model and a slow backend — the rehearsal model waiting
`--model-latency` per call (default 2 s ± 0.5), the reference engine `PALETTE_ENGINE_LATENCY` (heavy:
plan=20,edit=10,build=60, Palette-like; light: plan=3,edit=2,build=8) — with N conversations in flight in one
process (`--palette-conversations N`), and prints:

- wall: the whole run, as the user waits for it;
- the slowest item and the total of item times (each item's conversation, from its record);
- ideal: the larger of the slowest item and total item time / N — what the latencies allow;
- efficiency: ideal / wall (1.0 = no time lost to the harness or the machine);
- peak memory: the largest sum, sampled every second, of the proportional set size (PSS) of the pytest
  process, its children and every process of the runs' sandboxes (their own user ids), and the rise of the
  machine's used memory over the run.

Targets (issue 12): heavy within 1.15x the ideal, light within 1.3x, both in <= 2 GB. Exits 1 when a target
is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
PROFILES = {"heavy": ("plan=20,edit=10,build=60", 1.15), "light": ("plan=3,edit=2,build=8", 1.30)}
MEMORY_TARGET = 2 * 2**30
SANDBOX_IDS = range(420_000, 430_000)  # pytest_palette.run.sandbox: FIRST_ID, IDS


class Sampler(threading.Thread):
    """Samples the memory of a process tree and of the sandboxes' processes until stopped."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root, self.peak, self.peak_processes = root, 0, 0
        self.baseline = psutil.virtual_memory().used
        self.peak_used = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(1.0):
            processes: dict[int, psutil.Process] = {}
            try:
                top = psutil.Process(self.root)
                processes = {p.pid: p for p in [top, *top.children(recursive=True)]}
            except psutil.Error:
                pass
            for process in psutil.process_iter(["uids"]):
                if process.info["uids"] and process.info["uids"].real in SANDBOX_IDS:
                    processes.setdefault(process.pid, process)
            total = 0
            for process in processes.values():
                try:
                    total += process.memory_full_info().pss
                except psutil.Error:
                    continue
            if total > self.peak:
                self.peak, self.peak_processes = total, len(processes)
            self.peak_used = max(self.peak_used, psutil.virtual_memory().used - self.baseline)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=PROFILES, default="heavy")
    parser.add_argument("--conversations", type=int, default=33)
    parser.add_argument("--host", default="react")
    parser.add_argument("--model-latency", default="2,jitter=0.5")
    parser.add_argument("--engine-latency", default=None, help="overrides the profile's PALETTE_ENGINE_LATENCY")
    parser.add_argument("-k", default=None, help="a pytest -k expression (default: all 33 cases)")
    args = parser.parse_args()
    engine, target = PROFILES[args.profile]
    engine = args.engine_latency or engine
    with tempfile.TemporaryDirectory(prefix="palette-bench-concurrency-") as scratch:
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                   f"--host={args.host}", "--model=rehearsal", f"--palette-conversations={args.conversations}",
                   f"--palette-rehearsal-latency={args.model_latency}", "--palette-run-dir", scratch,
                   *(["-k", args.k] if args.k else [])]
        env = {**os.environ, "PALETTE_ENGINE_LATENCY": engine}
        started = time.monotonic()
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True)
        sampler = Sampler(process.pid)
        sampler.start()
        output, _ = process.communicate()
        wall = time.monotonic() - started
        sampler.stopped.set()
        sampler.join()
        ledgers = list(Path(scratch).glob("*/results.jsonl"))
        records = [json.loads(line) for ledger in ledgers for line in ledger.read_text().splitlines() if line]
    if process.returncode or not records:
        print(output[-3000:])
        print(f"the run failed (exit {process.returncode}, {len(records)} records)")
        return 1
    times = [float(r["usage"]["seconds"] or 0) for r in records]
    outcomes = {o: sum(r["outcome"] == o for r in records) for o in ("pass", "fail", "error", "skipped")}
    slowest, total = max(times), sum(times)
    ideal = max(slowest, total / args.conversations)
    efficiency = ideal / wall
    print(f"{len(records)} items on {args.host}, {args.conversations} conversations in flight, model "
          f"{args.model_latency} s a call, engine {engine}: "
          + ", ".join(f"{n} {o}" for o, n in outcomes.items() if n))
    print(f"wall {wall:.1f} s · slowest item {slowest:.1f} s · item time {total:.1f} s in all · "
          f"ideal {ideal:.1f} s · efficiency {efficiency:.2f} (wall = {wall / ideal:.2f}x ideal; target "
          f"<= {target:.2f}x)")
    print(f"peak memory {sampler.peak / 2**20:,.0f} MB PSS over {sampler.peak_processes} processes · the machine's "
          f"used memory rose by at most {sampler.peak_used / 2**20:,.0f} MB (target <= {MEMORY_TARGET / 2**30:g} GB)")
    return 0 if wall <= target * ideal and sampler.peak <= MEMORY_TARGET and outcomes["pass"] == len(records) else 1


if __name__ == "__main__":
    sys.exit(main())
