"""Reading what an agent left (its work/ folder, its trace) or what a saved run folder holds, without trusting it.

The harness runs as the caller (often root), outside the sandbox, while the agent's processes may still be
running. So every file it reads or copies from such a folder is opened here, one path component at a time from
the folder it belongs to, each with O_NOFOLLOW: a link anywhere below that folder, a FIFO, a socket or a device
is refused rather than followed, and there is no window between a check and the open for a process to swap a
file for a link. What is opened is read no further than its kind's bound (below). A refusal is a `Refused`
whose message names the file and why, in one line, for the item's notes.

What the harness copies is bounded by the bytes it reads, not by what a file's size or blocks say (a sparse file
has many bytes and no blocks): each copy takes its bytes from a `Budget`, the item's own within the run's.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import struct
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import BinaryIO

_MiB = 1024 * 1024
#: The bounds of each kind of file read from an agent's folder or a saved run: far above what a real skill
#: writes, far below what would fill the disk or the harness's memory.
PREVIEW_BYTES = 8 * _MiB  # one slide-N.png: the reference renderer's are 20-130 KB; a full-HD photo, a few MiB
PREVIEW_SIDE = 8192  # pixels a side of a slide-N.png, a PNG (the reference renderer draws 1280 x 720)
PREVIEWS = 200  # slide previews copied per deck
PLAN_BYTES = 4 * _MiB  # plan*.md
DECK_BYTES = 256 * _MiB  # a .pptx (pictures make real decks large)
TRACE_BYTES = 32 * _MiB  # the skill's call trace: read up to here, the rest noted and left
TURNS_BYTES = 32 * _MiB  # turns.json (each message may carry pasted material)
CASE_BYTES = 16 * _MiB  # input/case.json of a saved run
COMMANDS_BYTES = 64 * _MiB  # commands.jsonl, the host's record (each command's output in it is clipped)
#: What the harness writes copying one item's files (the deck, its previews, the plan), and every item's of a run.
ITEM_COPY_BYTES = 512 * _MiB
RUN_COPY_BYTES = 4096 * _MiB
_CHUNK = 1024 * 1024
#: A PNG's signature, then its first chunk, which must be the 13 bytes of IHDR (width, height …) and their CRC.
_PNG = b"\x89PNG\r\n\x1a\n"
PNG_HEAD = len(_PNG) + 8 + 13 + 4


class Refused(Exception):
    """A file the harness will not read: `path` is where it is, `why` says what it is instead, in one line."""

    def __init__(self, path: PurePath, why: str) -> None:
        super().__init__(f"{path} {why}")
        self.path = path
        self.why = why


class Budget:
    """The bytes the harness may still write copying files an agent left: `total` in all, and no more than what
    is left of the budget it is `within` (an item's within its run's). Each copy takes what its file may hold
    before it reads, and gives back what it did not write: what is written is never given back, so a file that
    was refused after part of it was written still counts."""

    def __init__(self, total: int, name: str, within: Budget | None = None) -> None:
        self.total, self.name, self.within = total, name, within
        self.written = 0  # bytes taken and not given back
        self._lock = threading.Lock()  # an item's copies are one at a time; a run's items may be held in threads

    @property
    def left(self) -> int:
        own = self.total - self.written
        return own if self.within is None else min(own, self.within.left)

    def take(self, wanted: int) -> int:
        """Up to `wanted` bytes of what is left, taken here and in every budget this one is within."""
        with self._lock:
            granted = max(0, min(wanted, self.total - self.written))
            if self.within is not None:
                granted = self.within.take(granted)
            self.written += granted
            return granted

    def give_back(self, unused: int) -> None:
        with self._lock:
            self.written -= unused
            if self.within is not None:
                self.within.give_back(unused)

    def why(self, needed: int) -> str:
        """Why `needed` bytes cannot be written: the innermost budget that has not that much left."""
        if self.within is not None and self.total - self.written >= needed:
            return self.within.why(needed)
        return f"would take {self.name} past {_size(self.total)}"


def _size(count: int) -> str:
    return f"{count // _MiB:,} MiB" if count >= _MiB and count % _MiB == 0 else f"{count:,} bytes"


def preview_problem(head: bytes) -> str | None:
    """Why a file whose first PNG_HEAD bytes are `head` is not a slide's preview, in words that follow its name
    ("is not a PNG image"); None when it is a PNG of a slide's size. A preview a site shows and a browser decodes
    must be a picture, and no larger a picture than a slide's."""
    if not head.startswith(_PNG):
        return "is not a PNG image"
    header = head[len(_PNG):PNG_HEAD]
    if len(header) < 25 or header[:8] != b"\0\0\0\x0dIHDR" or \
            zlib.crc32(header[4:21]) != int.from_bytes(header[21:25], "big"):
        return "is not a PNG image (its header is not one)"
    width, height = struct.unpack(">II", header[8:16])
    if not (width and height):
        return "is not a PNG image (its header says it has no pixels)"
    if width > PREVIEW_SIDE or height > PREVIEW_SIDE:
        return f"is a picture of {width} x {height} pixels, larger than a slide's preview (at most {PREVIEW_SIDE} a " \
               "side)"
    return None


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
        raise Refused(_relative(root, path), f"is larger than {_size(limit)}")
    return data


def read_head(root: Path, path: PurePath, limit: int) -> tuple[bytes, bool]:
    """The file's first `limit` bytes, and whether there was more: for a file read up to its bound, not refused."""
    with open_file(root, path) as handle:
        return _bounded(handle, limit)


def read_text(root: Path, path: PurePath, limit: int) -> str:
    """`read_bytes` as UTF-8 text (undecodable bytes replaced)."""
    return read_bytes(root, path, limit).decode("utf-8", "replace")


def copy(root: Path, path: PurePath, target: Path, limit: int, budget: Budget | None = None,
         check: Callable[[bytes], str | None] | None = None) -> int:
    """Copy `path` (inside `root`) to `target`, keeping its times; Refused — and nothing left at `target` — when it
    is not a regular file inside `root`, holds more than `limit` bytes (it may grow while it is copied), more than
    is left of `budget`, or `check` of its first PNG_HEAD bytes says why not. Returns the bytes written."""
    with open_file(root, path) as source:
        status = os.fstat(source.fileno())
        if status.st_size > limit:
            raise Refused(_relative(root, path), f"is larger than {_size(limit)}")
        if check is not None:
            problem = check(source.read(PNG_HEAD))
            if problem:
                raise Refused(_relative(root, path), problem)
            source.seek(0)
        # Taken before a byte is read: what the file may hold, as far as the budget allows.
        granted = limit if budget is None else budget.take(limit)
        copied, over = 0, b""
        try:
            if granted >= status.st_size:
                with open(target, "xb") as out:  # never through a file already there: it may be a link
                    while chunk := source.read(min(_CHUNK, granted + 1 - copied)):
                        if copied + len(chunk) > granted:  # it grew while it was copied: an agent's process
                            over = chunk
                            break
                        copied += len(chunk)
                        out.write(chunk)
                if over:
                    target.unlink()
        finally:
            if budget is not None:
                budget.give_back(granted - copied)  # what was not written; what was, stays spent
        if over or granted < status.st_size:  # past its own bound, or past what was left of the budget
            if budget is None or granted == limit:
                raise Refused(_relative(root, path), f"is larger than {_size(limit)}")
            raise Refused(_relative(root, path), budget.why(max(status.st_size, copied + len(over))))
    os.utime(target, ns=(status.st_atime_ns, status.st_mtime_ns))
    return copied


def link_or_copy(root: Path, path: PurePath, target: Path, limit: int,
                 check: Callable[[bytes], str | None] | None = None) -> None:
    """`target` as a hard link to the file `path` (inside `root`) — the very file checked, through its open
    descriptor — or a bounded copy of it where the disk refuses a link."""
    with open_file(root, path) as source:
        if os.fstat(source.fileno()).st_size > limit:
            raise Refused(_relative(root, path), f"is larger than {_size(limit)}")
        problem = check(source.read(PNG_HEAD)) if check is not None else None
        if problem:
            raise Refused(_relative(root, path), problem)
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
    copy(root, path, target, limit, check=check)


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
