"""The claude host: the real Claude Code CLI driving the skill, one process and one session per item.

The first turn starts `claude -p --input-format stream-json --session-id <uuid4>`, which carries every later turn
too: each message is a line of JSON on its standard input (claude_process.py). Its start, about 0.5 CPU-s before its
first model request, is paid once per conversation, not once per turn. With `--output-format stream-json --verbose`
each turn gives both the CLI's `system/init` line (the skills it discovered, checked on every turn) and the turn's
own `result` (answer, cost, usage, denials). Were the CLI gone before a later turn, that turn starts it again with
`--resume=<uuid>`.

The CLI is found in the `claude-agent-sdk` wheel (a native binary, no Node), else on PATH, unless
`--palette-claude-cli` names one. It gets an isolated config directory per item (beside `work/`, not in
it), the skill installed fresh in `<work>/.claude/skills/<name>/`, and — for the rehearsal model — the
rehearsal server as its Anthropic endpoint; for a real model, the model's. Either way it reaches it through a
forwarder of the conversation's own (layer/endpoint.py), which holds the key, so the CLI holds none, and passes on
only the CLI's own model calls. Secrets never reach anything written.

What the agent could write never changes what the CLI runs or where it connects: the CLI reads only the
project's settings (`--setting-sources project`, for the skill), and those are the harness's, read-only, as are
its config dir's settings and its home; `--settings` pins its endpoint and shell prefix above any file and turns
hooks off; `--strict-mcp-config` drops every MCP server (.mcp.json, .claude.json). Its commands see neither its
config dir nor its home. When commands have no network, neither has the CLI: it reaches its model through the
forwarder's Unix socket, relayed to its own loopback (layer/relay.py); when they keep it, on 127.0.0.1, with the
forwarder's token in place of a key.

Each turn has a step budget, `--palette-max-turns` model calls (the CLI's `--max-turns`), and ends for the reason the
CLI's `result` line gives in its fields (`stopped`: error_max_turns, api_error "max_output_tokens", terminal_reason
"prompt_too_long" or "blocking_limit"), never for what the model said; any other failure is an error in words that
begin with what the result says of itself (`failure`), whole: the harness shows one line and keeps the rest.

Permissions: `--permission-mode bypassPermissions` (with `IS_SANDBOX=1` when running as root, which the
CLI otherwise refuses). A narrow `--allowedTools` list would turn a real model's harmless `ls` or
`cat plan.md` into a denial, and a denial here is a setup failure, not agent behaviour: the column
would measure our allowlist. The agent works in a disposable per-item folder, as on the react host.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ..arena.command_log import CommandLog
from ..layer.endpoint import PLACEHOLDER_KEY, KeyForwarder
from ..layer.route import Route
from ..layer.serving import Endpoint, ModelLayer
from ..skill import SkillCard, drift, install
from .base import (
    COMMAND_TIMEOUT,
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
from .claude_process import CliProcess, TimedOut, stop, user_line
from .claude_stream import TAIL, CliOutput, context_window, failure, parse_stream, stopped, usage_of
from .stops import TurnStopped

if TYPE_CHECKING:
    from ..arena.sandbox import Sandbox
    from ..arena.workspace import Workspace

Json = dict[str, Any]

SDK_PACKAGE = "claude-agent-sdk"
INSTALL_HINT = (f"pip install {SDK_PACKAGE} (its wheel bundles the CLI), put `claude` on PATH, "
                "or pass --palette-claude-cli PATH")
#: The id the CLI is told when the rehearsal model answers. A catalogue id, so the CLI lays out its
#: requests (prompt, reminders, tools) as it does for a real Claude model; the server answers any id.
REHEARSAL_CLI_MODEL = "claude-sonnet-4-5"
PERMISSION_MODE = "bypassPermissions"
SECRET_VARIABLES = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
#: The CLI reads settings only from the project (which is where it finds skills), never the user's or local ones.
SETTING_SOURCES = "project"
#: No MCP server: not the project's .mcp.json, nor any in the config dir's .claude.json.
NO_MCP = '{"mcpServers":{}}'
#: The variables `--settings` pins: a settings file's `env` would override the process environment.
PINNED = ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "CLAUDE_CODE_SHELL_PREFIX", "CLAUDE_CONFIG_DIR",
          "DISABLE_AUTO_COMPACT")
#: The settings files the CLI could read from the project and its config dir: the harness writes each, read-only.
PROJECT_SETTINGS = (".claude/settings.json", ".claude/settings.local.json")
#: Startup files a shell sources: the CLI snapshots its shell from its home, outside the commands' sandbox.
HOME_FILES = (".bashrc", ".bash_profile", ".bash_login", ".profile", ".zshrc", ".zshenv", ".zprofile")
#: Fewer outbound calls: the CLI must not phone home from a benchmark.
#: The most BASH_MAX_OUTPUT_LENGTH the CLI takes (it caps a larger value; its default is 30,000). Since 2.1 that
#: variable sizes only the read-back window: the output the model gets inline is the `bashOutputMaxChars` setting
#: (default 30,000, clamped to 4,000-128,000); past it the CLI saves the output to a file and shows a 2 KB preview.
CLI_OUTPUT_CEILING = 150_000
CLI_INLINE_CEILING = 128_000
QUIET = {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1"}
#: Auto-compact off: near its model's window the CLI would replace the conversation with a summary of it (the
#: pasted material, the plan the user is asked to approve), and the skill would be blamed for what was lost.
#: Without it the window is the limit: past it the API refuses the request, and the turn is an error.
WHOLE_CONVERSATION = {"DISABLE_AUTO_COMPACT": "1"}
#: Set by an enclosing Claude Code (or the operator) and wrong for a nested, isolated CLI.
INHERITED = ("CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT", "CLAUDE_CODE_SSE_PORT", "CLAUDE_CONFIG_DIR")
#: For the rehearsal model, nothing may send the CLI elsewhere (a gateway, Bedrock, Vertex, a model map).
ROUTING_PREFIXES = ("ANTHROPIC_", "CLAUDE_CODE_USE_")
#: Nothing listens here: a discovery probe that unexpectedly calls a model fails fast, on loopback.
NOWHERE = "http://127.0.0.1:9"
#: The step budget of a turn (`--palette-max-turns`): the CLI's model calls in one invocation (its `--max-turns`;
#: without it the CLI has none, and an agent that never answers runs until the turn's timeout).
MAX_TURNS = 60
KILL_GRACE = 5.0
PROBE_TIMEOUT = 60.0
REDACTED = "[redacted]"
#: How much of an error answer the forwarder passed on the host keeps, for the words of a limit the CLI names
#: without them (its "Prompt is too long" drops the API's sizes).
KEPT_ERROR = 64 * 1024


# -- finding and asking the CLI --------------------------------------------------------------------


def bundled_cli() -> Path | None:
    """The CLI inside the installed `claude-agent-sdk` wheel, found without importing the SDK."""
    try:
        spec = importlib.util.find_spec("claude_agent_sdk")
    except (ImportError, ValueError):  # a broken install is no install
        return None
    if spec is None or not spec.origin:
        return None
    binary = Path(spec.origin).parent / "_bundled" / "claude"
    return binary if binary.is_file() and os.access(binary, os.X_OK) else None


def find_cli(explicit: str | None = None) -> Path | None:
    """The option's binary when one is named (and nothing else then), else the SDK's, else PATH's."""
    if explicit:
        path = Path(explicit).expanduser()
        found = shutil.which(str(path)) if not path.is_file() else str(path)
        return Path(found) if found and os.access(found, os.X_OK) else None
    on_path = shutil.which("claude")
    return bundled_cli() or (Path(on_path) if on_path else None)


def cli_model(route: Route) -> str:
    """The `--model` the CLI is given: for the rehearsal agent (a replay's too) a catalogue id, so the CLI lays out
    its requests as it does for a real Claude model."""
    return REHEARSAL_CLI_MODEL if route.rehearsed("claude") else route.client_model("claude")


def cli_environment(base: Mapping[str, str], config_dir: Path, base_url: str | None, command_timeout: float,
                    as_root: bool | None = None, max_retries: int | None = None, output_limit: int | None = None,
                    key: str | None = None) -> dict[str, str]:
    """The CLI's environment: `base` (this conversation's, PALETTE_TRACE included) made safe and quiet.

    Its only endpoint is `base_url`, the model layer's forwarder (nowhere, for a probe that calls no model): every
    routing variable of the caller's (a key, a gateway, Bedrock) is dropped, and `key` is what the CLI sends in
    place of a key — the forwarder's token, or a placeholder. `max_retries` bounds the CLI's own retries of a
    transient API error.
    """
    env = {k: v for k, v in base.items() if k not in INHERITED and not k.startswith(ROUTING_PREFIXES)}
    env["ANTHROPIC_API_KEY"] = key or PLACEHOLDER_KEY
    env["ANTHROPIC_BASE_URL"] = base_url or NOWHERE
    # A proxy set for the outside world must not carry loopback traffic.
    env["NO_PROXY"] = ",".join(p for p in ("127.0.0.1", "localhost", env.get("NO_PROXY", "")) if p)
    env["no_proxy"] = env["NO_PROXY"]
    if max_retries is not None:
        env["CLAUDE_CODE_MAX_RETRIES"] = str(max_retries)
    env.update(QUIET)
    env.update(WHOLE_CONVERSATION)
    env["CLAUDE_CONFIG_DIR"] = str(config_dir)
    # The Bash tool's ceiling must outlast deck.py's holds (90 s plan, 60 s status), as on the react host.
    millis = str(int(command_timeout * 1000))
    env["BASH_DEFAULT_TIMEOUT_MS"] = env["BASH_MAX_TIMEOUT_MS"] = millis
    if output_limit is not None:  # --palette-output-limit, up to the most the CLI takes
        env["BASH_MAX_OUTPUT_LENGTH"] = str(min(output_limit, CLI_OUTPUT_CEILING))
    root = os.geteuid() == 0 if as_root is None else as_root
    if root:
        env["IS_SANDBOX"] = "1"  # the CLI refuses bypassPermissions as root without it
    return env


def secrets_in(env: Mapping[str, str]) -> list[str]:
    return [env[name] for name in SECRET_VARIABLES if env.get(name)]


def redact(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return text


def locked_settings(env: Mapping[str, str], output_limit: int | None = None) -> str:
    """`--settings`: ranks above the user's, project and local settings files, so an `env` block the agent
    wrote anywhere cannot move the CLI's endpoint or shell prefix; and no hook runs (a hook runs in the CLI's
    sandbox, with its network). No secret: a key, or the forwarder's token, is never pinned."""
    pinned = {name: env[name] for name in PINNED if name in env}
    if pinned.get("ANTHROPIC_API_KEY") != PLACEHOLDER_KEY:
        # A real key, or the forwarder's token, never goes on a command line: any local user may read it there.
        pinned.pop("ANTHROPIC_API_KEY", None)
    locked: dict[str, Any] = {"env": pinned, "disableAllHooks": True, "enableAllProjectMcpServers": False}
    if output_limit is not None:  # --palette-output-limit: what the Bash tool hands the model inline
        locked["bashOutputMaxChars"] = min(output_limit, CLI_INLINE_CEILING)
    return json.dumps(locked, sort_keys=True)


def confined_options(env: Mapping[str, str], output_limit: int | None = None) -> list[str]:
    """The options that make the CLI ignore every file the agent could write: settings, hooks, MCP servers."""
    return ["--setting-sources", SETTING_SOURCES, "--settings", locked_settings(env, output_limit),
            "--strict-mcp-config",
            "--mcp-config", NO_MCP]


def turn_command(cli: Path, model_id: str, session_id: str, first: bool,
                 permission_mode: str = PERMISSION_MODE, env: Mapping[str, str] | None = None,
                 output_limit: int | None = None, max_turns: int | None = None,
                 profile: str | None = None, conversation: bool = False) -> list[str]:
    """The CLI's argv: for one turn, or with `conversation` for every turn still to come, each message a line of
    JSON on its standard input (`--input-format stream-json`, claude_process.py). The message goes on standard
    input, not in argv: one argument holds at most 128 KiB (a paste can be larger), and a reply that starts with "-"
    is then never read as an option. `max_turns` is each turn's step budget (`--palette-max-turns`): the CLI's model
    calls for one message. `first`: the session is new (`--session-id`), else it is resumed."""
    session = ["--session-id", session_id] if first else [f"--resume={session_id}"]
    streamed = ["--input-format", "stream-json"] if conversation else []
    budget = ["--max-turns", str(max_turns)] if max_turns is not None else []
    # An agent profile goes where the CLI takes more of a system prompt (`HostSettings.profile`).
    appended = ["--append-system-prompt", profile.strip()] if profile and profile.strip() else []
    return [str(cli), "-p", *streamed, "--output-format", "stream-json", "--verbose", "--model", model_id,
            "--permission-mode", permission_mode, *budget, *appended, *confined_options(env or {}, output_limit),
            *session]


# -- the skill where the CLI finds it --------------------------------------------------------------


def install_skill(card: SkillCard, work: Path) -> SkillCard:
    """A fresh copy in `<work>/.claude/skills/<name>`, where the CLI discovers project skills.

    `<work>/skills` links to it: SKILL.md runs `python3 skills/<name>/scripts/...` from the working
    directory, and one copy cannot drift from another.
    """
    installed = install(card, work / ".claude")
    link = work / "skills"
    if not link.exists() and not link.is_symlink():
        link.symlink_to(Path(".claude") / "skills", target_is_directory=True)
    return installed


def discovered_skills(cli: Path, project: Path, env: Mapping[str, str], model_id: str) -> list[str]:
    """The skills the CLI lists for `project`, from `/cost`'s init line: a local command, no model call."""
    argv = [str(cli), "-p", "--output-format", "stream-json", "--verbose", "--model", model_id,
            *confined_options(env), "--", "/cost"]
    try:
        done = subprocess.run(argv, cwd=project, env=dict(env), capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT, stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise HostError(f"the discovery probe did not run: {error}") from None
    out = parse_stream(done.stdout.splitlines())
    if out.skills is None:
        raise HostError(f"the discovery probe printed no init line (exit {done.returncode}): "
                        f"{redact(done.stderr, secrets_in(env)).strip()[-TAIL:]}")
    return out.skills


def session_folder(workspace: Workspace, limit: int = 1000) -> Path:
    """A new folder for the CLI's config and turn files among the item's own files, never in `work/`.

    The runner gives every item a fresh folder; when something else reuses one, nothing is deleted:
    the next free name is taken (claude, claude-2, ...), so no session inherits another's config.
    """
    for n in range(1, limit + 1):
        folder = workspace.own("claude" if n == 1 else f"claude-{n}")
        try:
            folder.mkdir(parents=True)
            return folder
        except FileExistsError:
            continue
    raise HostError(f"{workspace.folder} already holds {limit} claude session folders")


def lock_files(work: Path, config: Path, home: Path) -> list[Path]:
    """The harness's own copies of what the CLI would read from the project, its config dir and its home (settings,
    a shell's startup files), written empty before the CLI first runs: the paths to bind read-only over them."""
    locked = work / ".claude"  # the project's settings, and the skill: nothing there is the agent's to write
    files = [work / name for name in PROJECT_SETTINGS] + [config / "settings.json"]
    files += [home / name for name in HOME_FILES]
    for path in files:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)  # a link is replaced, never written through
        path.write_text("{}\n" if path.suffix == ".json" else "", encoding="utf-8")
    return [locked, config / "settings.json"]


# -- a conversation --------------------------------------------------------------------------------


class ClaudeSession(HostSession):
    """One item's conversation: one session id, one CLI process for all its turns, its output kept per turn."""

    def __init__(self, cli: Path, work: Path, skill: SkillCard | None, env: Mapping[str, str], model_id: str,
                 folder: Path, permission_mode: str = PERMISSION_MODE, log: CommandLog | None = None,
                 priced: bool = True, sandbox: Sandbox | None = None, secrets: Iterable[str] = (),
                 relay: list[str] | None = None, output_limit: int | None = None,
                 forwarder: KeyForwarder | None = None, max_turns: int | None = MAX_TURNS,
                 profile: str | None = None) -> None:
        self.cli, self.work, self.skill, self.model_id = cli, work, skill, model_id
        #: The step budget of each turn (the CLI's --max-turns); None: the CLI's own (none).
        self.max_turns = max_turns
        self.profile = profile
        #: A task family's further skills, installed beside `skill` (`HostSettings.skills`).
        self.also: list[SkillCard] = []
        #: The forwarder of this conversation's own (to its model, or replaying it), stopped with it.
        self.forwarder = forwarder
        self.replay = forwarder.replay if forwarder is not None else None
        self.calls_seen = forwarder.calls if forwarder is not None else None
        self.output_limit = output_limit
        self.sandbox = sandbox
        #: The relay that runs the CLI with its model's socket on its loopback (then it has no network), or None.
        self.relay = relay
        self.log = log
        #: Whether the CLI's cost estimate is a price of something that ran: not for the rehearsal model, which
        #: the CLI prices as the Claude model it was told it talks to.
        self.priced = priced
        self.env = dict(env)
        self.folder = folder
        self.permission_mode = permission_mode
        self.session_id = str(uuid.uuid4())
        self.turns: list[TurnRecord] = []
        #: The CLI that carries the conversation (claude_process.py), from its first turn; None before, or once ended.
        self._process: CliProcess | None = None
        #: Whether a CLI has started the session: a CLI started again resumes it.
        self._started = False
        #: Whether a turn is under way (its result not yet read).
        self._busy = False
        # The caller's key too: it stays with the forwarder, but nothing the CLI printed may hold it either.
        self._secrets = [*secrets_in(self.env), *(s for s in secrets if s),
                         *(sandbox.secrets if sandbox is not None else [])]
        self._session_cost = 0.0
        #: The model's context window as the CLI last reported it (its result's modelUsage), for an error past it.
        self._window: int | None = None
        #: The last error answer (status, its first KEPT_ERROR bytes) the forwarder passed on in this turn.
        self._refusal: tuple[int, bytes] | None = None

    def observed(self, status: int, body: bytes) -> None:
        """An answer the forwarder passed on to the CLI (the forwarder's `observe`): an error's words are kept."""
        if status >= 400:
            self._refusal = (status, body[:KEPT_ERROR])

    def send(self, message: str, timeout: float) -> TurnRecord:
        return held_to_recording(self.replay, lambda: self._send(message, timeout))

    def close(self) -> None:
        try:
            # Between turns its input ends and it exits, its session written; mid-turn (Ctrl-C) it is stopped.
            self._end(stop=self._busy)
        finally:
            if self.forwarder is not None:
                self.forwarder.stop()
                self.forwarder = None

    def _send(self, message: str, timeout: float) -> TurnRecord:
        number = len(self.turns) + 1
        turn = TurnRecord(sent=message)
        self.turns.append(turn)
        self._refusal = None
        started = time.monotonic()
        try:
            returncode, stdout, stderr = self._run(message, number, timeout)
            out = parse_stream(stdout.splitlines())
            self._record(out)
            turn.steps = [redact(step, self._secrets) for step in out.steps]
            turn.retries = out.retries
            # The model's answers the CLI streamed (not its num_turns, which counts one more than the calls made).
            turn.model_calls = len(out.answers)
            # What the calls cost, kept for a turn a limit or an error ended too: they were made.
            result = out.result or {}
            turn.num_turns = result.get("num_turns")
            turn.cost_usd = self._turn_cost(result.get("total_cost_usd")) if self.priced else None
            # A replay asks no model: the recording's tokens were spent when it was recorded.
            turn.usage = {} if self.replay is not None else usage_of(result)
            self._check(out, returncode, stderr, message)
            turn.answer = redact(str(result.get("result") or ""), self._secrets)
        except HostError as error:
            turn.error = str(error)
            if not turn.steps:  # stopped mid-turn: what the CLI streamed before that is in its output file
                streamed = self._streamed(number)
                if streamed is not None:
                    turn.steps = [redact(step, self._secrets) for step in streamed.steps]
                    turn.retries, turn.model_calls = streamed.retries, len(streamed.answers)
            error.turn = turn
            raise
        finally:
            turn.seconds = round(time.monotonic() - started, 3)
        return turn

    def _streamed(self, number: int) -> CliOutput | None:
        """What the CLI streamed of a turn stopped mid-way, from its output file; None when there is none."""
        streamed = self.folder / f"turn-{number:02d}.jsonl"
        if not streamed.is_file():
            return None
        out = parse_stream(self._scrub(streamed).splitlines())
        self._record(out)
        return out

    def _record(self, out: CliOutput) -> None:
        """Our own record of the commands the CLI ran this turn (the output was scrubbed of secrets)."""
        if self.log is not None:
            for run in out.commands:
                self.log.add(run.command, run.started_at, run.ended_at, run.exit_code, run.stdout, run.stderr)

    def _turn_cost(self, total: Any) -> float | None:
        """This turn's share: on `--resume` the CLI's total_cost_usd is the session's running total."""
        if not isinstance(total, (int, float)):
            return None
        share = total - self._session_cost if total >= self._session_cost else total
        self._session_cost = float(total)
        return round(share, 6)

    def _run(self, message: str, number: int, timeout: float) -> tuple[int, str, str]:
        """One turn of the conversation's CLI: its stream and standard error go to the turn's files as they come.

        The CLI is started at the first turn and carries every later one (one start per conversation, not per turn);
        should it be gone (it never is between turns of a conversation that goes on), the next turn starts it again,
        resuming the session. The exit status is 0 while it runs; after a result that is an error it is the CLI's
        own, as a process per turn gave it: its input is closed and it exits, and the conversation ends there."""
        self.folder.mkdir(parents=True, exist_ok=True)
        turn = self.folder / f"turn-{number:02d}"
        prompt = turn.with_suffix(".prompt")
        prompt.write_text(message, encoding="utf-8")
        with turn.with_suffix(".jsonl").open("wb") as out, turn.with_suffix(".stderr").open("wb") as err:
            cli = self._cli()
            live = LiveCommands(self.log, self._secrets)
            self._busy = True  # until the turn's result: a conversation closed meanwhile stops its CLI at once
            try:
                answered = cli.turn(user_line(message, self.session_id), out, err, timeout, live.heard)
                self._busy = False
            except TimedOut:
                self._end(err, stop=True)
                raise TurnStopped("turn_timeout", f"turn {number} timed out after {timeout:g} s (the CLI was "
                                                  "stopped)") from None
            finally:
                live.close()
            if not answered or live.failed:
                returncode = self._end(err)
            else:
                returncode = 0
        return returncode, self._scrub(turn.with_suffix(".jsonl")), self._scrub(turn.with_suffix(".stderr"))

    def _cli(self) -> CliProcess:
        """The conversation's CLI, started when none runs: a new session at first, else resuming it."""
        if self._process is not None and self._process.running():
            return self._process
        if self._process is not None:
            self._end()
        argv = turn_command(self.cli, self.model_id, self.session_id, not self._started, self.permission_mode,
                            self.env, self.output_limit, self.max_turns, self.profile, conversation=True)
        if self.sandbox is not None:
            argv = self.sandbox.client([*(self.relay or []), *argv], self.work, network=self.relay is None)
        try:
            self._process = CliProcess(argv, self.work, self.env)
        except OSError as error:
            raise HostError(f"could not run {self.cli}: {error}") from None
        self._started = True
        return self._process

    def _end(self, err: IO[bytes] | None = None, stop: bool = False) -> int:
        """End the conversation's CLI: let it exit (or, with `stop`, stop its process group at once); its status."""
        process, self._process = self._process, None
        if process is None:
            return 0
        if stop:
            process.stop(KILL_GRACE)
            return process.process.returncode
        return process.end(err, KILL_GRACE)

    def _scrub(self, path: Path) -> str:
        """The file's text with any secret replaced, rewritten when one was there."""
        text = path.read_text(encoding="utf-8", errors="replace")
        clean = redact(text, self._secrets)
        if clean != text:
            path.write_text(clean, encoding="utf-8")
        return clean

    def _check(self, out: CliOutput, returncode: int, stderr: str, message: str = "") -> None:
        for skill in ([self.skill, *self.also] if self.skill is not None else []):
            if out.skills is not None and skill.name not in out.skills:
                raise HostError(f"the CLI did not discover the skill {skill.name!r} installed in "
                                f"{skill.directory} (it lists: {', '.join(out.skills) or 'none'})")
        self._window = context_window(out.result or {}) or self._window
        stop = stopped(out, self.max_turns, message, self._window, self._refusal)
        if stop is not None:
            raise TurnStopped(stop.reason, redact(str(stop), self._secrets))
        problem = failure(out, returncode, stderr)
        if problem:
            raise HostError(redact(problem, self._secrets))
        if out.skills is None:
            raise HostError("the CLI printed no system/init line: cannot tell which skills it discovered")
        if out.session_id != self.session_id:
            raise HostError(f"the CLI ran session {out.session_id}, not {self.session_id}: the history is lost")


class LiveCommands:
    """The Bash calls of a turn as the CLI streams them, for a command log's watch (the progress lines of -v):
    the log's own record is written from the whole stream once the turn has ended. It also notes a result that is an
    error, after which the conversation's CLI is let exit (its exit status is part of the turn's words)."""

    def __init__(self, log: CommandLog | None, secrets: list[str]) -> None:
        self.secrets = secrets
        self.watch = log.watch if log is not None else None
        self._ended: dict[str, Callable[[], None]] = {}
        #: Whether the turn's result says it is an error.
        self.failed = False

    def heard(self, line: bytes) -> None:
        """One line of the stream, as the CLI printed it."""
        if self.watch is None and b'"result"' not in line:
            return
        try:
            event = json.loads(line)
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        if event.get("type") == "result":
            self.failed = bool(event.get("is_error"))
        if self.watch is None:
            return
        content = (event.get("message") or {}).get("content")
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            command = (block.get("input") or {}).get("command") if block.get("name") == "Bash" else None
            if block.get("type") == "tool_use" and isinstance(command, str):
                self._ended[str(block.get("id"))] = self.watch(redact(command, self.secrets), time.time())
            elif block.get("type") == "tool_result":
                self._ended.pop(str(block.get("tool_use_id")), lambda: None)()

    def close(self) -> None:
        """The turn is over: a call left without a result ends here."""
        for ended in self._ended.values():
            ended()
        self._ended.clear()


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Stop the CLI and everything it started in its process group (claude_process.stop), with KILL_GRACE."""
    stop(process, KILL_GRACE)


# -- the host --------------------------------------------------------------------------------------


class ClaudeHost(Host):
    """Claude Code CLI (print mode), the rehearsal model over loopback HTTP or a real Claude model."""

    name = "claude"
    serves_rehearsal = True
    records = True
    options = (HostOption("claude-cli", "the Claude Code CLI the claude host runs (default: the one bundled in "
                                        "claude-agent-sdk, else `claude` on PATH)", metavar="PATH"),
               HostOption("max-turns", f"step budget of the claude host: the model calls of one turn, the CLI's "
                                       f"--max-turns (default {MAX_TURNS})", type=int, metavar="N"))

    def __init__(self, cli: str | None = None, permission_mode: str = PERMISSION_MODE,
                 max_turns: int = MAX_TURNS) -> None:
        self.explicit_cli = cli
        self.permission_mode = permission_mode
        self.max_turns = max_turns
        #: The model beneath: each conversation's forwarder, stopped with it (and those still running when the
        #: host closes), and the rehearsal servers.
        self.layer = ModelLayer()
        self._version: str | None = None

    def configure(self, given: Mapping[str, Any], *, skill: bool = True) -> None:
        self.explicit_cli = given.get("claude-cli") or self.explicit_cli
        self.max_turns = step_budget_option(given, "max-turns", MAX_TURNS) or MAX_TURNS

    def terms(self) -> dict[str, object]:
        # Only when given (the fingerprint holds every known host's terms, selected or not): earlier runs, react's
        # among them, keep their fingerprints. The default ends only a turn that would have run to its timeout.
        return {} if self.max_turns == MAX_TURNS else {"max_turns": self.max_turns}

    @property
    def cli(self) -> Path | None:
        return find_cli(self.explicit_cli)

    def version(self) -> str:
        if self._version is None:
            cli = self.cli
            if cli is None:
                raise HostError(f"no Claude Code CLI found: {INSTALL_HINT}")
            self._version = client_version(cli, PROBE_TIMEOUT)
        return self._version

    def check(self, route: Route, env: Mapping[str, str], skill: SkillCard | None = None) -> list[Problem]:
        if not route.serves("anthropic"):
            return [Problem("Claude Code speaks only the Anthropic Messages API: use --model anthropic:<model id> "
                            "(for example anthropic:claude-sonnet-4-5) or --model rehearsal")]
        problems = []
        missing = route.missing(env)
        if missing:
            problems.append(Problem(f"--model {route.model.text} on the claude host needs {', '.join(missing)} in "
                                    f"the environment; {'it is' if len(missing) == 1 else 'they are'} not set"))
        if self.cli is None:
            reason = (f"--palette-claude-cli {self.explicit_cli}: no executable there" if self.explicit_cli
                      else f"no Claude Code CLI found: {INSTALL_HINT}")
            return [*problems, Problem(reason, skip=True)]
        if skill is not None:
            problems += self._discovery_problems(skill, route, env)
        return problems

    def _discovery_problems(self, skill: SkillCard, route: Route, env: Mapping[str, str]) -> list[Problem]:
        """Install the skill in a scratch folder exactly as a run would, and ask the CLI whether it sees it."""
        cli = self.cli
        assert cli is not None
        try:
            self.version()
        except HostError as error:
            return [Problem(str(error))]
        problems = []
        with tempfile.TemporaryDirectory(prefix="palette-claude-check-") as scratch:
            root = Path(scratch)
            work = root / "work"
            work.mkdir()
            installed = install_skill(skill, work)
            problems += [Problem(f"the installed copy drifted: {d}") for d in drift(skill.directory,
                                                                                   installed.directory)]
            # /cost calls no model: the caller's key is not needed, and a placeholder quiets the login check.
            probe_env = cli_environment(env, root / "config", None, COMMAND_TIMEOUT)
            try:
                skills = discovered_skills(cli, work, probe_env, cli_model(route))
            except HostError as error:
                return [*problems, Problem(str(error))]
            if skill.name not in skills:
                listed = ", ".join(skills) or "none"
                problems.append(Problem(f"Claude Code {self._version} does not discover the skill {skill.name!r} "
                                        f"installed in {installed.directory} (it lists: {listed})"))
        return problems

    def describe(self, route: Route, settings: HostSettings) -> dict[str, str]:
        try:
            client = f"Claude Code {self.version().split()[0]} ({self.cli})"
        except HostError:
            client = "Claude Code (not installed)"
        described = {"model": route.model.label, "client": client, "cli_model": cli_model(route),
                     # How it is driven is what the model sees: a CLI that carries the conversation tells it a
                     # longer default for a background command than a run per message would.
                     "process": "one CLI per conversation, each message a line of its stream-json input",
                     "permission_mode": self.permission_mode,
                     "bash_timeout": f"{settings.command_timeout:g} s",
                     "bash_output_limit": f"{min(settings.output_limit, CLI_INLINE_CEILING):,} characters inline"
                                          + (" (the CLI's most)" if settings.output_limit > CLI_INLINE_CEILING
                                             else "") + "; past it, a file and a 2 KB preview",
                     # The CLI starts each Bash command as one argument of its shell: Linux's bound on one.
                     "bash_command_limit": "128 KiB (the CLI refuses a longer command: E2BIG)",
                     "auto_compact": "off (DISABLE_AUTO_COMPACT): the model's context window is the limit",
                     "max_turns": f"{self.max_turns} model calls a turn (the CLI's --max-turns)",
                     "model_retries": str(settings.model_retries)}
        if route.rehearsed("claude"):
            # The CLI's estimate would price cli_model, which did not run: only a price table prices it.
            described["cost_usd"] = "not kept (the CLI's estimate prices cli_model, which did not run)"
        return described

    def open(self, workspace: Workspace, skill: SkillCard | None, env: Mapping[str, str], route: Route,
             settings: HostSettings, sandbox: Sandbox) -> ClaudeSession:
        problems = self.check(route, env)
        cli = self.cli
        if problems or cli is None:
            raise HostError("; ".join(map(str, problems)) or "no Claude Code CLI")
        work = workspace.work
        work.mkdir(parents=True, exist_ok=True)
        installed = None
        also: list[SkillCard] = []
        if skill is not None:  # none (the baseline): nothing in .claude/skills; the CLI offers only its own
            for card in (skill, *settings.skills):  # a task family's further skills, each where the first goes
                copy = install_skill(card, work)
                changed = drift(card.directory, copy.directory)
                if changed:
                    raise HostError("the skill installed for the CLI is not the skill under test: "
                                    + "; ".join(changed[:5]))
                if installed is None:
                    installed = copy
                else:
                    also.append(copy)
        folder = session_folder(workspace)
        endpoint = self.layer.endpoint(route, "anthropic", workspace, env, settings, sandbox)
        try:
            session = self._open(workspace, installed, env, route, settings, sandbox, cli, folder, endpoint)
            session.also = also
            for card in also:
                sandbox.protect(card.directory)
            return session
        except BaseException:
            endpoint.stop()
            raise

    def _open(self, workspace: Workspace, installed: SkillCard | None, env: Mapping[str, str], route: Route,
              settings: HostSettings, sandbox: Sandbox, cli: Path, folder: Path, endpoint: Endpoint) -> ClaudeSession:
        work = workspace.work
        # Each command the CLI's Bash tool runs goes through the sandbox's script, which takes the network away
        # and does not show the CLI's config, home or model socket. What the CLI reads that the agent could
        # write is the harness's, and read-only.
        config, scratch, home = folder / "config", folder / "tmp", folder / "home"
        locked = lock_files(work, config, home)
        sandbox.writable(config, scratch, home / ".cache")
        sandbox.readable(home)  # read-only: below it, only its .cache is the CLI's to write
        for path in locked:
            sandbox.protect(path)
        if installed is not None:
            sandbox.protect(installed.directory)
        wrapper = sandbox.script(folder / "sandbox.sh", hidden=(config, home, endpoint.forwarder.socket))
        sandbox.readable(wrapper)
        # The sandbox's environment: the model's key and gateway are the model layer's, never the CLI's.
        cli_env = cli_environment(sandbox.env, config, endpoint.base_url, settings.command_timeout,
                                  max_retries=settings.model_retries, output_limit=settings.output_limit,
                                  key=endpoint.key)
        # HOME is not work/: the CLI reads no project settings (skills) in a project that is its home.
        cli_env.update({"CLAUDE_CODE_SHELL_PREFIX": str(wrapper), "TMPDIR": str(scratch), "HOME": str(home)})
        session = ClaudeSession(cli, work, installed, cli_env, cli_model(route), folder, self.permission_mode,
                                workspace.command_log(), priced=route.live, sandbox=sandbox, secrets=secrets_in(env),
                                relay=endpoint.relay or None, output_limit=settings.output_limit,
                                forwarder=endpoint.forwarder, max_turns=self.max_turns, profile=settings.profile)
        endpoint.forwarder.observe = session.observed  # an API error's own words (the CLI keeps only its own)
        if endpoint.forwarder.record is not None:
            endpoint.forwarder.record.turn = lambda: len(session.turns)
        return session

    def fault(self, route: Route) -> str | None:
        return self.layer.fault(route)

    def close(self) -> None:
        self.layer.close()
