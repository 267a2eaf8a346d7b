"""The scripted user having one conversation with a host: the opening, then one reply each time the agent
hands the turn back. What was said is kept in turns.json; what was done is on disk for the evidence."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..arena import untrusted
from ..arena.sandbox import KeeperFailed, Sandbox
from ..arena.workspace import Workspace
from ..backend import agent_environment
from ..cases import Case
from ..hosts import stops
from ..hosts.base import HandedOver, Host, HostError, HostSession, HostSettings, TurnRecord
from ..judge.evidence import builds_in
from ..layer.route import Route, route_of
from ..models import ModelSpec
from ..results.redaction import Secrets
from ..skill import SkillCard

#: How a failed turn's message names the model calls its client retried first.
RETRIED = "retried model call"
#: The fewest characters of a client's own words a failed turn's line keeps beside the model layer's cause.
CLIENT_WORDS = 120
#: The whole words of a turn's error, when they are more than one line: `turn-<n>-error.txt` in the item's folder.
ERROR_FILE = "turn-{number}-error.txt"


class HostFailure(Exception):
    """The host could not start or finish a turn: the item is an ERROR of the run, not a FAIL of the skill."""


class NotStarted(Exception):
    """What the item does before its agent starts failed (a task family's preflight): an ERROR of the run, in one
    line, with no agent started and nothing spent."""


@dataclass
class Transcript:
    """What one conversation said: its turns, and how long it took."""

    turns: list[TurnRecord] = field(default_factory=list)
    seconds: float = 0.0

    def save(self, workspace: Workspace) -> None:
        payload = {"seconds": self.seconds, "turns": [asdict(turn) for turn in self.turns]}
        workspace.turns.write_text(json.dumps(payload, indent=2), encoding="utf-8")

    @property
    def started(self) -> tuple[float, ...]:
        """When each message was sent; () when any was not recorded (held by hand, or an earlier version's)."""
        times = tuple(turn.started_at for turn in self.turns)
        return () if None in times else times  # type: ignore[return-value]

    @classmethod
    def saved(cls, workspace: Workspace) -> Transcript:
        """The transcript kept in a workspace (none for a conversation held by hand)."""
        try:  # a saved run may come from anywhere: a link or an oversized file is not read (ValueError)
            text = untrusted.read_bytes(workspace.turns.parent, Path(workspace.turns.name), untrusted.TURNS_BYTES)
        except FileNotFoundError:
            return cls()
        except untrusted.Refused as refused:
            raise ValueError(str(refused)) from None
        saved = json.loads(text)
        return cls([TurnRecord(**turn) for turn in saved.get("turns", [])], float(saved.get("seconds", 0.0)))


def conversation_environment(workspace: Workspace, base_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The conversation's whole environment (its host's client reads a model key there): the caller's, plus this
    conversation's trace path — set here only, never process-wide."""
    return agent_environment(workspace.trace, base_env)


def open_sandbox(workspace: Workspace, settings: HostSettings, base_env: Mapping[str, str] | None = None,
                 scripts: frozenset[str] | None = None) -> Sandbox:
    """The sandbox of one item's commands (`--palette-sandbox`); the caller closes it when the item ends. With the
    `scripts` of a skill that tells the record of its runs (their hashes), the record is kept in the item's folder."""
    return Sandbox(workspace.work, conversation_environment(workspace, base_env), settings.sandbox,
                   trace=workspace.trace, passed=settings.sandbox_env, withheld=settings.withheld,
                   record=workspace.skill_runs if scripts is not None else None, scripts=scripts or frozenset())


def converse(case: Case, host: Host, *, skill: SkillCard | None, model: ModelSpec, settings: HostSettings,
             workspace: Workspace, turn_timeout: float, sandbox: Sandbox, base_env: Mapping[str, str] | None = None,
             on_open: Callable[[HostSession], None] | None = None,
             before: Callable[[], None] | None = None) -> Transcript:
    """Have the conversation in a fresh workspace, every command of its agent in `sandbox`; raise HostFailure
    when the host fails (HandedOver when a person is to have it). A failed turn stops the conversation: later
    replies would land in the wrong state. `before` runs in the new folder before the sandbox is made ready (it
    may raise NotStarted)."""
    route = route_of(model)  # once per item, before the host opens: where its model calls go
    workspace.prepare(case)
    if before is not None:
        before()
    try:
        sandbox.prepare()
    except KeeperFailed as failed:  # the machine's, not the agent's: an ERROR of the item, in one line
        raise HostFailure(str(failed)) from None
    env = conversation_environment(workspace, base_env)
    transcript = Transcript()
    started = time.monotonic()
    handed_over = False
    try:
        session = _open(host, workspace=workspace, skill=skill, env=env, route=route, settings=settings,
                        sandbox=sandbox)
        if on_open is not None:  # so a session that ends early can close this conversation from outside
            on_open(session)
        ended = False
        try:
            messages = (case.opening, *case.replies)
            for number, message in enumerate(messages, 1):
                if workspace.watch is not None:
                    workspace.watch.turn(number, len(messages))
                # What a build left on disk as the message goes: the disk's word, beside the records of calls.
                builds = builds_in(workspace.work) if number > 1 else []
                sent_at = round(time.time(), 3)  # on deck.py's clock (the same machine), to its precision
                ran_before = _commands_run(workspace)
                # What the model layer saw (a dead rehearsal server, a model that failed or did not answer)
                # explains a failed turn better than its client's words, and in the same words on every host.
                turn, problem = _send(session, message, turn_timeout,
                                      cause=lambda: host.fault(route) or session.model_fault())
                turn.started_at = sent_at
                turn.builds_before = builds
                turn.commands = _commands_run(workspace) - ran_before
                transcript.turns.append(turn)
                if problem:
                    if turn.error and (len(turn.error) > stops.WORDS or "\n" in turn.error):
                        # The one line names the file that keeps the whole (an upstream's 40 KB answer).
                        turn.error_file = _keep_words(workspace, number, turn.error, env)
                        turn.error = stops.one_line(turn.error)
                        problem += f" (the whole error: {turn.error_file})"
                    raise HostFailure(f"turn {number} {problem}")
            ended = True
        finally:
            session.close()
            if not ended:  # a failed turn, a crash, Ctrl-C: what the dead conversation runs stops with it
                sandbox.stop()
    except HandedOver:
        handed_over = True
        raise
    finally:
        transcript.seconds = round(time.monotonic() - started, 3)
        if not handed_over:
            transcript.save(workspace)
    return transcript


def _send(session: HostSession, message: str, timeout: float,
          cause: Callable[[], str | None] = lambda: None) -> tuple[TurnRecord, str | None]:
    """The turn, with why it ended (`stop`), and what went wrong with it in one line (None when nothing did): for a
    turn that failed or ran out of time, `cause()` first where it names one, then the client's words, cut shorter
    to leave it room."""
    try:
        turn = session.send(message, timeout)
        turn.stop = turn.stop or "answered"
        return turn, None
    except HostError as error:
        # The host's own record of the failed turn keeps the steps it streamed before failing.
        turn = error.turn or TurnRecord(sent=message, error=str(error))
        said = str(error)
        # A provider's refusal of a context too long reaches a host as any error does: its words name it.
        stopped = error if isinstance(error, stops.TurnStopped) else stops.context_limit(said)
        turn.stop = stopped.reason if stopped is not None else "error"
        turn.error = turn.error or said
        if stopped is not None and stopped.reason != "turn_timeout":
            shown = str(stopped)
        else:
            shown = _with_cause(cause, said, "failed: ")
        if turn.retries and RETRIED not in said:  # every host's give-up names its retries (docs/hosts.md)
            shown += f" (after {turn.retries} {RETRIED}(s) in this turn)"
        return turn, shown
    except Exception as error:
        said = f"{type(error).__name__}: {error}"
        return TurnRecord(sent=message, error=said, stop="error"), _with_cause(cause, said, "raised ")


def _with_cause(cause: Callable[[], str | None], said: str, how: str) -> str:
    """The client's words `said`, as `how` introduces them ("failed: ", "raised "), after the cause `cause()`
    names where it names one: then they are cut shorter, to leave it room."""
    named = cause()
    words = stops.one_line(said, max(stops.WORDS - len(named or ""), CLIENT_WORDS))
    return f"failed: {named} ({how}{words})" if named else f"{how}{words}"


def _commands_run(workspace: Workspace) -> int:
    """How many commands the item's record holds so far: a turn's are the difference."""
    try:
        with workspace.commands.open("rb") as log:
            return sum(1 for _ in log)
    except OSError:
        return 0


def _keep_words(workspace: Workspace, number: int, words: str, env: Mapping[str, str]) -> str | None:
    """Keep a turn's whole error in the item's folder, with no secret of `env` in it; its name, or None."""
    name = ERROR_FILE.format(number=number)
    try:
        workspace.own(name).write_text(Secrets.of(env).scrub(words), encoding="utf-8")
    except OSError:
        return None
    return name


def _open(host: Host, *, workspace: Workspace, skill: SkillCard | None, env: Mapping[str, str], route: Route,
          settings: HostSettings, sandbox: Sandbox) -> HostSession:
    try:
        return host.open(workspace, skill, env, route, settings, sandbox)
    except (HandedOver, HostFailure):
        raise
    except HostError as error:
        raise HostFailure(f"could not start: {error}") from None
    except Exception as error:
        raise HostFailure(f"could not start: {type(error).__name__}: {error}") from None


def as_left(case: Case, workspace: Workspace) -> Transcript:
    """A conversation held earlier (by hand, or in another run): only what is on disk."""
    if not workspace.input.is_dir():
        raise HostFailure(f"no prepared folder for {case.name} at {workspace.folder}")
    return Transcript.saved(workspace)
