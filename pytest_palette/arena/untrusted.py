"""Reading what an agent left (its work/ folder, its trace) or what a saved run folder holds, without trusting it.

The harness runs as the caller (often root), outside the sandbox, while the agent's processes may still be
running. So every file it reads or copies from such a folder is opened here, one path component at a time from
the folder it belongs to, each with O_NOFOLLOW: a link anywhere below that folder, a FIFO, a socket or a device
is refused rather than followed, and there is no window between a check and the open for a process to swap a
file for a link. What is opened is read no further than its kind's bound (below). A refusal is a `Refused`
whose message names the file and why, in one line, for the item's notes.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import BinaryIO

_MiB = 1024 * 1024
#: The bounds of each kind of file read from an agent's folder or a saved run: far above what a real skill
#: writes, far below what would fill the disk or the harness's memory.
PREVIEW_BYTES = 16 * _MiB  # one slide-N.png
PREVIEWS = 200  # slide previews copied per deck
PLAN_BYTES = 4 * _MiB  # plan*.md
DECK_BYTES = 256 * _MiB  # a .pptx (pictures make real decks large)
TRACE_BYTES = 32 * _MiB  # the skill's call trace: read up to here, the rest noted and left
TURNS_BYTES = 32 * _MiB  # turns.json (each message may carry pasted material)
CASE_BYTES = 16 * _MiB  # input/case.json of a saved run
COMMANDS_BYTES = 64 * _MiB  # commands.jsonl, the host's record (each command's output in it is clipped)
_CHUNK = 1024 * 1024


class Refused(Exception):
    """A file the harness will not read: `path` is where it is, `why` says what it is instead, in one line."""

    def __init__(self, path: PurePath, why: str) -> None:
        super().__init__(f"{path} {why}")
        self.path = path
        self.why = why


@dataclass(frozen=True)
class Entry:
    """A regular file a listing found (as it was when listed: `open_file` checks again)."""

    path: Path
    size: int
    mtime: float


@dataclass
class Listing:
    """The regular files a listing found, and what it refused among the names it was asked for."""

    files: list[Entry] = field(default_factory=list)
    refused: list[Refused] = field(default_factory=list)


def _relative(root: Path, path: PurePath) -> PurePath:
    """`path` (absolute, or relative to `root`) as a path below `root`; Refused when it is not one."""
    try:
        relative = path.relative_to(root) if path.is_absolute() else path
    except ValueError:
        raise Refused(path, f"is not inside {root}") from None
    if not relative.parts or any(part in ("..", ".") for part in relative.parts) or relative.is_absolute():
        raise Refused(path, f"is not a path inside {root}")
    return relative


def _link_target(name: str, folder: int) -> str:
    try:
        target = os.readlink(name, dir_fd=folder)
    except OSError:
        return ""
    shown = target.encode("unicode_escape", "replace").decode("ascii", "replace")  # one line, whatever it holds
    return shown if len(shown) <= 120 else shown[:117] + "..."


def _kind(mode: int) -> str:
    return next((kind for test, kind in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"),
                                         (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"),
                                         (stat.S_ISBLK, "a device")) if test(mode)), "not a regular file")


def _descend(root: Path, relative: PurePath) -> int:
    """A descriptor of `root / relative`, reached without following any link below `root`."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for depth, part in enumerate(relative.parts):
            last = depth == len(relative.parts) - 1
            # O_NONBLOCK: opening a FIFO for reading must not wait for a writer; it is refused just after.
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY | \
                (os.O_NONBLOCK if last else os.O_DIRECTORY)
            try:
                step = os.open(part, flags, dir_fd=fd)
            except OSError as error:
                shown = PurePath(*relative.parts[:depth + 1])
                if error.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    target = _link_target(part, fd)
                    if target:
                        raise Refused(shown, f"is a link (to {target})") from None
                    raise Refused(shown, "is not a folder") from None
                if error.errno == errno.ENXIO:
                    raise Refused(shown, "is a socket") from None
                raise
            os.close(fd)
            fd = step
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise Refused(relative, f"is {_kind(mode)}, not a regular file")
        return fd
    except BaseException:
        os.close(fd)
        raise


@contextlib.contextmanager
def open_file(root: Path, path: PurePath) -> Iterator[BinaryIO]:
    """`path` (inside `root`) opened for reading, when it is a regular file reached through no link below `root`;
    Refused otherwise, OSError when it is not there."""
    fd = _descend(root, _relative(root, path))
    with os.fdopen(fd, "rb") as handle:
        yield handle


def _bounded(handle: BinaryIO, limit: int) -> tuple[bytes, bool]:
    data = handle.read(limit + 1)
    return data[:limit], len(data) > limit


def read_bytes(root: Path, path: PurePath, limit: int) -> bytes:
    """The whole file; Refused when it is larger than `limit` bytes (or not a regular file inside `root`)."""
    with open_file(root, path) as handle:
        data, over = _bounded(handle, limit)
    if over:
        raise Refused(_relative(root, path), f"is larger than {limit // _MiB} MiB")
    return data


def read_head(root: Path, path: PurePath, limit: int) -> tuple[bytes, bool]:
    """The file's first `limit` bytes, and whether there was more: for a file read up to its bound, not refused."""
    with open_file(root, path) as handle:
        return _bounded(handle, limit)


def read_text(root: Path, path: PurePath, limit: int) -> str:
    """`read_bytes` as UTF-8 text (undecodable bytes replaced)."""
    return read_bytes(root, path, limit).decode("utf-8", "replace")


def copy(root: Path, path: PurePath, target: Path, limit: int) -> None:
    """Copy `path` (inside `root`) to `target`, keeping its times; Refused — and nothing left at `target` — when it
    is not a regular file inside `root` or holds more than `limit` bytes (it may grow while it is copied)."""
    with open_file(root, path) as source:
        status = os.fstat(source.fileno())
        if status.st_size > limit:
            raise Refused(_relative(root, path), f"is larger than {limit // _MiB} MiB")
        with open(target, "xb") as out:  # never through a file already there: it may be a link
            copied = 0
            while chunk := source.read(min(_CHUNK, limit + 1 - copied)):
                copied += len(chunk)
                if copied > limit:
                    break
                out.write(chunk)
        if copied > limit:
            target.unlink()
            raise Refused(_relative(root, path), f"is larger than {limit // _MiB} MiB")
    os.utime(target, ns=(status.st_atime_ns, status.st_mtime_ns))


def link_or_copy(root: Path, path: PurePath, target: Path, limit: int) -> None:
    """`target` as a hard link to the file `path` (inside `root`) — the very file checked, through its open
    descriptor — or a bounded copy of it where the disk refuses a link."""
    with open_file(root, path) as source:
        if os.fstat(source.fileno()).st_size > limit:
            raise Refused(_relative(root, path), f"is larger than {limit // _MiB} MiB")
        # linkat(AT_SYMLINK_FOLLOW) of /proc/self/fd/N links the open file itself, not whatever is at `path` now.
        # Python calls plain link() — which follows nothing — unless a dir_fd is given: hence the target's folder.
        folder = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.link(f"/proc/self/fd/{source.fileno()}", target.name, dst_dir_fd=folder, follow_symlinks=True)
            return
        except OSError:
            pass
        finally:
            os.close(folder)
    copy(root, path, target, limit)


def is_regular(path: Path) -> bool:
    """Whether `path` itself is a regular file (a link to one is not): for a question of presence only."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def listing(root: Path, folder: PurePath, wanted: Callable[[str], bool], *, deep: bool = False) -> Listing:
    """The regular files whose names are `wanted` in `folder` (inside `root`, or `root` itself when "."), and
    in every folder under it when `deep`; a wanted name that is anything else (a link, a FIFO, a folder …) is
    refused. Links to folders are never entered."""
    found = Listing()
    try:
        top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC) if folder == PurePath(".") else \
            _descend_folder(root, _relative(root, folder))
    except (OSError, Refused):
        return found
    try:
        for place, folders, files, fd in os.fwalk(".", dir_fd=top, follow_symlinks=False):
            if not deep:
                folders.clear()  # fwalk lists this folder before it descends: nothing below is read
            for name in (*files, *folders):
                if not wanted(name):
                    continue
                where = Path(root, folder, place, name)
                try:
                    status = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    continue  # gone since it was listed
                if stat.S_ISREG(status.st_mode):
                    found.files.append(Entry(Path(os.path.normpath(where)), status.st_size, status.st_mtime))
                elif stat.S_ISLNK(status.st_mode):
                    found.refused.append(Refused(_shown(root, where), f"is a link (to {_link_target(name, fd)})"))
                else:
                    found.refused.append(Refused(_shown(root, where), f"is {_kind(status.st_mode)}, "
                                                                      "not a regular file"))
    finally:
        os.close(top)
    found.files.sort(key=lambda entry: entry.path)  # the order a walk meets them in is the disk's, not stable
    found.refused.sort(key=lambda refused: str(refused.path))
    return found


def _shown(root: Path, where: Path) -> PurePath:
    return PurePath(os.path.normpath(where)).relative_to(root)


def _descend_folder(root: Path, relative: PurePath) -> int:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in relative.parts:
            step = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = step
        return fd
    except BaseException:
        os.close(fd)
        raise


def folder_identity(root: Path, relative: PurePath) -> tuple[int, int]:
    """The device and inode of the folder `relative` below `root`, reached through no link: to tell whether a folder
    named by an untrusted party is the one a process really is in. OSError when it is not there."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC) if not relative.parts else \
        _descend_folder(root, relative)
    try:
        status = os.fstat(fd)
        return status.st_dev, status.st_ino
    finally:
        os.close(fd)
