"""What a host is to the harness: something that opens a conversation and sends it messages.

A project adds its own host by subclassing `Host` and returning it from the
`pytest_palette_add_hosts` hook in its conftest.py (or a plugin's entry point). A host's own options
(`HostOption`) are declared on its class and read back by its `configure`: the harness and
`palette-bench converse` know them without knowing the host.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from ..layer.route import Route
from ..models import ModelSpec
from ..results import redaction
from ..skill import SkillCard

if TYPE_CHECKING:
    import pytest

    from ..arena.cassette import Exchange, Wire
    from ..arena.replay import WireReplay
    from ..arena.sandbox import Sandbox
    from ..arena.workspace import Workspace

#: The budgets of a conversation, each defined here once: options, `palette-bench converse` and hosts read them.
TURN_TIMEOUT = 1500.0
#: One shell command: it must outlast deck.py's holds (90 s for a plan, 60 s for a status).
COMMAND_TIMEOUT = 300.0
#: LangGraph's default of 25 steps is about 12 model turns: less than one deck.
RECURSION_LIMIT = 120
#: Retries of one model call after a transient error (429, 5xx, a reset, the call's timeout), by the client's own
#: machinery, with backoff and jitter; then the turn fails and the item ERRORs naming the cause. The openai SDK's
#: default is 2: a provider's rate limit often lasts longer than that.
MODEL_RETRIES = 5
#: Characters of one command's output the agent reads back (`--palette-output-limit`). No host's own client clips
#: tighter by default: Claude Code's Bash tool keeps 30,000 inline (BASH_MAX_OUTPUT_LENGTH goes up to 150,000),
#: CUGA trims a code block's output at 70,000, LangGraph clips nothing. deck.py's answer carries the whole plan: a
#: 35 KB pasted document makes a 36 KB answer, and a clip under that once failed the skill for the host's doing.
OUTPUT_LIMIT = 150_000


@dataclass(frozen=True)
class HostOption:
    """An option of one host's own: `--palette-<name>` under pytest (dest `palette_<name>`, in the palette
    group), `--<name>` under `palette-bench converse`. Not given, it reads None (a switch: False), and the host's
    own default applies."""

    name: str
    help: str
    #: Turns the text given into the value (`int`, `float`); None keeps the text. Not for a switch.
    type: Callable[[str], Any] | None = None
    metavar: str | None = None
    #: A switch (`store_true`) rather than a value.
    switch: bool = False

    def flag(self, prefix: str = "palette-") -> str:
        return f"--{prefix}{self.name}"

    def dest(self, prefix: str = "palette-") -> str:
        return (prefix + self.name).replace("-", "_")

    def add_to(self, add: Callable[..., object], prefix: str = "palette-") -> None:
        """Declare it through `add`: pytest's `group.addoption` or argparse's `add_argument`, which take alike."""
        if self.switch:
            add(self.flag(prefix), action="store_true", default=False, dest=self.dest(prefix), help=self.help)
        else:
            add(self.flag(prefix), type=self.type, default=None, dest=self.dest(prefix), metavar=self.metavar,
                help=self.help)


class OptionRefused(ValueError):
    """A host's option given a value it cannot take. The message says why in a few words; whoever read the
    option puts its flag in front, as its user spelled it (`--palette-eager` or converse's `--eager`)."""

    def __init__(self, option: str, why: str) -> None:
        super().__init__(why)
        self.option = option


def step_budget_option(given: Mapping[str, Any], name: str, default: int | None) -> int | None:
    """A step budget among a host's options as given (`default` when not given); OptionRefused below 1."""
    steps = given.get(name)
    if steps is not None and steps < 1:
        raise OptionRefused(name, f"must be at least 1 (got {steps})")
    return default if steps is None else int(steps)


def client_version(cli: Path, timeout: float) -> str:
    """The first line a client prints for `--version` ("2.1.332 (Claude Code)", "codex-cli 0.171.0"); HostError
    when it does not run."""
    import subprocess

    try:
        done = subprocess.run([str(cli), "--version"], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise HostError(f"{cli} --version did not run: {error}") from None
    if done.returncode != 0 or not done.stdout.strip():
        raise HostError(f"{cli} --version exited {done.returncode}: {(done.stderr or done.stdout).strip()[:300]}")
    return done.stdout.strip().splitlines()[0]


@dataclass(frozen=True)
class Problem:
    """Something that stops a host from running here, in words that name the fix."""

    message: str
    #: The host's client is not on this machine: its items are skipped with this reason. Otherwise the
    #: problem is a usage error, reported before any case runs.
    skip: bool = False

    def __str__(self) -> str:
        return self.message


class HostError(RuntimeError):
    """The host failed to run a turn or to start: an error of the run, not a verdict on the skill.

    `turn` is the failed turn as far as it got (its steps, its error), when the failure happened mid-turn:
    the run's turns.json keeps it, so a timeout still shows what the agent was doing.
    """

    turn: TurnRecord | None = None


class HandedOver(HostError):
    """The host does not hold this conversation itself, and the item is skipped with the reason: it prepared it for a
    person (the manual host), or it has nothing to replay (`NothingRecorded`)."""


class NothingRecorded(HandedOver):
    """`--model replay:RUN` and the recorded run holds no cassette for this item."""


def secret_values(env: Mapping[str, str], sandbox: Sandbox) -> list[str]:
    """Every value nothing written may hold (a cassette, a log): the secrets in `env`, by the rule of
    results/redaction.py (every provider's key, ANTHROPIC_AUTH_TOKEN, WATSONX_APIKEY, RITS_API_KEY, any *_KEY,
    *_TOKEN …), and the credentials file's values the sandbox withholds."""
    return [*redaction.secret_values(env), *sandbox.secrets]


def recorded_exchanges(model: ModelSpec, workspace: Workspace, wire: Wire) -> list[Exchange]:
    """What `--model replay:RUN` recorded for this item, on the `wire` the host's client speaks: NothingRecorded
    (the item is skipped, with the reason) when the recording holds none for it; a HostError when it was recorded
    on another wire."""
    assert model.recording is not None, "a replay's model names its recorded run"
    recorded = model.recording.cassette(workspace.relative)
    if isinstance(recorded, str):  # nothing recorded for this item: not a verdict, a skip with the reason
        raise NothingRecorded(f"nothing to replay: {recorded}")
    if recorded[0].wire != wire:
        raise HostError(f"{workspace.relative}'s cassette was recorded as {recorded[0].wire} exchanges; this host's "
                        f"client speaks {wire}")
    return recorded


def held_to_recording(replay: WireReplay | None, send: Callable[[], TurnRecord]) -> TurnRecord:
    """One turn of a conversation whose model is a recording on the wire (`replay`): when a request of it departed
    from the recording, the turn is a HostError in the replay's words ("ReplayDiverged: call 3 …") — whatever the
    client made of the error it was answered with (some end the turn, some try again, some answer anyway)."""
    if replay is None:
        return send()
    turn: TurnRecord | None = None
    try:
        turn = send()
    except HostError as error:
        if replay.diverged is None:
            raise
        turn = error.turn
    if replay.diverged is None:
        assert turn is not None
        return turn
    failed = HostError(f"ReplayDiverged: {replay.diverged}")
    if turn is not None:
        turn.error = str(failed)
    failed.turn = turn
    raise failed


@dataclass
class TurnRecord:
    sent: str
    answer: str = ""
    seconds: float = 0.0
    error: str | None = None
    steps: list[str] = field(default_factory=list)
    # Reported by hosts whose client counts them (the claude host); None when the client does not say.
    num_turns: int | None = None  # model round trips within this turn, as the client counts them
    cost_usd: float | None = None  # what the client says this turn cost (None for the rehearsal model)
    usage: dict[str, int] = field(default_factory=dict)  # token counts, as the client reports them
    #: When the message was sent (epoch seconds), set by the harness: the judge orders calls by turns with it.
    started_at: float | None = None
    #: Model calls the client retried after a transient error in this turn; None when the client does not say.
    retries: int | None = None
    #: What the agent's folder held of builds when the message was sent, set by the harness (a build's state file,
    #: a .pptx: `evidence.builds_in`): a build the records of calls miss still left its mark before the approval.
    builds_before: list[str] = field(default_factory=list)
    #: Why the turn ended (hosts/stops.py: `answered`, `step_budget`, …); None in records made before it was kept.
    stop: str | None = None
    #: Model calls in this turn, where the host counts them; None when it does not say.
    model_calls: int | None = None
    #: Commands the agent ran in this turn, as the item's record of commands holds them (set by the harness).
    commands: int | None = None
    #: The file in the item's folder that keeps the whole of a long error (`error` is then its one line).
    error_file: str | None = None


@dataclass(frozen=True)
class HostSettings:
    """Budgets a host may need; all of them end up in the report, because a budget can end a run."""

    command_timeout: float = COMMAND_TIMEOUT
    #: `--palette-sandbox`: "bubblewrap", or "none" for commands unconfined (the allow-listed environment still).
    sandbox: str = "bubblewrap"
    #: Variables the agent's commands get beside the allow-list (`--palette-sandbox-env`: a real Palette's key).
    sandbox_env: tuple[str, ...] = ()
    #: Variables the agent's commands never get: the credentials file's (run/credentials.py), but those passed.
    withheld: tuple[str, ...] = ()
    #: The most retries of one model call, where the host's client retries (all built-in hosts do).
    model_retries: int = MODEL_RETRIES
    #: `--palette-output-limit`: characters of one command's output the agent reads back, on every host.
    output_limit: int = OUTPUT_LIMIT
    #: Transient errors the rehearsal server injects (`--palette-rehearsal-faults`), for hosts that serve it
    #: over HTTP; None: it injects none.
    rehearsal_faults: str | None = None
    #: The rehearsal model's time per call (`--palette-rehearsal-latency`); None: it answers at once.
    rehearsal_latency: str | None = None
    #: The rehearsal model's output and context limits in tokens (`--palette-rehearsal-limits`); None: none.
    rehearsal_limits: str | None = None
    #: `--palette-record`: each model call of each item goes to the item's cassette (arena/cassette.py).
    record: bool = False
    #: An agent profile's instructions (a task family's `.claude/agents/<name>.md`, `--palette-agent-profile`),
    #: added to the agent's system prompt as the host takes one; None: none.
    profile: str | None = None
    #: A task family's further skills, beside `open`'s `skill` (its first): each offered as that one is. A host that
    #: offers one skill only must refuse a session that gives it more (`Host.open`), never drop them silently.
    skills: tuple[SkillCard, ...] = ()


class CallsSeen(Protocol):
    """The model layer's account of a conversation's model calls (layer/endpoint.py's ModelCalls)."""

    def fault(self) -> str | None: ...


class HostSession(abc.ABC):
    """One conversation on one host."""

    #: Told each step (a command, its output) as it happens, by hosts whose client streams them.
    on_step: Callable[[str], None] | None = None
    #: What the model layer saw of its client's calls, where they pass its forwarder (layer/endpoint.py's
    #: ModelCalls).
    calls_seen: CallsSeen | None = None

    def model_fault(self) -> str | None:
        """What the model layer saw go wrong with the model's last call, in the same words on every host: a failed
        turn's cause before the client's own words (None when the model answered, or no forwarder saw it)."""
        return self.calls_seen.fault() if self.calls_seen is not None else None

    @abc.abstractmethod
    def send(self, message: str, timeout: float) -> TurnRecord:
        """Send one user message; return when the agent hands the turn back. Raise HostError on failure."""

    def close(self) -> None:
        """Release what the conversation holds (processes, servers)."""


class Host(abc.ABC):
    """A scaffold that drives the skill: the harness opens one session per case and run."""

    name: str = ""
    #: Whether one process may hold several of its conversations at once (--palette-conversations); a host
    #: whose client keeps process-wide state says False, and its conversations are held one at a time.
    concurrent: bool = True
    #: Whether its client reaches the rehearsal model over HTTP, through the model layer, where
    #: `--palette-rehearsal-faults` injects transient errors (an in-process model has no wire to break).
    serves_rehearsal: bool = False
    #: Whether it can write each model call to the item's cassette (`--palette-record`).
    records: bool = False
    #: Whether it holds no conversation itself but prepares each for a person (HandedOver): `palette-bench
    #: converse`, which drives one conversation there and then, has nothing to drive on it.
    hands_over: bool = False
    #: Options of this host's own; a subclass inherits them, and reads them in `configure`.
    options: ClassVar[tuple[HostOption, ...]] = ()
    #: Where the host may keep what it learned of this machine from one session to the next (pytest's cache,
    #: `.pytest_cache`); set before `check`, None with `-p no:cacheprovider`. Nothing the agent wrote goes here.
    cache: pytest.Cache | None = None

    @classmethod
    def add_options(cls, parser: pytest.Parser) -> None:
        """Add `options` to pytest's palette group. The plugin does it for its hosts; a project's host does it
        from its conftest.py's `pytest_addoption(parser)`. A name already added (a subclass's) is added once."""
        group = parser.getgroup("palette")
        taken = {name for option in group.options for name in option.names()}
        for option in cls.options:
            if option.flag() not in taken:
                option.add_to(group.addoption)

    def configure(self, given: Mapping[str, Any], *, skill: bool = True) -> None:
        """Take this host's options as given (`HostOption.name` → value; None, or False for a switch, when not
        given) before anything is checked or opened; `skill` is False when no skill is under test. Raise
        OptionRefused for a value it cannot take."""

    def terms(self) -> dict[str, object]:
        """What this host's options add to a run's fingerprint (plain values): two runs that differ here
        measured under different terms."""
        return {}

    def check(self, route: Route, env: Mapping[str, str], skill: SkillCard | None = None) -> list[Problem]:
        """What stops this host from running `route`'s model here (a model it cannot run, missing credentials, a client
        that is not installed), each naming its fix. Given the skill under test (`--palette-check`), also whether
        the host, once the skill is installed, discovers it unchanged."""
        return []

    def fault(self, route: Route) -> str | None:
        """What is wrong with what the host holds for the session (a model endpoint that stopped answering),
        asked when a turn fails, so the item's ERROR names the cause; None when nothing is known wrong."""
        return None

    def close(self) -> None:
        """Release what the host holds for the whole session (servers); called once at the end."""

    def sandbox_kind(self, settings: HostSettings) -> str:
        """Where this host's agent runs its commands under `settings`, as records say it."""
        from ..arena.sandbox import MODES

        return MODES.get(settings.sandbox, settings.sandbox)

    def describe(self, route: Route, settings: HostSettings) -> dict[str, str]:
        """What actually ran, for the report: at least the model."""
        return {"model": route.model.label}

    def agent_folder(self, workspace: Workspace) -> Path:
        """Where the agent's commands start, known before the conversation opens: where a task family's folder is
        laid out and graded (`workspace.work`, unless the host's client works in a folder of its own there)."""
        return workspace.work

    def warm_up(self, route: Route, settings: HostSettings, env: Mapping[str, str]) -> None:
        """Before a sweep's conversations start together (`--palette-conversations`): start what each of them would
        otherwise wait for, so that it warms while their folders and sandboxes are made. Nothing by default."""

    @abc.abstractmethod
    def open(self, workspace: Workspace, skill: SkillCard | None, env: Mapping[str, str], route: Route,
             settings: HostSettings, sandbox: Sandbox) -> HostSession:
        """Start a conversation whose agent works in `workspace.work`, with `skill` installed where the host finds
        skills — or, for None (`--palette-skill none`, the baseline), with no skill installed and none offered.
        `env` is the conversation's whole environment, for the host's own client (a model key is there); every
        command the agent runs goes through `sandbox` (`sandbox.argv`, `sandbox.env`), which holds no secret. The
        model is `route`'s: the host asks the model layer (layer/serving.py) for its client's endpoint."""
