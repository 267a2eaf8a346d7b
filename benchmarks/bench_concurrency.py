"""Many conversations at once on one machine, against the best schedule of each case alone (measured, never by a test).

    python benchmarks/bench_concurrency.py [--host react,cuga,claude] [--profile heavy|light] [--conversations 33]
        [--alone 3] [-k EXPR] [-m EXPR] [--quick]

For each host in turn, one after another, it runs the 33 deck cases (`-m "not trigger"`; `-k`/`-m` choose
others) with a slow model and a slow backend — the rehearsal model waiting `--model-latency` per call (default
2 s ± 0.5), the reference engine `PALETTE_ENGINE_LATENCY` (heavy: plan=20,edit=10,build=60, Palette-like;
light: plan=3,edit=2,build=8) — with N conversations in flight in one process (`--palette-conversations N`).
Then it runs the slowest of them again, each alone (`--palette-conversations 1`, the same latencies, nothing
else of the run in flight), and prints:

- wall: the sweep, as the user waits for it (pytest's start to its exit);
- where each item's time went, a line each in the order they started: its queue wait (after the sweep's first
  start), its start (folder, sandbox, host, up to its first message), its turns less its commands (the model's
  waits and its client's own work), its commands (their union, from commands.jsonl), the time between its turns,
  and after its last answer until its record (closing, judging, waiting for pytest to reach it); then the sums;
- ideal: what the latencies allow, as three parts spelled out on a line of their own —
  the sweep's start-up (pytest's start to its first conversation: paid once, whatever N is);
  the best schedule's length, on N slots, of each case's conversation alone (from its start to its last answer):
  longest first (LPT), which is the best with no more than 2N cases and within 4/3 of it beyond. Up to `--alone`
  (3) of the slowest under contention are re-run alone (`--palette-conversations 1`, the same latencies,
  nothing else of the run in flight), slowest first; a candidate whose time under contention is below the
  largest time alone found so far cannot exceed it and is not run. The other cases' times alone are their
  times under contention scaled by the least slowdown seen in those re-run: smaller, never flattering.
  Measuring every case alone would cost the sweep's length again per case;
  the wind-down of the slowest case's run alone (judging one item, exiting); the sweep's own would hide
  items judged late under the ideal. The run alone's start-up is printed, not used: on the shared 2-core
  machine it came to 2-16 s between runs of one case, noise that would swamp the ratio;
- the gap between wall and ideal, and the schedule's share of it: the same times alone in the order the sweep
  started its cases, against the best order (the rest of the gap is the conversations slowing each other down);
  and the CPU floor — the run's CPU seconds over the cores — with wall ÷ it: where that floor is above the ideal,
  the cores are the bound;
- wall ÷ ideal, against the host's target (issue 22, heavy profile: react 1.15x, cuga 1.3x, claude 1.3x;
  light profile: 1.3x on every host, as issue 12 set);
- peak memory: the largest sum, sampled every second, of the proportional set size (PSS) of the run's
  processes — pytest and its descendants, and any process of the run outside that tree (found by its trace
  or its sandbox's mounts under the run's folder, as pytest_palette.arena.leftovers does) — and that over the
  most conversations that were in flight at once (from the records' start and end times). react's target:
  <= 2 GB (issue 12); the others' are reported;
- CPU: the CPU seconds of the run — pytest's and every descendant's it reaped, from wait4's rusage (a
  sandbox's processes are reaped by its keeper, the keeper by pytest), plus the last sampled times of any
  process of the run that left the tree (reaped elsewhere, so not in the rusage) — over wall × cores, and how
  busy the whole machine was meanwhile (other work on it slows the run too). Near 100% of the cores, the
  cores are the bound.

One summary line a host (with the median start of its conversations in the sweep), and a table of them at the
end, under which each host's start in CPU seconds where a script of its own measures it: cuga's
(bench_cuga_start.py: a conversation forked from the warm CUGA) and claude's (bench_claude_turn.py: the CLI per
turn of a word-only conversation); `--no-starts` leaves them out. `--quick` checks the script in about two minutes
(light profile, 4 cases, 4 in flight, 2 re-run alone). A host whose client is not installed is named and
skipped. Exits 1 when a target is missed, an item does not pass, or a run leaves a process behind (which is
then stopped); nothing is left in /tmp (each run's folder is a temporary one).
"""

from __future__ import annotations

import argparse
import collections
import heapq
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_palette.arena.sandbox import FIRST_ID, IDS  # noqa: E402

PROFILES = {"heavy": "plan=20,edit=10,build=60", "light": "plan=3,edit=2,build=8"}
TARGETS = {"heavy": {"react": 1.15, "cuga": 1.30, "claude": 1.30}, "light": {}}
#: A host with no target of its own in the profile (every host in light, a project's own host in heavy).
DEFAULT_TARGET = 1.30
MEMORY_TARGETS = {"react": 2 * 2**30}
DECK_CASES = "not trigger"  # the 33 cases that make a deck; the 8 near misses end in a few seconds
QUICK_CASES = "plain_request or approve_casually or edit_twice or twelve_slides"
SANDBOX_IDS = range(FIRST_ID, FIRST_ID + IDS)
#: Seconds a run gets to end after Ctrl-C (it closes every conversation) before its processes are killed.
INTERRUPT_GRACE = 30.0
#: Seconds a run's last processes (keepers ending as their pipe closes) get to go after pytest exits.
EXIT_GRACE = 10.0


@dataclass(frozen=True)
class Item:
    """What the benchmark reads of a record, and of its folder (turns.json, commands.jsonl) for where its time went."""

    case: str
    outcome: str
    #: The conversation's own time (usage.seconds): ended_at is when pytest reached the item and recorded it,
    #: which with conversations held ahead of their items can be long after the conversation ended.
    seconds: float
    started_at: float
    ended_at: float
    failures: tuple[str, ...]
    #: When its first message was sent and its last turn ended (None where turns.json does not say).
    first_sent: float | None = None
    last_answer: float | None = None
    #: Seconds of its turns, and of its agent's commands (their union: commands run side by side count once).
    turns: float = 0.0
    commands: float = 0.0

    @classmethod
    def read(cls, line: str, run: Path) -> Item:
        record = json.loads(line)
        usage = record["usage"]
        folder = run / record["workspace"]
        first = last = None
        turns = commands = 0.0
        try:
            said = json.loads((folder / "turns.json").read_text(encoding="utf-8"))["turns"]
            sent = [t for t in said if t.get("started_at") is not None and t.get("seconds") is not None]
            if sent:
                first = float(sent[0]["started_at"])
                last = max(float(t["started_at"]) + float(t["seconds"]) for t in sent)
                turns = sum(float(t["seconds"]) for t in sent)
            ran = [json.loads(c) for c in (folder / "commands.jsonl").read_text(encoding="utf-8").splitlines() if c]
            commands = _union([(float(c["started_at"]), float(c["ended_at"])) for c in ran
                               if c.get("started_at") and c.get("ended_at")])
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return cls(record["case"], record["outcome"], float(usage["seconds"] or 0), float(usage["started_at"]),
                   float(usage["ended_at"]), tuple(record["failures"]), first, last, turns, commands)

    @property
    def done(self) -> float:
        """When its conversation ended: its last answer (usage.seconds starts after its folder and sandbox are
        made, so started_at + seconds falls short by that)."""
        return self.last_answer if self.last_answer is not None else self.started_at + self.seconds

    @property
    def span(self) -> float:
        """Its whole conversation, as a slot holds it: from its start (folder, sandbox, host) to its last answer."""
        return self.done - self.started_at


def _union(spans: list[tuple[float, float]]) -> float:
    """Seconds covered by the spans, each moment once."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def makespan(times: list[float], slots: int) -> float:
    """How long `times`, started in the order given, take on `slots` slots: each starts in the first slot free."""
    free = [0.0] * max(1, slots)
    for seconds in times:
        heapq.heapreplace(free, free[0] + seconds)
    return max(free)


@dataclass
class Run:
    """One pytest run and what it cost."""

    exit_code: int
    output: str
    records: list[Item]
    wall: float
    #: The run's start and end on the records' clock (time.time), for its start-up and wind-down.
    began: float
    ended: float
    cpu: float
    peak: int
    peak_processes: int
    busy: float
    outside: int
    left: list[str] = field(default_factory=list)

    def seconds(self) -> dict[str, float]:
        """Each case's conversation, as its slot held it (Item.span)."""
        return {r.case: r.span for r in self.records}

    def start(self) -> float:
        """The median start of its conversations (folder, sandbox, host, up to the first message), in seconds."""
        starts = [r.first_sent - r.started_at for r in self.records if r.first_sent is not None]
        return statistics.median(starts) if starts else 0.0

    def breakdown(self) -> list[str]:
        """Where each item's time went, in the order they started: a line each, then the sums."""
        if not self.records:
            return []
        first = min(r.started_at for r in self.records)
        rows, sums = [], collections.Counter[str]()
        for r in sorted(self.records, key=lambda r: r.started_at):
            start = (r.first_sent - r.started_at) if r.first_sent is not None else 0.0
            parts = {"queue": r.started_at - first, "start": start, "model+client": max(0.0, r.turns - r.commands),
                     "commands": r.commands, "between": max(0.0, r.span - start - r.turns),
                     "after": r.ended_at - r.done}
            sums.update(parts)
            rows.append(f"  {r.case:<26} " + "  ".join(f"{k} {v:6.1f}" for k, v in parts.items()))
        return [*rows, f"  {'all items (s)':<26} " + "  ".join(f"{k} {v:6.0f}" for k, v in sums.items())]

    def outcomes(self) -> dict[str, int]:
        return dict(collections.Counter(r.outcome for r in self.records))

    def overlap(self) -> int:
        """The most conversations that were running at one moment, from their records' times."""
        edges = sorted(e for r in self.records for e in ((r.started_at, 1), (r.done, -1)))
        most = running = 0
        for _, step in edges:
            running += step
            most = max(most, running)
        return most

    def fixed(self) -> tuple[float, float]:
        """Seconds from pytest's start to the first conversation, and from the last one's end to pytest's exit."""
        if not self.records:
            return 0.0, 0.0
        return (min(r.started_at for r in self.records) - self.began,
                self.ended - max(r.done for r in self.records))

    def problem(self) -> str | None:
        """Why this run cannot be measured, in one line; None when every item passed."""
        if not self.records:
            lines = [line for line in self.output.splitlines() if line.strip()]
            said = next((line for line in reversed(lines) if "rror" in line), lines[-1] if lines else "no output")
            return f"the run ended (exit {self.exit_code}) with no record: {said.strip()}"
        outcomes = self.outcomes()
        if outcomes.get("pass", 0) != len(self.records):
            return "not every item passed: " + ", ".join(f"{n} {o}" for o, n in outcomes.items())
        return None


class Sampler(threading.Thread):
    """Samples the run's processes every second until stopped: their PSS, and the CPU of those outside the tree."""

    def __init__(self, root: int, folder: Path) -> None:
        super().__init__(daemon=True)
        self.root, self.folder = root, str(folder)
        self.peak = self.peak_processes = 0
        self.stopped = threading.Event()
        #: Every process of the run seen, by (pid, start time): what may be left when the run has ended.
        self.seen: dict[tuple[int, float], psutil.Process] = {}
        #: CPU seconds (its own and its reaped children's) of each process last seen outside pytest's tree.
        self.outside: dict[tuple[int, float], float] = {}
        self.me = os.getuid()

    def run(self) -> None:
        while True:
            self.sample()
            if self.stopped.wait(1.0):
                return

    def sample(self) -> None:
        total = count = 0
        for process, inside in self._processes():
            try:
                key = (process.pid, process.create_time())
                total += process.memory_full_info().pss
                if inside:
                    self.outside.pop(key, None)
                else:
                    times = process.cpu_times()
                    self.outside[key] = times.user + times.system + times.children_user + times.children_system
            except psutil.Error:
                continue
            self.seen[key] = process
            count += 1
        if total > self.peak:
            self.peak, self.peak_processes = total, count

    def _processes(self) -> Iterator[tuple[psutil.Process, bool]]:
        """The run's processes, each with whether it descends from pytest: the tree is worked out from one
        listing, so a process started after pytest's children were listed is not taken for one outside it."""
        listed = {p.pid: p for p in psutil.process_iter(["ppid", "uids"])}
        children: dict[int, list[int]] = collections.defaultdict(list)
        for pid, process in listed.items():
            children[process.info["ppid"]].append(pid)
        tree, stack = set(), [self.root]
        while stack:
            pid = stack.pop()
            if pid in listed and pid not in tree:
                tree.add(pid)
                stack += children[pid]
        for pid, process in listed.items():
            if pid in tree:
                yield process, True
            elif pid != os.getpid() and self.ours(process):
                yield process, False

    def ours(self, process: psutil.Process) -> bool:
        """A process of this run outside pytest's tree: its trace is under the run's folder, or (a sandbox's,
        which may have cleared its environment) its mounts are."""
        try:
            if process.environ().get("PALETTE_TRACE", "").startswith(self.folder):
                return True
            uids = process.info.get("uids")
            if uids and (uids.real in SANDBOX_IDS or (self.me != 0 and uids.real == self.me)):
                with open(f"/proc/{process.pid}/mountinfo", encoding="utf-8", errors="replace") as mounts:
                    return any(f" {self.folder}/" in line for line in mounts)
        except (psutil.Error, OSError):
            pass
        return False

    def left(self) -> list[psutil.Process]:
        """The run's processes still running once pytest has ended, after EXIT_GRACE for them to go."""
        alive = []
        for (_, started), process in list(self.seen.items()):
            try:
                if process.create_time() == started and process.status() != psutil.STATUS_ZOMBIE:
                    alive.append(process)
            except psutil.Error:
                continue
        alive += [p for p in psutil.process_iter(["uids"]) if p.pid != os.getpid() and self.ours(p)
                  and all(p.pid != a.pid for a in alive)]
        # Not psutil.wait_procs: its pidfd_open raises FileNotFoundError for a process gone meanwhile.
        deadline, still = time.monotonic() + EXIT_GRACE, []
        for process in alive:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except psutil.TimeoutExpired:
                still.append(process)
            except (psutil.Error, OSError):  # gone between the listing and the wait
                continue
        return [p for p in still if _running(p)]


def _interrupted(signum: int, frame: FrameType | None) -> None:
    """Ctrl-C or SIGTERM: the run in progress is stopped and the folders removed; a second signal (`timeout`
    sends one to the whole group) must not cut that clean-up short."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def run_pytest(host: str, selection: list[str], conversations: int, model_latency: str, engine: str,
               folder: Path) -> Run:
    """Run pytest on `selection` with `conversations` in flight, in `folder`; measure it."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
               f"--host={host}", "--model=rehearsal", f"--palette-conversations={conversations}",
               f"--palette-rehearsal-latency={model_latency}", "--palette-run-dir", str(folder / "runs"), *selection]
    if os.environ.get("PYTHONPATH"):
        # The sandbox keeps no PYTHONPATH: without it, deck.py's engine would import another copy of the package.
        command.append("--palette-sandbox-env=PYTHONPATH")
    env = {**os.environ, "PALETTE_ENGINE_LATENCY": engine}
    log = folder / "output.txt"
    before = psutil.cpu_times()
    with open(log, "w", encoding="utf-8") as out:
        started, began = time.monotonic(), time.time()
        # A session of its own: Ctrl-C reaches the script alone, which passes it on and waits for the run to close.
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    sampler = Sampler(process.pid, folder)
    sampler.start()
    try:
        _, status, usage = os.wait4(process.pid, 0)
    except KeyboardInterrupt:
        _stop(process, sampler)
        raise
    finally:
        wall, ended = time.monotonic() - started, time.time()
        sampler.stopped.set()
        sampler.join()
    process.returncode = os.waitstatus_to_exitcode(status)
    after = psutil.cpu_times()
    idle = (after.idle + getattr(after, "iowait", 0)) - (before.idle + getattr(before, "iowait", 0))
    elapsed = _total(after) - _total(before)
    left = sampler.left()
    named = [_named(p) for p in left]  # before they are killed: a dead process has no command line
    for stray in left:
        try:
            stray.kill()
        except psutil.Error:
            pass
    records = [Item.read(line, ledger.parent) for ledger in sorted((folder / "runs").glob("*/results*.jsonl"))
               for line in ledger.read_text(encoding="utf-8").splitlines() if line.strip()]
    return Run(process.returncode, log.read_text(encoding="utf-8", errors="replace"), records, wall, began, ended,
               usage.ru_utime + usage.ru_stime + sum(sampler.outside.values()), sampler.peak,
               sampler.peak_processes, 1 - idle / elapsed if elapsed > 0 else 0.0, len(sampler.outside),
               named)


def _total(times: Any) -> float:
    """All CPU time of the machine: Linux counts its guests' time in user and nice already."""
    return float(sum(times)) - getattr(times, "guest", 0) - getattr(times, "guest_nice", 0)


def _stop(process: subprocess.Popen[bytes], sampler: Sampler) -> None:
    """Ctrl-C to the run, as a user gives it; after INTERRUPT_GRACE, KILL to whatever of it is left."""
    try:
        os.killpg(process.pid, signal.SIGINT)
        process.wait(INTERRUPT_GRACE)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        pass
    for stray in sampler.left():
        try:
            stray.kill()
        except psutil.Error:
            pass


def _running(process: psutil.Process) -> bool:
    """Alive and not a zombie: a dead process its parent has not reaped yet (a wait on it times out) left nothing."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _named(process: psutil.Process) -> str:
    try:
        return f"{process.pid} ({process.name()}, user {process.uids().real}) {' '.join(process.cmdline())[:80]}"
    except psutil.Error:
        return str(process.pid)


def collect(host: str, selection: list[str]) -> dict[str, str] | str:
    """The selected cases' node ids by case name, or why none can be collected (one line)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           f"--host={host}", "--model=rehearsal", *selection], cwd=ROOT, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, check=False)
    ids = {line.split("::")[-1].removesuffix(f"[{host}]"): line.strip() for line in done.stdout.splitlines()
           if line.endswith(f"[{host}]") and "::" in line}
    if ids:
        return ids
    said = [line.strip() for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    return next((line for line in said if "rror" in line), said[-1] if said else f"exit {done.returncode}")


@dataclass
class Measured:
    """A host's sweep and its slowest cases alone."""

    host: str
    conversations: int
    target: float
    sweep: Run
    alone: dict[str, Run]
    problems: list[str]

    def ideal(self) -> tuple[float, str, str]:
        """What the latencies allow: the sweep's start-up, the best schedule's length from each case's time alone,
        and the wind-down of the slowest case's run alone (judging one item and exiting: in the sweep, the items
        judged after the last conversation would be charged to the ideal); which bound it is; the sum spelled out.

        Each case's time alone is measured for the cases re-run alone, and for the rest is its time under contention
        scaled by the least slowdown seen in those: smaller, never flattering. The best schedule of those times on
        N slots is the longest first (LPT), exact with no more than 2N cases and within 4/3 of the best beyond."""
        start = self.sweep.fixed()[0]
        alone, best, _, scale = self.schedules()
        slowest = max(alone, key=alone.__getitem__, default=None)
        end = self.alone[slowest].fixed()[1] if slowest else self.sweep.fixed()[1]
        bound = (f"the longest-first schedule on {self.conversations} slots of each case alone"
                 + (f" ({len(alone)} measured, the rest scaled by {scale:.2f})" if alone else ""))
        return start + best + end, bound, f"start-up {start:.1f} s + {bound} {best:.1f} s + wind-down {end:.1f} s"

    def schedules(self) -> tuple[dict[str, float], float, float, float]:
        """The cases measured alone, the best schedule's length, the length of the order the sweep started them
        in (both from each case's time alone), and the scale from contended to alone."""
        contended = self.sweep.seconds()
        alone = {case: run.seconds()[case] for case, run in self.alone.items() if case in run.seconds()}
        scale = min([alone[c] / contended[c] for c in alone if contended.get(c)] + [1.0])
        each = {case: alone.get(case, seconds * scale) for case, seconds in contended.items()}
        best = makespan(sorted(each.values(), reverse=True), self.conversations)
        started = [each[r.case] for r in sorted(self.sweep.records, key=lambda r: r.started_at)]
        return alone, best, makespan(started, self.conversations), scale

    def gap(self) -> str:
        """The gap between the wall and the ideal: the share of it the order the items started in explains (the
        rest is the conversations slowing each other down), and the CPU floor (the run's CPU over the cores)."""
        ideal = self.ideal()[0]
        _, best, ordered, _ = self.schedules()
        cores = len(os.sched_getaffinity(0))
        floor = self.sweep.cpu / cores
        gap = self.sweep.wall - ideal
        share = f"{min(1.0, max(0.0, (ordered - best) / gap)):.0%}" if gap > 0 else "none: no gap"
        return (f"gap {gap:.1f} s, the schedule's share {share} (the order started: {ordered:.1f} s, the best "
                f"{best:.1f} s); CPU floor {floor:.0f} s ({self.sweep.cpu:.0f} CPU-s / {cores} cores): wall ÷ it "
                f"{self.sweep.wall / floor:.2f}x" + (" — the cores are the bound" if floor >= ideal else ""))

    def ratio(self) -> float:
        return self.sweep.wall / self.ideal()[0]

    def missed(self) -> bool:
        memory = MEMORY_TARGETS.get(self.host)
        return bool(self.problems) or self.ratio() > self.target or (memory is not None and self.sweep.peak > memory)

    def line(self) -> str:
        """The summary: one line a user can paste."""
        ideal = self.ideal()[0]
        flight = max(1, self.sweep.overlap())
        cores = len(os.sched_getaffinity(0))
        memory = MEMORY_TARGETS.get(self.host)
        return (f"{self.host:<7} {self.conversations} in flight  wall {self.sweep.wall:.0f} s  ideal {ideal:.0f} s  "
                f"{self.ratio():.2f}x (target {self.target:.2f}x"
                f"{f', {_size(memory)}' if memory else ''}: {'MISSED' if self.missed() else 'met'})  "
                f"start {self.sweep.start():.1f} s  "
                f"peak {_size(self.sweep.peak)} ({_size(self.sweep.peak // flight)}/conv at {flight} at once)  "
                f"CPU {self.sweep.cpu / (self.sweep.wall * cores):.0%} of {cores} cores "
                f"(machine {self.sweep.busy:.0%} busy)")


def _size(size: int) -> str:
    return f"{size / 2**30:.1f} GB" if size >= 2**30 else f"{size / 2**20:.0f} MB"


@dataclass
class NotMeasured:
    """Why a host has no figures: `skipped` when it is not available here (not a missed target)."""

    why: str
    skipped: bool = False


def bench(host: str, args: argparse.Namespace, selection: list[str], engine: str) -> Measured | NotMeasured:
    """Sweep `host`, then run its slowest cases alone; or why the host could not be measured."""
    ids = collect(host, selection)
    if isinstance(ids, str):
        return NotMeasured(f"no case collected: {ids}")
    with tempfile.TemporaryDirectory(prefix="palette-bench-concurrency-") as scratch:
        sweep = run_pytest(host, selection, args.conversations, args.model_latency, engine, Path(scratch))
    skipped = [r for r in sweep.records if r.outcome == "skipped"]
    if sweep.records and len(skipped) == len(sweep.records):
        why = "; ".join(skipped[0].failures).removeprefix(f"{host}: ") or "every item was skipped"
        return NotMeasured(f"skipped: {why}", skipped=True)
    problems = [f"sweep: {said}" for said in [sweep.problem()] if said]
    problems += [f"sweep left {len(sweep.left)} process(es), stopped: {', '.join(sweep.left)}"] if sweep.left else []
    outcomes = ", ".join(f"{n} {o}" for o, n in sweep.outcomes().items())
    seconds = sweep.seconds()
    print(f"{host}: sweep of {len(ids)} cases, {args.conversations} in flight ({sweep.overlap()} at most at once), "
          f"model {args.model_latency} s a call, engine {engine}: {outcomes or 'no record'} · wall {sweep.wall:.1f} s "
          f"· item time {sum(seconds.values()):.1f} s in all · CPU {sweep.cpu:.0f} s"
          + (f" ({sweep.outside} processes outside pytest's tree counted)" if sweep.outside else ""), flush=True)
    if not seconds:
        return NotMeasured(f"not measured: {problems[0]}")
    alone: dict[str, Run] = {}
    for case in sorted(seconds, key=seconds.__getitem__, reverse=True)[:args.alone]:
        longest = max((r.seconds().get(c, 0.0) for c, r in alone.items()), default=0.0)
        if seconds[case] <= longest:
            print(f"{host}: {case} took {seconds[case]:.1f} s under contention, less than {longest:.1f} s alone "
                  "of a slower case: not run alone")
            continue
        with tempfile.TemporaryDirectory(prefix="palette-bench-alone-") as scratch:
            alone[case] = run_pytest(host, [ids[case]], 1, args.model_latency, engine, Path(scratch))
        run = alone[case]
        problems += [f"{case} alone: {said}" for said in [run.problem()] if said]
        problems += [f"{case} alone left {len(run.left)} process(es), stopped: {', '.join(run.left)}"] if run.left \
            else []
        start, end = run.fixed()
        print(f"{host}: {case} alone: its conversation {run.seconds().get(case, 0):.1f} s ({seconds[case]:.1f} s "
              f"under contention); the run alone {run.wall:.1f} s, of which start-up {start:.1f} s and wind-down "
              f"{end:.1f} s", flush=True)
    target = TARGETS[args.profile].get(host, DEFAULT_TARGET)
    measured = Measured(host, args.conversations, target, sweep, alone, problems)
    for problem in problems:
        print(f"{host}: {problem}")
    print(f"{host}: where each item's time went (s; queue: after the first start; model+client: its turns less "
          "its commands; between: outside its turns; after: from its last answer to its record):")
    print("\n".join(sweep.breakdown()))
    print(f"{host}: ideal {measured.ideal()[0]:.1f} s = {measured.ideal()[2]}")
    print(f"{host}: {measured.gap()}")
    print(measured.line(), flush=True)
    return measured


#: What a conversation's start costs in CPU, where a script of its own measures it (its last line is printed).
STARTS = {"cuga": ["bench_cuga_start.py", "--conversations", "4"],
          "claude": ["bench_claude_turn.py", "--conversations", "1", "--turns", "3"]}


def start_costs(hosts: list[str]) -> list[str]:
    """Each host's start in CPU seconds, by its own script run here, one after another (a line each)."""
    lines = []
    for host in hosts:
        if host not in STARTS:
            continue
        script, *given = STARTS[host]
        done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *given], cwd=ROOT,
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False)
        said = [line.strip() for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        lines.append(f"{host:<7} start: {said[-1] if said else f'{script} said nothing (exit {done.returncode})'}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="react", help="hosts, comma-separated, run one after another")
    parser.add_argument("--profile", choices=PROFILES, default=None, help="engine latency (default heavy)")
    parser.add_argument("--conversations", type=int, default=None, help="conversations in flight (default 33)")
    parser.add_argument("--alone", type=int, default=None, help="the slowest cases re-run alone (default 3)")
    parser.add_argument("--model-latency", default="2,jitter=0.5")
    parser.add_argument("--engine-latency", default=None, help="overrides the profile's PALETTE_ENGINE_LATENCY")
    parser.add_argument("-k", default=None, help="a pytest -k expression choosing cases")
    parser.add_argument("-m", default=None, help=f"a pytest -m expression choosing cases (default {DECK_CASES!r})")
    parser.add_argument("--no-starts", action="store_true", help="leave out the start costs measured at the end")
    parser.add_argument("--quick", action="store_true",
                        help=f"check the script: light profile, -k {QUICK_CASES!r}, 4 in flight, 2 alone")
    args = parser.parse_args()
    args.profile = args.profile or ("light" if args.quick else "heavy")
    args.conversations = args.conversations if args.conversations is not None else (4 if args.quick else 33)
    args.alone = args.alone if args.alone is not None else (2 if args.quick else 3)
    if args.conversations < 1 or args.alone < 1:
        parser.error("--conversations and --alone take a whole number >= 1")
    k = args.k or (QUICK_CASES if args.quick else None)
    marks = args.m or (None if k else DECK_CASES)
    selection = [*(["-k", k] if k else []), *(["-m", marks] if marks else [])]
    engine = args.engine_latency or PROFILES[args.profile]
    signal.signal(signal.SIGINT, _interrupted)
    signal.signal(signal.SIGTERM, _interrupted)
    results: dict[str, Measured | NotMeasured] = {}
    try:
        for host in [h.strip() for h in args.host.split(",") if h.strip()]:
            result = results[host] = bench(host, args, selection, engine)
            if isinstance(result, NotMeasured):
                print(f"{host}: {result.why}", flush=True)
    except KeyboardInterrupt:
        print("interrupted: every run stopped, nothing left", file=sys.stderr)
        return 130
    starts = [] if args.no_starts or args.quick else start_costs([h for h, r in results.items()
                                                                   if isinstance(r, Measured)])
    print(f"\n{args.profile} profile (model {args.model_latency} s a call, engine {engine}), wall ÷ the ideal:")
    for host, result in results.items():
        print(result.line() if isinstance(result, Measured) else f"{host:<7} {result.why}")
    for line in starts:
        print(line)
    missed = [r.missed() if isinstance(r, Measured) else not r.skipped for r in results.values()]
    return 1 if any(missed) else 0


if __name__ == "__main__":
    sys.exit(main())
