"""The results ledger: one JSON line per finished item, at the top of its run folder.

    runs/<run-id>/results.jsonl                    the run's ledger
    runs/<run-id>/results.shard-<i>-of-<n>.jsonl   a shard's, so shards copied into one folder never collide

Writing: `append()` writes a record as one line with a single `os.write` on an `O_APPEND` descriptor, so
xdist workers and parallel shards never interleave or tear each other's lines.

Reading: `load()` finds the runs at or under a path, reads their ledgers through `Record` (the one schema,
so every reader validates alike), and keeps the latest record of each item (`latest()`, the one place that
rule lives). A run's ledgers are only those at its top: anything named like a ledger deeper down — in an
item's workspace, where an agent may write what it likes — is named in a warning and never read. A line that
is not a record is skipped with a warning naming the file and line; a torn last line (a `kill -9` or a full
disk mid-write) is ignored with a warning.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any

from .record import Record, RecordError, from_json, from_json_lines
from .redaction import Secrets

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

LEDGER_NAME = "results.jsonl"
_LEDGER = re.compile(r"^results(\.shard-[1-9][0-9]*-of-[1-9][0-9]*)?\.jsonl$")
#: Individual warnings per file before the rest are summed up in one line.
WARNINGS_PER_FILE = 20
# Read a megabyte at a time: memory stays flat whatever the ledger's size.
_BLOCK = 1 << 20

Key = tuple[str, str, str, int]


class LedgerError(OSError):
    """A ledger that cannot be written."""


class LedgerWarning(UserWarning):
    """Something read past: a line that is not a record, or a file that is not a run's ledger."""


def ledger_name(shard: tuple[int, int] | None = None) -> str:
    """The ledger's file name in its run folder: one per shard, so shards can share a folder."""
    return LEDGER_NAME if shard is None else f"results.shard-{shard[0]}-of-{shard[1]}.jsonl"


def open_run(path: str | os.PathLike[str]) -> None:
    """Make the (empty) ledger at the run's top before any agent works in the run: it marks the folder as a
    run, whose inside is never searched for ledgers."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    os.close(os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))


def append(path: str | os.PathLike[str], record: Record, secrets: Secrets | None = None) -> bytes:
    """Append the record to the ledger at `path` as one whole line (RecordError if it is not valid), with every
    secret in it replaced (`secrets`: the session's; the environment's when not given); return the line (without
    its newline)."""
    encoded = record.to_json()
    line = (secrets if secrets is not None else Secrets.of(os.environ)).scrub_json(encoded)
    if line is not encoded:
        from_json(line)  # still a record (a name scrubbed is not one: RecordError)
    line += b"\n"
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)  # read: the torn-line check
    try:
        if fcntl is not None:
            # Only so the torn-line check below sees no half-written line of a racing writer; the write
            # itself is atomic without it. The kernel drops the lock if this process is killed.
            fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        # A torn line left by a killed writer would swallow this record: start a fresh line.
        torn = bool(size) and os.pread(fd, 1, size - 1) != b"\n"
        data = b"\n" + line if torn else line
        written = os.write(fd, data)
    finally:
        os.close(fd)  # closing releases the lock
    if written != len(data):
        raise LedgerError(f"{target}: short write ({written} of {len(data)} bytes; is the disk full?)")
    return line[:-1]


# ---------------------------------------------------------------------------------------------- finding


def is_ledger(path: Path) -> bool:
    return _LEDGER.match(path.name) is not None


def run_ledgers(run: Path) -> list[Path]:
    """The ledgers at the top of one run folder, in a stable order."""
    try:
        return sorted(p for p in run.iterdir() if is_ledger(p) and p.is_file())
    except OSError:
        return []


@dataclass
class Found:
    """The ledgers under a path, and the files named like one that were left alone."""

    ledgers: list[Path] = field(default_factory=list)
    ignored: list[tuple[Path, Path]] = field(default_factory=list)  # (the file, the run it lies in)


def find(path: str | os.PathLike[str]) -> Found:
    """Every run at or under `path` and its ledgers: a folder with a ledger at its top is a run, and nothing
    below it is read; a folder without one is a folder of runs (or shards) and is searched. A run's ledger
    exists from before its first conversation starts (`open_run`), so no agent can write one in a run first."""
    root = Path(path)
    found = Found()
    if root.is_file():
        found.ledgers.append(root)
        return found
    pending = [root]
    while pending:
        folder = pending.pop()
        ledgers = run_ledgers(folder)
        if ledgers:
            found.ledgers += ledgers
            found.ignored += [(stray, folder) for stray in _strays(folder)]
            continue
        try:
            children = sorted((p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()
                               and not p.name.startswith(".")), reverse=True)
        except OSError:
            continue
        pending += children  # reversed onto a stack: folders are visited in name order
    found.ledgers.sort()
    return found


def nothing_at(path: Path) -> str | None:
    """Why a path given to a command holds no run to read, in one line naming it; None when a ledger is at or under
    it."""
    if not path.exists():
        return f"{path}: no such file or folder"
    if not find(path).ledgers:
        return f"{path}: no {LEDGER_NAME} at or under it — nothing was recorded there"
    return None


def _strays(run: Path) -> Iterator[Path]:
    """Files named like a ledger anywhere below a run's top (its own ledgers excluded)."""
    for folder, dirs, files in os.walk(run):
        dirs.sort()
        if folder == str(run):
            continue
        for name in sorted(files):
            if _LEDGER.match(name):
                yield Path(folder) / name


# ---------------------------------------------------------------------------------------------- reading


@dataclass
class Reading:
    """The latest record of each item, and what reading found on the way."""

    latest: dict[Key, Record] = field(default_factory=dict)
    records: int = 0  # records read, superseded ones included
    skipped: int = 0  # lines that were not records (each warned about)
    files: list[str] = field(default_factory=list)

    @property
    def superseded(self) -> int:
        """Records a later record of the same item replaced (a resumed run re-runs an errored item)."""
        return self.records - len(self.latest)


def latest(records: Iterable[Record], into: Reading | None = None) -> Reading:
    """The latest record of each (run_id, case, host, run_index): the one that ended last, and of two that
    ended at once, the one read last. Resume appends a re-run after the errored original, so the re-run wins;
    ordering by end time keeps that true across the ledgers of shards."""
    reading = into or Reading()
    newest = reading.latest
    records = list(records)
    keys = list(map(_KEY, records))
    reading.records += len(records)
    if newest.keys().isdisjoint(keys) and len(set(keys)) == len(keys):
        newest.update(zip(keys, records, strict=True))  # no item seen twice: nothing to compare (the usual case)
        return reading
    for key, record in zip(keys, records, strict=True):
        old = newest.get(key)
        if old is None or record.usage.ended_at >= old.usage.ended_at:
            newest[key] = record
    return reading


#: Which item a record is a result of: a later record of the same item supersedes it. (One C-level call.)
_KEY = attrgetter("run_id", "case", "host", "run_index")


def load(path: str | os.PathLike[str], *more: str | os.PathLike[str]) -> Reading:
    """Every record of every run at or under `path` (and each of `more`: a ledger found twice is read once),
    warning about each line skipped and file ignored."""
    found = find(path)
    for other in map(find, more):
        seen = {os.path.realpath(ledger) for ledger in found.ledgers}
        found.ledgers += [ledger for ledger in other.ledgers if os.path.realpath(ledger) not in seen]
        found.ignored += [stray for stray in other.ignored if stray not in found.ignored]
    for stray, run in found.ignored:
        warnings.warn(f"{stray}: ignored — not a ledger of the run {run}, only a file named like one inside it",
                      LedgerWarning, stacklevel=2)
    reading = Reading(files=[str(p) for p in found.ledgers])
    for ledger in found.ledgers:
        _note_old_index(ledger)
        problems: list[tuple[int, str]] = []
        latest(read(ledger, problems), into=reading)
        reading.skipped += sum(1 for _, message in problems if not message.startswith("last line has no newline"))
        _warn(ledger, problems)
    return reading


def _note_old_index(ledger: Path) -> None:
    """Versions before schema 2 kept an index beside the ledger. Whatever state it is in, it is not read."""
    old = [p.name for p in (ledger.with_name(ledger.name + ".index"), ledger.with_name(ledger.name + ".spans"))
           if p.exists()]
    if old:
        warnings.warn(f"{ledger}: {' and '.join(old)} beside it were written by an earlier version and are not read "
                      "(the ledger is read itself; delete them to stop this warning)", LedgerWarning, stacklevel=3)


def read(ledger: Path, problems: list[tuple[int, str]] | None = None) -> Iterator[Record]:
    """The records of one ledger file, in file order; each skipped line goes to `problems` as (line, why).

    Equal parts of many records (terms, judged facts, failures, tags) are decoded once and shared: a million
    records stay small in memory.
    """
    problems = [] if problems is None else problems
    shared: dict[int, dict[bytes, Any]] = {}
    # Line numbers are needed only for a block with a bad line: count the newlines before it then, not always.
    offset = counted_to = 0
    lines_before = 1
    for block, complete in _blocks(ledger):
        try:
            # One C-level pass over a block of whole lines; a block with a bad line is read line by line.
            if not complete:
                raise RecordError("no newline")
            records = from_json_lines(block, shared)
        except RecordError:
            lines_before += _newlines(ledger, counted_to, offset)
            counted_to = offset + len(block)
            records = list(_lines(block, complete, lines_before, problems))
            lines_before += block.count(b"\n")
        yield from records
        offset += len(block)


def _newlines(ledger: Path, start: int, end: int) -> int:
    """How many lines end in bytes [start, end) of the file."""
    count = 0
    with open(ledger, "rb") as handle:
        handle.seek(start)
        while start < end:
            chunk = handle.read(min(_BLOCK, end - start))
            if not chunk:
                break
            count += chunk.count(b"\n")
            start += len(chunk)
    return count


def _blocks(ledger: Path) -> Iterator[tuple[bytes, bool]]:
    """The file as blocks of whole lines (complete=True), then any last line without a newline (False)."""
    with open(ledger, "rb") as handle:
        carry = b""
        while True:
            chunk = handle.read(_BLOCK)
            if not chunk:
                break
            chunk = carry + chunk
            cut = chunk.rfind(b"\n") + 1
            carry = chunk[cut:]
            if cut:
                yield chunk[:cut], True
        if carry:
            yield carry, False


def _lines(block: bytes, complete: bool, first: int, problems: list[tuple[int, str]]) -> Iterator[Record]:
    for number, line in enumerate(block.split(b"\n")[:-1] if complete else [block], first):
        if not line.strip():
            continue  # harmless: a racing writer's torn-line guard leaves them
        try:
            record = from_json(line)
        except RecordError as error:
            salvaged = _salvage(line)
            if salvaged is not None:
                problems.append((number, "a torn fragment was glued to the start of this line: kept the whole "
                                         "record after it"))
                yield salvaged
            elif str(error).startswith("not JSON"):
                problems.append((number, "torn last line (no newline, not JSON): ignored — a writer was killed "
                                         "mid-record" if not complete else "not JSON (a torn write?): skipped"))
            else:
                problems.append((number, f"invalid record: {error}"))
            continue
        if not complete:
            problems.append((number, "last line has no newline (kept: it is a whole record)"))
        yield record


def _salvage(line: bytes) -> Record | None:
    """A whole record after a torn fragment on the same line (a crash, then an older writer's append)."""
    start = line.rfind(b'{"schema":')
    if start <= 0:
        return None
    try:
        return from_json(line[start:])
    except RecordError:
        return None


def _warn(ledger: Path, problems: list[tuple[int, str]]) -> None:
    for number, message in problems[:WARNINGS_PER_FILE]:
        warnings.warn(f"{ledger}:{number}: {message}", LedgerWarning, stacklevel=3)
    if len(problems) > WARNINGS_PER_FILE:
        warnings.warn(f"{ledger}: {len(problems) - WARNINGS_PER_FILE} more bad line(s) skipped", LedgerWarning,
                      stacklevel=3)
