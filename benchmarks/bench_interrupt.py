"""How long Ctrl-C mid-turn takes to end a session, per host (measured here, never asserted by a test).

    python benchmarks/bench_interrupt.py [--host react,cuga,claude] [--runs 3] [--conversations 8]

Each run starts `pytest --host H` on one case whose engine drafts for 600 s, sends SIGINT to the session's
process group once the engine is drafting (the agent is mid-turn, holding on `deck.py plan`), and reports the
seconds until the session exited, and any process it left. With `--conversations N`, N copies of the case are
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

from interrupting import interrupt  # noqa: E402

TARGET = 5.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="react,cuga,claude")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--conversations", type=int, default=1, help="copies of the case held at once")
    args = parser.parse_args()
    target = TARGET if args.conversations == 1 else 2 * TARGET
    missed = False
    for host in args.host.split(","):
        times: list[float] = []
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="palette-interrupt-") as scratch:
                ended = interrupt(Path(scratch), host, args.conversations)
            if ended.skipped:
                print(f"{host}: skipped (its client is not installed here)")
                break
            if ended.seconds is None or ended.left:
                print(f"{host}: did not end cleanly: {ended.seconds} s, left {ended.left}")
                missed = True
                continue
            times.append(ended.seconds)
        if times:
            worst = max(times)
            missed = missed or worst > target
            print(f"{host}: {args.conversations} in flight: Ctrl-C to exit median {statistics.median(times):.2f} s, "
                  f"worst {worst:.2f} s over {len(times)} run(s), nothing left (target <= {target:g} s)")
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
