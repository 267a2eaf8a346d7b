"""The code record: each block of code a host's model gave its client to run, beside the commands it ran.

A model that acts in code (CUGA's codeact) answers with Python that its client runs; the tool calls in it are only
part of what it does, and the commands they ask for are in commands.jsonl. The host reads each answer where the
harness serves the model (its own endpoint, never the client, whose every word may be the model's) and keeps its
code here, one JSON line a block, so an item's folder and page show what ran as well as what it asked for.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from .command_log import append_line, records

CODE_NAME = "code.jsonl"


class CodeBlock(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """One block of code the model gave its client, as the harness read it off the model's answer."""

    #: The conversation's turn (1 = the opening message) the answer came in.
    turn: int
    #: When the answer reached the harness (epoch seconds).
    at: float
    code: str


class CodeLog:
    """An item's record of code blocks, appended as the model's answers arrive. The file exists from the start,
    empty until the model writes code."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()

    def add(self, turn: int, at: float, code: str) -> None:
        append_line(self.path, msgspec.json.encode(CodeBlock(turn, round(at, 3), code)))


def read(path: Path) -> list[CodeBlock]:
    """The blocks recorded at `path`, in the order they came; [] when there is no record. Read as the commands'
    record is (`command_log.records`)."""
    return records(path, CodeBlock)
