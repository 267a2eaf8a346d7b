"""The ledger's and `report`'s costs, on this machine (issue targets in brackets):

1. append one record (the line and its index row), median over 10,000 appends        [≤ 1 ms]
2. `palette-bench report` end to end over a 100,000-record ledger written by `append`
   (33 cases × 3 hosts × ~1,010 runs, mixed outcomes), wall time and peak RSS        [≤ 1.0 s, ≤ 300 MB]
   — read through the ledger's index, as a run's ledger is, and again without the index (the ledger
   parsed line by line, as for a ledger written by hand or by an older version)
3. the same over 1,000,000 records                                                 [completes; figures reported]

    python benchmarks/bench_ledger.py [--records 100000] [--million] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pytest_palette import ledger, ledger_index  # noqa: E402

HOSTS = {"react": "watsonx:ibm/granite-3-8b-instruct", "claude": "anthropic:claude-sonnet-4-6",
         "cuga": "watsonx:meta-llama/llama-3-3-70b-instruct"}
FAILURES = ["asked for 5 slides, got 4", "the .pptx does not carry IBM Plex — it was not rendered by Palette",
            "13 status polls — each is a model round trip, and the step budget is finite. The commands should be "
            "holding, not spinning",
            "pasted material never reached the plan — neither --context nor --source was used, so it was retyped "
            "or summarised into the request, which loses the grounding",
            "no .pptx was produced (no deck.pptx of at least 20,000 bytes under the workspace)"]
CHAINS = [["plan", "status", "build", "status", "status"], ["plan", "edit", "status", "build", "status"],
          ["plan", "status", "status", "status", "build", "status", "status", "status"], ["plan", "build"]]


def make_record(rng: random.Random, case: int, host: str, index: int, clock: float, run_id: str = "bench"
                ) -> dict[str, Any]:
    """One plausible record: each (case, host) has its own pass rate; ~2% errors, ~0.5% skips."""
    rate = 0.35 + 0.6 * ((case * 7 + len(host) * 13) % 10) / 10
    roll = rng.random()
    outcome = "error" if roll < 0.02 else "skipped" if roll < 0.025 else "pass" if rng.random() < rate else "fail"
    calls = list(rng.choice(CHAINS)) if outcome in ("pass", "fail") else []
    seconds = round(rng.uniform(20, 400), 3)
    return {
        "schema": 1, "run_id": run_id, "case": f"case_{case:02d}_{['plain', 'pasted', 'edit'][case % 3]}",
        "host": host, "model": HOSTS[host], "provider": HOSTS[host].split(":")[0], "run_index": index,
        "outcome": outcome,
        "failures": (rng.sample(FAILURES, rng.randint(1, 2)) if outcome == "fail"
                     else ["HostError: the agent process exited with code 137"] if outcome == "error"
                     else ["budget exhausted"] if outcome == "skipped" else []),
        "slides": rng.choice([3, 4, 5, 5, 5]) if calls else None, "has_plex": bool(calls) and rng.random() < 0.95,
        "deck": bool(calls) and rng.random() < 0.97, "polls": sum(c == "status" for c in calls) if calls else None,
        "calls": calls, "context_expected": case % 3 == 1, "context_reached": case % 3 == 1 and rng.random() < 0.8,
        "edit_expected": case % 3 == 2, "edit_called": "edit" in calls, "replanned_after_edit": False,
        "seconds": seconds, "turns": rng.randint(1, 4),
        "tokens": {"input": rng.randint(2000, 90000), "output": rng.randint(200, 9000)} if host != "cuga" else None,
        "cost_usd": round(rng.uniform(0.01, 0.4), 6) if host == "claude" else None,
        "skill_hash": "3f9a1c22b7d0", "case_hash": f"{case:012x}", "tags": ["core"] if case < 5 else ["corpus"],
        "plugin_version": "0.1.0", "started_at": round(clock, 3), "ended_at": round(clock + seconds, 3),
        "fingerprint": {"react": "a1b2c3d4e5f60718", "claude": "b1b2c3d4e5f60718", "cuga": "c1b2c3d4e5f60718"}[host],
        "scaffold": {"skill_loading": "lazy", "recursion_limit": "80"} if host == "react" else {"skill_loading": "cli"},
    }


def generate(path: Path, records: int, *, cases: int = 33, seed: int = 7) -> int:
    """Append `records` records (33 cases × 3 hosts × as many runs as it takes) to one ledger, through
    `ledger.append` as a run does (so the index is written too); return the ledger's bytes."""
    rng = random.Random(seed)
    hosts = list(HOSTS)
    clock = 1_764_500_000.0
    for i in range(records):
        case, rest = i % cases, i // cases
        host, index = hosts[rest % len(hosts)], rest // len(hosts) + 1
        clock += 0.37
        ledger.append(path, make_record(rng, case, host, index, clock))
    return path.stat().st_size


def time_appends(folder: Path, count: int = 10_000) -> list[float]:
    rng = random.Random(1)
    target = folder / "append" / "results.jsonl"
    samples = []
    for i in range(count):
        record = make_record(rng, i % 33, "react", i // 33 + 1, 1_764_500_000.0 + i)
        started = time.perf_counter()
        ledger.append(target, record)
        samples.append(time.perf_counter() - started)
    return samples


def time_report(folder: Path) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (the process and its reader workers) and peak RSS (bytes) of
    `palette-bench report FOLDER --out ... --json ...` in a fresh process.

    CPU time is reported too because this machine is shared: wall time under contention measures the
    neighbours, CPU time measures the work.
    """
    script = ("import resource, sys, time; t = time.perf_counter(); from pytest_palette.cli import main; "
              "code = main(sys.argv[1:]); "
              "print('BENCH', time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "
              "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(code)")
    out = folder / "REPORT.md"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", script, "report", str(folder), "--out", str(out), "--json",
                           str(folder / "report.json")], capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    line = next((x for x in done.stderr.splitlines() if x.startswith("BENCH")), None)
    if done.returncode != 0 or line is None:
        raise SystemExit(f"report failed ({done.returncode}):\n{done.stderr[-3000:]}")
    _, _, own, children = line.split()
    return wall, cpu, max(int(own), int(children)) * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--million", action="store_true", help="also run 1,000,000 records")
    parser.add_argument("--keep", type=Path, help="generate into this folder and keep it")
    parser.add_argument("--repeat", type=int, default=3, help="report runs per size (best and median shown)")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench-ledger-"))
    try:
        samples = time_appends(folder)
        print(f"append: median {statistics.median(samples) * 1e3:.3f} ms, p99 "
              f"{sorted(samples)[int(len(samples) * 0.99)] * 1e3:.3f} ms over {len(samples):,} appends   [≤ 1 ms]")
        sizes = [args.records] + ([1_000_000] if args.million else [])
        for size in sizes:
            run = folder / f"r{size}"
            ledger_file = run / "results.jsonl"
            if args.keep and ledger_index.paths(ledger_file)[0].exists():  # a kept ledger is reused: generating is slow
                print(f"reusing {ledger_file} ({ledger_file.stat().st_size / 1e6:.0f} MB)")
            else:
                started = time.perf_counter()
                nbytes = generate(ledger_file, size)
                print(f"generated {size:,} records ({nbytes / 1e6:.0f} MB) in {time.perf_counter() - started:.1f} s")
            index = ledger_index.paths(ledger_file)[0]
            for how in ("indexed", "no index"):
                if how == "no index":  # moved aside, not deleted: a kept folder keeps its index
                    index.rename(index.with_name("aside.index"))
                try:
                    walls, cpus, peaks = [], [], []
                    for _ in range(args.repeat):
                        wall, cpu, peak = time_report(run)
                        walls.append(wall)
                        cpus.append(cpu)
                        peaks.append(peak)
                finally:
                    if how == "no index":
                        index.with_name("aside.index").rename(index)
                report = json.loads((run / "report.json").read_text())
                kept = report["records"] - report["duplicates_dropped"]
                print(f"report {size:,} ({how}): wall {min(walls):.2f} s best / {statistics.median(walls):.2f} s "
                      f"median, CPU {min(cpus):.2f} s best (all processes), peak RSS {max(peaks) / 1e6:.0f} MB "
                      f"(largest process), {kept:,} records reported, load average {os.getloadavg()[0]:.1f}"
                      + ("   [≤ 1.0 s, ≤ 300 MB]" if size == 100_000 else ""))
        print(f"self: peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3:.0f} MB")
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
