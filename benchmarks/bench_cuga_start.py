"""What a cuga conversation's start costs: its worker, forked from the warm CUGA into its item's sandbox.

    python benchmarks/bench_cuga_start.py [--conversations 8]

Opens (and closes) 1 conversation, then N, each in a process of its own, with the skill installed and the rehearsal
model's endpoint, as a run opens them; no turn is sent. Each process's CPU is counted whole — its own, its sandboxes',
and the warm process's with its children, reaped when it ends — so a conversation's start is the difference over
the N−1 more, and the warm process's one start what the single one costs beyond it. Target (issue 41): a start in at
most 1 CPU-s. Run it on an idle machine: it prints figures and exits 1 when the target is missed.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

TARGET = 1.0

OPEN = """
import sys
from pathlib import Path, PurePosixPath
from pytest_palette.arena.workspace import Workspace
from pytest_palette.backend import agent_environment
from pytest_palette.hosts.base import HostSettings
from pytest_palette.hosts.cuga import CugaHost
from pytest_palette.layer.route import route_of
from pytest_palette.models import parse_model
from pytest_palette.run.conversation import open_sandbox
from pytest_palette.skill import load_skill

root, count = Path(sys.argv[1]), int(sys.argv[2])
host, skill, route, settings = CugaHost(), load_skill("palette"), route_of(parse_model("rehearsal")), HostSettings()
try:
    for number in range(count):
        workspace = Workspace(root / f"item-{number}", PurePosixPath(f"item-{number}"))
        workspace.work.mkdir(parents=True)
        sandbox = open_sandbox(workspace, settings)
        sandbox.prepare()
        session = host.open(workspace, skill, agent_environment(workspace.trace), route, settings, sandbox)
        session.close()
        sandbox.close()
finally:
    host.close()
"""


def cpu_of(count: int) -> float:
    """CPU seconds of a process that opens `count` conversations, with all it started."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory(prefix="bench-cuga-start-") as folder:
        env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
        subprocess.run([sys.executable, "-c", OPEN, folder, str(count)], check=True, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=8, help="conversations in the second process (8)")
    args = parser.parse_args(argv)
    one = cpu_of(1)
    many = cpu_of(args.conversations)
    start = (many - one) / (args.conversations - 1)
    print(f"1 conversation: {one:.1f} CPU-s · {args.conversations}: {many:.1f} CPU-s")
    print(f"a conversation's start: {start:.2f} CPU-s (target ≤ {TARGET:g}) · the warm CUGA, once a process, with "
          f"the harness's own start: {one - start:.1f} CPU-s")
    return 0 if start <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
