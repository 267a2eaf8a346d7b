"""xdist (`-n`): a session's palette items handed to the workers one at a time, in collection order.

The items come longest first (run/schedule.py). xdist's `load` scheduling sends each worker a batch of
consecutive items — the first worker's batch would hold the longest few, run one after another — and tops it up to
several while others wait. Here the first items go round the workers one each, and a worker gets the next item only
as it finishes one, so it holds the item it runs and the one after it (an xdist worker starts an item only once it
knows the next) and never a batch another worker could have taken. A session with no palette item keeps xdist's own
scheduling, which keeps a module's tests together on one worker.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScheduling  # type: ignore[import-untyped]  # xdist ships no types

#: Items a worker holds: the one it runs and the next.
HELD = 2


class LongestFirst(LoadScheduling):  # type: ignore[misc]
    """`--dist load` for palette items (longest first): one at a time, in collection order, to the first free worker."""

    def __init__(self, config: pytest.Config, log: Any, ours: Callable[[str], bool]) -> None:
        super().__init__(config, log)
        self.ours = ours
        self.in_turn: bool | None = None
        self.collection: list[str] | None = None  # the base's, typed (xdist ships no types)

    def schedule(self) -> None:
        if self.in_turn is None:
            self.in_turn = any(self.ours(nodeid) for nodeid in next(iter(self.node2collection.values()), []))
        if not self.in_turn:
            super().schedule()
            return
        if self.collection is None:
            if not self._check_nodes_have_same_collection():
                self.log("**Different tests collected, aborting run**")
                return
            collection: list[str] = next(iter(self.node2collection.values()))
            self.collection = collection
            self.pending[:] = range(len(collection))
        self._fill()

    def check_schedule(self, node: Any, duration: float = 0) -> None:
        if not self.in_turn:
            super().check_schedule(node, duration)
            return
        self._fill()

    def _fill(self) -> None:
        """Round the workers, one item each, until each holds HELD; with none left, each is told to end."""
        while self.pending:
            hungry = [node for node in self.nodes
                      if not node.shutting_down and len(self.node2pending[node]) < HELD]
            if not hungry:
                return
            for node in hungry:
                self._send_tests(node, 1)
        for node in self.nodes:
            if not node.shutting_down:
                node.shutdown()


def is_palette_item(nodeid: str, root: Path, hosts: Sequence[str]) -> bool:
    """Whether an xdist node id is one of this plugin's items: `case[host]` (or `[host-k]`) in a case file, or a
    task family's folder (the controller collects nothing, so it knows them by their ids)."""
    where, _, name = nodeid.partition("::")
    if not name.endswith("]") or "[" not in name:
        return False
    host = name[name.rindex("[") + 1:-1]
    if host not in hosts and host.rpartition("-")[0] not in hosts:
        return False
    path = root / where
    return path.suffix in (".yaml", ".yml") or path.is_dir()
