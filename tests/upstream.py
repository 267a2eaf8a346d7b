"""A model endpoint on loopback that logs every request reaching it: what stands behind `--palette-base-url` in the
forwarder's tests. Each request is kept (method, path as sent, its credential headers, its body) and answered by
the server `behind` it — the rehearsal server — or, with none, `200 {}`. The log is what the upstream saw: the test
asserts it holds the client's own calls and nothing else.

`another_user_tries` is the other side: another local user of the machine trying a forwarder's socket and ports.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import urlsplit

from unprivileged import Unprivileged


@dataclass(frozen=True)
class Seen:
    """One request as it reached the upstream."""

    method: str
    path: str
    authorization: str  #: its `Authorization` header, or its `x-api-key`, or ""
    body: bytes


class Loopback:
    """A quiet HTTP server on 127.0.0.1 serving `handler` in threads of its own, one request a connection, until it
    is closed: `with` it, or `close()`."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


class QuietHandler(BaseHTTPRequestHandler):
    """Logs nothing; `reply` sends a whole answer."""

    protocol_version = "HTTP/1.0"  # one request a connection: nothing is held between calls

    def reply(self, status: int, kind: str, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class LoggingUpstream(Loopback):
    """Open from `with LoggingUpstream(behind) as upstream:` to its end; `upstream.seen` holds each request, in the
    order they came. `first`, when given, runs once, as the first request arrives, before it is answered."""

    def __init__(self, behind: str | None = None, first: Callable[[], None] | None = None) -> None:
        self.seen: list[Seen] = []
        self._first = first
        self._lock = threading.Lock()
        log = self

        class Handler(QuietHandler):
            def __getattr__(self, name: str) -> Any:
                if name.startswith("do_"):  # every method is logged, not only those http.server knows
                    return lambda: log._answer(self, behind)
                raise AttributeError(name)

        super().__init__(Handler)

    def _answer(self, request: QuietHandler, behind: str | None) -> None:
        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length) if length else b""
        credential = request.headers.get("Authorization") or request.headers.get("x-api-key") or ""
        with self._lock:
            self.seen.append(Seen(request.command, request.path, credential, body))
            first, self._first = self._first, None
        if first is not None:
            first()
        status, kind, data = 200, "application/json", b"{}"
        if behind is not None:
            target = urlsplit(behind)
            connection = http.client.HTTPConnection(target.hostname or "", target.port, timeout=300)
            try:
                headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
                connection.request(request.command, request.path, body=body or None, headers=headers)
                answer = connection.getresponse()
                status, kind, data = answer.status, answer.getheader("Content-Type") or kind, answer.read()
            finally:
                connection.close()
        request.reply(status, kind, data)


#: What another local user runs against a forwarder (argv: a JSON list of socket paths, one of ports): its own
#: Python, no package of ours (it may not read this venv). One line a try: `what: outcome`.
_ANOTHER_USER = """import http.client, json, os, socket, sys
def tried(what, attempt):
    try:
        print(f"{what}: {attempt()}")
    except OSError as error:
        print(f"{what}: {type(error).__name__}")
def post(port, headers):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.request("POST", "/chat/completions", body=b"{}", headers=headers)
    return connection.getresponse().status
for path in json.loads(sys.argv[1]):
    tried(f"list {os.path.dirname(path)}", lambda: os.listdir(os.path.dirname(path)))
    tried(f"connect to {path}", lambda: socket.socket(socket.AF_UNIX).connect(path))
for port in json.loads(sys.argv[2]):
    tried(f"POST to port {port}", lambda: post(port, {}))
    guessed = {"Authorization": "Bearer palette-forwarder-x"}
    tried(f"POST to port {port} with a guessed token", lambda: post(port, guessed))
"""


def another_user_tries(user: Unprivileged, sockets: list[str], ports: list[int]) -> dict[str, str]:
    """What `user` got trying each socket (listing its folder, connecting) and each port (a model call without the
    forwarder's token, and with a guessed one)."""
    done = user.run([user.python() or "python3", "-c", _ANOTHER_USER, json.dumps(sockets), json.dumps(ports)],
                    cwd=Path("/"))
    if done.returncode:
        raise RuntimeError(f"the other user's attempt failed ({done.returncode}): {done.stderr[-2000:]}")
    return dict(line.split(": ", 1) for line in done.stdout.splitlines())


class FailingUpstream(Loopback):
    """A model endpoint that answers every POST with a 500 whose body is `answer(request body)` — a gateway's 40 KB
    error quoting the conversation back. Open with `with FailingUpstream(answer) as upstream:`; `upstream.url` is
    its root (an Anthropic client's base URL), `upstream.base_url` its `/v1` (an OpenAI client's)."""

    def __init__(self, answer: Callable[[bytes], bytes]) -> None:
        class Handler(QuietHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.reply(500, "application/json", answer(body))

        super().__init__(Handler)

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"
