"""The rehearsal model over HTTP on 127.0.0.1, for clients that only speak to a model server.

CUGA reaches it as an OpenAI-compatible endpoint (`OPENAI_BASE_URL=<base_url>/v1`), the Claude
Code CLI as an Anthropic one (`ANTHROPIC_BASE_URL=<base_url>`), and the Codex CLI through the OpenAI
Responses API (`<base_url>/v1/responses`). Each request is answered by one
policy, chosen when the server is made, from the messages that request carries and nothing else. Given a
fault schedule (rehearsal/injection.py), it fails some model calls the way providers do (429, 5xx, a reset).
Given a key (`--require-key`), it answers only requests that carry it, as a provider does (`x-api-key`, or
`Authorization: Bearer`): a run against it shows where a key travels, with a fake one.

    python -m pytest_palette.rehearsal.server --port 8765    # serve until interrupted
    python -m pytest_palette.rehearsal.server --faults 429:0.2,500:0.05,seed=7
    python -m pytest_palette.rehearsal.server --require-key sk-fake-0123    # a provider that checks its key
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import logging
import select
import signal
import socket
import struct
import threading
import urllib.request
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from . import anthropic_wire, openai_wire, responses_wire
from .injection import MAX_IN_A_ROW, RETRY_AFTER_MS, SLOW_HOLD, STATUS_KINDS, FaultSchedule
from .latency import ModelLatency
from .limits import CONTEXT_CODE, ModelLimits
from .policy import MODEL_NAME, RehearsalPolicy

log = logging.getLogger(__name__)

Json = dict[str, Any]
HOST = "127.0.0.1"
#: Seconds a live server takes at most to list its model, however busy the machine.
PROBE_TIMEOUT = 10.0
#: A request body larger than this is refused: no conversation here comes near it.
MAX_BODY = 64 * 1024 * 1024


class HttpError(Exception):
    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


def models() -> Json:
    """One model, described in both the OpenAI and the Anthropic listing shapes."""
    entry = {"id": MODEL_NAME, "object": "model", "type": "model", "created": 0,
             "created_at": "1970-01-01T00:00:00Z", "owned_by": "pytest-palette",
             "display_name": "Rehearsal (scripted, not a language model)"}
    return {"object": "list", "data": [entry], "has_more": False, "first_id": MODEL_NAME, "last_id": MODEL_NAME}


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    # HTTP/1.0: one response per connection, so no client can hold a worker thread open between calls.
    protocol_version = "HTTP/1.0"

    def do_GET(self) -> None:
        self.dispatch("GET")

    def do_POST(self) -> None:
        self.dispatch("POST")

    def dispatch(self, method: str) -> None:
        route = urlsplit(self.path).path.rstrip("/")  # the Claude CLI appends ?beta=true
        try:
            if not self.authorized():
                raise HttpError(401, "authentication_error", "invalid x-api-key")
            if method == "GET" and route == "/v1/models":
                self.send_json(200, models())
            elif method == "POST" and route in POST_ROUTES:
                body = self.read_json()
                fault = self.server.fault_for(route, body) if route in MODEL_ROUTES else None
                if route in MODEL_ROUTES and self.server.latency is not None:
                    self.server.latency.wait()  # a real model's time to answer (or to fail)
                if fault is None:
                    POST_ROUTES[route](self, body)
                else:
                    self.send_fault(fault)
            else:
                raise HttpError(404, "not_found_error", f"no route for {method} {route or '/'}")
        except HttpError as error:
            self.send_json(error.status, {"type": "error", "error": {"type": error.kind, "message": str(error)}})
        except Exception as error:  # a policy or adapter bug: answer it, never hang the client
            log.exception("rehearsal server failed on %s %s", method, route)
            self.send_json(500, {"type": "error", "error": {"type": "api_error", "message": repr(error)}})

    def authorized(self) -> bool:
        """Whether the request carries the server's key, when it requires one (the body is not read otherwise)."""
        key = self.server.key
        if key is None:
            return True
        given = self.headers.get("x-api-key") or (self.headers.get("Authorization") or "").removeprefix("Bearer ")
        return hmac.compare_digest(given.strip().encode(), key.encode())

    def read_json(self) -> Json:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise HttpError(413, "request_too_large", f"body of {length} bytes")
        raw = self.rfile.read(length) if length else self.read_chunked()
        try:
            body = json.loads(raw or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise HttpError(400, "invalid_request_error", f"body is not JSON: {error}") from None
        if not isinstance(body, dict):
            raise HttpError(400, "invalid_request_error", "body must be a JSON object")
        return body

    def read_chunked(self) -> bytes:
        """A body sent with Transfer-Encoding: chunked (bounded by MAX_BODY)."""
        if "chunked" not in (self.headers.get("Transfer-Encoding") or "").lower():
            return b""
        parts: list[bytes] = []
        while sum(map(len, parts)) <= MAX_BODY:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                self.rfile.readline()
                return b"".join(parts)
            parts.append(self.rfile.read(size))
            self.rfile.readline()
        raise HttpError(413, "request_too_large", "chunked body too large")

    def chat_completions(self, request: Json) -> None:
        limits = self.server.limits
        refusal = limits.openai_refusal(openai_wire.estimate_tokens(json.dumps(request.get("messages") or [])))
        if refusal is not None:  # as OpenAI-compatible servers answer it, before any work
            self.send_json(400, {"error": {"message": refusal, "type": "invalid_request_error", "param": "messages",
                                           "code": CONTEXT_CODE}})
            return
        completion = openai_wire.complete(self.server.policy, request, limits)
        self.server.record("/v1/chat/completions", completion["choices"][0]["message"])
        if request.get("stream"):
            usage = bool((request.get("stream_options") or {}).get("include_usage"))
            self.send_body(200, "text/event-stream", openai_wire.to_sse(completion, usage))
        else:
            self.send_json(200, completion)

    def messages(self, request: Json) -> None:
        limits = self.server.limits
        refusal = limits.anthropic_refusal(anthropic_wire.count_tokens(request)["input_tokens"])
        if refusal is not None:
            raise HttpError(400, "invalid_request_error", refusal)
        message = anthropic_wire.respond(self.server.policy, request, limits)
        self.server.record("/v1/messages", message)
        if request.get("stream"):
            self.send_body(200, "text/event-stream", anthropic_wire.to_sse(message))
        else:
            self.send_json(200, message)

    def openai_responses(self, request: Json) -> None:
        # Not `responses`: BaseHTTPRequestHandler keeps its status phrases under that name.
        limits = self.server.limits
        refusal = limits.openai_refusal(responses_wire.prompt_tokens(request))
        if refusal is not None:  # as the Responses API answers it, before any work
            self.send_json(400, {"error": {"message": refusal, "type": "invalid_request_error", "param": "input",
                                           "code": CONTEXT_CODE}})
            return
        response = responses_wire.respond(self.server.policy, request, limits)
        calls = [item for item in response["output"] if item["type"] == "function_call"]
        self.server.record("/v1/responses", {"tool_calls": calls})
        if request.get("stream"):
            self.send_body(200, "text/event-stream", responses_wire.to_sse(response))
        else:
            self.send_json(200, response)

    def count_tokens(self, request: Json) -> None:
        self.send_json(200, anthropic_wire.count_tokens(request))

    def send_fault(self, kind: str) -> None:
        """An injected transient error, as a provider sends it."""
        if kind == "slow":
            self.hold()
            return
        if kind == "reset":
            # SO_LINGER 0: closing sends RST, so the client sees a reset connection, not a clean end.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()
            return
        status = int(kind)
        data = json.dumps({"type": "error", "error": {"type": STATUS_KINDS[kind],
                                                      "message": f"injected by the rehearsal server ({kind})"}})
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status == 429:
            self.send_header("Retry-After", "1")
            self.send_header("retry-after-ms", str(RETRY_AFTER_MS))
        self.end_headers()
        self.wfile.write(data.encode())

    def hold(self) -> None:
        """A model that does not answer in time: the call is held with no answer until its client goes away (its
        own timeout, or its turn's), the server stops, or SLOW_HOLD has passed; then the connection is closed."""
        self.close_connection = True
        for _ in range(int(SLOW_HOLD / 0.5)):
            if self.server.stopping.wait(0.5):
                return
            if select.select([self.connection], [], [], 0)[0]:
                try:
                    if not self.connection.recv(1, socket.MSG_PEEK):
                        return  # the client went away
                except OSError:
                    return

    def send_json(self, status: int, body: Json) -> None:
        self.send_body(status, "application/json", json.dumps(body).encode())

    def send_body(self, status: int, content_type: str, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache")
        self.send_header("X-Rehearsal-Usage", "estimate: characters / 4")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        # The request line and status only: headers (x-api-key, authorization) are never logged.
        log.debug("%s %s", self.address_string(), format % args)


POST_ROUTES: dict[str, Callable[[_Handler, Json], None]] = {
    "/v1/chat/completions": _Handler.chat_completions,
    "/v1/messages": _Handler.messages,
    "/v1/messages/count_tokens": _Handler.count_tokens,
    "/v1/responses": _Handler.openai_responses,
}
#: The routes that are model calls: the ones a fault schedule fails.
MODEL_ROUTES = ("/v1/chat/completions", "/v1/messages", "/v1/responses")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, policy: RehearsalPolicy, port: int, faults: FaultSchedule | None = None,
                 latency: ModelLatency | None = None, key: str | None = None,
                 limits: ModelLimits | None = None) -> None:
        super().__init__((HOST, port), _Handler)
        self.policy = policy
        self.limits = limits or ModelLimits()
        self.key = key
        self.faults = faults
        self.latency = latency
        self.served: list[tuple[str, str]] = []
        self.injected: list[tuple[str, str]] = []
        self._calls = 0
        self._faulted: Counter[str] = Counter()
        self._lock = threading.Lock()
        #: Set when the server stops: a held call (`slow`) is let go.
        self.stopping = threading.Event()

    def fault_for(self, route: str, body: Json) -> str | None:
        """The fault this model call meets, if any (and remembered); None: answer it."""
        if self.faults is None:
            return None
        # A retry resends the same body: it is how the server knows a call it has already failed.
        key = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        with self._lock:
            kind = self.faults.draw(self._calls)
            self._calls += 1
            if kind is not None and not self.faults.always and self._faulted[key] >= MAX_IN_A_ROW:
                kind = None
            if kind is not None:
                self._faulted[key] += 1
                self.injected.append((route, kind))
        return kind

    def record(self, route: str, answer: Json) -> None:
        """Remember what each model call got (route, kind of answer), for a harness to check."""
        content = answer.get("content")
        blocks = content if isinstance(content, list) else []
        calls = answer.get("tool_calls") or [b for b in blocks if b.get("type") == "tool_use"]
        kind = "tool_call" if calls else "text"
        with self._lock:
            self.served.append((route, kind))


class RehearsalServer:
    """The rehearsal policy served on 127.0.0.1 at a free port, for the life of a `with` block."""

    def __init__(self, policy: RehearsalPolicy | None = None, port: int = 0,
                 faults: FaultSchedule | None = None, latency: ModelLatency | None = None,
                 key: str | None = None, limits: ModelLimits | None = None) -> None:
        self.policy = policy or RehearsalPolicy()
        #: Its output and context limits (`--palette-rehearsal-limits`); None: none.
        self.limits = limits
        self.faults = faults
        self.latency = latency
        #: The key every request must carry, as a provider's would; None: it checks none.
        self.key = key
        self._port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> RehearsalServer:
        if self._server is None:
            self._server = _Server(self.policy, self._port, self.faults, self.latency, self.key, self.limits)
            self._thread = threading.Thread(target=self._server.serve_forever, name="rehearsal-server",
                                            kwargs={"poll_interval": 0.1}, daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stopping.set()
            self._server.shutdown()
            self._server.server_close()
            if self._thread is not None:
                self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> RehearsalServer:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the rehearsal server is not running")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """For Anthropic clients (ANTHROPIC_BASE_URL); OpenAI clients want `openai_base_url`."""
        return f"http://{HOST}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    def answers(self, timeout: float = PROBE_TIMEOUT) -> bool:
        """Whether the server answers a model listing within `timeout` seconds (a bound for a dead server,
        generous enough for a busy machine: the listing is computed from nothing)."""
        if self._server is None:
            return False
        request = urllib.request.Request(f"{self.openai_base_url}/models",
                                         headers={"x-api-key": self.key} if self.key else {})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return bool(response.status == 200)
        except (OSError, ValueError):
            return False

    @property
    def served(self) -> list[tuple[str, str]]:
        """(route, "tool_call" | "text") for each model call answered so far."""
        return list(self._server.served) if self._server is not None else []

    @property
    def injected(self) -> list[tuple[str, str]]:
        """(route, fault kind) for each model call the fault schedule failed so far."""
        return list(self._server.injected) if self._server is not None else []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_palette.rehearsal.server",
                                     description="Serve the rehearsal model on 127.0.0.1 until interrupted.")
    parser.add_argument("--port", type=int, default=0, help="port to bind (0 picks a free one)")
    parser.add_argument("--faults", default=None, metavar="SPEC",
                        help="transient errors to inject, e.g. 429:0.2,500:0.05,seed=7 (kinds: "
                             "429, 500, 502, 503, 529, reset)")
    parser.add_argument("--limits", default=None, metavar="SPEC",
                        help="the model's limits in tokens, e.g. output=40,context=8192: a longer answer in words is "
                             "cut as a provider cuts it, a longer request refused with a 400")
    parser.add_argument("--require-key", default=None, metavar="KEY",
                        help="answer only requests carrying KEY (x-api-key or Authorization: Bearer), as a provider "
                             "does: give it a fake key, never a real one")
    args = parser.parse_args(argv)
    try:
        faults = FaultSchedule.parse(args.faults) if args.faults is not None else None
    except ValueError as error:
        parser.error(f"--faults {args.faults!r}: {error}")
    try:
        limits = ModelLimits.parse(args.limits) if args.limits is not None else None
    except ValueError as error:
        parser.error(f"--limits {args.limits!r}: {error}")
    stopping = threading.Event()
    # A handler, not KeyboardInterrupt: an interrupt that lands mid-print or mid-start still stops cleanly.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopping.set())
    server = RehearsalServer(port=args.port, faults=faults, key=args.require_key, limits=limits).start()
    key = "<the key given>" if args.require_key else "dummy"
    try:
        print(f"rehearsal model serving at {server.base_url}" + (f", injecting {faults}" if faults else "")
              + (", answering only requests that carry the key given" if args.require_key else ""), flush=True)
        print(f"  CUGA / OpenAI clients:  OPENAI_BASE_URL={server.openai_base_url} OPENAI_API_KEY={key}",
              flush=True)
        print(f"  pytest (react, cuga):   --model openai:rehearsal --palette-base-url {server.openai_base_url} "
              f"with OPENAI_API_KEY={key}", flush=True)
        print(f"  pytest (claude):        --model anthropic:claude-sonnet-4-5 --palette-base-url {server.base_url} "
              f"with ANTHROPIC_API_KEY={key}", flush=True)
        print(f"  Claude Code:            ANTHROPIC_BASE_URL={server.base_url} ANTHROPIC_API_KEY={key}",
              flush=True)
        while not stopping.wait(0.2):
            pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
