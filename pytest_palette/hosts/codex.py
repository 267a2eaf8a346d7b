"""The codex host: the Codex CLI (`codex exec --json`) driving the skill, one process per turn, one thread per item.

Turn 1 runs `codex exec --json … -`, later turns `codex exec resume <thread id> -`, the message on stdin; each
prints the thread's events as JSON lines (`thread.started`, `item.completed` for each command and message,
`turn.completed` with the usage), read back into the turn's record.

Nothing of the user's own Codex reaches it: `--ignore-user-config`, a CODEX_HOME of the item's own (beside `work/`,
never in it), `--skip-git-repo-check`. The skill is installed in `work/.agents/skills/<name>/`, where Codex finds a
project's skills. The model is a provider named by `-c model_providers.palette.*` on the Responses wire, pointed at
the model layer's endpoint (layer/serving.py), which holds the key: the CLI holds its forwarder's token, in a
variable its commands are not given.

Codex runs its commands itself, with no wrapper the harness could give it, so the whole CLI runs confined as a
command is (`sandbox.program`: the item's user id, its limits, no network but its model's socket on its loopback);
Codex's own sandbox is off (`danger-full-access`): inside ours it could not start its own (docs/sandbox.md).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from ..arena.command_log import CommandLog
from ..layer.route import Route
from ..layer.serving import Endpoint, ModelLayer
from ..skill import SkillCard, drift, install
from .base import (
    Host,
    HostError,
    HostOption,
    HostSession,
    HostSettings,
    Problem,
    TurnRecord,
    client_version,
    held_to_recording,
    step_budget_option,
)
from .stops import TurnStopped, context_limit, step_budget

if TYPE_CHECKING:
    from ..arena.sandbox import Sandbox
    from ..arena.workspace import Workspace

#: The version the host was proven against (`make codex` installs it).
CODEX_VERSION = "0.171.0"
INSTALL_HINT = (f"make codex (npm install @openai/codex@{CODEX_VERSION} into .venv/node), put `codex` on PATH, "
                "or pass --palette-codex-cli PATH")
#: The provider's name in Codex's config: the model layer's endpoint.
PROVIDER = "palette"
#: The variable the CLI reads its provider's key from: the forwarder's token. Codex leaves a variable whose name
#: holds KEY out of its commands' environment.
KEY_VARIABLE = "PALETTE_MODEL_KEY"
#: How the model is named when the rehearsal agent answers (Codex warns it has no metadata for it; it runs).
REHEARSAL_MODEL = "rehearsal"
#: The step budget of a turn (`--palette-codex-max-steps`): its model calls, as the model layer's forwarder hears
#: them. Codex has no limit of its own: an agent that never answers would run until the turn's timeout.
MAX_STEPS = 60
KILL_GRACE = 5.0
#: What of the CLI's stderr a failure names.
TAIL = 1500
VERSION_TIMEOUT = 30.0


def find_codex(explicit: str | None = None) -> Path | None:
    """The Codex CLI: `explicit` (`--palette-codex-cli`), else `make codex`'s beside this interpreter, else on PATH."""
    if explicit:
        path = Path(explicit)
        return path if path.is_file() and os.access(path, os.X_OK) else None
    beside = Path(sys.executable).parent / "codex"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("codex")
    return Path(found) if found else None


def native(cli: Path) -> Path:
    """The CLI's own binary: npm's `codex` is a Node script that starts it (a Node start per turn saved)."""
    real = cli.resolve()
    if real.suffix != ".js":
        return real
    vendor = real.parent.parent.parent / "codex-linux-x64" / "vendor"
    found = sorted(vendor.glob("*/bin/codex")) if vendor.is_dir() else []
    return found[0] if found else real


def codex_config(base_url: str, retries: int) -> list[str]:
    """The `-c` overrides every turn runs with: the model layer as the only provider, Codex's own sandbox and
    approvals off (ours confines it), and nothing that reaches out on its own."""
    values: dict[str, Any] = {
        "model_provider": PROVIDER,
        f"model_providers.{PROVIDER}.name": PROVIDER,
        f"model_providers.{PROVIDER}.base_url": base_url,
        f"model_providers.{PROVIDER}.wire_api": "responses",
        f"model_providers.{PROVIDER}.env_key": KEY_VARIABLE,
        # Codex retries a call at two levels, its request and its stream, and a 5xx, a 429 or a reset meets both:
        # (1 + one) × (1 + other) calls. The stream's bound alone makes it `retries` retries, as on every host.
        f"model_providers.{PROVIDER}.request_max_retries": 0,
        f"model_providers.{PROVIDER}.stream_max_retries": retries,
        "sandbox_mode": "danger-full-access",
        "approval_policy": "never",
        # A login shell would read the profile files and reset PATH: the agent's commands get the sandbox's.
        "allow_login_shell": False,
        "web_search": "disabled",
        "check_for_update_on_startup": False,
        # Its metrics go to ab.chatgpt.com: with no network, the name's lookup alone held each turn's end 5 s.
        "analytics.enabled": False,
        "features.memories": False,
        "features.multi_agent": False,
        "features.apps": False,
        "features.hooks": False,
        "features.plugins": False,
    }
    return [option for name, value in values.items() for option in ("-c", f"{name}={json.dumps(value)}")]


# -- reading what the CLI printed ------------------------------------------------------------------

#: `/bin/bash -c '<command>'` as Codex reports a command: the command is what the agent ran.
_SHELL = re.compile(r"^(?:/usr)?/bin/(?:ba)?sh -l?c (.*)$", re.S)


def command_of(reported: str) -> str:
    """The agent's command in Codex's report of it (`/bin/bash -c '…'`, quoted for the shell)."""
    import shlex

    match = _SHELL.match(reported)
    if match is None:
        return reported
    try:
        words = shlex.split(match.group(1))
    except ValueError:
        return reported
    return words[0] if len(words) == 1 else reported


@dataclass
class CodexOutput:
    """One `codex exec --json` run's events, read."""

    thread_id: str | None = None
    messages: list[str] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    completed: bool = False
    failed: str | None = None
    #: Each command it ran, in order: (the command, its output, its exit code).
    commands: list[tuple[str, str, int | None]] = field(default_factory=list)


def parse_events(lines: Iterable[str]) -> CodexOutput:
    out = CodexOutput()
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        kind = event.get("type")
        item: dict[str, Any] = event["item"] if isinstance(event.get("item"), dict) else {}
        if kind == "thread.started":
            out.thread_id = str(event.get("thread_id") or "") or None
        elif kind == "item.completed" and item.get("type") == "agent_message":
            text = str(item.get("text") or "")
            out.messages.append(text)
            out.steps.append(f"said: {text[:200]}")
        elif kind == "item.completed" and item.get("type") == "command_execution":
            code = item.get("exit_code")
            out.commands.append((command_of(str(item.get("command") or "")), str(item.get("aggregated_output") or ""),
                                 code if isinstance(code, int) and not isinstance(code, bool) else None))
            out.steps.append(f"ran: {out.commands[-1][0]} (exit {code})")
        elif kind == "turn.completed":
            out.completed = True
            usage: dict[str, Any] = event["usage"] if isinstance(event.get("usage"), dict) else {}
            out.usage = {k: int(v) for k, v in usage.items() if isinstance(v, int) and not isinstance(v, bool)}
        elif kind == "turn.failed":
            error: dict[str, Any] = event["error"] if isinstance(event.get("error"), dict) else {}
            out.failed = str(error.get("message") or "the turn failed")
        elif kind == "error":
            out.failed = out.failed or str(event.get("message") or "an error")
    return out


class LiveCommands:
    """The commands of a turn as the CLI prints them, for a command log's watch (the progress lines of -v): the
    log's own record is written once the turn has ended, timed by Codex's own log of the thread (`exec_spans`)."""

    EVERY = 0.25

    def __init__(self, stream: Path, log: CommandLog | None) -> None:
        self.stream = stream
        self.watch = log.watch if log is not None else None
        self._read, self._rest = 0, b""
        self._ended: dict[str, Callable[[], None]] = {}

    def wait(self, process: subprocess.Popen[bytes], timeout: float, over: Callable[[], bool]) -> int | None:
        """The process's exit code, or None once `over()` says its budget ran out; TimeoutExpired past `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return process.wait(timeout=max(0.0, min(self.EVERY, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    raise
                self.poll()
                if over():
                    return None

    def poll(self) -> None:
        if self.watch is None:
            return
        try:
            with self.stream.open("rb") as stream:
                stream.seek(self._read)
                added = stream.read()
        except OSError:
            return
        self._read += len(added)
        *lines, self._rest = (self._rest + added).split(b"\n")
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            item: dict[str, Any] = event["item"] if isinstance(event, dict) and isinstance(event.get("item"), dict) \
                else {}
            if item.get("type") != "command_execution":
                continue
            ident = str(item.get("id"))
            if event.get("type") == "item.started":
                self._ended[ident] = self.watch(command_of(str(item.get("command") or "")), time.time())
            elif event.get("type") == "item.completed":
                self._ended.pop(ident, lambda: None)()

    def close(self) -> None:
        self.poll()
        for ended in self._ended.values():
            ended()
        self._ended.clear()


#: The most of Codex's log of a thread read (the skills it listed come in its first lines).
SESSION_LOG_READ = 16 * 2**20


def session_log(home: Path, thread_id: str) -> Iterator[dict[str, Any]]:
    """Each entry of Codex's own log of the thread (`sessions/…/rollout-…-<thread id>.jsonl` under CODEX_HOME).
    The log is in a folder the agent's commands may write: read as the agent's files are (regular, no link
    followed, bounded), and an entry that is not a JSON object is passed over."""
    from ..arena import untrusted

    for entry in untrusted.listing(home, PurePath("sessions"), lambda name: name.endswith(f"-{thread_id}.jsonl"),
                                   deep=True).files:
        try:
            head, _ = untrusted.read_head(home, entry.path.relative_to(home), SESSION_LOG_READ)
        except (OSError, untrusted.Refused):
            continue
        for line in head.decode("utf-8", "replace").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                yield event


def exec_spans(home: Path, thread_id: str, since: float) -> list[tuple[float, float]]:
    """A span holding each command Codex ran for the thread since `since` (epoch seconds), in order, from its own
    log of the thread, whose entries carry Codex's clock (its printed events carry none, and reach the harness
    late): a command ends before Codex logged its output. Read as the agent's files are; [] when the log is not
    there."""
    from datetime import datetime

    called: dict[str, float] = {}
    spans: list[tuple[float, float]] = []
    for event in session_log(home, thread_id):
        try:
            at = datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00")).timestamp()
            payload = event["payload"]
            kind, call = payload.get("type"), str(payload.get("call_id"))
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
        if at < since:
            continue
        if kind == "function_call" and payload.get("name") == "exec_command":
            called[call] = at
        elif kind == "function_call_output" and call in called:
            spans.append((called.pop(call), at))
    # Codex logs the model's call as the command starts, a few milliseconds either side: a command is given from
    # the end of the one before it (the turn's start for the first), which no run of it can precede.
    spans.sort()
    return [(since if k == 0 else spans[k - 1][1], ended) for k, (_, ended) in enumerate(spans)]


# -- a conversation --------------------------------------------------------------------------------


def offered_skills(home: Path, thread_id: str) -> dict[str, str] | None:
    """The skills Codex listed to its model, each with its SKILL.md, as its own log of the thread says
    (`session_log`); None when the log or its listing is not there."""
    from ..rehearsal.responses_wire import skill_files

    for event in session_log(home, thread_id):
        payload = event.get("payload")
        content = payload.get("content") if isinstance(payload, dict) else None
        for part in content if isinstance(content, list) else []:
            text = part.get("text") if isinstance(part, dict) else None
            if isinstance(text, str) and "<skills_instructions>" in text:
                return skill_files(text)
    return None


class CodexSession(HostSession):
    """One thread: a `codex exec` process per turn, each resuming the thread the first started."""

    def __init__(self, cli: Path, work: Path, folder: Path, env: Mapping[str, str], model: str, endpoint: Endpoint,
                 sandbox: Sandbox, log: CommandLog | None, retries: int, max_steps: int = MAX_STEPS,
                 skills: tuple[SkillCard, ...] = ()) -> None:
        self.cli, self.work, self.folder, self.env, self.model = cli, work, folder, dict(env), model
        self.endpoint, self.sandbox, self.log, self.retries = endpoint, sandbox, log, retries
        self.max_steps = max_steps
        #: The skills installed for it, each checked against what Codex offered in the first turn.
        self.skills = skills
        self.thread_id: str | None = None
        self.turns: list[TurnRecord] = []
        #: The model calls of the turn under way, as the forwarder hears them answered (its threads count).
        self.calls = 0
        self.calls_seen = endpoint.forwarder.calls
        endpoint.forwarder.observe = self._observed
        if endpoint.forwarder.record is not None:  # a recorded call is of the turn under way
            endpoint.forwarder.record.turn = lambda: len(self.turns) + 1

    def _observed(self, status: int, body: bytes) -> None:
        self.calls += 1

    def send(self, message: str, timeout: float) -> TurnRecord:
        return held_to_recording(self.endpoint.replay, lambda: self._send(message, timeout))

    def _send(self, message: str, timeout: float) -> TurnRecord:
        number = len(self.turns) + 1
        turn = TurnRecord(sent=message)
        started, wall = time.monotonic(), time.time()
        self.calls = 0
        try:
            returncode, stdout, stderr = self._run(message, number, timeout)
            out = parse_events(stdout.splitlines())
            # A replay asks no model: the recording's tokens were spent when it was recorded.
            turn.steps, turn.usage = out.steps, {} if self.endpoint.replay is not None else out.usage
            self._record(out, out.thread_id or self.thread_id, wall)
            turn.model_calls = self.calls
            if returncode is None:
                raise step_budget(f"{self.max_steps} model calls a turn, --palette-codex-max-steps")
            if self.thread_id is None:
                self.thread_id = out.thread_id
            elif out.thread_id not in (None, self.thread_id):
                raise HostError(f"codex ran thread {out.thread_id}, not {self.thread_id}: the history is lost")
            if out.failed is not None:
                stopped = context_limit(out.failed)
                if stopped is not None:
                    raise stopped
                raise HostError(f"codex: {out.failed}")
            if not out.completed or returncode != 0:
                raise HostError(f"codex exited {returncode} without completing the turn: "
                                f"{stderr.strip()[-TAIL:] or '(no stderr)'}")
            if self.thread_id is None:
                raise HostError("codex printed no thread.started: the next turn could not resume it")
            if number == 1:
                self._check_skills()
            turn.answer = out.messages[-1] if out.messages else ""
            turn.stop = "answered"
        except HostError as error:
            turn.error = str(error)
            error.turn = turn
            raise
        finally:
            turn.seconds = round(time.monotonic() - started, 3)
            self.turns.append(turn)
        return turn

    def _record(self, out: CodexOutput, thread_id: str | None, since: float) -> None:
        """Our record of the commands of the turn: what Codex printed of each, timed by its log of the thread."""
        if self.log is None or not out.commands:
            return
        now = time.time()
        spans = exec_spans(Path(self.env["CODEX_HOME"]), thread_id, since) if thread_id else []
        if len(spans) != len(out.commands):  # a log that does not tell: the turn's own span holds each
            spans = [(since, now)] * len(out.commands)
        for (command, output, code), (began, ended) in zip(out.commands, spans, strict=True):
            self.log.add(command, began, ended, code, output)

    def _check_skills(self) -> None:
        """Codex offered each skill under test from where it was installed, as its log of the thread says."""
        if not self.skills:
            return
        assert self.thread_id is not None
        listed = offered_skills(Path(self.env["CODEX_HOME"]), self.thread_id)
        if listed is None:
            raise HostError("codex's log of the thread lists no skills: cannot tell whether it offered the skill")
        for skill in self.skills:
            where = os.path.realpath(skill.directory / "SKILL.md")
            if os.path.realpath(listed.get(skill.name) or "/nowhere") != where:
                raise HostError(f"codex did not offer the skill {skill.name!r} installed in {skill.directory} (it "
                                f"lists: {', '.join(sorted(listed)) or 'none'})")

    def _argv(self) -> list[str]:
        resume = ["resume"] if self.thread_id else []
        argv = [str(self.cli), "exec", *resume, "--json", "--skip-git-repo-check", "--ignore-user-config",
                *codex_config(self.endpoint.base_url, self.retries), "-m", self.model,
                *([self.thread_id] if self.thread_id else []), "-"]
        return self.sandbox.program([*self.endpoint.relay, *argv], self.work, network=not self.endpoint.relay)

    def _run(self, message: str, number: int, timeout: float) -> tuple[int | None, str, str]:
        """One turn's process; its output goes to files (a command it leaves running holds no pipe). The exit code
        is None when the turn ran past its step budget and was stopped."""
        turn = self.folder / f"turn-{number:02d}"
        prompt = turn.with_suffix(".prompt")
        prompt.write_text(message, encoding="utf-8")
        with prompt.open("rb") as said, turn.with_suffix(".jsonl").open("wb") as out, \
                turn.with_suffix(".stderr").open("wb") as err:
            live = LiveCommands(turn.with_suffix(".jsonl"), self.log)
            try:
                process = subprocess.Popen(self._argv(), cwd=self.work, env=self.env, stdin=said, stdout=out,
                                           stderr=err, start_new_session=True)
            except OSError as error:
                raise HostError(f"could not run {self.cli}: {error}") from None
            try:
                returncode = live.wait(process, timeout, lambda: self.calls > self.max_steps)
                if returncode is None:
                    _stop(process)
            except subprocess.TimeoutExpired:
                _stop(process)
                raise TurnStopped("turn_timeout", f"turn {number} timed out after {timeout:g} s (codex was "
                                                  "stopped)") from None
            finally:
                live.close()
        read = {name: turn.with_suffix(name).read_text(encoding="utf-8", errors="replace")
                for name in (".jsonl", ".stderr")}
        return returncode, read[".jsonl"], read[".stderr"]

    def close(self) -> None:
        self.endpoint.stop()


def _stop(process: subprocess.Popen[bytes]) -> None:
    """TERM the turn's process group, a grace, then KILL it."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            pass
        try:
            process.wait(timeout=KILL_GRACE)
            return
        except subprocess.TimeoutExpired:
            continue


# -- the host --------------------------------------------------------------------------------------


class CodexHost(Host):
    """OpenAI's Codex CLI (`codex exec`), the rehearsal agent or a model on the Responses wire."""

    name = "codex"
    serves_rehearsal = True
    records = True
    options = (HostOption("codex-cli", "the Codex CLI the codex host runs (default: `make codex`'s in the venv, "
                                       "else `codex` on PATH)", metavar="PATH"),
               HostOption("codex-max-steps", f"step budget of the codex host: the model calls of one turn (default "
                                             f"{MAX_STEPS})", type=int, metavar="N"))

    def __init__(self) -> None:
        self.explicit_cli: str | None = None
        self.max_steps = MAX_STEPS
        self.layer = ModelLayer()
        self._version: str | None = None

    def configure(self, given: Mapping[str, Any], *, skill: bool = True) -> None:
        self.explicit_cli = given.get("codex-cli") or self.explicit_cli
        self.max_steps = step_budget_option(given, "codex-max-steps", MAX_STEPS) or MAX_STEPS

    def terms(self) -> dict[str, object]:
        return {} if self.max_steps == MAX_STEPS else {"codex_max_steps": self.max_steps}

    @property
    def cli(self) -> Path | None:
        return find_codex(self.explicit_cli)

    def version(self) -> str:
        if self._version is None:
            cli = self.cli
            if cli is None:
                raise HostError(f"no Codex CLI found: {INSTALL_HINT}")
            self._version = client_version(native(cli), VERSION_TIMEOUT)
        return self._version

    def check(self, route: Route, env: Mapping[str, str], skill: SkillCard | None = None) -> list[Problem]:
        if not route.serves("responses"):
            return [Problem("the Codex CLI speaks the OpenAI Responses API: use --model openai:<model> (any "
                            "Responses server with --palette-base-url) or --model rehearsal")]
        missing = route.missing(env)
        problems = [Problem(f"--model {route.model.text} on the codex host needs {', '.join(missing)} in the "
                            f"environment; {'it is' if len(missing) == 1 else 'they are'} not set")] if missing else []
        if self.cli is None:
            reason = (f"--palette-codex-cli {self.explicit_cli}: no executable there" if self.explicit_cli
                      else f"no Codex CLI found: {INSTALL_HINT}")
            return [*problems, Problem(reason, skip=True)]
        try:
            self.version()
        except HostError as error:
            problems.append(Problem(str(error)))
        return problems

    def describe(self, route: Route, settings: HostSettings) -> dict[str, str]:
        try:
            client = f"Codex CLI {self.version().split()[-1]} ({self.cli})"
        except HostError:
            client = "Codex CLI (not installed)"
        return {"model": route.model.label, "client": client, "codex_model": codex_model(route),
                "wire": "OpenAI Responses, through the model layer's forwarder",
                "codex_sandbox": "off (danger-full-access): the harness's sandbox confines the whole CLI",
                "max_steps": f"{self.max_steps} model calls a turn (--palette-codex-max-steps)",
                "model_retries": str(settings.model_retries)}

    def open(self, workspace: Workspace, skill: SkillCard | None, env: Mapping[str, str], route: Route,
             settings: HostSettings, sandbox: Sandbox) -> CodexSession:
        problems = [problem for problem in self.check(route, env) if not problem.skip]
        cli = self.cli
        if problems or cli is None:
            raise HostError("; ".join(map(str, problems)) or f"no Codex CLI found: {INSTALL_HINT}")
        work = workspace.work
        work.mkdir(parents=True, exist_ok=True)
        installed: list[SkillCard] = []
        if skill is not None:  # none (the baseline): nothing in .agents/skills
            skills = work / ".agents"
            for card in (skill, *settings.skills):
                installed.append(install(card, skills))
                changed = drift(card.directory, installed[-1].directory)
                if changed:
                    raise HostError("the skill installed for Codex is not the skill under test: "
                                    + "; ".join(changed[:5]))
            sandbox.protect(skills)
        folder = workspace.own("codex")  # the turns' files, the harness's; home and tmp are the CLI's to write
        home, scratch = folder / "home", folder / "tmp"
        folder.mkdir(parents=True, exist_ok=True)
        sandbox.writable(home, scratch)
        sandbox.readable(native(cli).parent)
        endpoint = self.layer.endpoint(route, "responses", workspace, env, settings, sandbox)
        client_env = {**sandbox.env, "CODEX_HOME": str(home), "HOME": str(home), "TMPDIR": str(scratch),
                      KEY_VARIABLE: endpoint.key,
                      "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
        return CodexSession(native(cli), work, folder, client_env, codex_model(route), endpoint, sandbox,
                            workspace.command_log(), settings.model_retries, self.max_steps, tuple(installed))

    def fault(self, route: Route) -> str | None:
        return self.layer.fault(route)

    def close(self) -> None:
        self.layer.close()


def codex_model(route: Route) -> str:
    """The model Codex names in its calls: the rehearsal agent's own name, or the provider's model."""
    return REHEARSAL_MODEL if route.rehearsed("codex") else route.client_model("codex")
