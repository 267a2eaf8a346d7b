"""The rehearsal model's view of a conversation, independent of any wire format.

Each host speaks its own format (LangChain messages, OpenAI chat completions, Anthropic
messages); an adapter turns what the client sent into these events, and turns the policy's
action back into that client's shape. The policy sees only what a language model would see.
"""

from __future__ import annotations

import re
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


#: The first line of a code block `RunCode` sends: the label it is known by on the wire and in the host's steps.
CODE_LABEL = "# palette-hostile: "
_LABEL = re.compile(r"[\w.-]+")


@dataclass(frozen=True)
class RunCode:
    """Run a block of Python in the host's own code executor (CUGA's codeact), through no tool. Only a host whose
    model answers with code can run it (`Conversation.codeact`); it is sent verbatim after a first line naming its
    label, by which the policy knows it ran. Written by this package (the hostile agents), never by a user."""

    code: str
    label: str
    call_id: str = ""

    def __post_init__(self) -> None:
        # A fence would end the block early, and a label must survive as one line of a comment.
        if "```" in self.code or not _LABEL.fullmatch(self.label):
            raise ValueError(f"a RunCode block holds a ``` fence or its label {self.label!r} is not a name")


@dataclass(frozen=True)
class ToolResult:
    call_id: str
    text: str


@dataclass(frozen=True)
class Reply:
    """Hand the turn back to the user with this text."""

    text: str


Event = UserSaid | AgentSaid | LoadSkill | RunCommand | RunCode | ToolResult
Action = LoadSkill | RunCommand | RunCode | Reply


@dataclass
class Conversation:
    """Everything the client sent: the system prompt and the events in order."""

    system: str = ""
    events: list[Event] = field(default_factory=list)
    #: The client runs the code the model answers with (CUGA's codeact), so a `RunCode` is an action it can take.
    codeact: bool = False

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
