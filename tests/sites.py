"""Real offline runs for the site's acceptance tests (`palette-bench view`): the 5 core cases run for real, as a
user runs them, once per test session (shared by the xdist workers: tests/sweeps.py), into a temporary folder.

- good: `-m core --host=react,cuga,claude --model=rehearsal` — every item passes where its host's client is here;
- bad: `-m core --host=react --model=rehearsal:never_edits` — fails the core cases whose reply asks for a change
  (derived from the case files by known_bad_cases.py, never pinned here), passes the rest.

"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from browser import required
from known_bad_cases import expected_failures
from sweeps import Sweeps

from pytest_palette.arena.sandbox import problem
from pytest_palette.cases import Case, load_cases
from pytest_palette.results.ledger import load

REPO = Path(__file__).resolve().parent.parent
HOSTS = ("react", "cuga", "claude")
#: It fails some core cases and passes others, so a page shows both; one whose set is all 5 or none would not.
BAD_FLAW = "never_edits"
BAD_MODEL = f"rehearsal:{BAD_FLAW}"


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

    def skip_if_missing(self, host: str) -> None:
        """Skip the calling test when the good run could not run `host` here, with the reason."""
        if host in self.missing:
            pytest.skip(f"the {host} host did not run here: {self.missing[host]}")


def make_offline_runs(sweeps: Sweeps) -> OfflineRuns:
    reason = problem("bubblewrap")
    if reason:
        # Like a missing browser: skipped on a developer's machine, a failure where CI must run everything.
        (pytest.fail if required() else pytest.skip)(f"the offline runs need the agent's sandbox: {reason}")
    runs = {}
    for run_id, model, hosts in (("good", "rehearsal", HOSTS), ("bad", BAD_MODEL, ("react",))):
        sweep = sweeps.run("-m", "core", f"--host={','.join(hosts)}", f"--model={model}", f"--palette-run-id={run_id}")
        # Exit 1 is a run with failed items (the bad one); a usage error or a crash leaves no usable ledger.
        if sweep.returncode not in (0, 1) or not (sweep.runs / run_id / "results.jsonl").is_file():
            raise RuntimeError(f"the {run_id} run ({model}) did not finish (exit {sweep.returncode}):\n"
                               f"{sweep.stdout[-3000:]}\n{sweep.stderr[-3000:]}")
        runs[run_id] = sweep.runs / run_id
    missing: dict[str, str] = {}
    for record in load(runs["good"]).latest.values():
        if record.outcome == "skipped":
            missing.setdefault(record.host, "; ".join(record.failures).removeprefix(f"{record.host}: ") or "skipped")
    return OfflineRuns(good=runs["good"], bad=runs["bad"], bad_model=BAD_MODEL, bad_fails=must_fail(),
                       cases=tuple(case.name for case in core_cases()), missing=missing)
