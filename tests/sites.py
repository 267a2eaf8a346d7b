"""Real offline runs for the site's acceptance tests (`palette-bench view`): the 5 core cases run for real, as a
user runs them, once per test session (per xdist worker), into a temporary folder.

- good: `-m core --host=react,cuga,claude --model=rehearsal` — every item passes where its host's client is here;
- bad: `-m core --host=react --model=rehearsal:never_edits` — fails the core cases whose reply asks for a change
  (derived from the case files by known_bad_cases.py, never pinned here), passes the rest.

On a 2-core machine: good 48-57 s, bad about 10 s; with both cores busy, about 85 s together.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from browser import required
from known_bad_cases import expected_failures

from pytest_palette.arena.sandbox import problem
from pytest_palette.cases import Case, load_cases
from pytest_palette.results.ledger import load

REPO = Path(__file__).resolve().parent.parent
HOSTS = ("react", "cuga", "claude")
#: It fails some core cases and passes others, so a page shows both; one whose set is all 5 or none would not.
BAD_FLAW = "never_edits"
BAD_MODEL = f"rehearsal:{BAD_FLAW}"
#: One subprocess run, whole: far above the minute the good run takes with both cores busy.
RUN_TIMEOUT = 1200


def core_cases() -> list[Case]:
    """The shipped cases `-m core` selects."""
    return [case for path in sorted((REPO / "cases").glob("*.yaml")) for case in load_cases(path)
            if "core" in case.tags]


def must_fail(flaw: str = BAD_FLAW) -> frozenset[str]:
    """The core cases the known-bad agent `flaw` must fail, derived from the case definitions."""
    return expected_failures(core_cases())[flaw][0]


@dataclass(frozen=True)
class OfflineRuns:
    """Two finished run folders (each holds results.jsonl and <host>/<case>/ per item)."""

    good: Path
    bad: Path
    bad_model: str
    #: The core cases the bad run must fail (and the only ones: it passes the others).
    bad_fails: frozenset[str]
    cases: tuple[str, ...]
    hosts: tuple[str, ...] = HOSTS
    #: A host whose items the good run skipped (its client is not installed here) → the ledger's reason.
    missing: dict[str, str] = field(default_factory=dict)
    #: Wall-clock seconds each run took, for the curious; nothing asserts on them.
    seconds: dict[str, float] = field(default_factory=dict)

    def skip_if_missing(self, host: str) -> None:
        """Skip the calling test when the good run could not run `host` here, with the reason."""
        if host in self.missing:
            pytest.skip(f"the {host} host did not run here: {self.missing[host]}")


def run_core(runs: Path, run_id: str, model: str, hosts: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    """The shipped core cases, run as a user runs them, into runs/<run_id>."""
    args = [sys.executable, "-m", "pytest", str(REPO / "cases"), "-p", "no:cacheprovider", "-p", "no:randomly",
            f"--rootdir={REPO}", f"--palette-run-dir={runs}", f"--palette-run-id={run_id}", "-m", "core",
            f"--host={','.join(hosts)}", f"--model={model}", "-q"]
    if os.environ.get("PYTHONPATH"):
        # The sandbox keeps no PYTHONPATH: without it, deck.py's engine would import whatever copy of the package
        # the venv points at, not the one these tests run (a git worktree beside the venv's checkout).
        args.append("--palette-sandbox-env=PYTHONPATH")
    # A developer's PALETTE_* settings (a real Palette, a latency) would change the runs: these are the offline
    # reference ones. (The conftest's autouse cleaning runs after a session fixture, so it is done here.)
    env = {name: value for name, value in os.environ.items() if not name.startswith("PALETTE_")}
    return subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=RUN_TIMEOUT, env=env)


def make_offline_runs(folder: Path) -> OfflineRuns:
    reason = problem("bubblewrap")
    if reason:
        # Like a missing browser: skipped on a developer's machine, a failure where CI must run everything.
        (pytest.fail if required() else pytest.skip)(f"the offline runs need the agent's sandbox: {reason}")
    runs = folder / "runs"
    seconds = {}
    for run_id, model, hosts in (("good", "rehearsal", HOSTS), ("bad", BAD_MODEL, ("react",))):
        started = time.monotonic()
        done = run_core(runs, run_id, model, hosts)
        seconds[run_id] = round(time.monotonic() - started, 1)
        # Exit 1 is a run with failed items (the bad one); a usage error or a crash leaves no usable ledger.
        if done.returncode not in (0, 1) or not (runs / run_id / "results.jsonl").is_file():
            raise RuntimeError(f"the {run_id} run ({model}) did not finish (exit {done.returncode}):\n"
                               f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    missing: dict[str, str] = {}
    for record in load(runs / "good").latest.values():
        if record.outcome == "skipped":
            missing.setdefault(record.host, "; ".join(record.failures).removeprefix(f"{record.host}: ") or "skipped")
    return OfflineRuns(good=runs / "good", bad=runs / "bad", bad_model=BAD_MODEL, bad_fails=must_fail(),
                       cases=tuple(case.name for case in core_cases()), missing=missing, seconds=seconds)
