"""The cuga host: IBM's CUGA agent (PyPI `cuga`, SDK `CugaAgent`) drives the skill end to end.

CUGA finds the skill itself — installed fresh per item under `<work>/.cuga/skills/<name>/` and
checked with CUGA's own `discover_skills` — loads it with its `load_skill` tool and runs deck.py
through its `run_command` shell tool (codeact: the model writes Python that awaits the tools).

Three things about CUGA shape this module:

* Its configuration is process-wide. `cuga.config` reads `AGENT_SETTING_CONFIG` (which models file)
  once, at import, so the first model a process configures is the only one it can run; the model
  client reads `OPENAI_BASE_URL`/`MODEL_NAME`/… from `os.environ` when an agent is built.
* `run_command` runs `cd <cwd>/cuga_workspace/<thread> && <cmd>` with the parent's `os.environ`
  (plus its own per-thread `.venv`, made with `uv venv`). So, for each item only, the process
  chdirs into the work folder and `os.environ` becomes the conversation's environment; both are
  restored afterwards. One conversation at a time per process (xdist workers are processes).
* Failures come back in `InvokeResult.error`, not raised; the host turns them into HostError.

`import pytest_palette.hosts.cuga` never imports cuga: the SDK loads on first use.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..models import NO_KEY_HINT, ModelSpec, missing_credentials
from ..run.command_log import CommandLog
from ..run.sandbox import Sandbox, allowed_environment
from ..skill import SkillCard, drift, install
from .base import OUTPUT_LIMIT, Host, HostError, HostSession, HostSettings, Problem, TurnRecord
from .endpoint import RehearsalEndpoint
from .shell import Shell

if TYPE_CHECKING:
    from ..run.workspace import Workspace

#: The version the host and its lean dependency set were proven against.
CUGA_VERSION = "0.4.3"
#: `execution_output_max_length` in cuga 0.4.3's settings.toml: the characters of a code block's output the model reads.
CUGA_OUTPUT_DEFAULT = 70_000
#: `run_command`'s own timeout in cuga 0.4.3 (a default argument, no setting): no block may outlast it.
RUN_COMMAND_CEILING = 120
INSTALL_HINT = ("pip install -r requirements-cuga.txt && pip install --no-deps cuga==" + CUGA_VERSION
                + " (the lean set the SDK path needs; a plain `pip install cuga` pulls several GB)")
#: The import probe (a subprocess, so this process's CUGA configuration stays unchosen) may take this long.
IMPORT_PROBE_TIMEOUT = 180.0

#: Set in this process before CUGA is imported; carried into every item's environment as they were.
CUGA_PROCESS_VARIABLES = ("CUGA_DBS_DIR", "CUGA_LOGGING_DIR", "ENV_FILE")


# -- models ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CugaModel:
    """How a `--model` maps onto CUGA's own settings: a models file plus the variables it reads."""

    settings_file: str
    env: dict[str, str] = field(default_factory=dict)


#: provider → CUGA models file. `MODEL_NAME` overrides the file's model for every platform.
SETTINGS_FILES = {
    "rehearsal": "settings.openai.toml",
    "openai": "settings.openai.toml",
    "watsonx": "settings.watsonx.toml",
    "rits": "settings.rits.toml",
}


def unsupported_reason(model: ModelSpec) -> str | None:
    if model.provider in SETTINGS_FILES:
        return None
    return (f"the cuga host runs models through CUGA's own settings and maps only "
            f"{', '.join(sorted(SETTINGS_FILES))} (as provider:model); {model.provider!r} is not one of them")


def credentials_needed(model: ModelSpec, env: Mapping[str, str]) -> list[str]:
    """Each missing credential for `model` on CUGA, named with its fix. Names only, never values."""
    if model.provider == "rehearsal":
        return []
    if model.provider == "openai":
        missing = [] if env.get("OPENAI_API_KEY") else ["OPENAI_API_KEY"]
        hint = (f" ({NO_KEY_HINT})" if model.base_url
                else " (any OpenAI-compatible endpoint: also give --palette-base-url URL, or set OPENAI_BASE_URL)")
    elif model.provider == "watsonx":
        missing, hint = missing_credentials(model, env), ""
    elif model.provider == "rits":
        missing = [] if env.get("RITS_API_KEY") else ["RITS_API_KEY"]
        default = rits_default_model()
        if default and model.model_id != default and not env.get("RITS_BASE_URL"):
            # Each RITS model has its own URL; CUGA's file holds only its default model's.
            missing.append(f"RITS_BASE_URL (settings.rits.toml only knows the URL of {default})")
        hint = " (RITS is IBM's internal gateway)"
    else:
        return []
    if not missing:
        return []
    return [f"--model {model.text} on cuga needs {', '.join(missing)} in the environment{hint}; "
            f"{'it is' if len(missing) == 1 else 'they are'} not set"]


def rits_default_model() -> str | None:
    """The model CUGA's installed settings.rits.toml configures for its code agent (read, not imported)."""
    import importlib.util
    import re

    spec = importlib.util.find_spec("cuga")
    for root in (spec.submodule_search_locations or []) if spec else []:
        path = Path(root) / "configurations" / "models" / "settings.rits.toml"
        if path.is_file():
            section = path.read_text(encoding="utf-8").partition("[agent.code.model]")[2].partition("\n[")[0]
            found = re.search(r'^model_name\s*=\s*"([^"]+)"', section, re.M)
            return found.group(1) if found else None
    return None


def cuga_model(model: ModelSpec, env: Mapping[str, str], rehearsal_url: str | None = None) -> CugaModel:
    """The CUGA settings file and variables for `model`; `rehearsal_url` is the endpoint's /v1 URL."""
    reason = unsupported_reason(model)
    if reason:
        raise HostError(reason)
    settings_file = SETTINGS_FILES[model.provider]
    if model.provider == "rehearsal":
        if not rehearsal_url:
            raise HostError("the rehearsal model needs its endpoint's URL")
        # CUGA's OpenAI client, pointed at the loopback rehearsal server; the key is a placeholder.
        return CugaModel(settings_file, {"OPENAI_BASE_URL": rehearsal_url, "OPENAI_API_KEY": "dummy",
                                         "MODEL_NAME": model.text})
    variables = {"MODEL_NAME": model.model_id}
    # --palette-base-url first, then the caller's OPENAI_BASE_URL: CUGA's OpenAI client reads the variable.
    base_url = model.base_url or env.get("OPENAI_BASE_URL") if model.provider == "openai" else None
    if base_url:
        variables["OPENAI_BASE_URL"] = base_url
    return CugaModel(settings_file, variables)


# -- tools on PATH ---------------------------------------------------------------------------------


def find_uv(env: Mapping[str, str] | None = None) -> Path | None:
    """The `uv` binary run_command needs: on PATH, or beside this interpreter (an unactivated venv)."""
    environ = os.environ if env is None else env
    found = shutil.which("uv", path=environ.get("PATH", ""))
    if found:
        return Path(found)
    beside = Path(sys.executable).parent / "uv"
    return beside if beside.is_file() and os.access(beside, os.X_OK) else None


def agent_path(path: str, uv: Path | None) -> str:
    """PATH for the agent's shell: the conversation's, with uv's folder appended when uv is not on it.

    Appended, not prepended, so the agent's shell finds every other program where any host's would.
    """
    if uv is None or shutil.which("uv", path=path):
        return path
    return os.pathsep.join([entry for entry in path.split(os.pathsep) if entry] + [str(uv.parent)])


# -- loading CUGA once per process ---------------------------------------------------------------

@dataclass
class _ProcessCuga:
    """What this process has decided about CUGA: both are fixed the first time CUGA is imported."""

    settings_file: str | None = None
    state_dir: Path | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


_PROCESS = _ProcessCuga()


def cuga_state_dir() -> Path:
    """Where CUGA keeps its databases and logs in this process: a temp folder, never the repo."""
    if _PROCESS.state_dir is None:
        _PROCESS.state_dir = Path(tempfile.mkdtemp(prefix="palette-cuga-"))
        # CUGA holds these paths for the life of the process, so they go when the process does.
        atexit.register(shutil.rmtree, _PROCESS.state_dir, True)
    return _PROCESS.state_dir


def load_cuga(settings_file: str) -> Any:
    """Import CUGA configured with `settings_file` and return its `settings`.

    CUGA reads its models file at import, so a process can only ever use the first one; asking for
    another afterwards is a HostError naming the fix.
    """
    with _PROCESS.lock:
        if _PROCESS.settings_file is None and "cuga.config" in sys.modules:
            # Someone else imported CUGA first: whatever file it chose is the one in force.
            _PROCESS.settings_file = os.environ.get("AGENT_SETTING_CONFIG", "settings.openai.toml")
        if _PROCESS.settings_file is None:
            _import_cuga_config(settings_file)
            _PROCESS.settings_file = settings_file
        if _PROCESS.settings_file != settings_file:
            raise HostError(f"CUGA in this process was configured with {_PROCESS.settings_file} and cannot switch "
                            f"to {settings_file} (CUGA reads its models file once, at import): run one model per "
                            "pytest session")
        from cuga.config import settings  # type: ignore[import-untyped,import-not-found,unused-ignore]

        return settings


def _import_cuga_config(settings_file: str) -> None:
    """The first import of `cuga.config`, with what it reads at import time set first."""
    state = cuga_state_dir()
    os.environ["AGENT_SETTING_CONFIG"] = settings_file
    os.environ.setdefault("CUGA_DBS_DIR", str(state / "dbs"))
    os.environ.setdefault("CUGA_LOGGING_DIR", str(state / "logging"))
    # Without ENV_FILE CUGA loads the first .env above the cwd: keep a stray one out of the run.
    if not os.environ.get("ENV_FILE"):
        empty = state / "empty.env"
        empty.touch()
        os.environ["ENV_FILE"] = str(empty)
    _quiet_cuga_logging()
    saved_cwd = os.getcwd()
    try:
        # CUGA prefers a settings.toml / eval_config.toml in the cwd: import where there is none.
        os.chdir(state)
        import cuga.config  # type: ignore[import-untyped,import-not-found,unused-ignore]  # noqa: F401
    finally:
        os.chdir(saved_cwd)
        os.environ.pop("AGENT_SETTING_CONFIG", None)


def _quiet_cuga_logging() -> None:
    """CUGA logs hundreds of lines per turn through loguru's default stderr sink: each item gets a log file
    instead (see CugaSession). This project itself does not use loguru."""
    with contextlib.suppress(ImportError, ValueError):
        from loguru import logger

        logger.remove()


def cuga_output_limit(output_limit: int) -> int:
    """What CUGA trims a code block's output at: `--palette-output-limit`, or CUGA's own default if that is more."""
    return max(output_limit, CUGA_OUTPUT_DEFAULT)


def configure(settings: Any, block_timeout: int, output_limit: int = OUTPUT_LIMIT) -> None:
    """The CUGA settings every conversation runs with (process-wide in CUGA; set before each agent)."""
    settings.skills.enabled = True
    # run_command returns all a command printed; what the model reads of a code block's output CUGA trims here (a
    # head and "[Output trimmed to N chars]"): `--palette-output-limit`, never below CUGA's own default, because the
    # same trim cuts the skill's text that load_skill returns.
    settings.advanced_features.execution_output_max_length = cuga_output_limit(output_limit)
    # Without the shell tool CUGA drops the skills block from the prompt, and there is no run_command.
    settings.advanced_features.enable_shell_tool = True
    settings.advanced_features.sandbox_execution_timeout = block_timeout
    # Off: with it on, CUGA asks the model to classify each prose answer as interim or final, an extra
    # call per turn; the skill itself tells the agent to narrate only alongside the next status call.
    settings.advanced_features.cuga_lite_nl_auto_continue = False
    settings.policy.enabled = False
    # Off: it fetches guidelines from, and saves trajectories to, a service on 127.0.0.1:8201 that is not ours.
    settings.evolve.enabled = False


def discovered_names(cuga_folder: Path) -> list[str]:
    """The skill names CUGA's own discovery finds under `<cuga_folder>/skills`."""
    from cuga.backend.skills.loader import discover_skills  # type: ignore[import-untyped,import-not-found,unused-ignore]

    return [entry.name for entry in discover_skills(str(cuga_folder))]


def configured_model(settings: Any) -> str:
    """The model CUGA's code agent will use, as CUGA resolves it (settings file, then MODEL_NAME)."""
    try:
        model_settings = settings.agent.code.model
        platform = str(model_settings.get("platform") or "unknown")
        name = os.environ.get("MODEL_NAME") or model_settings.get("model_name") or "(the provider's default)"
        return f"{platform}/{name}"
    except Exception as error:  # a report line must not fail a run
        return f"unknown (could not read CUGA's model settings: {type(error).__name__})"


def item_environment(env: Mapping[str, str], cuga: CugaModel, cuga_folder: Path) -> dict[str, str]:
    """The process environment during an item: the conversation's, plus what CUGA and its shell need."""
    carried = {name: os.environ[name] for name in CUGA_PROCESS_VARIABLES if name in os.environ}
    return {**env, **carried, **cuga.env, "CUGA_FOLDER": str(cuga_folder),
            "PATH": agent_path(env.get("PATH", ""), find_uv(env)),
            # run_command makes a per-thread venv with `uv venv`: never let uv fetch a Python.
            "UV_PYTHON_DOWNLOADS": env.get("UV_PYTHON_DOWNLOADS", "never")}


#: pytest's own variable: its main thread sets and removes it around every item while a conversation is held in
#: another thread (--palette-conversations), so the block neither removes, sets nor restores it.
_PYTESTS = frozenset({"PYTEST_CURRENT_TEST"})


@contextlib.contextmanager
def process_state(env: Mapping[str, str], cwd: Path) -> Iterator[None]:
    """Make `os.environ` equal `env` (but pytest's own variable) and the cwd `cwd` for the block; restore both
    afterwards: each name to what it was, and no name set during the block left behind."""
    wanted = {name: value for name, value in env.items() if name not in _PYTESTS}
    touched = (set(os.environ) | set(wanted)) - _PYTESTS
    saved = {name: os.environ.get(name) for name in touched}
    saved_cwd = os.getcwd()
    try:
        for name in touched - set(wanted):
            os.environ.pop(name, None)
        os.environ.update(wanted)
        os.chdir(cwd)
        yield
    finally:
        os.chdir(saved_cwd)
        for name in set(os.environ) - set(saved) - _PYTESTS:  # what CUGA set meanwhile (its OTEL_* names)
            os.environ.pop(name, None)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# -- the conversation ----------------------------------------------------------------------------


def code_steps(text: str) -> list[str]:
    """Progress lines for one model answer in codeact: the tool calls its ```python blocks make."""
    from ..rehearsal.conversation import LoadSkill, RunCommand
    from ..rehearsal.openai_wire import parse_code

    lines: list[str] = []
    for event in parse_code(text, "step"):
        if isinstance(event, LoadSkill):
            lines.append(f"→ load_skill: {event.name}")
        elif isinstance(event, RunCommand):
            lines.append(f"→ run_command: {event.command}")
    if not lines and "```" in text:
        code = [line.strip() for line in text.split("```", 2)[1].splitlines()[1:] if line.strip()]
        lines.append(f"→ code: {code[0][:160] if code else '(empty block)'}")
    return lines


def step_recorder(steps: list[str], usage: dict[str, int] | None = None) -> Any:
    """A LangChain callback that appends each model answer's tool calls to `steps` (CUGA's
    `InvokeResult.tool_calls` stays empty for load_skill and run_command), and adds the tokens each model
    call reported to `usage`."""
    from langchain_core.callbacks import BaseCallbackHandler

    class StepRecorder(BaseCallbackHandler):
        def on_llm_end(self, response: Any, **kwargs: Any) -> None:
            for generations in getattr(response, "generations", []):
                for generation in generations:
                    steps.extend(code_steps(str(getattr(generation, "text", "") or "")))
            if usage is not None:
                for name, count in reported_usage(response).items():
                    usage[name] = usage.get(name, 0) + count

    return StepRecorder()


def reported_usage(response: Any) -> dict[str, int]:
    """The tokens one model call reported, as LangChain carries them: each answer's `usage_metadata` (set
    for streamed and most other responses), else the call's `llm_output["token_usage"]` (OpenAI's names);
    {} when the client reported none."""
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


@contextlib.contextmanager
def sandboxed_commands(shell: Shell) -> Iterator[None]:
    """Run each command CUGA's `run_command` runs through `shell` — in the item's sandbox, with an allow-listed
    environment (CUGA's own runner hands its whole process environment, model key included, to every command),
    recorded in the item's log — for the block. CUGA offers no hook for it (its code calls the tool's coroutine
    directly), so its one runner is replaced while this conversation holds the process; CUGA's own steps before
    a command (its path mapping, its per-thread venv, its shell settings) are kept."""
    from cuga.backend.cuga_graph.nodes.cuga_lite.executors.local import (  # type: ignore[import-untyped,import-not-found,unused-ignore]
        local_sandbox_executor as module,
    )

    executor_class = module.LocalSandboxExecutor
    original = executor_class._run_command

    async def sandboxed(executor: Any, cmd: str, *, thread_id: str | None = None,
                        timeout: int = RUN_COMMAND_CEILING) -> tuple[str, str, int]:
        root = module.local_thread_workspace_root(thread_id)
        root.mkdir(parents=True, exist_ok=True)
        venv = await executor._ensure_workspace_venv(root)
        shell.sandbox.own(root)
        env = {**shell.sandbox.env, **allowed_environment(executor._command_env(root, venv), root,
                                                          withheld=shell.sandbox.withheld)}
        ran = await asyncio.to_thread(shell.execute, module.normalize_shell_command_paths(cmd), root, env,
                                      float(timeout), cmd)
        if ran.timed_out:
            raise TimeoutError(f"Command timed out after {timeout}s")
        code = -1 if ran.code is None else ran.code
        stderr = ran.stderr if not code else (ran.stderr + "\n" if ran.stderr else "") + f"(exit code {code})"
        return ran.stdout, stderr, code

    executor_class._run_command = sandboxed
    try:
        yield
    finally:
        executor_class._run_command = original


class _RetryLines(logging.Handler):
    """Counts the openai SDK's "Retrying request" lines: one per retry of a model call, whatever its cause."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith("Retrying request"):
            self.count += 1


@contextlib.contextmanager
def counting_retries() -> Iterator[_RetryLines]:
    """Count, for the block, the retries of the openai client CUGA builds for itself. CUGA gives no way to hand
    it a client with our hook, so the SDK's own log line is the counting point; the logger is process-wide, as
    CUGA's state is: one cuga conversation at a time per process (see _active_lock)."""
    logger = logging.getLogger("openai._base_client")
    handler, level = _RetryLines(), logger.level
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


_active_lock = threading.Lock()


class CugaSession(HostSession):
    """One conversation: one CugaAgent, one thread id, one event loop, turns sent in order."""

    def __init__(self, work: Path, skill: SkillCard | None, env: Mapping[str, str], cuga: CugaModel,
                 block_timeout: int, log_file: Path | None = None, commands: CommandLog | None = None,
                 sandbox: Sandbox | None = None, output_limit: int = OUTPUT_LIMIT) -> None:
        if not _active_lock.acquire(blocking=False):
            raise HostError("another cuga conversation is running in this process (CUGA's state is process-wide)")
        self.work = work
        self.cuga_folder = work / ".cuga"
        self.thread_id = f"palette-{uuid.uuid4().hex[:8]}"
        self.env = dict(env)
        self.shell = Shell(work, env, RUN_COMMAND_CEILING, log=commands, sandbox=sandbox)
        self.turns: list[TurnRecord] = []
        self._steps: list[str] = []  # the current turn's, filled by the step recorder
        self._usage: dict[str, int] = {}  # the current turn's tokens, likewise
        self._broken: str | None = None
        self._loop = asyncio.new_event_loop()
        self._sink: int | None = None
        try:
            self._sink = _add_log_sink(log_file)
            settings = load_cuga(cuga.settings_file)
            self.env = item_environment(env, cuga, self.cuga_folder)
            with process_state(self.env, work):
                configure(settings, block_timeout, output_limit)
                # No skill (the baseline): nothing installed, and CUGA's skills off, so it offers no catalogue.
                self.skill_dir = self._install(skill) if skill is not None else None
                if skill is not None:
                    self.shell.sandbox.protect(self.cuga_folder)
                self.agent = self._make_agent(skills=skill is not None)
        except BaseException:
            self._release()
            raise

    def _install(self, skill: SkillCard) -> Path:
        installed = install(skill, self.cuga_folder).directory
        differences = drift(skill.directory, installed)
        if differences:
            raise HostError("the skill installed for CUGA is not the skill under test: " + "; ".join(differences[:5]))
        names = discovered_names(self.cuga_folder)
        if skill.name not in names:
            raise HostError(f"CUGA's discover_skills does not find {skill.name!r} in {self.cuga_folder / 'skills'} "
                            f"(it found: {', '.join(names) or 'nothing'}); the model would never be offered it. "
                            "Check SKILL.md's frontmatter (name, description)")
        return installed

    def _make_agent(self, skills: bool = True) -> Any:
        from cuga.sdk import CugaAgent  # type: ignore[import-untyped,import-not-found,unused-ignore]

        # No model=: CUGA builds its own client from its settings, the path a real deployment takes.
        return CugaAgent(cuga_folder=str(self.cuga_folder), auto_load_policies=False, enable_knowledge=False,
                         enable_skills=skills, skills_folder=str(self.cuga_folder) if skills else None,
                         callbacks=[step_recorder(self._steps, self._usage)])

    def send(self, message: str, timeout: float) -> TurnRecord:
        if self._broken:
            raise HostError(f"the session cannot continue: {self._broken}")
        turn = TurnRecord(sent=message)
        self.turns.append(turn)
        self._steps.clear()
        self._usage.clear()
        started = time.monotonic()
        retries = None
        try:
            with process_state(self.env, self.work), sandboxed_commands(self.shell), \
                    counting_retries() as retries:
                result = self._loop.run_until_complete(self._invoke(message, timeout))
            turn.answer = str(getattr(result, "answer", "") or "")
            if getattr(result, "error", None):
                raise HostError(f"CUGA reported an error: {result.error}")
        except HostError as error:
            turn.error = str(error)
            error.turn = turn
            raise
        finally:
            turn.steps = list(self._steps)
            turn.usage = dict(self._usage)
            turn.seconds = round(time.monotonic() - started, 3)
            turn.retries = retries.count if retries is not None else None
        return turn

    async def _invoke(self, message: str, timeout: float) -> Any:
        try:
            return await asyncio.wait_for(self.agent.invoke(message, thread_id=self.thread_id), timeout)
        except asyncio.TimeoutError:
            self._broken = f"turn timed out after {timeout:g} s"
            raise HostError(self._broken) from None
        except Exception as error:  # CUGA raising (rather than reporting) is a host failure too
            self._broken = f"{type(error).__name__}: {error}"
            raise HostError(f"CUGA raised {self._broken}") from None

    @property
    def workspace(self) -> Path:
        """CUGA's per-thread folder: the cwd of every command the agent runs."""
        return self.work / "cuga_workspace" / self.thread_id

    def close(self) -> None:
        self.shell.close()  # a command still running (the turn timed out) stops; none other starts
        try:
            if not self._loop.is_closed():
                with process_state(self.env, self.work), contextlib.suppress(Exception):
                    self._loop.run_until_complete(asyncio.wait_for(self.agent.aclose(), 30))
        finally:
            self._release()

    def _release(self) -> None:
        if not self._loop.is_closed():
            self._loop.close()
        _remove_log_sink(self._sink)
        self._sink = None
        with contextlib.suppress(RuntimeError):
            _active_lock.release()


def _add_log_sink(path: Path | None) -> int | None:
    if path is None:
        return None
    try:
        from loguru import logger
    except ImportError:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    return int(logger.add(str(path), level="INFO", enqueue=False))


def _remove_log_sink(sink: int | None) -> None:
    if sink is None:
        return
    with contextlib.suppress(ImportError, ValueError):
        from loguru import logger

        logger.remove(sink)


# -- the host ------------------------------------------------------------------------------------

#: What the import probe runs: the SDK, its skill discovery, and one agent's graph (which pulls in
#: the rest of the lean set: mcp, jinja2, browsergym, …). A fake model, so no provider is contacted.
_IMPORT_PROBE = """
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from cuga.backend.skills.loader import discover_skills
from cuga.sdk import CugaAgent
CugaAgent(model=GenericFakeChatModel(messages=iter([])), auto_load_policies=False, enable_knowledge=False).graph
"""


def import_problem(python: str = sys.executable) -> str | None:
    """Why the CUGA SDK cannot be imported here (checked in a subprocess), or None."""
    import importlib.util

    if importlib.util.find_spec("cuga") is None:
        return f"the CUGA SDK is not installed: {INSTALL_HINT}"
    with tempfile.TemporaryDirectory(prefix="palette-cuga-probe-") as scratch:
        env = {**os.environ, "CUGA_DBS_DIR": f"{scratch}/dbs", "CUGA_LOGGING_DIR": f"{scratch}/logging",
               "AGENT_SETTING_CONFIG": "settings.openai.toml", "ENV_FILE": os.devnull,
               "OPENAI_API_KEY": os.environ.get("OPENAI_API_KEY") or "dummy"}
        try:
            done = subprocess.run([python, "-c", _IMPORT_PROBE], cwd=scratch, env=env, capture_output=True,
                                  text=True, timeout=IMPORT_PROBE_TIMEOUT, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return f"importing the CUGA SDK took longer than {IMPORT_PROBE_TIMEOUT:g} s"
    if done.returncode == 0:
        return None
    lines = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith(" ")]
    last = lines[-1] if lines else f"exit code {done.returncode}"
    return f"the CUGA SDK cannot be imported ({last}): {INSTALL_HINT}"


class CugaHost(Host):
    """IBM's CUGA agent through its Python SDK; the rehearsal model is served to it over loopback HTTP."""

    name = "cuga"
    concurrent = False  # CUGA's configuration, os.environ and cwd are the process's (see above)

    def __init__(self) -> None:
        self._endpoint = RehearsalEndpoint()
        self._unavailable: tuple[str | None] | None = None

    def check(self, model: ModelSpec, env: Mapping[str, str], skill: SkillCard | None = None) -> list[Problem]:
        reason = unsupported_reason(model)
        if reason:
            return [Problem(reason)]
        problems = [Problem(message) for message in credentials_needed(model, env)]
        missing = self.unavailable()
        if missing:
            return [*problems, Problem(missing, skip=True)]
        if skill is not None:
            problems += [Problem(message) for message in self._discovery_problems(skill, model)]
        return problems

    def unavailable(self) -> str | None:
        """Why CUGA cannot run on this machine (no uv, an SDK that does not import), found once."""
        if self._unavailable is None:
            self._unavailable = (self._find_unavailable(),)
        return self._unavailable[0]

    def _find_unavailable(self) -> str | None:
        if find_uv() is None:
            return ("CUGA's run_command needs the `uv` binary, found neither on PATH nor beside "
                    f"{sys.executable}: pip install uv")
        return import_problem()

    def _discovery_problems(self, card: SkillCard, model: ModelSpec) -> list[str]:
        """Install the skill in a scratch folder exactly as a run would, and ask CUGA whether it sees it."""
        with tempfile.TemporaryDirectory(prefix="palette-cuga-check-") as scratch:
            folder = Path(scratch) / ".cuga"
            try:
                load_cuga(SETTINGS_FILES[model.provider])
                installed = install(card, folder).directory
                found = [f"the installed copy drifted: {d}" for d in drift(card.directory, installed)]
                names = discovered_names(folder)
            except HostError as error:
                return [str(error)]
            if card.name not in names:
                found.append(f"CUGA's discover_skills does not find {card.name!r} in {folder / 'skills'} "
                             f"(found: {', '.join(names) or 'nothing'}): check SKILL.md's frontmatter")
            return found

    def describe(self, model: ModelSpec, settings: HostSettings) -> dict[str, str]:
        facts = {"model": model.label, "provider": model.provider,
                 "skill_loading": "lazy (CUGA's load_skill; --palette-eager does not apply)",
                 "sandbox_execution_timeout": f"{block_timeout(settings)} s",
                 "run_command_timeout": f"{RUN_COMMAND_CEILING} s (fixed in cuga)",
                 "execution_output_max_length": f"{cuga_output_limit(settings.output_limit):,} characters",
                 # CUGA builds its OpenAI client itself, with the SDK's default bound.
                 "model_retries": "2 (the openai SDK's default in CUGA's client; --palette-model-retries does "
                                  "not reach it)"}
        if self.unavailable() or unsupported_reason(model):
            return facts
        try:
            cuga = cuga_model(model, os.environ, rehearsal_url="http://127.0.0.1:0/v1")
            cuga_settings = load_cuga(cuga.settings_file)
            with _variables(cuga.env):
                configured = configured_model(cuga_settings)
            steps = cuga_settings.advanced_features.get("cuga_lite_max_steps", "?")
        except HostError as error:
            return {**facts, "cuga": str(error)}
        facts.update({"cuga_model": f"{configured} ({cuga.settings_file})", "cuga_max_steps": str(steps),
                      "scaffold": f"cuga {_cuga_version()} CugaAgent, codeact, skills + shell tool"})
        expected = cuga.env.get("MODEL_NAME")
        if expected and not configured.endswith("/" + expected):
            facts["model"] = configured  # the truth, when CUGA would not run what was asked for
        return facts

    def open(self, workspace: Workspace, skill: SkillCard | None, env: Mapping[str, str], model: ModelSpec,
             settings: HostSettings, sandbox: Sandbox) -> CugaSession:
        url = (self._endpoint.server(model, settings).openai_base_url
               if model.provider == "rehearsal" else None)
        cuga = cuga_model(model, env, rehearsal_url=url)
        # CUGA's log stays in the item's folder, beside turns.json, out of the agent's sight.
        return CugaSession(workspace.work, skill, env, cuga, block_timeout(settings),
                           log_file=workspace.own("cuga.log"), commands=workspace.command_log(),
                           sandbox=sandbox, output_limit=settings.output_limit)

    def fault(self, model: ModelSpec) -> str | None:
        return self._endpoint.fault(model)

    def close(self) -> None:
        self._endpoint.close()


def block_timeout(settings: HostSettings) -> int:
    """CUGA's per-code-block limit: the harness's command limit, capped at run_command's own 120 s."""
    return max(1, min(int(settings.command_timeout), RUN_COMMAND_CEILING))


def _cuga_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("cuga")
    except PackageNotFoundError:
        return "?"


@contextlib.contextmanager
def _variables(values: Mapping[str, str]) -> Iterator[None]:
    """Set a few variables for the block and restore them."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
