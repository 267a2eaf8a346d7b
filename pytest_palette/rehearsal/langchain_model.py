"""The rehearsal model as a LangChain chat model with tool calling (`--model rehearsal`).

It behaves like any tool-calling chat model: `bind_tools` binds tool schemas, each call gets the
whole message list, and the answer is an AIMessage carrying either `tool_calls` or text. The
decision itself comes from the format-free policy.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field

from .conversation import Action, AgentSaid, Conversation, Event, LoadSkill, Reply, RunCommand, ToolResult, UserSaid
from .latency import ModelLatency
from .limits import CONTEXT_CODE, ModelLimits
from .openai_wire import estimate_tokens, tool_roles
from .policy import RehearsalPolicy


class ContextTooLong(ValueError):
    """The request is longer than the rehearsal model's context (`--palette-rehearsal-limits context=N`)."""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part if isinstance(part, str) else str(part.get("text", "")) for part in content)
    return str(content)


class RehearsalChatModel(BaseChatModel):
    """A scripted, deterministic stand-in for a language model that follows the skill's protocol."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    policy: RehearsalPolicy = Field(default_factory=RehearsalPolicy)
    model_name: str = "rehearsal"
    #: A real model's latency per call (`--palette-rehearsal-latency`); None answers at once.
    latency: ModelLatency | None = None
    #: Its output and context limits (`--palette-rehearsal-limits`), met as a provider's client meets them.
    limits: ModelLimits = Field(default_factory=ModelLimits)

    @property
    def _llm_type(self) -> str:
        return "rehearsal"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name, "policy": type(self.policy).__name__}

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        return self.bind(tools=[convert_to_openai_tool(tool) for tool in tools], **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.latency is not None:
            self.latency.wait()
        roles = tool_roles(kwargs.get("tools") or [])
        # The same estimate the HTTP wires serve (characters / 4), so react's usage is filled as a real
        # model's would be, deterministically.
        read = estimate_tokens("".join(_text(m.content) + json.dumps(getattr(m, "tool_calls", None) or [])
                                       for m in messages))
        refusal = self.limits.openai_refusal(read)
        if refusal is not None:  # as the openai client raises a server's 400
            raise ContextTooLong(f"Error code: 400 - {{'error': {{'message': {refusal!r}, 'code': "
                                 f"'{CONTEXT_CODE}'}}}}")
        conversation = to_conversation(messages, roles)
        action = self.policy.next_action(conversation)
        cut = False
        if isinstance(action, Reply):
            text, cut = self.limits.cut(action.text)
            action = Reply(text) if cut else action
        message = to_message(action, roles, call_number=len(messages))
        # As a provider's client says why the answer ended (the openai client's `finish_reason`).
        message.response_metadata = {"finish_reason": "length" if cut else "tool_calls" if message.tool_calls
                                     else "stop", "model_name": self.model_name}
        said = estimate_tokens(_text(message.content) + json.dumps(message.tool_calls))
        message.usage_metadata = UsageMetadata(input_tokens=read, output_tokens=said, total_tokens=read + said,
                                               input_token_details={}, output_token_details={})
        return ChatResult(generations=[ChatGeneration(message=message)])


def to_conversation(messages: Sequence[BaseMessage], roles: dict[str, str]) -> Conversation:
    conversation = Conversation()
    events: list[Event] = conversation.events
    for message in messages:
        if isinstance(message, SystemMessage):
            conversation.system += _text(message.content)
        elif isinstance(message, HumanMessage):
            events.append(UserSaid(_text(message.content)))
        elif isinstance(message, ToolMessage):
            events.append(ToolResult(message.tool_call_id, _text(message.content)))
        elif isinstance(message, AIMessage):
            if _text(message.content).strip():
                events.append(AgentSaid(_text(message.content)))
            for call in message.tool_calls:
                args = call.get("args", {})
                call_id = call.get("id") or ""
                if call["name"] == roles.get("run"):
                    events.append(RunCommand(str(args.get("command", "")), call_id))
                elif call["name"] == roles.get("load"):
                    events.append(LoadSkill(str(args.get(roles.get("load_param", "name"), "")), call_id))
    return conversation


def to_message(action: Action, roles: dict[str, str], call_number: int) -> AIMessage:
    call_id = f"call_rehearsal_{call_number}"
    if isinstance(action, RunCommand) and "run" in roles:
        return AIMessage(content="", tool_calls=[
            {"name": roles["run"], "args": {"command": action.command}, "id": call_id, "type": "tool_call"}])
    if isinstance(action, LoadSkill) and "load" in roles:
        return AIMessage(content="", tool_calls=[
            {"name": roles["load"], "args": {roles.get("load_param", "name"): action.name}, "id": call_id,
             "type": "tool_call"}])
    if isinstance(action, Reply):
        return AIMessage(content=action.text)
    # The host offered no tool for what the protocol needs next: say so rather than pretend.
    return AIMessage(content=f"I need a tool this host does not offer to continue ({type(action).__name__}).")
