"""An item's folder judged: the evidence read, the faults looked for, the verdict given, in that order.

The one path from disk to a verdict, for the item that just ran, `palette-bench rejudge` and the site's item
page alike. What differs between them is said in the arguments: a run that just ended waits for its builds,
measures whether the machine has room and saves the outputs; a saved run is only read.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, replace

from ..arena import untrusted
from ..arena.command_log import SKILL_SCRIPT
from ..arena.workspace import Workspace
from ..cases import Case
from ..judge import PALETTE, Verdict, evidence, judge
from ..judge.evidence import Evidence
from ..rules import SkillRules
from . import faults


@dataclass(frozen=True)
class Judgement:
    """What an item's folder shows: its evidence, and either a fault (an ERROR of the run: no verdict) or a
    verdict on the skill."""

    evidence: Evidence
    fault: str | None
    verdict: Verdict | None


def judge_folder(case: Case, workspace: Workspace, *, host: str = "", started: tuple[float, ...] = (),
                 grace: float = 0.0, scripts: Collection[str] = (SKILL_SCRIPT,), room: bool | None = None,
                 save: bool = False, rules: SkillRules | None = None, skill: str = PALETTE,
                 settle: Callable[[], object] | None = None, copies: untrusted.Budget | None = None) -> Judgement:
    """Judge what the conversation of `case` left in `workspace`: its evidence (waiting up to `grace` seconds for
    builds still running; `started` is when each message was sent, a run of one of `scripts` is a call), then its
    faults, then the verdict by `rules` of `skill` (Palette's unless given). `settle` runs once the evidence is
    read and before the rest is looked at (the item stops what its agent left running). `room` says whether the
    machine's disk had room when the item ended (None: measured now), which decides whether a full disk in a
    command's words is a fault or a bound of its sandbox (a note). With `save` the deck, its previews and the plan
    are copied to the item's output/ (only for a run that just ended: a saved run's are there already), within
    what is left of the run's `copies`."""
    on_disk = evidence.read(workspace, grace, started, scripts)
    if settle is not None:
        settle()
    room = faults.has_room(workspace.work) if room is None else room
    fault = faults.first_fault(on_disk.calls, on_disk.commands_run, workspace.work, room)
    if fault:
        return Judgement(on_disk, fault, None)
    met = faults.bounds_met(on_disk.commands_run, room)
    if met:  # the agent's own doing: a note on its verdict, not an error of the run
        on_disk = replace(on_disk, call_notes=on_disk.call_notes + met)
    if save:
        on_disk = evidence.save_outputs(case, on_disk, workspace.output, copies)
    return Judgement(on_disk, None, judge(case, on_disk, host, rules, skill))
