"""One ledger record per finished item: what ran, what was judged, and the configuration it ran under."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from . import __version__
from .backend import describe_backend
from .cases import Case
from .judge import Evidence, Verdict, call_args
from .models import ModelSpec
from .options import Settings
from .runner import RunRecord


def fingerprint(settings: Settings, skill_hash: str) -> str:
    """The configuration a result depends on: two runs with one fingerprint asked under the same terms."""
    terms = {
        "model": settings.model.text, "skill_hash": skill_hash, "backend": describe_backend(),
        "plugin": __version__, "turn_timeout": settings.turn_timeout, "build_grace": settings.build_grace,
        "command_timeout": settings.host.command_timeout, "recursion_limit": settings.host.recursion_limit,
        "eager": settings.host.eager,
    }
    return hashlib.sha256(json.dumps(terms, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ItemIdentity:
    run_id: str
    case: Case
    host: str
    model: ModelSpec
    run_index: int
    skill_hash: str
    fingerprint: str
    scaffold: dict[str, str]


def build(identity: ItemIdentity, outcome: str, failures: list[str], started_at: float, ended_at: float,
          verdict: Verdict | None = None, run: RunRecord | None = None) -> dict[str, Any]:
    evidence: Evidence | None = run.evidence if run is not None else None
    commands = list(verdict.commands) if verdict else [str(c.get("command", "?")) for c in
                                                        (evidence.calls if evidence else ())]
    first_edit = commands.index("edit") if "edit" in commands else None
    tokens, cost = _usage(run)
    case = identity.case
    return {
        "schema": 1, "run_id": identity.run_id, "case": case.name, "host": identity.host,
        "model": identity.model.text, "provider": identity.model.provider, "run_index": identity.run_index,
        "outcome": outcome, "failures": failures,
        "slides": evidence.slides if evidence else None,
        "has_plex": bool(evidence and evidence.has_plex), "deck": bool(evidence and evidence.pptx),
        "polls": verdict.polls if verdict else None, "calls": commands,
        "context_expected": case.expect.context,
        "context_reached": bool(evidence and any(call_args(c).get("context") or call_args(c).get("source")
                                                 for c in evidence.calls)),
        "edit_expected": case.expect.edit, "edit_called": first_edit is not None,
        "replanned_after_edit": first_edit is not None and "plan" in commands[first_edit:],
        "seconds": run.seconds if run else None, "turns": len(run.turns) if run else None,
        "tokens": tokens, "cost_usd": cost,
        "skill_hash": identity.skill_hash, "case_hash": case.digest(), "tags": list(case.tags),
        "plugin_version": __version__, "started_at": round(started_at, 3), "ended_at": round(ended_at, 3),
        "fingerprint": identity.fingerprint, "scaffold": dict(identity.scaffold),
    }


def _usage(run: RunRecord | None) -> tuple[dict[str, int] | None, float | None]:
    """Token counts and cost, summed over turns, when the host reported them; None when it did not."""
    if run is None:
        return None, None
    inputs = [t.usage.get("input_tokens") for t in run.turns]
    outputs = [t.usage.get("output_tokens") for t in run.turns]
    costs = [t.cost_usd for t in run.turns]
    tokens = ({"input": sum(i or 0 for i in inputs), "output": sum(o or 0 for o in outputs)}
              if any(v is not None for v in inputs + outputs) else None)
    cost = round(sum(c or 0.0 for c in costs), 6) if any(c is not None for c in costs) else None
    return tokens, cost
