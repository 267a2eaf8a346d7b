"""The agent's folder, laid out as the seed has it (docs/families.md, "What the agent sees").

In this order: the family's `workdir/`, then the family's `specs/` into `specs/`, then the task's own `workdir/`
and `specs/` on top, so that a task's file wins over a family's of the same name; then the `.env` files, rendered
(environment.py). Nothing else of the family goes in: never `hooks/`, `tests/` or `solution/`. A link in these
folders is copied as the file it names when that is inside the family, and refused otherwise.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path

from ..results.redaction import Secrets
from .environment import Environment, load
from .errors import FamilyError
from .layout import Task


def layers(task: Task) -> list[tuple[Path, Path]]:
    """(source folder, where in the agent's folder) in the order they are laid, those that exist."""
    family = task.family.root
    found = [(family / "workdir", Path(".")), (family / "specs", Path("specs")),
             (task.folder / "workdir", Path(".")), (task.folder / "specs", Path("specs"))]
    return [(source, place) for source, place in found if source.is_dir()]


def environment(task: Task, environ: Mapping[str, str]) -> Environment:
    """The task's `.env` files (the family's, then its own), resolved against `environ`."""
    return load([task.family.root, task.folder], environ)


def stage(task: Task, folder: Path, environ: Mapping[str, str]) -> Environment:
    """Lay the agent's `folder` out for `task` (made when missing) and render its `.env` files; returns them."""
    folder.mkdir(parents=True, exist_ok=True)
    root = task.family.root.resolve()
    for source, place in layers(task):
        _copy(source, folder / place, root)
    env = environment(task, environ)
    env.render(folder)
    return env


def _copy(source: Path, target: Path, family: Path) -> None:
    for place, folders, files in os.walk(source, followlinks=False):
        here = Path(place)
        into = target / here.relative_to(source)
        into.mkdir(parents=True, exist_ok=True)
        for name in sorted(files + [f for f in folders if (here / f).is_symlink()]):
            path = here / name
            real = path
            if path.is_symlink():
                try:
                    real = path.resolve(strict=True)
                except (OSError, RuntimeError):
                    raise FamilyError(f"{path}: a dangling link (to {os.readlink(path)})") from None
                if not real.is_relative_to(family) or not real.is_file():
                    raise FamilyError(f"{path}: a link to what is not a file inside the family "
                                      f"(to {os.readlink(path)})")
            destination = into / name
            if destination.is_dir() and not destination.is_symlink():
                shutil.rmtree(destination)  # a task's file over a family's folder of the same name
            elif os.path.lexists(destination):
                destination.unlink()
            shutil.copy2(real, destination)


def hand_over(folder: Path, uid: int) -> None:
    """Give everything under `folder` (laid out by the harness, as root) to the agent's user id: its to edit."""
    for place, folders, files in os.walk(folder):
        for name in folders + files:
            os.chown(Path(place, name), uid, uid, follow_symlinks=False)
    os.chown(folder, uid, uid)


#: The largest file `redact` reads whole; a larger one is named, not read.
REDACT_BYTES = 256 * 1024 * 1024


def redact(folder: Path, secrets: Secrets) -> tuple[list[str], list[str]]:
    """Take every secret out of the regular files under `folder` (an item's folder, once graded: the `.env` files
    rendered into the agent's folder hold the family's values, and the agent may have printed them), links never
    followed, each file's mode and times kept. Returns the paths changed and the paths too large to read."""
    changed: list[str] = []
    too_large: list[str] = []
    if secrets.pattern is None or not folder.is_dir():
        return changed, too_large
    for place, _, files in os.walk(folder, followlinks=False):
        for name in sorted(files):
            path = Path(place, name)
            relative = path.relative_to(folder).as_posix()
            try:
                status = path.lstat()
                if not stat.S_ISREG(status.st_mode):
                    continue
                if status.st_size > REDACT_BYTES:
                    too_large.append(relative)
                    continue
                descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
                with os.fdopen(descriptor, "rb") as file:
                    text = file.read().decode("utf-8", "surrogateescape")
                scrubbed = secrets.scrub(text)
                if scrubbed == text:
                    continue
                descriptor = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW)
                with os.fdopen(descriptor, "wb") as file:
                    file.write(scrubbed.encode("utf-8", "surrogateescape"))
                os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns), follow_symlinks=False)
                changed.append(relative)
            except OSError:
                too_large.append(relative)  # unreadable here: named with those not read, never silently kept
    return changed, too_large
