"""What a host is to the harness: something that opens a conversation and sends it messages.

A project adds its own host by subclassing `Host` and returning it from the
`pytest_palette_add_hosts` hook in its conftest.py (or a plugin's entry point).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..models import ModelSpec
from ..skill import SkillCard, SkillNotFound, load_card


def skill_for_preflight(skill_dir: Path) -> tuple[SkillCard | None, list[str]]:
    """The skill under test as a host reads it, or the problem that stops it from being read at all."""
    try:
        return load_card(skill_dir), []
    except SkillNotFound as error:
        return None, [f"{error}: point --palette-skill at a skill folder"]


class HostError(RuntimeError):
    """The host failed to run a turn or to start: an error of the run, not a verdict on the skill.

    `turn` is the failed turn as far as it got (its steps, its error), when the failure happened mid-turn:
    the run's turns.json keeps it, so a timeout still shows what the agent was doing.
    """

    turn: TurnRecord | None = None


@dataclass
class TurnRecord:
    sent: str
    answer: str = ""
    seconds: float = 0.0
    error: str | None = None
    steps: list[str] = field(default_factory=list)
    # Reported by hosts whose client counts them (the claude host); None when the client does not say.
    num_turns: int | None = None  # model round trips within this turn, as the client counts them
    cost_usd: float | None = None  # the client's own estimate at list prices
    usage: dict[str, int] = field(default_factory=dict)  # token counts, as the client reports them


@dataclass(frozen=True)
class HostSettings:
    """Budgets a host may need; all of them end up in the report, because a budget can end a run."""

    command_timeout: float = 300.0
    recursion_limit: int = 120
    eager: bool = False


class HostSession(abc.ABC):
    """One conversation on one host."""

    @abc.abstractmethod
    def send(self, message: str, timeout: float) -> TurnRecord:
        """Send one user message; return when the agent hands the turn back. Raise HostError on failure."""

    def close(self) -> None:
        """Release what the conversation holds (processes, servers)."""


class Host(abc.ABC):
    """A scaffold that drives the skill: the harness opens one session per case and run."""

    name: str = ""

    def unsupported(self, model: ModelSpec) -> str | None:
        """Why this host cannot run `model`, or None when it can. Checked before any case runs."""
        return None

    def problems(self, model: ModelSpec, env: Mapping[str, str]) -> list[str]:
        """What is missing to run `model` (credentials); each names its fix. A usage error before any case."""
        return []

    def unavailable(self) -> str | None:
        """Why this host's client cannot run on this machine (not installed), or None.

        Its items are then skipped with this reason — never passed, and not an error of the skill.
        """
        return None

    def preflight(self, model: ModelSpec, skill_dir: Path, env: Mapping[str, str]) -> list[str]:
        """`--palette-check`: everything that would stop a run, each problem with its fix; runs no case."""
        reason = self.unavailable()
        return [*self.problems(model, env), *([reason] if reason else [])]

    def close(self) -> None:
        """Release what the host holds for the whole session (servers); called once at the end."""

    def describe(self, model: ModelSpec, settings: HostSettings) -> dict[str, str]:
        """What actually ran, for the report: at least `model`."""
        return {"model": model.label}

    @abc.abstractmethod
    def open(self, workspace: Path, skill: SkillCard, env: Mapping[str, str], model: ModelSpec,
             settings: HostSettings) -> HostSession:
        """Start a conversation whose agent works in `workspace`, with `env` for its shell."""
