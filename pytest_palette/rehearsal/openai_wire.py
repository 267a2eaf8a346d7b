"""OpenAI chat completions ⇄ the rehearsal policy, in the two shapes OpenAI-compatible clients use.

* **codeact** (CUGA's default): the request carries no `tools`. The model acts by answering with
  a ```python block that awaits `load_skill(...)` or `run_command(...)` — or, a hostile agent's `RunCode`,
  any Python of its own; the client runs it and sends back a user message starting with "Execution
  output:". A plain-text answer ends the turn.
* **function calling**: the request carries `tools`; the model answers with `message.tool_calls`
  and the client sends back `role: tool` messages.

Token counts in `usage` are an estimate (characters / 4): nothing here is a tokenizer.
"""

from __future__ import annotations

import ast
import json
import re
import time
from collections.abc import Iterator, Sequence
from typing import Any

from .conversation import (
    CODE_LABEL,
    Action,
    AgentSaid,
    Conversation,
    Event,
    LoadSkill,
    Reply,
    RunCode,
    RunCommand,
    ToolResult,
    UserSaid,
)
from .limits import ModelLimits
from .policy import RehearsalPolicy

Json = dict[str, Any]

_CODE_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.S)
_SKILLS_BLOCK = re.compile(r"<available_skills>(.*?)</available_skills>", re.S)
_BOLD_ENTRY = re.compile(r"\*\*([A-Za-z0-9][\w.-]*)\*\*\s*:\s*(.+)")
# What CUGA prints after a code block's stdout. Cut it off: a variables dump can carry braces
# that would spoil reading the JSON object a deck.py call printed.
_VARIABLES = re.compile(r"^[ \t#*]*Variables Summary\b.*", re.S | re.M)
#: How CUGA reports a code block's outcome to the model, in a user message.
EXECUTION_PREFIXES = ("Execution output:", "Error during execution")
#: CUGA (0.4.3, seen on the wire) appends a live summary of its sandbox variables to the newest human
#: message of every request — the user's own words as much as an execution output — and ends it with
#: "You can use these variables directly by their names.". It is never part of what the user said.
VARIABLES_ADDENDUM = "\n\n## Available Variables\n\n"


def estimate_tokens(text: str) -> int:
    """A rough token count (characters / 4), labelled as an estimate wherever it is served."""
    return (len(text) + 3) // 4


def text_of(content: Any) -> str:
    """The text of a message's content: a string, or a list of `{"type": "text"}` parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part if isinstance(part, str) else str(part.get("text", ""))
                       for part in content if isinstance(part, (str, dict)))
    return str(content)


# -- reading a request ---------------------------------------------------------------------------


def skills_listing(system: str) -> str:
    """CUGA's `<available_skills>` entries (`**name**: description`) as lines `catalogue()` reads."""
    block = _SKILLS_BLOCK.search(system)
    if not block:
        return ""
    entries = _BOLD_ENTRY.findall(block.group(1))
    return "".join(f"- {name}: {description.strip()}\n" for name, description in entries)


def tool_roles(tools: Sequence[Json]) -> dict[str, str]:
    """Which offered function loads a skill and which runs a command, told apart by parameters."""
    roles: dict[str, str] = {}
    for tool in tools:
        function = tool.get("function", tool)
        name = str(function.get("name", ""))
        params = set((function.get("parameters") or {}).get("properties", {}))
        if "command" in params:
            roles["run"] = name
        elif params & {"name", "skill", "skill_name"} or "skill" in name.lower():
            roles["load"] = name
            roles["load_param"] = next((p for p in ("name", "skill", "skill_name") if p in params), "name")
    return roles


def parse_code(text: str, call_id: str) -> list[Event]:
    """The tool calls in an assistant's ```python blocks, and its own code blocks (`RunCode`, told by their first
    line): the policy sees its own past actions."""
    events: list[Event] = []
    for index, block in enumerate(_CODE_BLOCK.findall(text)):
        first, _, code = block.partition("\n")
        if first.startswith(CODE_LABEL):
            try:
                events.append(RunCode(code.rstrip("\n"), first[len(CODE_LABEL):].strip(), f"{call_id}.{index}.code"))
                continue
            except ValueError:  # not a label of ours: read as any other code
                pass
        try:
            tree = ast.parse(block)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args):
                continue
            arg = node.args[0]
            if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                continue
            ident = f"{call_id}.{index}.{len(events)}"  # one id per call, even two in a block
            if node.func.id == "load_skill":
                events.append(LoadSkill(arg.value, ident))
            elif node.func.id == "run_command":
                events.append(RunCommand(arg.value, ident))
    return events


def without_variables(text: str) -> str:
    """A human message without the variables addendum CUGA appended to it (unchanged when it has none)."""
    head, found, _ = text.partition(VARIABLES_ADDENDUM)
    return head if found else text


def execution_output(text: str) -> str:
    """The stdout CUGA reports for a code block, without its prefix and variables summary."""
    body = text.split(":", 1)[1] if text.startswith(EXECUTION_PREFIXES[0]) else text
    return _VARIABLES.sub("", body).strip()


def to_conversation(request: Json) -> Conversation:
    """Turn a chat-completions request, in either shape, into the policy's events."""
    roles = tool_roles(request.get("tools") or [])
    codeact = not request.get("tools")
    conversation = Conversation(codeact=codeact)
    pending: list[str] = []  # call ids of the last assistant message's code, awaiting its output
    for number, message in enumerate(request.get("messages") or []):
        role = message.get("role")
        text = text_of(message.get("content"))
        if role in {"system", "developer"}:
            conversation.system += text
        elif role == "tool":
            conversation.events.append(ToolResult(str(message.get("tool_call_id", "")), text))
        elif role == "assistant":
            pending = _read_assistant(conversation.events, message, text, roles, f"m{number}" if codeact else "")
        elif role == "user":
            _read_user(conversation.events, without_variables(text), pending)
            pending = []
    # Skills first, so the catalogue offers them ahead of anything else the prompt lists.
    conversation.system = skills_listing(conversation.system) + conversation.system
    return conversation


def _read_user(events: list[Event], text: str, pending: list[str]) -> None:
    """A user message: CUGA's answer to the last code block, or the user speaking.

    After a code block the client always answers before the user's next turn — with the output, an error, or
    a note that the code was not run — so whatever it says then is the code's result, never the user's words.
    """
    if pending:
        events += [ToolResult(call_id, execution_output(text.lstrip())) for call_id in pending]
    else:
        events.append(UserSaid(text))


def _read_assistant(events: list[Event], message: Json, text: str, roles: dict[str, str], call_id: str) -> list[str]:
    """Append an assistant message's events; return the codeact call ids awaiting output.

    `call_id` is empty when the request offers tools: code in a reply is then just text.
    """
    calls: list[Event] = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        try:
            args = json.loads(function.get("arguments") or "{}")
        except json.JSONDecodeError:
            args = {}
        name, ident = function.get("name"), str(call.get("id", ""))
        if name == roles.get("run"):
            calls.append(RunCommand(str(args.get("command", "")), ident))
        elif name == roles.get("load"):
            calls.append(LoadSkill(str(args.get(roles.get("load_param", "name"), "")), ident))
    code = parse_code(text, call_id) if call_id else []
    if text.strip() and not code:
        events.append(AgentSaid(text))
    events += calls + code
    pending = [event.call_id for event in code if isinstance(event, (LoadSkill, RunCommand, RunCode))]
    if call_id and not pending and _CODE_BLOCK.search(text):
        pending = [f"{call_id}.code"]  # code the client will run all the same: its answer is no user's word
    return pending


# -- writing a response --------------------------------------------------------------------------


def codeact_text(action: Action) -> str:
    """The assistant text CUGA's codeact executor runs (or, for a reply, hands to the user)."""
    if isinstance(action, LoadSkill):
        return f"```python\nr = await load_skill({json.dumps(action.name)})\nprint(r)\n```"
    if isinstance(action, RunCommand):
        # repr() is a Python string literal for any command: quotes, newlines and non-ASCII alike. Backticks
        # are written as \x60 escapes, so pasted material with a ``` fence cannot end the code block early.
        return f"```python\nprint(await run_command({_literal(action.command)}))\n```"
    if isinstance(action, RunCode):
        return f"```python\n{CODE_LABEL}{action.label}\n{action.code}\n```"  # verbatim: RunCode holds no fence
    # Plain words hand the turn back; a ``` fence in them (a plan that quotes pasted code) would be run as code.
    return _FENCE.sub(lambda run: "\u200b".join(run.group(0)), action.text)


_FENCE = re.compile(r"`{3,}")


def _literal(text: str) -> str:
    """A Python string literal for `text` with no backtick in it."""
    return repr(text).replace("`", "\\x60")  # inside a literal a backtick is never part of an escape


def assistant_message(action: Action, roles: dict[str, str], call_id: str, codeact: bool) -> Json:
    """The `choices[0].message` for an action, in the request's shape."""
    if codeact:
        return {"role": "assistant", "content": codeact_text(action)}
    if isinstance(action, RunCommand) and "run" in roles:
        return _tool_call_message(call_id, roles["run"], {"command": action.command})
    if isinstance(action, LoadSkill) and "load" in roles:
        return _tool_call_message(call_id, roles["load"], {roles["load_param"]: action.name})
    if isinstance(action, Reply):
        return {"role": "assistant", "content": action.text}
    # The client offered no tool for what the protocol needs next: say so rather than pretend.
    return {"role": "assistant",
            "content": f"I need a tool this host does not offer to continue ({type(action).__name__})."}


def _tool_call_message(call_id: str, name: str, args: Json) -> Json:
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def complete(policy: RehearsalPolicy, request: Json, limits: ModelLimits | None = None) -> Json:
    """A `chat.completion` object: the policy's next action for this request — an answer in words cut at the
    output limit of `limits`, as a provider cuts it (`finish_reason: "length"`)."""
    messages = request.get("messages") or []
    roles = tool_roles(request.get("tools") or [])
    codeact = not request.get("tools")
    action = policy.next_action(to_conversation(request))
    cut = False
    if isinstance(action, Reply) and limits is not None:
        text, cut = limits.cut(action.text)
        action = Reply(text) if cut else action
    message = assistant_message(action, roles, f"call_rehearsal_{len(messages)}", codeact)
    prompt = estimate_tokens(json.dumps(messages))
    output = estimate_tokens(text_of(message.get("content")) + json.dumps(message.get("tool_calls") or []))
    return {
        "id": f"chatcmpl-rehearsal-{len(messages)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(request.get("model") or policy.name),
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": "length" if cut else "tool_calls" if message.get("tool_calls") else "stop"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": output, "total_tokens": prompt + output},
    }


def chunks(completion: Json, include_usage: bool = False) -> Iterator[Json]:
    """The same completion as `chat.completion.chunk` objects, the way a streaming server sends it."""
    base = {key: completion[key] for key in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = completion["choices"][0]
    message = choice["message"]

    def chunk(delta: Json, finish: str | None = None) -> Json:
        return base | {"choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    yield chunk({"role": "assistant", "content": ""})
    for piece in pieces(message.get("content") or ""):
        yield chunk({"content": piece})
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        yield chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                     "function": {"name": function["name"], "arguments": ""}}]})
        for piece in pieces(function["arguments"]):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, choice["finish_reason"])
    if include_usage:
        yield base | {"choices": [], "usage": completion["usage"]}


def pieces(text: str, size: int = 48) -> list[str]:
    """Split text as a real stream would, so a client must reassemble it."""
    return [text[i:i + size] for i in range(0, len(text), size)]


def to_sse(completion: Json, include_usage: bool = False) -> bytes:
    lines = [f"data: {json.dumps(chunk)}\n\n" for chunk in chunks(completion, include_usage)]
    return ("".join(lines) + "data: [DONE]\n\n").encode()
