"""The model on loopback HTTP, for hosts whose clients only speak to a model server.

The rehearsal model: one server per rehearsal policy in this process (so per xdist worker), started on first
use, replaced when it stops answering, and stopped when the session ends; never left running. Between a client
and its model, whichever it is: `KeyForwarder`, one per conversation, which holds the key so that a client in the
agent's sandbox never does, and passes on only the calls that client makes.
"""

from __future__ import annotations

import contextlib
import hmac
import http.client
import json
import posixpath
import re
import secrets
import socketserver
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from ..arena.cassette import WireRecorder
from ..arena.replay import WireReplay
from ..models import ModelSpec, rehearsal_policy
from ..rehearsal.injection import FaultSchedule
from ..rehearsal.latency import ModelLatency
from ..rehearsal.limits import ModelLimits
from ..rehearsal.server import RehearsalServer

if TYPE_CHECKING:
    from ..hosts.base import HostSettings


class RehearsalEndpoint:
    def __init__(self) -> None:
        self._servers: dict[str, RehearsalServer] = {}  # by model id
        self._lock = threading.Lock()
        #: The last question asked of each model's server: when it was asked, and the server if it answered.
        self._probed: dict[str, tuple[float, RehearsalServer | None]] = {}
        self._probing = threading.Lock()

    def server(self, model: ModelSpec, settings: HostSettings | None = None) -> RehearsalServer:
        """The running server for a `rehearsal` or `rehearsal:<known-bad>` model: a new one when the last
        stopped answering, so one dead server does not fail every later item. A new server injects the
        settings' faults (`--palette-rehearsal-faults`) and waits their latency (`--palette-rehearsal-latency`);
        one session gives every item the same."""
        if model.provider != "rehearsal":
            raise ValueError(f"{model.text} is not served by the rehearsal endpoint")
        with self._lock:
            running = self._servers.get(model.model_id)
        if running is not None and self._answers(model.model_id, running):
            return running
        with self._lock:
            current = self._servers.get(model.model_id)
            if current is not None and current is not running:  # another conversation replaced it meanwhile
                return current
            if current is not None:
                current.stop()
            faults = settings.rehearsal_faults if settings else None
            latency = settings.rehearsal_latency if settings else None
            limits = settings.rehearsal_limits if settings else None
            started = self._servers[model.model_id] = RehearsalServer(
                rehearsal_policy(model), faults=FaultSchedule.parse(faults) if faults else None,
                latency=ModelLatency.parse(latency) if latency else None,
                limits=ModelLimits.parse(limits) if limits else None).start()
            return started

    def _answers(self, model_id: str, server: RehearsalServer) -> bool:
        """Whether `server` answers, by a question asked after this call began: one at a time, and shared by every
        caller that waited for it. A sweep's conversations all start at once, and each question is a round trip to
        the server in this process: asked one by one under the lock, 36 conversations waited up to 5 s for them."""
        asked = time.monotonic()
        with self._probing:
            when, answered = self._probed.get(model_id, (0.0, None))
            if answered is not server or when < asked:
                when = time.monotonic()
                answered = server if server.answers() else None
                self._probed[model_id] = (when, answered)
            return answered is server

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
        with self._probing:
            self._probed.clear()


# -- the model's key stays with the harness ----------------------------------------------------------------------

#: What a client is given instead of a key where no forwarder serves it (the claude host's discovery probe).
PLACEHOLDER_KEY = "sk-ant-placeholder-the-harness-adds-the-key"


@dataclass(frozen=True)
class Call:
    """One request a host's client makes of its model: a method, a path below the forwarder's root, and the query
    strings it sends there (None: no query at all)."""

    method: str
    path: str
    queries: tuple[str | None, ...] = (None,)


#: What the Claude Code CLI calls (2.1.332 in print mode, captured at its forwarder with a catalogue model and with
#: another, the rehearsal model and a gateway's): each model call is `POST /v1/messages?beta=true`. Nothing else —
#: not `/v1/messages/batches`, not the model list, not token counts: no call of the CLI's asked for them.
ANTHROPIC_ROUTES = (Call("POST", "/v1/messages", ("beta=true", None)),)
#: What CUGA's client (langchain-openai, the openai SDK; cuga 0.4.3) calls, captured the same way: `POST
#: /chat/completions` below its base URL, which is the forwarder's root; the upstream's own path (`/v1`) goes
#: before it. No model list: CUGA never asks for one.
OPENAI_ROUTES = (Call("POST", "/chat/completions"),)
#: What the Codex CLI (0.171) calls below its provider's base URL: `POST /responses`, the OpenAI Responses API.
RESPONSES_ROUTES = (Call("POST", "/responses"),)
#: What the forwarder keeps of one answer for its observer: a turn's answer is far smaller.
OBSERVED_BODY = 16 * 1024 * 1024
#: A request body larger than this is refused (a conversation's whole history is a few MB at most).
MAX_BODY = 64 * 1024 * 1024
#: Headers the forwarder sets itself, never passes on: the credentials, and those of one connection.
_OWN_HEADERS = frozenset({"host", "x-api-key", "authorization", "content-length", "connection", "keep-alive",
                          "transfer-encoding", "proxy-authorization", "proxy-connection", "te", "upgrade"})
UPSTREAM_TIMEOUT = 600.0
#: A client with no network of its own reaches the forwarder's socket on this loopback port of its namespace, through
#: the relay (layer/relay.py): its own namespace's, so any port will do.
RELAY_PORT = 8787
RELAY = Path(__file__).with_name("relay.py")
#: The forwarder's log keeps this many refusals; past them it counts (an agent's code may send a request a second).
LOGGED_REFUSALS = 1000
#: The name of the forwarder's log in an item's folder: the harness's own, which no process of the agent's writes.
FORWARDER_LOG = "forwarder.log"


def plain_path(path: str) -> str:
    """`path` as a server that decodes it and resolves its dot segments and repeated slashes would read it."""
    return posixpath.normpath("/" + unquote(path, errors="replace").lstrip("/"))


def refusal(method: str, target: str, routes: Iterable[Call]) -> str | None:
    """Why the request `method target` is none of `routes`, or None when it is one. The path is compared after
    decoding it and resolving its dot segments, and is forwarded only as plainly written: an encoded, dotted or
    doubled spelling of a route is refused too, so the upstream receives exactly the paths listed."""
    path, asked, query = target.partition("?")
    if not path.startswith("/") or "#" in target:
        return "not a path below the forwarder's root"
    plain = plain_path(path)
    if plain != path:
        return f"it resolves to {_shown(plain)}: a path is forwarded only as written plainly"
    same = [route for route in routes if route.path == plain]
    if not same:
        return f"{_shown(plain)} is not a path this host's client calls"
    if not any(route.method == method for route in same):
        return f"this host's client only sends {'/'.join(sorted({route.method for route in same}))} to {plain}"
    if not any(route.method == method and (query if asked else None) in route.queries for route in same):
        return f"{'the query ' + repr(_shown(query)) if asked else 'no query'} is not what its client sends to {plain}"
    return None


#: How much of a failed call's answer is read for its message.
ERROR_BODY = 64 * 1024
#: An error's message where the body holding it was cut short (not JSON any more).
_MESSAGE = re.compile(rb'"message"\s*:\s*"((?:[^"\\]|\\.){1,400})')


class ModelCalls:
    """What a forwarder saw of its client's calls of the model: the failures since the last answer, and the calls
    still waiting for one. A turn that failed is named from here first — the same words on every host, whatever
    its client made of the failure (`fault`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = 0
        #: Each call failed since the model last answered one, in words.
        self.failed: list[str] = []
        #: The calls under way: when each was sent.
        self.waiting: dict[int, float] = {}

    def sent(self) -> int:
        with self._lock:
            self._next += 1
            self.waiting[self._next] = time.monotonic()
            return self._next

    def answered(self, call: int, status: int, body: bytes) -> None:
        with self._lock:
            self.waiting.pop(call, None)
            if status < 400:
                self.failed.clear()
            else:
                said = error_message(body)
                self.failed.append(f"the model answered HTTP {status}" + (f": {said}" if said else ""))

    def dropped(self, call: int, error: BaseException) -> None:
        with self._lock:
            self.waiting.pop(call, None)
            self.failed.append(f"the model's connection ended with no answer ({type(error).__name__})")

    def ended(self, call: int) -> None:
        with self._lock:
            self.waiting.pop(call, None)

    def fault(self) -> str | None:
        """Why the model may be the cause of a failed turn, in the layer's words: the call it has not answered
        yet, or the calls it failed since it last answered one. None when it answered the last call."""
        with self._lock:
            if self.waiting:
                waited = time.monotonic() - min(self.waiting.values())
                return f"the model had not answered a call after {waited:.0f} s"
            if not self.failed:
                return None
            # How many calls failed is the client's retry policy, said apart: the words are the same on every host.
            count = len(self.failed)
            return self.failed[-1] + (f" ({count} failed calls in a row)" if count > 1 else "")


def error_message(body: bytes) -> str:
    """A failed call's message, as every provider's error body has it (`error.message`, or `message`), on one line
    and short; else ""."""
    try:
        said = json.loads(body[:ERROR_BODY])
    except ValueError:
        found = _MESSAGE.search(body[:ERROR_BODY])
        try:
            said = {"message": json.loads(b'"' + found.group(1) + b'"')} if found else {}
        except ValueError:  # cut inside an escape
            said = {"message": found.group(1).decode("utf-8", "replace")} if found else {}
    error = said.get("error") if isinstance(said, dict) else None
    message = error.get("message") if isinstance(error, dict) else said.get("message") if isinstance(said, dict) \
        else None
    return _shown(" ".join(str(message).split()), 100) if message else ""


def _shown(text: str, limit: int = 200) -> str:
    """`text` (the agent's words) cut short, on one line, every character that is not printable escaped."""
    cut = text[:limit] + ("…" if len(text) > limit else "")
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in cut)


class KeyForwarder:
    """The model's endpoint for a client that must never hold its key: it passes each request its client makes
    (`routes`: ANTHROPIC_ROUTES, OPENAI_ROUTES) to `upstream` with the key added, and streams the answer back. No
    process of the agent's — nor a settings file, a hook, /proc — holds a key.

    Only the client reaches it. It listens on a Unix socket (`socket`) in a folder of its own that only this process's
    user can open: a sandbox binds the socket alone into the client's view (`layer/relay.py` serves it on the client's
    own loopback). With `loopback`, for a client that keeps the network, it also listens on 127.0.0.1 — where any
    local user could connect. So every request must carry `token`, a secret of this forwarder's that the client
    holds in place of a key (`x-api-key` or `Authorization: Bearer`) and the agent's commands never see. Whatever
    is not one of `routes` with the token is refused — 401 without it, 403 for another method, path or query, 413
    for a body over MAX_BODY — and never forwarded; each refusal is a line of `log` (the item's FORWARDER_LOG).

    `observe`, when given, hears of each answer before its client has the whole of it: its status and its body
    (the first OBSERVED_BODY bytes) — the harness's own record of what the model said, which no process of the
    agent's writes.
    `record` (`--palette-record`) writes each model call to the item's cassette. With `replay` (`--model
    replay:RUN`) there is no upstream: the item's recording answers, and no request leaves this process."""

    def __init__(self, upstream: str | None, credentials: Mapping[str, str],
                 routes: tuple[Call, ...] = ANTHROPIC_ROUTES, observe: Callable[[int, bytes], None] | None = None,
                 record: WireRecorder | None = None, replay: WireReplay | None = None, loopback: bool = False,
                 log: Path | None = None) -> None:
        parts = urlsplit((upstream or "http://replay.invalid").rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"the model's base URL {upstream!r} is not an http(s) URL")
        if upstream is None and replay is None:
            raise ValueError("a forwarder needs the model's base URL")
        self.upstream = parts
        self.credentials = dict(credentials)
        self.routes = routes
        self.observe = observe
        self.record = record
        self.replay = replay
        self.loopback = loopback
        self.log = log
        #: What the client sends in place of a key: fresh for each forwarder, held by its client alone.
        self.token = f"palette-forwarder-{secrets.token_urlsafe(32)}"
        #: What it saw of the model's answers to its client (never of a replay's: that is no model).
        self.calls = ModelCalls()
        #: The refusals, as the log has them (the first LOGGED_REFUSALS), and how many there were in all.
        self.refused: list[str] = []
        self.refusals = 0
        self._log_lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._unix: socketserver.ThreadingUnixStreamServer | None = None
        self._folder: Path | None = None

    def start(self) -> KeyForwarder:
        """Listen on the Unix socket (`socket`), and with `loopback` on 127.0.0.1 (`base_url`) too."""
        forwarder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def __getattr__(self, name: str) -> Any:
                # Every method, not only GET and POST, reaches forward(): what is not a route is refused and logged
                # there, never answered by http.server's 501 unseen.
                if name.startswith("do_"):
                    return lambda: forwarder.forward(self)
                raise AttributeError(name)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # a line per model call is noise in pytest's output

        # A folder only this process's user can open (mkdtemp makes it 0700): no other user reaches the socket in
        # it. The socket itself is open to any user id, for a sandbox binds it alone, and the item's id (as root,
        # 420000 and up) connects there.
        self._folder = Path(tempfile.mkdtemp(prefix="palette-model-"))
        # Gone at the latest when this process exits, even if no one stops the forwarder (a session cut short).
        weakref.finalize(self, _remove_socket_folder, self._folder)
        self._unix = socketserver.ThreadingUnixStreamServer(str(self._folder / "model.sock"), Handler)
        self._unix.daemon_threads = True
        self.socket.chmod(0o666)
        servers: list[socketserver.BaseServer] = [self._unix]
        if self.loopback:
            self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
            self._server.daemon_threads = True
            servers.append(self._server)
        for server in servers:
            threading.Thread(target=server.serve_forever, name="palette-key-forwarder", daemon=True).start()
        return self

    @property
    def socket(self) -> Path:
        assert self._folder is not None, "start() first"
        return self._folder / "model.sock"

    @property
    def base_url(self) -> str:
        """Where a client that keeps the network reaches the forwarder (with `loopback` only)."""
        assert self._server is not None, "start() first, with loopback"
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
        path = _target(request)
        if not self._holds_token(request):
            self._refuse(request, path, 401, "the request does not carry the forwarder's token")
            return
        why = refusal(request.command, path, self.routes)
        if why is not None:
            self._refuse(request, path, 403, why)
            return
        try:
            length = int(request.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY:
            self._refuse(request, path, 413, "request body missing a length or too large")
            return
        body = request.rfile.read(length) if length else None
        if self.replay is not None:
            self._replayed(request, path, body)
            return
        started = time.time()
        index = self.record.begin(path) if self.record is not None else None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _OWN_HEADERS}
        headers.update(self.credentials)
        up = self.upstream
        connection_type = http.client.HTTPSConnection if up.scheme == "https" else http.client.HTTPConnection
        connection = connection_type(up.hostname or "", up.port, timeout=UPSTREAM_TIMEOUT)
        call = self.calls.sent()
        try:
            try:
                connection.request(request.command, up.path + path, body=body, headers=headers)
                answer = connection.getresponse()
            except (OSError, http.client.HTTPException) as error:
                self.calls.dropped(call, error)
                raise
            request.send_response(answer.status, answer.reason)
            for name, value in answer.getheaders():
                if name.lower() not in _OWN_HEADERS:
                    request.send_header(name, value)
            request.send_header("Transfer-Encoding", "chunked")  # streamed as it comes (server-sent events)
            request.end_headers()
            kept = bytearray()
            keep = OBSERVED_BODY if self.observe is not None or self.record is not None else \
                ERROR_BODY if answer.status >= 400 else 0
            while chunk := answer.read1(65536):
                request.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                request.wfile.flush()
                if len(kept) < keep:
                    kept += chunk[:keep - len(kept)]
            self.calls.answered(call, answer.status, bytes(kept))
            # Heard before the client has the answer's end: once it has, its turn may end before the harness knew.
            if self.record is not None:
                self.record(path, body, answer.status, answer.getheader("Content-Type") or "", bytes(kept), started,
                            time.time(), index)
            if self.observe is not None:
                self.observe(answer.status, bytes(kept))
            request.wfile.write(b"0\r\n\r\n")
        except (OSError, http.client.HTTPException) as error:
            with contextlib.suppress(OSError):
                _answer_error(request, 502, f"the model's endpoint did not answer: {type(error).__name__}")
        finally:
            self.calls.ended(call)  # a client gone mid-answer: its call is not waiting any more
            connection.close()

    def _holds_token(self, request: BaseHTTPRequestHandler) -> bool:
        given = request.headers.get("x-api-key") or (request.headers.get("Authorization") or "").removeprefix(
            "Bearer ")
        return hmac.compare_digest(given.strip().encode("utf-8", "replace"), self.token.encode())

    def _refuse(self, request: BaseHTTPRequestHandler, path: str, status: int, why: str) -> None:
        """Answer `status` with `why`, never forwarded, and say so in the log: one line a refusal, up to
        LOGGED_REFUSALS, then a count."""
        line = f"{status} {_shown(request.command, 20)} {_shown(path)}: {why}"
        with self._log_lock:
            self.refusals += 1
            kept = len(self.refused) < LOGGED_REFUSALS
            if kept:
                self.refused.append(line)
            if self.log is not None and (kept or self.refusals == LOGGED_REFUSALS + 1):
                stamp = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
                said = (f"{stamp} refused {line}" if kept else
                        f"{stamp} over {LOGGED_REFUSALS} refusals: the rest are counted, not kept")
                with contextlib.suppress(OSError):
                    self.log.parent.mkdir(parents=True, exist_ok=True)
                    with self.log.open("a", encoding="utf-8") as out:
                        out.write(said + "\n")
        _answer_error(request, status, f"not forwarded: {why}")

    def _replayed(self, request: BaseHTTPRequestHandler, path: str, body: bytes | None) -> None:
        """The recording's answer to `request`, as the upstream would have sent it (whole, with its length)."""
        assert self.replay is not None
        status, content_type, data = self.replay.answer(request.command, path, body)
        request.send_response(status)
        request.send_header("Content-Type", content_type)
        request.send_header("Content-Length", str(len(data)))
        if self.observe is not None:
            self.observe(status, data[:OBSERVED_BODY])
        request.end_headers()
        request.wfile.write(data)


def _target(request: BaseHTTPRequestHandler) -> str:
    """The request's target as its client sent it: http.server's `path` has a leading `//` folded into `/`."""
    words = request.requestline.split()
    return words[1] if len(words) >= 2 else request.path


def _remove_socket_folder(folder: Path) -> None:
    """The folder start() made, with its socket: nothing else is in it, and nothing else is removed."""
    with contextlib.suppress(FileNotFoundError):
        folder.joinpath("model.sock").unlink()
    with contextlib.suppress(FileNotFoundError):
        folder.rmdir()


def _answer_error(request: BaseHTTPRequestHandler, status: int, message: str) -> None:
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
