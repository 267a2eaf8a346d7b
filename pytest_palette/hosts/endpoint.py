"""The rehearsal model on loopback HTTP, for hosts whose clients only speak to a model server.

One server per rehearsal policy in this process (so per xdist worker), started on first use, replaced when it
stops answering, and stopped when the session ends; never left running.
"""

from __future__ import annotations

import threading

from ..models import ModelSpec, rehearsal_policy
from ..rehearsal.injection import FaultSchedule
from ..rehearsal.latency import ModelLatency
from ..rehearsal.server import RehearsalServer
from .base import HostSettings


class RehearsalEndpoint:
    def __init__(self) -> None:
        self._servers: dict[str, RehearsalServer] = {}  # by model id
        self._lock = threading.Lock()

    def server(self, model: ModelSpec, settings: HostSettings | None = None) -> RehearsalServer:
        """The running server for a `rehearsal` or `rehearsal:<known-bad>` model: a new one when the last
        stopped answering, so one dead server does not fail every later item. A new server injects the
        settings' faults (`--palette-rehearsal-faults`) and waits their latency (`--palette-rehearsal-latency`);
        one session gives every item the same."""
        if model.provider != "rehearsal":
            raise ValueError(f"{model.text} is not served by the rehearsal endpoint")
        with self._lock:
            running = self._servers.get(model.model_id)
            if running is not None and not running.answers():
                running.stop()
                running = None
            if running is None:
                faults = settings.rehearsal_faults if settings else None
                latency = settings.rehearsal_latency if settings else None
                running = self._servers[model.model_id] = RehearsalServer(
                    rehearsal_policy(model), faults=FaultSchedule.parse(faults) if faults else None,
                    latency=ModelLatency.parse(latency) if latency else None).start()
            return running

    def fault(self, model: ModelSpec) -> str | None:
        """Why a turn of `model` may have failed here: its server stopped answering (or None)."""
        with self._lock:
            running = self._servers.get(model.model_id) if model.provider == "rehearsal" else None
        if running is None or running.answers():
            return None
        return f"the model endpoint at {running.base_url.removeprefix('http://')} stopped answering"

    def close(self) -> None:
        with self._lock:
            for server in self._servers.values():
                server.stop()
            self._servers.clear()
