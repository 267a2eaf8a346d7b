"""The rehearsal model on loopback HTTP, for hosts whose clients only speak to a model server.

One server per rehearsal policy in this process (so per xdist worker), started on first use and
stopped when the session ends; never left running.
"""

from __future__ import annotations

import threading

from ..models import ModelSpec, rehearsal_policy
from ..rehearsal.server import RehearsalServer


class RehearsalEndpoint:
    def __init__(self) -> None:
        self._servers: dict[str, RehearsalServer] = {}
        self._lock = threading.Lock()

    def server(self, model: ModelSpec) -> RehearsalServer:
        """The running server for a `rehearsal` or `rehearsal:<known-bad>` model."""
        if model.provider != "rehearsal":
            raise ValueError(f"{model.text} is not served by the rehearsal endpoint")
        with self._lock:
            if model.model_id not in self._servers:
                self._servers[model.model_id] = RehearsalServer(rehearsal_policy(model)).start()
            return self._servers[model.model_id]

    def close(self) -> None:
        with self._lock:
            for server in self._servers.values():
                server.stop()
            self._servers.clear()
