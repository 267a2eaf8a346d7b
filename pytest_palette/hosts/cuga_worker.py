"""The cuga host's worker: one CUGA conversation, run by the harness inside the item's sandbox.

    python cuga_worker.py        (the harness's channel: JSON lines on its standard input and output)

CUGA's codeact executor runs the model's Python in the process that runs CUGA, behind CUGA's own filter of
imports and builtins, which `asyncio.create_subprocess_shell` and `asyncio.open_connection` get through. So CUGA
runs here, in a process of its own started inside the item's sandbox: every line the model writes is under the
same confinement as its commands (no network but its model endpoint, no keys, no files but its own, bounded).

Whatever runs here is the agent's, so the harness trusts nothing this process says: it reads what the model
answered on its own endpoint, runs each command itself (in the sandbox, recorded on its clock) when asked here,
and treats every message as the agent's words. Standard library and CUGA only: this file runs with the harness's
interpreter, where the harness's package need not be importable.

Started by the harness's fork server (arena/forkserver.py), this file is loaded once, `warm()` imports CUGA, and each
conversation is a child of that process that has entered its item's sandbox and runs `main()`: its environment and
folder come in the `start` message, as nothing of a conversation reaches the warm process.

The channel, one JSON object a line. The harness says `start` (once, first), `send`, `ran` (a command's result)
and `close`; this process says `ready` (or `failed`), `run` (a command to run), and `done` at the end of a turn,
with why it ended (`stop`): `answered`, `step_budget` (CUGA's own step limit ended it: `limit` names it),
`turn_timeout` or `error`.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import json
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

# Run by path, this file's folder leads sys.path, and the host's own cuga.py there would shadow CUGA itself.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

#: `run_command`'s own timeout in cuga 0.4.3 (a default argument, no setting).
RUN_COMMAND_CEILING = 120
#: Messages CUGA keeps of a conversation (`message_window_limit`): more than any conversation has.
MESSAGE_WINDOW = 1_000_000


class Channel:
    """The harness's end: lines in from `source`, lines out to `sink` (one writer at a time)."""

    def __init__(self, source: IO[bytes], sink: IO[bytes]) -> None:
        self.source, self.sink = source, sink
        self._lock = threading.Lock()

    def say(self, kind: str, **fields: Any) -> None:
        line = json.dumps({"kind": kind, **fields}, ensure_ascii=False).encode("utf-8") + b"\n"
        with self._lock:
            self.sink.write(line)
            self.sink.flush()

    def read(self) -> dict[str, Any] | None:
        line = self.source.readline()
        return json.loads(line) if line else None


def _own_channel() -> Channel:
    """The channel on copies of stdin and stdout; the originals become /dev/null and stderr, so that what CUGA or
    the model's code prints goes to the log, never into the channel by accident."""
    source = os.fdopen(os.dup(0), "rb")
    sink = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    return Channel(source, sink)


def load_cuga(state: str) -> Any:
    """Import CUGA (its settings file named by AGENT_SETTING_CONFIG, read once, at import) from a folder with no
    settings.toml of its own, which CUGA would otherwise prefer."""
    Path(state).mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(ImportError, ValueError):
        from loguru import logger

        # CUGA logs through loguru's default sink at DEBUG: the harness keeps INFO and up, in cuga.log.
        logger.remove()
        logger.add(sys.stderr, level="INFO")
    here = os.getcwd()
    try:
        os.chdir(state)
        from cuga.config import settings  # type: ignore[import-untyped,import-not-found,unused-ignore]
    finally:
        os.chdir(here)
    return settings


def configure(settings: Any, block_timeout: int, output_limit: int, max_steps: int | None = None) -> None:
    """The CUGA settings every conversation runs with (the reasons: docs/hosts.md, "The cuga host"); `max_steps`:
    CUGA's step limit a turn (`--palette-cuga-max-steps`), None: its settings' own."""
    if max_steps is not None:
        settings.advanced_features.cuga_lite_max_steps = max_steps
    settings.skills.enabled = True
    settings.advanced_features.execution_output_max_length = output_limit
    # Without the shell tool CUGA drops the skills block from the prompt, and there is no run_command.
    settings.advanced_features.enable_shell_tool = True
    settings.advanced_features.sandbox_mode = "local"  # this process is the sandbox
    settings.advanced_features.sandbox_execution_timeout = block_timeout
    # Off: with it on, CUGA asks the model to classify each prose answer as interim or final, an extra call a turn.
    settings.advanced_features.cuga_lite_nl_auto_continue = False
    settings.policy.enabled = False
    # Off: it fetches guidelines from, and saves trajectories to, a service on 127.0.0.1:8201 that is not ours.
    settings.evolve.enabled = False
    # Off: near 70% of the window CUGA assumes for its model (131,072 tokens for one it does not know) it replaces
    # the older messages with the model's summary of them, each cut at 100,000 characters first: the pasted
    # material and the plan the user is asked to approve are lost, and the skill would be blamed. Without it the
    # model's own context window is the limit, and a model that refuses a request makes the turn an error.
    settings.context_summarization.enabled = False
    # Without summarization CUGA keeps the last `message_window_limit` messages (500) and drops the rest, unsaid.
    settings.advanced_features.message_window_limit = MESSAGE_WINDOW


def reported_usage(response: Any) -> dict[str, int]:
    """The tokens one model call reported: each answer's `usage_metadata`, else `llm_output["token_usage"]`."""
    usage: dict[str, int] = {}
    for generations in getattr(response, "generations", None) or []:
        for generation in generations:
            reported = getattr(getattr(generation, "message", None), "usage_metadata", None) or {}
            for name in ("input_tokens", "output_tokens"):
                if isinstance(reported.get(name), int):
                    usage[name] = usage.get(name, 0) + reported[name]
    if usage:
        return usage
    # Both places describe the same call: read the second only when the first is empty, never add them.
    totals = (getattr(response, "llm_output", None) or {}).get("token_usage") or {}
    for ours, theirs in (("input_tokens", "prompt_tokens"), ("output_tokens", "completion_tokens")):
        if isinstance(totals.get(theirs), int):
            usage[ours] = totals[theirs]
    return usage


def usage_recorder(usage: dict[str, int]) -> Any:
    from langchain_core.callbacks import BaseCallbackHandler

    class UsageRecorder(BaseCallbackHandler):
        def on_llm_end(self, response: Any, **kwargs: Any) -> None:
            for name, count in reported_usage(response).items():
                usage[name] = usage.get(name, 0) + count

    return UsageRecorder()


class Commands:
    """CUGA's `run_command`, asked of the harness: it runs each command in the item's sandbox and records it."""

    def __init__(self, channel: Channel, loop: asyncio.AbstractEventLoop) -> None:
        self.channel, self.loop = channel, loop
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.count = 0

    def install(self) -> None:
        from cuga.backend.cuga_graph.nodes.cuga_lite.executors.local import (  # type: ignore[import-untyped,import-not-found,unused-ignore]
            local_sandbox_executor as module,
        )

        commands = self

        async def run_command(executor: Any, cmd: str, *, thread_id: str | None = None,
                              timeout: int = RUN_COMMAND_CEILING) -> tuple[str, str, int]:
            # CUGA's own steps before a command are kept: its path mapping, its per-thread venv, its variables.
            root = module.local_thread_workspace_root(thread_id)
            root.mkdir(parents=True, exist_ok=True)
            venv = await executor._ensure_workspace_venv(root)
            ran = await commands.ask(module.normalize_shell_command_paths(cmd), str(root.resolve()),
                                     executor._command_env(root, venv), timeout)
            if ran.get("timed_out"):
                raise TimeoutError(f"Command timed out after {timeout}s")
            code = ran.get("code")
            code = -1 if code is None else int(code)
            stdout, stderr = str(ran.get("stdout", "")), str(ran.get("stderr", ""))
            if code:
                stderr = (stderr + "\n" if stderr else "") + f"(exit code {code})"
            return stdout, stderr, code

        module.LocalSandboxExecutor._run_command = run_command

    async def ask(self, command: str, cwd: str, env: dict[str, str], timeout: int) -> dict[str, Any]:
        self.count += 1
        ident = self.count
        answer: asyncio.Future[dict[str, Any]] = self.loop.create_future()
        self.pending[ident] = answer
        try:
            self.channel.say("run", id=ident, command=command, cwd=cwd, env=env, timeout=timeout)
            return await answer
        finally:
            self.pending.pop(ident, None)

    def answered(self, message: dict[str, Any]) -> None:
        """From the reading thread: a command's result."""
        answer = self.pending.get(int(message.get("id", 0)))
        if answer is not None and not answer.done():
            answer.set_result(message)


class StepLimit:
    """Whether CUGA's own step limit (`cuga_lite_max_steps`) ended the turn under way, as CUGA decided it.

    CUGA ends a turn at its limit by putting its own words where the answer goes ("Maximum step limit (70)
    reached…") and returning them as the answer, with no error — just as a model that gave up might. So its two
    checks (cuga_agent_core/graph/graph_nodes.py: `enforce_step_limit` after a model call, and
    `append_chat_messages_with_step_limit` after a code block) are watched here, where CUGA's graph calls them: each
    returns what ends the turn when the limit is passed, and nothing otherwise."""

    #: The modules that call the checks on cuga 0.4.3's codeact path: each must call the watched ones.
    CALLERS = ("cuga.backend.cuga_graph.nodes.cuga_agent_core.graph.shared_nodes",
               "cuga.backend.cuga_graph.nodes.cuga_lite.adapter.sandbox_node")

    def __init__(self) -> None:
        #: The limit that ended the turn ("cuga_lite_max_steps 70"), or None.
        self.reached: str | None = None

    def install(self) -> None:
        """Watch both checks wherever CUGA's modules hold them (each imports them by name); raise RuntimeError
        when a module of the codeact path does not call the watched ones (a CUGA other than 0.4.3)."""
        import importlib

        from cuga.backend.cuga_graph.nodes.cuga_agent_core.graph import (  # type: ignore[import-untyped,import-not-found,unused-ignore]
            graph_nodes,
        )

        for name in self.CALLERS:
            importlib.import_module(name)
        enforce, append = graph_nodes.enforce_step_limit, graph_nodes.append_chat_messages_with_step_limit
        watched = [(enforce, self._watched(enforce, lambda given, ended: ended is not None,
                                           lambda given: given["limit"])),
                   (append, self._watched(append, lambda given, ended: ended[1] is not None,
                                          lambda given: given["adapter"].resolve_max_steps(given["state"],
                                                                                           given["max_steps"])))]
        for module in list(sys.modules.values()):
            if not getattr(module, "__name__", "").startswith("cuga."):
                continue
            for name, value in list(vars(module).items()):
                for check, watching in watched:
                    if value is check:
                        setattr(module, name, watching)
        for name in self.CALLERS:
            held = vars(sys.modules[name]).values()
            if not any(value is watching for value in held for _, watching in watched):
                raise RuntimeError(f"{name} calls no step-limit check the worker knows (cuga 0.4.3's)")

    def _watched(self, check: Callable[..., Any], ended: Callable[[dict[str, Any], Any], bool],
                 limit: Callable[[dict[str, Any]], Any]) -> Callable[..., Any]:
        signature = inspect.signature(check)
        limits = self

        def watched(*args: Any, **kwargs: Any) -> Any:
            said = check(*args, **kwargs)
            given = signature.bind(*args, **kwargs)
            given.apply_defaults()
            if ended(given.arguments, said):
                try:
                    limits.reached = f"cuga_lite_max_steps {limit(given.arguments)}"
                except Exception:  # the limit's number is for the words: the stop is known without it
                    limits.reached = "cuga_lite_max_steps"
            return said

        return watched


def untraced(text: str) -> str:
    """`text` up to any Python traceback it holds (an error's words sometimes carry its chain's)."""
    for marker in ("Traceback (most recent call last)", "During handling of the above exception",
                   "The above exception was the direct cause"):
        text = text.split(marker, 1)[0]
    return text.strip()


def error_words(error: BaseException) -> str:
    """An exception in its own words, then each cause's that adds to them (a client's error wrapped by another's):
    no traceback — the harness keeps long words in a file of the item's anyway."""
    words: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and len(words) < 5:
        seen.add(id(current))
        said = untraced(str(current))
        line = f"{type(current).__name__}: {said}" if said else type(current).__name__
        if not words or said not in " ".join(words):
            words.append(line)
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return "; caused by ".join(words)


def _reader(channel: Channel, loop: asyncio.AbstractEventLoop, inbox: asyncio.Queue[dict[str, Any] | None],
            commands: Commands) -> None:
    """The channel's reading thread: results go to the command awaiting them, the rest to the inbox."""
    while True:
        try:
            message = channel.read()
        except (OSError, ValueError):
            message = None
        if message is not None and message.get("kind") == "ran":
            loop.call_soon_threadsafe(commands.answered, message)
            continue
        loop.call_soon_threadsafe(inbox.put_nowait, message)
        if message is None:
            return


async def converse(channel: Channel, start: dict[str, Any]) -> int:
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
    commands = Commands(channel, loop)
    threading.Thread(target=_reader, args=(channel, loop, inbox, commands), daemon=True).start()
    try:
        settings = load_cuga(str(start["state"]))
        max_steps = start.get("max_steps")
        configure(settings, int(start["block_timeout"]), int(start["output_limit"]),
                  None if max_steps is None else int(max_steps))
        commands.install()
        from cuga.backend.skills.loader import discover_skills  # type: ignore[import-untyped,import-not-found,unused-ignore]
        from cuga.sdk import CugaAgent  # type: ignore[import-untyped,import-not-found,unused-ignore]

        skills = bool(start["skills"])
        folder = str(start["cuga_folder"])
        names = [entry.name for entry in discover_skills(folder)] if skills else []
        usage: dict[str, int] = {}
        # No model=: CUGA builds its own client from its settings, the path a real deployment takes.
        # An agent profile's instructions (a task family's) go where CUGA adds to its system prompt.
        instructions = start.get("instructions") or None
        agent = CugaAgent(cuga_folder=folder, auto_load_policies=False, enable_knowledge=False, enable_skills=skills,
                          skills_folder=folder if skills else None, callbacks=[usage_recorder(usage)],
                          special_instructions=str(instructions) if instructions else None)
        _ = agent.graph  # built now, so the first turn's time is the turn's
        step_limit = StepLimit()
        step_limit.install()  # once CUGA's graph has imported every module that calls the checks
    except Exception as error:  # the harness names it: an ERROR of the run
        channel.say("failed", error=error_words(error))
        return 1
    channel.say("ready", skills=names)
    thread_id = str(start["thread_id"])
    while (message := await inbox.get()) is not None:
        if message.get("kind") == "close":
            break
        if message.get("kind") != "send":
            continue
        usage.clear()
        step_limit.reached = None
        timeout = float(message["timeout"])
        try:
            result = await asyncio.wait_for(agent.invoke(str(message["message"]), thread_id=thread_id), timeout)
        except asyncio.TimeoutError:
            channel.say("done", answer="", error=f"turn timed out after {timeout:g} s", usage=usage,
                        stop="turn_timeout")
            continue
        except Exception as error:  # CUGA raising (rather than reporting) is a host failure too
            channel.say("done", answer="", error=f"CUGA raised {error_words(error)}", usage=usage, stop="error")
            continue
        reported = getattr(result, "error", None)
        answer = str(getattr(result, "answer", "") or "")
        if reported:
            channel.say("done", answer=answer, error=f"CUGA reported an error: {untraced(str(reported))}",
                        usage=usage, stop="error")
        elif step_limit.reached:  # its answer is CUGA's words of the limit, not the agent's
            channel.say("done", answer=answer, usage=usage, stop="step_budget", limit=step_limit.reached)
        else:
            channel.say("done", answer=answer, usage=usage, stop="answered")
    with contextlib.suppress(Exception):
        await asyncio.wait_for(agent.aclose(), 30)
    return 0


#: The variables CUGA's imports set in the warm process, and that process's HOME (some of them are under it).
IMPORTED: dict[str, str] = {}
IMPORTED_HOME: list[str] = []
#: The model a warm agent is built for, and never calls: a placeholder key and a port no one listens on.
WARM_MODEL = {"OPENAI_API_KEY": "palette-warm-up-no-key", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}


#: What cuga 0.4.3 imports on a conversation's first turn, inside its functions (the agent built above does not reach
#: them): imported here once, or each forked conversation imported them itself, 273 modules and about 0.6 CPU-s each
#: (its server's FastAPI app among them, which CUGA's prepare node reads its knowledge engine from), 36 at once on 2
#: cores at the start of a sweep. Only modules: nothing of them runs until a turn calls them.
TURN_IMPORTS = (
    "cuga.backend.server.main",
    "cuga.backend.evolve.memory",
    "cuga.backend.cuga_graph.nodes.cuga_lite.shortlister.factory",
    "cuga.backend.agent_spawn.runtime",
    "cuga.backend.agent_spawn.tools",
    "cuga.backend.cuga_graph.nodes.cuga_agent_core.execution.variable_bridge",
    "cuga.backend.cuga_graph.policy.output_formatter_utils",
    "cuga.backend.cuga_graph.utils.langfuse_tracing",
    "anyio._backends._asyncio",
    "langchain_core.tracers.context",
    "langchain_core.tracers.run_collector",
    "langchain_core.tracers.stdout",
    "langchain_core.messages.block_translators.langchain_v0",
)


def warm() -> None:
    """Run once in the fork server, in a folder of its own and with no conversation's data: CUGA imported, and an
    agent built and dropped, so that what its graph imports on first use is imported too (the 5 CPU-s a start
    would cost). Its model client is dropped from CUGA's cache: each conversation builds its own, from its own
    environment."""
    here = Path.cwd()
    before = dict(os.environ)
    settings = load_cuga(str(here / "state"))
    configure(settings, RUN_COMMAND_CEILING, 20_000)
    from cuga.backend.llm.models import LLMManager  # type: ignore[import-untyped,import-not-found,unused-ignore]
    from cuga.sdk import CugaAgent  # type: ignore[import-untyped,import-not-found,unused-ignore]

    folder = here / "agent"
    (folder / "skills").mkdir(parents=True, exist_ok=True)
    os.environ.update(WARM_MODEL)
    try:
        agent = CugaAgent(cuga_folder=str(folder), auto_load_policies=False, enable_knowledge=False, enable_skills=True,
                          skills_folder=str(folder), callbacks=[usage_recorder({})])
        _ = agent.graph
        for name in StepLimit.CALLERS:  # imported, not watched: each conversation watches them itself
            importlib.import_module(name)
        for name in TURN_IMPORTS:
            importlib.import_module(name)
        del agent
    finally:
        # What CUGA's imports set in the environment (LITELLM_LOCAL_MODEL_COST_MAP, OTEL_SERVICE_NAME …), as a
        # worker that imported CUGA itself would hold them; never the warm agent's model.
        IMPORTED.update({name: value for name, value in os.environ.items()
                         if before.get(name) != value and name not in WARM_MODEL})
        IMPORTED_HOME[:] = [before.get("HOME", "")]
        os.environ.clear()
        os.environ.update({**before, **IMPORTED})
        LLMManager().clear_models()


def main() -> int:
    channel = _own_channel()
    start = channel.read()
    if not start or start.get("kind") != "start":
        return 2
    if "env" in start:  # a child of the warm process: the conversation's own environment and folder
        given = {str(name): str(value) for name, value in dict(start["env"]).items()}
        home = IMPORTED_HOME[0] if IMPORTED_HOME else ""
        imported = {name: value.replace(home, given["HOME"]) if home and "HOME" in given else value
                    for name, value in IMPORTED.items()}
        os.environ.clear()
        os.environ.update({**imported, **given})
        os.chdir(str(start["cwd"]))
    return asyncio.run(converse(channel, start))


if __name__ == "__main__":
    sys.exit(main())
