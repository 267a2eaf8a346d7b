"""How long Ctrl-C mid-turn takes to end a session, per host (measured here, never asserted by a test).

    python benchmarks/bench_interrupt.py [--host react,cuga,claude] [--runs 3] [--conversations 8]
        [--stop ctrl-c,term]

Each run starts `pytest --host H` on one case whose engine drafts for 600 s, stops it once the engine is drafting
(the agent is mid-turn, holding on `deck.py plan`) — Ctrl-C (SIGINT to the session's process group, as a terminal
sends it), and SIGTERM to the pytest process alone (`kill -TERM <pid>`) — and reports the seconds until the
session exited, and any process it left. With `--conversations N`, N copies of the case are
held at once and Ctrl-C comes once every one is drafting. Target: every session ends within 5 s (10 s with
conversations in flight) and leaves nothing. Exits 1 when a run misses it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from interrupting import CTRL_C, KILL_TERM, interrupt  # noqa: E402

TARGET = 5.0
STOPS = {"ctrl-c": CTRL_C, "term": KILL_TERM}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="react,cuga,claude")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--conversations", type=int, default=1, help="copies of the case held at once")
    parser.add_argument("--stop", default=",".join(STOPS), help=f"how the session is stopped: {', '.join(STOPS)}")
    args = parser.parse_args()
    stops = [s.strip() for s in args.stop.split(",") if s.strip()]
    if not stops or any(s not in STOPS for s in stops):
        parser.error(f"--stop takes some of {', '.join(STOPS)} (got {args.stop!r})")
    target = TARGET if args.conversations == 1 else 2 * TARGET
    missed = False
    for host in args.host.split(","):
        for stop in stops:
            missed = measure(host, stop, args.runs, args.conversations, target) or missed
    return 1 if missed else 0


def measure(host: str, stop: str, runs: int, conversations: int, target: float) -> bool:
    """Stop `runs` sessions of `host` as `stop` says; print the figures; whether one missed the target."""
    times: list[float] = []
    missed = False
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="palette-interrupt-") as scratch:
            ended = interrupt(Path(scratch), host, conversations, stop=STOPS[stop])
        if ended.skipped:
            print(f"{host}: skipped (its client is not installed here)")
            return False
        if ended.seconds is None or ended.left:
            why = "it ended before every one was drafting" if ended.exit_code is not None and ended.seconds is None \
                and not ended.left else f"{ended.seconds} s, left {ended.left}"
            tail = "\n    ".join(ended.output.strip().splitlines()[-12:])
            print(f"{host}: {stop}: did not end cleanly: {why}; the session's last lines:\n    {tail}")
            missed = True
            continue
        times.append(ended.seconds)
    if times:
        worst = max(times)
        missed = missed or worst > target
        print(f"{host}: {conversations} in flight: {stop} to exit median {statistics.median(times):.2f} s, "
              f"worst {worst:.2f} s over {len(times)} run(s), nothing left (target <= {target:g} s)", flush=True)
    return missed


if __name__ == "__main__":
    raise SystemExit(main())
