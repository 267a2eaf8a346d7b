"""The report's details of a task family's tasks (docs/families.md, "The report"): per task and host, the seed's
numbers — pass@k, the mean score, score@k — then its runs, the merged check rows of both producers, and the errors
of its graders (a preflight that failed, rows that were not rows).

The numbers are the report's own formulas (results/stats.py) over the task's judged runs: pass@k is the unbiased
estimator 1 − C(n−c, k)/C(n, k) over n runs of which c passed; the score is the mean of the runs' scores; score@k
the expected best score of k runs drawn from them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import stats
from .marks import table_lines
from .record import GATE, Record, Terms


@dataclass(frozen=True)
class TaskRun:
    """One run of a task, as its record says."""

    run_id: str
    index: int
    outcome: str
    score: float | None
    seconds: float | None
    turns: int | None
    #: What failed (each failing check with its words), or why the run was an error or skipped.
    said: tuple[str, ...]
    #: The judge gate's words (`judge.task.md`, under --palette-validity); "" when it was not asked.
    judge: str = ""


@dataclass
class CheckRow:
    """One check merged over a task's judged runs: how often it held."""

    name: str
    source: str  #: "invariants" or "tests"
    role: str  #: "gate", "scored" or "diagnostic"
    weight: float
    held: int = 0
    judged: int = 0


@dataclass
class TaskDetail:
    """A task under one column of the report (a host, under one set of terms)."""

    task: str
    family: str
    label: str
    runs: list[TaskRun] = field(default_factory=list)
    checks: list[CheckRow] = field(default_factory=list)
    #: The graders' errors: preflight's, an invariants script's, a missing runner; and malformed rows.
    errors: list[str] = field(default_factory=list)

    @property
    def judged(self) -> list[TaskRun]:
        return [run for run in self.runs if run.outcome in ("pass", "fail")]

    @property
    def passes(self) -> int:
        return sum(run.outcome == "pass" for run in self.runs)

    @property
    def scores(self) -> list[float]:
        return [run.score for run in self.judged if run.score is not None]

    def pass_at(self, k: int) -> float | None:
        return stats.pass_at_k(len(self.judged), self.passes, k) if self.judged else None

    def score_at(self, k: int) -> float | None:
        return stats.score_at_k(self.scores, k) if self.scores else None

    @property
    def mean_score(self) -> float | None:
        return sum(self.scores) / len(self.scores) if self.scores else None


def details(records: Iterable[Record], labels: Mapping[tuple[str, Terms], str]) -> list[TaskDetail]:
    """The details of every task family's task in `records` (the latest of each item), by task then column."""
    found: dict[tuple[str, str], TaskDetail] = {}
    for record in sorted(records, key=lambda r: (r.case, r.host, r.run_id, r.run_index)):
        family = record.family
        if family is None:
            continue
        label = labels.get((record.host, record.terms), record.host)
        detail = found.setdefault((record.case, label), TaskDetail(record.case, family.family, label))
        judged = record.judged
        judge = next((check.words for check, source in zip(judged.checks, family.sources, strict=False)
                      if source == "judge"), "") if judged is not None else ""
        detail.runs.append(TaskRun(record.run_id, record.run_index, record.outcome,
                                   judged.score if judged is not None else None, record.usage.seconds,
                                   record.usage.turns, record.failures, judge))
        if judged is None:
            detail.errors += [f"run {record.run_index}: {said}" for said in record.failures
                              if record.outcome == "error"]
            continue
        if family.malformed:
            detail.errors.append(f"run {record.run_index}: {family.malformed} malformed row(s) of the invariants, "
                                 "each a failing check")
        sources = family.sources if len(family.sources) == len(judged.checks) else ("",) * len(judged.checks)
        rows = {(row.name, row.source): row for row in detail.checks}
        for check, source in zip(judged.checks, sources, strict=True):
            role = check.role if check.role == GATE or check.weight > 0 else "diagnostic"
            row = rows.get((check.name, source))
            if row is None:
                row = rows[(check.name, source)] = CheckRow(check.name, source, role, check.weight)
                detail.checks.append(row)
            row.judged += 1
            row.held += bool(check.passed)
    return sorted(found.values(), key=lambda d: (d.family, d.task, d.label))


def _number(value: float | None, percent: bool = False) -> str:
    if value is None:
        return "—"
    return f"{value:.1%}" if percent else f"{value:.2f}"


def markdown(found: list[TaskDetail], ks: list[int]) -> list[str]:
    """The report's "Tasks" section."""
    if not found:
        return []
    ks = [k for k in ks if k >= 1] or [1]
    lines = ["", "## Tasks", "",
             "Each task of a family, per host: pass@k (the chance that at least one of k runs passes), the mean "
             "score of its runs and score@k (the expected best score of k runs), over its judged runs; then its "
             "runs, its checks merged over them (invariants first, then hidden tests) and its graders' errors.", ""]
    header = ["Task", "Host", "Passed", *[f"pass@{k}" for k in ks], "Score", *[f"score@{k}" for k in ks]]
    rows = [[f"{d.family}/{d.task}", d.label, f"{d.passes}/{len(d.judged)}",
             *[_number(d.pass_at(k), percent=True) for k in ks], _number(d.mean_score),
             *[_number(d.score_at(k)) for k in ks]] for d in found]
    lines += table_lines(header, rows)
    for detail in found:
        lines += ["", f"### {detail.family}/{detail.task} on {detail.label}", ""]
        judged = any(run.judge for run in detail.runs)
        header = ["Run", "Outcome", "Score", "Seconds", "Turns", "What failed", *(["The judge"] if judged else [])]
        lines += table_lines(header,
                        [[f"{run.run_id} #{run.index}", run.outcome.upper() if run.outcome == "fail" else run.outcome,
                          _number(run.score), _number(run.seconds), "—" if run.turns is None else str(run.turns),
                          " · ".join(_short(said) for said in run.said) or "—",
                          *([_short(run.judge) or "—"] if judged else [])] for run in detail.runs])
        if detail.checks:
            lines += [""]
            lines += table_lines(["Check", "From", "Role", "Weight", "Held"],
                            [[row.name, row.source or "?", row.role, "—" if row.role == GATE else f"{row.weight:g}",
                              f"{row.held}/{row.judged}"] for row in detail.checks])
        if detail.errors:
            lines += ["", "Errors of the graders:", ""] + [f"- {_short(error, 400)}" for error in detail.errors]
    return lines


def _short(text: str, limit: int = 200) -> str:
    said = " ".join(text.split())
    return said if len(said) <= limit else said[:limit - 1] + "…"


def to_json(found: list[TaskDetail], ks: list[int]) -> list[dict[str, Any]]:
    return [{"family": d.family, "task": d.task, "host": d.label, "passes": d.passes, "n": len(d.judged),
             "pass_at_k": {str(k): d.pass_at(k) for k in ks}, "score": d.mean_score,
             "score_at_k": {str(k): d.score_at(k) for k in ks},
             "runs": [{"run_id": r.run_id, "run": r.index, "outcome": r.outcome, "score": r.score,
                       "seconds": r.seconds, "turns": r.turns, "said": list(r.said), "judge": r.judge}
                      for r in d.runs],
             "checks": [{"name": c.name, "source": c.source, "role": c.role, "weight": c.weight, "held": c.held,
                         "judged": c.judged} for c in d.checks],
             "errors": d.errors} for d in found]


def stale_lockfiles(records: Iterable[Record]) -> list[str]:
    """Where one skill-set hash (apm.lock.yaml's) covers runs whose staged `.claude/` trees differ: the lockfile was
    not updated when `.claude/` changed, so the hash no longer says which skills ran. One line each."""
    trees: dict[tuple[str, str], dict[str, set[str]]] = {}
    for record in records:
        family = record.family
        if family is not None and record.terms.skill_hash.startswith("sha256:") and family.skills_hash:
            runs = trees.setdefault((family.family, record.terms.skill_hash), {})
            runs.setdefault(family.skills_hash, set()).add(record.run_id)
    return [f"{family}: the skill-set hash {skill_hash[:19]}… covers {len(runs)} different .claude/ trees ("
            + "; ".join(f"{tree[:19]}… in {', '.join(sorted(ids))}" for tree, ids in sorted(runs.items()))
            + "): apm.lock.yaml was not updated when .claude/ changed, and these runs did not have the same skills"
            for (family, skill_hash), runs in sorted(trees.items()) if len(runs) > 1]
