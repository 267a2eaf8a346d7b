"""The rehearsal model over HTTP: recorded client requests replayed against a live server on 127.0.0.1.

The request shapes are the ones the hosts notes document for CUGA (OpenAI chat completions, codeact
and function calling) and the Claude Code CLI (Anthropic Messages, `?beta=true`). Each test asserts
that the policy's decision arrives in that client's wire format. The last test drives the real
skill end to end over the codeact wire, executing each returned code block for real.
"""

from __future__ import annotations

import ast
import asyncio
import http.client
import io
import json
import logging
import os
import re
import shlex
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from pytest_palette.judge.evidence import inspect_deck, newest_deck
from pytest_palette.rehearsal.anthropic_wire import SIDE_REPLY, to_conversation
from pytest_palette.rehearsal.conversation import Action, Conversation, Reply
from pytest_palette.rehearsal.policy import RehearsalPolicy, catalogue
from pytest_palette.rehearsal.server import RehearsalServer
from pytest_palette.skill import SkillCard, install, load_skill

CARD = load_skill("palette")
DECK = "python3 skills/palette/scripts/deck.py"
NOTES = "# Q3\n## Revenue\n- $4.2M, up 12%\n## Hiring\n- 14 engineers"
REQUEST = "Turn these notes into a deck for the board"
PLAN_TEXT = "# Q3 for the board\nAudience: the board\n\n## Revenue\n- $4.2M\n\n## Hiring\n- 14 engineers\n"
FOUND_NOTHING = json.dumps({"root": ".", "found": [], "note": "no finished deck under this root"})
PLAN_DONE = json.dumps({"state": "done", "done": True, "plan": "/w/plan.md", "text": PLAN_TEXT})
CODE = re.compile(r"```python\n(.*?)```", re.S)

# -- CUGA (codeact): system prompt with <available_skills>, results as "Execution output:" ----------

CUGA_SYSTEM = (
    "You are CUGA, a helpful agent. Answer with a ```python block to act, or plain text to reply.\n"
    "Tools you can await:\n- run_command: run a shell command in the workspace\n\n"
    "## Agent skills\n<available_skills>\n"
    f"- **palette**: {CARD.description}\n"
    "</available_skills>\nIf a skill applies to the request, you MUST load it before anything else.\n"
)


def cuga_load_output(card: SkillCard) -> str:
    """What CUGA's load_skill prints: a preamble, then STEP 1 and the SKILL.md body."""
    return (f"Skill '{card.name}' loaded from /workspace/skills/{card.name}/.\n\n"
            f"STEP 1 — SKILL INSTRUCTIONS:\n{card.body}")


def execution(stdout: str, variables: str = "(none)") -> dict[str, str]:
    return {"role": "user", "content": f"Execution output:\n{stdout}\n\nVariables Summary:\n{variables}"}


def said(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


def code_call(content: str) -> tuple[str, str]:
    """The single tool call in a codeact answer, read with ast (independently of the server's parser)."""
    blocks = CODE.findall(content)
    assert len(blocks) == 1, content
    calls = [(node.func.id, ast.literal_eval(node.args[0])) for node in ast.walk(ast.parse(blocks[0]))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
             and node.func.id in {"load_skill", "run_command"}]
    assert len(calls) == 1, blocks[0]
    return calls[0]


def args_of(command: str) -> dict[str, str]:
    tokens = shlex.split(command)
    return {tokens[i][2:]: tokens[i + 1] for i in range(len(tokens) - 1) if tokens[i].startswith("--")}


def cuga_history(opening: str) -> list[dict[str, str]]:
    """A codeact conversation up to the point the agent has loaded the skill and looked (found nothing)."""
    return [
        said("system", CUGA_SYSTEM), said("user", opening),
        said("assistant", '```python\nr = await load_skill("palette")\nprint(r)\n```'),
        execution(cuga_load_output(CARD), "r (str): 'Skill ...'"),
        said("assistant", f"```python\nprint(await run_command({DECK + ' find --root .'!r}))\n```"),
        execution(FOUND_NOTHING),
    ]


# -- HTTP ------------------------------------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[RehearsalServer]:
    with RehearsalServer() as running:
        yield running


def call(url: str, body: Any = None, method: str = "POST", raw: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, str, bytes]:
    """One request over real HTTP: (status, content type, body). Error statuses are returned too."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Content-Type", ""), error.read()


def chat(server: RehearsalServer, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    # The fields CUGA sends (notes 3.1 Tier B): model, max_completion_tokens, temperature, stream false.
    body = {"model": "fake-model", "messages": messages, "max_completion_tokens": 4096, "temperature": 0,
            "stream": False, **extra}
    status, kind, data = call(f"{server.openai_base_url}/chat/completions", body)
    assert status == 200 and kind == "application/json", data
    completion: dict[str, Any] = json.loads(data)
    return completion


def sse(data: bytes) -> list[tuple[str | None, str]]:
    """Server-sent events as (event name, data) pairs, in order."""
    events = []
    for frame in data.decode().split("\n\n"):
        if not frame.strip():
            continue
        fields = dict(line.split(": ", 1) for line in frame.splitlines())
        events.append((fields.get("event"), fields["data"]))
    return events


# -- routes ----------------------------------------------------------------------------------------


def test_models_lists_the_rehearsal_model(server: RehearsalServer) -> None:
    status, kind, data = call(f"{server.base_url}/v1/models", method="GET")
    assert status == 200 and kind == "application/json"
    assert [m["id"] for m in json.loads(data)["data"]] == ["rehearsal"]


def test_a_server_given_a_key_answers_only_requests_that_carry_it() -> None:
    with RehearsalServer(key="sk-fake-0123") as keyed:
        url = f"{keyed.openai_base_url}/models"
        assert call(url, method="GET")[0] == 401
        assert call(url, method="GET", headers={"x-api-key": "sk-other"})[0] == 401
        assert call(url, method="GET", headers={"x-api-key": "sk-fake-0123"})[0] == 200
        assert call(url, method="GET", headers={"Authorization": "Bearer sk-fake-0123"})[0] == 200
        assert keyed.answers()  # the harness's own probe carries it


def test_unknown_routes_are_404_and_bad_json_is_400(server: RehearsalServer) -> None:
    for method, path in (("GET", "/v1/nothing"), ("POST", "/v1/completions"), ("GET", "/v1/messages")):
        status, kind, data = call(f"{server.base_url}{path}", {} if method == "POST" else None, method=method)
        assert status == 404 and kind == "application/json"
        assert json.loads(data)["error"]["type"] == "not_found_error"
    for raw in (b"{not json", b"[1, 2]"):
        status, _, data = call(f"{server.base_url}/v1/messages?beta=true", raw=raw)
        assert status == 400 and json.loads(data)["error"]["type"] == "invalid_request_error"


def test_a_chunked_request_body_is_read(server: RehearsalServer) -> None:
    body = json.dumps(claude_request(CLAUDE_OPENING)).encode()
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request("POST", "/v1/messages?beta=true", body=iter([body[:100], body[100:]]),
                           headers={"Content-Type": "application/json"}, encode_chunked=True)
        response = connection.getresponse()
        assert response.status == 200
        assert json.loads(response.read())["content"][0]["input"] == {"skill": "palette"}
    finally:
        connection.close()


def test_the_server_is_gone_after_the_block(tmp_path: Path) -> None:
    with RehearsalServer() as running:
        url = f"{running.base_url}/v1/models"
        assert call(url, method="GET")[0] == 200
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=5)


def test_the_policy_chosen_at_construction_answers_both_wires() -> None:
    class Holds(RehearsalPolicy):
        def next_action(self, conversation: Conversation) -> Action:
            return Reply(f"held after {len(conversation.user_messages())} user message(s)")

    with RehearsalServer(Holds()) as running:
        content = chat(running, [said("system", CUGA_SYSTEM), said("user", "Build a deck")])
        assert content["choices"][0]["message"]["content"] == "held after 1 user message(s)"
        status, _, data = call(f"{running.base_url}/v1/messages?beta=true", claude_request(CLAUDE_OPENING))
        assert status == 200 and json.loads(data)["content"][0]["text"] == "held after 1 user message(s)"


def test_headers_carrying_secrets_are_never_logged(server: RehearsalServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="pytest_palette.rehearsal.server")
    secrets = {"x-api-key": "sk-ant-very-secret", "Authorization": "Bearer also-very-secret"}
    call(f"{server.base_url}/v1/messages?beta=true", claude_request(CLAUDE_OPENING), headers=secrets)
    assert "POST /v1/messages?beta=true" in caplog.text
    assert "very-secret" not in caplog.text


# -- CUGA codeact ----------------------------------------------------------------------------------


def test_codeact_first_answer_loads_the_palette_skill(server: RehearsalServer) -> None:
    completion = chat(server, [said("system", CUGA_SYSTEM), said("user", "Build a 3-slide deck on prompt caching")])
    assert completion["object"] == "chat.completion" and completion["model"] == "fake-model"
    choice = completion["choices"][0]
    assert choice["finish_reason"] == "stop" and "tool_calls" not in choice["message"]
    content = choice["message"]["content"]
    assert code_call(content) == ("load_skill", "palette")
    assert 'r = await load_skill("palette")' in content and "print(r)" in content
    usage = completion["usage"]
    assert usage["prompt_tokens"] > 0 and usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_codeact_after_the_skill_text_it_looks_before_acting(server: RehearsalServer) -> None:
    messages = cuga_history("Build a 3-slide deck on prompt caching")[:4]
    content = chat(server, messages)["choices"][0]["message"]["content"]
    assert code_call(content) == ("run_command", f"{DECK} find --root .")
    assert content.startswith("```python\nprint(await run_command(")


def test_codeact_plans_with_the_request_verbatim_and_the_notes_in_context(server: RehearsalServer) -> None:
    content = chat(server, cuga_history(f"{REQUEST}\n\n{NOTES}"))["choices"][0]["message"]["content"]
    kind, command = code_call(content)
    assert kind == "run_command" and command.startswith(f"{DECK} plan ")
    assert args_of(command) == {"request": REQUEST, "out": "plan.md", "context": NOTES}


def test_codeact_reads_a_result_despite_a_variables_summary_with_braces(server: RehearsalServer) -> None:
    messages = cuga_history("Build a deck on tides")
    plan = f"```python\nprint(await run_command({DECK + ' plan --request x --out plan.md'!r}))\n```"
    messages += [said("assistant", plan),
                 execution(json.dumps({"state": "running", "done": False}), "r (dict): {'a': {'b': 1}}")]
    content = chat(server, messages)["choices"][0]["message"]["content"]
    assert code_call(content) == ("run_command", f"{DECK} plan-status --out plan.md")


def test_codeact_presents_the_plan_as_plain_text_and_a_yes_starts_a_new_turn(server: RehearsalServer) -> None:
    messages = cuga_history(REQUEST) + [
        said("assistant", f"```python\nprint(await run_command({DECK + ' plan --request x --out plan.md'!r}))\n```"),
        execution(PLAN_DONE)]
    presented = chat(server, messages)["choices"][0]["message"]["content"]
    assert "```" not in presented and PLAN_TEXT.strip() in presented and "Reply **yes**" in presented
    messages += [said("assistant", presented), said("user", "yes")]
    content = chat(server, messages)["choices"][0]["message"]["content"]
    assert code_call(content) == ("run_command", f"{DECK} find --root .")
    messages += [said("assistant", content), execution(FOUND_NOTHING)]
    content = chat(server, messages)["choices"][0]["message"]["content"]
    assert code_call(content) == ("run_command", f"{DECK} start --plan plan.md --out-dir ./deck")


def test_codeact_streams_chunks_that_reassemble_into_the_same_answer(server: RehearsalServer) -> None:
    messages = cuga_history(f"{REQUEST}\n\n{NOTES}")
    whole = chat(server, messages)["choices"][0]["message"]["content"]
    body = {"model": "fake-model", "messages": messages, "stream": True, "stream_options": {"include_usage": True}}
    status, kind, data = call(f"{server.openai_base_url}/chat/completions", body)
    assert status == 200 and kind == "text/event-stream"
    events = [payload for _, payload in sse(data)]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(payload) for payload in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    deltas = [c["choices"][0] for c in chunks if c["choices"]]
    assert deltas[0]["delta"]["role"] == "assistant" and deltas[-1]["finish_reason"] == "stop"
    assert len(deltas) > 3  # really split, so a client must reassemble
    assert "".join(d["delta"].get("content") or "" for d in deltas) == whole
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0
    # The same usage a whole answer reports, and only when asked for (stream_options.include_usage).
    assert chunks[-1]["usage"] == chat(server, messages)["usage"]
    status, _, plain = call(f"{server.openai_base_url}/chat/completions", body | {"stream_options": {}})
    assert status == 200 and all("usage" not in json.loads(payload) for _, payload in sse(plain)[:-1])


# -- OpenAI function calling -----------------------------------------------------------------------

FUNCTION_TOOLS = [
    {"type": "function", "function": {"name": "load_skill", "description": "Load a skill's instructions.",
                                      "parameters": {"type": "object", "properties": {
                                          "name": {"type": "string"}, "args": {"type": "string"}},
                                          "required": ["name"]}}},
    {"type": "function", "function": {"name": "run_command", "description": "Run a shell command.",
                                      "parameters": {"type": "object", "properties": {
                                          "command": {"type": "string"}}, "required": ["command"]}}},
]


def tool_call(call_id: str, name: str, args: dict[str, str]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}


def test_function_calling_answers_with_tool_calls(server: RehearsalServer) -> None:
    messages: list[dict[str, Any]] = [said("system", CUGA_SYSTEM), said("user", f"{REQUEST}\n\n{NOTES}")]
    choice = chat(server, messages, tools=FUNCTION_TOOLS)["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    [load] = choice["message"]["tool_calls"]
    assert load["type"] == "function" and load["function"]["name"] == "load_skill"
    assert json.loads(load["function"]["arguments"]) == {"name": "palette"}
    messages += [tool_call(load["id"], "load_skill", {"name": "palette"}),
                 {"role": "tool", "tool_call_id": load["id"], "content": CARD.body}]
    [find] = chat(server, messages, tools=FUNCTION_TOOLS)["choices"][0]["message"]["tool_calls"]
    assert find["function"]["name"] == "run_command" and find["id"] != load["id"]
    assert json.loads(find["function"]["arguments"]) == {"command": f"{DECK} find --root ."}
    messages += [tool_call(find["id"], "run_command", json.loads(find["function"]["arguments"])),
                 {"role": "tool", "tool_call_id": find["id"], "content": [{"type": "text", "text": FOUND_NOTHING}]}]
    [plan] = chat(server, messages, tools=FUNCTION_TOOLS)["choices"][0]["message"]["tool_calls"]
    assert args_of(json.loads(plan["function"]["arguments"])["command"])["context"] == NOTES


def test_function_calling_streams_arguments_that_reassemble(server: RehearsalServer) -> None:
    messages = [said("system", CUGA_SYSTEM), said("user", "Build a deck on tides"),
                tool_call("c1", "load_skill", {"name": "palette"}),
                {"role": "tool", "tool_call_id": "c1", "content": CARD.body}]
    body = {"model": "m", "messages": messages, "tools": FUNCTION_TOOLS, "stream": True}
    _, _, data = call(f"{server.openai_base_url}/chat/completions", body)
    deltas = [json.loads(p)["choices"][0] for _, p in sse(data) if p != "[DONE]"]
    calls = [c for d in deltas for c in d["delta"].get("tool_calls", [])]
    assert calls[0]["function"]["name"] == "run_command" and calls[0]["id"].startswith("call_")
    arguments = "".join(c["function"]["arguments"] for c in calls)
    assert json.loads(arguments) == {"command": f"{DECK} find --root ."}
    assert deltas[-1]["finish_reason"] == "tool_calls"


# -- Claude Code (Anthropic Messages) --------------------------------------------------------------

BASE = "/home/u/project/.claude/skills/palette"
CLAUDE_SYSTEM = [{"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
                 {"type": "text", "text": "Use the Skill tool for skills.\n - git: never force-push",
                  "cache_control": {"type": "ephemeral"}}]
CLAUDE_TOOLS = [
    {"name": "Bash", "description": "Executes a bash command", "input_schema": {"type": "object", "properties": {
        "command": {"type": "string"}, "description": {"type": "string"}, "timeout": {"type": "number"}},
        "required": ["command"]}},
    {"name": "Read", "description": "Reads a file", "input_schema": {"type": "object", "properties": {
        "file_path": {"type": "string"}}}},
    {"name": "Skill", "description": "Execute a skill", "input_schema": {"type": "object", "properties": {
        "skill": {"type": "string"}, "args": {"type": "string"}}, "required": ["skill"]}},
]
SKILLS_REMINDER = ("<system-reminder>\nThe following skills are available for use with the Skill tool:\n\n"
                   f"- palette: {CARD.description}\n</system-reminder>")
CONTEXT_REMINDER = "<system-reminder>\nAs you answer, use this context:\n- cwd: /home/u/project\n</system-reminder>"
CLAUDE_OPENING = {"role": "user", "content": [{"type": "text", "text": SKILLS_REMINDER},
                                              {"type": "text", "text": CONTEXT_REMINDER},
                                              {"type": "text", "text": f"{REQUEST}\n\n{NOTES}"}]}


def claude_request(*messages: dict[str, Any], stream: bool = False, tools: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "claude-sonnet-4-5", "max_tokens": 32000, "system": CLAUDE_SYSTEM,
                            "messages": list(messages), "stream": stream}
    if tools:
        body["tools"] = CLAUDE_TOOLS
    return body


def tool_use(call_id: str, name: str, given: dict[str, str]) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "tool_use", "id": call_id, "name": name, "input": given}]}


def tool_result(call_id: str, content: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": False}


def skill_loaded(together: bool) -> list[dict[str, Any]]:
    """The Skill call, its result, and the CLI's "Base directory" message with the SKILL.md body."""
    launched = tool_result("toolu_1", "Launching skill: palette")
    base = {"type": "text", "text": f"Base directory for this skill: {BASE}\n\n{CARD.body}"}
    answer = [{"role": "user", "content": [launched, base]}] if together else [
        {"role": "user", "content": [launched]}, {"role": "user", "content": [base]}]
    return [CLAUDE_OPENING, tool_use("toolu_1", "Skill", {"skill": "palette"}), *answer]


def messages_call(server: RehearsalServer, body: dict[str, Any]) -> tuple[str, bytes]:
    status, kind, data = call(f"{server.base_url}/v1/messages?beta=true", body,
                              headers={"anthropic-version": "2023-06-01", "x-api-key": "sk-ant-fake"})
    assert status == 200, data
    return kind, data


def reassemble(events: list[tuple[str | None, str]]) -> list[dict[str, Any]]:
    """Rebuild the content blocks from a Messages stream, the way a client does."""
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, str] = {}
    for name, payload in events:
        data = json.loads(payload)
        assert data["type"] == name  # the event line and the data agree
        if name == "content_block_start":
            blocks[data["index"]] = dict(data["content_block"])
        elif name == "content_block_delta":
            delta = data["delta"]
            if delta["type"] == "text_delta":
                blocks[data["index"]]["text"] += delta["text"]
            else:
                partial[data["index"]] = partial.get(data["index"], "") + delta["partial_json"]
    for index, text in partial.items():
        blocks[index]["input"] = json.loads(text)
    return [blocks[i] for i in sorted(blocks)]


def test_claude_first_answer_streams_a_skill_call(server: RehearsalServer) -> None:
    kind, data = messages_call(server, claude_request(CLAUDE_OPENING, stream=True))
    assert kind == "text/event-stream"
    events = sse(data)
    names = [name for name, _ in events]
    assert names[:2] == ["message_start", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[2:-3]) == {"content_block_delta"}
    start = json.loads(events[0][1])["message"]
    assert start["role"] == "assistant" and start["content"] == [] and start["stop_reason"] is None
    assert reassemble(events) == [{"type": "tool_use", "id": "toolu_rehearsal_1", "name": "Skill",
                                   "input": {"skill": "palette"}}]
    delta = json.loads(events[-2][1])
    assert delta["delta"]["stop_reason"] == "tool_use" and delta["usage"]["output_tokens"] > 0
    # A streamed answer reports the usage a whole one does: input tokens at the start, output at the end.
    whole = json.loads(messages_call(server, claude_request(CLAUDE_OPENING))[1])["usage"]
    assert start["usage"]["input_tokens"] == whole["input_tokens"] > 0
    assert delta["usage"]["output_tokens"] == whole["output_tokens"]


@pytest.mark.parametrize("together", [False, True], ids=["base-directory-apart", "base-directory-with-result"])
def test_claude_runs_the_script_from_the_skills_base_directory(server: RehearsalServer, together: bool) -> None:
    _, data = messages_call(server, claude_request(*skill_loaded(together)))
    message = json.loads(data)
    assert message["type"] == "message" and message["stop_reason"] == "tool_use"
    [block] = message["content"]
    assert block["type"] == "tool_use" and block["name"] == "Bash"
    assert block["input"]["command"] == f"python3 {BASE}/scripts/deck.py find --root ."
    assert block["input"]["description"]


def test_claude_plans_with_the_users_words_not_the_reminders(server: RehearsalServer) -> None:
    find = f"python3 {BASE}/scripts/deck.py find --root ."
    result = [{"type": "text", "text": FOUND_NOTHING},
              {"type": "text", "text": "<system-reminder>\nNote: {ignore these braces}\n</system-reminder>"}]
    body = claude_request(*skill_loaded(False), tool_use("toolu_2", "Bash", {"command": find, "description": "d"}),
                          {"role": "user", "content": [tool_result("toolu_2", result)]}, stream=True)
    [block] = reassemble(sse(messages_call(server, body)[1]))
    command = block["input"]["command"]
    assert command.startswith(f"python3 {BASE}/scripts/deck.py plan ")
    assert args_of(command) == {"request": REQUEST, "out": "plan.md", "context": NOTES}


def test_claude_presents_the_plan_as_streamed_text(server: RehearsalServer) -> None:
    plan = f"python3 {BASE}/scripts/deck.py plan --request x --out plan.md"
    find = f"python3 {BASE}/scripts/deck.py find --root ."
    body = claude_request(*skill_loaded(True),
                          tool_use("toolu_2", "Bash", {"command": find}),
                          {"role": "user", "content": [tool_result("toolu_2", FOUND_NOTHING)]},
                          tool_use("toolu_3", "Bash", {"command": plan}),
                          {"role": "user", "content": [tool_result("toolu_3", PLAN_DONE)]}, stream=True)
    events = sse(messages_call(server, body)[1])
    [block] = reassemble(events)
    assert block["type"] == "text" and PLAN_TEXT.strip() in block["text"] and "Reply **yes**" in block["text"]
    assert json.loads(events[-2][1])["delta"]["stop_reason"] == "end_turn"
    # Turn two (`--resume`): the history comes back with the reply, a reminder riding along with "yes".
    body["messages"] += [{"role": "assistant", "content": [block]},
                         {"role": "user", "content": [{"type": "text", "text": CONTEXT_REMINDER},
                                                      {"type": "text", "text": "yes"}]}]
    [again] = reassemble(sse(messages_call(server, body)[1]))
    assert again["input"]["command"] == find
    body["messages"] += [tool_use("toolu_9", "Bash", {"command": find}),
                         {"role": "user", "content": [tool_result("toolu_9", FOUND_NOTHING)]}]
    [start] = reassemble(sse(messages_call(server, body)[1]))
    assert start["input"]["command"] == f"python3 {BASE}/scripts/deck.py start --plan plan.md --out-dir ./deck"


@pytest.mark.parametrize("stream", [False, True])
def test_a_side_call_without_tools_gets_a_short_text(server: RehearsalServer, stream: bool) -> None:
    body = claude_request({"role": "user", "content": "Write a 5-word title for this conversation"},
                          stream=stream, tools=False)
    kind, data = messages_call(server, body)
    blocks = reassemble(sse(data)) if stream else json.loads(data)["content"]
    assert blocks == [{"type": "text", "text": SIDE_REPLY}]
    assert kind == ("text/event-stream" if stream else "application/json")


def test_count_tokens_estimates_what_the_model_would_read(server: RehearsalServer) -> None:
    url = f"{server.base_url}/v1/messages/count_tokens?beta=true"
    short = json.loads(call(url, claude_request(CLAUDE_OPENING))[2])
    longer = json.loads(call(url, claude_request(*skill_loaded(True)))[2])
    assert set(short) == {"input_tokens"} and 0 < short["input_tokens"] < longer["input_tokens"]


# -- replays: request bodies recorded from the real Claude Code CLI 2.1.332 (tests/fixtures/) --------

FIXTURES = Path(__file__).parent / "fixtures"


def recorded(name: str) -> dict[str, Any]:
    """A request body the real CLI sent (its own system prompt and tool descriptions elided)."""
    body: dict[str, Any] = json.loads((FIXTURES / name).read_text(encoding="utf-8"))["request"]
    return body


def base_directory(body: dict[str, Any]) -> str:
    """Where the CLI said the skill lives, read from the recorded messages independently of the adapter."""
    found = re.search(r"Base directory for this skill: ([^\s\\]+)", json.dumps(body["messages"]))
    assert found, "the recording holds no skill load"
    return found.group(1)


def test_a_recorded_streaming_request_after_yes_starts_the_build(server: RehearsalServer) -> None:
    body = recorded("claude_cli_stream_after_yes.json")
    assert body["stream"] is True and body["messages"][-1]["content"][0]["type"] == "tool_result"
    kind, data = messages_call(server, body)
    assert kind == "text/event-stream"
    [block] = reassemble(sse(data))
    assert block["name"] == "Bash"
    deck = f"python3 {base_directory(body)}/scripts/deck.py"
    assert block["input"]["command"] == f"{deck} start --plan plan.md --out-dir ./deck"


def test_a_recorded_non_streaming_retry_looks_before_acting(server: RehearsalServer) -> None:
    body = recorded("claude_cli_nonstream_skill_loaded.json")
    assert body["stream"] is False
    kind, data = messages_call(server, body)
    assert kind == "application/json"
    message = json.loads(data)
    assert message["type"] == "message" and message["stop_reason"] == "tool_use"
    [block] = message["content"]
    assert block["input"]["command"] == f"python3 {base_directory(body)}/scripts/deck.py find --root ."


def test_a_recorded_system_role_message_is_read_for_its_skill_list_only(server: RehearsalServer) -> None:
    # With a model id outside its catalogue, the CLI moves its environment, agents and skills into a
    # `system` message after the user's. Before the fix the rehearsal model saw no skill there.
    body = recorded("claude_cli_system_role_opening.json")
    assert body["messages"][-1]["role"] == "system"
    [block] = reassemble(sse(messages_call(server, body)[1]))
    assert block["name"] == "Skill" and block["input"] == {"skill": "palette"}
    conversation = to_conversation(body)
    assert conversation.user_messages() == ["Build a 3-slide deck on prompt caching"]


def test_only_the_skill_list_of_the_clis_reminders_is_a_catalogue() -> None:
    # The recorded agent-types reminder also holds "- name: description" lines: those are not skills.
    names = [name for name, _ in catalogue(to_conversation(recorded("claude_cli_stream_after_yes.json")).system)]
    assert names[0] == "palette" and "dataviz" in names
    assert "claude" not in names and "Explore" not in names


# -- the command-line server -----------------------------------------------------------------------


def test_the_cli_serves_until_interrupted() -> None:
    process = subprocess.Popen([sys.executable, "-m", "pytest_palette.rehearsal.server", "--port", "0"],
                               stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        base = process.stdout.readline().split()[-1]
        assert base.startswith("http://127.0.0.1:")
        assert call(f"{base}/v1/models", method="GET")[0] == 200
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


# -- end to end: the real skill driven over the codeact wire ---------------------------------------

MAX_STEPS_PER_TURN = 12


class CodeactClient:
    """A tiny stand-in for CUGA's loop: send the history, run the answer's code for real, repeat."""

    def __init__(self, server: RehearsalServer, workspace: Path, env: dict[str, str], card: SkillCard) -> None:
        self.server, self.workspace, self.env, self.card = server, workspace, env, card
        self.messages: list[dict[str, Any]] = [said("system", CUGA_SYSTEM)]
        self.commands: list[str] = []

    def send(self, text: str) -> str:
        self.messages.append(said("user", text))
        for _ in range(MAX_STEPS_PER_TURN):
            content = chat(self.server, self.messages)["choices"][0]["message"]["content"]
            self.messages.append(said("assistant", content))
            blocks = CODE.findall(content)
            if not blocks:
                return str(content)
            self.messages.append(execution(self.execute("\n".join(blocks))))
        raise AssertionError(f"no answer within {MAX_STEPS_PER_TURN} steps: {self.commands}")

    def execute(self, source: str) -> str:
        """Run a code block the way codeact does: top-level await, tools as coroutines, stdout captured."""
        async def load_skill(name: str, args: str = "") -> str:
            return cuga_load_output(self.card) if name == self.card.name else f"no skill named {name!r}"

        async def run_command(command: str) -> str:
            self.commands.append(command)
            done = subprocess.run(command, shell=True, cwd=self.workspace, env=self.env,
                                  capture_output=True, text=True, timeout=120)
            return done.stdout + (f"\n[stderr]\n{done.stderr}\nexit code {done.returncode}" if done.returncode else "")

        code = compile(source, "<codeact>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        printed = io.StringIO()
        with redirect_stdout(printed):
            pending = eval(code, {"load_skill": load_skill, "run_command": run_command})
            if pending is not None:
                asyncio.run(pending)
        return printed.getvalue()


@pytest.mark.end_to_end
def test_the_server_drives_the_real_skill_to_a_deck(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PALETTE_PYTHON", sys.executable)
    card = install(load_skill("palette"), tmp_path)
    with RehearsalServer() as running:
        client = CodeactClient(running, tmp_path, dict(os.environ), card)
        first = client.send("Build a 3-slide deck on prompt caching")
        assert "Reply **yes**" in first and newest_deck(tmp_path) is None
        last = client.send("yes")
        served = running.served
    deck = newest_deck(tmp_path)
    assert deck is not None and str(deck) in last
    assert inspect_deck(deck).slides == 3
    subcommands = [c.split("deck.py", 1)[1].split()[0] for c in client.commands]
    assert subcommands == ["find", "plan", "find", "start", "status"]
    assert all(c.startswith(f"{DECK} ") for c in client.commands)
    assert served and {route for route, _ in served} == {"/v1/chat/completions"}
