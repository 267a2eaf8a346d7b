"""Benchmark the reference engine's build-deck: wall time and peak RSS per deck size.

    python benchmarks/bench_build.py [--runs 5] [--sizes 1,5,12]

Each run is a fresh ``python -m pytest_palette.engine build-deck`` subprocess (start-up,
imports, pptx and previews included), as deck.py runs it. Exits 1 when the 12-slide build
misses its target: median wall <= 1.5 s and peak RSS <= 200 MB.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_SLIDES = 12
TARGET_SECONDS = 1.5
TARGET_MB = 200.0


def _mb(maxrss: int) -> float:
    # ru_maxrss is kilobytes on Linux, bytes on macOS.
    return maxrss / (1024 * 1024) if sys.platform == "darwin" else maxrss / 1024


def run_once(plan: Path, out_dir: Path) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of one build-deck subprocess."""
    env = {k: v for k, v in os.environ.items() if k != "PALETTE_ENGINE_LATENCY"}
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest_palette.engine", "build-deck", "--plan", str(plan), "--out-dir",
         str(out_dir), "--json"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
    )
    # wait4 gives this child's own rusage; RUSAGE_CHILDREN would be the max over all runs so far.
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        err = proc.stderr.read().decode() if proc.stderr else ""
        raise SystemExit(f"build-deck failed ({proc.returncode}): {err.strip()}")
    if proc.stderr:
        proc.stderr.close()
    return wall, _mb(usage.ru_maxrss)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--sizes", default="1,5,12", help="comma-separated slide counts")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    from pytest_palette.engine.plan_format import serialize_plan
    from pytest_palette.engine.planner import build_plan

    failed = False
    print(f"reference engine build-deck, {args.runs} runs per size, {os.cpu_count()} CPUs")
    print(f"{'slides':>6} {'median s':>9} {'max s':>7} {'peak MB':>8}")
    with tempfile.TemporaryDirectory(prefix="bench-build-") as tmp:
        root = Path(tmp)
        for size in sizes:
            plan = root / f"plan-{size}.md"
            plan.write_text(serialize_plan(build_plan(f"a {size}-slide deck on prompt caching")), encoding="utf-8")
            runs = [run_once(plan, root / f"deck-{size}") for _ in range(args.runs)]
            walls = [w for w, _ in runs]
            peak = max(m for _, m in runs)
            median = statistics.median(walls)
            print(f"{size:>6} {median:>9.3f} {max(walls):>7.3f} {peak:>8.1f}")
            if size == TARGET_SLIDES and (median > TARGET_SECONDS or peak > TARGET_MB):
                failed = True
    children = _mb(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    print(f"peak RSS over all children (RUSAGE_CHILDREN): {children:.1f} MB")
    verdict = "OVER TARGET" if failed else "within target"
    print(f"{TARGET_SLIDES}-slide target: median <= {TARGET_SECONDS} s, peak <= {TARGET_MB:.0f} MB: {verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
