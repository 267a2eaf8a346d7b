"""The ledger's index: what `append` already knew about each record, kept beside the ledger so that
`report` need not parse the ledger again.

    results.jsonl          the ledger, and the truth: one JSON record a line
    results.jsonl.index    a fixed-size row per indexed line: where the line is, a running CRC-32 of the
                           ledger up to its end, the record's numbers, and the ids of its four text spans
    results.jsonl.spans    each distinct span once, as `<id in hex> <the span's JSON text>` lines

`append` writes its line first, then the new spans, then the row, all under the ledger's lock: whatever kills
it, the record is safe, and a line with no row is simply read from the ledger. A reader trusts the rows only if
the ledger's bytes up to the last row still have that row's CRC (one zlib pass: ~30 ms per 100,000 records),
the rows' own running CRC holds, and every span a row names is there and hashes to its id. Otherwise it says
so and reads the ledger itself. Lines between or after the rows (a writer killed before its row, a line
appended by hand) are read from the ledger in place, so the table is exactly what parsing the whole ledger
would give.
"""

from __future__ import annotations

import hashlib
import os
import struct
import sys
import zlib
from array import array
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from operator import add, le
from pathlib import Path

from . import ledger_grammar as grammar

INDEX_SUFFIX = ".index"
SPANS_SUFFIX = ".spans"
HEADER = b"palette ledger index 1\n"
# offset, length, ledger_crc, index_crc, run_index | seconds, started, ended, cost | tokens in, out,
# ident, shape, terms, tail span ids | check: CRC-32 of the row's other bytes, under a constant tag.
_ROW = struct.Struct("<qqqqqddddqqqqqqq")
ROW_SIZE = _ROW.size
SLOTS = ROW_SIZE // 8
OFFSET, LENGTH, LEDGER_CRC, INDEX_CRC, RUN_INDEX, SECONDS, STARTED, ENDED, COST, TOKENS_IN, TOKENS_OUT, IDENT, \
    SHAPE, TERMS, TAIL, CHECK = range(SLOTS)
_TAG = 0x7061_6C65 << 32  # "pale": the check slot's high half
_CHUNK = 8 << 20


def paths(ledger: Path) -> tuple[Path, Path]:
    """The index and spans files of a ledger."""
    return ledger.with_name(ledger.name + INDEX_SUFFIX), ledger.with_name(ledger.name + SPANS_SUFFIX)


def span_id(span: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(span, digest_size=8).digest(), "little", signed=True)


def _crc(fd: int, start: int, end: int, crc: int) -> int:
    """The running CRC-32 `crc` continued over bytes [start, end) of the open file."""
    while start < end:
        chunk = os.pread(fd, min(_CHUNK, end - start), start)
        if not chunk:
            raise OSError(f"the file ended at byte {start}, before {end}")
        crc = zlib.crc32(chunk, crc)
        start += len(chunk)
    return crc


# ---------------------------------------------------------------------------------------------- writing


@dataclass
class _Known:
    """The span ids this process has seen in one spans file, and how far it has read that file."""

    inode: int = -1
    read_to: int = 0
    ids: set[int] = field(default_factory=set)


# One per spans file, per process: new spans written by other processes are read incrementally, so each
# append reads only what was added since. Purely a cache: losing it costs one re-read of the file.
_known: dict[str, _Known] = {}


def note(ledger: Path, ledger_fd: int, start: int, line: bytes) -> None:
    """Index the line just appended at byte `start` of the ledger. The caller holds the ledger's lock.

    Writes nothing when the line is not one the grammar reads (readers then parse it) or when the index no
    longer fits the ledger (truncated, replaced, or an index row torn by a full disk): readers notice, say so,
    and read the ledger itself.
    """
    match = grammar.LINE.fullmatch(line, 0, len(line) - 1)  # without its newline
    if match is None:
        return
    index_path, spans_path = paths(ledger)
    fd = os.open(index_path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            os.write(fd, HEADER.ljust(ROW_SIZE, b"\0"))  # the header fills row 0
            size = ROW_SIZE
        elif size % ROW_SIZE or os.pread(fd, len(HEADER), 0) != HEADER:
            return
        last = os.pread(fd, ROW_SIZE, size - ROW_SIZE)
        if size == ROW_SIZE:  # the header alone
            prev_end = ledger_crc = 0
            index_crc = zlib.crc32(last)
        else:
            values = _ROW.unpack(last)
            if values[CHECK] != _check(last):
                return
            prev_end, ledger_crc = values[OFFSET] + values[LENGTH], values[LEDGER_CRC]
            index_crc = zlib.crc32(last, values[INDEX_CRC])
        if prev_end > start:
            return  # the index covers bytes the ledger no longer has as they were
        ledger_crc = zlib.crc32(line, _crc(ledger_fd, prev_end, start, ledger_crc))
        groups = match.groups(b"")
        spans = (groups[grammar.IDENT], groups[grammar.SHAPE], groups[grammar.TERMS], groups[grammar.TAIL])
        ids = [span_id(span) for span in spans]
        _write_new_spans(spans_path, spans, ids)
        numbers = [column[0] for column in grammar.numbers([(g,) for g in groups])]
        row = _ROW.pack(start, len(line), ledger_crc, index_crc, *numbers, *ids, 0)
        os.write(fd, row[:-8] + struct.pack("<q", _check(row)))
    finally:
        os.close(fd)


def _check(row: bytes | memoryview) -> int:
    """A row's check slot: the CRC-32 of its other bytes under a constant tag (a torn row cannot have it)."""
    return _TAG | zlib.crc32(memoryview(row)[:ROW_SIZE - 8])


def _write_new_spans(path: Path, spans: tuple[bytes, ...], ids: list[int]) -> None:
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        known = _known.setdefault(str(path), _Known())
        stat = os.fstat(fd)
        if stat.st_ino != known.inode or stat.st_size < known.read_to:
            known.inode, known.read_to, known.ids = stat.st_ino, 0, set()
        if stat.st_size > known.read_to:  # what other processes added since
            added = os.pread(fd, stat.st_size - known.read_to, known.read_to)
            complete = added[:added.rfind(b"\n") + 1]
            pairs = map(span_id_and_text, complete.splitlines())
            known.ids.update(pair[0] for pair in pairs if pair is not None)
            known.read_to += len(complete)
        new = [(i, s) for i, s in dict(zip(ids, spans, strict=True)).items() if i not in known.ids]
        if not new:
            return
        text = b"".join(b"%016x %s\n" % (i & 0xFFFF_FFFF_FFFF_FFFF, s) for i, s in new)
        if stat.st_size and os.pread(fd, 1, stat.st_size - 1) != b"\n":
            text = b"\n" + text  # a torn line from a killed writer: start afresh, as the ledger does
        os.write(fd, text)
        known.ids.update(i for i, _ in new)
    finally:
        os.close(fd)


def span_id_and_text(line: bytes) -> tuple[int, bytes] | None:
    """(id, span) from a spans line, or None for a line that is torn or does not hash to its id."""
    if len(line) < 18 or line[16:17] != b" ":
        return None
    try:
        number = int(line[:16], 16)
    except ValueError:
        return None
    span = line[17:]
    ident = number - (1 << 64) if number >= 1 << 63 else number
    return (ident, span) if span_id(span) == ident else None


# ---------------------------------------------------------------------------------------------- reading


@dataclass
class Indexed:
    """What an index vouches for in one ledger: row columns for the lines it covers, and the byte ranges it
    does not cover (read those from the ledger), in file order as ("rows", i, j) and ("gap", start, end)."""

    slots: list[array[int]]
    spans: dict[int, bytes]
    pieces: list[tuple[str, int, int]]

    def rows(self, i: int, j: int) -> tuple[list[bytes], list[bytes], list[bytes], list[bytes], grammar.Numbers]:
        """Rows i..j as the grammar reader takes them: four raw span columns and the numbers."""
        s = self.slots
        get = self.spans.__getitem__

        def floats(slot: int) -> array[float]:
            return array("d", s[slot][i:j].tobytes())

        numbers: grammar.Numbers = (s[RUN_INDEX][i:j], floats(SECONDS), floats(STARTED), floats(ENDED), floats(COST),
                                    s[TOKENS_IN][i:j], s[TOKENS_OUT][i:j])
        return ([*map(get, s[IDENT][i:j])], [*map(get, s[SHAPE][i:j])], [*map(get, s[TERMS][i:j])],
                [*map(get, s[TAIL][i:j])], numbers)


class Stale(Exception):
    """An index that does not match its ledger; the message says how."""


def read(ledger: Path, size: int) -> Indexed | None:
    """The index of a ledger whose first `size` bytes are read, or None when it has none.

    Raises Stale when there is an index but it cannot be trusted for this ledger.
    """
    index_path, spans_path = paths(ledger)
    try:
        data = index_path.read_bytes()
    except FileNotFoundError:
        return None
    if not data.startswith(HEADER):
        raise Stale(f"{index_path.name} is not an index this version reads")
    whole = len(data) - len(data) % ROW_SIZE  # a row still being written is not there yet
    view = memoryview(data)
    cells = view[ROW_SIZE:whole].cast("q")
    slots = [array("q", cells[k::SLOTS].tobytes()) for k in range(SLOTS)]  # a column per slot, C-level copies
    if sys.byteorder != "little":  # pragma: no cover - the rows are little-endian on disk
        for column in slots:
            column.byteswap()
    ends = array("q", map(add, slots[OFFSET], slots[LENGTH]))
    keep = bisect_right(ends, size)  # rows written after the ledger was measured are left for next time
    if keep < len(ends):
        slots, ends = [column[:keep] for column in slots], ends[:keep]
    if not keep:
        return None  # nothing indexed yet that this read can use
    last = ROW_SIZE * keep  # the last kept row starts here in `data`
    if zlib.crc32(view[:last]) != slots[INDEX_CRC][-1] or _check(view[last:last + ROW_SIZE]) != slots[CHECK][-1]:
        raise Stale(f"{index_path.name} is damaged")
    if not all(map(le, ends[:-1], slots[OFFSET][1:])):
        raise Stale(f"{index_path.name} has rows out of order")
    del cells, view, data  # the rows are in `slots` now: free the file's copy before the ledger's pass
    if _ledger_crc(ledger, ends[-1]) != slots[LEDGER_CRC][-1]:
        raise Stale(f"{ledger.name} has changed since it was indexed (edited by hand?)")
    spans = _read_spans(spans_path)
    for slot in (IDENT, SHAPE, TERMS, TAIL):
        if not spans.keys() >= set(slots[slot]):
            raise Stale(f"{spans_path.name} lacks spans the index names")
    return Indexed(slots, spans, list(_pieces(slots[OFFSET], ends, size)))


def _ledger_crc(ledger: Path, end: int) -> int:
    """The CRC-32 of the ledger's first `end` bytes, read a chunk at a time (not mapped: mapped pages of a
    big ledger would count in the report's resident memory)."""
    with open(ledger, "rb") as handle:
        return _crc(handle.fileno(), 0, end, 0)


def _read_spans(path: Path) -> dict[int, bytes]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    found = (span_id_and_text(line) for line in data.splitlines())
    return dict(pair for pair in found if pair is not None)


def _pieces(offsets: array[int], ends: array[int], size: int) -> Iterator[tuple[str, int, int]]:
    """Runs of contiguous rows, and the ledger byte ranges between and after them."""
    if offsets[0] > 0:
        yield "gap", 0, offsets[0]
    # Where a row does not start at the end of the one before, a gap: rare, so found by a C-level compare.
    breaks = [k + 1 for k, same in enumerate(map(int.__eq__, ends[:-1], offsets[1:])) if not same] \
        if ends[:-1] != offsets[1:] else []
    first = 0
    for k in breaks:
        yield "rows", first, k
        yield "gap", ends[k - 1], offsets[k]
        first = k
    yield "rows", first, len(offsets)
    if ends[-1] < size:
        yield "gap", ends[-1], size
