"""A task graded on an agent's folder: the hooks and the hidden checks, merged, scored, with a verdict
(docs/families.md, "Grading").

The order is the seed's: `preflight.sh` (before the agent, in a run), then after the agent `invariants.sh` and the
hidden checks, staged and taken away again; then everything the graders started is ended. The checks of both
producers are merged, the invariants' first. The score is the codebase's (results/checks.py `score`): 0 when a gate
failed, else the scored checks' passing weight over their total weight (a diagnostic, of weight 0, is shown and
never counted). The verdict:

- "error" when a grader failed — preflight's non-zero exit (nothing else runs), the invariants script's non-zero
  exit, a runner that is not installed: a fault of the grader, never a failed check; no score;
- "pass" when every gate held and every scored check passed (full marks: a malformed row is a failing check);
- "fail" otherwise.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from ..results.checks import score as score_of_checks
from ..results.record import GATE, SCORED, Check
from ..results.redaction import Secrets
from . import hidden_tests, staging
from .hidden_tests import CHECK_SECONDS, Staging
from .hooks import Graders
from .identity import revision, skill_set_hash, skills_hash, unstaged_packs
from .layout import Task
from .rows import Row, rows

Source = Literal["invariants", "tests", "judge"]
Verdict = Literal["pass", "fail", "error"]


@dataclass(frozen=True)
class Graded:
    """One check, and which producer made it."""

    source: Source
    check: Check
    malformed: bool = False


@dataclass(frozen=True)
class Grade:
    """What the graders found of one agent's folder."""

    task: str
    checks: tuple[Graded, ...] = ()
    #: Faults of the graders, each one line naming the grader: the verdict is then "error".
    errors: tuple[str, ...] = ()
    #: preflight's fault: no agent runs, nothing is spent.
    preflight_error: str | None = None
    #: Paths of the agent's folder a hidden check's file was staged over (backed up and restored).
    backed_up: tuple[str, ...] = ()
    sandbox: str = ""
    identity: Mapping[str, str] = field(default_factory=dict)

    @property
    def healthy(self) -> bool:
        return not self.errors and self.preflight_error is None

    @property
    def malformed(self) -> int:
        return sum(graded.malformed for graded in self.checks)

    @property
    def score(self) -> float | None:
        """The score in [0, 1]; None when a grader failed."""
        return score_of_checks(graded.check for graded in self.checks) if self.healthy else None

    @property
    def gates_pass(self) -> bool:
        return all(g.check.passed for g in self.checks if g.check.role == GATE)

    @property
    def verdict(self) -> Verdict:
        if not self.healthy:
            return "error"
        full = all(g.check.passed for g in self.checks if g.check.role == SCORED and g.check.weight > 0)
        return "pass" if self.gates_pass and full else "fail"

    def to_data(self) -> dict[str, Any]:
        """Plain data (JSON's), the seed's grade object and its rows."""
        return {
            "task": self.task, "verdict": self.verdict, "score": self.score, "gates_pass": self.gates_pass,
            "malformed": self.malformed, "errors": list(self.errors), "preflight_error": self.preflight_error,
            "checks": [{"source": g.source, "name": g.check.name, "role": "diagnostic" if g.check.role == SCORED
                        and g.check.weight == 0 else g.check.role, "weight": g.check.weight, "pass": g.check.passed,
                        "malformed": g.malformed, "words": g.check.words} for g in self.checks],
            "backed_up": list(self.backed_up), "sandbox": self.sandbox, **self.identity}

    def to_json(self, secrets: Secrets | None = None) -> str:
        data = self.to_data()
        return json.dumps(secrets.scrub_data(data) if secrets is not None else data, ensure_ascii=False)


def identity(task: Task) -> dict[str, str]:
    """What identifies the skill set and the family of a grade (identity.py)."""
    root = task.family.root
    return {"skill_set_hash": skill_set_hash(root), "skills_hash": skills_hash(root), "family_revision": revision(root),
            "unstaged_packs": ", ".join(unstaged_packs(root))}


def after_agent(task: Task, graders: Graders, secrets: Secrets, before: set[str] | None = None) -> Grade:
    """The invariants and the hidden checks over the agent's folder (the agent has ended), and after them the folder
    as it was `before` (its paths, by default as the agent left it): whatever a grader added is removed."""
    before = hidden_tests.paths(graders.folder) if before is None else before
    try:
        return _after_agent(task, graders, secrets, before)
    finally:
        hidden_tests.remove_new(graders.folder, before)


def _after_agent(task: Task, graders: Graders, secrets: Secrets, before: set[str]) -> Grade:
    found: list[Graded] = []
    errors: list[str] = []
    invariants = graders.hook("invariants.sh", results=True)
    if invariants is not None:
        found += [_graded("invariants", row, secrets) for row in rows(invariants.rows, invariants.script.name)]
        if invariants.failed:
            errors.append(secrets.scrub(invariants.fault()))
    backed_up: list[str] = []
    if task.checks:
        programs: dict[str, str] = {}
        missing: list[str] = []
        for check in task.checks:
            program = sys.executable if check.runner == hidden_tests.PYTEST else \
                hidden_tests.runner_program(check.runner)
            if program is None:
                missing.append(secrets.scrub(hidden_tests.missing_runner(check)))
            else:
                programs[check.runner] = program
        errors += missing
        if not missing:  # never a check under another runner than its own
            for program in programs.values():
                graders.readable(Path(program).resolve().parent)
            empty = graders.scratch / "empty.py"
            empty.touch()
            files = hidden_tests.staged_files(task.checks, task.support, empty)
            with Staging(graders.folder, files, graders.backups, before) as staged:
                for check in task.checks:
                    ran = graders.execute(hidden_tests.argv(check, programs[check.runner]), graders.folder,
                                          CHECK_SECONDS)
                    passed = ran.code == 0
                    said = "" if passed else (f"did not finish in {CHECK_SECONDS:.0f} s\n" if ran.code is None
                                              else "") + hidden_tests.words(ran.output)
                    found.append(Graded("tests", Check(name=check.name, role=GATE if check.gate else SCORED,
                                                       weight=1.0, passed=passed, credit=1.0 if passed else 0.0,
                                                       words=secrets.scrub(said))))
                backed_up = [str(path) for path in staged.backed_up]
    return Grade(task.id, tuple(found), tuple(errors), backed_up=tuple(backed_up), sandbox=graders.kind,
                 identity=identity(task))


def grade(task: Task, folder: Path, *, mode: str = "bubblewrap", environ: Mapping[str, str] | None = None,
          preflight: bool = True) -> Grade:
    """Grade an agent's `folder` (a saved or hand-made one) with no agent: preflight (a service the invariants
    probe is started as in a run), the invariants, the hidden checks; everything started then ended."""
    environ = os.environ if environ is None else environ
    env = staging.environment(task, environ)
    secrets = env.secrets(environ)
    before = hidden_tests.paths(folder)  # the folder as given: what preflight adds is taken away too
    try:
        with Graders(task, folder, env.values, mode=mode, environ=environ) as graders:
            # The task's .env files as a run renders them, over the folder's own for the grading: a saved run's
            # were redacted after its grading (secrets never stay in a run), and a hand-made folder may have none.
            rendered, aside = graders.scratch / "environment", graders.backups / "environment"
            rendered.mkdir()
            aside.mkdir()
            files = [(PurePosixPath(path.name), path) for path in env.render(rendered)]
            with Staging(folder, files, aside, before):
                if preflight:
                    ran = graders.hook("preflight.sh")
                    if ran is not None and ran.failed:
                        return Grade(task.id, preflight_error=secrets.scrub(ran.fault()), sandbox=graders.kind,
                                     identity=identity(task))
                return after_agent(task, graders, secrets, before)
    finally:
        hidden_tests.remove_new(folder, before)  # once every grader has ended


def _graded(source: Source, row: Row, secrets: Secrets) -> Graded:
    check = row.check
    if check.words:
        check = Check(name=check.name, role=check.role, weight=check.weight, passed=check.passed,
                      credit=check.credit, share=check.share, words=secrets.scrub(check.words))
    return Graded(source, check, row.malformed)
