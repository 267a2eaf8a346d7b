"""An item's cassette: every exchange with the model, in order (`--palette-record`).

One JSON line per model call: what the client sent (its messages and the tools it offered), what the model answered,
which model and provider, and when. A recorded run can then be read again without the model: what the agent was
told and what it decided at each step. The react host records in-process (its chat model's callbacks); the cuga,
claude and codex hosts record on the wire, at the endpoint the model layer serves their clients (`WireRecorder`,
layer/serving.py): each request body and each answer's bytes as the client got them.

Keys never reach a cassette: the host's client holds them outside the messages, and every value of a credential
variable the host was given is replaced before a line is written.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from pathlib import Path, PurePath
from typing import Any, Literal

import msgspec

from . import untrusted
from .command_log import append_line

#: The file's name in the item's folder, beside the command log and the trace.
CASSETTE_NAME = "cassette.jsonl"
#: The most of a cassette that is read back: a long document's conversation, twenty calls of it, fits.
READ_LIMIT = 256 * 1024 * 1024
REDACTED = "[redacted]"
#: How the exchange's messages and answer are written: LangChain's dicts (react), or a wire's own JSON — OpenAI
#: chat (cuga), Anthropic messages (claude), OpenAI Responses (codex).
Wire = Literal["langchain", "openai", "anthropic", "responses"]


class Exchange(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """One call of the model: the request the client made and the answer it got."""

    #: 1, 2, … in the order the calls were made, across the item's turns.
    index: int
    #: The user turn (1, 2, …) it belongs to.
    turn: int
    model: str
    provider: str
    started_at: float
    ended_at: float
    #: The messages sent, in the host client's own serialisation (react: LangChain's `messages_to_dict`; on a
    #: wire, its messages as sent, an Anthropic request's `system` first as a message of role "system"; a Responses
    #: request's input items, its `instructions` first so).
    messages: list[dict[str, Any]]
    #: The tools offered with it, as the client declared them.
    tools: list[dict[str, Any]]
    #: The model's answer, in the same serialisation as `messages` (None when the call failed); on a wire, what
    #: came back whole: `{"status", "content_type", "body"}` (a stream's events as they came).
    answer: dict[str, Any] | None
    #: What went wrong, when the call failed (on a wire: its status, and the answer is kept to be served again).
    error: str = ""
    wire: Wire = "langchain"
    #: The item's folder when it was recorded: a replay reads it as its own item's folder (each run has its own).
    root: str = ""


class Cassette:
    """Appends an item's exchanges with `model` (of `provider`) to `path`, each line whole, with every secret given
    replaced."""

    def __init__(self, path: Path, model: str, provider: str, secrets: Iterable[str] = ()) -> None:
        self.path = path
        self.model = model
        self.provider = provider
        self.secrets = sorted({secret for secret in secrets if len(secret) >= 4}, key=len, reverse=True)
        self.calls = 0
        self._lock = threading.Lock()  # a wire's calls come on the endpoint's threads
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()

    def add(self, exchange: Exchange) -> None:
        line = msgspec.json.encode(exchange).decode()
        for secret in self.secrets:
            line = line.replace(msgspec.json.encode(secret).decode()[1:-1], REDACTED)
        append_line(self.path, line.encode())

    def next_index(self) -> int:
        with self._lock:
            self.calls += 1
            return self.calls


#: The requests of a wire that are model calls (a query string aside): token counts and model lists are not.
MODEL_ROUTES = ("/v1/messages", "/chat/completions", "/v1/chat/completions", "/responses", "/v1/responses")


class WireRecorder:
    """Writes each model call that passes the harness's endpoint to the item's cassette, as an Exchange of `wire`:
    the request's messages and tools, and the answer's status, type and bytes. `turn` says which user turn is
    on; `root` is the item's folder. Headers are never kept: the key is in them, and nowhere else."""

    def __init__(self, cassette: Cassette, wire: Wire, root: Path, turn: Callable[[], int]) -> None:
        self.cassette, self.wire, self.root, self.turn = cassette, wire, str(root), turn

    def begin(self, path: str) -> int | None:
        """The place of a call the client just made, taken as it comes (None for what is not a model call): the
        answers end in another order when a client sends its next call on the last event of an answer, before that
        answer's stream has closed."""
        return self.cassette.next_index() if path.split("?")[0] in MODEL_ROUTES else None

    def __call__(self, path: str, request: bytes | None, status: int, content_type: str, answer: bytes,
                 started: float, ended: float, index: int | None) -> None:
        if index is None:  # not a model call: `begin` gave it no place
            return
        messages, tools = request_messages(self.wire, request)
        self.cassette.add(Exchange(
            index=index, turn=self.turn(), model=self.cassette.model,
            provider=self.cassette.provider, started_at=round(started, 3), ended_at=round(ended, 3),
            messages=messages, tools=tools,
            answer={"status": status, "content_type": content_type, "body": answer.decode("utf-8", "replace")},
            error="" if status < 400 else f"HTTP {status}", wire=self.wire, root=self.root))


def request_messages(wire: Wire, request: bytes | str | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A wire request's messages and tools as a cassette keeps them: an Anthropic request's `system` (a Responses
    request's `instructions`) first, as a message of role "system"; a Responses request's input items as they
    are. None of either when the body is not a JSON object."""
    try:
        body = json.loads(request or b"{}")
    except ValueError:
        body = {}
    body = body if isinstance(body, dict) else {}
    if wire == "responses":
        given = body.get("input") or []
        messages = [{"role": "user", "content": given}] if isinstance(given, str) else \
            [m for m in given if isinstance(m, dict)] if isinstance(given, list) else []
        system = body.get("instructions")
    else:
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        system = body.get("system") if wire == "anthropic" else None
    if system:
        messages.insert(0, {"role": "system", "content": system})
    return messages, [t for t in body.get("tools") or [] if isinstance(t, dict)]


def read_cassette(folder: Path) -> list[Exchange]:
    """The cassette in an item's `folder`, in call order: read as a regular file inside it, never through a link,
    at most READ_LIMIT bytes. [] when there is none; a line that does not read ends it (a host killed mid-write)."""
    try:
        text = untrusted.read_text(folder, PurePath(CASSETTE_NAME), READ_LIMIT)
    except FileNotFoundError:
        return []
    exchanges: list[Exchange] = []
    for line in text.splitlines():
        try:
            exchanges.append(msgspec.json.decode(line, type=Exchange))
        except msgspec.DecodeError:
            break
    # Written as each answer ended, numbered as each call began: call order is the numbers'.
    return sorted(exchanges, key=lambda exchange: exchange.index)
