"""An item's cassette: every exchange with the model, in order (`--palette-record`).

One JSON line per model call: what the client sent (its messages and the tools it offered), what the model answered,
which model and provider, and when. A recorded run can then be read again without the model: what the agent was
told and what it decided at each step. The react host records in-process (its chat model's callbacks).

Keys never reach a cassette: the host's client holds them outside the messages, and every value of a credential
variable the host was given is replaced before a line is written.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path, PurePath
from typing import Any

import msgspec

from . import untrusted
from .command_log import append_line

#: The file's name in the item's folder, beside the command log and the trace.
CASSETTE_NAME = "cassette.jsonl"
#: The most of a cassette that is read back: a long document's conversation, twenty calls of it, fits.
READ_LIMIT = 256 * 1024 * 1024
REDACTED = "[redacted]"


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
    #: The messages sent, in the host client's own serialisation (react: LangChain's `messages_to_dict`).
    messages: list[dict[str, Any]]
    #: The tools offered with it, as the client declared them (OpenAI's function schema).
    tools: list[dict[str, Any]]
    #: The model's answer, in the same serialisation as `messages`; None when the call failed.
    answer: dict[str, Any] | None
    #: What went wrong, when the call failed.
    error: str = ""


class Cassette:
    """Appends an item's exchanges with `model` (of `provider`) to `path`, each line whole, with every secret given
    replaced."""

    def __init__(self, path: Path, model: str, provider: str, secrets: Iterable[str] = ()) -> None:
        self.path = path
        self.model = model
        self.provider = provider
        self.secrets = sorted({secret for secret in secrets if len(secret) >= 4}, key=len, reverse=True)
        self.calls = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()

    def add(self, exchange: Exchange) -> None:
        line = msgspec.json.encode(exchange).decode()
        for secret in self.secrets:
            line = line.replace(msgspec.json.encode(secret).decode()[1:-1], REDACTED)
        append_line(self.path, line.encode())


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
    return exchanges
