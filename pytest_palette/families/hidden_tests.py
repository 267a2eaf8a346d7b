"""A task's hidden test suite, `tests/`: its checks, staged into the agent's folder, run, and taken away again.

`tests/` mirrors the agent's folder: `tests/test/filter.test.js` is staged at `test/filter.test.js`. Each
`*.test.js` is one check (`*.gate.test.js` a gate), named by its file's name without `.test.js` (and `.gate`); each
`test_*.py` is one check run with pytest (`test_gate_*.py` a gate), named without `test_` (and `gate_`). Every other
file is support: staged for the whole pass, never graded. A link resolving to a file inside the family is staged as
the file it names.

Which runner a JavaScript check gets is read from the file: one that imports or requires `node:test` runs under
`node --test`, one that imports `bun:test` under `bun test`, one that names neither under the family's runner
(`family.yml`'s `test_runner`, bun by default, as the seed has it). A check never runs under another runner than
its own: a missing runner is an error of the grader that names it, never a failed check.

Staging backs up whatever the agent left at a staged path (a file, a folder, a link — at the path or at a folder
on the way to it) and restores it afterwards; the folders staging made, and every file or folder that appeared
while the checks ran, are removed. The agent's folder is then as the agent left it, byte for byte.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import TracebackType

from .errors import FamilyError

RUNNERS = ("node", "bun")
#: Folders of `tests/` that are a tool's cache, not the suite: never staged.
CACHES = frozenset({"__pycache__", ".pytest_cache"})
PYTEST = "pytest"
#: What a check file says of the runner it is written for: an import or require of `node:test` / `bun:test`.
_IMPORTS = r"""(?:\bfrom\s*|\brequire\s*\(\s*|\bimport\s*\(?\s*)['"]{}['"]"""
NODE_TEST = re.compile(_IMPORTS.format("node:test"))
BUN_TEST = re.compile(_IMPORTS.format("bun:test"))
#: The bound of a check file read to tell its runner, and of a failing check's own words kept (its output's end).
CHECK_BYTES = 4 * 1024 * 1024
WORDS_CHARS = 4000
#: How long one check may run (the peer's bound).
CHECK_SECONDS = 120.0


@dataclass(frozen=True)
class HiddenCheck:
    """One check of `tests/`: its name, where it is staged in the agent's folder, its role and its runner."""

    name: str
    path: PurePosixPath  #: relative to the agent's folder (and to tests/)
    gate: bool
    runner: str  #: "node", "bun" or "pytest"
    source: Path  #: the file in the family (a link's target)


@dataclass(frozen=True)
class Support:
    """A support file of `tests/`: staged for the whole pass, never graded."""

    path: PurePosixPath
    source: Path


def check_name(name: str) -> tuple[str, bool, str] | None:
    """A file name's check name, whether it is a gate, and its kind ("js" or "python"); None for support."""
    if name.endswith(".test.js") and len(name) > len(".test.js"):
        stem = name[:-len(".test.js")]
        gate = stem.endswith(".gate") and len(stem) > len(".gate")
        return (stem[:-len(".gate")] if gate else stem), gate, "js"
    if name.startswith("test_") and name.endswith(".py") and len(name) > len("test_.py"):
        stem = name[len("test_"):-len(".py")]
        gate = stem.startswith("gate_") and len(stem) > len("gate_")
        return (stem[len("gate_"):] if gate else stem), gate, "python"
    return None


def collect(tests: Path, family: Path, runner: str = "bun") -> tuple[tuple[HiddenCheck, ...], tuple[Support, ...]]:
    """The checks and support files of the `tests/` folder of a task of `family`; FamilyError, one line naming the
    file, for an invalid tree: no check file, a link that dangles or leaves the family, a link to a folder, two
    checks of one name, a check written for a runner the family's setting contradicts."""
    root = family.resolve()
    if not tests.is_dir() or tests.is_symlink():
        raise FamilyError(f"{tests}: not a folder")
    checks: list[HiddenCheck] = []
    support: list[Support] = []
    seen: dict[str, Path] = {}
    for place, folders, files in os.walk(tests, followlinks=False):
        folders[:] = sorted(name for name in folders if name not in CACHES)
        for name in sorted(files + [f for f in folders if os.path.islink(os.path.join(place, f))]):
            path = Path(place, name)
            relative = PurePosixPath(path.relative_to(tests).as_posix())
            source = _source(path, root)
            found = check_name(name)
            if found is None:
                support.append(Support(relative, source))
                continue
            check, gate, kind = found
            if check in seen:
                raise FamilyError(f"{path}: check name {check!r} is also {seen[check]}'s (each check's name is "
                                  "its file's, and names must differ)")
            seen[check] = path
            checks.append(HiddenCheck(check, relative, gate, _runner(path, source, runner) if kind == "js"
                                      else PYTEST, source))
    if not checks:
        raise FamilyError(f"{tests}: no check files (a hidden suite holds *.test.js or test_*.py files)")
    return tuple(checks), tuple(support)


def _source(path: Path, family: Path) -> Path:
    """The file staged for `path`: itself, or the file inside the family a link names."""
    if not path.is_symlink():
        if not path.is_file():
            raise FamilyError(f"{path}: not a regular file")
        return path
    target = os.readlink(path)
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise FamilyError(f"{path}: a dangling link (to {target})") from None
    if not resolved.is_relative_to(family):
        raise FamilyError(f"{path}: a link that leaves the family (to {target})")
    if not resolved.is_file():
        raise FamilyError(f"{path}: a link to a folder (to {target}); link each file instead")
    return resolved


def _runner(path: Path, source: Path, default: str) -> str:
    text = source.read_bytes()[:CHECK_BYTES].decode("utf-8", "replace")
    node, bun = NODE_TEST.search(text), BUN_TEST.search(text)
    if node and bun:
        raise FamilyError(f"{path}: imports both node:test and bun:test (a check is written for one runner)")
    return "node" if node else "bun" if bun else default


def runner_program(runner: str) -> str | None:
    """The program a runner is: on PATH, else beside this Python (`make setup` installs bun into the venv)."""
    name = "node" if runner == "node" else "bun"
    found = shutil.which(name)
    if found is None:
        beside = Path(sys.executable).parent / name
        found = str(beside) if os.access(beside, os.X_OK) else None
    return found


def argv(check: HiddenCheck, program: str) -> list[str]:
    """How `check` is run from the agent's folder."""
    if check.runner == "node":
        return [program, "--test", "--test-reporter=spec", str(check.path)]
    if check.runner == "bun":
        return [program, "test", f"./{check.path}"]  # ./: a path, not a filter of names
    # The agent's own settings and plugins stay out: no cache written, no ini of the agent's read, no conftest.py
    # above the check's folder (the one in it is the suite's: `staged_files`), not ours.
    return [program, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:palette", "-c", os.devnull,
            "--rootdir", ".", "--confcutdir", str(check.path.parent), str(check.path)]


def staged_files(checks: Iterable[HiddenCheck], support: Iterable[Support],
                 empty: Path) -> list[tuple[PurePosixPath, Path]]:
    """What is staged for a pass: the checks, the support files, and an `empty` conftest.py beside each Python check
    whose folder has none in the suite, so that none of the agent's is loaded in its place (a conftest.py of the
    agent's could make every test pass)."""
    checks, support = list(checks), list(support)
    files = [(c.path, c.source) for c in checks] + [(s.path, s.source) for s in support]
    have = {path for path, _ in files}
    for check in checks:
        conftest = check.path.parent / "conftest.py"
        if check.runner == PYTEST and conftest not in have:
            files.append((conftest, empty))
            have.add(conftest)
    return files


def missing_runner(check: HiddenCheck) -> str:
    said = {"node": "node:test, so it runs under `node --test`",
            "bun": "bun:test, or for neither runner, so it runs under `bun test`"}[check.runner]
    fix = " (`make setup` installs it from the npm registry; a family whose checks import neither runner can name " \
          "`test_runner: node` in family.yml)" if check.runner == "bun" else ""
    return f"{check.source}: written for {said}, and {check.runner} is not installed here{fix}"


#: Where `node --test`'s spec reporter sums up the failures (it has shown each once already, as it ran).
NODE_FAILURES = "✖ failing tests:"


def words(output: str) -> str:
    """A failing check's own words: its output (from node's summary of the failures, where it has one), bounded
    to its end, without terminal colours."""
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", output).strip()
    if NODE_FAILURES in text:
        text = text[text.rindex(NODE_FAILURES) + len(NODE_FAILURES):].strip()
    # A runtime's own stack frames say nothing of the check (node's `at … (node:internal/…)`): the check's own are kept.
    text = _RUNTIME_FRAME.sub("", text)
    return text if len(text) <= WORDS_CHARS else "…" + text[-WORDS_CHARS:]


_RUNTIME_FRAME = re.compile(r"^[ \t]*at [^\n]*\(?node:internal/[^\s)]*\)?[ \t]*\n", re.M)


class Staging:
    """The hidden suite staged in the agent's folder for the duration of a `with`, and the folder restored after."""

    def __init__(self, folder: Path, files: Iterable[tuple[PurePosixPath, Path]], backups: Path,
                 before: set[str] | None = None) -> None:
        """`before`: the folder's paths as the agent left it (`paths`), when taken earlier than staging."""
        self.folder, self.files, self.backups = folder, list(files), backups
        self._before: set[str] = set() if before is None else before
        self._given = before is not None
        self._moved: list[tuple[Path, Path]] = []  # (the agent's path, its backup), in the order moved
        self._made: list[Path] = []  # folders staging made
        self._staged: list[Path] = []
        #: The agent's paths that were backed up (what the agent left where a staged file goes).
        self.backed_up: list[PurePosixPath] = []

    def __enter__(self) -> Staging:
        if not self._given:
            self._before = paths(self.folder)
        try:
            for relative, source in self.files:
                self._stage(relative, source)
        except BaseException:
            self.restore()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.restore()

    def _aside(self, path: Path) -> None:
        backup = self.backups / str(len(self._moved))
        shutil.move(path, backup)  # a rename where it can be: the agent's very file, times and mode kept
        self._moved.append((path, backup))
        self.backed_up.append(PurePosixPath(path.relative_to(self.folder).as_posix()))

    def _stage(self, relative: PurePosixPath, source: Path) -> None:
        current = self.folder
        for part in relative.parts[:-1]:
            current = current / part
            try:
                mode = os.lstat(current).st_mode
            except FileNotFoundError:
                mode = None
            if mode is not None and not stat.S_ISDIR(mode):  # a file or a link where a folder goes
                self._aside(current)
                mode = None
            if mode is None:
                current.mkdir()
                self._made.append(current)
        target = self.folder / relative
        if os.path.lexists(target):
            self._aside(target)
        with source.open("rb") as read, open(target, "xb") as write:  # x: never through a link left there
            shutil.copyfileobj(read, write)
        self._staged.append(target)

    def restore(self) -> None:
        """Take every staged file and made folder away, put back what was moved aside, remove what appeared."""
        for path in reversed(self._staged):
            _remove(path)
        self._staged.clear()
        for path in reversed(self._made):  # before the backups: a folder made where a link of the agent's was
            _remove(path)
        self._made.clear()
        for path, backup in reversed(self._moved):
            _remove(path)
            shutil.move(backup, path)
        self._moved.clear()
        remove_new(self.folder, self._before)


def remove_new(folder: Path, before: set[str]) -> None:
    """Remove every path below `folder` that is not in `before` (what graders left), shortest first."""
    for relative in sorted(paths(folder) - before, key=len):
        _remove(folder / relative)


def paths(folder: Path) -> set[str]:
    """Every path below `folder`, links not followed."""
    found: set[str] = set()
    for place, folders, files in os.walk(folder, followlinks=False):
        for name in folders + files:
            found.add(os.path.relpath(os.path.join(place, name), folder))
    return found


def snapshot(folder: Path) -> dict[str, str]:
    """What each path below `folder` is, links not followed: a file's mode and the SHA-256 of its bytes, a link's
    target, a folder's mode. Two equal snapshots are the same folder, byte for byte."""
    found: dict[str, str] = {}
    for relative in paths(folder):
        path = folder / relative
        status = path.lstat()
        if stat.S_ISLNK(status.st_mode):
            found[relative] = f"link {os.readlink(path)}"
        elif stat.S_ISREG(status.st_mode):
            digest = hashlib.sha256()
            with open(path, "rb") as file:
                for block in iter(lambda: file.read(1 << 20), b""):
                    digest.update(block)
            found[relative] = f"file {status.st_mode:o} {digest.hexdigest()}"
        else:
            found[relative] = f"{stat.S_IFMT(status.st_mode):o} {status.st_mode:o}"
    return found


def changed(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """The paths two snapshots disagree on, each with how: added, removed, changed."""
    return [f"{path} {'added' if path not in before else 'removed' if path not in after else 'changed'}"
            for path in sorted(set(before) | set(after)) if before.get(path) != after.get(path)]


def _remove(path: Path) -> None:
    if os.path.islink(path) or (os.path.lexists(path) and not path.is_dir()):
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


@dataclass(frozen=True)
class Ran:
    """What running one program gave: its exit status (None when it ran out of time) and its output."""

    code: int | None
    output: str


Execute = Callable[[list[str], Path, float], Ran]
