"""A recorded run played back as the model (`--model replay:RUN`): each item's cassette answers, in order, what the
agent's client asks, while the harness runs the agent's commands again for real (docs/runs.md, "Replay").

The answers are the recording's; everything else is live — the host's client, the skill, the backend, the sandbox,
the judge. So a paid run becomes an offline regression test of everything but the model. Each request is held
against the one recorded (`divergence`): the messages must be the same ones, in the same roles, with the same
words from the user and the same calls from the model; what a command printed may differ in its timings, paths,
ids and counts, never in its shape. The first request that cannot be matched ends the item as an ERROR that names
it: the call, the message, what was recorded and what came.

On react the cassette answers in-process, as its chat model (`replay_model`). On cuga, claude and codex it answers
on the wire, at the endpoint the model layer serves their clients (`WireReplay`, behind layer/endpoint.py's
KeyForwarder): the recorded bytes of each answer, with the recorded item's folder read as this item's.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ..results.ledger import load
from ..results.record import Record
from .cassette import MODEL_ROUTES, Exchange, Wire, read_cassette, request_messages
from .workspace import UnsafeRecord, Workspace

#: What a replayed model is called: `replay:<run folder>`.
PREFIX = "replay:"
#: How much of a message an error shows of what was recorded and what came.
SHOWN = 160

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:/[\w.@+~-]+){2,}/?")
#: An id in hex: 8 digits or more, or 6 or 7 with a decimal digit among them (a word such as "decade" is not
#: one; a chunk id may be, see _CHUNK).
_HEX = re.compile(r"\b(?:[0-9a-f]{8,}|(?=[0-9a-f]*[0-9])[0-9a-f]{6,7})\b")
#: Codex's frame of a command's output names its chunk by a random id of 6 hex digits, which may hold no decimal
#: digit (one output in 360): held by its place in the frame, not by its look.
_CHUNK = re.compile(r"^Chunk ID: \S+$", re.M)
#: What a client adds to a user's message of its own: the Claude CLI's reminders (its environment, the date, tokens
#: left), Codex's environment context (its folder, the date, the time zone).
_REMINDER = re.compile(r"<(system-reminder|environment_context)>.*?</\1>", re.S)
#: How CUGA's codeact hands the model what a code block printed: as a user message that begins so.
_EXECUTION = ("Execution output:", "Error during execution")
#: A recorded answer's content type, served again only if it is one (never a header of its own making).
_CONTENT_TYPE = re.compile(r"[\w.+-]+/[\w.+-]+(?:; ?[\w-]+=[\w.\"-]+)*")


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

    def model_of(self, host: str) -> str:
        """The model the run's items on `host` were recorded with (the run's, when it ran none there)."""
        return ", ".join(sorted({r.terms.model for r in self.records if r.host == host})) or self.model

    def client_model(self, host: str) -> tuple[str, str]:
        """(provider, model id) `host`'s client was told when it recorded: `rehearsal[:<name>]` is its own id."""
        recorded = self.model_of(host)
        if recorded.startswith("rehearsal"):
            return "rehearsal", recorded
        provider, _, model_id = recorded.partition(":")
        return provider, model_id or recorded

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
    """A command's output with what changes from run to run masked: paths, hex ids, numbers (times, sizes). An id
    and a number read alike: a hex id may be all digits in one run and not in the next."""
    return _NUMBER.sub("#", _HEX.sub("#", _PATH.sub("<path>", _CHUNK.sub("Chunk ID: #", text))))


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


def divergence(recorded: Sequence[dict[str, Any]], sent: Sequence[dict[str, Any]], *,
               client_words: bool = False) -> str | None:
    """Where a request departs from the recorded one, in words (None when it matches). Both are LangChain's
    `messages_to_dict` (or `wire_messages`). The rule: the same number of messages, each of the same type; the
    user's and the system's words the same (paths masked: each run has its own folder); the model's own messages
    the same words and calls; a tool's output the same shape (`_same_output`). With `client_words` (the wire
    hosts, whose clients write their own words into the conversation) the system's words and a client's
    reminders in the user's message are held with their numbers and ids masked too: the client's environment,
    the date, its count of tokens left."""
    if len(sent) != len(recorded):
        ours, theirs = [str(m.get("type")) for m in sent], [str(m.get("type")) for m in recorded]
        first = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b),
                     min(len(ours), len(theirs)))
        return (f"it sent {len(sent)} message(s) where the recording sent {len(recorded)}; from message {first + 1} "
                f"it sent {', '.join(ours[first:]) or 'none'}, the recording {', '.join(theirs[first:]) or 'none'}")
    for index, (was, now) in enumerate(zip(recorded, sent, strict=True), 1):
        if was == now:  # most of a request is the history already held: equal as it is, nothing to mask
            continue
        kind = str(was.get("type"))
        if now.get("type") != kind:
            return f"message {index} is a {now.get('type')} message where the recording has a {kind} message"
        old, new = _content(was), _content(now)
        if kind == "tool":
            same = _same_output(old, new)
        elif kind == "ai":
            same = old == new and _calls(was) == _calls(now)
            old, new = old + json.dumps(_calls(was)), new + json.dumps(_calls(now))
        elif client_words and kind == "system":
            same = _masked(old) == _masked(new)
        elif client_words:
            def words(text: str) -> str:
                return _PATH.sub("<path>", _REMINDER.sub(lambda found: _masked(found.group()), text))

            same = words(old) == words(new)
        else:
            same = _PATH.sub("<path>", old) == _PATH.sub("<path>", new)
        if not same:
            return f"message {index} ({kind}) differs: recorded {_clip(old)!r}, came {_clip(new)!r}"
    return None


def replay_model(exchanges: Sequence[Exchange], label: str) -> Any:
    """A LangChain chat model that answers from `exchanges`, in order, each request first held against the
    recorded one; ReplayDiverged on the first it cannot match, or on a call past the recording's end."""
    return _chat_model_class()(recorded=list(exchanges), name_shown=label)


@functools.cache
def _chat_model_class() -> Any:
    """The replayed chat model's class, made once: a pydantic class costs 30 ms to build, a replayed call less."""
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

    return ReplayChatModel


# -- on the wire: the cuga, claude and codex hosts ---------------------------------------------------------------------

#: A content block's types that carry words: Anthropic's and OpenAI chat's, and the Responses API's.
_TEXT_BLOCKS = ("text", "input_text", "output_text")


def _wire_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict) and block.get("type", "text") in _TEXT_BLOCKS:
            parts.append(str(block.get("text", "")))
        elif isinstance(block, dict) and block.get("type") == "tool_result":
            parts.append(_wire_text(block.get("content")))
    return "\n".join(parts)


def _message(kind: str, content: str, calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"type": kind, "data": {"content": content, "tool_calls": calls or []}}


def _arguments(value: Any) -> Any:
    try:
        return json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return value


def wire_messages(wire: Wire, messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """A wire request's messages in the shape `divergence` reads: each one's type (system, human, ai, tool), its
    words, and the model's calls by name and arguments. An Anthropic user message that carries tool results is a
    tool message (the reminders the client adds beside them are part of its output), and so is CUGA's user
    message that hands back what a code block printed. A Responses request's items are messages, the model's
    calls (each an ai message) and their outputs (tool messages); its reasoning is the model's own and not a
    message."""
    found = []
    for message in messages:
        role, content = message.get("role"), message.get("content")
        kind = message.get("type")
        if wire == "responses" and kind not in (None, "message"):
            found.extend(_responses_item(message))
        elif role in ("system", "developer"):
            found.append(_message("system", _wire_text(content)))
        elif role == "assistant" and wire == "openai":
            calls = [{"name": (c.get("function") or {}).get("name"),
                      "args": _arguments((c.get("function") or {}).get("arguments"))}
                     for c in message.get("tool_calls") or [] if isinstance(c, dict)]
            found.append(_message("ai", _wire_text(content), calls))
        elif role == "assistant":
            blocks = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
            calls = [{"name": b.get("name"), "args": b.get("input")} for b in blocks
                     if isinstance(b, dict) and b.get("type") == "tool_use"]
            found.append(_message("ai", _wire_text(blocks), calls))
        elif role == "tool" or _wire_text(content).startswith(_EXECUTION) or (isinstance(content, list) and any(
                isinstance(b, dict) and b.get("type") == "tool_result" for b in content)):
            found.append(_message("tool", _wire_text(content)))
        else:
            found.append(_message("human", _wire_text(content)))
    return found


def _responses_item(item: dict[str, Any]) -> list[dict[str, Any]]:
    """A Responses input item other than a message, as `divergence` reads it: a call of the model's, a call's
    output, or — an item of a kind it does not know — its kind alone."""
    kind = str(item.get("type"))
    if kind == "reasoning":
        return []
    if kind.endswith("_output"):
        output = item.get("output")
        return [_message("tool", output if isinstance(output, str) else _wire_text(output)
                         if isinstance(output, list) else json.dumps(output, sort_keys=True))]
    if kind.endswith("_call"):
        args = _arguments(item.get("arguments")) if "arguments" in item else item.get("input", item.get("action"))
        return [_message("ai", "", [{"name": item.get("name") or kind, "args": args}])]
    return [_message(kind, "")]


#: The pieces a streamed answer is sent in, by the key that carries each piece's text.
_PIECES = {"text_delta": "text", "input_json_delta": "partial_json", "thinking_delta": "thinking"}
#: A Responses stream's pieces: events of these types, each with its text in `delta`.
_RESPONSES_PIECES = ("response.output_text.delta", "response.function_call_arguments.delta",
                     "response.reasoning_summary_text.delta", "response.reasoning_text.delta")


def whole_stream(body: str) -> str:
    """A streamed answer (server-sent events) with the pieces of each of its parts joined into one: an Anthropic
    content block's deltas, an OpenAI choice's content and each tool call's arguments. What the client builds
    from it is the same; a path that was cut between two pieces is whole again, so it can be read as this
    item's. A Responses stream's deltas of one part are joined alike. A body that is not a stream comes back as
    it was."""
    if "data:" not in body:
        return body
    events: list[tuple[str, Any]] = []
    joined: dict[tuple[Any, ...], dict[str, Any]] = {}
    for block in body.replace("\r\n", "\n").split("\n\n"):
        name, data = "", None
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data = line[5:].strip()
        if data is None:
            continue
        try:
            value = json.loads(data)
        except ValueError:
            events.append((name, data))  # `[DONE]`, and anything else that is not JSON, as it came
            continue
        if _joined(value, joined):
            continue
        events.append((name, value))
    return "".join((f"event: {name}\n" if name else "")
                   + f"data: {value if isinstance(value, str) else json.dumps(value)}\n\n" for name, value in events)


def _joined(value: Any, joined: dict[tuple[Any, ...], dict[str, Any]]) -> bool:
    """Whether the event `value` was a piece joined to an earlier one of its part (else it starts a part)."""
    if not isinstance(value, dict):
        return False
    part: tuple[Any, ...]
    if value.get("type") in _RESPONSES_PIECES and isinstance(value.get("delta"), str):
        part = (value["type"], value.get("item_id"), value.get("output_index"), value.get("content_index"))
        if part in joined:
            joined[part]["delta"] += value["delta"]
            return True
        joined[part] = value
        return False
    delta = value.get("delta")
    if value.get("type") == "content_block_delta" and isinstance(delta, dict) and delta.get("type") in _PIECES:
        key, part = _PIECES[delta["type"]], ("block", value.get("index"), delta["type"])
        if part in joined:
            joined[part][key] = str(joined[part].get(key, "")) + str(delta.get(key, ""))
            return True
        joined[part] = delta
        return False
    choices = value.get("choices")
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        return False
    choice = choices[0]
    delta = choice.get("delta")
    if not isinstance(delta, dict) or choice.get("finish_reason") or set(delta) - {"content", "tool_calls", "role"}:
        return False
    calls = delta.get("tool_calls") or []
    if isinstance(delta.get("content"), str) and not calls and "role" not in delta:
        part = ("content", choice.get("index"))
        if part in joined:
            joined[part]["content"] += delta["content"]
            return True
        joined[part] = delta
        return False
    if len(calls) == 1 and isinstance(calls[0], dict) and not delta.get("content"):
        call, function = calls[0], calls[0].get("function") or {}
        part = ("call", choice.get("index"), call.get("index"))
        if part in joined and set(call) <= {"index", "function"} and set(function) == {"arguments"}:
            earlier = joined[part].setdefault("function", {})
            earlier["arguments"] = str(earlier.get("arguments") or "") + str(function["arguments"])
            return True
        joined.setdefault(part, call)
    return False


def _dashed(path: str) -> str:
    """A folder's path as the Claude CLI names its project folder after it (every other character a dash)."""
    return re.sub(r"[^A-Za-z0-9]", "-", path)


class WireReplay:
    """An item's recorded exchanges served again on the wire its host's client speaks: each model call is held to
    the recorded request (`divergence`, with `client_words`) and answered with the recorded status and bytes, the
    recorded item's folder in them read as `root`, this item's. A model list is answered with the recorded model
    and a token count with an estimate; nothing is asked of any model.

    The first request it cannot match, or one past the recording's end, is answered with an error (400, which no
    client retries) and kept in `diverged`: the session ends the item as an ERROR in those words, whatever the
    client made of the error. Every later request gets the same."""

    def __init__(self, exchanges: Sequence[Exchange], root: Path) -> None:
        self.exchanges = list(exchanges)
        self.wire: Wire = self.exchanges[0].wire if self.exchanges else "openai"
        recorded = self.exchanges[0].model if self.exchanges else ""
        self.model = recorded.partition(":")[2] or recorded
        self.root = str(root)
        self.recorded_root = self.exchanges[0].root if self.exchanges else ""
        self.position = 0
        self.diverged: str | None = None
        self._lock = threading.Lock()

    def _as_recorded(self, text: str) -> str:
        """This item's folder in `text`, written as the recorded item's (a path, and the CLI's dashed form)."""
        if not self.recorded_root or self.recorded_root == self.root:
            return text
        return text.replace(self.root, self.recorded_root).replace(_dashed(self.root), _dashed(self.recorded_root))

    def _as_ours(self, text: str) -> str:
        if not self.recorded_root or self.recorded_root == self.root:
            return text
        return text.replace(self.recorded_root, self.root).replace(_dashed(self.recorded_root), _dashed(self.root))

    def answer(self, method: str, path: str, body: bytes | None) -> tuple[int, str, bytes]:
        """(status, content type, bytes) for one request the client sent."""
        route = path.split("?")[0].rstrip("/")
        if method == "GET" and route.endswith("/models"):
            entry = {"id": self.model, "object": "model", "type": "model", "created": 0, "owned_by": "replay",
                     "display_name": f"replay of {self.model}"}
            return 200, "application/json", json.dumps({"object": "list", "data": [entry]}).encode()
        if route.endswith("/count_tokens"):  # an estimate, as the rehearsal model gives: no model is asked
            return 200, "application/json", json.dumps({"input_tokens": len(body or b"") // 4}).encode()
        if method != "POST" or route not in MODEL_ROUTES:
            return self._error(404, f"a replay answers no {method} {route[:100]}")
        with self._lock:
            if self.diverged is None:
                self.diverged, answer = self._next(body)
            if self.diverged is not None:
                return self._error(400, f"ReplayDiverged: {self.diverged}")
        assert answer is not None
        kind = str(answer.get("content_type") or "application/json")
        return answer["status"], kind if _CONTENT_TYPE.fullmatch(kind) else "application/octet-stream", \
            self._as_ours(whole_stream(str(answer.get("body", "")))).encode()

    def _next(self, body: bytes | None) -> tuple[str | None, dict[str, Any] | None]:
        call = self.position + 1
        if self.position >= len(self.exchanges):
            return (f"call {call}: the agent asked the model again, and the recording ends after "
                    f"{len(self.exchanges)} call(s)"), None
        exchange = self.exchanges[self.position]
        self.position += 1
        messages, _ = request_messages(self.wire, self._as_recorded((body or b"").decode("utf-8", "replace")))
        found = divergence(wire_messages(self.wire, exchange.messages), wire_messages(self.wire, messages),
                           client_words=True)
        if found:
            return f"call {call} (turn {exchange.turn}) diverges from the recording: {found}", None
        status = (exchange.answer or {}).get("status")
        if not isinstance(status, int) or not 100 <= status <= 599:  # a cassette is read as untrusted as any file
            return f"call {call} (turn {exchange.turn}): the recording kept no answer to serve", None
        return None, exchange.answer

    def _error(self, status: int, message: str) -> tuple[int, str, bytes]:
        if self.wire == "anthropic":
            body = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
        else:
            body = {"error": {"message": message, "type": "invalid_request_error", "code": None}}
        return status, "application/json", json.dumps(body).encode()


# -- two recordings of one item, side by side (`palette-bench diff`) -----------------------------------------------

def answer_words(exchange: Exchange) -> str | None:
    """What the model answered at one exchange, as words and calls — whatever the serialisation — with the
    recorded item's folder written `<item>`; None for a call that failed (a retry is not an answer)."""
    answer = exchange.answer
    if answer is None or exchange.error:
        return None
    if exchange.wire == "langchain":
        words, calls = _content(answer), _calls(answer)
    else:
        words, calls = wire_answer(exchange.wire, whole_stream(str(answer.get("body", ""))))
    said = words.strip() + "".join(f"\n→ {name} {args}" for name, args in calls)
    return said.replace(exchange.root, "<item>") if exchange.root else said


def wire_answer(wire: Wire, body: str) -> tuple[str, list[tuple[str, str]]]:
    """The words and calls of a wire's answer, whole (JSON) or streamed (server-sent events, each piece in turn);
    what is not an answer (an error, not JSON) has none."""
    events: list[Any] = []
    for line in body.splitlines():
        if line.startswith("data:") and line[5:].strip() != "[DONE]":
            with contextlib.suppress(ValueError):  # a stream's comment, a truncated body: not read
                events.append(json.loads(line[5:]))
    if not events:
        with contextlib.suppress(ValueError):
            events = [json.loads(body)]
    words: list[str] = []
    calls: list[tuple[str, str]] = []
    if wire == "responses":
        return _responses_answer(events)
    for event in events:
        if not isinstance(event, dict):
            continue
        if wire == "anthropic":
            for block in _dicts(event.get("content")):  # a whole message
                if block.get("type") == "text":
                    words.append(str(block.get("text", "")))
                elif block.get("type") == "tool_use":
                    calls.append((str(block.get("name")), json.dumps(block.get("input"), sort_keys=True)))
            opened, delta = _dict(event.get("content_block")), _dict(event.get("delta"))
            if opened.get("type") == "tool_use":
                calls.append((str(opened.get("name")), ""))
            if delta.get("type") == "text_delta":
                words.append(str(delta.get("text", "")))
            elif delta.get("type") == "input_json_delta" and calls:
                calls[-1] = (calls[-1][0], calls[-1][1] + str(delta.get("partial_json", "")))
            continue
        for choice in _dicts(event.get("choices")):
            message = choice.get("message") or choice.get("delta")
            if not isinstance(message, dict):
                continue
            words.append(str(message.get("content") or ""))
            for call in _dicts(message.get("tool_calls")):
                function = _dict(call.get("function"))
                if function.get("name"):
                    calls.append((str(function["name"]), ""))
                if calls:
                    calls[-1] = (calls[-1][0], calls[-1][1] + str(function.get("arguments") or ""))
    return "".join(words), calls


def _responses_answer(events: list[Any]) -> tuple[str, list[tuple[str, str]]]:
    """A Responses answer's words and calls, from each output item as it was done (a stream) or the whole
    response's output (JSON); the deltas before them say the same again."""
    items: list[dict[str, Any]] = []
    for event in map(_dict, events):
        if event.get("type") == "response.output_item.done":
            items.append(_dict(event.get("item")))
        elif event.get("object") == "response":
            items.extend(_dicts(event.get("output")))
    words = [_wire_text(item.get("content")) for item in items if item.get("type") == "message"]
    calls = [(str(item.get("name") or item.get("type")), str(item.get("arguments", item.get("input", ""))))
             for item in items if str(item.get("type")).endswith("_call")]
    return "".join(words), calls


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def first_difference(before: Sequence[Exchange], after: Sequence[Exchange]) -> str | None:
    """Where two recordings of one item part: the first answer of the model that differs, in words — its turn and
    call in each, what each answered — or one ending before the other. None: the same answers throughout."""
    answered = [[(e, w) for e in recording if (w := answer_words(e)) is not None] for recording in (before, after)]
    for number, ((was, said), (now, says)) in enumerate(zip(*answered, strict=False), 1):
        if said != says:
            return (f"answer {number} differs (turn {was.turn}, call {was.index} | turn {now.turn}, call "
                    f"{now.index}): {_clip(said)!r} | {_clip(says)!r}")
    if len(answered[0]) != len(answered[1]):
        return (f"the same first {min(map(len, answered))} answer(s); then one recording ends "
                f"({len(answered[0])} answer(s) | {len(answered[1])})")
    return None
