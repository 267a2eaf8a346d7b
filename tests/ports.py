"""A loopback port that is no model's and no service's, listening: it records whoever connects. A hostile agent is
told its number (PALETTE_PROBE_PORT) and tries to reach it; the sandbox must keep every such knock from it."""

from __future__ import annotations

import socket
import threading
from types import TracebackType


def free_port() -> int:
    """A loopback port nothing listens on as this returns (a server started next binds it a moment later)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class ProbePort:
    """Open from `with ProbePort() as probe:` to its end; `probe.knocked` holds each peer that connected (a list
    other than [] is a connection the sandbox let through)."""

    def __init__(self) -> None:
        self.knocked: list[str] = []
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen()
        self.port: int = self._listener.getsockname()[1]
        # A daemon thread: it ends with accept() failing once the socket is closed, or with the process.
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, peer = self._listener.accept()
            except OSError:
                return
            self.knocked.append(str(peer))
            connection.close()

    def close(self) -> None:
        self._listener.close()

    def __enter__(self) -> ProbePort:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
