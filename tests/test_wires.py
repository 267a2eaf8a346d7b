"""Any pasted text survives every wire: the plan command the rehearsal model writes for it reaches the client
exactly as written — in-process (LangChain), OpenAI tool calls, OpenAI codeact (CUGA's ```python blocks),
Anthropic tool use and OpenAI Responses function calls (Codex) — and the material comes out of the shell's word
splitting unchanged."""

from __future__ import annotations

import json
import shlex

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage
from sweeps import inner_cache

from pytest_palette.rehearsal import anthropic_wire, langchain_model, openai_wire, responses_wire
from pytest_palette.rehearsal.conversation import Reply, RunCommand, ToolResult, UserSaid
from pytest_palette.rehearsal.policy import PLAN_FILE, RehearsalPolicy, split_opening

#: What real documents carry and wires choke on.
NASTY = ["```", "```python\n", "```\n", "`", "``", '"""', "'''", "'", '"', "\\", "\\n", "\\x60", "[[", "]]",
         "[[5 slides]]", "\n", "\n\n", "\r\n", "\t", "é", "日本語", "🎉", "\u2028", "{", "}", "$(", "${HOME}", "%s",
         "print(", ")", "#", "Execution output:", "x" * 3000, " ", "--context", "\x00"]
material = st.lists(st.one_of(st.sampled_from(NASTY), st.text(max_size=12)), min_size=1, max_size=25).map("".join)

REQUEST = "Turn these notes into a deck"


def plan_command(text: str) -> RunCommand:
    """What the careful agent runs for an opening with `text` pasted under the request."""
    request, pasted = split_opening(f"{REQUEST}\n\n{text}")
    action = RehearsalPolicy().plan(f"{request}\n\n{pasted}" if pasted else request, "python3 deck.py")
    assert isinstance(action, RunCommand)
    return RunCommand(action.command, "call_1")


def context_of(command: str) -> str:
    words = shlex.split(command)
    return words[words.index("--context") + 1] if "--context" in words else ""


@pytest.mark.end_to_end
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(material.filter(lambda t: t.strip() and "\x00" not in t))
def test_pasted_material_reaches_context_verbatim(text: str) -> None:
    command = plan_command(text)
    assert context_of(command.command) == split_opening(f"{REQUEST}\n\n{text}")[1]
    assert f"--out {PLAN_FILE}" in command.command


@pytest.mark.end_to_end
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(material)
def test_a_command_survives_the_codeact_wire(text: str) -> None:
    command = RunCommand(f"python3 deck.py plan --context {shlex.quote(text)}", "m1.0.0")
    answer = openai_wire.codeact_text(command)
    assert answer.count("```") == 2  # the material cannot open or close a fence
    [read] = openai_wire.parse_code(answer, "m1")  # what the rehearsal model reads back from its own answer
    assert read.command == command.command


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(material)
def test_a_command_survives_the_tool_call_wires(text: str) -> None:
    command = RunCommand(f"python3 deck.py plan --context {shlex.quote(text)}", "call_1")
    roles = {"run": "bash", "load": "load_skill", "load_param": "name"}
    message = openai_wire.assistant_message(command, roles, "call_1", codeact=False)
    assert json.loads(message["tool_calls"][0]["function"]["arguments"])["command"] == command.command
    [block] = anthropic_wire.content_blocks(command, {"run": "Bash", "load": "Skill"}, "toolu_1")
    assert json.loads(json.dumps(block))["input"]["command"] == command.command
    item = responses_wire.output_item(command, {"run": "exec_command", "run_param": "cmd"}, {}, "call_1")
    assert json.loads(item["arguments"])["cmd"] == command.command
    in_process = langchain_model.to_message(command, roles, 1)
    assert isinstance(in_process, AIMessage) and in_process.tool_calls[0]["args"]["command"] == command.command


def test_cugas_own_extractor_takes_the_whole_block() -> None:
    extraction = pytest.importorskip("cuga.backend.cuga_graph.nodes.cuga_agent_core.execution.code_extraction")
    text = "Notes\n```python\nprint('hi')\n```\nand ``` again"
    command = RunCommand(f"python3 deck.py plan --context {shlex.quote(text)}", "m1.0.0")
    code = extraction.extract_and_combine_codeblocks(openai_wire.codeact_text(command))
    namespace: dict[str, object] = {}
    exec(code.replace("await run_command", "seen.append"), {"seen": [], "print": lambda *a: None}, namespace)
    assert "\\x60" in code and "`" not in code  # the fence is not cut inside the material


def test_whatever_answers_a_code_block_is_its_result_never_the_user() -> None:
    request = {"messages": [
        {"role": "user", "content": "Build a 3-slide deck on tides"},
        {"role": "assistant", "content": openai_wire.codeact_text(RunCommand("python3 deck.py find --root .", "x"))},
        {"role": "user", "content": "CodeSyntaxError: unterminated string literal (detected at line 1)"},
        {"role": "assistant", "content": "Something went wrong; shall I try again?"},
        {"role": "user", "content": "yes"},
    ]}
    events = openai_wire.to_conversation(request).events
    results = [e for e in events if isinstance(e, ToolResult)]
    said = [e.text for e in events if isinstance(e, UserSaid)]
    assert [r.text for r in results] == ["CodeSyntaxError: unterminated string literal (detected at line 1)"]
    assert said == ["Build a 3-slide deck on tides", "yes"]


def test_a_reply_that_quotes_code_is_never_run_as_code() -> None:
    plan = "Here is the plan:\n\n## Retries\n```python\nfor attempt in range(3):\n    retry()\n```\nReply **yes**."
    text = openai_wire.codeact_text(Reply(plan))
    assert "```" not in text and text.replace("\u200b", "") == plan  # what the user reads is unchanged
    request = {"messages": [{"role": "user", "content": "Build a deck"},
                            {"role": "assistant", "content": "```python\nx = (\n```"},  # code, but no tool call
                            {"role": "user", "content": "Error during execution: Python syntax error at line 1"}]}
    events = openai_wire.to_conversation(request).events
    assert [type(e).__name__ for e in events] == ["UserSaid", "AgentSaid", "ToolResult"]


DOCUMENTS = {
    "fenced_code": "# Release notes\n\n## What changed\n```python\nfor attempt in range(3):\n    print(f'''try "
                   "{attempt}''')\n```\n\n## Next\n- ship it \\ soon\n",
    "a_table": "# Q3 in numbers\n\n| Region | Revenue | Growth |\n|---|---|---|\n| EMEA | $4.2M | 12% |\n"
               "| APAC | $3.1M | 9% |\n\n## Hiring\n- 14 engineers, naïve café ✓\n",
    "directives": "# Offsite\n[[3 slides]]\n\n## Agenda\n- `make bench` and ```inline``` fences\n- \"\"\"quotes\"\"\"\n"
                  "\n## Long line\n" + "word " * 400 + "\n",
}


@pytest.mark.end_to_end
@pytest.mark.timeout(1800)  # a whole session on three hosts: more than the suite's 600 s guard on a busy machine
def test_generated_documents_pass_on_every_host(pytester: pytest.Pytester) -> None:
    from pytest_palette.hosts.claude import find_cli
    from pytest_palette.hosts.cuga import installed_problem

    hosts = ["react"] + (["cuga"] if installed_problem() is None else []) + (["claude"] if find_cli() else [])
    corpus = pytester.mkdir("corpus")
    for name, text in DOCUMENTS.items():
        (corpus / f"{name}.md").write_text(text, encoding="utf-8")
    pytester.mkdir("cases")
    (pytester.path / "cases" / "c.yaml").write_text(
        f'- documents: "{corpus}/*.md"\n  covers: hard documents\n  request: Turn this into a deck\n')
    result = pytester.runpytest_subprocess("--host", ",".join(hosts), *inner_cache(), "-n", "2")
    result.assert_outcomes(passed=len(DOCUMENTS) * len(hosts))
