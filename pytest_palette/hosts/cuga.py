"""The cuga host: IBM's CUGA agent (PyPI `cuga`, SDK `CugaAgent`) drives the skill end to end.

CUGA finds the skill itself — installed fresh per item under `<work>/.cuga/skills/<name>/` and
checked with CUGA's own `discover_skills` — loads it with its `load_skill` tool and runs deck.py
through its `run_command` shell tool (codeact: the model writes Python that awaits the tools).

Three things about CUGA shape this module:

* It runs the model's Python in its own process (its codeact executor, behind a filter of imports and builtins
  that `asyncio` gets through). So each conversation's CUGA runs in a worker process of its own
  (`cuga_worker.py`), started inside the item's sandbox, with no network but its model's endpoint and no key —
  forked from one warm CUGA that has done the imports (`arena/forkserver.py`; docs/sandbox.md says how the
  isolation is kept).
* Its configuration is process-wide: `cuga.config` reads `AGENT_SETTING_CONFIG` (which models file) once, at
  import, and the model client reads `OPENAI_BASE_URL`/`MODEL_NAME`/… from `os.environ`. A worker per
  conversation makes that the conversation's own, so conversations run side by side.
* Its `run_command` is asked of the harness over the worker's channel: the harness runs each command in the
  sandbox, as every host's are, and records it on its own clock. What the model answered the harness reads on its
  own endpoint (a forwarder per conversation), never from the worker, whose every word may be the model's code.

`import pytest_palette.hosts.cuga` never imports cuga: the SDK loads on first use.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from ..arena.code_log import CODE_NAME, CodeLog
from ..arena.forkserver import Forked, ForkFailed, ForkServer
from ..arena.replay import WireReplay, wire_answer
from ..arena.sandbox import Sandbox, allowed_environment
from ..layer.route import Route
from ..layer.serving import Endpoint, ModelLayer
from ..models import ModelSpec
from ..skill import SkillCard, drift, install, skill_hash
from .base import (
    Host,
    HostError,
    HostOption,
    HostSession,
    HostSettings,
    Problem,
    TurnRecord,
    held_to_recording,
    step_budget_option,
)
from .cuga_setup import (
    IMPORT_PROBE_TIMEOUT,
    INSTALL_HINT,
    SETTINGS_FILES,
    CugaModel,
    Probe,
    cached_probe,
    credentials_needed,
    cuga_model,
    probe,
    unsupported_reason,
)
from .shell import Shell
from .stops import TurnStopped, context_limit, finished, one_line, step_budget

if TYPE_CHECKING:

    from ..arena.workspace import Workspace

#: `execution_output_max_length` in cuga 0.4.3's settings.toml: the characters of a code block's output the model reads.
CUGA_OUTPUT_DEFAULT = 70_000
#: `run_command`'s own timeout in cuga 0.4.3 (a default argument, no setting): no block may outlast it.
RUN_COMMAND_CEILING = 120


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


def cuga_output_limit(output_limit: int) -> int:
    """What CUGA trims a code block's output at: `--palette-output-limit`, or CUGA's own default if that is more."""
    return max(output_limit, CUGA_OUTPUT_DEFAULT)


# -- what the model answered ---------------------------------------------------------------------


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


#: How CUGA 0.4.3 finds the code to run in a model's answer (code_extraction.BACKTICK_PATTERN): each ```python fence.
_PYTHON_FENCE = re.compile(r"```python(.*?)```", re.S)


def model_code(text: str) -> list[str]:
    """The blocks of code in one model answer that CUGA runs: its ```python fences, or an unclosed last one to the
    end of the answer (CUGA recovers it)."""
    blocks = [block.strip() for block in _PYTHON_FENCE.findall(text)]
    if not blocks and "```python" in text:
        blocks = [text.split("```python", 1)[1].strip()]
    return [block for block in blocks if block]




# -- the conversation: a worker in the item's sandbox ----------------------------------------------------------

#: The worker the harness starts for each conversation (standard library and CUGA only: run by path).
WORKER = Path(__file__).with_name("cuga_worker.py")
#: CUGA's state folder in a confined worker: the sandbox's own /tmp, bounded, and gone with the worker. The warm
#: process imports CUGA with the same, as CUGA reads it at import.
CONFINED_STATE = "/tmp/cuga"
#: How long a worker may take to import CUGA and build its agent: a busy machine takes many seconds.
WORKER_START = IMPORT_PROBE_TIMEOUT
#: Past a turn's own timeout, which the worker keeps, how long the harness waits before it stops the worker itself.
TURN_GRACE = 15.0
#: A line from the worker longer than this ends the conversation (a turn's answer is far smaller).
MAX_MESSAGE = 64 * 2**20
#: cuga.log holds at most this much of what CUGA logged; the rest is counted, not kept.
LOG_LIMIT = 32 * 2**20
#: Commands one worker may have running at once (CUGA runs a block's commands one by one unless it gathers them).
MAX_RUNNING = 8
#: A model answer with one of these statuses is one the client retries (as the openai SDK does).
RETRIED_STATUSES = frozenset({408, 409, 429})
#: What of a refusal's body (a 4xx) the harness reads for its sizes (a context limit's words are near its start).
REFUSAL_KEPT = 64 * 1024


class Ready(msgspec.Struct, tag_field="kind", tag="ready"):
    skills: list[str] = []


class Failed(msgspec.Struct, tag_field="kind", tag="failed"):
    error: str


class Run(msgspec.Struct, tag_field="kind", tag="run"):
    id: int
    command: str
    cwd: str
    env: dict[str, str]
    timeout: float = RUN_COMMAND_CEILING


class Done(msgspec.Struct, tag_field="kind", tag="done"):
    answer: str = ""
    error: str | None = None
    usage: dict[str, int] = {}
    #: Why the turn ended, as the worker saw CUGA end it (cuga_worker.py); the harness adds what its forwarder saw.
    stop: Literal["answered", "step_budget", "turn_timeout", "error"] = "answered"
    #: The limit that ended it, for `step_budget` ("cuga_lite_max_steps 70").
    limit: str = ""


#: What a worker may say: anything else ends its conversation.
WorkerMessage = Ready | Failed | Run | Done
_decode = msgspec.json.Decoder(WorkerMessage).decode


@dataclass(frozen=True)
class Ended:
    """The worker's channel closed, or said what it may not: why."""

    why: str


def answer_text(body: bytes) -> str:
    """The assistant text of one chat-completions answer, streamed (server-sent events) or whole; "" if none."""
    return wire_answer("openai", body.decode("utf-8", "replace"))[0]


def finish_reason(body: bytes) -> str:
    """Why the model ended one chat-completions answer (its choice's `finish_reason`: "stop", "length", …), streamed
    or whole; "" when it says none."""
    events: list[Any] = []
    text = body.decode("utf-8", "replace")
    for line in text.splitlines():
        if line.startswith("data:") and line[5:].strip() != "[DONE]":
            with contextlib.suppress(ValueError):
                events.append(json.loads(line[5:]))
    if not events:
        with contextlib.suppress(ValueError):
            events = [json.loads(text)]
    found = ""
    for event in events:
        for choice in event.get("choices") or [] if isinstance(event, dict) else []:
            if isinstance(choice, dict) and choice.get("finish_reason"):
                found = str(choice["finish_reason"])
    return found


@dataclass
class Heard:
    """What the harness's forwarder heard of one turn's model calls: how many, and the last answer's status,
    finish reason and (for a refusal) body."""

    calls: int = 0
    status: int = 0
    finish: str = ""
    refusal: str = ""


def thread_id(workspace: Workspace) -> str:
    """The item's own CUGA thread, the same when it is replayed: a model's code that names its folder finds it
    again."""
    return f"palette-{hashlib.sha256(str(workspace.relative).encode()).hexdigest()[:8]}"


def thread_folder(workspace: Workspace) -> Path:
    """CUGA's per-thread folder: the cwd of every command the agent runs."""
    return workspace.work / "cuga_workspace" / thread_id(workspace)


class CugaSession(HostSession):
    """One conversation: one worker process in the item's sandbox, holding one CugaAgent and one thread.

    The harness keeps the record: what the model answered (each code block's tool calls, from its own forwarder),
    each command (run by its shell, in the sandbox, on its clock), the retries (failed answers it passed on)."""

    def __init__(self, workspace: Workspace, skill: SkillCard | None, env: Mapping[str, str], cuga: CugaModel,
                 route: Route, settings: HostSettings, sandbox: Sandbox, layer: ModelLayer,
                 max_steps: int | None = None, forks: ForkServer | None = None) -> None:
        self.work = workspace.work
        #: CUGA's step limit a turn (`--palette-cuga-max-steps`); None: its settings' own.
        self.max_steps = max_steps
        self.cuga_folder = self.work / ".cuga"
        # The item's own, the same when it is replayed: a model's code that names its folder finds it again.
        self.thread_id = thread_id(workspace)
        #: The recording that answers (`--model replay:`), from the model layer's endpoint; else None.
        self.replay: WireReplay | None = None
        self.sandbox = sandbox
        self.shell = Shell(self.work, env, RUN_COMMAND_CEILING, log=workspace.command_log(), sandbox=sandbox)
        #: The code of each model answer, read on the harness's endpoint, beside the commands it ran.
        self.code = CodeLog(workspace.own(CODE_NAME))
        self.turns: list[TurnRecord] = []
        self._turn: TurnRecord | None = None
        #: What the forwarder heard of the turn under way (None where the worker's client reaches its provider
        #: itself: nothing is heard).
        self._heard: Heard | None = None
        self._lock = threading.Lock()  # the current turn, written by the forwarder's threads
        self._inbox: queue.Queue[WorkerMessage | Ended] = queue.Queue()
        self._running = threading.BoundedSemaphore(MAX_RUNNING)
        self._broken: str | None = None
        self._log_tail: collections.deque[str] = collections.deque(maxlen=12)
        self._process: subprocess.Popen[bytes] | Forked | None = None
        #: The warm CUGA this conversation's worker is forked from (a confined sandbox), else None.
        self.forks = forks
        self._endpoint: Endpoint | None = None
        self._scratch: Path | None = None
        self._said = threading.Lock()
        try:
            self.skill_dir = self._install(skill) if skill is not None else None
            # A task family's further skills, in CUGA's skills folder beside the first.
            self.skill_dirs = [self._install(card) for card in settings.skills] if skill is not None else []
            self._start(workspace, skill is not None, env, cuga, route, settings, layer)
        except BaseException:
            self.close()
            raise

    def _install(self, skill: SkillCard) -> Path:
        installed = install(skill, self.cuga_folder).directory
        differences = drift(skill.directory, installed)
        if differences:
            raise HostError("the skill installed for CUGA is not the skill under test: " + "; ".join(differences[:5]))
        self.sandbox.protect(self.cuga_folder)
        return installed

    def _start(self, workspace: Workspace, skills: bool, env: Mapping[str, str], cuga: CugaModel, route: Route,
               settings: HostSettings, layer: ModelLayer) -> None:
        variables = dict(cuga.env)
        network = self.sandbox.network
        relay: list[str] = []
        if route.forwarded:
            # The model's key stays with the model layer: the worker's client holds its forwarder's token.
            self._endpoint = layer.endpoint(route, "openai", workspace, env, settings, self.sandbox,
                                            observe=self._observed, turn=lambda: len(self.turns))
            self.replay, relay = self._endpoint.replay, self._endpoint.relay
            self.calls_seen = self._endpoint.forwarder.calls
            variables.update({"OPENAI_BASE_URL": self._endpoint.base_url, "OPENAI_API_KEY": self._endpoint.key})
        else:
            # Its client exchanges the key for a token itself: the worker holds the key and needs the network.
            variables.update({k: v for k, v in env.items() if k.startswith(route.client_keys)})
            # The run's header says so (`model_key`, from describe()), and docs/sandbox.md.
            network = True
        if self.sandbox.confined:
            state = CONFINED_STATE
        else:
            self._scratch = Path(tempfile.mkdtemp(prefix="palette-cuga-"))
            state = str(self._scratch)
        worker_env = {**self.sandbox.env, **variables, "AGENT_SETTING_CONFIG": cuga.settings_file,
                      "CUGA_DBS_DIR": f"{state}/dbs", "CUGA_LOGGING_DIR": f"{state}/logging", "ENV_FILE": os.devnull,
                      "CUGA_FOLDER": str(self.cuga_folder),
                      "PATH": agent_path(self.sandbox.env.get("PATH", ""), find_uv(env)),
                      # run_command makes a per-thread venv with `uv venv`: never let uv fetch a Python.
                      "UV_PYTHON_DOWNLOADS": env.get("UV_PYTHON_DOWNLOADS", "never")}
        start: dict[str, Any] = {
            "kind": "start", "state": state, "skills": skills, "cuga_folder": str(self.cuga_folder),
            "thread_id": self.thread_id, "block_timeout": block_timeout(settings),
            "output_limit": cuga_output_limit(settings.output_limit), "max_steps": self.max_steps,
            "instructions": settings.profile}
        deadline = time.monotonic() + WORKER_START
        if self.forks is not None:
            # A child of the warm CUGA, entered into this item's sandbox (docs/sandbox.md); its environment and
            # folder reach it on its channel, never through the warm process.
            try:
                self._process = self.forks.enter(
                    lambda argv: self.sandbox.program([*relay, *argv], self.work, network=network), self.work,
                    self.sandbox.env, deadline)
            except ForkFailed as error:
                raise HostError(f"CUGA could not start in its worker: {error}") from None
            start.update(env=worker_env, cwd=str(self.work))
        else:
            self.sandbox.readable(WORKER)
            argv = self.sandbox.program([*relay, sys.executable, str(WORKER)], self.work, network=network)
            try:
                self._process = subprocess.Popen(argv, cwd=self.work, env=worker_env, stdin=subprocess.PIPE,
                                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                 start_new_session=True)
            except OSError as error:
                raise HostError(f"the cuga worker could not start: {error}") from None
        threading.Thread(target=self._read, name="palette-cuga-worker", daemon=True).start()
        threading.Thread(target=self._keep_log, args=(workspace.own("cuga.log"),), name="palette-cuga-log",
                         daemon=True).start()
        self._say(start)
        said = self._next(deadline)
        if isinstance(said, Failed):
            raise HostError(f"CUGA could not start in its worker: {said.error}")
        if not isinstance(said, Ready):
            raise HostError(f"the cuga worker did not start: {self._why(said)}")
        for folder in ([self.skill_dir, *self.skill_dirs] if self.skill_dir is not None else []):
            if folder.name not in said.skills:
                raise HostError(f"CUGA's discover_skills does not find {folder.name!r} in "
                                f"{self.cuga_folder / 'skills'} (it found: {', '.join(said.skills) or 'nothing'}); "
                                "the model would never be offered it. Check SKILL.md's frontmatter (name, "
                                "description)")

    # -- the channel ---------------------------------------------------------------------------------------------

    def _say(self, message: dict[str, Any]) -> None:
        process = self._process
        if process is None or process.stdin is None:
            return
        with self._said, contextlib.suppress(OSError, ValueError):
            process.stdin.write(json.dumps(message).encode("utf-8") + b"\n")
            process.stdin.flush()

    def _read(self) -> None:
        """The worker's words, each decoded against the schema; a line it may not say ends the channel."""
        assert self._process is not None and self._process.stdout is not None
        stdout = self._process.stdout
        try:
            while line := stdout.readline(MAX_MESSAGE + 1):
                if len(line) > MAX_MESSAGE:
                    self._inbox.put(Ended(f"it sent a message over {MAX_MESSAGE // 2**20} MiB"))
                    return
                try:
                    self._inbox.put(_decode(line))
                except msgspec.ValidationError as error:
                    self._inbox.put(Ended(f"it sent what it may not ({error})"))
                    return
                except msgspec.DecodeError:
                    self._inbox.put(Ended("it sent a line that is not JSON"))
                    return
        except (OSError, ValueError):
            pass
        self._inbox.put(Ended(self._exit()))

    def _exit(self) -> str:
        process = self._process
        code = None
        if process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = process.wait(5)
        tail = " | ".join(line for line in self._log_tail if line)[-600:]
        return (f"it ended (exit code {code})" if code is not None else "it closed its channel") + \
            (f"; the last of its log: {tail}" if tail else "")

    def _keep_log(self, path: Path) -> None:
        """CUGA's log, from the worker's stderr, into cuga.log: bounded, and its last lines kept for an error."""
        assert self._process is not None and self._process.stderr is not None
        kept = 0
        with path.open("ab") as out:
            for line in self._process.stderr:
                self._log_tail.append(line[:300].decode("utf-8", "replace").strip())
                if kept < LOG_LIMIT:
                    out.write(line[:LOG_LIMIT - kept])
                    kept += len(line)
                    if kept >= LOG_LIMIT:
                        out.write(f"\n[cuga.log stops here: over {LOG_LIMIT // 2**20} MiB]\n".encode())
                    out.flush()

    def _next(self, deadline: float) -> WorkerMessage | Ended | None:
        """The worker's next message, or None at the deadline."""
        while (left := deadline - time.monotonic()) > 0:
            try:
                return self._inbox.get(timeout=min(left, 1.0))
            except queue.Empty:
                continue
        return None

    @staticmethod
    def _why(said: WorkerMessage | Ended | None) -> str:
        if said is None:
            return f"it said nothing within {WORKER_START:g} s"
        if isinstance(said, Ended):
            return said.why
        return f"it said {type(said).__name__.lower()!r} out of turn"

    # -- a turn --------------------------------------------------------------------------------------------------

    def send(self, message: str, timeout: float) -> TurnRecord:
        return held_to_recording(self.replay, lambda: self._send(message, timeout))

    def _send(self, message: str, timeout: float) -> TurnRecord:
        if self._broken:
            raise HostError(f"the session cannot continue: {self._broken}")
        turn = TurnRecord(sent=message, retries=0)
        heard = Heard() if self._endpoint is not None else None
        with self._lock:
            self.turns.append(turn)
            self._turn, self._heard = turn, heard
        started = time.monotonic()
        try:
            self._say({"kind": "send", "message": message, "timeout": timeout})
            deadline = started + timeout + TURN_GRACE
            while True:
                said = self._next(deadline)
                if isinstance(said, Run):
                    self._start_command(said)
                    continue
                if isinstance(said, Done):
                    # A replay asks no model: the recording's tokens were spent when it was recorded.
                    turn.answer, turn.usage = said.answer, {} if self.replay else dict(said.usage)
                    with self._lock:  # the forwarder heard each answer before the worker had its end
                        last = Heard(**vars(heard)) if heard is not None else None
                    stopped = ended(said, last)
                    if stopped is not None:
                        # The turn's record keeps the client's words where it had any; the item names the stop.
                        turn.error = said.error or None
                        self._broken = str(stopped)
                        raise stopped
                    turn.stop = "answered"
                    return turn
                if said is None:
                    self._broken = f"turn timed out after {timeout:g} s (the worker did not end it)"
                    self._stop_worker()
                    raise TurnStopped("turn_timeout", self._broken)
                self._broken = f"the cuga worker: {self._why(said)}"
                self._stop_worker()
                raise HostError(self._broken)
        except HostError as error:
            turn.error = turn.error or str(error)
            error.turn = turn
            raise
        finally:
            turn.seconds = round(time.monotonic() - started, 3)
            with self._lock:
                self._turn, self._heard = None, None
                turn.model_calls = heard.calls if heard is not None else None

    def _start_command(self, run: Run) -> None:
        if not self._running.acquire(blocking=False):
            self._say(_ran(run.id, "", f"refused: more than {MAX_RUNNING} commands at once", None))
            return
        threading.Thread(target=self._command, args=(run,), name="palette-cuga-command", daemon=True).start()

    def _command(self, run: Run) -> None:
        """Run one command the worker asked for, in the sandbox, recorded; say how it went."""
        try:
            cwd = Path(run.cwd)
            # The worker names its thread's folder; anything outside work/ is not a folder of this item.
            if not cwd.is_absolute() or ".." in cwd.parts or not cwd.is_relative_to(self.work):
                self._say(_ran(run.id, "", f"refused: {run.cwd[:200]} is not inside the item's work folder", None))
                return
            env = {**self.sandbox.env, **allowed_environment(run.env, cwd, withheld=self.sandbox.withheld)}
            timeout = float(min(max(run.timeout, 1.0), RUN_COMMAND_CEILING))
            ran = self.shell.execute(run.command, cwd, env, timeout)
            message = _ran(run.id, ran.stdout, ran.stderr, ran.code)
            message["timed_out"] = ran.timed_out
            self._say(message)
        finally:
            self._running.release()

    def _observed(self, status: int, body: bytes) -> None:
        """One model answer, as the forwarder passed it on: the tool calls of its code, or a retried failure."""
        with self._lock:
            turn, heard = self._turn, self._heard
            if turn is None:
                return
            if heard is not None:
                heard.calls += 1
                heard.status = status
                heard.finish = finish_reason(body) if status < 300 else ""
                heard.refusal = body[:REFUSAL_KEPT].decode("utf-8", "replace") if 400 <= status < 500 else ""
            if status in RETRIED_STATUSES or status >= 500:
                turn.retries = (turn.retries or 0) + 1
                return
            text = answer_text(body) if status < 300 else ""
            lines = code_steps(text)
            turn.steps.extend(lines)
            number = len(self.turns)
        for code in model_code(text):
            self.code.add(number, time.time(), code)
        if self.on_step is not None:
            for line in lines:
                self.on_step(line)

    @property
    def workspace(self) -> Path:
        """CUGA's per-thread folder: the cwd of every command the agent runs."""
        return self.work / "cuga_workspace" / self.thread_id

    # -- the end -------------------------------------------------------------------------------------------------

    def _stop_worker(self) -> None:
        """Stop the worker and all it started: its process group here, and the item's keeper holds the rest (the
        harness stops it when a conversation fails)."""
        process = self._process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(5)

    def close(self) -> None:
        self.shell.close()  # a command still running (the turn timed out) stops; none other starts
        process = self._process
        with self._lock:
            mid_turn = self._turn is not None
        try:
            # Between turns the worker closes its agent when asked. Mid-turn (Ctrl-C, -x, a timeout) it would only
            # hear the request once its turn ended: it is stopped at once, as nothing of it is kept but the record.
            if process is not None and process.poll() is None and not mid_turn and not self._broken:
                self._say({"kind": "close"})
                if process.stdin is not None:
                    with contextlib.suppress(OSError):
                        process.stdin.close()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(CLOSE_GRACE)
            self._stop_worker()
        finally:
            if isinstance(process, Forked):
                process.release()
            if self._endpoint is not None:
                self._endpoint.stop()
                self._endpoint = None
            if self._scratch is not None:  # made by this session, for CUGA's state unconfined
                shutil.rmtree(self._scratch, ignore_errors=True)
                self._scratch = None


#: How long a worker asked to close may take to close its agent before it is stopped.
CLOSE_GRACE = 5.0


def ended(done: Done, heard: Heard | None) -> HostError | None:
    """Why a turn the worker ended did not end in the agent's answer, or None when it did: CUGA's step limit, as the
    worker saw CUGA end the turn; a refusal of the request's size, as the forwarder heard the provider answer it; the
    model's last answer cut at its output limit or refused, as the forwarder heard its finish reason — never the
    model's words."""
    if done.stop == "step_budget":
        return step_budget(one_line(done.limit, 80) or "cuga_lite_max_steps")
    if done.stop == "turn_timeout":
        return TurnStopped("turn_timeout", done.error or "turn timed out")
    if done.error or done.stop == "error":
        words = done.error or "CUGA ended the turn in an error it did not name"
        # The provider's own body names the sizes its client's error may leave out (llama.cpp's n_ctx).
        stopped = context_limit(heard.refusal) if heard is not None and heard.refusal else None
        return stopped or context_limit(words) or HostError(words)
    if heard is not None and heard.status < 300:
        return finished(heard.finish or "", f'finish_reason "{heard.finish}"')
    return None


def _ran(ident: int, stdout: str, stderr: str, code: int | None) -> dict[str, Any]:
    return {"kind": "ran", "id": ident, "stdout": stdout, "stderr": stderr, "code": code}


# -- the host ------------------------------------------------------------------------------------

def installed_problem() -> str | None:
    """Why CUGA is not installed here (no uv, no SDK), found without importing it: import_problem() is the full
    check, and costs a second of CPU in a process of its own."""
    import importlib.util

    if find_uv() is None:
        return ("CUGA's run_command needs the `uv` binary, found neither on PATH nor beside "
                f"{sys.executable}: pip install uv")
    if importlib.util.find_spec("cuga") is None:
        return f"the CUGA SDK is not installed: {INSTALL_HINT}"
    return None


def import_problem(python: str = sys.executable) -> str | None:
    """Why the CUGA SDK cannot be imported here (checked in a process of its own), or None."""
    return probe(SETTINGS_FILES["openai"], {}, python=python).problem


#: The endpoint CUGA's settings name before the model layer's is known (a probe calls no model): nothing listens.
NO_CALL_URL = "http://127.0.0.1:0/v1"


class CugaHost(Host):
    """IBM's CUGA agent through its Python SDK; the rehearsal model is served to it over loopback HTTP."""

    name = "cuga"
    serves_rehearsal = True
    records = True
    options = (
        HostOption("cuga-max-steps", "CUGA's step limit a turn, its cuga_lite_max_steps (a model call or a code block "
                                     "is a step; default: CUGA's own setting, 70 in cuga 0.4.3)", type=int,
                   metavar="N"),
    )

    def __init__(self) -> None:
        self.layer = ModelLayer()
        #: One probe per model, and per skill asked about: a process importing CUGA costs 5 CPU-s.
        self._probes: dict[tuple[ModelSpec, Path | None], Probe] = {}
        #: `--palette-cuga-max-steps`; None: CUGA's own setting.
        self.max_steps: int | None = None
        #: The warm CUGA of each settings file, and its folder: the confined conversations' workers are its children.
        self._forks: dict[str, tuple[ForkServer, Path | None]] = {}
        self._forks_lock = threading.Lock()

    def configure(self, given: Mapping[str, Any], *, skill: bool = True) -> None:
        self.max_steps = step_budget_option(given, "cuga-max-steps", None)

    def terms(self) -> dict[str, object]:
        # Only when given: the fingerprints of runs under CUGA's own limit stay as they were.
        return {} if self.max_steps is None else {"cuga_max_steps": self.max_steps}

    def check(self, route: Route, env: Mapping[str, str], skill: SkillCard | None = None) -> list[Problem]:
        reason = unsupported_reason(route)
        if reason:
            return [Problem(reason)]
        problems = [Problem(message) for message in credentials_needed(route, env)]
        missing = installed_problem()
        if missing:
            return [*problems, Problem(missing, skip=True)]
        drifted: list[str] = []
        if skill is None:
            found = self._probe(route, env)
        else:
            found, drifted = self._discover(route, env, skill)
        if found.problem:
            return [*problems, Problem(found.problem, skip=True)]
        problems += [Problem(f"the installed copy drifted: {d}") for d in drifted]
        if skill is not None and skill.name not in (found.skills or ()):
            problems.append(Problem(f"CUGA's discover_skills does not find {skill.name!r} in the installed copy's "
                                    f".cuga/skills (found: {', '.join(found.skills or ()) or 'nothing'}): check "
                                    "SKILL.md's frontmatter"))
        return problems

    def _probe(self, route: Route, env: Mapping[str, str], skills: Path | None = None,
               key: Path | None = None) -> Probe:
        if (route.model, key) not in self._probes:
            found = cuga_model(route, env, url=NO_CALL_URL)
            self._probes[route.model, key] = cached_probe(self.cache, found.settings_file, found.env, skills,
                                                          None if key is None else skill_hash(key))
        return self._probes[route.model, key]

    def _discover(self, route: Route, env: Mapping[str, str], card: SkillCard) -> tuple[Probe, list[str]]:
        """Install the skill in a scratch folder exactly as a run would, and ask CUGA whether it sees it."""
        with tempfile.TemporaryDirectory(prefix="palette-cuga-check-") as scratch:
            folder = Path(scratch) / ".cuga"
            installed = install(card, folder).directory
            return self._probe(route, env, folder, key=card.directory), drift(card.directory, installed)

    def _described(self, route: Route) -> Probe:
        """The probe already run for `route`'s model (by the check, with the skill), else one run now."""
        done = next((found for (probed, _), found in self._probes.items() if probed == route.model), None)
        return done if done is not None else self._probe(route, os.environ)

    def describe(self, route: Route, settings: HostSettings) -> dict[str, str]:
        facts = {"model": route.model.label, "provider": route.model.provider,
                 "worker": "a process of its own per conversation, in the item's sandbox (the model's code runs there)"
                           + ("; forked from one warm CUGA" if forked(route, settings) else ""),
                 "model_key": "held by the harness (a forwarder adds it)" if route.forwarded else
                              f"in the sandbox: {route.model.provider}'s client exchanges it itself (docs/sandbox.md)",
                 "skill_loading": "lazy (CUGA's load_skill; --palette-eager does not apply)",
                 "sandbox_execution_timeout": f"{block_timeout(settings)} s",
                 "run_command_timeout": f"{RUN_COMMAND_CEILING} s (fixed in cuga)",
                 "execution_output_max_length": f"{cuga_output_limit(settings.output_limit):,} characters",
                 "context_summarization": "off: the model's context window is the limit (CUGA's would summarise "
                                          "the older messages, each cut at 100,000 characters)",
                 # CUGA builds its OpenAI client itself, with the SDK's default bound.
                 "model_retries": "2 (the openai SDK's default in CUGA's client; --palette-model-retries does "
                                  "not reach it)"}
        if self.max_steps is not None:
            facts["cuga_max_steps"] = f"{self.max_steps} (--palette-cuga-max-steps)"
        if unsupported_reason(route) or installed_problem():
            return facts
        found = self._described(route)
        if found.problem:
            return facts
        mapped = cuga_model(route, os.environ, url=NO_CALL_URL)
        facts.update({"cuga_model": f"{found.model} ({mapped.settings_file})",
                      "cuga_max_steps": facts.get("cuga_max_steps", found.max_steps),
                      "scaffold": f"cuga {_cuga_version()} CugaAgent, codeact, skills + shell tool"})
        expected = mapped.env.get("MODEL_NAME")
        if expected and not found.model.endswith("/" + expected):
            facts["model"] = found.model  # the truth, when CUGA would not run what was asked for
        return facts

    def agent_folder(self, workspace: Workspace) -> Path:
        return thread_folder(workspace)

    def open(self, workspace: Workspace, skill: SkillCard | None, env: Mapping[str, str], route: Route,
             settings: HostSettings, sandbox: Sandbox) -> CugaSession:
        # The URL is the model layer's, set when the session starts its endpoint: only a live one is CUGA's own.
        cuga = cuga_model(route, env, url=NO_CALL_URL)
        # Forked from a warm CUGA where the sandbox can be entered and the worker's model is the forwarder's: a
        # client that holds its own key, or an unconfined run, starts a worker of its own.
        forks = self._warm(cuga.settings_file, env) if sandbox.confined and forked(route, settings) else None
        return CugaSession(workspace, skill, env, cuga, route, settings, sandbox, self.layer,
                           max_steps=self.max_steps, forks=forks)

    def warm_up(self, route: Route, settings: HostSettings, env: Mapping[str, str]) -> None:
        """The warm CUGA its conversations fork from (its imports, about 5 CPU-s), started before the first of them
        opens: else every conversation of the sweep waits for it after its sandbox is up."""
        if forked(route, settings) and not unsupported_reason(route) and not installed_problem():
            self._warm(cuga_model(route, env, url=NO_CALL_URL).settings_file, env)

    def _warm(self, settings_file: str, env: Mapping[str, str]) -> ForkServer:
        with self._forks_lock:
            if settings_file not in self._forks:
                shared = env.get(SHARED_WARM)
                if shared:  # another session's, where it warmed this worker for this settings file
                    server = ForkServer(WORKER, {}, Path("/"), tag=warm_tag(settings_file), address=shared)
                    if server.usable(time.monotonic() + WORKER_START):
                        self._forks[settings_file] = (server, None)
                        return server
                    server.close()
                # Started now, not when this conversation's sandbox is up: every conversation of the sweep waits for
                # it to warm (its imports, about 5 CPU-s).
                self._forks[settings_file] = warm_server(settings_file, env)
                self._forks[settings_file][0].start()
            return self._forks[settings_file][0]

    def fault(self, route: Route) -> str | None:
        return self.layer.fault(route)

    def close(self) -> None:
        with self._forks_lock:
            forks, self._forks = self._forks, {}
        for server, folder in forks.values():
            server.close()
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)  # made by this host, for the warm process
        self.layer.close()


#: The socket of a warm CUGA another session of this user shares, used where it warmed the same worker and settings
#: file (else this session warms its own): the test suite shares one among the sessions it starts (tests/conftest.py).
SHARED_WARM = "PYTEST_PALETTE_CUGA_WARM"


def warm_tag(settings_file: str) -> str:
    return f"{WORKER.resolve()} {settings_file}"


def warm_server(settings_file: str, env: Mapping[str, str],
                listener: socket.socket | None = None) -> tuple[ForkServer, Path]:
    """A warm CUGA for `settings_file` (not started yet: it starts when first asked), and the folder it made for it;
    with `listener`, shared with the sessions that connect there."""
    folder = Path(tempfile.mkdtemp(prefix="palette-cuga-warm-"))
    # What CUGA reads at import, as a confined worker has it; nothing of any conversation.
    warm_env = {"PATH": agent_path(env.get("PATH", os.defpath), find_uv(env)), "HOME": str(folder),
                "AGENT_SETTING_CONFIG": settings_file, "CUGA_DBS_DIR": f"{CONFINED_STATE}/dbs",
                "CUGA_LOGGING_DIR": f"{CONFINED_STATE}/logging", "ENV_FILE": os.devnull,
                **{name: value for name, value in env.items() if name in ("LANG", "LC_ALL", "TZ")}}
    return ForkServer(WORKER, warm_env, folder, tag=warm_tag(settings_file), listener=listener), folder


def forked(route: Route, settings: HostSettings) -> bool:
    """Whether a conversation's worker is forked from the warm CUGA: in a sandbox it can enter, with its model the
    forwarder's (a client that holds its own key needs it in its environment when it starts)."""
    return route.forwarded and settings.sandbox != "none"


def block_timeout(settings: HostSettings) -> int:
    """CUGA's per-code-block limit: the harness's command limit, capped at run_command's own 120 s."""
    return max(1, min(int(settings.command_timeout), RUN_COMMAND_CEILING))


def _cuga_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("cuga")
    except PackageNotFoundError:
        return "?"
