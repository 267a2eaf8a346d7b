"""The manual host: for people with an agent CLI (Claude Code, say) but no automation.

`pytest --host=manual -m core` prepares one folder per case and a run sheet — cd, source env.sh (it
sets the trace), paste the opening, send each reply — and skips each item as "prepared". After the
conversations were held by hand, `pytest --host=manual -m core --palette-collect runs/<run-id>` judges
what is on disk, exactly as for any other host.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..arena.sandbox import UNCONFINED
from ..skill import SkillCard, install
from .base import HandedOver, Host, HostSession, HostSettings

if TYPE_CHECKING:
    from ..arena.sandbox import Sandbox
    from ..arena.workspace import Workspace
    from ..layer.route import Route

RUN_SHEET = "RUN_SHEET.md"
PASTE_PREVIEW = 400


class ManualHost(Host):
    """A person at the keyboard drives the agent; the harness prepares the folder and later collects it."""

    name = "manual"
    hands_over = True

    def describe(self, route: Route, settings: HostSettings) -> dict[str, str]:
        return {"model": "whatever the person's agent ran (not recorded)", "scaffold": "run sheet, by hand"}

    def sandbox_kind(self, settings: HostSettings) -> str:
        return UNCONFINED  # a person's own agent runs where the person runs it

    def open(self, workspace: Workspace, skill: SkillCard | None, env: Mapping[str, str], route: Route,
             settings: HostSettings, sandbox: Sandbox) -> HostSession:
        """Lay out the folder for a person, add it to the run sheet, and hand the conversation over."""
        if skill is not None:  # where Claude Code discovers project skills; other CLIs can be pointed there
            for card in (skill, *settings.skills):  # a task family's further skills beside the first
                install(card, workspace.work / ".claude")
        python = env.get("PALETTE_PYTHON", sys.executable)
        workspace.own("env.sh").write_text(
            "# source this file in the shell you start the agent from: deck.py writes its trace only when\n"
            "# PALETTE_TRACE is set, and the judge reads that trace for 24 of the 33 shipped cases.\n"
            f"export PALETTE_TRACE={shlex.quote(str(workspace.trace))}\n"
            f"export PALETTE_PYTHON={shlex.quote(python)}\n", encoding="utf-8")
        case = workspace.case()
        opening = case.opening if case else ""
        workspace.own("utterance.txt").write_text(opening + "\n", encoding="utf-8")
        shown = opening if len(opening) <= PASTE_PREVIEW else \
            f"{opening[:PASTE_PREVIEW]} … [+{len(opening) - PASTE_PREVIEW} chars, full text in utterance.txt]"
        entry = [f"## {case.name if case else workspace.relative.name}", "",
                 f"    cd {shlex.quote(str(workspace.work))} && source ../env.sh", "",
                 "paste ▸ " + shown.replace("\n", "\n        ")]
        entry += [f"then  ▸ {reply}" for reply in (case.replies if case else ())]
        if skill is None:
            entry += ["", "no skill (baseline): nothing was installed here; run an agent that has no Palette skill "
                          "of its own either (none in ~/.claude/skills)"]
        sheet = workspace.host_folder / RUN_SHEET
        append_to_run_sheet(sheet, [*entry, ""])
        raise HandedOver(f"the manual host is driven by a person: prepared for a person to run: follow {sheet}")


def append_to_run_sheet(sheet: Path, entry: list[str]) -> None:
    """One write per entry in append mode, so xdist workers never interleave their entries."""
    sheet.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(sheet, "x", encoding="utf-8") as first:  # exactly one process writes the header
            first.write(
                "# Run sheet\n\nFor each case: `cd` into its work folder, `source ../env.sh`, start your agent "
                "there, paste the opening, then send each reply when the agent hands the turn back.\nWhen done, "
                f"judge the run with `pytest --host=manual --palette-collect {sheet.parent.parent}` "
                "(with the same selection as now).\n\n")
    except FileExistsError:
        pass
    with open(sheet, "a", encoding="utf-8") as handle:
        handle.write("\n".join(entry) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
