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
from ..hosts.base import HandedOver, Host, HostError, HostSession, HostSettings, TurnRecord
from ..models import ModelSpec
from ..skill import SkillCard
from .evidence import builds_in

#: How a failed turn's message names the model calls its client retried first.
RETRIED = "retried model call"


class HostFailure(Exception):
    """The host could not start or finish a turn: the item is an ERROR of the run, not a FAIL of the skill."""


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
             on_open: Callable[[HostSession], None] | None = None) -> Transcript:
    """Have the conversation in a fresh workspace, every command of its agent in `sandbox`; raise HostFailure
    when the host fails (HandedOver when a person is to have it). A failed turn stops the conversation: later
    replies would land in the wrong state."""
    workspace.prepare(case)
    try:
        sandbox.prepare()
    except KeeperFailed as failed:  # the machine's, not the agent's: an ERROR of the item, in one line
        raise HostFailure(str(failed)) from None
    env = conversation_environment(workspace, base_env)
    transcript = Transcript()
    started = time.monotonic()
    handed_over = False
    try:
        session = _open(host, workspace=workspace, skill=skill, env=env, model=model, settings=settings,
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
                turn, problem = _send(session, message, turn_timeout)
                turn.started_at = sent_at
                turn.builds_before = builds
                transcript.turns.append(turn)
                if problem:
                    cause = host.fault(model)  # a dead endpoint explains a timeout better than the timeout
                    raise HostFailure(f"turn {number} {f'failed: {cause} ({problem})' if cause else problem}")
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


def _send(session: HostSession, message: str, timeout: float) -> tuple[TurnRecord, str | None]:
    """The turn, and what went wrong with it (None when nothing did)."""
    try:
        return session.send(message, timeout), None
    except HostError as error:
        # The host's own record of the failed turn keeps the steps it streamed before failing.
        turn = error.turn or TurnRecord(sent=message, error=str(error))
        said = str(error)
        if turn.retries and RETRIED not in said:  # every host's give-up names its retries (docs/hosts.md)
            said += f" (after {turn.retries} {RETRIED}(s) in this turn)"
        return turn, f"failed: {said}"
    except Exception as error:
        return TurnRecord(sent=message, error=f"{type(error).__name__}: {error}"), \
            f"raised {type(error).__name__}: {error}"


def _open(host: Host, *, workspace: Workspace, skill: SkillCard | None, env: Mapping[str, str], model: ModelSpec,
          settings: HostSettings, sandbox: Sandbox) -> HostSession:
    try:
        return host.open(workspace, skill, env, model, settings, sandbox)
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
