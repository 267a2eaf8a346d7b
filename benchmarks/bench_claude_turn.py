"""What a claude turn costs beyond its model and its commands: the Claude Code CLI's start, and its end.

    python benchmarks/bench_claude_turn.py [--turns 3] [--conversations 2] [--deck]

Holds conversations on the claude host with the rehearsal model exactly as a run does (the item's sandbox, its
forwarder, the skill installed), in this process: by default a near miss asked `--turns` times, so that each turn is
one model call answered in words and runs no command; with `--deck`, plain_request too (plan, approve, build). The
CLI is started through a small timing wrapper (`--palette-claude-cli`) that runs it as its child, stamps when it
started it and when it exited, and reaps it with `wait4`: each CLI process's own CPU seconds (with what it waited
for: its commands, a `git`) and peak memory, nothing of the harness's. The conversation's forwarder stamps each model
call as it arrives and as its answer ends. Per turn:

- before: from `send` to the turn's first model request (a CLI per turn: its start; one per conversation: reading
  the message, its hooks, building the request);
- after: from the last answer to the turn's end (a CLI per turn: its exit);
- CLI CPU: the CPU of the conversation's CLI processes, over its turns (start, model calls, exit);
- tree CPU: everything the harness started for the conversation (bubblewrap, the relay, the CLI, its commands), from
  this process's children's rusage, over its turns.

Prints figures, and exits 1 when a word-only turn costs the CLI more than TARGET CPU-s (issue 41: "Measure claude's
start per turn too, and cut it where the CLI allows"). On a shared machine compare CPU seconds, back to back.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from pytest_palette.arena.workspace import Workspace
from pytest_palette.backend import agent_environment
from pytest_palette.hosts.base import HostSettings
from pytest_palette.hosts.claude import ClaudeHost, ClaudeSession, find_cli
from pytest_palette.layer.route import route_of
from pytest_palette.models import parse_model
from pytest_palette.run.conversation import open_sandbox
from pytest_palette.skill import load_skill

#: CPU seconds of the CLI for one turn answered in words (a CLI per turn took 0.5 to 0.7).
TARGET = 0.35
QUESTION = "Which fonts read best on presentation slides in a large auditorium?"
DECK = ("Build a 5-slide deck on prompt caching for our engineering all-hands", "yes")

#: Runs the CLI as its child, stamps its start and end on CLOCK_MONOTONIC (the harness's clock too), reaps it with
#: wait4, and writes the figures to the CLI's TMPDIR (its own folder, which the sandbox lets it write). -S: no site.
WRAPPER = """#!{python} -IS
import json, os, sys, time
argv = [{cli!r}, *sys.argv[1:]]
spawned = time.monotonic()
pid = os.posix_spawn(argv[0], argv, os.environ)
_, status, usage = os.wait4(pid, 0)
figures = {{"spawned": spawned, "ended": time.monotonic(), "cpu": usage.ru_utime + usage.ru_stime,
           "rss_mb": usage.ru_maxrss / 1024}}
with open(os.path.join(os.environ["TMPDIR"], "bench-cli-%d.json" % time.monotonic_ns()), "w") as kept:
    json.dump(figures, kept)
sys.exit(os.waitstatus_to_exitcode(status))
"""


@dataclass
class Turn:
    sent: float
    returned: float = 0.0
    calls: list[list[float]] = field(default_factory=list)  # [arrived, answered] per model call, monotonic
    commands: int = 0

    @property
    def before(self) -> float:
        return self.calls[0][0] - self.sent if self.calls else float("nan")

    @property
    def after(self) -> float:
        return self.returned - self.calls[-1][-1] if self.calls else float("nan")


@dataclass
class Conversation:
    turns: list[Turn] = field(default_factory=list)
    processes: list[dict[str, Any]] = field(default_factory=list)
    tree_cpu: float = 0.0

    @property
    def cli_cpu(self) -> float:
        return sum(float(p["cpu"]) for p in self.processes)

    @property
    def rss_mb(self) -> float:
        return max((float(p["rss_mb"]) for p in self.processes), default=0.0)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def wrapper(folder: Path) -> Path:
    cli = find_cli()
    if cli is None:
        raise SystemExit("no Claude Code CLI: make setup installs claude-agent-sdk, whose wheel bundles it")
    folder.chmod(0o755)  # as root the CLI runs as the item's user id
    path = folder / "claude"
    path.write_text(WRAPPER.format(python=sys.executable, cli=str(cli.resolve())), encoding="utf-8")
    path.chmod(0o755)
    return path


def watch(session: ClaudeSession, turns: list[Turn]) -> None:
    """Stamp each model call of the conversation's forwarder: when it arrived, and when its answer ended."""
    forwarder = session.forwarder
    assert forwarder is not None
    calls, observe = forwarder.calls, forwarder.observe
    sent = calls.sent

    def arrived() -> int:
        turns[-1].calls.append([time.monotonic()])
        return sent()

    def answered(status: int, body: bytes) -> None:
        if turns[-1].calls:
            turns[-1].calls[-1].append(time.monotonic())
        if observe is not None:
            observe(status, body)

    calls.sent = arrived  # type: ignore[method-assign]
    forwarder.observe = answered


def converse(host: ClaudeHost, root: Path, name: str, messages: tuple[str, ...], cli: Path) -> Conversation:
    skill, route, settings = load_skill("palette"), route_of(parse_model("rehearsal")), HostSettings()
    workspace = Workspace(root / name, PurePosixPath(name))
    workspace.work.mkdir(parents=True)
    sandbox = open_sandbox(workspace, settings)
    sandbox.prepare()
    sandbox.readable(cli.parent)
    held = Conversation()
    cpu = children_cpu()
    session = host.open(workspace, skill, agent_environment(workspace.trace), route, settings, sandbox)
    assert isinstance(session, ClaudeSession)
    try:
        watch(session, held.turns)
        for message in messages:
            held.turns.append(Turn(sent=time.monotonic()))
            record = session.send(message, timeout=300)
            held.turns[-1].returned = time.monotonic()
            held.turns[-1].commands = sum(step.startswith("→ Bash") for step in record.steps)
    finally:
        session.close()
        sandbox.close()
    held.tree_cpu = children_cpu() - cpu
    held.processes = [json.loads(path.read_text(encoding="utf-8"))
                      for path in sorted(session.folder.glob("tmp/bench-cli-*.json"))]
    return held


def report(label: str, held: Conversation) -> None:
    n = len(held.turns)
    print(f"\n{label}: {len(held.processes)} CLI process(es), {n} turn(s), peak RSS {held.rss_mb:.0f} MB")
    print(f"  {'turn':>4} {'calls':>5} {'cmds':>4} {'before':>7} {'after':>6}")
    for number, turn in enumerate(held.turns, 1):
        print(f"  {number:>4} {len(turn.calls):>5} {turn.commands:>4} {turn.before:7.2f} {turn.after:6.2f}")
    print(f"  CLI {held.cli_cpu:.2f} CPU-s ({held.cli_cpu / n:.2f} a turn) · tree {held.tree_cpu:.2f} CPU-s "
          f"({held.tree_cpu / n:.2f} a turn)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=3, help="turns of a word-only conversation (3)")
    parser.add_argument("--conversations", type=int, default=2, help="word-only conversations, one after another (2)")
    parser.add_argument("--deck", action="store_true", help="plain_request too: plan, approve, build")
    args = parser.parse_args(argv)
    words: list[Conversation] = []
    with tempfile.TemporaryDirectory(prefix="bench-claude-turn-") as scratch:
        root = Path(scratch)
        cli = wrapper(Path(tempfile.mkdtemp(dir=root)))
        host = ClaudeHost(cli=str(cli))
        try:
            for n in range(args.conversations):
                words.append(converse(host, root, f"words-{n}", (QUESTION,) * args.turns, cli))
                report(f"word-only conversation {n + 1}: {QUESTION!r} x {args.turns}", words[-1])
            if args.deck:
                report("plain_request", converse(host, root, "deck", DECK, cli))
        finally:
            host.close()
    turns = [turn for held in words for turn in held.turns]
    cpu = sum(held.cli_cpu for held in words) / len(turns)
    tree = sum(held.tree_cpu for held in words) / len(turns)
    print(f"\na word-only turn, over {len(turns)}: CLI {cpu:.2f} CPU-s (target ≤ {TARGET:g}), tree {tree:.2f} CPU-s; "
          f"before its model call {statistics.median(t.before for t in turns):.2f} s, "
          f"after {statistics.median(t.after for t in turns):.2f} s (medians)")
    return 0 if cpu <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
