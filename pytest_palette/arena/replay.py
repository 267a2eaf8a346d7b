"""A recorded run played back as the model (`--model replay:RUN`): each item's cassette answers, in order, what the
agent's client asks, while the harness runs the agent's commands again for real (docs/runs.md, "Replay").

The answers are the recording's; everything else is live — the host's client, the skill, the backend, the sandbox,
the judge. So a paid run becomes an offline regression test of everything but the model. Each request is held
against the one recorded (`divergence`): the messages must be the same ones, in the same roles, with the same
words from the user and the same calls from the model; what a command printed may differ in its timings, paths,
ids and counts, never in its shape. The first request that cannot be matched ends the item as an ERROR that names
it: the call, the message, what was recorded and what came.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ..results.ledger import load
from ..results.record import Record
from .cassette import Exchange, read_cassette
from .workspace import UnsafeRecord, Workspace

#: What a replayed model is called: `replay:<run folder>`.
PREFIX = "replay:"
#: How much of a message an error shows of what was recorded and what came.
SHOWN = 160

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:/[\w.@+~-]+){2,}/?")
_HEX = re.compile(r"\b[0-9a-f]{8,}\b")


class ReplayUnavailable(Exception):
    """The recorded run cannot be replayed: no run folder, no record in it; one line naming what is missing."""


class ReplayDiverged(RuntimeError):
    """The agent asked what the recording did not: the item is an ERROR of the run, in these words."""


@dataclass(frozen=True)
class RecordedRun:
    """A run folder to replay: where it is, what it was (its id and model, as its records name them), and its
    items' records."""

    folder: Path
    run_id: str
    model: str
    records: tuple[Record, ...]

    def cassette(self, relative: PurePosixPath) -> list[Exchange] | str:
        """The recorded exchanges of the item whose folder is `relative` (`<host>/<case>[-k]`, the same in the
        recording when it ran the same repeats), or why there are none (the item was not in the recorded run, was
        not recorded, or its record names no folder of the run's)."""
        def item(path: str | PurePosixPath) -> str:
            return re.sub(r"~[0-9]+$", "", str(path))  # a resumed run's second attempt is still that item

        record = next((r for r in self.records if r.workspace is not None and item(r.workspace) == item(relative)),
                      None)
        if record is None:
            return f"{relative} is not an item of the recorded run {self.run_id} (replay with its own --palette-runs)"
        try:
            folder = Workspace.locate(self.folder, record).folder
        except UnsafeRecord as refused:
            return f"its recording cannot be read: {refused}"
        exchanges = read_cassette(folder)
        if not exchanges:
            return f"{relative} has no cassette in the recorded run {self.run_id} (it ran without --palette-record)"
        return exchanges


def recorded_run(text: str) -> RecordedRun:
    """The run `replay:<folder>` names, read once: ReplayUnavailable when it is not a run with records."""
    folder = Path(text).expanduser()
    if folder.name.startswith("results.") and folder.suffix == ".jsonl":
        folder = folder.parent
    if not folder.is_dir():
        raise ReplayUnavailable(f"--model {PREFIX}{text}: no run folder at {folder}")
    records = tuple(load(folder).latest.values())
    if not records:
        raise ReplayUnavailable(f"--model {PREFIX}{text}: no results.jsonl with records in {folder}")
    run_ids = sorted({r.run_id for r in records})
    models = sorted({r.terms.model for r in records})
    if any(model.startswith(PREFIX) for model in models):
        raise ReplayUnavailable(f"--model {PREFIX}{text}: {folder} is itself a replay; replay the run it replayed")
    return RecordedRun(folder, ", ".join(run_ids), ", ".join(models), records)


def _masked(text: str) -> str:
    """A command's output with what changes from run to run masked: paths, hex ids, numbers (times, sizes)."""
    return _NUMBER.sub("#", _HEX.sub("<id>", _PATH.sub("<path>", text)))


def _shape(value: Any) -> Any:
    """A JSON value's shape: its keys, recursively, with every leaf's type."""
    if isinstance(value, dict):
        return {key: _shape(item) for key, item in sorted(value.items())}
    if isinstance(value, list):
        return [_shape(item) for item in value[:1]]
    return type(value).__name__


def _same_output(recorded: str, sent: str) -> bool:
    """What a tool printed, as the rule compares it: JSON by its shape, anything else with its paths, ids and
    numbers masked."""
    try:
        return bool(_shape(json.loads(recorded)) == _shape(json.loads(sent)))
    except ValueError:
        return _masked(recorded) == _masked(sent)


def _content(message: dict[str, Any]) -> str:
    content = message.get("data", {}).get("content", "")
    if isinstance(content, list):
        return "".join(part if isinstance(part, str) else str(part.get("text", "")) for part in content)
    return str(content)


def _calls(message: dict[str, Any]) -> list[tuple[str, str]]:
    return [(str(call.get("name")), json.dumps(call.get("args", {}), sort_keys=True))
            for call in message.get("data", {}).get("tool_calls", []) or []]


def _clip(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= SHOWN else flat[:SHOWN - 1] + "…"


def divergence(recorded: Sequence[dict[str, Any]], sent: Sequence[dict[str, Any]]) -> str | None:
    """Where a request departs from the recorded one, in words (None when it matches). Both are LangChain's
    `messages_to_dict`. The rule: the same number of messages, each of the same type; the user's and the
    system's words the same (paths masked: each run has its own folder); the model's own messages the same words
    and calls; a tool's output the same shape (`_same_output`)."""
    if len(sent) != len(recorded):
        return f"it sent {len(sent)} message(s) where the recording sent {len(recorded)}"
    for index, (was, now) in enumerate(zip(recorded, sent, strict=True), 1):
        kind = str(was.get("type"))
        if now.get("type") != kind:
            return f"message {index} is a {now.get('type')} message where the recording has a {kind} message"
        old, new = _content(was), _content(now)
        if kind == "tool":
            same = _same_output(old, new)
        elif kind == "ai":
            same = old == new and _calls(was) == _calls(now)
            old, new = old + json.dumps(_calls(was)), new + json.dumps(_calls(now))
        else:
            same = _PATH.sub("<path>", old) == _PATH.sub("<path>", new)
        if not same:
            return f"message {index} ({kind}) differs: recorded {_clip(old)!r}, came {_clip(new)!r}"
    return None


def replay_model(exchanges: Sequence[Exchange], label: str) -> Any:
    """A LangChain chat model that answers from `exchanges`, in order, each request first held against the
    recorded one; ReplayDiverged on the first it cannot match, or on a call past the recording's end."""
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, messages_from_dict, messages_to_dict
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from pydantic import ConfigDict

    class ReplayChatModel(BaseChatModel):
        model_config = ConfigDict(arbitrary_types_allowed=True)
        recorded: list[Any]
        name_shown: str
        position: int = 0

        @property
        def _llm_type(self) -> str:
            return "replay"

        @property
        def _identifying_params(self) -> dict[str, Any]:
            return {"model_name": self.name_shown}

        def bind_tools(self, tools: Sequence[Any], *, tool_choice: str | None = None, **kwargs: Any) -> Any:
            return self.bind(tools=[convert_to_openai_tool(tool) for tool in tools], **kwargs)

        def _generate(self, messages: list[Any], stop: list[str] | None = None, run_manager: Any = None,
                      **kwargs: Any) -> ChatResult:
            call = self.position + 1
            if self.position >= len(self.recorded):
                raise ReplayDiverged(f"call {call}: the agent asked the model again, and the recording ends after "
                                     f"{len(self.recorded)} call(s)")
            exchange: Exchange = self.recorded[self.position]
            self.position += 1
            found = divergence(exchange.messages, messages_to_dict(messages))
            if found:
                raise ReplayDiverged(f"call {call} (turn {exchange.turn}) diverges from the recording: {found}")
            if exchange.answer is None:
                raise ReplayDiverged(f"call {call} (turn {exchange.turn}): the recorded call failed "
                                     f"({exchange.error or 'no answer'}), and a replay gives no other")
            [answer] = messages_from_dict([exchange.answer])
            if isinstance(answer, AIMessage):  # a replay asks no model: the recording's tokens were spent then
                answer.usage_metadata = None
            return ChatResult(generations=[ChatGeneration(message=answer)])

    return ReplayChatModel(recorded=list(exchanges), name_shown=label)
