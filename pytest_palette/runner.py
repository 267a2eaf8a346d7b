"""Running one case on one host: a fresh workspace, the scripted user, and the evidence left on disk.

Layout of one item's folder, `runs/<run-id>/<host>/<case>/`:

    input/     request.txt, context.md, replies.txt — the question, so a number can be reproduced
    work/      the agent's working directory (the skill is staged here; plan.md, deck/ …)
    output/    <case>.pptx, slide-*.png, plan.md — copies of what the agent produced
    palette-calls.jsonl   the skill's call trace
    turns.json            what was sent and answered, turn by turn

The agent works in work/, so it never sees the replies waiting for it in input/.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import leftovers
from .backend import agent_environment
from .cases import Case
from .evidence import TRACE_NAME, any_deck, inspect_deck, newest_deck, read_trace
from .hosts.base import Host, HostError, HostSettings, TurnRecord
from .judge import Evidence
from .models import ModelSpec
from .skill import SkillCard

BUILD_STATE = ".palette-build.json"
BUILD_EXIT = ".palette-exit"


class HostFailure(Exception):
    """The host could not start or finish a turn: the item is an ERROR of the run, not a FAIL of the skill."""


@dataclass
class RunRecord:
    """What one item ran: its turns, and the evidence read afterwards."""

    workspace: Path
    turns: list[TurnRecord] = field(default_factory=list)
    seconds: float = 0.0
    evidence: Evidence | None = None


def workspace_name(case: str, run_index: int, runs: int) -> str:
    """A case's folder under its host: `case`, or `case-2` when each case runs several times."""
    return case if runs == 1 else f"{case}-{run_index}"


def write_inputs(case: Case, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "request.txt").write_text(case.request + "\n", encoding="utf-8")
    if case.context:
        (folder / "context.md").write_text(case.context + "\n", encoding="utf-8")
    (folder / "replies.txt").write_text("".join(f"{reply}\n" for reply in case.replies), encoding="utf-8")
    # The whole definition, expectations included, so a saved run can be judged again (rejudge).
    (folder / "case.json").write_text(json.dumps(case.to_json(), indent=2), encoding="utf-8")


def converse(case: Case, host: Host, skill: SkillCard, model: ModelSpec, settings: HostSettings,
             workspace: Path, turn_timeout: float, build_grace: float,
             base_env: Mapping[str, str] | None = None) -> RunRecord:
    """Drive the opening and each reply through the host; raise HostFailure when the host fails.

    A failed turn stops the conversation: later replies would land in the wrong state.
    """
    if workspace.exists():
        shutil.rmtree(workspace)
    write_inputs(case, workspace / "input")
    work = workspace / "work"
    work.mkdir(parents=True)
    trace = workspace / TRACE_NAME
    # The trace path travels in this conversation's environment only; nothing is set process-wide.
    env = agent_environment(trace, base_env)
    record = RunRecord(workspace)
    started = time.monotonic()
    try:
        try:
            session = host.open(work, skill, env, model, settings)
        except HostError as error:
            raise HostFailure(f"could not start: {error}") from None
        except Exception as error:
            raise HostFailure(f"could not start: {type(error).__name__}: {error}") from None
        failed = False
        try:
            for number, message in enumerate((case.opening, *case.replies), 1):
                try:
                    record.turns.append(session.send(message, turn_timeout))
                except HostError as error:
                    failed = True
                    # The host's own record of the failed turn keeps the steps it streamed before failing.
                    record.turns.append(error.turn or TurnRecord(sent=message, error=str(error)))
                    raise HostFailure(f"turn {number} failed: {error}") from None
                except Exception as error:
                    failed = True
                    record.turns.append(TurnRecord(sent=message, error=f"{type(error).__name__}: {error}"))
                    raise HostFailure(f"turn {number} raised {type(error).__name__}: {error}") from None
        finally:
            session.close()
            if failed:  # what the dead conversation left running (a command, a build) is stopped with it
                leftovers.stop(trace)
    finally:
        record.seconds = round(time.monotonic() - started, 3)
        _save_turns(workspace, record)
    record.evidence = collect(work, trace, build_grace)
    save_outputs(case, record.evidence, workspace / "output")
    return record


def as_left(case: Case, workspace: Path, build_grace: float) -> RunRecord:
    """The record of a conversation held earlier (by hand, or in another run): only what is on disk."""
    if not (workspace / "input").is_dir():
        raise HostFailure(f"no prepared folder for {case.name} at {workspace}")
    record = RunRecord(workspace)
    turns = workspace / "turns.json"
    if turns.is_file():
        saved = json.loads(turns.read_text(encoding="utf-8"))
        record.seconds = float(saved.get("seconds", 0.0))
        record.turns = [TurnRecord(**turn) for turn in saved.get("turns", [])]
    record.evidence = collect(workspace / "work", workspace / TRACE_NAME, build_grace)
    save_outputs(case, record.evidence, workspace / "output")
    return record


def _save_turns(workspace: Path, record: RunRecord) -> None:
    payload = {"seconds": record.seconds, "turns": [asdict(turn) for turn in record.turns]}
    (workspace / "turns.json").write_text(json.dumps(payload, indent=2), encoding="utf-8")


def wait_for_builds(work: Path, grace: float) -> list[Path]:
    """Wait (bounded) until every build started under `work` has recorded its exit; return those that did not.

    A deck that looks complete can exist before its build has ended, so the deck is read only after.
    """
    deadline = time.monotonic() + grace
    while True:
        running = [state.parent for state in work.rglob(BUILD_STATE) if not (state.parent / BUILD_EXIT).exists()]
        if not running or time.monotonic() >= deadline:
            return running
        time.sleep(0.1)


def collect(work: Path, trace: Path, grace: float) -> Evidence:
    unfinished = wait_for_builds(work, grace)
    deck = newest_deck(work)
    facts = inspect_deck(deck) if deck else None
    return Evidence(
        workspace=work,
        pptx=deck,
        slides=facts.slides if facts else 0,
        has_plex=facts.has_plex if facts else False,
        size=facts.size if facts else 0,
        decks=tuple(any_deck(work)),
        calls=tuple(read_trace(trace)),
        unfinished=tuple(unfinished),
    )


def save_outputs(case: Case, evidence: Evidence, output: Path) -> None:
    """Copy the deck, its previews and the plan beside the inputs, named after the case."""
    output.mkdir(parents=True, exist_ok=True)
    if evidence.pptx is None:
        return
    shutil.copy2(evidence.pptx, output / f"{case.name}.pptx")
    for preview in sorted(evidence.pptx.parent.glob("slide-*.png")):
        shutil.copy2(preview, output / preview.name)
    plans = list(evidence.workspace.glob("plan*.md")) or list(evidence.pptx.parent.parent.glob("plan*.md"))
    if plans:
        shutil.copy2(max(plans, key=lambda p: p.stat().st_mtime), output / "plan.md")
