"""The ledger's and `report`'s costs, on this machine (issue targets in brackets):

1. append one record, median over 10,000 appends                                    [≤ 1 ms]
2. `palette-bench report` end to end over a 100,000-record ledger written by `append`
   (33 cases × 3 hosts × ~1,010 runs, mixed outcomes), wall time, CPU time and peak RSS   [≤ 1.0 s, ≤ 300 MB]
   — and over the same records as an earlier version wrote them (schema 1), read and upgraded line by line
3. the same over 1,000,000 records (--million)                                      [completes; figures reported]

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

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pytest_palette.results import ledger  # noqa: E402
from pytest_palette.results.record import Judged, Record, Terms, Usage  # noqa: E402

HOSTS = {"react": "watsonx:ibm/granite-3-8b-instruct", "claude": "anthropic:claude-sonnet-4-6",
         "cuga": "watsonx:meta-llama/llama-3-3-70b-instruct"}
FAILURES = ["asked for 5 slides, got 4", "the .pptx does not carry IBM Plex — it was not rendered by Palette",
            "13 status polls — each is a model round trip, and the step budget is finite. The commands should be "
            "holding, not spinning",
            "pasted material never reached the plan — neither --context nor --source was used, so it was retyped "
            "or summarised into the request, which loses the grounding",
            "no .pptx was produced (no deck.pptx of at least 20,000 bytes under the workspace)"]
CHAINS = [("plan", "status", "build", "status", "status"), ("plan", "edit", "status", "build", "status"),
          ("plan", "status", "status", "status", "build", "status", "status", "status"), ("plan", "build")]
FINGERPRINTS = {"react": "a1b2c3d4e5f60718", "claude": "b1b2c3d4e5f60718", "cuga": "c1b2c3d4e5f60718"}


def make_record(rng: random.Random, case: int, host: str, index: int, clock: float, run_id: str = "bench"
                ) -> Record:
    """One plausible record: each (case, host) has its own pass rate; ~2% errors, ~0.5% skips."""
    rate = 0.35 + 0.6 * ((case * 7 + len(host) * 13) % 10) / 10
    roll = rng.random()
    outcome = "error" if roll < 0.02 else "skipped" if roll < 0.025 else "pass" if rng.random() < rate else "fail"
    judged = None
    if outcome in ("pass", "fail"):
        calls = rng.choice(CHAINS)
        judged = Judged(slides=rng.choice([3, 4, 5, 5, 5]), has_plex=rng.random() < 0.95, deck=rng.random() < 0.97,
                        calls=calls, polls=sum(c == "status" for c in calls), max_polls=12,
                        context_expected=case % 3 == 1, context_reached=case % 3 == 1 and rng.random() < 0.8,
                        edit_expected=case % 3 == 2, edit_called="edit" in calls, replanned_after_edit=False)
    seconds = round(rng.uniform(20, 400), 3)
    name = f"case_{case:02d}_{['plain', 'pasted', 'edit'][case % 3]}"
    return Record(
        run_id=run_id, case=name, host=host, run_index=index, workspace=f"{host}/{name}-{index}", outcome=outcome,
        failures=(tuple(rng.sample(FAILURES, rng.randint(1, 2))) if outcome == "fail"
                  else ("HostError: the agent process exited with code 137",) if outcome == "error"
                  else ("budget exhausted",) if outcome == "skipped" else ()),
        judged=judged,
        terms=Terms(model=HOSTS[host], label=HOSTS[host], provider=HOSTS[host].split(":")[0],
                    skill_hash="3f9a1c22b7d0", fingerprint=FINGERPRINTS[host], plugin_version="0.1.0",
                    scaffold=(("skill_loading", "lazy"), ("recursion_limit", "80")) if host == "react"
                    else (("skill_loading", "cli"),)),
        usage=Usage(seconds=seconds, turns=rng.randint(1, 4),
                    input_tokens=rng.randint(2000, 90000) if host != "cuga" else None,
                    output_tokens=rng.randint(200, 9000) if host != "cuga" else None,
                    cost_usd=round(rng.uniform(0.01, 0.4), 6) if host == "claude" else None,
                    started_at=round(clock, 3), ended_at=round(clock + seconds, 3)),
        case_hash=f"{case:012x}", tags=("core",) if case < 5 else ("corpus",))


def as_schema_1(record: Record) -> bytes:
    """The same record as an earlier version wrote it: flat, tokens as an object."""
    judged, usage, terms = record.judged, record.usage, record.terms
    flat = {
        "schema": 1, "run_id": record.run_id, "case": record.case, "host": record.host, "model": terms.model,
        "provider": terms.provider, "run_index": record.run_index, "outcome": record.outcome,
        "failures": list(record.failures), "slides": judged.slides if judged else None,
        "has_plex": bool(judged and judged.has_plex), "deck": bool(judged and judged.deck),
        "polls": judged.polls if judged else None, "calls": list(judged.calls) if judged else [],
        "context_expected": bool(judged and judged.context_expected),
        "context_reached": bool(judged and judged.context_reached),
        "edit_expected": bool(judged and judged.edit_expected), "edit_called": bool(judged and judged.edit_called),
        "replanned_after_edit": False, "seconds": usage.seconds, "turns": usage.turns,
        "tokens": {"input": usage.input_tokens, "output": usage.output_tokens} if usage.input_tokens else None,
        "cost_usd": usage.cost_usd, "skill_hash": terms.skill_hash, "case_hash": record.case_hash,
        "tags": list(record.tags), "plugin_version": terms.plugin_version, "started_at": usage.started_at,
        "ended_at": usage.ended_at, "fingerprint": terms.fingerprint, "scaffold": dict(terms.scaffold)}
    return (json.dumps(flat, separators=(",", ":"), ensure_ascii=False) + "\n").encode()


def generate(run: Path, records: int, *, cases: int = 33, seed: int = 7) -> tuple[int, int]:
    """`records` records (33 cases × 3 hosts × as many runs as it takes) into `run/results.jsonl` through
    `ledger.append`, as a run writes them, and the same records as schema 1 into `run-1/results.jsonl`;
    return both files' bytes."""
    rng = random.Random(seed)
    hosts = list(HOSTS)
    clock = 1_764_500_000.0
    old = run.with_name(run.name + "-1") / "results.jsonl"
    old.parent.mkdir(parents=True, exist_ok=True)
    with open(old, "wb") as schema_1:
        for i in range(records):
            case, rest = i % cases, i // cases
            host, index = hosts[rest % len(hosts)], rest // len(hosts) + 1
            clock += 0.37
            record = make_record(rng, case, host, index, clock)
            ledger.append(run / "results.jsonl", record)
            schema_1.write(as_schema_1(record))
    return (run / "results.jsonl").stat().st_size, old.stat().st_size


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
    """Wall seconds, CPU seconds and peak RSS (bytes) of `palette-bench report FOLDER --out … --json …` in a
    fresh process. CPU time too, because this machine is shared: wall time under contention measures the
    neighbours, CPU time measures the work."""
    out = folder / "REPORT.md"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest_palette.commands", "report", str(folder), "--out", str(out),
                           "--json", str(folder / "report.json")], capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"report failed ({done.returncode}):\n{done.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, after.ru_maxrss * 1024


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
        for size in [args.records] + ([1_000_000] if args.million else []):
            run = folder / f"r{size}"
            if args.keep and (run / "results.jsonl").exists():  # a kept ledger is reused: generating is slow
                print(f"reusing {run / 'results.jsonl'}")
            else:
                started = time.perf_counter()
                current, first = generate(run, size)
                print(f"generated {size:,} records ({current / 1e6:.0f} MB; {first / 1e6:.0f} MB as schema 1) "
                      f"in {time.perf_counter() - started:.1f} s")
            for label, target in (("schema 2", run), ("schema 1, upgraded", run.with_name(run.name + "-1"))):
                walls, cpus, peaks = [], [], []
                for _ in range(args.repeat):
                    wall, cpu, peak = time_report(target)
                    walls.append(wall)
                    cpus.append(cpu)
                    peaks.append(peak)
                report = json.loads((target / "report.json").read_text())
                kept = report["records"] - report["duplicates_dropped"]
                print(f"report {size:,} ({label}): wall {min(walls):.2f} s best / {statistics.median(walls):.2f} s "
                      f"median, CPU {min(cpus):.2f} s best, peak RSS {max(peaks) / 1e6:.0f} MB, {kept:,} records "
                      f"reported, load average {os.getloadavg()[0]:.1f}"
                      + ("   [≤ 1.0 s, ≤ 300 MB]" if size == 100_000 and label == "schema 2" else ""))
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
