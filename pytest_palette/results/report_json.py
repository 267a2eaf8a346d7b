"""The run's model (results/model.py) as JSON: `palette-bench report --json`, the same numbers as the Markdown."""

from __future__ import annotations

from typing import Any

from . import stats, tasks
from .model import Report
from .tally import Cell


def _score_json(score: stats.MeanScore | None) -> dict[str, Any] | None:
    return None if score is None else {"mean": score.mean, "sd": score.sd, "n": score.n,
                                       "interval": list(score.interval) if score.interval else None}


def _signed_rank_json(test: stats.SignedRankTest) -> dict[str, Any]:
    return {"test": "wilcoxon signed-rank", "a_higher": test.better, "b_higher": test.worse, "ties": test.ties,
            "w_plus": test.w_plus, "p": test.p, "exact": test.exact, "verdict": test.verdict}


def to_json(report: Report) -> dict[str, Any]:
    """The same numbers as the Markdown, for machines."""

    def k_map(values: dict[int, tuple[float | None, int]]) -> dict[str, Any]:
        return {str(k): {"value": v, "cases": n} for k, (v, n) in values.items()}

    def cell_json(cell: Cell) -> dict[str, Any]:
        return {"passes": cell.passes, "fails": cell.fails, "errors": cell.errors, "skipped": cell.skipped,
                "n": cell.n, "wilson": stats.wilson(cell.passes, cell.n),
                "pass_at_k": {str(k): stats.pass_at_k(cell.n, cell.passes, k) if cell.n else None
                              for k in report.ks},
                "pass_hat_k": {str(k): stats.pass_hat_k(cell.n, cell.passes, k) if cell.n else None
                               for k in report.ks},
                "score": _score_json(cell.score), "unscored": cell.unscored,
                "score_at_k": {str(k): stats.score_at_k(cell.scores, k) if cell.scores else None for k in report.ks},
                "median_slides": stats.weighted_median(dict(cell.slides)),
                "worst_polls": max(cell.polls) if cell.polls else None,
                "failures": dict(cell.failures.most_common()), "host_errors": dict(cell.host_errors.most_common())}

    return {
        "schema": 2, "records": report.records, "duplicates_dropped": report.duplicates_dropped,
        "skipped_lines": report.skipped_lines, "ledgers": report.ledgers, "ks": report.ks,
        "groups": {letter: {"skill_hash": s, "fingerprint": f} for letter, (s, f) in report.groups.items()},
        "hosts": [{"label": c.label, "host": c.host, "group": c.group or None, "models": c.models,
                   "providers": c.providers, "scaffold": c.scaffold, "sandboxes": c.sandboxes,
                   "skill_hashes": c.skill_hashes,
                   "fingerprints": c.fingerprints, "runs": c.runs, "passes": c.passes, "fails": c.fails,
                   "errors": c.errors, "skipped": c.skipped, "n": c.n, "wilson": c.wilson(),
                   "pass_at_k": k_map(c.pass_at), "pass_hat_k": k_map(c.pass_hat), "score": _score_json(c.score),
                   "score_at_k": k_map(c.score_at), "unscored": c.unscored, "metrics": c.metrics.to_json(),
                   "usage": c.usage, "usage_runs": c.usage_runs, "cost_from": c.cost_from,
                   "unpriced": {"runs": c.unpriced, "models": c.unpriced_models},
                   "baseline": c.baseline, "instead": dict(c.instead.most_common())} for c in report.columns],
        "cases": [{"case": case, "cells": {label: cell_json(cell) for label in (c.label for c in report.columns)
                                           if (cell := report.cell(case, label)) is not None}}
                  for case in report.cases],
        "paired": [{"a": p.a, "b": p.b, "a_higher": p.test.b, "b_higher": p.test.c, "ties": p.test.ties,
                    "p": p.test.p, "verdict": p.test.verdict, "scores": _signed_rank_json(p.scores)}
                   for p in report.pairs],
        "lift": [{"host": h.host, "with_skill": {"passes": h.with_skill[0], "n": h.with_skill[1]},
                  "without": {"passes": h.without[0], "n": h.without[1]}, "lift": h.lift, "shared": h.shared,
                  "skill_higher": h.test.b, "no_skill_higher": h.test.c, "ties": h.test.ties, "p": h.test.p,
                  "verdict": h.test.verdict} for h in report.lifts],
        "disagreements": report.disagreements,
        "discriminating": f"{len(report.disagreements)} of {len(report.cases)}",
        "caveats": report.caveats,
        "tasks": tasks.to_json(report.tasks, report.ks),
    }
