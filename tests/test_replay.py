"""`--model replay:RUN`: the rule a replayed request is held to, and what a run to replay must be (docs/runs.md,
"Replay"). A whole recorded run replayed on react is tests/test_benchmark_suite.py's."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path, PurePosixPath
from typing import Any

import msgspec
import pytest
from sweeps import Sweep, run_session

from pytest_palette.arena.cassette import Exchange
from pytest_palette.arena.replay import (
    ReplayDiverged,
    ReplayUnavailable,
    WireReplay,
    divergence,
    first_difference,
    recorded_run,
    replay_model,
    whole_stream,
    wire_messages,
)
from pytest_palette.models import ModelUnavailable, parse_model


def message(kind: str, content: str, calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"content": content, "type": kind}
    if kind == "tool":
        data["tool_call_id"] = "call_1"
    if calls is not None:
        data["tool_calls"] = calls
    return {"type": kind, "data": data}


RUN = {"name": "run_command", "args": {"command": "python3 skills/palette/scripts/deck.py status --hold-seconds 60"},
       "id": "call_1", "type": "tool_call"}
RECORDED = [
    message("system", "Skills live in /work/runs/20261204-0800-aaaa/react/plain/work/skills."),
    message("human", "Build a 3-slide deck"),
    message("ai", "", [RUN]),
    message("tool", json.dumps({"state": "done", "done": True, "seconds": 61.2, "out": "/tmp/a/deck.pptx"})),
]


def test_a_request_matches_with_other_paths_times_and_ids() -> None:
    again = [message("system", "Skills live in /work/runs/20261205-0900-bbbb/react/plain/work/skills."),
             RECORDED[1], RECORDED[2],
             message("tool", json.dumps({"state": "done", "done": True, "seconds": 3.0, "out": "/tmp/b/deck.pptx"}))]
    assert divergence(RECORDED, again) is None
    text = [message("tool", "took 61.2 s; wrote /tmp/a/deck.pptx (job 1f2e3d4c5b6a)")]
    assert divergence(text, [message("tool", "took 3.0 s; wrote /tmp/b/deck.pptx (job 99aa88bb77cc)")]) is None


@pytest.mark.parametrize(("changed", "said"), [
    (RECORDED[:3], "it sent 3 message(s) where the recording sent 4; from message 4 it sent none, the recording tool"),
    ([*RECORDED[:1], message("human", "Build a 4-slide deck"), *RECORDED[2:]], "message 2 (human) differs"),
    ([*RECORDED[:2], message("ai", "", [{**RUN, "args": {"command": "ls"}}]), RECORDED[3]], "message 3 (ai) differs"),
    ([*RECORDED[:3], message("tool", json.dumps({"state": "failed", "error": "boom"}))], "message 4 (tool) differs"),
    ([*RECORDED[:3], message("human", "done")], "message 4 is a human message where the recording has a tool"),
])
def test_a_request_that_departs_from_the_recording_is_named(changed: list[dict[str, Any]], said: str) -> None:
    found = divergence(RECORDED, changed)
    assert found is not None and found.startswith(said), found


def exchange(index: int, answer: dict[str, Any] | None, messages: list[dict[str, Any]]) -> Exchange:
    return Exchange(index=index, turn=1, model="rehearsal", provider="rehearsal", started_at=0.0, ended_at=1.0,
                    messages=messages, tools=[], answer=answer, error="" if answer else "RateLimitError: 429")


def test_the_replayed_model_answers_in_order_and_stops_where_the_recording_does() -> None:
    from langchain_core.messages import messages_from_dict

    answer = {"type": "ai", "data": {"content": "Here is the plan.", "type": "ai",
                                     "usage_metadata": {"input_tokens": 9, "output_tokens": 3, "total_tokens": 12}}}
    model = replay_model([exchange(1, answer, RECORDED[:2]), exchange(2, None, RECORDED)], "replay of x from r")
    said = model.invoke(messages_from_dict(RECORDED[:2]))
    assert said.content == "Here is the plan." and said.usage_metadata is None  # no tokens are spent by a replay
    with pytest.raises(ReplayDiverged, match=r"call 2 \(turn 1\): the recorded call failed \(RateLimitError: 429\)"):
        model.invoke(messages_from_dict(RECORDED))
    with pytest.raises(ReplayDiverged, match="call 3: the agent asked the model again, and the recording ends after 2"):
        model.invoke(messages_from_dict(RECORDED))


def test_a_run_to_replay_must_be_a_recorded_run_of_its_own(tmp_path: Path) -> None:
    with pytest.raises(ReplayUnavailable, match="no run folder at"):
        recorded_run(str(tmp_path / "none"))
    with pytest.raises(ReplayUnavailable, match=r"no results\.jsonl with records in"):
        recorded_run(str(tmp_path))
    with pytest.raises(ModelUnavailable, match="name the recorded run folder"):
        parse_model("replay:")
    with pytest.raises(ModelUnavailable, match=re.escape(f"--model replay:{tmp_path}: no results.jsonl")):
        parse_model(f"replay:{tmp_path}")


# -- on the wire: cuga (OpenAI chat), claude (Anthropic), codex (Responses) --------------------------------------------

RECORDED_ROOT, OUR_ROOT = "/work/runs/20261204-0800-aaaa/claude/plain", "/work/runs/20261205-0900-bbbb/claude/plain"
BASH: dict[str, Any] = {"type": "tool_use", "id": "toolu_1", "name": "Bash",
        "input": {"command": f"python3 {RECORDED_ROOT}/work/.claude/skills/palette/scripts/deck.py plan"}}


def anthropic_request(root: str, *, said: str = "Build a 3-slide deck", output: str = '{"state": "drafting"}',
                      date: str = "2026-12-04") -> dict[str, Any]:
    """What the Claude CLI sends at its second call: its system prompt (with its environment), the user's words
    after a reminder, its own tool call, and the command's output with a reminder of the CLI's."""
    call = {**BASH, "input": {"command": BASH["input"]["command"].replace(RECORDED_ROOT, root)}}
    return {"model": "claude-sonnet-4-5", "stream": True, "tools": [{"name": "Bash", "input_schema": {}}],
            "system": [{"type": "text", "text": f"Today is {date}. Memory at {root}/claude/config/projects/"
                                                f"{re.sub('[^A-Za-z0-9]', '-', root)}/memory"}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": f"<system-reminder>cwd {root}/work"
                                                                      "</system-reminder>"},
                                             {"type": "text", "text": said}]},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "plan", "signature": "s1"},
                                                  call]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                              "content": output},
                                             {"type": "text", "text": "<system-reminder>14976461 tokens left"
                                                                      "</system-reminder>"}]}]}


def answer_stream(text: str) -> str:
    """An Anthropic answer streamed as the CLI gets it: `text` and a Bash call, each cut in pieces."""
    from pytest_palette.rehearsal.anthropic_wire import to_sse

    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
               "content": [{"type": "text", "text": text}, BASH], "stop_reason": "tool_use",
               "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 5}}
    return to_sse(message).decode()


def wire_exchange(index: int, request: dict[str, Any], body: str, status: int = 200) -> Exchange:
    messages = [{"role": "system", "content": request["system"]}, *request["messages"]]
    return Exchange(index=index, turn=1, model="anthropic:claude-sonnet-4-5", provider="anthropic",
                    started_at=0.0, ended_at=1.0, messages=messages, tools=request["tools"],
                    answer={"status": status, "content_type": "text/event-stream", "body": body},
                    error="" if status < 400 else f"HTTP {status}", wire="anthropic", root=RECORDED_ROOT)


def assembled(body: bytes | str) -> tuple[list[str], list[str]]:
    """What a client builds from a stream: each part's text, and each tool call's arguments, joined."""
    text = body.decode() if isinstance(body, bytes) else body
    parts: dict[Any, str] = {}
    for frame in text.split("\n\n"):
        data = next((line[5:].strip() for line in frame.splitlines() if line.startswith("data:")), None)
        if data is None or data == "[DONE]":
            continue
        event = json.loads(data)
        delta = event.get("delta") or {}
        if event.get("type") == "content_block_delta":
            parts[event["index"]] = parts.get(event["index"], "") + (delta.get("text") or delta.get("partial_json")
                                                                     or "")
        for choice in event.get("choices") or []:
            piece = choice.get("delta") or {}
            parts["content"] = parts.get("content", "") + (piece.get("content") or "")
            for call in piece.get("tool_calls") or []:
                key = ("call", call["index"])
                parts[key] = parts.get(key, "") + ((call.get("function") or {}).get("arguments") or "")
    return [v for k, v in parts.items() if not isinstance(k, tuple)], [v for k, v in parts.items()
                                                                       if isinstance(k, tuple)]


def test_a_streamed_answer_is_served_whole_and_builds_the_same_message() -> None:
    from pytest_palette.rehearsal.openai_wire import to_sse

    stream = answer_stream("Here is the plan. " * 20)
    joined = whole_stream(stream)
    assert assembled(joined) == assembled(stream) and RECORDED_ROOT in joined
    assert joined.count("content_block_delta") < stream.count("content_block_delta")
    completion = {"id": "c1", "object": "chat.completion", "created": 0, "model": "m", "choices": [
        {"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "Running it. " * 20, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {
                    "name": "run", "arguments": json.dumps({"command": f"ls {RECORDED_ROOT}/" + "x" * 300})}}]}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
    chunked = to_sse(completion, include_usage=True).decode()
    again = whole_stream(chunked)
    assert assembled(again) == assembled(chunked) and again.count("data:") < chunked.count("data:")
    assert again.endswith("data: [DONE]\n\n") and whole_stream('{"plain": "json"}') == '{"plain": "json"}'


def test_a_wire_request_is_read_as_messages_of_the_rule() -> None:
    read = wire_messages("anthropic", [{"role": "system", "content": [{"type": "text", "text": "sys"}]},
                                       *anthropic_request(RECORDED_ROOT)["messages"]])
    assert [m["type"] for m in read] == ["system", "human", "ai", "tool"]
    assert read[2]["data"]["tool_calls"] == [{"name": "Bash", "args": BASH["input"]}]
    assert '{"state": "drafting"}' in read[3]["data"]["content"]
    openai = wire_messages("openai", [
        {"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "run", "arguments": '{"a": 1}'}}]},
        {"role": "tool", "tool_call_id": "c", "content": "ok"},
        {"role": "user", "content": "Execution output:\n{}"}])  # CUGA hands back a code block's output so
    assert [m["type"] for m in openai] == ["system", "human", "ai", "tool", "tool"]
    assert openai[2]["data"]["tool_calls"] == [{"name": "run", "args": {"a": 1}}]


def test_a_replayed_wire_answers_in_order_with_the_item_folder_read_as_its_own() -> None:
    recorded = anthropic_request(RECORDED_ROOT)
    replay = WireReplay([wire_exchange(1, recorded, '{"error": "overloaded"}', status=529),
                         wire_exchange(2, recorded, answer_stream("Here is the plan."))], Path(OUR_ROOT))
    # Another run's folder, another day, other numbers in the client's reminders and the command's output:
    # the same request. A failure recorded is served again, so the client retries as it did.
    sent = anthropic_request(OUR_ROOT, output='{"state": "drafting"}', date="2027-01-31")
    sent["messages"][2]["content"][1]["text"] = "<system-reminder>99 tokens left</system-reminder>"
    body = json.dumps(sent).encode()
    assert replay.answer("POST", "/v1/messages?beta=true", body)[0] == 529
    status, kind, data = replay.answer("POST", "/v1/messages?beta=true", body)
    assert (status, kind, replay.diverged) == (200, "text/event-stream", None)
    [_, arguments] = assembled(data)[0]
    assert json.loads(arguments)["command"].startswith(f"python3 {OUR_ROOT}/work/") and RECORDED_ROOT not in \
        data.decode()
    # Nothing asks a model: its list names the recorded one, a token count is an estimate.
    assert json.loads(replay.answer("GET", "/v1/models", None)[2])["data"][0]["id"] == "claude-sonnet-4-5"
    assert replay.answer("POST", "/v1/messages/count_tokens", b"x" * 40)[2] == b'{"input_tokens": 10}'
    # A call past the end: an error no client retries, in the words the item's ERROR will carry, and kept.
    status, _, data = replay.answer("POST", "/v1/messages", body)
    said = "call 3: the agent asked the model again, and the recording ends after 2 call(s)"
    assert status == 400 and replay.diverged == said and json.loads(data)["error"]["message"] == \
        f"ReplayDiverged: {said}"


@pytest.mark.parametrize(("change", "said"), [
    ({"said": "Build a 4-slide deck"}, "message 2 (human) differs"),
    ({"output": '{"status": "drafting"}'}, "message 4 (tool) differs"),
])
def test_a_wire_request_that_departs_is_answered_with_an_error_naming_it(change: dict[str, str], said: str) -> None:
    replay = WireReplay([wire_exchange(1, anthropic_request(RECORDED_ROOT), answer_stream("ok"))], Path(OUR_ROOT))
    status, _, data = replay.answer("POST", "/v1/messages", json.dumps(anthropic_request(OUR_ROOT, **change)).encode())
    assert status == 400 and replay.diverged is not None and replay.diverged.startswith(
        f"call 1 (turn 1) diverges from the recording: {said}"), replay.diverged
    assert json.loads(data)["error"]["type"] == "invalid_request_error"
    # It stays diverged: every later call gets the same answer.
    assert replay.answer("POST", "/v1/messages", json.dumps(anthropic_request(OUR_ROOT)).encode())[0] == 400


def responses_request(root: str, *, date: str = "2026-12-04", chunk: str = "e0800f",
                      said: str = "Build a 3-slide deck", output: str = "drafting") -> dict[str, Any]:
    """What Codex sends at its second call on the Responses wire: its instructions as a developer message, its
    environment context (folder, date), the user's words, its own call and the call's output with its chunk id."""
    command = json.dumps({"cmd": f"python3 {root}/work/.agents/skills/palette/scripts/deck.py plan"})
    return {"model": "rehearsal", "stream": True, "store": False, "prompt_cache_key": "thread-1",
            "tools": [{"type": "function", "name": "exec_command", "parameters": {}}],
            "input": [
                {"type": "message", "id": "msg_a", "role": "developer",
                 "content": [{"type": "input_text", "text": f"Skills under {root}/codex/home/skills"}]},
                {"type": "message", "id": "msg_b", "role": "user", "content": [
                    {"type": "input_text", "text": f"<environment_context>\n  <cwd>{root}/work</cwd>\n  "
                                                   f"<current_date>{date}</current_date>\n</environment_context>"}]},
                {"type": "message", "id": "msg_c", "role": "user", "content": [{"type": "input_text", "text": said}]},
                {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
                {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "exec_command",
                 "arguments": command, "status": "completed"},
                {"type": "function_call_output", "call_id": "call_1",
                 "output": f"Chunk ID: {chunk}\nWall time: 0.0123 seconds\nProcess exited with code 0\nOutput:\n"
                           f'{{"state": "{output}"}}'}]}


def responses_stream(text: str, root: str) -> str:
    """A Responses answer streamed as Codex gets it: words, then a call naming a path, each cut in pieces."""
    from pytest_palette.rehearsal.responses_wire import to_sse

    call = {"type": "function_call", "id": "fc_2", "call_id": "call_2", "name": "exec_command", "status": "completed",
            "arguments": json.dumps({"cmd": f"python3 {root}/work/.agents/skills/palette/scripts/deck.py start"})}
    said = {"type": "message", "id": "msg_2", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}
    return to_sse({"id": "resp_1", "object": "response", "created_at": 0, "model": "rehearsal",
                   "status": "completed", "output": [said, call], "usage": None}).decode()


def test_a_responses_request_replays_in_another_folder_on_another_day_and_its_answer_reads_whole() -> None:
    from pytest_palette.arena.cassette import request_messages
    from pytest_palette.arena.replay import answer_words

    messages, tools = request_messages("responses", json.dumps(responses_request(RECORDED_ROOT)).encode())
    read = wire_messages("responses", messages)
    # The reasoning item is the model's own, not a message; the call and its output are the rule's ai and tool.
    assert [m["type"] for m in read] == ["system", "human", "human", "ai", "tool"] and tools[0]["name"] == \
        "exec_command"
    assert read[3]["data"]["tool_calls"][0]["name"] == "exec_command"
    recorded = Exchange(index=1, turn=1, model="openai:rehearsal", provider="openai", started_at=0.0, ended_at=1.0,
                        messages=messages, tools=tools, wire="responses", root=RECORDED_ROOT,
                        answer={"status": 200, "content_type": "text/event-stream",
                                "body": responses_stream("Building it. " * 30, RECORDED_ROOT)})
    # Another run's folder, another day, another chunk id and wall time: the same request. A chunk id may hold no
    # decimal digit (CI once replayed one that did not, against a recording's that did).
    for chunk in ("fcdeab", "3e2909"):
        sent = json.dumps(responses_request(OUR_ROOT, date="2027-01-31", chunk=chunk)).encode()
        replay = WireReplay([recorded, recorded], Path(OUR_ROOT))
        status, kind, data = replay.answer("POST", "/responses", sent)
        assert (status, kind, replay.diverged) == (200, "text/event-stream", None), chunk
    body = data.decode()
    assert RECORDED_ROOT not in body and f"python3 {OUR_ROOT}/work/" in body
    # The pieces of each part are joined: fewer events, the same words and call.
    pieces = '"response.output_text.delta"'
    assert body.count(pieces) == 1 < responses_stream("Building it. " * 30, RECORDED_ROOT).count(pieces)
    served = Exchange(**{**msgspec.structs.asdict(recorded), "root": OUR_ROOT,
                         "answer": {"status": 200, "content_type": "text/event-stream", "body": body}})
    assert answer_words(served) == answer_words(recorded) == ("Building it. " * 30).strip() + \
        '\n→ exec_command {"cmd": "python3 <item>/work/.agents/skills/palette/scripts/deck.py start"}'
    # What the user said, or what the command answered, departs: named as on every wire.
    status, _, data = replay.answer("POST", "/responses",
                                    json.dumps(responses_request(OUR_ROOT, output="failed")).encode())
    assert status == 400 and replay.diverged is not None and replay.diverged.startswith(
        "call 2 (turn 1) diverges from the recording: message 5 (tool) differs"), replay.diverged
    assert json.loads(data)["error"]["message"].startswith("ReplayDiverged: call 2")


def test_a_turn_of_a_diverged_replay_is_an_error_in_its_words_whatever_the_client_did() -> None:
    from pytest_palette.hosts.base import HostError, TurnRecord, held_to_recording

    replay = WireReplay([], Path(OUR_ROOT))
    assert held_to_recording(replay, lambda: TurnRecord(sent="hi", answer="ok")).answer == "ok"
    replay.answer("POST", "/chat/completions", b"{}")

    def fails() -> TurnRecord:
        error = HostError("the CLI ended with an API error")
        error.turn = TurnRecord(sent="hi")
        raise error

    for send in (lambda: TurnRecord(sent="hi", answer="went on"), fails):
        with pytest.raises(HostError, match=r"^ReplayDiverged: call 1: the agent asked the model again") as raised:
            held_to_recording(replay, send)
        assert raised.value.turn is not None and raised.value.turn.error == str(raised.value)
    with pytest.raises(HostError, match=r"^the CLI ended"):  # a replay that has not diverged: the client's own error
        held_to_recording(WireReplay([], Path(OUR_ROOT)), fails)


def test_the_harness_endpoint_records_a_call_to_a_keyed_provider_and_replays_it_with_no_key(tmp_path: Path) -> None:
    import http.client

    from pytest_palette.arena.cassette import CASSETTE_NAME, Cassette, WireRecorder, read_cassette
    from pytest_palette.layer.endpoint import KeyForwarder
    from pytest_palette.rehearsal.server import RehearsalServer

    key = "sk-palette-fake-key-93c1d7"
    request = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 100, "stream": True,
                          "messages": [{"role": "user", "content": "hello"}]}).encode()

    def post(forwarder: KeyForwarder) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", int(forwarder.base_url.rsplit(":", 1)[1]), timeout=30)
        connection.request("POST", "/v1/messages?beta=true", body=request,
                           headers={"x-api-key": forwarder.token, "Content-Type": "application/json"})
        try:
            answer = connection.getresponse()
            return answer.status, answer.read()
        finally:
            connection.close()

    folder = tmp_path / "claude" / "plain"
    with RehearsalServer(key=key) as server:
        assert post(KeyForwarder(server.base_url, {}, loopback=True).start())[0] == 401  # the provider checks its key
        cassette = Cassette(folder / CASSETTE_NAME, "anthropic:claude-sonnet-4-5", "anthropic", [key])
        recording = KeyForwarder(server.base_url, {"x-api-key": key},
                                 record=WireRecorder(cassette, "anthropic", folder, lambda: 1), loopback=True).start()
        try:
            status, live = post(recording)
        finally:
            recording.stop()
    assert status == 200 and key.encode() not in (folder / CASSETTE_NAME).read_bytes()
    [kept] = read_cassette(folder)
    assert (kept.wire, kept.root, kept.turn, kept.messages, kept.answer and kept.answer["status"]) == \
        ("anthropic", str(folder), 1, [{"role": "user", "content": "hello"}], 200)
    # The provider is gone; the recording answers the same request as it did, through the same endpoint.
    replaying = KeyForwarder(None, {}, replay=WireReplay([kept], folder), loopback=True).start()
    try:
        status, again = post(replaying)
    finally:
        replaying.stop()
    assert status == 200 and assembled(again) == assembled(live)


def test_two_recordings_part_at_the_first_answer_that_differs() -> None:
    def said(index: int, text: str, error: str = "") -> Exchange:
        answer = {"type": "ai", "data": {"content": text, "type": "ai", "tool_calls": []}}
        return Exchange(index=index, turn=1 + index // 3, model="m", provider="p", started_at=0.0, ended_at=1.0,
                        messages=[], tools=[], answer=None if error else answer, error=error)

    one = [said(1, "plan"), said(2, "", error="RateLimitError: 429"), said(3, "build")]
    assert first_difference(one, [said(1, "plan"), said(2, "build")]) is None  # a retry is not an answer
    assert first_difference(one, [said(1, "plan"), said(2, "build now")]) == \
        "answer 2 differs (turn 2, call 3 | turn 1, call 2): 'build' | 'build now'"
    assert first_difference(one, one[:1]) == "the same first 1 answer(s); then one recording ends (2 answer(s) | 1)"


# -- the acceptance run: a keyed provider over HTTP, recorded on every host, replayed with it gone ---------------

#: A fake key with a shape no file of ours holds by accident: the provider requires it, nothing may write it.
FAKE_KEY = "sk-palette-fake-key-7b20e4"
#: Three core cases, on every host: each cuga conversation costs seconds of CPU to start.
THREE = ("plain_request", "pasted_notes", "conditional_yes")
TAMPERED = "pasted_notes"
#: Its cassette removed on the wire hosts: skipped with the reason.
UNRECORDED = "plain_request"


def _record(folder: Path, hosts: list[str], model: str, url: str, key_variable: str) -> Sweep:
    """Record THREE on `hosts` through `url` (a provider requiring FAKE_KEY), as a user runs it."""
    repo = Path(__file__).resolve().parent.parent
    return run_session(folder, [str(repo / "cases"), "-k", " or ".join(THREE), f"--host={','.join(hosts)}",
                                f"--model={model}", f"--palette-base-url={url}", "--palette-record",
                                "--palette-run-id=recorded", f"--rootdir={repo}"], env={key_variable: FAKE_KEY})


@pytest.mark.end_to_end
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_run_recorded_from_a_keyed_provider_replays_on_every_host_with_the_provider_gone(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from test_cuga_host import _REASON

    from pytest_palette.commands import main
    from pytest_palette.hosts.claude import find_cli
    from pytest_palette.hosts.codex import find_codex
    from pytest_palette.rehearsal.server import RehearsalServer
    from pytest_palette.results.ledger import load
    from pytest_palette.results.model import ReportError, build_report

    repo = Path(__file__).resolve().parent.parent
    # react and cuga speak OpenAI's chat wire, codex its Responses wire, claude Anthropic's: one recording each
    # of OpenAI's and Anthropic's, from one provider.
    wires = {"openai": ["react"] + (["cuga"] if _REASON is None else []) + (["codex"] if find_codex() else []),
             "anthropic": ["claude"] if find_cli() is not None else []}
    with RehearsalServer(key=FAKE_KEY) as provider:
        urls = {"openai": provider.openai_base_url, "anthropic": provider.base_url}
        recorded = {"openai": _record(tmp_path / "openai", wires["openai"], "openai:rehearsal",
                                      provider.openai_base_url, "OPENAI_API_KEY")}
        if wires["anthropic"]:
            recorded["anthropic"] = _record(tmp_path / "anthropic", wires["anthropic"], "anthropic:claude-sonnet-4-5",
                                            provider.base_url, "ANTHROPIC_API_KEY")
        served = provider.served
    assert {route for route, _ in served} == {"/v1/chat/completions"} | (
        {"/v1/messages"} if wires["anthropic"] else set()) | (
        {"/v1/responses"} if "codex" in wires["openai"] else set())
    for wire, sweep in recorded.items():
        records = load(sweep.runs / "recorded").latest.values()
        assert {(r.host, r.case, r.outcome) for r in records} == \
            {(host, case, "pass") for host in wires[wire] for case in THREE}, sweep.stdout[-2000:]
        assert all(r.usage.input_tokens and r.usage.retries in (0, None) for r in records)  # counted, none needed
        url = urls[wire]
        assert {r.terms.label for r in records} == {f"{r.terms.model} at {url}" for r in records}
    # The provider is gone. Each recording is replayed from a copy in which one answer of TAMPERED is taken out on
    # the wire hosts, and UNRECORDED's cassette is gone (react's own are the good sweep's test).
    for wire, sweep in recorded.items():
        copy = tmp_path / f"{wire}-copy"
        shutil.copytree(sweep.runs / "recorded", copy, symlinks=True)
        for host in set(wires[wire]) - {"react"}:
            cassette = copy / host / TAMPERED / "cassette.jsonl"
            lines = cassette.read_text(encoding="utf-8").splitlines(keepends=True)
            # The third call's, by its number: a wire's lines are written as the answers end, not as calls begin.
            cassette.write_text("".join(line for line in lines if json.loads(line)["index"] != 3), encoding="utf-8")
            (copy / host / UNRECORDED / "cassette.jsonl").unlink()
        # Two recordings of one case side by side: the first answer that differs, in the tampered items only.
        capsys.readouterr()
        tampered = set(wires[wire]) - {"react"}
        assert main(["diff", str(sweep.runs / "recorded"), str(copy)]) == (1 if tampered else 0)
        said = capsys.readouterr().out
        assert all(f"{host}/{TAMPERED}: answer 3 differs (turn 1, call 3 | turn 1, call 4)" in said
                   for host in tampered), said
        assert all(f"{host}/{UNRECORDED}: recorded in RUN_A only" in said for host in tampered), said
        assert said.count("differs (") == len(tampered) and \
            f"{2 * len(tampered)} of {len(THREE) * len(wires[wire])} item(s) differ" in said
        replayed = run_session(tmp_path / f"{wire}-replay", [str(repo / "cases"), "-k", " or ".join(THREE),
                                                            f"--host={','.join(wires[wire])}",
                                                            f"--model=replay:{copy}", f"--rootdir={repo}"])
        before = {(r.host, r.case): r for r in load(sweep.runs / "recorded").latest.values()}
        after = {(r.host, r.case): r for r in load(replayed.runs).latest.values()}
        assert set(after) == set(before), replayed.stdout[-3000:]
        for (host, case), now in after.items():
            was = before[host, case]
            if host != "react" and case == TAMPERED:
                assert now.outcome == "error" and now.failures[0].startswith(
                    f"{host}: turn 1 failed: ReplayDiverged: call 3 (turn 1) diverges from the recording: it sent"), \
                    now.failures
                continue
            if host != "react" and case == UNRECORDED:
                assert now.outcome == "skipped" and f"nothing to replay: {host}/{UNRECORDED} has no cassette" in \
                    now.failures[0], now.failures
                continue
            assert was.judged is not None and now.judged is not None, (host, case, now.failures)
            # Every verdict, slide count, call chain and score is the recording's: the commands ran again.
            assert (now.outcome, now.failures, now.judged.slides, now.judged.calls, now.judged.score) == \
                (was.outcome, was.failures, was.judged.slides, was.judged.calls, was.judged.score), (host, case)
            assert now.terms.label == f"replay of {was.terms.model} from recorded"
            assert now.usage.input_tokens is None and now.usage.cost_usd is None  # a replay spends nothing
        with pytest.raises(ReportError, match="under 2 fingerprints"):  # live and replayed are never pooled
            build_report([*before.values(), *after.values()])
    # The key went to the provider on every request, and nowhere else: no cassette, log, trace, report or JUnit.
    holding = [p for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink()
               and FAKE_KEY.encode() in p.read_bytes()]
    assert holding == []


def test_a_cassette_is_served_only_as_an_answer_whatever_it_was_made_to_hold() -> None:
    # A cassette may come from anywhere (a bug report): its answer's status and type are checked before serving.
    request = anthropic_request(RECORDED_ROOT)
    forged = msgspec.structs.replace(wire_exchange(1, request, "{}"), answer={
        "status": 200, "content_type": "text/plain\r\nX-Injected: 1", "body": "{}"})
    assert WireReplay([forged], Path(RECORDED_ROOT)).answer("POST", "/v1/messages", json.dumps(request).encode())[1] \
        == "application/octet-stream"
    broken = msgspec.structs.replace(forged, answer={"status": "200 OK", "body": "{}"})
    replay = WireReplay([broken], Path(RECORDED_ROOT))
    assert replay.answer("POST", "/v1/messages", json.dumps(request).encode())[0] == 400
    assert replay.diverged == "call 1 (turn 1): the recording kept no answer to serve"


def test_a_replayed_item_needs_a_cassette_in_its_hosts_own_serialisation(tmp_path: Path) -> None:
    from ledger_records import as_record, record

    from pytest_palette.arena.cassette import CASSETTE_NAME, Cassette
    from pytest_palette.arena.replay import RecordedRun
    from pytest_palette.arena.workspace import Workspace
    from pytest_palette.hosts.base import HostError, NothingRecorded, recorded_exchanges
    from pytest_palette.models import ModelSpec

    kept = msgspec.structs.replace(as_record(record()), workspace="react/three_slides")
    model = ModelSpec("replay:r", "replay", "r", recording=RecordedRun(tmp_path, "r1", "rehearsal", (kept,)))
    item = Workspace(tmp_path / "react" / "three_slides", PurePosixPath("react/three_slides"))
    with pytest.raises(NothingRecorded, match=r"^nothing to replay: react/three_slides has no cassette"):
        recorded_exchanges(model, item, "langchain")
    Cassette(item.folder / CASSETTE_NAME, "anthropic:m", "anthropic").add(
        wire_exchange(1, anthropic_request(RECORDED_ROOT), "{}"))
    with pytest.raises(HostError, match="recorded as anthropic exchanges; this host's client speaks langchain"):
        recorded_exchanges(model, item, "langchain")
    assert [e.wire for e in recorded_exchanges(model, item, "anthropic")] == ["anthropic"]
