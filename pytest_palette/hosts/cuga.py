"""The cuga host: IBM's CUGA agent (PyPI `cuga`, SDK `CugaAgent`) drives the skill end to end.

CUGA finds the skill itself — installed fresh per item under `<work>/.cuga/skills/<name>/` and
checked with CUGA's own `discover_skills` — loads it with its `load_skill` tool and runs deck.py
through its `run_command` shell tool (codeact: the model writes Python that awaits the tools).

Three things about CUGA shape this module:

* It runs the model's Python in its own process (its codeact executor, behind a filter of imports and builtins
  that `asyncio` gets through). So each conversation's CUGA runs in a worker process of its own
  (`cuga_worker.py`), started inside the item's sandbox, with no network but its model's endpoint and no key.
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
import site
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from ..arena.cassette import CASSETTE_NAME, Cassette, WireRecorder
from ..arena.code_log import CODE_NAME, CodeLog
from ..arena.replay import WireReplay, wire_answer
from ..arena.sandbox import Sandbox, allowed_environment
from ..models import NO_KEY_HINT, ModelSpec, missing_credentials
from ..skill import SkillCard, drift, install, skill_hash
from .base import (
    Host,
    HostError,
    HostOption,
    HostSession,
    HostSettings,
    OptionRefused,
    Problem,
    TurnRecord,
    held_to_recording,
    recorded_exchanges,
    secret_values,
)
from .endpoint import FORWARDER_LOG, OPENAI_ROUTES, RELAY, RELAY_PORT, KeyForwarder, RehearsalEndpoint
from .shell import Shell
from .stops import TurnStopped, context_limit, finished, one_line, step_budget

if TYPE_CHECKING:
    import pytest

    from ..arena.workspace import Workspace

#: The version the host and its lean dependency set were proven against.
CUGA_VERSION = "0.4.3"
#: `execution_output_max_length` in cuga 0.4.3's settings.toml: the characters of a code block's output the model reads.
CUGA_OUTPUT_DEFAULT = 70_000
#: `run_command`'s own timeout in cuga 0.4.3 (a default argument, no setting): no block may outlast it.
RUN_COMMAND_CEILING = 120
INSTALL_HINT = ("pip install -r requirements-cuga.txt && pip install --no-deps cuga==" + CUGA_VERSION
                + " (the lean set the SDK path needs; a plain `pip install cuga` pulls several GB)")
#: The probe (cuga_probe.py, a process of its own: CUGA reads its models file once, at import) may take this long.
IMPORT_PROBE_TIMEOUT = 180.0


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
    "replay": "settings.openai.toml",  # its recording's answers, on the OpenAI wire it was recorded on
    "watsonx": "settings.watsonx.toml",
    "rits": "settings.rits.toml",
}


def unsupported_reason(model: ModelSpec) -> str | None:
    if model.provider in SETTINGS_FILES:
        return None
    return (f"the cuga host runs models through CUGA's own settings and maps only "
            f"{', '.join(sorted(set(SETTINGS_FILES) - {'replay'}))} (as provider:model); {model.provider!r} is not "
            "one of them")


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
    if model.provider in ("rehearsal", "replay"):
        if not rehearsal_url:
            raise HostError(f"the {model.provider} model needs its endpoint's URL")
        # CUGA's OpenAI client, pointed at the loopback rehearsal server (or the replay); the key is a placeholder.
        # A replay names the model it replays, as CUGA was told when it was recorded.
        name = model.recording.client_model("cuga")[1] if model.recording is not None else model.text
        return CugaModel(settings_file, {"OPENAI_BASE_URL": rehearsal_url, "OPENAI_API_KEY": "dummy",
                                         "MODEL_NAME": name})
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


# -- CUGA asked before a run, in a process of its own (cuga_probe.py) ----------------------------------------

#: The probe the host runs once per model (run by path: the standard library and CUGA only).
PROBE = Path(__file__).with_name("cuga_probe.py")


@dataclass(frozen=True)
class Probe:
    """What cuga_probe.py found: why CUGA cannot run here (and then nothing else), or the skills its discovery
    finds in the folder it was given, the model its settings resolve to, and its step limit."""

    problem: str | None = None
    skills: tuple[str, ...] | None = None
    model: str = "?"
    max_steps: str = "?"


#: The environment a probe's answer may depend on beside its models file and variables: CUGA's own settings.
PROBE_ENVIRONMENT = ("CUGA_", "AGENT_", "PYTHON")
#: Names of variables that hold a credential: left out of a probe's fingerprint.
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD", re.IGNORECASE)


def probe_fingerprint(settings_file: str, variables: Mapping[str, str], skills: str | None) -> str:
    """What a probe by this interpreter would answer depends on, as one digest: the probe itself, the models file,
    the model's variables (keys left out: no answer depends on them, and a key is written nowhere), CUGA's settings
    and PYTHONPATH in the environment, the skill's content (`skill_hash`), and this interpreter's site-packages
    folders, whose modification time changes when a package is installed, upgraded or removed there."""
    digest = hashlib.sha256()
    plain = {name: value for name, value in variables.items() if not SECRET_NAME.search(name)}
    environment = {name: value for name, value in os.environ.items()
                   if name.startswith(PROBE_ENVIRONMENT) and not SECRET_NAME.search(name)}
    folders = {}
    # Where the probe imports from: the probe runs in a scratch folder, so the caller's folder is not among them.
    for entry in {sysconfig.get_path("purelib"), sysconfig.get_path("platlib"), site.getusersitepackages()}:
        with contextlib.suppress(OSError):
            folders[entry] = os.stat(entry).st_mtime_ns
    for part in (sys.executable, PROBE.read_text(encoding="utf-8"), settings_file, plain, environment, skills,
                 folders):
        digest.update(json.dumps(part, sort_keys=True).encode())
        digest.update(b"\0")
    return digest.hexdigest()[:24]


def cached_probe(cache: pytest.Cache | None, settings_file: str, variables: Mapping[str, str],
                 skills: Path | None = None, skill: str | None = None) -> Probe:
    """`probe`, answered from `cache` when this interpreter probed the same inputs before (a probe costs 5 CPU-s
    at every session's start). Only an answer that found CUGA working is kept: a problem is asked again, so its fix
    is seen at once. `skill` is the content hash of the skill in `skills`."""
    if cache is None:
        return probe(settings_file, variables, skills)
    key = f"palette/cuga-probe/{probe_fingerprint(settings_file, variables, skill)}"
    kept = cache.get(key, None)
    if isinstance(kept, dict):
        with contextlib.suppress(KeyError, TypeError, ValueError):
            named = kept["skills"]
            return Probe(skills=None if named is None else tuple(map(str, named)), model=str(kept["model"]),
                         max_steps=str(kept["max_steps"]))
    found = probe(settings_file, variables, skills)
    if found.problem is None:
        cache.set(key, {"skills": None if found.skills is None else list(found.skills), "model": found.model,
                        "max_steps": found.max_steps})
    return found


def probe(settings_file: str, variables: Mapping[str, str], skills: Path | None = None,
          python: str = sys.executable) -> Probe:
    """Run cuga_probe.py with CUGA's models file `settings_file` and the model's `variables`, asking its discovery
    about `skills` (a folder holding `skills/<name>/`) when given.

    With the OpenAI-compatible models file it builds an agent's graph too, which imports the rest of the lean set.
    With another provider's, CUGA's agents would make that provider's clients (a key exchange, the network): not
    before a run."""
    import importlib.util

    graph = ["--graph"] if settings_file == SETTINGS_FILES["openai"] else []
    if importlib.util.find_spec("cuga") is None:
        return Probe(f"the CUGA SDK is not installed: {INSTALL_HINT}")
    with tempfile.TemporaryDirectory(prefix="palette-cuga-probe-") as scratch:
        # CUGA prefers a settings.toml in the cwd and loads the first .env above it: the scratch folder has neither.
        env = {**os.environ, "CUGA_DBS_DIR": f"{scratch}/dbs", "CUGA_LOGGING_DIR": f"{scratch}/logging",
               "ENV_FILE": os.devnull, "OPENAI_API_KEY": os.environ.get("OPENAI_API_KEY") or "dummy",
               **variables, "AGENT_SETTING_CONFIG": settings_file}
        try:
            argv = [python, str(PROBE), *graph, *([str(skills)] if skills is not None else [])]
            done = subprocess.run(argv, cwd=scratch, env=env, capture_output=True, text=True,
                                  timeout=IMPORT_PROBE_TIMEOUT, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return Probe(f"importing the CUGA SDK took longer than {IMPORT_PROBE_TIMEOUT:g} s")
    answer = done.stdout.strip().rpartition("\n")[2]
    if done.returncode == 0:
        with contextlib.suppress(ValueError):
            found = json.loads(answer)
            named = found["skills"]
            return Probe(skills=None if named is None else tuple(map(str, named)), model=str(found["model"]),
                         max_steps=str(found["max_steps"]))
    lines = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith(" ")]
    last = lines[-1] if lines else f"exit code {done.returncode}" if done.returncode else f"no answer: {answer[:200]!r}"
    return Probe(f"the CUGA SDK cannot be imported ({last}): {INSTALL_HINT}")


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
#: Where an OpenAI model is reached when neither `--palette-base-url` nor OPENAI_BASE_URL names another server.
OPENAI_API = "https://api.openai.com/v1"
#: Providers whose client the forwarder can hold the key for (an OpenAI-compatible endpoint, a Bearer key). The
#: others' clients exchange or send their keys themselves: their worker gets the keys and the network.
FORWARDED_PROVIDERS = frozenset({"rehearsal", "openai", "replay"})
#: The variables that carry a provider's credentials, for the providers whose worker holds them.
KEY_PREFIXES = {"watsonx": ("WATSONX_", "WX_"), "rits": ("RITS_",)}
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
                 provider: str, settings: HostSettings, sandbox: Sandbox, cassette: Cassette | None = None,
                 replay: WireReplay | None = None, max_steps: int | None = None) -> None:
        self.work = workspace.work
        #: CUGA's step limit a turn (`--palette-cuga-max-steps`); None: its settings' own.
        self.max_steps = max_steps
        self.cuga_folder = self.work / ".cuga"
        # The item's own, the same when it is replayed: a model's code that names its folder finds it again.
        self.thread_id = thread_id(workspace)
        self.cassette, self.replay = cassette, replay
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
        self._process: subprocess.Popen[bytes] | None = None
        self._forwarder: KeyForwarder | None = None
        self._scratch: Path | None = None
        self._said = threading.Lock()
        try:
            self.skill_dir = self._install(skill) if skill is not None else None
            # A task family's further skills, in CUGA's skills folder beside the first.
            self.skill_dirs = [self._install(card) for card in settings.skills] if skill is not None else []
            self._start(workspace, skill is not None, env, cuga, provider, settings)
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

    def _start(self, workspace: Workspace, skills: bool, env: Mapping[str, str], cuga: CugaModel, provider: str,
               settings: HostSettings) -> None:
        variables = dict(cuga.env)
        network = self.sandbox.network
        relay: list[str] = []
        if provider in FORWARDED_PROVIDERS:
            # The model's key stays here: the worker's client holds the forwarder's token, the forwarder adds the
            # key. With no network, the worker reaches the forwarder's socket, relayed to its own loopback; only
            # where it keeps the network does the forwarder listen on 127.0.0.1 too.
            upstream = variables.get("OPENAI_BASE_URL") or OPENAI_API
            key = env.get("OPENAI_API_KEY", "") if provider == "openai" else ""
            held = {"Authorization": f"Bearer {key}"} if key else {}
            record = WireRecorder(self.cassette, "openai", workspace.folder.resolve(), lambda: len(self.turns)) \
                if self.cassette is not None else None
            relayed = self.sandbox.confined and not network
            try:
                self._forwarder = KeyForwarder(None if self.replay else upstream, held, routes=OPENAI_ROUTES,
                                               observe=self._observed, record=record, replay=self.replay,
                                               loopback=not relayed, log=workspace.own(FORWARDER_LOG)).start()
            except ValueError as error:
                raise HostError(str(error)) from None
            if relayed:
                relay = [sys.executable, str(RELAY), str(self._forwarder.socket), str(RELAY_PORT), "--"]
                # The socket alone: its folder outside is open to this process's user only.
                self.sandbox.readable(self._forwarder.socket, RELAY)
            base_url = f"http://127.0.0.1:{RELAY_PORT}" if relayed else self._forwarder.base_url
            variables.update({"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": self._forwarder.token})
        else:
            # Its client exchanges the key for a token itself: the worker holds the key and needs the network.
            prefixes = KEY_PREFIXES.get(provider, ())
            variables.update({k: v for k, v in env.items() if k.startswith(prefixes)})
            # The run's header says so (`model_key`, from describe()), and docs/sandbox.md.
            network = True
        if self.sandbox.confined:
            state = "/tmp/cuga"  # the sandbox's own /tmp: bounded, and gone with the worker
        else:
            self._scratch = Path(tempfile.mkdtemp(prefix="palette-cuga-"))
            state = str(self._scratch)
        worker_env = {**self.sandbox.env, **variables, "AGENT_SETTING_CONFIG": cuga.settings_file,
                      "CUGA_DBS_DIR": f"{state}/dbs", "CUGA_LOGGING_DIR": f"{state}/logging", "ENV_FILE": os.devnull,
                      "CUGA_FOLDER": str(self.cuga_folder),
                      "PATH": agent_path(self.sandbox.env.get("PATH", ""), find_uv(env)),
                      # run_command makes a per-thread venv with `uv venv`: never let uv fetch a Python.
                      "UV_PYTHON_DOWNLOADS": env.get("UV_PYTHON_DOWNLOADS", "never")}
        self.sandbox.readable(WORKER)
        argv = self.sandbox.program([*relay, sys.executable, str(WORKER)], self.work, network=network)
        log = workspace.own("cuga.log")
        try:
            self._process = subprocess.Popen(argv, cwd=self.work, env=worker_env, stdin=subprocess.PIPE,
                                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        except OSError as error:
            raise HostError(f"the cuga worker could not start: {error}") from None
        threading.Thread(target=self._read, name="palette-cuga-worker", daemon=True).start()
        threading.Thread(target=self._keep_log, args=(log,), name="palette-cuga-log", daemon=True).start()
        self._say({"kind": "start", "state": state, "skills": skills, "cuga_folder": str(self.cuga_folder),
                   "thread_id": self.thread_id, "block_timeout": block_timeout(settings),
                   "output_limit": cuga_output_limit(settings.output_limit), "max_steps": self.max_steps,
                   "instructions": settings.profile})
        said = self._next(time.monotonic() + WORKER_START)
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
        heard = Heard() if self._forwarder is not None else None
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
            if self._forwarder is not None:
                self._forwarder.stop()
                self._forwarder = None
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
        self._endpoint = RehearsalEndpoint()
        #: One probe per model, and per skill asked about: a process importing CUGA costs 5 CPU-s.
        self._probes: dict[tuple[ModelSpec, Path | None], Probe] = {}
        #: `--palette-cuga-max-steps`; None: CUGA's own setting.
        self.max_steps: int | None = None

    def configure(self, given: Mapping[str, Any], *, skill: bool = True) -> None:
        steps = given.get("cuga-max-steps")
        if steps is not None and steps < 1:
            raise OptionRefused("cuga-max-steps", f"must be at least 1 (got {steps})")
        self.max_steps = steps

    def terms(self) -> dict[str, object]:
        # Only when given: the fingerprints of runs under CUGA's own limit stay as they were.
        return {} if self.max_steps is None else {"cuga_max_steps": self.max_steps}

    def check(self, model: ModelSpec, env: Mapping[str, str], skill: SkillCard | None = None) -> list[Problem]:
        reason = unsupported_reason(model)
        if reason:
            return [Problem(reason)]
        problems = [Problem(message) for message in credentials_needed(model, env)]
        missing = installed_problem()
        if missing:
            return [*problems, Problem(missing, skip=True)]
        drifted: list[str] = []
        if skill is None:
            found = self._probe(model, env)
        else:
            found, drifted = self._discover(model, env, skill)
        if found.problem:
            return [*problems, Problem(found.problem, skip=True)]
        problems += [Problem(f"the installed copy drifted: {d}") for d in drifted]
        if skill is not None and skill.name not in (found.skills or ()):
            problems.append(Problem(f"CUGA's discover_skills does not find {skill.name!r} in the installed copy's "
                                    f".cuga/skills (found: {', '.join(found.skills or ()) or 'nothing'}): check "
                                    "SKILL.md's frontmatter"))
        return problems

    def _probe(self, model: ModelSpec, env: Mapping[str, str], skills: Path | None = None,
               key: Path | None = None) -> Probe:
        if (model, key) not in self._probes:
            variables = cuga_model(model, env, rehearsal_url="http://127.0.0.1:0/v1").env
            self._probes[model, key] = cached_probe(self.cache, SETTINGS_FILES[model.provider], variables, skills,
                                                    None if key is None else skill_hash(key))
        return self._probes[model, key]

    def _discover(self, model: ModelSpec, env: Mapping[str, str], card: SkillCard) -> tuple[Probe, list[str]]:
        """Install the skill in a scratch folder exactly as a run would, and ask CUGA whether it sees it."""
        with tempfile.TemporaryDirectory(prefix="palette-cuga-check-") as scratch:
            folder = Path(scratch) / ".cuga"
            installed = install(card, folder).directory
            return self._probe(model, env, folder, key=card.directory), drift(card.directory, installed)

    def _described(self, model: ModelSpec) -> Probe:
        """The probe already run for `model` (by the check, with the skill), else one run now."""
        done = next((found for (probed, _), found in self._probes.items() if probed == model), None)
        return done if done is not None else self._probe(model, os.environ)

    def describe(self, model: ModelSpec, settings: HostSettings) -> dict[str, str]:
        facts = {"model": model.label, "provider": model.provider,
                 "worker": "a process of its own per conversation, in the item's sandbox (the model's code runs there)",
                 "model_key": "held by the harness (a forwarder adds it)" if model.provider in FORWARDED_PROVIDERS
                              else f"in the sandbox: {model.provider}'s client exchanges it itself (docs/sandbox.md)",
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
        if unsupported_reason(model) or installed_problem():
            return facts
        found = self._described(model)
        if found.problem:
            return facts
        facts.update({"cuga_model": f"{found.model} ({SETTINGS_FILES[model.provider]})",
                      "cuga_max_steps": facts.get("cuga_max_steps", found.max_steps),
                      "scaffold": f"cuga {_cuga_version()} CugaAgent, codeact, skills + shell tool"})
        expected = cuga_model(model, os.environ, rehearsal_url="http://127.0.0.1:0/v1").env.get("MODEL_NAME")
        if expected and not found.model.endswith("/" + expected):
            facts["model"] = found.model  # the truth, when CUGA would not run what was asked for
        return facts

    def agent_folder(self, workspace: Workspace) -> Path:
        return thread_folder(workspace)

    def open(self, workspace: Workspace, skill: SkillCard | None, env: Mapping[str, str], model: ModelSpec,
             settings: HostSettings, sandbox: Sandbox) -> CugaSession:
        replay = WireReplay(recorded_exchanges(model, workspace, "openai"), workspace.folder.resolve()) \
            if model.provider == "replay" else None
        url = (self._endpoint.server(model, settings).openai_base_url if model.provider == "rehearsal"
               else "http://127.0.0.1:0/v1" if replay else None)
        cassette = Cassette(workspace.own(CASSETTE_NAME), model.text, model.provider, secret_values(env, sandbox)) \
            if settings.record else None
        return CugaSession(workspace, skill, env, cuga_model(model, env, rehearsal_url=url), model.provider, settings,
                           sandbox, cassette=cassette, replay=replay, max_steps=self.max_steps)

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
