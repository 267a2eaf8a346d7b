"""The model on loopback HTTP, for hosts whose clients only speak to a model server.

The rehearsal model: one server per rehearsal policy in this process (so per xdist worker), started on first
use, replaced when it stops answering, and stopped when the session ends; never left running. A real model:
`KeyForwarder`, which holds the key so that a client in the agent's sandbox never does.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socketserver
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..arena.cassette import WireRecorder
from ..arena.replay import WireReplay
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


# -- the model's key stays with the harness ----------------------------------------------------------------------

#: What a client in the sandbox is given instead of a key: the forwarder adds the real one.
PLACEHOLDER_KEY = "sk-ant-placeholder-the-harness-adds-the-key"
#: Paths the forwarder passes on: the Messages API (and token counts, the model list); nothing else of a host.
FORWARDED = ("/v1/messages", "/v1/models")
#: The same for the OpenAI wire (the cuga host): a client's base URL is the forwarder's root, and the upstream's own
#: path (`/v1`) goes before these.
OPENAI_FORWARDED = ("/chat/completions", "/models")
#: What the forwarder keeps of one answer for its observer: a turn's answer is far smaller.
OBSERVED_BODY = 16 * 1024 * 1024
#: A request body larger than this is refused (a conversation's whole history is a few MB at most).
MAX_BODY = 64 * 1024 * 1024
#: Headers the forwarder sets itself, never passes on: the credentials, and those of one connection.
_OWN_HEADERS = frozenset({"host", "x-api-key", "authorization", "content-length", "connection", "keep-alive",
                          "transfer-encoding", "proxy-authorization", "proxy-connection", "te", "upgrade"})
UPSTREAM_TIMEOUT = 600.0
#: A client with no network of its own reaches the forwarder's socket on this loopback port of its namespace, through
#: the relay (hosts/relay.py): its own namespace's, so any port will do.
RELAY_PORT = 8787
RELAY = Path(__file__).with_name("relay.py")


class KeyForwarder:
    """A Messages API endpoint on 127.0.0.1 that holds the model's key: it passes each request to `upstream`
    with the key added, and streams the answer back. The client (the Claude CLI, in the item's sandbox) gets
    only `PLACEHOLDER_KEY`, so no process of the agent's — nor a settings file, a hook, /proc — holds a key.
    Loopback only; only `paths` (FORWARDED, or OPENAI_FORWARDED); bounded bodies.

    `observe`, when given, hears of each answer once it has been passed on: its status and its body (the first
    OBSERVED_BODY bytes) — the harness's own record of what the model said, which no process of the agent's writes.
    `record` (`--palette-record`) writes each model call to the item's cassette. With `replay` (`--model
    replay:RUN`) there is no upstream: the item's recording answers, and no request leaves this process."""

    def __init__(self, upstream: str | None, credentials: Mapping[str, str], paths: tuple[str, ...] = FORWARDED,
                 observe: Callable[[int, bytes], None] | None = None, record: WireRecorder | None = None,
                 replay: WireReplay | None = None) -> None:
        parts = urlsplit((upstream or "http://replay.invalid").rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"the model's base URL {upstream!r} is not an http(s) URL")
        if upstream is None and replay is None:
            raise ValueError("a forwarder needs the model's base URL")
        self.upstream = parts
        self.credentials = dict(credentials)
        self.paths = paths
        self.observe = observe
        self.record = record
        self.replay = replay
        self._server: ThreadingHTTPServer | None = None
        self._unix: socketserver.ThreadingUnixStreamServer | None = None
        self._folder: Path | None = None

    def start(self) -> KeyForwarder:
        """Listen on 127.0.0.1 and on a Unix socket (`socket`), for a client with no network of its own."""
        forwarder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                forwarder.forward(self)

            def do_GET(self) -> None:
                forwarder.forward(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # a line per model call is noise in pytest's output

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        # A folder of its own, readable by any user id: a sandbox binds it (read-only: a socket still connects).
        self._folder = Path(tempfile.mkdtemp(prefix="palette-model-"))
        self._folder.chmod(0o755)
        # Gone at the latest when this process exits, even if no one stops the forwarder (a session cut short).
        weakref.finalize(self, _remove_socket_folder, self._folder)
        self._unix = socketserver.ThreadingUnixStreamServer(str(self._folder / "model.sock"), Handler)
        self._unix.daemon_threads = True
        self.socket.chmod(0o666)  # the item's user id connects
        for server in (self._server, self._unix):
            threading.Thread(target=server.serve_forever, name="palette-key-forwarder", daemon=True).start()
        return self

    @property
    def socket(self) -> Path:
        assert self._folder is not None, "start() first"
        return self._folder / "model.sock"

    @property
    def base_url(self) -> str:
        assert self._server is not None, "start() first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        for server in (self._server, self._unix):
            if server is not None:
                server.shutdown()
                server.server_close()
        self._server = self._unix = None
        if self._folder is not None:  # made by start(): its socket and nothing else
            _remove_socket_folder(self._folder)
            self._folder = None

    def forward(self, request: BaseHTTPRequestHandler) -> None:
        path = request.path
        if not path.startswith(self.paths):
            _refuse(request, 404, f"not forwarded: {path.split('?')[0][:100]}")
            return
        try:
            length = int(request.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY:
            _refuse(request, 413, "request body missing a length or too large")
            return
        body = request.rfile.read(length) if length else None
        if self.replay is not None:
            self._replayed(request, body)
            return
        started = time.time()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _OWN_HEADERS}
        headers.update(self.credentials)
        up = self.upstream
        connection_type = http.client.HTTPSConnection if up.scheme == "https" else http.client.HTTPConnection
        connection = connection_type(up.hostname or "", up.port, timeout=UPSTREAM_TIMEOUT)
        try:
            connection.request(request.command, up.path + path, body=body, headers=headers)
            answer = connection.getresponse()
            request.send_response(answer.status, answer.reason)
            for name, value in answer.getheaders():
                if name.lower() not in _OWN_HEADERS:
                    request.send_header(name, value)
            request.send_header("Transfer-Encoding", "chunked")  # streamed as it comes (server-sent events)
            request.end_headers()
            kept = bytearray()
            keep = self.observe is not None or self.record is not None
            while chunk := answer.read1(65536):
                request.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                request.wfile.flush()
                if keep and len(kept) < OBSERVED_BODY:
                    kept += chunk[:OBSERVED_BODY - len(kept)]
            request.wfile.write(b"0\r\n\r\n")
            if self.record is not None:
                self.record(path, body, answer.status, answer.getheader("Content-Type") or "", bytes(kept), started,
                            time.time())
            if self.observe is not None:
                self.observe(answer.status, bytes(kept))
        except (OSError, http.client.HTTPException) as error:
            with contextlib.suppress(OSError):
                _refuse(request, 502, f"the model's endpoint did not answer: {type(error).__name__}")
        finally:
            connection.close()


    def _replayed(self, request: BaseHTTPRequestHandler, body: bytes | None) -> None:
        """The recording's answer to `request`, as the upstream would have sent it (whole, with its length)."""
        assert self.replay is not None
        status, content_type, data = self.replay.answer(request.command, request.path, body)
        request.send_response(status)
        request.send_header("Content-Type", content_type)
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        request.wfile.write(data)
        if self.observe is not None:
            self.observe(status, data[:OBSERVED_BODY])


def _remove_socket_folder(folder: Path) -> None:
    """The folder start() made, with its socket: nothing else is in it, and nothing else is removed."""
    with contextlib.suppress(FileNotFoundError):
        folder.joinpath("model.sock").unlink()
    with contextlib.suppress(FileNotFoundError):
        folder.rmdir()


def _refuse(request: BaseHTTPRequestHandler, status: int, message: str) -> None:
    data = json.dumps({"type": "error", "error": {"type": "api_error", "message": message}}).encode()
    request.close_connection = True  # a body may be left unread: this connection cannot carry another request
    request.send_response(status)
    request.send_header("Content-Type", "application/json")
    request.send_header("Content-Length", str(len(data)))
    request.end_headers()
    request.wfile.write(data)


def credentials(env: Mapping[str, str]) -> dict[str, str]:
    """The headers that carry the caller's Anthropic credentials: its key or a gateway's bearer token, and the
    gateway's own headers (ANTHROPIC_CUSTOM_HEADERS, `Name: value` lines), which may be credentials too."""
    held: dict[str, str] = {}
    for line in env.get("ANTHROPIC_CUSTOM_HEADERS", "").splitlines():
        name, colon, value = line.partition(":")
        if colon and name.strip():
            held[name.strip()] = value.strip()
    if env.get("ANTHROPIC_API_KEY"):
        held["x-api-key"] = env["ANTHROPIC_API_KEY"]
    elif env.get("ANTHROPIC_AUTH_TOKEN"):
        held["Authorization"] = f"Bearer {env['ANTHROPIC_AUTH_TOKEN']}"
    return held
