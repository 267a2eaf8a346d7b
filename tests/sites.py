"""Real offline runs for the site's acceptance tests (`palette-bench view`): the 5 core cases run for real, as a
user runs them, once per test session (shared by the xdist workers: tests/sweeps.py), into a temporary folder.

- good: `-m core --host=react,cuga,claude --model=rehearsal` — every item passes where its host's client is here;
- bad: `-m core --host=react --model=rehearsal:never_edits` — fails the core cases whose reply asks for a change
  (derived from the case files by known_bad_cases.py, never pinned here), passes the rest.

"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import pytest
from browser import required
from known_bad_cases import expected_failures
from sweeps import Sweeps

from pytest_palette.arena.sandbox import problem
from pytest_palette.cases import Case, load_cases
from pytest_palette.results.checks import COMMON_CHECKS, PALETTE_CHECKS, score
from pytest_palette.results.ledger import append, load
from pytest_palette.results.record import JUDGED, Check, Record

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
    #: What the good run's session printed (its terminal table among it), and its JUnit report.
    good_output: str = ""
    good_junit: Path | None = None

    def skip_if_missing(self, host: str) -> None:
        """Skip the calling test when the good run could not run `host` here, with the reason."""
        if host in self.missing:
            pytest.skip(f"the {host} host did not run here: {self.missing[host]}")


def make_offline_runs(sweeps: Sweeps) -> OfflineRuns:
    reason = problem("bubblewrap")
    if reason:
        # Like a missing browser: skipped on a developer's machine, a failure where CI must run everything.
        (pytest.fail if required() else pytest.skip)(f"the offline runs need the agent's sandbox: {reason}")
    runs, printed = {}, {}
    for run_id, model, hosts in (("good", "rehearsal", HOSTS), ("bad", BAD_MODEL, ("react",))):
        sweep = sweeps.run("-m", "core", f"--host={','.join(hosts)}", f"--model={model}", f"--palette-run-id={run_id}")
        # Exit 1 is a run with failed items (the bad one); a usage error or a crash leaves no usable ledger.
        if sweep.returncode not in (0, 1) or not (sweep.runs / run_id / "results.jsonl").is_file():
            raise RuntimeError(f"the {run_id} run ({model}) did not finish (exit {sweep.returncode}):\n"
                               f"{sweep.stdout[-3000:]}\n{sweep.stderr[-3000:]}")
        runs[run_id] = sweep.runs / run_id
        printed[run_id] = (sweep.stdout, sweep.folder / "junit.xml")
    missing: dict[str, str] = {}
    for record in load(runs["good"]).latest.values():
        if record.outcome == "skipped":
            missing.setdefault(record.host, "; ".join(record.failures).removeprefix(f"{record.host}: ") or "skipped")
    return OfflineRuns(good=runs["good"], bad=runs["bad"], bad_model=BAD_MODEL, bad_fails=must_fail(),
                       cases=tuple(case.name for case in core_cases()), missing=missing,
                       good_output=printed["good"][0], good_junit=printed["good"][1])


# -- hand-made scores over the real runs' item folders ----------------------------------------------------------
# The offline runs score 0 or 1 (the rehearsal agents pass, or fail a gate). A run with partial scores is made
# from one of them without a new sweep: a copy of its folder, whose ledger holds its records with some scored
# checks failed by hand (or their checks taken away, as records written before checks kept none).

#: A change to one record: `failing(...)`, `before_checks(...)`.
Change = Callable[[Record], Record]


def failing(check: str, credit: float = 0.0, share: float | None = None, words: str = "") -> Change:
    """The record with its check `check` failed, earning `credit` (added when the record has no check of that
    name), its score and outcome made from its checks again as the judge makes them (results/checks.py)."""

    def change(record: Record) -> Record:
        judged = record.judged
        assert judged is not None, record
        spec = PALETTE_CHECKS[check]
        failed = Check(name=check, role=spec.role, weight=spec.weight, passed=False, credit=credit, share=share,
                       words=words or f"{check} failed, by hand: {spec.about}")
        names = [c.name for c in judged.checks]
        checks = tuple(failed if c.name == check else c for c in judged.checks) + \
            (() if check in names else (failed,))
        failures = tuple(c.words for c in checks if c.passed is False)
        return msgspec.structs.replace(record, outcome="fail", failures=failures, judged=msgspec.structs.replace(
            judged, checks=checks, score=score(checks)))

    return change


def ungraded(check: str) -> Change:
    """The record with one more check, `check`, that could not be graded (its grader failed): no verdict on the
    skill, so it counts for nothing and the outcome and score stay as they were."""

    def change(record: Record) -> Record:
        judged = record.judged
        assert judged is not None, record
        spec = COMMON_CHECKS[check]
        failed = Check(name=check, role=spec.role, weight=spec.weight, passed=None, credit=0.0,
                       words=f"the {check} grader failed, by hand")
        return msgspec.structs.replace(record, judged=msgspec.structs.replace(judged, checks=(*judged.checks, failed)))

    return change


def before_checks(*failures: str) -> Change:
    """The record as one written before checks: none kept, no score; a fail with `failures`, else a pass."""

    def change(record: Record) -> Record:
        assert record.judged is not None, record
        return msgspec.structs.replace(record, outcome="fail" if failures else "pass", failures=failures,
                                       judged=msgspec.structs.replace(record.judged, checks=(), score=None))

    return change


def rescored(source: Path, target: Path, run_id: str, skill: str | None = None, later: float = 0.0,
             changes: Mapping[tuple[str, str], Change] | None = None, hosts: Collection[str] | None = None) -> Path:
    """A copy of the run at `source` as run `run_id` (of skill hash `skill`, else its own), started `later` seconds
    after it, with `changes` by (host, case) applied to its judged records (a host the run skipped here is left as
    it was), and only the records of `hosts` when given."""
    shutil.copytree(source, target, symlinks=True, ignore=shutil.ignore_patterns("results*.jsonl"))
    for original in sorted(load(source).latest.values(), key=lambda r: (r.host, r.case, r.run_index)):
        if hosts is not None and original.host not in hosts:
            continue
        change = (changes or {}).get((original.host, original.case))
        record = change(original) if change is not None and original.outcome in JUDGED else original
        usage = msgspec.structs.replace(record.usage, started_at=record.usage.started_at + later,
                                        ended_at=record.usage.ended_at + later)
        append(target / "results.jsonl", msgspec.structs.replace(
            record, run_id=run_id, usage=usage,
            terms=msgspec.structs.replace(record.terms, skill_hash=skill or record.terms.skill_hash)))
    return target


#: Three runs of the good run's folders with scores strictly between 0 and 1: two of skill A, then one of skill B.
#: Their folder names sort otherwise than they started (rehearsal-b first), so an order by start time shows.
SKILL_A, SKILL_B = "aaaaaaaaaaaa", "bbbbbbbbbbbb"
SCORED_RUNS: dict[str, tuple[str, float, dict[tuple[str, str], Change]]] = {
    "rehearsal-b": (SKILL_A, 0.0, {("react", "plain_request"): failing("polls"),
                                   ("react", "approve_casually"): ungraded("rubric"),
                                   ("cuga", "approve_casually"): failing("slides")}),
    "rehearsal-a": (SKILL_A, 3600.0, {("react", "edit_slide_count"): failing("slides"),
                                      ("react", "pasted_notes"): failing("content", credit=0.75, share=0.6),
                                      ("cuga", "conditional_yes"): failing("confirmation"),
                                      ("claude", "plain_request"): failing("polls")}),
    "rehearsal-c": (SKILL_B, 7200.0, {("react", "plain_request"): failing("slides"),
                                      ("react", "approve_casually"): before_checks("asked for 3 slides, got 5"),
                                      ("react", "conditional_yes"): before_checks(),
                                      ("cuga", "plain_request"): failing("polls"),
                                      ("cuga", "edit_slide_count"): failing("edit")}),
}


@dataclass(frozen=True)
class ScoredSite:
    """The site of the SCORED_RUNS (a folder of runs, as `palette-bench view runs/` gets it)."""

    runs: Path  # the folder holding the three runs
    site: Path


def make_scored_site(offline_runs: OfflineRuns, folder: Path) -> ScoredSite:
    from pytest_palette.site.build import write

    runs = folder / "runs"
    for name, (skill, later, changes) in SCORED_RUNS.items():
        rescored(offline_runs.good, runs / name, name, skill, later, changes)
    write([runs], folder / "site")
    return ScoredSite(runs, folder / "site")
