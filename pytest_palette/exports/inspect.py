"""Runs as inspect_ai eval logs (`palette-bench export inspect`), for `inspect view` and whatever reads its logs.

An inspect log has one model, so each (run, host) is one log, `<run>-<host>.eval`; each item run in it is a
sample: the conversation turn by turn, with the commands the agent ran as calls of inspect's own `bash` tool in the
turn whose time holds them, the judge's verdict as its score and its tokens as the model's usage. Every part is
inspect_ai's own type and the file its own writer's: nothing here writes a log's JSON by hand.

An item's folder holds what the agent wrote: it is read only through the bounded readers that follow no link
(Transcript.saved, command_log.read, Workspace.case), and the log is scrubbed of every secret as a whole.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..arena import command_log
from ..arena.workspace import UnsafeRecord, Workspace
from ..results.checks import score_of, values_of
from ..results.ledger import find, load
from ..results.record import JUDGED, Record
from ..results.redaction import Secrets
from ..run.conversation import Transcript
from .table import ExportError

if TYPE_CHECKING:
    from inspect_ai.log import EvalLog, EvalResults, EvalSample
    from inspect_ai.model import ChatMessage, ModelUsage
    from inspect_ai.scorer import Score

#: The one scorer of every log: the judge's verdict, its score the record's (results/checks.py).
SCORER = "palette"
#: What the command says without the `inspect` extra.
NEEDS = "the inspect log needs inspect_ai: pip install 'pytest-palette[inspect]'"
#: inspect's own shell tool and its argument: `inspect view` shows such a call as the command line it ran.
TOOL, ARGUMENT = "bash", "cmd"


@dataclass(frozen=True)
class ItemRun:
    """One record and the run folder its item's folder lies in (a shard's, when the run was sharded)."""

    folder: Path
    record: Record


@dataclass(frozen=True)
class Written:
    """One log written: where, and how many samples it holds."""

    path: Path
    samples: int


def item_runs(paths: Iterable[Path]) -> dict[tuple[str, str], list[ItemRun]]:
    """The latest record of each item run at or under `paths`, with its run folder, by (run, host), each list in
    the order of (case, repeat). Of an item recorded in two folders (shards that both ran it), the one that ended
    last, as every report counts it (ledger.latest)."""
    latest: dict[tuple[str, str, str, int], ItemRun] = {}
    folders = dict.fromkeys(ledger.parent for path in paths for ledger in find(path).ledgers)
    for folder in folders:
        for key, record in load(folder).latest.items():
            held = latest.get(key)
            if held is None or record.usage.ended_at >= held.record.usage.ended_at:
                latest[key] = ItemRun(folder, record)
    grouped: dict[tuple[str, str], list[ItemRun]] = {}
    for found in sorted(latest.values(), key=lambda i: (i.record.run_id, i.record.host, i.record.case,
                                                          i.record.run_index)):
        grouped.setdefault((found.record.run_id, found.record.host), []).append(found)
    return grouped


def write_logs(paths: Sequence[Path], out: Path, secrets: Secrets) -> list[Written]:
    """One `.eval` log per (run, host) in the folder `out`, each scrubbed of `secrets`; ExportError when
    inspect_ai is not installed or nothing was recorded."""
    try:
        from inspect_ai.log import EvalLog, write_eval_log
    except ImportError:
        raise ExportError(NEEDS) from None
    grouped = item_runs(paths)
    if not grouped:
        raise ExportError(f"{', '.join(map(str, paths))}: the ledger(s) hold no valid record")
    out.mkdir(parents=True, exist_ok=True)
    written: list[Written] = []
    names: set[str] = set()
    for (run_id, host), items in grouped.items():
        name = file_name(run_id, host, names)
        # One scrub of the whole log, every string and key in it: no text added to it later can miss it.
        log = EvalLog.model_validate(secrets.scrub_data(eval_log(run_id, host, items).model_dump()))
        write_eval_log(log, str(out / name), format="eval")
        written.append(Written(out / name, len(items)))
    return written


def file_name(run_id: str, host: str, taken: set[str]) -> str:
    """`<run>-<host>.eval`, in characters any file system takes and never a path (a ledger from elsewhere may name
    its run `../x`), made unique among `taken` (and added to it)."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{run_id}-{host}").lstrip(".") or "run"
    name, number = f"{stem}.eval", 1
    while name in taken:
        number += 1
        name = f"{stem}-{number}.eval"
    taken.add(name)
    return name


def sample_id(record: Record) -> str:
    """A sample's id, unique in its log and across a run's logs: `<case>@<host>#<repeat>`."""
    return f"{record.case}@{record.host}#{record.run_index}"


def eval_log(run_id: str, host: str, items: Sequence[ItemRun]) -> EvalLog:
    """The log of one host's item runs in one run: the eval's identity, its samples, their mean score and tokens."""
    from inspect_ai.log import EvalConfig, EvalDataset, EvalLog, EvalPlan, EvalPlanStep, EvalSpec, EvalStats
    from inspect_ai.viewer import ViewerConfig

    records = [item.record for item in items]
    first = records[0]
    labels = list(dict.fromkeys(r.terms.label for r in records))
    families = {r.family.family for r in records if r.family is not None}
    task = families.pop() if len(families) == 1 and all(r.family for r in records) else "palette"
    samples = [sample(item) for item in items]
    spec = EvalSpec(
        eval_id=_digest("eval", run_id, host), run_id=run_id, task_id=_digest("task", run_id, host),
        created=_at(min(r.usage.started_at for r in records)), task=task, solver=host,
        # inspect view lists logs by task, model and tags: the host's tag tells the logs of one run apart.
        tags=[host],
        dataset=EvalDataset(name=task, samples=len(samples), sample_ids=[s.id for s in samples]),
        model=" + ".join(labels), config=EvalConfig(epochs=max(r.run_index for r in records)),
        packages={"pytest-palette": first.terms.plugin_version},
        metadata={"host": host, "model": first.terms.model, "provider": first.terms.provider,
                  "skill_hash": first.terms.skill_hash, "sandbox": first.terms.sandbox,
                  "fingerprint": first.terms.fingerprint},
        # The agent wrote much of what a sample shows (its answers, its commands' output): shown as plain text, a
        # link or an image in it is never rendered, or fetched.
        viewer=ViewerConfig(trust_content=False))
    usage: dict[str, ModelUsage] = {}
    for each in samples:
        for model, used in each.model_usage.items():
            usage[model] = usage[model] + used if model in usage else used
    return EvalLog(status="success", eval=spec, plan=EvalPlan(steps=[EvalPlanStep(solver=host)]),
                   results=_results(samples), samples=samples,
                   stats=EvalStats(started_at=spec.created, completed_at=_at(max(r.usage.ended_at for r in records)),
                                   model_usage=usage))


def sample(item: ItemRun) -> EvalSample:
    """One item run as a sample: what was asked, the conversation, its verdict, its tokens."""
    from inspect_ai.log import EvalError, EvalSample
    from inspect_ai.model import ModelOutput, ModelUsage

    record = item.record
    usage, label = record.usage, record.terms.label
    request, messages, note = "", [], ""
    try:
        workspace = Workspace.locate(item.folder, record)
    except UnsafeRecord as refused:  # the sample is the record's alone: its folder is not read
        note = f"its folder is not read: {refused}"
    else:
        case = workspace.case()
        messages = conversation(workspace, label)
        request = case.request if case is not None else ""
    sent = next((m.text for m in messages if m.role == "user"), "")
    answers = [m.text for m in messages if m.role == "assistant" and m.text]
    tokens = {} if usage.input_tokens is None and usage.output_tokens is None else {label: ModelUsage(
        input_tokens=usage.input_tokens or 0, output_tokens=usage.output_tokens or 0,
        total_tokens=(usage.input_tokens or 0) + (usage.output_tokens or 0), total_cost=usage.cost_usd)}
    judged = record.outcome in JUDGED
    return EvalSample(
        id=sample_id(record), epoch=record.run_index, input=request or sent or record.case, target="",
        messages=messages, output=ModelOutput.from_content(label, answers[-1] if answers else ""),
        scores={SCORER: verdict(record)} if judged else None,
        # An error or a skip is no verdict on the skill, and every report leaves it out of the score: inspect view
        # marks a sample with an error as such in its list and its header, and leaves it out of the mean, where a
        # score with no value would show as a blank beside the others.
        error=None if judged else EvalError(message=f"{record.outcome}: {'; '.join(record.failures) or 'no reason'}",
                                           traceback="", traceback_ansi=""),
        metadata={"case": record.case, "host": record.host, "run_index": record.run_index,
                  "outcome": record.outcome, "workspace": record.workspace, "tags": list(record.tags),
                  "model": record.terms.model, "seconds": usage.seconds, "turns": usage.turns,
                  "stops": list(usage.stops), "commands": usage.commands, "model_calls": usage.model_calls,
                  "cost_usd": usage.cost_usd, "family": record.family.family if record.family else None,
                  "case_hash": record.case_hash, **({"note": note} if note else {})},
        model_usage=tokens, started_at=_at(usage.started_at), completed_at=_at(usage.ended_at),
        total_time=usage.seconds, uuid=_digest("sample", record.run_id, record.host, record.case, record.run_index))


def conversation(workspace: Workspace, model: str) -> list[ChatMessage]:
    """The item's conversation as chat messages: each message of the user's, then each command the agent ran in
    that turn as a call of the shell tool and its output, then the agent's answer."""
    from inspect_ai.model import ChatMessageAssistant, ChatMessageTool, ChatMessageUser
    from inspect_ai.tool import ToolCall, ToolCallError

    try:
        transcript = Transcript.saved(workspace)
    except (ValueError, TypeError, OSError):  # a link, a file over its bound, not the transcript's JSON
        transcript = Transcript()
    runs = command_log.read(workspace.commands)
    messages: list[ChatMessage] = []
    placed = command_log.in_turns(runs, [turn.started_at for turn in transcript.turns])
    for number, (turn, ran) in enumerate(zip(transcript.turns, placed, strict=True), 1):
        messages.append(ChatMessageUser(content=turn.sent, metadata={"turn": number}))
        for index, run in enumerate(ran, 1):
            call = f"turn{number}-{index}"
            messages.append(ChatMessageAssistant(content="", model=model, tool_calls=[
                ToolCall(id=call, function=TOOL, arguments={ARGUMENT: run.command})]))
            failed = None if run.exit_code in (0, None) else ToolCallError("unknown", f"exit code {run.exit_code}")
            messages.append(ChatMessageTool(
                content="\n".join(part for part in (run.stdout, run.stderr) if part), tool_call_id=call,
                function=TOOL, error=failed, metadata={"exit_code": run.exit_code, "started_at": run.started_at,
                                                       "seconds": round(run.ended_at - run.started_at, 3)}))
        if turn.answer or turn.error:
            messages.append(ChatMessageAssistant(content=turn.answer, model=model, metadata={
                "turn": number, "stop": turn.stop, "error": turn.error, "seconds": turn.seconds}))
    return messages


def verdict(record: Record) -> Score:
    """The judge's verdict on a pass or a fail as a score: its value the record's score, its answer the outcome,
    its explanation the judge's words, and each check, with what it expected and observed, in its metadata."""
    from inspect_ai.scorer import Score

    checks: list[dict[str, Any]] = []
    about: dict[str, Any] = {"outcome": record.outcome, "checks": checks}
    judged = record.judged
    if judged is not None:
        for check in judged.checks:
            expected, observed = values_of(check, judged)
            checks.append({"name": check.name, "role": check.role, "passed": check.passed, "credit": check.credit,
                           "expected": expected, "observed": observed, "words": check.words})
        about.update(calls=list(judged.calls), deck_by=judged.deck_by)
    said = "\n".join(record.failures) or "every check held"
    value = score_of(record)
    if value is None:  # a fail written before checks that does not say by how much: kept, and out of the mean
        return Score.unscored(reason="scoring_failed", answer=record.outcome, explanation=said, metadata=about)
    return Score(value=value, answer=record.outcome, explanation=said, metadata=about)


def _results(samples: Sequence[EvalSample]) -> EvalResults:
    """The log's results: the mean of the scored samples' scores (none when no sample has one)."""
    from inspect_ai.log import EvalMetric, EvalResults, EvalScore

    values = [s.scores[SCORER].as_float() for s in samples if s.scores and SCORER in s.scores]
    scored = [v for v in values if not math.isnan(v)]
    metrics = {"mean": EvalMetric(name="mean", value=sum(scored) / len(scored))} if scored else {}
    return EvalResults(total_samples=len(samples), completed_samples=len(values), scores=[EvalScore(
        name=SCORER, scorer=SCORER, scored_samples=len(scored), unscored_samples=len(samples) - len(scored),
        metrics=metrics)])


def _at(moment: float) -> str:
    """A time on the machine's clock as inspect keeps one: ISO 8601, in UTC."""
    return datetime.fromtimestamp(moment, timezone.utc).isoformat()


def _digest(*parts: object) -> str:
    """A stable id for a log's eval, task or sample: the same export writes the same ids."""
    return hashlib.sha256("\0".join(map(str, parts)).encode()).hexdigest()[:22]
