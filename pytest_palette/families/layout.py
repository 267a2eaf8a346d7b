"""What a family and a task are on disk, found and validated before any agent runs (docs/families.md, "Layout").

A family root holds `tasks/<id>/agent.task.md` for each task; beside it, what every task shares: `workdir/`,
`specs/`, `.claude/`, `hooks/`, `apm.yml`, `apm.lock.yaml`, `.env`, `.env.local` and, our own addition,
`family.yml` (the runner a check written for neither `node:test` nor `bun:test` gets). A task holds its prompt, an
optional `supervisor.task.md` and `judge.task.md`, its own `workdir/`, `specs/`, `hooks/`, `tests/` and
`solution/solve.sh`, and its `.env` files.

Every problem is a `FamilyError` of one line that names the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from .errors import FamilyError
from .hidden_tests import RUNNERS, HiddenCheck, Support, collect
from .identity import unstaged_packs

__all__ = ["Family", "FamilyError", "Task", "find_root", "is_family"]

TASKS = "tasks"
PROMPT = "agent.task.md"
SUPERVISOR = "supervisor.task.md"
JUDGE = "judge.task.md"
SETTINGS = "family.yml"
SOLUTION = Path("solution") / "solve.sh"
HOOKS = ("preflight.sh", "invariants.sh")
#: A task's id is its folder's name: one a node id, a file name and a URL can carry as it is.
TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
#: The bound of a prompt or a judge's template read from a family.
TEXT_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Task:
    """One task of a family: what the agent is told, what grades it, and its reference solution."""

    id: str
    folder: Path
    family: Family
    prompt: str
    supervisor: str | None
    judge: str | None
    #: The hidden checks and the support files of its `tests/`, validated.
    checks: tuple[HiddenCheck, ...]
    support: tuple[Support, ...]

    def hook(self, name: str) -> Path | None:
        """The task's own `hooks/<name>`, else the family's; None when neither has one."""
        for folder in (self.folder, self.family.root):
            path = folder / "hooks" / name
            if path.is_file():
                return path
        return None

    @property
    def solution(self) -> Path | None:
        """`solution/solve.sh`, the reference solution only the oracle agent runs; None when the task has none."""
        path = self.folder / SOLUTION
        return path if path.is_file() else None


@dataclass(frozen=True)
class Family:
    """A family root and what it says of itself (family.yml); its tasks are read one at a time (`task`)."""

    root: Path
    #: The runner of a check written for neither node:test nor bun:test: "bun" (the seed's) unless family.yml names
    #: "node".
    runner: str = "bun"

    @classmethod
    def load(cls, path: Path) -> Family:
        """The family at `path` or above it (`find_root`), its settings checked."""
        root = find_root(path)
        settings = root / SETTINGS
        runner = "bun"
        if settings.is_file():
            try:
                said = yaml.safe_load(settings.read_text(encoding="utf-8")) or {}
            except (yaml.YAMLError, UnicodeDecodeError) as error:
                raise FamilyError(f"{settings}: not YAML ({' '.join(str(error).split())[:160]})") from None
            if not isinstance(said, dict) or set(said) - {"test_runner"}:
                raise FamilyError(f"{settings}: holds only `test_runner: node` or `test_runner: bun`")
            runner = said.get("test_runner", runner)
            if runner not in RUNNERS:
                raise FamilyError(f"{settings}: test_runner {runner!r}: choose node or bun")
        unstaged_packs(root)  # apm.yml read now: a manifest that is not one is said before any agent runs
        return cls(root, runner)

    def task_ids(self) -> list[str]:
        """The ids of the family's tasks (the folders under tasks/), sorted."""
        return sorted(entry.name for entry in (self.root / TASKS).iterdir()
                      if entry.is_dir() and not entry.name.startswith("."))

    def task(self, task_id: str) -> Task:
        """The task `task_id`, validated: its prompt is there, its `tests/` tree is a valid one."""
        folder = self.root / TASKS / task_id
        if not TASK_ID.match(task_id) or not folder.is_dir():
            known = ", ".join(self.task_ids()) or "none"
            raise FamilyError(f"{folder}: no such task (the family's tasks: {known})")
        prompt = _text(folder / PROMPT)
        if prompt is None:
            raise FamilyError(f"{folder / PROMPT}: missing (every task needs the prompt its agent is given)")
        checks, support = collect(folder / "tests", self.root, self.runner) if (folder / "tests").exists() \
            else ((), ())
        return Task(task_id, folder, self, prompt, _text(folder / SUPERVISOR), _text(folder / JUDGE), checks,
                    support)

    def tasks(self) -> list[Task]:
        """Every task, validated; the first problem found, in the order of their ids, is raised."""
        return [self.task(task_id) for task_id in self.task_ids()]


#: What only a family root holds beside its `tasks/`: a skill set, its manifest or lockfile, our settings.
MARKS = (".claude", "apm.yml", "apm.lock.yaml", "family.yml")


def is_family(path: Path, named: bool = False) -> bool:
    """Whether `path` is a family root: a folder whose `tasks/` holds a task with its prompt — or, so that a task
    without one is named rather than passed over, any folder under `tasks/` where the root holds a family's marks
    or is `named` on the command line."""
    tasks = path / TASKS
    if not tasks.is_dir():
        return False
    folders = [entry for entry in tasks.iterdir() if entry.is_dir() and not entry.name.startswith(".")]
    return any((entry / PROMPT).is_file() for entry in folders) or (bool(folders) and (
        named or any((path / mark).exists() for mark in MARKS)))


def find_root(path: Path) -> Path:
    """The family root at `path` or the nearest folder above it that holds `tasks/<id>/`; FamilyError when none."""
    start = path.resolve()
    if not start.exists():
        raise FamilyError(f"{path}: no such folder")
    for folder in (start, *start.parents):
        if (folder / TASKS).is_dir():
            return folder
    raise FamilyError(f"{path}: not a task family (no {TASKS}/<id>/{PROMPT} here or above)")


def _text(path: Path) -> str | None:
    """A family's text file (a prompt, a template), or None when there is none."""
    if not path.is_file():
        return None
    data = path.read_bytes()[:TEXT_BYTES + 1]
    if len(data) > TEXT_BYTES:
        raise FamilyError(f"{path}: larger than {TEXT_BYTES // 1024} KiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise FamilyError(f"{path}: not UTF-8 text") from None
