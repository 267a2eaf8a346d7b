"""Anthropic Messages ⇄ the rehearsal policy, in the shapes the Claude Code CLI sends and expects.

The CLI offers the tools `Skill` (input `{"skill": name}`) and `Bash` (input `{"command", "description"}`).
It also writes into user messages things the user never typed: `<system-reminder>` blocks (one lists
the skills it can load) and, after a Skill call, "Base directory for this skill: <path>" followed by
the SKILL.md body. The first is the skill catalogue and the second is what the load returned; neither
is the user's turn. Requests with no tools are the CLI's side calls (titles, summaries).

Seen from the real CLI (2.1.332): for a model id outside its catalogue it puts its environment, agent
list and skill list in a `role: "system"` message *inside* `messages` (after the user's) instead of
reminders; tool results carry a trailing reminder; a truncated stream is retried with `stream: false`.

Token counts in `usage` are an estimate (characters / 4): nothing here is a tokenizer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

from .conversation import (
    Action,
    AgentSaid,
    Conversation,
    Event,
    LoadSkill,
    Reply,
    RunCommand,
    ToolResult,
    UserSaid,
)
from .limits import ModelLimits
from .openai_wire import estimate_tokens, pieces
from .policy import RehearsalPolicy

Json = dict[str, Any]

_REMINDER = re.compile(r"<system-reminder>(.*?)</system-reminder>", re.S)
# Slash-command markup the CLI may put around a skill launch (unverified here): not the user's words.
_COMMAND_TAGS = re.compile(r"<(command-message|command-name|command-args)>.*?</\1>", re.S)
# The CLI's skill list: a header line, then one "- name: description" line per skill.
_LISTING = re.compile(r"^[^\n]*skills are available[^\n]*\n(?:[ \t]*\n)?(?:- [^\n]*(?:\n|$))+", re.M)
BASE_DIRECTORY = "Base directory for this skill:"
#: What a side call (no tools offered) gets back.
SIDE_REPLY = "Palette rehearsal"


def text_of(content: Any) -> str:
    """The text of a `content`: a string, or a list of blocks whose text blocks are joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(block.get("text", "")) for block in content
                         if isinstance(block, dict) and block.get("type", "text") == "text")
    return ""


def blocks_of(content: Any) -> list[Json]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [block for block in content or [] if isinstance(block, dict)]


def tool_roles(tools: Sequence[Json]) -> dict[str, str]:
    """Which offered tool loads a skill and which runs a command: by the CLI's names, else by input."""
    names = {str(tool.get("name", "")) for tool in tools}
    roles = {role: name for role, name in (("load", "Skill"), ("run", "Bash")) if name in names}
    for tool in tools:
        params = set((tool.get("input_schema") or {}).get("properties", {}))
        if "run" not in roles and "command" in params:
            roles["run"] = str(tool["name"])
        if "load" not in roles and "skill" in params:
            roles["load"] = str(tool["name"])
    return roles


# -- reading a request ---------------------------------------------------------------------------


class _Reader:
    """Walks the messages once, keeping the state the CLI's conventions need."""

    def __init__(self, roles: dict[str, str]) -> None:
        self.roles = roles
        self.conversation = Conversation()
        self.catalogue: list[str] = []
        self.last_load = ""
        self.skill_texts: dict[str, list[str]] = {}

    def user(self, content: Any) -> None:
        blocks = blocks_of(content)
        words: list[str] = []
        for block in blocks:
            if block.get("type") == "tool_result":
                text = self.strip(text_of(block.get("content")))
                self.conversation.events.append(ToolResult(str(block.get("tool_use_id", "")), text))
            elif block.get("type") == "text":
                text = self.strip(str(block.get("text", "")))
                at = text.find(BASE_DIRECTORY)
                if at >= 0 and self.last_load:
                    self.skill_texts.setdefault(self.last_load, []).append(text[at:])
                elif text.strip():
                    words.append(text.strip())
        # Text riding along with tool results is the CLI's, not a new user turn.
        if words and not any(block.get("type") == "tool_result" for block in blocks):
            self.conversation.events.append(UserSaid("\n".join(words)))

    def assistant(self, content: Any) -> None:
        for block in blocks_of(content):
            kind = block.get("type")
            args = block.get("input") or {}
            if kind == "text" and str(block.get("text", "")).strip():
                self.conversation.events.append(AgentSaid(str(block["text"])))
            elif kind == "tool_use" and block.get("name") == self.roles.get("run"):
                self.conversation.events.append(RunCommand(str(args.get("command", "")), str(block.get("id", ""))))
            elif kind == "tool_use" and block.get("name") == self.roles.get("load"):
                self.last_load = str(block.get("id", ""))
                self.conversation.events.append(LoadSkill(str(args.get("skill", "")), self.last_load))

    def system(self, content: Any) -> None:
        """A `system` message inside `messages`: the CLI's, never the user's; only its skill list is kept."""
        self.catalogue += [m.group(0).strip() for m in _LISTING.finditer(text_of(content))]

    def strip(self, text: str) -> str:
        """Remove the CLI's own markup from text, keeping any skill list it carried."""
        for reminder in _REMINDER.findall(text):
            # Only the list itself: other reminders (agent types, deferred tools) also hold "- name: ..." lines.
            self.catalogue += [m.group(0).strip() for m in _LISTING.finditer(reminder)]
        return _COMMAND_TAGS.sub("", _REMINDER.sub("", text))

    def finish(self, system: str) -> Conversation:
        """Fold each skill's text into its load's result, and put the skill list before the system."""
        events: list[Event] = []
        for event in self.conversation.events:
            if isinstance(event, ToolResult) and event.call_id in self.skill_texts:
                events.append(ToolResult(event.call_id, "\n\n".join([event.text, *self.skill_texts[event.call_id]])))
            else:
                events.append(event)
        listing = "".join(entry + "\n\n" for entry in self.catalogue)
        return Conversation(system=listing + system, events=events)


def to_conversation(request: Json) -> Conversation:
    reader = _Reader(tool_roles(request.get("tools") or []))
    for message in request.get("messages") or []:
        if message.get("role") == "user":
            reader.user(message.get("content"))
        elif message.get("role") == "assistant":
            reader.assistant(message.get("content"))
        elif message.get("role") == "system":
            reader.system(message.get("content"))
    return reader.finish(text_of(request.get("system") or ""))


# -- writing a response --------------------------------------------------------------------------


def describe(command: str) -> str:
    """The Bash tool's `description`: a few words on what the command does."""
    if "deck.py" in command:
        words = command.split("deck.py", 1)[1].split()
        return f"Run Palette's deck.py {words[0] if words else ''}".strip()
    return "Run a shell command"


def content_blocks(action: Action, roles: dict[str, str], call_id: str) -> list[Json]:
    if isinstance(action, RunCommand) and "run" in roles:
        return [{"type": "tool_use", "id": call_id, "name": roles["run"],
                 "input": {"command": action.command, "description": describe(action.command)}}]
    if isinstance(action, LoadSkill) and "load" in roles:
        return [{"type": "tool_use", "id": call_id, "name": roles["load"], "input": {"skill": action.name}}]
    if isinstance(action, Reply):
        return [{"type": "text", "text": action.text}]
    # The client offered no tool for what the protocol needs next: say so rather than pretend.
    return [{"type": "text", "text": f"I need a tool this host does not offer to continue ({type(action).__name__})."}]


def respond(policy: RehearsalPolicy, request: Json, limits: ModelLimits | None = None) -> Json:
    """A `message` object: the policy's next action, or a short text for a side call — an answer in words cut at
    the output limit of `limits`, as the Messages API cuts it (`stop_reason: "max_tokens"`)."""
    messages = request.get("messages") or []
    tools = request.get("tools") or []
    cut = False
    if tools:
        action = policy.next_action(to_conversation(request))
        if isinstance(action, Reply) and limits is not None:
            text, cut = limits.cut(action.text)
            action = Reply(text) if cut else action
        blocks = content_blocks(action, tool_roles(tools), f"toolu_rehearsal_{len(messages)}")
    else:
        blocks = [{"type": "text", "text": SIDE_REPLY}]
    calls = any(block["type"] == "tool_use" for block in blocks)
    return {
        "id": f"msg_rehearsal_{len(messages)}",
        "type": "message",
        "role": "assistant",
        "model": str(request.get("model") or policy.name),
        "content": blocks,
        "stop_reason": "max_tokens" if cut else "tool_use" if calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": count_tokens(request)["input_tokens"],
                  "output_tokens": estimate_tokens(json.dumps(blocks)),
                  "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
    }


def count_tokens(request: Json) -> Json:
    """`/v1/messages/count_tokens`: an estimate over everything the model would read."""
    read = {key: request.get(key) for key in ("system", "messages", "tools")}
    return {"input_tokens": estimate_tokens(json.dumps(read))}


def events(message: Json) -> Iterator[tuple[str, Json]]:
    """The message as the stream of server-sent events the Messages API emits."""
    usage = message["usage"]
    start = message | {"content": [], "stop_reason": None, "usage": usage | {"output_tokens": 1}}
    yield "message_start", {"type": "message_start", "message": start}
    for index, block in enumerate(message["content"]):
        if block["type"] == "tool_use":
            opening = block | {"input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in pieces(json.dumps(block["input"]))]
        else:
            opening = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in pieces(block["text"]) or [""]]
        yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": opening}
        for delta in deltas:
            yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield "message_delta", {"type": "message_delta",
                            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                            "usage": {"output_tokens": usage["output_tokens"]}}
    yield "message_stop", {"type": "message_stop"}


def to_sse(message: Json) -> bytes:
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events(message)).encode()
