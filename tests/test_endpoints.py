"""Any endpoint, and retries: `--palette-base-url` for OpenAI- and Anthropic-compatible servers, the rehearsal
server's injected faults (429 with Retry-After, 5xx, resets), and the retries each client made, counted in the turn,
the record and the report.

The runs drive the shipped core cases through a real client over loopback HTTP: react through LangChain's ChatOpenAI
at the rehearsal server's OpenAI endpoint, claude through the Claude Code CLI at its Anthropic endpoint.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import stat
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from sweeps import Sweeps, inner_cache, run_session
from test_benchmark_suite import REPO, run_suite
from unprivileged import Unprivileged
from upstream import LoggingUpstream, another_user_tries

from pytest_palette.hosts.base import HostSettings
from pytest_palette.hosts.claude import cli_environment, find_cli
from pytest_palette.hosts.claude_stream import parse_stream
from pytest_palette.hosts.cuga_setup import credentials_needed, cuga_model
from pytest_palette.layer.endpoint import ANTHROPIC_ROUTES, FORWARDER_LOG, OPENAI_ROUTES, KeyForwarder
from pytest_palette.layer.route import route_of
from pytest_palette.layer.serving import provider
from pytest_palette.models import ModelUnavailable, RetryCounter, build_chat_model, check_model, parse_model
from pytest_palette.rehearsal.hostile import FORWARDER_TRIES
from pytest_palette.rehearsal.injection import MAX_IN_A_ROW, FaultSchedule
from pytest_palette.rehearsal.server import RehearsalServer
from pytest_palette.results.ledger import load
from pytest_palette.results.markdown import to_markdown
from pytest_palette.results.model import build_report

CORE = {"plain_request", "approve_casually", "pasted_notes", "edit_slide_count", "conditional_yes"}
#: One of them, for the hosts whose every conversation costs seconds of CPU to start (cuga, claude): with the
#: schedule below, its fourth call meets a 429, and so does its retry (FaultSchedule.draw; a test holds it so).
ONE = "plain_request"
#: A fake key with a shape no file of ours holds by accident: the runs below must not write it anywhere.
FAKE_KEY = "sk-palette-fake-key-5e1f0c"
FAULTS = "429:0.2,500:0.05,seed=7"


# -- --palette-base-url ------------------------------------------------------------------------------


def test_a_base_url_goes_with_openai_and_anthropic_models_and_shows_in_the_label() -> None:
    spec = parse_model("openai:qwen2.5:7b", "http://localhost:11434/v1/")
    assert (spec.provider, spec.model_id, spec.base_url) == ("openai", "qwen2.5:7b", "http://localhost:11434/v1")
    assert spec.label == "openai:qwen2.5:7b at http://localhost:11434/v1"
    assert parse_model("anthropic:claude-sonnet-4-5", "https://gateway.example/").base_url == "https://gateway.example"
    assert parse_model("openai:gpt-4o").base_url is None


@pytest.mark.parametrize(("model", "url", "says"), [
    ("rehearsal", "http://localhost:8000/v1", "applies to openai:<model> and anthropic:<model>"),
    ("watsonx:m", "http://localhost:8000/v1", "applies to"),
    ("openai:m", "localhost:8000/v1", "http:// or https://"),
    ("openai:m", "ftp://host/v1", "http:// or https://"),
    ("openai:m", "http://host:port/v1", "not a URL"),
    ("openai:m", "http://user:sk-secret@host/v1", "credentials"),
    ("openai:m", "http://host/v1?key=sk-secret", "credentials"),
])
def test_a_bad_base_url_is_one_line_naming_the_flag_and_never_echoing_a_key(model: str, url: str, says: str) -> None:
    with pytest.raises(ModelUnavailable) as raised:
        parse_model(model, url)
    message = str(raised.value)
    assert message.startswith("--palette-base-url") and says in message and "\n" not in message
    assert "sk-secret" not in message


def test_a_local_server_without_a_key_is_told_what_to_set() -> None:
    spec = parse_model("openai:llama3", "http://localhost:8000/v1")
    with pytest.raises(ModelUnavailable, match=r"OPENAI_API_KEY.*OPENAI_API_KEY=none"):
        check_model(spec, {})
    [problem] = credentials_needed(route_of(spec), {})
    assert "OPENAI_API_KEY=none" in problem
    check_model(spec, {"OPENAI_API_KEY": "none"})  # then it is ready


@pytest.mark.end_to_end
def test_the_key_comes_from_the_environment_and_never_shows(tmp_path: Path) -> None:
    model = build_chat_model(parse_model("openai:m", "http://127.0.0.1:9/v1"), {"OPENAI_API_KEY": FAKE_KEY},
                             max_retries=3)
    assert FAKE_KEY not in repr(model) and FAKE_KEY not in str(model.model_dump())
    assert (model.openai_api_base, model.max_retries) == ("http://127.0.0.1:9/v1", 3)  # type: ignore[attr-defined]


def test_cuga_and_claude_take_the_base_url(tmp_path: Path) -> None:
    cuga = cuga_model(route_of(parse_model("openai:m", "http://127.0.0.1:8000/v1")), {"OPENAI_BASE_URL": "http://other/v1"})
    assert cuga.env == {"MODEL_NAME": "m", "OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"}  # the flag wins
    # Claude's calls go to the flag's URL through the model layer, which holds the key; the CLI holds neither.
    users = {"ANTHROPIC_API_KEY": FAKE_KEY, "ANTHROPIC_BASE_URL": "http://old"}
    sonnet = route_of(parse_model("anthropic:claude-sonnet-4-5", "http://127.0.0.1:4000"))
    assert provider(sonnet, "anthropic", users) == ("http://127.0.0.1:4000", {"x-api-key": FAKE_KEY})
    assert provider(route_of(parse_model("anthropic:m")), "anthropic", users)[0] == "http://old"  # the gateway
    env = cli_environment(users, tmp_path, "http://127.0.0.1:8787", 300.0, max_retries=7, key="token")
    assert (env["ANTHROPIC_BASE_URL"], env["ANTHROPIC_API_KEY"]) == ("http://127.0.0.1:8787", "token")
    assert env["CLAUDE_CODE_MAX_RETRIES"] == "7"


@pytest.mark.parametrize(("args", "says"), [
    (["--palette-base-url", "http://localhost:8000/v1"], "--palette-base-url applies to"),
    (["--palette-rehearsal-faults", "418:0.5", "--host", "claude"], "--palette-rehearsal-faults '418:0.5'"),
    (["--palette-rehearsal-faults", "429:0.2", "--model", "openai:gpt-4o"],
     "--palette-rehearsal-faults applies to --model rehearsal on the claude and codex and cuga and react hosts"),
    (["--palette-model-retries", "-1"], "--palette-model-retries must be from 0 to 20 (got -1)"),
    (["--palette-model-retries", "100000"], "--palette-model-retries must be from 0 to 20 (got 100000)"),
    (["--palette-skill", ""], "--palette-skill is empty (an unset variable?)"),
])
def test_bad_options_are_usage_errors_naming_the_flag(pytester: pytest.Pytester, args: list[str], says: str) -> None:
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--palette-run-dir", str(pytester.path / "r"),
                                          *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert says in "\n".join(result.errlines)


# -- the fault schedule ------------------------------------------------------------------------------


def test_a_schedule_is_parsed_and_its_draws_are_fixed_by_the_seed() -> None:
    schedule = FaultSchedule.parse("429:0.2, 500:0.05, seed=7")
    assert schedule == FaultSchedule((("429", 0.2), ("500", 0.05)), 7) and str(schedule) == "429:0.2,500:0.05,seed=7"
    draws = [schedule.draw(i) for i in range(4000)]
    assert draws == [FaultSchedule.parse(FAULTS).draw(i) for i in range(4000)]  # the same seed, the same faults
    assert draws != [FaultSchedule.parse("429:0.2,500:0.05,seed=8").draw(i) for i in range(4000)]
    counted = Counter(draws)
    assert 700 < counted["429"] < 900 and 140 < counted["500"] < 260  # 800 and 200 expected
    assert FaultSchedule.parse("429:1").always and not schedule.always
    assert draws[3:5] == ["429", "429"]  # ONE's fourth call and its retry: what the claude and cuga runs count


@pytest.mark.parametrize(("text", "says"), [
    ("", "no fault named"), ("429", "kind:rate"), ("418:0.1", "kind:rate"), ("429:x", "not a number"),
    ("429:1.5", "between 0 and 1"), ("429:0.6,500:0.6", "more than 1"), ("429:0.1,seed=x", "whole number"),
])
def test_a_bad_schedule_says_why(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        FaultSchedule.parse(text)


def _post(server: RehearsalServer, body: dict[str, object]) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def test_a_429_asks_for_a_short_wait_and_a_call_is_never_failed_more_than_twice() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "Build a deck"}]}
    with RehearsalServer(faults=FaultSchedule.parse("429:0.99")) as server:
        statuses = []
        for _ in range(MAX_IN_A_ROW + 1):
            status, headers, data = _post(server, body)
            statuses.append(status)
            if status == 429:
                assert headers["retry-after"] == "1" and headers["retry-after-ms"] == "100"
                assert json.loads(data)["error"]["type"] == "rate_limit_error"
        assert statuses == [429] * MAX_IN_A_ROW + [200]  # the same call, the third time, gets through
        assert server.injected == [("/v1/chat/completions", "429")] * MAX_IN_A_ROW
        assert len(server.served) == 1
        status, _, _ = _post(server, {**body, "messages": [{"role": "user", "content": "Another deck"}]})
        assert status == 429  # a new call draws again
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        connection.request("GET", "/v1/models")
        assert connection.getresponse().status == 200  # listing models is not a model call: never failed


def test_a_reset_closes_the_connection_without_an_answer() -> None:
    with RehearsalServer(faults=FaultSchedule.parse("reset:1")) as server, pytest.raises(
            (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine)):
        _post(server, {"model": "m", "messages": [{"role": "user", "content": "hi"}]})


@pytest.mark.end_to_end
def test_the_openai_client_retries_each_fault_and_the_counter_sees_each_retry() -> None:
    with RehearsalServer(faults=FaultSchedule.parse("429:0.3,500:0.1,reset:0.1,seed=3")) as server:
        counter = RetryCounter()
        model = build_chat_model(parse_model("openai:rehearsal", server.openai_base_url),
                                 {"OPENAI_API_KEY": "dummy"}, max_retries=MAX_IN_A_ROW, retries=counter)
        for n in range(8):
            assert model.invoke(f"Build a deck about topic {n}").content
        kinds = {kind for _, kind in server.injected}
        assert counter.count == len(server.injected) and {"429", "500", "reset"} <= kinds


def test_a_call_still_failing_after_its_retries_raises_with_the_cause() -> None:
    with RehearsalServer(faults=FaultSchedule.parse("500:1")) as server:
        counter = RetryCounter()
        model = build_chat_model(parse_model("openai:rehearsal", server.openai_base_url),
                                 {"OPENAI_API_KEY": "dummy"}, max_retries=1, retries=counter)
        with pytest.raises(Exception, match="500"):
            model.invoke("Build a deck")
        assert (counter.count, len(server.injected)) == (1, 2)


@pytest.mark.end_to_end
def test_cugas_retries_are_the_failed_answers_its_forwarder_passed_on() -> None:
    from pytest_palette.hosts.cuga import RETRIED_STATUSES
    statuses: list[int] = []
    with RehearsalServer(faults=FaultSchedule.parse("429:0.3,500:0.2,seed=5")) as server:
        forwarder = KeyForwarder(server.openai_base_url, {"Authorization": "Bearer sk-held"}, routes=OPENAI_ROUTES,
                                 observe=lambda status, body: statuses.append(status), loopback=True).start()
        try:
            # A client built without our hook, as CUGA builds its own, holding only the forwarder's token.
            model = build_chat_model(parse_model("openai:rehearsal", forwarder.base_url),
                                     {"OPENAI_API_KEY": forwarder.token})
            for n in range(6):
                model.invoke(f"Build a deck about topic {n}")
            connection = http.client.HTTPConnection("127.0.0.1", int(forwarder.base_url.rsplit(":", 1)[1]))
            connection.request("POST", "/v1/messages", body=b"{}",
                               headers={"Content-Length": "2", "Authorization": f"Bearer {forwarder.token}"})
            refused = connection.getresponse().status
            injected = len(server.injected)
        finally:
            forwarder.stop()
    failed = [status for status in statuses if status in RETRIED_STATUSES or status >= 500]
    assert len(failed) == injected > 0 and statuses.count(200) == 6
    assert refused == 403  # only the chat-completions wire passes


@pytest.mark.parametrize("replayed", [False, True], ids=["forwarded", "replayed"])
def test_the_harness_hears_an_answer_before_its_client_has_all_of_it(replayed: bool, tmp_path: Path) -> None:
    """A turn may end the moment the client has its answer: the harness must have heard it by then (it once heard it
    after, and a cuga turn ended with no steps)."""
    import threading

    from pytest_palette.arena.replay import WireReplay
    heard, release = threading.Event(), threading.Event()
    had: list[bool] = []

    def observe(status: int, body: bytes) -> None:
        heard.set()
        release.wait(30)

    with RehearsalServer() as server:
        # A replay of nothing answers each call with its error, heard as any answer is.
        forwarder = KeyForwarder(None if replayed else server.openai_base_url, {}, routes=OPENAI_ROUTES,
                                 observe=observe, loopback=True,
                                 replay=WireReplay([], tmp_path) if replayed else None).start()
        try:
            keyed = {"Authorization": f"Bearer {forwarder.token}"}
            client = threading.Thread(target=lambda: had.append(bool(_ask(forwarder, "POST", "/chat/completions",
                                                                          keyed)[0])), daemon=True)
            client.start()
            assert heard.wait(30)
            waiting = client.is_alive() and not had
            release.set()
            client.join(30)
        finally:
            release.set()
            forwarder.stop()
    assert waiting and had == [True]


# -- the forwarder forwards exactly what the client needs (issue 36) ------------------------------------------------

#: Each client's own calls, as the forwarder passes them: what the upstream must see, and all it may see.
CLIENT_CALLS = {"openai": [("POST", "/chat/completions")],
                "anthropic": [("POST", "/v1/messages?beta=true"), ("POST", "/v1/messages")]}
#: Beyond the model code's tries on cuga (hostile.FORWARDER_TRIES): more of each kind, on both wires.
REFUSED = {
    "openai": [("POST", "/v1/chat/completions"), ("GET", "/models"), ("POST", "/models"),
               ("POST", "/chat/completions/"), ("POST", "/chat/./completions"), ("POST", "/chat/completions?"),
               ("POST", "/chat/completions%3Fx"), ("POST", "/chat/completions#x"), ("POST", "/chat\\completions"),
               ("POST", "/chat/%2e%2e/chat/completions"), ("POST", "/chat/completions/%2e%2e/%2e%2e/files"),
               ("POST", "/chat/%252e%252e/completions"), ("POST", "http://127.0.0.1/chat/completions"),
               ("HEAD", "/chat/completions"), ("OPTIONS", "/chat/completions"), ("PATCH", "/chat/completions"),
               ("BREW", "/chat/completions")],
    "anthropic": [("POST", "/v1/messages/batches"), ("GET", "/v1/messages/batches"),
                  ("POST", "/v1/messages/batches?beta=true"), ("POST", "/v1/messages/count_tokens?beta=true"),
                  ("GET", "/v1/models"), ("GET", "/v1/messages"), ("POST", "/v1/messages?beta=true&x=1"),
                  ("POST", "/v1/messages?beta=false"), ("POST", "/v1/complete"), ("POST", "/v1/files"),
                  ("POST", "/v1/messages/../messages"), ("POST", "/v1//messages"), ("POST", "/v1/%6Dessages"),
                  ("DELETE", "/v1/messages")],
}


def _ask(forwarder: KeyForwarder, method: str, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
    """One request as sent, byte for byte: http.client neither decodes nor resolves the path."""
    connection = http.client.HTTPConnection("127.0.0.1", int(forwarder.base_url.rsplit(":", 1)[1]), timeout=30)
    try:
        connection.putrequest(method, path, skip_accept_encoding=True)
        for name, value in {**headers, "Content-Type": "application/json", "Content-Length": "2"}.items():
            connection.putheader(name, value)
        connection.endheaders(b"{}")
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_the_forwarder_passes_only_its_clients_own_calls_and_names_each_refusal(wire: str, tmp_path: Path) -> None:
    """A real forwarder before a logging upstream: the calls of the host's client pass, with the key; every other
    method, path, spelling of the path (encoded, dotted, doubled), query, or a call without the forwarder's token is
    refused and never forwarded, and the item's log names each."""
    held = {"openai": {"Authorization": "Bearer sk-held"}, "anthropic": {"x-api-key": "sk-ant-held"}}[wire]
    routes = {"openai": OPENAI_ROUTES, "anthropic": ANTHROPIC_ROUTES}[wire]
    refused = [*REFUSED[wire], *([(m, p) for m, p, keyed in FORWARDER_TRIES if keyed] if wire == "openai" else [])]
    log = tmp_path / FORWARDER_LOG
    with LoggingUpstream() as upstream:
        base = f"{upstream.url}/v1" if wire == "openai" else f"{upstream.url}/gateway"
        forwarder = KeyForwarder(base, held, routes=routes, loopback=True, log=log).start()
        try:
            keyed = {"Authorization": f"Bearer {forwarder.token}"} if wire == "openai" else {
                "x-api-key": forwarder.token}
            passed = [_ask(forwarder, method, path, keyed)[0] for method, path in CLIENT_CALLS[wire]]
            answers = {(method, path): _ask(forwarder, method, path, keyed) for method, path in refused}
            client = CLIENT_CALLS[wire][0]
            unkeyed = [_ask(forwarder, *client, token)[0] for token in
                       ({}, {"Authorization": "Bearer sk-guessed"}, {"x-api-key": forwarder.token[:-1]})]
        finally:
            forwarder.stop()
    assert passed == [200] * len(CLIENT_CALLS[wire])
    assert {call: status for call, (status, _) in answers.items() if status != 403} == {}
    assert unkeyed == [401, 401, 401]
    # The upstream saw the client's own calls, under its base path, each with the key: no token, nothing else.
    prefix = "/v1" if wire == "openai" else "/gateway"
    assert [(seen.method, seen.path) for seen in upstream.seen] == [(m, prefix + p) for m, p in CLIENT_CALLS[wire]]
    assert all(seen.authorization == next(iter(held.values())) for seen in upstream.seen)
    # Each refusal in the log, naming the call and why, and in its answer.
    lines = log.read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(refused) + 3 == forwarder.refusals
    expected = [(403, *call) for call in refused] + [(401, *client)] * 3
    for (status, method, path), line in zip(expected, lines, strict=True):
        assert f" refused {status} {method} {path}: " in line, line
    named = dict(zip(refused, lines[:len(refused)], strict=True))
    if wire == "openai":
        assert named["GET", "/models/../files"].endswith("it resolves to /files: a path is forwarded only as "
                                                        "written plainly")
        assert named["GET", "/chat/completions"].endswith("this host's client only sends POST to /chat/completions")
        assert named["POST", "/chat%2Fcompletions"].endswith("resolves to /chat/completions: a path is forwarded "
                                                            "only as written plainly")
        assert named["POST", "/chat/completions?limit=100"].endswith(
            "the query 'limit=100' is not what its client sends to /chat/completions")
    else:
        assert named["POST", "/v1/messages/batches"].endswith(
            "/v1/messages/batches is not a path this host's client calls")
        assert b"not forwarded: " in answers["POST", "/v1/messages/batches"][1]
    assert lines[-1].endswith("the request does not carry the forwarder's token")


def test_a_replaying_forwarder_refuses_the_same_calls_before_the_recording_is_asked(tmp_path: Path) -> None:
    from pytest_palette.arena.replay import WireReplay

    replay = WireReplay([], tmp_path)
    forwarder = KeyForwarder(None, {}, routes=OPENAI_ROUTES, replay=replay, loopback=True).start()
    try:
        keyed = {"Authorization": f"Bearer {forwarder.token}"}
        # The recording would have answered a model list itself; the forwarder never asks it.
        assert _ask(forwarder, "GET", "/models", keyed)[0] == 403
        assert _ask(forwarder, "POST", "/models/../chat/completions", keyed)[0] == 403
        assert replay.position == 0 and replay.diverged is None
        assert _ask(forwarder, "POST", "/chat/completions", keyed)[0] == 400  # the recording's own: it ends here
        assert replay.diverged is not None and "the recording ends after 0 call(s)" in replay.diverged
    finally:
        forwarder.stop()


def test_the_forwarders_socket_is_in_a_folder_of_its_own_and_only_a_client_that_keeps_the_network_gets_a_port(
        ) -> None:
    relayed = KeyForwarder("http://127.0.0.1:9", {}).start()
    kept = KeyForwarder("http://127.0.0.1:9", {}, loopback=True).start()
    try:
        folder = relayed.socket.parent
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and folder.stat().st_uid == os.geteuid()
        assert stat.S_ISSOCK(relayed.socket.stat().st_mode) and os.listdir(folder) == ["model.sock"]
        with pytest.raises(AssertionError, match="loopback"):
            relayed.base_url  # noqa: B018 — no TCP listener at all
        assert kept.base_url.startswith("http://127.0.0.1:") and relayed.token != kept.token
    finally:
        relayed.stop()
        kept.stop()
    assert not folder.exists()


def test_the_relay_passes_a_refusal_on_whole_though_the_forwarder_never_read_the_body() -> None:
    # The forwarder refuses before it reads a body and closes; the relay's copy of that body then meets a closed
    # socket. The refusal, already on its way back, must still reach the client — not a connection cut short.
    forwarder = KeyForwarder("http://127.0.0.1:9", {}).start()
    listener = socket.create_server(("127.0.0.1", 0))
    # The relay in a process of its own (as in a sandbox), on this listener: its threads are its own to count.
    code = "import socket, sys; from pytest_palette.layer import relay; " \
           "relay.serve(socket.socket(fileno=int(sys.argv[1])), sys.argv[2])"
    process = subprocess.Popen([sys.executable, "-c", code, str(listener.fileno()), str(forwarder.socket)],
                               pass_fds=[listener.fileno()])
    try:
        for size in (10, 300_000):  # the second, past every socket buffer: its copy cannot end before the refusal
            connection = http.client.HTTPConnection("127.0.0.1", listener.getsockname()[1], timeout=30)
            connection.request("POST", "/v1/messages", body=b"x" * size, headers={"x-api-key": "sk-ant-guessed"})
            answer = connection.getresponse()
            assert (answer.status, b"forwarder's token" in answer.read()) == (401, True), size
            connection.close()
        # Connections held side by side take no thread each: an agent that spends its user's processes (up to the
        # item's limit) cannot leave a model call half-relayed for want of one.
        held = [socket.create_connection(listener.getsockname(), timeout=30) for _ in range(8)]
        for connection in held:  # refused at once; the client's side stays open, so each relayed pair is still held
            connection.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: sk-ant-guessed\r\n"
                               b"Content-Length: 5\r\n\r\n")
            assert connection.makefile("rb").read().startswith(b"HTTP/1.1 401")
        assert os.listdir(f"/proc/{process.pid}/task") == [str(process.pid)]
        for connection in held:
            connection.close()
    finally:
        process.kill()
        process.wait()
        listener.close()
        forwarder.stop()


def test_another_user_cannot_use_the_forwarder(unprivileged: Unprivileged, tmp_path: Path) -> None:
    """As root, a forwarder that listens on its socket and on a port (for a client that keeps the network); another
    local user tries both: its folder does not open, the port asks for a token the user cannot know."""
    log = tmp_path / FORWARDER_LOG
    with LoggingUpstream() as upstream:
        forwarder = KeyForwarder(f"{upstream.url}/v1", {"Authorization": "Bearer sk-held"}, routes=OPENAI_ROUTES,
                                 loopback=True, log=log).start()
        socket, port = forwarder.socket, int(forwarder.base_url.rsplit(":", 1)[1])
        try:
            got = another_user_tries(unprivileged, [str(socket)], [port])
        finally:
            forwarder.stop()
    assert got == {f"list {socket.parent}": "PermissionError", f"connect to {socket}": "PermissionError",
                   f"POST to port {port}": "401", f"POST to port {port} with a guessed token": "401"}
    assert upstream.seen == []
    assert [line.split(" refused ")[1][:3] for line in log.read_text().splitlines()] == ["401", "401"]


def test_another_user_cannot_use_the_forwarder_while_a_run_lasts(unprivileged: Unprivileged, sweeps: Sweeps) -> None:
    """The hostile cuga session (tests/test_hostile_forwarder.py): as its first model call waited at the upstream,
    another local user tried every socket and port its harness listened on."""
    from test_hostile_forwarder import shared_session

    tried = shared_session(sweeps).another_user
    assert isinstance(tried, dict), tried
    sockets, ports = json.loads(tried.pop("sockets")), json.loads(tried.pop("ports"))
    # The forwarder's socket, found; a client that reaches it through the relay needs no port, and it has none.
    assert len(sockets) == 1 and ports == []
    [socket] = sockets
    assert tried == {f"list {Path(socket).parent}": "PermissionError", f"connect to {socket}": "PermissionError"}


# -- claude: the CLI's own count ---------------------------------------------------------------------


def test_each_api_retry_line_of_the_cli_is_a_retry() -> None:
    lines = [json.dumps({"type": "system", "subtype": "init", "skills": ["palette"], "session_id": "s"}),
             *(json.dumps({"type": "system", "subtype": "api_retry", "attempt": n, "max_retries": 5,
                           "retry_delay_ms": 100, "error_status": 429, "error": "rate_limit"}) for n in (1, 2)),
             json.dumps({"type": "result", "result": "ok"})]
    assert parse_stream(lines).retries == 2 and parse_stream(lines[:1]).retries == 0


@pytest.mark.end_to_end
def test_the_retry_bound_reaches_every_host_description() -> None:
    from pytest_palette.hosts.claude import ClaudeHost
    from pytest_palette.hosts.cuga import CugaHost
    from pytest_palette.hosts.react import ReactHost

    settings = HostSettings(model_retries=3)
    assert "not reach it" in CugaHost().describe(route_of(parse_model("rehearsal")), settings)["model_retries"]
    assert ReactHost().describe(route_of(parse_model("openai:m")), settings)["model_retries"] == "3"
    assert "model_retries" not in ReactHost().describe(route_of(parse_model("rehearsal")), settings)  # nothing to retry
    assert ClaudeHost().describe(route_of(parse_model("rehearsal")), settings)["model_retries"] == "3"


# -- whole runs over HTTP ----------------------------------------------------------------------------


def _records(runs: Path) -> list:  # type: ignore[type-arg]
    return sorted(load(runs).latest.values(), key=lambda r: r.case)


def _files_holding(folder: Path, secret: str) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


@pytest.mark.end_to_end
@pytest.mark.slow
def test_react_with_injected_429s_and_500s_judges_every_item_and_counts_each_retry(tmp_path: Path) -> None:
    with RehearsalServer(faults=FaultSchedule.parse(FAULTS)) as server:
        results = run_suite(tmp_path, "openai:rehearsal", "-m", "core", "--palette-base-url",
                            server.openai_base_url, env={"OPENAI_API_KEY": FAKE_KEY})
        injected = server.injected
    assert results == {case: [] for case in CORE}  # no ERROR: run_suite refuses one
    assert {kind for _, kind in injected} == {"429", "500"}
    records = _records(tmp_path / "runs")
    retries = sum(r.usage.retries or 0 for r in records)
    # Every injected fault was one retry of the openai client, and each is in the records.
    assert retries == len(injected) > 5
    turns = [turn for r in records for turn in
             json.loads((tmp_path / "runs" / r.run_id / str(r.workspace) / "turns.json").read_text())["turns"]]
    assert sum(turn["retries"] for turn in turns) == retries
    assert f"{retries} retries" in to_markdown(build_report(load(tmp_path / "runs")))
    assert _files_holding(tmp_path, FAKE_KEY) == []


@pytest.mark.end_to_end
@pytest.mark.slow
@pytest.mark.skipif(find_cli() is None, reason="no Claude Code CLI: pip install claude-agent-sdk")
def test_claude_with_injected_429s_and_500s_judges_every_item_and_counts_the_clis_retries(tmp_path: Path) -> None:
    results = run_suite(tmp_path, "rehearsal", "-m", "core", "-k", ONE, "--host", "claude",
                        "--palette-rehearsal-faults", FAULTS, "--palette-model-retries", "4")
    assert results == {ONE: []}
    records = _records(tmp_path / "runs")
    retries = sum(r.usage.retries or 0 for r in records)
    # What the CLI said it retried, line by line in its own output, is what the records hold.
    said = [json.loads(line) for path in (tmp_path / "runs").rglob("turn-*.jsonl")
            for line in path.read_text().splitlines() if '"api_retry"' in line]
    assert retries == len(said) > 0
    assert {event["error_status"] for event in said} <= {429, 500} and {e["max_retries"] for e in said} == {4}
    assert f"{retries} retries" in to_markdown(build_report(load(tmp_path / "runs")))


@pytest.mark.end_to_end
@pytest.mark.slow
def test_cuga_with_injected_429s_and_500s_judges_every_item_and_counts_the_sdks_retries(
        pytester: pytest.Pytester) -> None:
    """In a process of its own (CUGA pulls numpy, which loads once per process)."""
    from test_cuga_host import _REASON

    if _REASON is not None:
        pytest.skip(f"cuga host unavailable: {_REASON}")
    runs = pytester.path / "runs"
    result = pytester.runpytest_subprocess(
        str(REPO / "cases"), "-m", "core", "-k", ONE, "--host", "cuga", *inner_cache(), "-p",
        "no:randomly", f"--rootdir={REPO}", f"--palette-run-dir={runs}", "--palette-rehearsal-faults", FAULTS,
        timeout=1200)
    result.assert_outcomes(passed=1)
    records = _records(runs)
    retries = sum(r.usage.retries or 0 for r in records)
    assert {r.outcome for r in records} == {"pass"} and all(r.usage.retries is not None for r in records)
    assert retries > 0 and f"{retries} retries" in to_markdown(build_report(load(runs)))


def test_the_model_layer_names_what_went_wrong_with_the_models_last_calls() -> None:
    from pytest_palette.layer.endpoint import ModelCalls, error_message

    seen = ModelCalls()
    assert seen.fault() is None  # no call yet: nothing to blame the model for
    first = seen.sent()
    assert seen.fault() == "the model had not answered a call after 0 s"  # under way: the turn ran out on it
    seen.answered(first, 500, b'{"type": "error", "error": {"type": "api_error", "message": "overloaded\n  now"}}')
    assert seen.fault() == "the model answered HTTP 500: overloaded now"
    seen.dropped(seen.sent(), ConnectionResetError())
    assert seen.fault() == ("the model's connection ended with no answer (ConnectionResetError) (2 failed calls in "
                            "a row)")
    seen.answered(seen.sent(), 200, b"data: {}")
    assert seen.fault() is None  # it answered since: whatever failed the turn was not the model
    seen.answered(seen.sent(), 401, b"<html>no</html>")
    assert seen.fault() == "the model answered HTTP 401"
    # An answer cut short (an upstream's 70 KB error) still gives its message.
    long = json.dumps({"error": {"message": "validation failed: " + "x" * 70_000}}).encode()
    assert error_message(long).startswith("validation failed: xxx") and error_message(long).endswith("…")
    assert error_message(b'{"message": "plain"}') == "plain" and error_message(b"[1, 2]") == ""


#: Each fault the model layer injects on every call, and how a failed turn names it first on every host: the
#: layer's words, whatever its client made of the fault (what a client said follows, in parentheses).
NAMED = {"500:1": "the model answered HTTP 500: injected by the rehearsal server (500)",
         "reset:1": "the model's connection ended with no answer (ConnectionResetError)",
         "slow:1": "the model had not answered a call after # s"}


@pytest.mark.end_to_end
@pytest.mark.slow
@pytest.mark.parametrize("fault", NAMED)
def test_a_fault_injected_in_the_model_layer_is_named_in_the_same_words_on_every_host(
        tmp_path: Path, fault: str) -> None:
    from test_cuga_host import _REASON

    from pytest_palette.hosts.codex import find_codex

    hosts = ["react", *(["claude"] if find_cli() else []), *(["cuga"] if _REASON is None else []),
             *(["codex"] if find_codex() else [])]
    # A slow answer is met by the turn's time running out: long enough for every client to have made its call
    # on a busy machine; the four conversations wait at once.
    sweep = run_session(tmp_path, [str(REPO / "cases"), "-k", "plain_request", f"--host={','.join(hosts)}",
                                   f"--rootdir={REPO}", "--palette-rehearsal-faults", fault,
                                   "--palette-model-retries", "1", "--palette-turn-timeout", "45",
                                   "--palette-conversations", "4"])
    failures = {r.host: (r.outcome, r.failures) for r in load(sweep.runs).latest.values()}
    assert set(failures) == set(hosts), sweep.stdout[-2000:]
    for host, (outcome, said) in failures.items():
        assert outcome == "error" and re.sub(r"\b\d+ s\b", "# s", said[0]).startswith(
            f"{host}: turn 1 failed: {NAMED[fault]}"), said


def test_a_turn_that_fails_after_retries_names_them_on_every_host() -> None:
    from pytest_palette.hosts.base import HostError, HostSession, TurnRecord
    from pytest_palette.run.conversation import _send

    class GivesUp(HostSession):
        """A host whose client retried 3 calls, then failed the turn without saying so (cuga, claude did)."""

        def __init__(self, said: str) -> None:
            self.said = said

        def send(self, message: str, timeout: float) -> TurnRecord:
            error = HostError(self.said)
            error.turn = TurnRecord(sent=message, retries=3)
            raise error

        def close(self) -> None:
            pass

    turn, problem = _send(GivesUp("Error code: 429"), "hi", 1.0)  # type: ignore[abstract]
    assert turn.retries == 3 and problem == "failed: Error code: 429 (after 3 retried model call(s) in this turn)"
    said = "Error code: 429 (after 3 retried model call(s) in this turn)"  # react says it itself: once is enough
    assert _send(GivesUp(said), "hi", 1.0)[1] == f"failed: {said}"  # type: ignore[abstract]


def test_the_model_layers_cause_leads_a_failed_turn_whether_the_client_failed_or_raised() -> None:
    from pytest_palette.hosts.base import HostError, HostSession, TurnRecord
    from pytest_palette.run.conversation import _send

    class Breaks(HostSession):
        def __init__(self, error: Exception) -> None:
            self.error = error

        def send(self, message: str, timeout: float) -> TurnRecord:
            raise self.error

        def close(self) -> None:
            pass

    cause = "the model answered HTTP 500: overloaded"
    failed, raised = Breaks(HostError("x" * 1000)), Breaks(KeyError("y" * 1000))  # type: ignore[abstract]
    for session, how in ((failed, "failed: "), (raised, "raised ")):
        shown = _send(session, "hi", 1.0, cause=lambda: cause)[1]
        assert shown is not None and shown.startswith(f"failed: {cause} ({how}") and "characters cut]" in shown
        assert len(shown) <= 300 + 20  # the client's words cut to leave the cause room
        alone = _send(session, "hi", 1.0)[1]
        assert alone is not None and alone.startswith(how) and cause not in alone
