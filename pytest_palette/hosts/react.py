"""The react host: LangGraph's prebuilt ReAct agent with a shell and a skill loader.

The thinnest scaffold of the hosts — a model, a shell and a loader that hands over SKILL.md when
asked; no planner, no todo list. A case it passes was passed by the skill's instructions.
"""

from __future__ import annotations

import queue
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..arena.cassette import CASSETTE_NAME, Cassette, Exchange
from ..arena.command_log import CommandLog
from ..layer.route import Route
from ..layer.serving import ModelLayer
from ..models import ModelUnavailable, RetryCounter, check_model
from ..skill import SkillCard, install
from .base import (
    COMMAND_TIMEOUT,
    RECURSION_LIMIT,
    Host,
    HostError,
    HostOption,
    HostSession,
    HostSettings,
    OptionRefused,
    Problem,
    TurnRecord,
    secret_values,
)
from .shell import DEFAULT_OUTPUT_LIMIT, Shell
from .stops import TurnStopped, finished, step_budget

# LangChain and LangGraph are imported where a conversation needs them: pytest reads this module's options at
# every start (`ReactHost.options`), and a session without react should not wait seconds for its client.
if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.tools import BaseTool

    from ..arena.sandbox import Sandbox
    from ..arena.workspace import Workspace
    from ..layer.endpoint import KeyForwarder


def with_profile(prompt: str, profile: str | None) -> str:
    """The system prompt with an agent profile's instructions after it (`HostSettings.profile`)."""
    return f"{prompt}\n\n{profile.strip()}" if profile and profile.strip() else prompt


def system_prompt(cards: list[SkillCard], skills_root: Path, eager: bool = False) -> str:
    """Host text only: it names no skill-specific vocabulary, so routing stays the model's decision. With no
    skill (the baseline) it says nothing of skills at all: the same agent, a shell and nothing else."""
    if not cards:
        return ("You are an agent with a shell.\n\nYour shell's working directory is the folder you work in. "
                "Work in the current directory. Do not cd elsewhere.")
    lines = [
        "You are an agent with a shell and a set of skills. When a request matches a skill, "
        "load it and follow its instructions exactly.",
        "",
        "Available skills:",
    ]
    for card in cards:
        lines.append(f"- {card.name}: {card.description}")
        if eager:
            lines += [f"--- begin {card.name} instructions ---", card.body.strip(),
                      f"--- end {card.name} instructions ---"]
    if cards and not eager:
        lines.append("Call load_skill(name) to read one before you use it.")
    lines += [
        "",
        f"The skills folder on this host is {skills_root}. Your shell's working directory is the "
        "folder that contains it. Work in the current directory. Do not cd elsewhere.",
    ]
    return "\n".join(lines)


def make_tools(
    cards: list[SkillCard],
    workspace: Path,
    env: Mapping[str, str],
    command_timeout: float = COMMAND_TIMEOUT,
    eager: bool = False,
    log: CommandLog | None = None,
    shell: Shell | None = None,
    output_limit: int = DEFAULT_OUTPUT_LIMIT,
) -> list[BaseTool]:
    from langchain_core.tools import StructuredTool

    by_name = {card.name: card for card in cards}
    runner = shell or Shell(workspace, env, command_timeout, output_limit, log)

    def load_skill(name: str) -> str:
        card = by_name.get(name.strip())
        if card is None:
            return f"no skill named {name.strip()!r}. Available: {', '.join(sorted(by_name)) or 'none'}"
        return card.body

    def bash(command: str) -> str:
        return runner.run(command)

    tool = StructuredTool.from_function(
        bash,
        name="bash",
        description=(f"Run one shell command with /bin/sh. The working directory is always {workspace}; "
                     f"do not cd. Commands are stopped after {command_timeout:g} s. Returns stdout, "
                     f"stderr and a non-zero exit code; an output over {runner.limit:,} characters is cut in "
                     "the middle, with a marker."),
    )
    if eager or not cards:  # nothing to load: the skill is inlined, or there is none (the baseline)
        return [tool]
    loader = StructuredTool.from_function(
        load_skill, name="load_skill",
        description="Return the full instructions of the skill with this name.",
    )
    return [loader, tool]


class ReactSession(HostSession):
    """One conversation: one graph, one thread id, turns sent in order."""

    #: The model layer's forwarder its model's calls pass, when faults are injected on the rehearsal model's wire:
    #: stopped with it.
    forwarder: KeyForwarder | None = None

    def __init__(
        self,
        model: BaseChatModel,
        cards: list[SkillCard],
        workspace: Path,
        env: Mapping[str, str],
        *,
        eager: bool = False,
        recursion_limit: int = RECURSION_LIMIT,
        command_timeout: float = COMMAND_TIMEOUT,
        stage_skills: bool = True,
        thread_id: str | None = None,
        log: CommandLog | None = None,
        sandbox: Sandbox | None = None,
        retries: RetryCounter | None = None,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        cassette: Cassette | None = None,
        profile: str | None = None,
    ) -> None:
        workspace.mkdir(parents=True, exist_ok=True)
        #: Where each model call is recorded (`--palette-record`); None: not recorded.
        self.cassette = cassette
        #: Counts the model client's retries, when its client lets us (openai:<model>); None: not counted.
        self.retries = retries
        self.workspace = workspace
        self.cards = [install(card, workspace) for card in cards] if stage_skills else list(cards)
        skills_root = workspace / "skills" if stage_skills else (cards[0].directory.parent if cards else workspace)
        if sandbox is not None and stage_skills and self.cards:
            sandbox.protect(skills_root)
        self.eager = eager
        self.recursion_limit = recursion_limit
        self.thread_id = thread_id or f"palette-{uuid.uuid4().hex[:8]}"
        self.shell = Shell(workspace, env, command_timeout, output_limit, log, sandbox)
        self.tools = make_tools(self.cards, workspace, env, command_timeout, eager, log, self.shell)
        from langgraph.checkpoint.memory import InMemorySaver
        from langgraph.prebuilt import create_react_agent

        with warnings.catch_warnings():
            # Pinned on purpose: the prebuilt ReAct agent is the thinnest scaffold LangGraph ships, and the
            # benchmark's floor. LangGraph 1.x marks it deprecated in favour of langchain's create_agent.
            warnings.simplefilter("ignore", category=DeprecationWarning)
            self.graph = create_react_agent(
                model, self.tools, prompt=with_profile(system_prompt(self.cards, skills_root, eager), profile),
                checkpointer=InMemorySaver(),
            )
        self.turns: list[TurnRecord] = []
        self._broken: str | None = None
        #: The model calls of the turn under way, as LangChain's callbacks report them.
        self._calls: ModelCalls | None = None

    def send(self, message: str, timeout: float | None = None,
             on_event: Callable[[str], None] | None = None) -> TurnRecord:
        """Send one user message and run the agent until it hands the turn back.

        Raises HostError when the turn times out, raises or exhausts the step budget.
        """
        if self._broken:
            raise HostError(f"the session cannot continue: {self._broken}")
        turn = TurnRecord(sent=message)
        self.turns.append(turn)
        self._calls = ModelCalls()
        started = time.monotonic()
        retried = self.retries.count if self.retries else 0
        updates: queue.Queue[tuple[str, Any]] = queue.Queue()
        worker = threading.Thread(target=self._stream, args=(message, updates), daemon=True)
        worker.start()
        deadline = None if timeout is None else started + timeout
        try:
            while True:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    kind, payload = updates.get(timeout=remaining)
                except queue.Empty:
                    # The graph keeps its thread; the session is marked broken so nothing reuses it.
                    self._broken = f"turn timed out after {timeout:g} s"
                    raise TurnStopped("turn_timeout", self._broken) from None
                if kind == "done":
                    break
                if kind == "stopped":  # a limit ended the turn before the agent answered
                    raise payload
                if kind == "error":
                    retries = self.retries.count - retried if self.retries else 0
                    # A call that failed after its retries names them: the cause was not a one-off.
                    raise HostError(payload + (f" (after {retries} retried model call(s) in this turn)"
                                               if retries else "")) from None
                for name, count in _usage(payload).items():
                    turn.usage[name] = turn.usage.get(name, 0) + count
                for line, answer in _describe(payload):
                    if line:
                        turn.steps.append(line)
                        if on_event or self.on_step:
                            (on_event or self.on_step)(line)  # type: ignore[misc]
                    if answer:
                        turn.answer = answer
        except HostError as error:
            turn.error = str(error)
            error.turn = turn
            raise
        finally:
            turn.seconds = round(time.monotonic() - started, 3)
            turn.model_calls = self._calls.count if self._calls is not None else None
            if self.retries is not None:
                turn.retries = self.retries.count - retried
        return turn

    def close(self) -> None:
        # The graph's thread cannot be stopped from outside; closing its shell leaves it nothing to do.
        self.shell.close()
        if self.forwarder is not None:
            self.forwarder.stop()

    def _stream(self, message: str, updates: queue.Queue[tuple[str, Any]]) -> None:
        from langchain_core.messages import AIMessage
        from langgraph.errors import GraphRecursionError

        calls = self._calls
        config: Any = {"configurable": {"thread_id": self.thread_id}, "recursion_limit": self.recursion_limit,
                       "callbacks": [] if calls is None else [calls.handler()]}
        if self.cassette is not None:
            config["callbacks"].append(recorder(self.cassette, len(self.turns)))
        last: Any = None
        try:
            for chunk in self.graph.stream({"messages": [{"role": "user", "content": message}]},
                                           config=config, stream_mode="updates"):
                updates.put(("update", chunk))
                for update in chunk.values():
                    for said in (update or {}).get("messages", []) if isinstance(update, dict) else []:
                        last = said if isinstance(said, AIMessage) else last
            stopped = calls.stopped(last, self.recursion_limit) if calls is not None else None
            updates.put(("stopped", stopped) if stopped is not None else ("done", None))
        except GraphRecursionError:
            updates.put(("stopped", step_budget(f"{self.recursion_limit} steps")))
        except Exception as error:
            updates.put(("error", f"{type(error).__name__}: {error}"))


class ModelCalls:
    """The model calls of one turn as LangChain's callbacks report them — how many, and the last answer as the
    model gave it, before the graph did anything with it."""

    def __init__(self) -> None:
        self.count = 0
        self.last: Any = None

    def handler(self) -> Any:
        from langchain_core.callbacks import BaseCallbackHandler

        calls = self

        class Counted(BaseCallbackHandler):
            run_inline = True  # in the graph's own thread, in call order

            def on_llm_end(self, response: Any, **kwargs: Any) -> None:
                calls.count += 1
                generations = response.generations[0] if response.generations else []
                calls.last = getattr(generations[0], "message", None) if generations else None

            def on_llm_error(self, error: BaseException, **kwargs: Any) -> None:
                calls.count += 1

        return Counted()

    def stopped(self, final: Any, recursion_limit: int) -> TurnStopped | None:
        """Why the turn whose last message was `final` ended, when it was not the agent's answer: the prebuilt
        agent put its own words in place of the model's last answer, which still asked for a tool (its
        `remaining_steps` ran low), or that answer ended at the model's output limit or in a refusal, as its
        client reported."""
        model = self.last
        if model is None or final is None or getattr(final, "id", None) != getattr(model, "id", None):
            return None
        if model.tool_calls and not final.tool_calls:
            return step_budget(f"{recursion_limit} steps")
        metadata = getattr(model, "response_metadata", None) or {}
        finish = str(metadata.get("finish_reason") or metadata.get("stop_reason") or "")
        named = "finish_reason" if metadata.get("finish_reason") else "stop_reason"
        return finished(finish, f'{named} "{finish}"')


def recorder(cassette: Cassette, turn: int) -> Any:
    """A LangChain callback that writes each chat model call of one turn to the cassette: the messages and tools
    the graph sent, and the answer (or the error) it got."""
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.messages import message_to_dict, messages_to_dict

    class Recorder(BaseCallbackHandler):
        run_inline = True  # in the graph's own thread, in call order

        def __init__(self) -> None:
            self.started: dict[Any, tuple[float, list[dict[str, Any]], list[dict[str, Any]]]] = {}

        def on_chat_model_start(self, serialized: dict[str, Any], messages: list[list[Any]], *, run_id: Any,
                                **kwargs: Any) -> None:
            tools = list((kwargs.get("invocation_params") or {}).get("tools") or [])
            self.started[run_id] = (time.time(), messages_to_dict(messages[0]), tools)

        def on_llm_end(self, response: Any, *, run_id: Any, **kwargs: Any) -> None:
            generation = response.generations[0][0]
            self._add(run_id, message_to_dict(generation.message), "")

        def on_llm_error(self, error: BaseException, *, run_id: Any, **kwargs: Any) -> None:
            self._add(run_id, None, f"{type(error).__name__}: {error}")

        def _add(self, run_id: Any, answer: dict[str, Any] | None, error: str) -> None:
            if run_id not in self.started:
                return
            started, messages, tools = self.started.pop(run_id)
            cassette.add(Exchange(index=cassette.next_index(), turn=turn, model=cassette.model,
                                  provider=cassette.provider, started_at=round(started, 3),
                                  ended_at=round(time.time(), 3), messages=messages, tools=tools, answer=answer,
                                  error=error))

    return Recorder()


def _usage(chunk: dict[str, Any]) -> dict[str, int]:
    """Tokens of the model's answers in one streamed update, as the model reported them (LangChain's
    usage_metadata); {} when it reported none."""
    from langchain_core.messages import AIMessage

    usage: dict[str, int] = {}
    for update in chunk.values():
        messages = (update or {}).get("messages", []) if isinstance(update, dict) else []
        for message in messages:
            reported = getattr(message, "usage_metadata", None) if isinstance(message, AIMessage) else None
            for name in ("input_tokens", "output_tokens"):
                if reported and isinstance(reported.get(name), int):
                    usage[name] = usage.get(name, 0) + reported[name]
    return usage


def _describe(chunk: dict[str, Any]) -> list[tuple[str, str]]:
    """Progress lines and answers from one streamed graph update."""
    from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

    found: list[tuple[str, str]] = []
    for update in chunk.values():
        messages: list[BaseMessage] = (update or {}).get("messages", []) if isinstance(update, dict) else []
        for message in messages:
            if isinstance(message, AIMessage):
                for call in message.tool_calls:
                    args = call.get("args", {})
                    shown = args.get("command") if "command" in args else args
                    found.append((f"→ {call['name']}: {shown}", ""))
                text = message.text if isinstance(message.text, str) else str(message.content)
                if text.strip():
                    found.append(("", text))
            elif isinstance(message, ToolMessage):
                content = message.content if isinstance(message.content, str) else str(message.content)
                found.append((f"← {' '.join(content.split())[:160]}", ""))
    return found


class ReactHost(Host):
    """LangGraph's prebuilt ReAct agent, lazy skill loading by default (`--palette-eager` inlines it)."""

    name = "react"
    #: Its rehearsal model is in-process, but served on the OpenAI wire when faults are injected (ModelLayer).
    serves_rehearsal = True
    records = True
    options = (
        HostOption("recursion-limit", f"step budget of the react host (default {RECURSION_LIMIT})", type=int,
                   metavar="N"),
        HostOption("eager", "inline the skill in the system prompt instead of offering it by name", switch=True),
    )

    def __init__(self) -> None:
        self.recursion_limit = RECURSION_LIMIT
        self.eager = False
        self.layer = ModelLayer()

    def configure(self, given: Mapping[str, Any], *, skill: bool = True) -> None:
        recursion, eager = given.get("recursion-limit"), bool(given.get("eager"))
        if recursion is not None and recursion < 1:
            raise OptionRefused("recursion-limit", f"must be at least 1 (got {recursion})")
        if eager and not skill:
            raise OptionRefused("eager", "inlines the skill, and --palette-skill none has none")
        self.recursion_limit = RECURSION_LIMIT if recursion is None else recursion
        self.eager = eager

    def terms(self) -> dict[str, object]:
        return {"recursion_limit": self.recursion_limit, "eager": self.eager}

    def check(self, route: Route, env: Mapping[str, str], skill: SkillCard | None = None) -> list[Problem]:
        try:
            check_model(route.model, env)
            problems = []
        except ModelUnavailable as error:
            problems = [Problem(str(error))]
        # The react host reads the skill where it lives (installed fresh per case): nothing to drift from.
        if skill is not None and not skill.description:
            problems.append(Problem(f"{skill.directory / 'SKILL.md'} has no description in its frontmatter: "
                                    "lazy loading offers the skill by its description"))
        return problems

    def describe(self, route: Route, settings: HostSettings) -> dict[str, str]:
        described = {"model": route.model.label, "provider": route.model.provider,
                     "skill_loading": "eager" if self.eager else "lazy",
                     "recursion_limit": str(self.recursion_limit),
                     "output_limit": f"{settings.output_limit:,} characters"}
        if route.live or settings.rehearsal_faults is not None:  # else no call could fail: in-process, a replay
            described["model_retries"] = str(settings.model_retries)
        return described

    def open(self, workspace: Workspace, skill: SkillCard | None, env: Mapping[str, str], route: Route,
             settings: HostSettings, sandbox: Sandbox) -> ReactSession:
        # Counted where the client stamps its retries (the openai SDK); other clients retry uncounted.
        chat, retries, forwarder = self.layer.chat_model(route, workspace, env, settings)
        session = ReactSession(chat, [skill, *settings.skills] if skill is not None else [], workspace.work, env,
                               eager=self.eager,
                               recursion_limit=self.recursion_limit, command_timeout=settings.command_timeout,
                               log=workspace.command_log(), sandbox=sandbox, retries=retries,
                               output_limit=settings.output_limit, profile=settings.profile,
                               cassette=Cassette(workspace.own(CASSETTE_NAME), route.model.text, route.model.provider,
                                                 secret_values(env, sandbox)) if settings.record else None)
        session.forwarder = forwarder
        session.calls_seen = forwarder.calls if forwarder is not None else None
        return session
