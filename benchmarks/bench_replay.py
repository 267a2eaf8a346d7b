"""A recorded run replayed against the rehearsal model's own run of the same cases (issue 25: the replay of a
33-case recorded react run takes no longer than the rehearsal model's own run).

Records the shipped cases that drive the skill (the near misses aside: 36 here) on react with the rehearsal model and
`--palette-record`, then replays them (`--model replay:RUN`), each `-n 2`, twice each in alternation, and prints
the wall times and whether every verdict came back the same.

    python benchmarks/bench_replay.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pytest_palette.results.ledger import load  # noqa: E402


def session(folder: Path, run_id: str, *args: str) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", str(REPO / "cases"), f"--rootdir={REPO}", "-q", "-n", "2",
                           "-p", "no:cacheprovider", "-m", "not trigger", f"--palette-run-dir={folder}",
                           f"--palette-run-id={run_id}", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=3600)
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"{run_id} did not finish (exit {done.returncode}):\n{done.stdout[-3000:]}")
    return wall


def verdicts(run: Path) -> dict[str, tuple[str, tuple[str, ...], int | None]]:
    return {r.case: (r.outcome, r.judged.calls if r.judged else (), r.judged.slides if r.judged else None)
            for r in load(run).latest.values()}


def main() -> None:
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(temp)
        live, replayed = [], []
        recorded = folder / "recorded"
        live.append(session(folder, "recorded", "--model=rehearsal", "--palette-record"))
        for attempt in range(2):
            replayed.append(session(folder, f"replay-{attempt}", f"--model=replay:{recorded}"))
            if attempt == 0:
                live.append(session(folder, "live-again", "--model=rehearsal"))
        same = verdicts(recorded) == verdicts(folder / "replay-0") == verdicts(folder / "replay-1")
        cases = len(verdicts(recorded))
        print(f"{cases} cases on react, -n 2")
        print(f"  the rehearsal model's own run: {', '.join(f'{s:.1f} s' for s in live)} "
              f"(median {statistics.median(live):.1f} s)")
        print(f"  its replay:                    {', '.join(f'{s:.1f} s' for s in replayed)} "
              f"(median {statistics.median(replayed):.1f} s)")
        print(f"  every verdict, call chain and slide count the same: {same}")


if __name__ == "__main__":
    main()
