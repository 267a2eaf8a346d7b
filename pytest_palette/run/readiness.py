"""Whether this machine can run what was asked, found in one place: a session before its first item,
`--palette-check`, and `palette-bench converse` each ask `readiness` and only say it their own way."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..arena import sandbox
from ..backend import run_folder_problem, setting_problems
from ..hosts.base import Host, HostSettings, Problem
from ..layer.route import route_of
from ..models import ModelSpec
from ..skill import SkillCard


@dataclass(frozen=True)
class Readiness:
    """What stops a run here, each in one line naming its fix; empty everywhere when nothing does."""

    #: Malformed `PALETTE_*` settings.
    settings: tuple[str, ...]
    #: Why the agent's commands cannot be confined as asked; None also when no host confines them.
    confinement: str | None
    #: Why runs cannot be written where they go; None also when nothing is written there (a collected run).
    run_folder: str | None
    #: host name → what stops it (a `skip` problem only skips its items).
    hosts: Mapping[str, list[Problem]]

    def blocking(self) -> list[str]:
        """Every problem that stops the run before its first item, in one line each (a host's named)."""
        return [*self.settings, *filter(None, [self.confinement, self.run_folder]),
                *(f"{name}: {problem}" for name, found in self.hosts.items() for problem in found if not problem.skip)]

    def unavailable(self) -> dict[str, str]:
        """host name → why its items are skipped: its client is not on this machine."""
        return {name: skipped[0].message for name, found in self.hosts.items()
                if (skipped := [problem for problem in found if problem.skip])}


def readiness(hosts: Mapping[str, Host], model: ModelSpec, settings: HostSettings, run_root: Path | None,
              skill: SkillCard | None = None) -> Readiness:
    """Ask the settings, the sandbox (when one of `hosts` confines its agent), the run folder (None: nothing is
    written) and every host in `hosts` — given the skill (`--palette-check`), whether each discovers it too."""
    confines = any(host.sandbox_kind(settings) == sandbox.BUBBLEWRAP for host in hosts.values())
    return Readiness(
        settings=tuple(setting_problems()),
        confinement=sandbox.problem(settings.sandbox) if confines else None,
        run_folder=run_folder_problem(run_root) if run_root is not None else None,
        hosts={name: host.check(route_of(model), os.environ, skill) for name, host in hosts.items()},
    )
