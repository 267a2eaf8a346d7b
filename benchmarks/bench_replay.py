"""A recorded run replayed against the rehearsal model's own run of the same cases (issue 25: the replay of a
33-case recorded react run takes no longer than the rehearsal model's own run).

Records the shipped cases that drive the skill (the near misses aside: 36 here) on react with the rehearsal model and
`--palette-record`, then replays them (`--model replay:RUN`), each `-n 2`, three times each in alternation, and
prints the wall and CPU times and whether every verdict came back the same. The two runs differ only in who answers
each model call — everything else (the agent's commands, the sandbox, the judge) is the same work — so it also
times that part alone, in-process: the rehearsal model and the replay answering every recorded request.

    python benchmarks/bench_replay.py
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pytest_palette.results.ledger import load  # noqa: E402


def cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def session(folder: Path, run_id: str, *args: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the session and everything it started)."""
    before = cpu()
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", str(REPO / "cases"), f"--rootdir={REPO}", "-q", "-n", "2",
                           "-p", "no:cacheprovider", "-m", "not trigger", f"--palette-run-dir={folder}",
                           f"--palette-run-id={run_id}", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=3600)
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"{run_id} did not finish (exit {done.returncode}):\n{done.stdout[-3000:]}")
    return wall, cpu() - before


def answering(recorded: Path) -> tuple[float, float, int]:
    """Seconds the rehearsal model and the replay take to answer every recorded request of the run, in-process
    (each item's calls in order, each model given the tools the call offered), and how many calls."""
    from langchain_core.messages import messages_from_dict

    from pytest_palette.arena.cassette import read_cassette
    from pytest_palette.arena.replay import replay_model
    from pytest_palette.models import build_chat_model, parse_model

    live = replay = 0.0
    calls = 0
    for item in sorted((recorded / "react").iterdir()):
        exchanges = read_cassette(item)
        rehearsal, replaying = build_chat_model(parse_model("rehearsal"), {}), replay_model(exchanges, "replay")
        for exchange in exchanges:
            messages = messages_from_dict(exchange.messages)
            started = time.perf_counter()
            rehearsal.bind_tools(exchange.tools).invoke(messages)
            live += time.perf_counter() - started
            started = time.perf_counter()
            replaying.bind_tools(exchange.tools).invoke(messages)
            replay += time.perf_counter() - started
            calls += 1
    return live, replay, calls


def shown(runs: list[tuple[float, float]]) -> str:
    walls, cpus = [w for w, _ in runs], [c for _, c in runs]
    return (f"{', '.join(f'{w:.1f}' for w in walls)} s wall (median {statistics.median(walls):.1f}); "
            f"{', '.join(f'{c:.0f}' for c in cpus)} CPU-s (median {statistics.median(cpus):.0f})")


def verdicts(run: Path) -> dict[str, tuple[str, tuple[str, ...], int | None]]:
    return {r.case: (r.outcome, r.judged.calls if r.judged else (), r.judged.slides if r.judged else None)
            for r in load(run).latest.values()}


def main() -> None:
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(temp)
        live: list[tuple[float, float]] = []
        replayed: list[tuple[float, float]] = []
        recorded = folder / "recorded"
        live.append(session(folder, "recorded", "--model=rehearsal", "--palette-record"))
        for attempt in range(3):
            replayed.append(session(folder, f"replay-{attempt}", f"--model=replay:{recorded}"))
            if attempt < 2:
                live.append(session(folder, f"live-{attempt}", "--model=rehearsal"))
        same = all(verdicts(recorded) == verdicts(folder / f"replay-{attempt}") for attempt in range(3))
        cases = len(verdicts(recorded))
        rehearsing, replaying, calls = answering(recorded)
        print(f"{cases} cases on react, -n 2")
        print(f"  the rehearsal model's own run: {shown(live)}")
        print(f"  its replay:                    {shown(replayed)}")
        print(f"  every verdict, call chain and slide count the same: {same}")
        print(f"  answering all {calls} recorded calls in-process: the rehearsal model {rehearsing:.2f} s, "
              f"the replay {replaying:.2f} s (each request held to the recorded one)")


if __name__ == "__main__":
    main()
