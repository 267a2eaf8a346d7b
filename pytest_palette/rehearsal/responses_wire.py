"""OpenAI Responses ⇄ the rehearsal policy, in the shapes the Codex CLI sends and expects.

Codex (0.171) speaks only this API (`wire_api = "responses"`). What it sends, seen on the wire:

* `input` holds typed items. Messages carry `input_text` or `output_text` parts. `function_call` items hold the
  model's calls, and `function_call_output` items hold what each call returned.
* A `developer` message carries its instructions. Another carries `<skills_instructions>`: a table of skill
  roots (`- \\`r1\\` = \\`/abs/.agents/skills\\``) and one line per skill, `- name: description (file:
  r1/name/SKILL.md)`.
* A `user` message that is only `<environment_context>` (or a folder's AGENTS.md) is the client's, not the user's.
* Its command tool is `exec_command` (`{"cmd": ...}`). Codex has no tool that loads a skill: a model reads the
  skill's SKILL.md with a command, as the listing says. The rehearsal model does that too. Here a command that
  reads a listed SKILL.md is read back as the load of that skill, its output headed by the skill's folder (as the
  Claude CLI heads a load), so that the skill's `skills/<name>/…` paths resolve.
* A command's output comes back framed (`Chunk ID: …`, `Process exited with code N`, `Output:`); the policy
  reads what the command printed.

The answer streams as server-sent events: `response.created`, then each output item added, its text's deltas
and done, then `response.completed` with the usage. Token counts are an estimate (characters / 4), as on the
other wires: nothing here is a tokenizer.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Iterator, Sequence
from typing import Any

from .anthropic_wire import BASE_DIRECTORY
from .conversation import Action, AgentSaid, Conversation, LoadSkill, Reply, RunCommand, ToolResult, UserSaid
from .limits import ModelLimits
from .openai_wire import estimate_tokens, pieces, text_of
from .policy import RehearsalPolicy

Json = dict[str, Any]

_ROOT = re.compile(r"^\s*-\s*`(\w+)`\s*=\s*`([^`]+)`\s*$", re.M)
_ENTRY_FILE = re.compile(r"^\s*-\s*([a-z0-9][\w-]*):.*\(file:\s*(\w+)/([^)\s]+)\)\s*$", re.M)
_FRAMED_OUTPUT = re.compile(r"\A(?:Chunk ID:[^\n]*\n)?(?:Wall time:[^\n]*\n)?(?:Process exited with code -?\d+\n)?"
                            r"(?:Process running with session ID[^\n]*\n)?(?:Original token count:[^\n]*\n)?"
                            r"Output:\n", re.S)
#: What Codex writes into user messages itself: the environment, and a folder's AGENTS.md. Never the user's words.
CLIENT_CONTEXT = ("<environment_context>", "# AGENTS.md instructions")


def tool_roles(tools: Sequence[Json]) -> dict[str, str]:
    """The offered function that runs a command, and the name of its command parameter: told by parameters."""
    for tool in tools:
        if tool.get("type") != "function":
            continue
        params = set((tool.get("parameters") or {}).get("properties", {}))
        for param in ("cmd", "command"):
            if param in params:
                return {"run": str(tool.get("name", "")), "run_param": param}
    return {}


def skill_files(system: str) -> dict[str, str]:
    """Each listed skill's SKILL.md as an absolute path, from the roots table and the listing's `(file: …)`."""
    roots = dict(_ROOT.findall(system))
    return {name: f"{roots[root].rstrip('/')}/{rest}" for name, root, rest in _ENTRY_FILE.findall(system)
            if root in roots}


def read_command(path: str) -> str:
    """The command that reads a skill's SKILL.md."""
    return f"cat {shlex.quote(path)}"


def command_output(text: str) -> str:
    """What a command printed, without the frame Codex puts around it."""
    return _FRAMED_OUTPUT.sub("", text, count=1)


def to_conversation(request: Json) -> Conversation:
    """Turn a Responses request into the policy's events."""
    roles = tool_roles(request.get("tools") or [])
    conversation = Conversation(system=str(request.get("instructions") or ""))
    items = request.get("input")
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    items = [item for item in items or [] if isinstance(item, dict)]
    # The skills listed anywhere in the request: a load may precede the listing's next repetition.
    for item in items:
        if item.get("type", "message") == "message" and item.get("role") in ("developer", "system"):
            conversation.system += text_of(item.get("content")) + "\n"
    files = skill_files(conversation.system)
    loads = {read_command(path): name for name, path in files.items()}
    loaded: dict[str, str] = {}  # call id → the folder of the skill it read
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            text = text_of(item.get("content"))
            role = item.get("role")
            if role == "user" and not text.lstrip().startswith(CLIENT_CONTEXT):
                conversation.events.append(UserSaid(text))
            elif role == "assistant" and text.strip():
                conversation.events.append(AgentSaid(text))
        elif kind == "function_call" and item.get("name") == roles.get("run"):
            call_id = str(item.get("call_id", ""))
            try:
                args = json.loads(item.get("arguments") or "{}")
            except json.JSONDecodeError:
                args = {}
            command = str(args.get(roles["run_param"], "")) if isinstance(args, dict) else ""
            if command in loads:
                loaded[call_id] = files[loads[command]].rsplit("/", 1)[0]
                conversation.events.append(LoadSkill(loads[command], call_id))
            else:
                conversation.events.append(RunCommand(command, call_id))
        elif kind == "function_call_output":
            call_id = str(item.get("call_id", ""))
            output = item.get("output")
            text = command_output(output if isinstance(output, str) else text_of(output))
            if call_id in loaded:
                text = f"{BASE_DIRECTORY} {loaded[call_id]}\n\n{text}"
            conversation.events.append(ToolResult(call_id, text))
    return conversation


def output_item(action: Action, roles: dict[str, str], files: dict[str, str], call_id: str) -> Json:
    """The output item for an action: a function call to the command tool, or a message."""
    command = action.command if isinstance(action, RunCommand) else \
        read_command(files[action.name]) if isinstance(action, LoadSkill) and action.name in files else None
    if command is not None and "run" in roles:
        return {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": roles["run"],
                "arguments": json.dumps({roles["run_param"]: command}), "status": "completed"}
    text = action.text if isinstance(action, Reply) else \
        f"I need a tool this host does not offer to continue ({type(action).__name__})."
    return {"type": "message", "id": f"msg_{call_id}", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def prompt_tokens(request: Json) -> int:
    """The request's size in the rehearsal model's estimate: what a context limit is measured against."""
    return estimate_tokens(json.dumps(request.get("input") or []) + str(request.get("instructions") or ""))


def respond(policy: RehearsalPolicy, request: Json, limits: ModelLimits | None = None) -> Json:
    """A `response` object: the policy's next action — an answer in words cut at the output limit of `limits`,
    as a provider cuts it (`status: "incomplete"`, `incomplete_details.reason: "max_output_tokens"`)."""
    conversation = to_conversation(request)
    action = policy.next_action(conversation)
    cut = False
    if isinstance(action, Reply) and limits is not None:
        text, cut = limits.cut(action.text)
        action = Reply(text) if cut else action
    number = len(conversation.events)
    item = output_item(action, tool_roles(request.get("tools") or []), skill_files(conversation.system),
                       f"call_rehearsal_{number}")
    prompt = prompt_tokens(request)
    output = estimate_tokens(json.dumps(item))
    return {
        "id": f"resp_rehearsal_{number}", "object": "response", "created_at": int(time.time()),
        "model": str(request.get("model") or policy.name),
        "status": "incomplete" if cut else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "output": [item],
        "usage": {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": prompt + output},
    }


def events(response: Json) -> Iterator[Json]:
    """The same response as the events a streaming server sends, its text in pieces a client must join."""
    sequence = iter(range(1_000_000))
    started = {**response, "status": "in_progress", "output": [], "usage": None}
    yield {"type": "response.created", "sequence_number": next(sequence), "response": started}
    for index, item in enumerate(response["output"]):
        if item["type"] == "message":
            text = text_of(item["content"])
            yield {"type": "response.output_item.added", "sequence_number": next(sequence), "output_index": index,
                   "item": {**item, "status": "in_progress", "content": []}}
            part = {"type": "output_text", "text": "", "annotations": []}
            yield {"type": "response.content_part.added", "sequence_number": next(sequence), "item_id": item["id"],
                   "output_index": index, "content_index": 0, "part": part}
            for piece in pieces(text):
                yield {"type": "response.output_text.delta", "sequence_number": next(sequence),
                       "item_id": item["id"], "output_index": index, "content_index": 0, "delta": piece}
            yield {"type": "response.output_text.done", "sequence_number": next(sequence), "item_id": item["id"],
                   "output_index": index, "content_index": 0, "text": text}
            yield {"type": "response.content_part.done", "sequence_number": next(sequence), "item_id": item["id"],
                   "output_index": index, "content_index": 0, "part": {**part, "text": text}}
        else:
            yield {"type": "response.output_item.added", "sequence_number": next(sequence), "output_index": index,
                   "item": {**item, "arguments": "", "status": "in_progress"}}
            for piece in pieces(item["arguments"]):
                yield {"type": "response.function_call_arguments.delta", "sequence_number": next(sequence),
                       "item_id": item["id"], "output_index": index, "delta": piece}
            yield {"type": "response.function_call_arguments.done", "sequence_number": next(sequence),
                   "item_id": item["id"], "output_index": index, "arguments": item["arguments"]}
        yield {"type": "response.output_item.done", "sequence_number": next(sequence), "output_index": index,
               "item": item}
    final = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
    yield {"type": final, "sequence_number": next(sequence), "response": response}


def to_sse(response: Json) -> bytes:
    return "".join(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n" for event in events(response)).encode()
