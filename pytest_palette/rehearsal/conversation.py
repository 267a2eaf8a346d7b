"""The rehearsal model's view of a conversation, independent of any wire format.

Each host speaks its own format (LangChain messages, OpenAI chat completions, Anthropic
messages); an adapter turns what the client sent into these events, and turns the policy's
action back into that client's shape. The policy sees only what a language model would see.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class UserSaid:
    text: str


@dataclass(frozen=True)
class AgentSaid:
    text: str


@dataclass(frozen=True)
class LoadSkill:
    """Ask the host for a skill's instructions by name."""

    name: str
    call_id: str = ""


@dataclass(frozen=True)
class RunCommand:
    """Run one shell command in the conversation's working directory."""

    command: str
    call_id: str = ""


@dataclass(frozen=True)
class ToolResult:
    call_id: str
    text: str


@dataclass(frozen=True)
class Reply:
    """Hand the turn back to the user with this text."""

    text: str


Event = UserSaid | AgentSaid | LoadSkill | RunCommand | ToolResult
Action = LoadSkill | RunCommand | Reply


@dataclass
class Conversation:
    """Everything the client sent: the system prompt and the events in order."""

    system: str = ""
    events: list[Event] = field(default_factory=list)

    def result_of(self, call_id: str) -> str | None:
        for event in self.events:
            if isinstance(event, ToolResult) and event.call_id == call_id:
                return event.text
        return None

    def current_turn(self) -> tuple[str, list[Event]]:
        """The last user message and everything the agent did after it."""
        for index in range(len(self.events) - 1, -1, -1):
            event = self.events[index]
            if isinstance(event, UserSaid):
                return event.text, self.events[index + 1:]
        return "", list(self.events)

    def earlier_turns(self) -> list[Event]:
        """Events before the last user message."""
        for index in range(len(self.events) - 1, -1, -1):
            if isinstance(self.events[index], UserSaid):
                return self.events[:index]
        return []

    def user_messages(self) -> list[str]:
        return [e.text for e in self.events if isinstance(e, UserSaid)]
