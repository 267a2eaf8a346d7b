"""How soon a deck.py hold notices that its job ended (measured here, never asserted by a test).

    python benchmarks/bench_hold.py [--runs 10]

Runs deck.py `plan` against a stand-in Palette whose job sleeps 0.7 s, with a 60 s hold, and reports the lag
between the job's exit file and the hold's answer. Target: median lag <= 0.2 s (holds poll at most every
0.1 s). Exits 1 when the median misses it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

DECK = Path(__file__).resolve().parent.parent / "pytest_palette" / "skills" / "palette" / "scripts" / "deck.py"
FAKE = textwrap.dedent("""\
    import sys, time
    from pathlib import Path
    args = sys.argv[1:]
    time.sleep(0.7)
    Path(args[args.index("--out") + 1]).write_text("# Plan\\n\\n## One\\n- a point\\n")
""")
TARGET = 0.2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    lags = []
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch) / "home"
        home.mkdir()
        (home / "palette.py").write_text(FAKE, encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PALETTE_")}
        env["PALETTE_HOME"] = str(home)
        for run in range(args.runs):
            work = Path(scratch) / f"w{run}"
            work.mkdir()
            subprocess.run([sys.executable, str(DECK), "plan", "--request", "x", "--out", "plan.md",
                            "--hold-seconds", "60"], cwd=work, env=env, capture_output=True, check=True)
            answered = time.time()
            ended = (work / ".plan.md.plan.exit").stat().st_mtime
            lags.append(answered - ended)
    median = statistics.median(lags)
    print(f"hold lag over {args.runs} runs: median {median:.3f} s, max {max(lags):.3f} s (target ≤ {TARGET} s)")
    return 0 if median <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
