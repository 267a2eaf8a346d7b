"""The OpenAI Responses wire (rehearsal/responses_wire.py), the one the Codex CLI speaks: a request Codex really
sent read as the conversation it was, the answer read back by the openai SDK's own Responses client, and — where
the Codex CLI is installed (`make codex`) — a two-turn conversation of the real CLI that plans, is approved, and
builds a deck through the rehearsal server."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import openai
import pytest

from pytest_palette.judge.evidence import inspect_deck, newest_deck
from pytest_palette.rehearsal import responses_wire
from pytest_palette.rehearsal.anthropic_wire import BASE_DIRECTORY
from pytest_palette.rehearsal.conversation import AgentSaid, LoadSkill, RunCommand, ToolResult, UserSaid
from pytest_palette.rehearsal.limits import ModelLimits
from pytest_palette.rehearsal.policy import RehearsalPolicy, catalogue
from pytest_palette.rehearsal.server import RehearsalServer
from pytest_palette.skill import install, load_skill

FIXTURES = Path(__file__).parent / "fixtures"
#: Codex 0.171.0's request after "yes, go ahead" (recorded; paths and ids scrubbed, its 20 KB of base instructions
#: cut): its first turn loaded the skill by reading SKILL.md, found no deck, planned; its second ran find, start and
#: status.
RESUMED = json.loads((FIXTURES / "codex-0.171.0-resumed.json").read_text())
SKILL_FOLDER = "/work/item/work/.agents/skills/palette"
CODEX_TOOL = next(tool for tool in RESUMED["tools"] if tool.get("name") == "exec_command")


def test_a_request_codex_sent_reads_as_the_conversation_it_was() -> None:
    conversation = responses_wire.to_conversation(RESUMED)
    kinds = [type(event).__name__ for event in conversation.events]
    assert kinds == ["UserSaid", "LoadSkill", "ToolResult", "RunCommand", "ToolResult", "RunCommand", "ToolResult",
                     "AgentSaid", "UserSaid", "RunCommand", "ToolResult", "RunCommand", "ToolResult", "RunCommand",
                     "ToolResult"]
    said = [event.text for event in conversation.events if isinstance(event, UserSaid)]
    assert said == ["Build a 3-slide deck on prompt caching", "yes, go ahead"]  # the environment is not the user
    [load] = [event for event in conversation.events if isinstance(event, LoadSkill)]
    assert load.name == "palette"
    # What the read returned, headed by the skill's folder as a load is; the frame around a command's output gone.
    skill = conversation.result_of(load.call_id)
    assert skill is not None and skill.startswith(f"{BASE_DIRECTORY} {SKILL_FOLDER}\n\n---\nname: palette")
    outputs = [event.text for event in conversation.events if isinstance(event, ToolResult)]
    assert not any("Chunk ID:" in text or "Process exited" in text for text in outputs)
    assert json.loads(outputs[1])["root"] == "/work/item/work"  # what deck.py printed, read as JSON
    # The listing Codex gave: its own skills and the one under test, each with its file under a root.
    offered = dict(catalogue(conversation.system))
    assert "palette" in offered and "skill-creator" in offered
    assert responses_wire.skill_files(conversation.system)["palette"] == f"{SKILL_FOLDER}/SKILL.md"
    assert any(isinstance(event, AgentSaid) and "# Prompt caching" in event.text for event in conversation.events)


def test_the_good_agent_reads_the_built_deck_and_says_where_it_is() -> None:
    response = responses_wire.respond(RehearsalPolicy(), RESUMED)
    [item] = response["output"]
    assert item["type"] == "message" and response["status"] == "completed"
    text = item["content"][0]["text"]
    assert text.startswith("Your deck is ready:") and "3 slides" in text
    usage = response["usage"]
    assert usage["input_tokens"] > 1000 and usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


def test_the_skill_is_loaded_by_reading_its_file_with_codexs_command_tool() -> None:
    opening = {**RESUMED, "input": RESUMED["input"][:4]}  # the request of the first turn's first call
    [item] = responses_wire.respond(RehearsalPolicy(), opening)["output"]
    assert item["type"] == "function_call" and item["name"] == "exec_command"
    assert json.loads(item["arguments"]) == {"cmd": f"cat {SKILL_FOLDER}/SKILL.md"}
    # With no command tool offered, the agent says what it lacks rather than pretend.
    [words] = responses_wire.respond(RehearsalPolicy(), {**opening, "tools": []})["output"]
    assert words["type"] == "message" and "does not offer" in words["content"][0]["text"]


def test_a_command_keeps_its_words_and_a_long_answer_is_cut_as_the_api_cuts_it() -> None:
    command = RunCommand("python3 deck.py plan --context $'a\\nb' \"x\" `y`", "call_1")
    item = responses_wire.output_item(command, responses_wire.tool_roles([CODEX_TOOL]), {}, "call_1")
    assert json.loads(item["arguments"])["cmd"] == command.command
    request = {"model": "rehearsal", "input": "What is a deck, in a few words?", "tools": [CODEX_TOOL]}
    limited = responses_wire.respond(RehearsalPolicy(), request, ModelLimits(output=4))
    assert limited["status"] == "incomplete" and limited["incomplete_details"] == {"reason": "max_output_tokens"}
    assert len(limited["output"][0]["content"][0]["text"]) == 16


def test_the_openai_sdk_reads_the_streamed_answer_whole() -> None:
    """The openai SDK's Responses client — the wire's own reference reader — joins the stream's events into the
    response the server meant: the function call, then (given its output) the words, and the usage."""
    with RehearsalServer() as server:
        client = openai.OpenAI(base_url=server.openai_base_url, api_key="none", max_retries=0)
        opening = {"model": "rehearsal", "input": RESUMED["input"][:4], "tools": [CODEX_TOOL]}
        with client.responses.stream(**opening) as stream:
            deltas = [event.delta for event in stream if event.type == "response.function_call_arguments.delta"]
            final = stream.get_final_response()
        [call] = final.output
        assert call.type == "function_call" and json.loads(call.arguments) == {"cmd": f"cat {SKILL_FOLDER}/SKILL.md"}
        assert "".join(deltas) == call.arguments and final.usage is not None and final.usage.output_tokens > 0
        words = client.responses.create(model="rehearsal", input=RESUMED["input"], tools=[CODEX_TOOL])
        assert words.output_text.startswith("Your deck is ready:")


def test_a_request_over_the_context_is_refused_as_the_api_refuses_it() -> None:
    with RehearsalServer(limits=ModelLimits(context=100)) as server:
        client = openai.OpenAI(base_url=server.openai_base_url, api_key="none", max_retries=0)
        with pytest.raises(openai.BadRequestError, match="maximum context length is 100 tokens") as refused:
            client.responses.create(model="rehearsal", input=RESUMED["input"], tools=[CODEX_TOOL])
        assert refused.value.code == "context_length_exceeded"


def completed(events: list[Any], kind: str) -> list[Any]:
    """The items of `kind` the CLI's JSON lines say were completed."""
    return [event["item"] for event in events if event["type"] == "item.completed" and event["item"]["type"] == kind]


def codex_cli() -> str | None:
    """The Codex CLI `make codex` installed beside this Python, else one on PATH."""
    found = Path(sys.executable).parent / "codex"
    return str(found) if found.exists() else shutil.which("codex")


@pytest.mark.end_to_end
def test_the_codex_cli_plans_is_approved_and_builds_through_the_rehearsal_server(tmp_path: Path) -> None:
    codex = codex_cli()
    if codex is None:
        (pytest.fail if os.environ.get("REQUIRE_CODEX") else pytest.skip)("the Codex CLI is not installed: make codex")
    work, home = tmp_path / "work", tmp_path / "codex-home"
    home.mkdir()
    install(load_skill("palette"), work / ".agents")
    with RehearsalServer() as server:
        # Its own sandbox off: the commands are the scripted agent's own, in this test's folder (the host runs
        # the CLI inside the project's sandbox instead).
        options = ["--json", "--skip-git-repo-check", "--ignore-user-config", "-c", 'sandbox_mode="danger-full-access"',
                   "-c", "model_provider=palette", "-c", 'model_providers.palette.name="palette"',
                   "-c", f'model_providers.palette.base_url="{server.openai_base_url}"',
                   "-c", 'model_providers.palette.wire_api="responses"', "-m", "rehearsal"]
        env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "CODEX_HOME": str(home), "OPENAI_API_KEY": "none",
               "PALETTE_PYTHON": sys.executable}

        def turn(*args: str) -> list[Any]:
            done = subprocess.run([codex, "exec", *args], cwd=work, env=env, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=300, check=False)
            assert done.returncode == 0, done.stderr[-2000:]
            return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]

        first = turn(*options, "Build a 3-slide deck on prompt caching")
        thread = str(first[0]["thread_id"])
        second = turn("resume", *options, thread, "yes, go ahead")
    commands = [item["command"] for item in completed(first + second, "command_execution")]
    assert "SKILL.md" in commands[0] and [c.split("deck.py ")[1].split()[0] for c in commands[1:]] == [
        "find", "plan", "find", "start", "status"]
    [answer] = [item["text"] for item in completed(second, "agent_message")]
    assert answer.startswith("Your deck is ready:")
    assert next(event for event in second if event["type"] == "turn.completed")["usage"]["input_tokens"] > 0
    deck = newest_deck(work)
    assert deck is not None and inspect_deck(deck).slides == 3
