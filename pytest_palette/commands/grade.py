"""`palette-bench grade FAMILY --task ID --run-dir DIR`: a task's hooks and hidden checks over a saved or hand-made
agent's folder, with no agent (docs/families.md, "Grading a folder").

Nothing is spent. As a run grades: preflight (so that a service the invariants probe is there), the invariants, the
hidden checks staged and taken away again, everything the graders started ended. Each check is printed with its
source, role and words, then the score and the verdict; `--json` prints the grade as one JSON line instead. The exit
status is the verdict, as the peer's is: 0 pass, 1 fail, 2 an error (of the graders, or of what was given).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path

from ..arena import sandbox
from ..families.errors import FamilyError
from ..families.grading import Grade, grade
from ..families.layout import Family
from ..families.staging import environment
from ..results.record import GATE, SCORED

EXIT = {"pass": 0, "fail": 1, "error": 2}
#: The lines of a failing check's words shown under it.
WORDS_LINES = 12


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("family", type=Path, help="the family's root (the folder holding tasks/)")
    parser.add_argument("--task", help="the task's id (its folder under tasks/); may be left out when there is one")
    parser.add_argument("--run-dir", type=Path, required=True,
                        help="the agent's folder to grade: a run's saved one, or one made by hand")
    parser.add_argument("--sandbox", default="bubblewrap", choices=sorted(sandbox.MODES),
                        help="where the graders run: bubblewrap (the default: confined), or none (unconfined)")
    parser.add_argument("--json", action="store_true", help="the grade as one JSON line")


def run(args: argparse.Namespace, out: Callable[[str], None] = print) -> int:
    try:
        family = Family.load(args.family)
        ids = family.task_ids()
        if args.task is None and len(ids) != 1:
            raise FamilyError(f"{family.root}: name the task with --task (the family's tasks: {', '.join(ids)})")
        task = family.task(args.task or ids[0])
        folder: Path = args.run_dir
        if not folder.is_dir() or folder.is_symlink():
            raise FamilyError(f"{folder}: not a folder (--run-dir is the agent's folder to grade)")
        problem = sandbox.problem(args.sandbox)
        if problem:
            raise FamilyError(problem)
        graded = grade(task, folder, mode=args.sandbox)
    except FamilyError as error:
        out(f"error: {error}")
        return 2
    secrets = environment(task, os.environ).secrets(os.environ)
    if args.json:
        out(graded.to_json(secrets))
    else:
        for line in lines(graded):
            out(secrets.scrub(line))
    return EXIT[graded.verdict]


def lines(graded: Grade) -> list[str]:
    """The grade as a reader reads it: a line per check (its words below it), then the score and the verdict."""
    shown = []
    for each in graded.checks:
        check = each.check
        role = "diagnostic" if check.role == SCORED and check.weight == 0 else \
            "gate" if check.role == GATE else f"weight {check.weight:g}"
        mark = "✓" if check.passed else "·" if check.passed is None else "✗"
        malformed = ", malformed" if each.malformed else ""
        shown.append(f"{mark} {check.name} ({each.source}, {role}{malformed})")
        said = check.words.splitlines() if not check.passed else []
        shown += [f"    {line}" for line in said[:WORDS_LINES]]
        if len(said) > WORDS_LINES:
            shown.append(f"    … ({len(said) - WORDS_LINES} more lines: --json has them all)")
    if graded.preflight_error:
        shown.append(f"preflight error: {graded.preflight_error}")
    shown += [f"error: {error}" for error in graded.errors]
    shown += [f"backed up and restored: {path}" for path in graded.backed_up]
    if graded.identity.get("unstaged_packs"):
        shown.append(f"note: apm.yml names skill packs not staged under .claude/: {graded.identity['unstaged_packs']} "
                     "(nothing is installed from a network)")
    score = "—" if graded.score is None else f"{graded.score:.4g}"
    shown.append(f"{graded.task}: {graded.verdict} · score {score} · graders {graded.sandbox}")
    return shown
