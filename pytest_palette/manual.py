"""The manual host: for people with an agent CLI (Claude Code, say) but no automation.

`pytest --host=manual -m core` prepares one folder per case and a run sheet — cd, source env.sh (it
sets the trace), paste the opening, send each reply — and skips each item as "prepared". After the
conversations were held by hand, `pytest --host=manual -m core --palette-collect runs/<run-id>` judges
what is on disk, exactly as for any other host.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from .cases import Case
from .evidence import TRACE_NAME
from .hosts.base import Host, HostError, HostSession, HostSettings
from .models import ModelSpec
from .runner import write_inputs
from .skill import SkillCard

RUN_SHEET = "RUN_SHEET.md"
PASTE_PREVIEW = 400


class ManualHost(Host):
    """A person at the keyboard drives the agent; the harness prepares and later collects."""

    name = "manual"

    def describe(self, model: ModelSpec, settings: HostSettings) -> dict[str, str]:
        return {"model": "whatever the person's agent ran (not recorded)", "scaffold": "run sheet, by hand"}

    def open(self, workspace: Path, skill: SkillCard, env: Mapping[str, str], model: ModelSpec,
             settings: HostSettings) -> HostSession:
        raise HostError("the manual host is driven by a person: run it to prepare the folders, then judge them "
                        "with --palette-collect RUN_DIR")


def prepare(case: Case, skill: SkillCard, workspace: Path, env: Mapping[str, str]) -> list[str]:
    """Lay out one case's folder for a person and return its run-sheet entry."""
    if workspace.exists():
        shutil.rmtree(workspace)
    write_inputs(case, workspace / "input")
    work = workspace / "work"
    # Where Claude Code discovers project skills; other CLIs can be pointed at the same folder.
    shutil.copytree(skill.directory, work / ".claude" / "skills" / skill.name,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    trace = workspace / TRACE_NAME
    python = env.get("PALETTE_PYTHON", sys.executable)
    (workspace / "env.sh").write_text(
        "# source this file in the shell you start the agent from: deck.py writes its trace only when\n"
        "# PALETTE_TRACE is set, and the judge reads that trace for 24 of the 33 shipped cases.\n"
        f"export PALETTE_TRACE={shlex.quote(str(trace))}\n"
        f"export PALETTE_PYTHON={shlex.quote(python)}\n", encoding="utf-8")
    (workspace / "utterance.txt").write_text(case.opening + "\n", encoding="utf-8")
    opening = case.opening
    shown = opening if len(opening) <= PASTE_PREVIEW else \
        f"{opening[:PASTE_PREVIEW]} … [+{len(opening) - PASTE_PREVIEW} chars, full text in utterance.txt]"
    lines = [f"## {case.name}", "", f"    cd {shlex.quote(str(work))} && source ../env.sh", "",
             "paste ▸ " + shown.replace("\n", "\n        ")]
    lines += [f"then  ▸ {reply}" for reply in case.replies]
    return [*lines, ""]


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
