"""The results ledger: one JSON record per finished (case, host, run) item, in `<run-dir>/results.jsonl`.

Writing: `append()` validates a record and writes it as one line with a single `os.write` on an
`O_APPEND` descriptor, so xdist workers and parallel shards never interleave or tear each other's lines.

Reading: `read_records()` streams every record under a folder (shards merge by living side by side);
`load_table()` reads the same lines into a compact columnar `Table` (76 bytes a record instead of a
dict's ~3 KB) that `report` and `compare` aggregate from. Lines exactly as `append` writes them are tabled a
block at a time through `ledger_grammar`; any other line is parsed with json and validated on its own. Bad
lines are skipped with a warning naming the file and line, never silently; a torn last line (a `kill -9` or a
full disk mid-write) is ignored with a warning.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import json
import math
import os
import warnings
from array import array
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import ledger_grammar as grammar
from . import ledger_index
from .ledger_grammar import MAX_RUN_INDEX

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

try:  # orjson parses a line ~2x faster; langchain-core brings it, but the ledger never depends on it.
    import orjson

    _loads: Callable[[bytes], Any] = orjson.loads
except ImportError:  # pragma: no cover - exercised where orjson is absent
    _loads = json.loads

SCHEMA = 1
LEDGER_NAME = "results.jsonl"
OUTCOMES = ("pass", "fail", "error", "skipped")
#: Token counts are kept in 64-bit columns.
MAX_TOKENS = 2**63 - 1
#: Individual warnings per file before the rest are summed up in one line.
WARNINGS_PER_FILE = 20

_NONE = type(None)
# Each field and the JSON types it may hold, in the order `append` writes them. Order matters: the reader's
# fast path checks a whole record by comparing its key order and value types against these tuples.
FIELDS: tuple[tuple[str, tuple[type, ...]], ...] = (
    ("schema", (int,)),
    ("run_id", (str,)),
    ("case", (str,)),
    ("host", (str,)),
    ("model", (str,)),
    ("provider", (str,)),
    ("run_index", (int,)),
    ("outcome", (str,)),
    ("failures", (list,)),
    ("slides", (int, _NONE)),
    ("has_plex", (bool,)),
    ("deck", (bool,)),
    ("polls", (int, _NONE)),
    ("calls", (list,)),
    ("context_expected", (bool,)),
    ("context_reached", (bool,)),
    ("edit_expected", (bool,)),
    ("edit_called", (bool,)),
    ("replanned_after_edit", (bool,)),
    ("seconds", (float, int, _NONE)),
    ("turns", (int, _NONE)),
    ("tokens", (dict, _NONE)),
    ("cost_usd", (float, int, _NONE)),
    ("skill_hash", (str,)),
    ("case_hash", (str,)),
    ("tags", (list,)),
    ("plugin_version", (str,)),
    ("started_at", (float, int)),
    ("ended_at", (float, int)),
    ("fingerprint", (str,)),
    ("scaffold", (dict,)),
)
FIELD_NAMES: tuple[str, ...] = tuple(name for name, _ in FIELDS)
_TYPES = dict(FIELDS)
_STRING_LISTS = ("failures", "calls", "tags")
_NON_EMPTY = ("run_id", "case", "host")
# Every valid combination of top-level value types (576 of them): one set lookup checks all 31 at once.
_SIGNATURES = frozenset(itertools.product(*(types for _, types in FIELDS)))
_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false", list: "a list",
               dict: "an object", _NONE: "null"}


class LedgerError(ValueError):
    """A record that does not follow the schema, or a ledger that cannot be written."""


class LedgerWarning(UserWarning):
    """A ledger line that was skipped while reading (torn, not JSON, or not a valid record)."""


def _describe(types: tuple[type, ...]) -> str:
    number = float in types  # an int is a number too: say it once
    names = list(dict.fromkeys("a number" if number and t in (int, float) else _TYPE_NAMES[t] for t in types))
    return " or ".join(names)


def validate(record: object) -> None:
    """Raise LedgerError naming the field and the problem; return None for a valid record."""
    if not isinstance(record, dict):
        raise LedgerError(f"record: expected a JSON object, got {_TYPE_NAMES.get(type(record), type(record).__name__)}")
    unknown = sorted(set(record) - set(FIELD_NAMES), key=str)
    if unknown:
        raise LedgerError(f"{unknown[0]}: unknown key (schema {SCHEMA} has no such field)")
    for name, types in FIELDS:
        if name not in record:
            raise LedgerError(f"{name}: missing")
        value = record[name]
        # type() not isinstance(): JSON true is not the integer 1, and a bool must not pass as a count.
        if type(value) not in types:
            raise LedgerError(f"{name}: expected {_describe(types)}, got {_TYPE_NAMES.get(type(value), repr(value))}")
    if record["schema"] != SCHEMA:
        raise LedgerError(f"schema: expected {SCHEMA}, got {record['schema']} (written by another plugin version?)")
    if record["outcome"] not in OUTCOMES:
        raise LedgerError(f"outcome: unknown outcome {record['outcome']!r} (expected one of {', '.join(OUTCOMES)})")
    if not 1 <= record["run_index"] <= MAX_RUN_INDEX:
        raise LedgerError(f"run_index: expected 1 to {MAX_RUN_INDEX}, got {record['run_index']}")
    for name in _NON_EMPTY:
        if not record[name]:
            raise LedgerError(f"{name}: empty string")
    for name in _STRING_LISTS:
        for position, item in enumerate(record[name]):
            if type(item) is not str:
                raise LedgerError(f"{name}[{position}]: expected a string, got {_TYPE_NAMES.get(type(item), item)}")
    tokens = record["tokens"]
    if tokens is not None:
        if set(tokens) != {"input", "output"}:
            raise LedgerError(f"tokens: expected exactly the keys input and output, got {sorted(tokens)}")
        for key in ("input", "output"):
            if type(tokens[key]) is not int or not 0 <= tokens[key] <= MAX_TOKENS:
                raise LedgerError(f"tokens.{key}: expected an integer from 0 to {MAX_TOKENS}, got {tokens[key]!r}")
    for key, value in record["scaffold"].items():
        if type(value) is not str:
            raise LedgerError(f"scaffold.{key}: expected a string, got {_TYPE_NAMES.get(type(value), value)}")


def _fast_valid(record: Any) -> bool:
    """True only for a valid record in the writer's key order; anything else takes validate()'s slow path."""
    try:
        if type(record) is not dict or tuple(record) != FIELD_NAMES:
            return False
        values = tuple(record.values())
        if tuple(map(type, values)) not in _SIGNATURES:
            return False
        (schema, run_id, case, host, _, _, run_index, outcome, failures, _, _, _, _, calls,
         _, _, _, _, _, _, _, tokens, _, _, _, tags, _, _, _, _, scaffold) = values
        # str.join raises TypeError on any non-string item: a C-speed "every item is a string" check.
        "".join(failures), "".join(calls), "".join(tags), "".join(scaffold.values())
        return bool(schema == SCHEMA and outcome in _OUTCOME_SET and 1 <= run_index <= MAX_RUN_INDEX
                    and run_id and case and host and (tokens is None or _tokens_ok(tokens)))
    except TypeError:
        return False


_OUTCOME_SET = frozenset(OUTCOMES)
_TOKEN_KEYS = frozenset({"input", "output"})


def serialise(record: dict[str, Any]) -> bytes:
    """The record as one compact line, keys in schema order, newline-terminated."""
    ordered = {name: record[name] for name in FIELD_NAMES}
    return (json.dumps(ordered, ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n").encode()


def append(path: str | os.PathLike[str], record: dict[str, Any]) -> None:
    """Validate the record and append it to the ledger at `path` as one whole line."""
    validate(record)
    try:
        line = serialise(record)
    except ValueError as error:  # NaN or infinity: not JSON, and would poison every later read
        raise LedgerError(f"record: {error}") from error
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)  # read: the torn-line check
    try:
        if fcntl is not None:
            # Only so the torn-line check below sees no half-copied line of a racing writer; the write
            # itself is atomic without it. The kernel drops the lock if this process is killed.
            fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        # A torn line left by a killed writer would swallow this record: start a fresh line.
        torn = bool(size) and os.pread(fd, 1, size - 1) != b"\n"
        written = os.write(fd, b"\n" + line if torn else line)
        if written == len(line) + torn and fcntl is not None:  # the index needs the lock to keep in step
            try:
                ledger_index.note(target, fd, size + torn, line)
            except OSError as error:  # the record is safe; report reads it from the ledger instead
                warnings.warn(f"{target}: the index was not updated ({error}); the record is in the ledger",
                              LedgerWarning, stacklevel=2)
    finally:
        os.close(fd)  # closing releases the lock
    if written != len(line) + torn:
        raise LedgerError(f"{target}: short write ({written} of {len(line) + torn} bytes; is the disk full?)")


def ledger_files(path: str | os.PathLike[str]) -> list[Path]:
    """Every results.jsonl at or under `path`, in a stable order (sorted by path); no symlinked folders."""
    root = Path(path)
    if root.is_file():
        return [root]
    found: list[Path] = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        if LEDGER_NAME in files:
            found.append(Path(folder) / LEDGER_NAME)
    return sorted(found)


# ---------------------------------------------------------------------------------------------- reading

# Read 256 KiB at a time: memory stays flat whatever the ledger's size, and a block's passes (count, findall)
# run over bytes still in cache — measured 20% faster than 8 MiB blocks.
_BLOCK = 256 << 10


@dataclass(frozen=True)
class Problem:
    """A skipped line: which file, where, and why."""

    path: str
    offset: int
    message: str
    line: int = 0


def _lines(path: Path, start: int, end: int) -> Iterator[tuple[int, bytes, bool]]:
    """(offset, line, ended_with_newline) for every line that starts in [start, end) of the file."""
    with open(path, "rb") as handle:
        if start:
            # A line belongs to the range it starts in: skip the one that began before ours.
            handle.seek(start - 1)
            if handle.read(1) != b"\n":
                handle.readline()
        offset = handle.tell()
        carry = b""
        while offset < end:
            block = handle.read(_BLOCK)
            if not block:
                break
            block = carry + block
            pieces = block.split(b"\n")
            carry = pieces.pop()
            for piece in pieces:
                if offset >= end:
                    return
                yield offset, piece, True
                offset += len(piece) + 1
        if carry and offset < end:
            yield offset, carry, False


def _recover(line: bytes, complete: bool) -> tuple[dict[str, Any] | None, list[str]]:
    """The slow path for a line the fast path refused: (the record in schema order or None, why)."""
    if not line.strip():
        return None, []  # blank lines are harmless: a racing writer's torn-line guard leaves them
    notes: list[str] = []
    try:
        record = _loads(line)
    except ValueError:
        record = _salvage(line)
        if record is None:
            return None, ["torn last line (no newline, not JSON): ignored — a writer was killed mid-record"
                          if not complete else "not JSON (a torn write?): skipped"]
        notes.append("a torn fragment was glued to the start of this line: kept the whole record after it")
    try:
        validate(record)
    except LedgerError as error:
        return None, [*notes, f"invalid record: {error}"]
    if not complete:
        notes.append("last line has no newline (kept: it is a whole record)")
    return {key: record[key] for key in FIELD_NAMES}, notes


def _parse(path: Path, start: int, end: int, problems: list[Problem]) -> Iterator[dict[str, Any]]:
    """Valid records in the byte range, in schema key order; every skipped line goes to `problems`."""
    name = str(path)
    for offset, line, complete in _lines(path, start, end):
        try:
            record = _loads(line)
        except ValueError:
            record = None
        if complete and _fast_valid(record):
            yield record
            continue
        record, notes = _recover(line, complete)
        problems.extend(Problem(name, offset, note) for note in notes)
        if record is not None:
            yield record


def _salvage(line: bytes) -> Any:
    """A whole record after a torn fragment on the same line (a crash, then a later append), if any."""
    start = line.rfind(b'{"schema":')
    if start <= 0:
        return None
    try:
        return _loads(line[start:])
    except ValueError:
        return None


def _number_lines(problems: list[Problem]) -> list[Problem]:
    """Turn byte offsets into 1-based line numbers, one pass per file that has problems."""
    numbered: list[Problem] = []
    by_file: dict[str, list[Problem]] = {}
    for problem in problems:
        by_file.setdefault(problem.path, []).append(problem)
    for name, items in by_file.items():
        items.sort(key=lambda p: p.offset)
        line, position = 1, 0
        with open(name, "rb") as handle:
            for problem in items:
                while position < problem.offset:
                    chunk = handle.read(min(_BLOCK, problem.offset - position))
                    if not chunk:
                        break
                    line += chunk.count(b"\n")
                    position += len(chunk)
                numbered.append(Problem(name, problem.offset, problem.message, line))
    return numbered


def emit_warnings(problems: Sequence[Problem]) -> list[str]:
    """Warn about each skipped line (capped per file, the rest summed up); return the messages."""
    messages: list[str] = []
    per_file: dict[str, int] = {}
    for problem in _number_lines(list(problems)):
        count = per_file[problem.path] = per_file.get(problem.path, 0) + 1
        if count <= WARNINGS_PER_FILE:
            messages.append(f"{problem.path}:{problem.line}: {problem.message}")
    for name, count in per_file.items():
        if count > WARNINGS_PER_FILE:
            messages.append(f"{name}: {count - WARNINGS_PER_FILE} more bad line(s) skipped")
    for message in messages:
        warnings.warn(message, LedgerWarning, stacklevel=3)
    return messages


def read_records(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Stream every valid record from every results.jsonl at or under `path` (shards merge).

    Skipped lines are warned about (LedgerWarning) once the stream is exhausted, with file and line.
    """
    problems: list[Problem] = []
    try:
        for file in ledger_files(path):
            yield from _parse(file, 0, file.stat().st_size, problems)
    finally:
        if problems:
            emit_warnings(problems)


# ---------------------------------------------------------------------------------------------- the table


class Vocab:
    """Values to small ints and back: each distinct string or tuple is stored once."""

    __slots__ = ("ids", "items")

    def __init__(self) -> None:
        self.ids: dict[Hashable, int] = {}
        self.items: list[Any] = []

    def add(self, value: Hashable) -> int:
        found = self.ids.get(value)
        if found is None:
            found = self.ids[value] = len(self.items)
            self.items.append(value)
        return found


#: What `Shape` holds: the discrete part of a record. Many records share one, so it is stored once.
SHAPE_FIELDS = ("outcome", "failures", "slides", "has_plex", "deck", "polls", "calls", "context_expected",
                "context_reached", "edit_expected", "edit_called", "replanned_after_edit")
#: What a record's configuration holds: the same for every record of one host in one run.
CONFIG_FIELDS = ("model", "provider", "skill_hash", "fingerprint", "plugin_version", "scaffold")

_ID_COLUMNS = ("run", "case", "host", "run_index", "shape", "config", "case_hash")
_FLOAT_COLUMNS = ("seconds", "started", "ended", "cost")
#: hash(((run_id, case, host), run_index)) per row: no two equal proves no duplicate (see survivors).
_KEY_COLUMN = "key"
_INT_COLUMNS = ("tokens_in", "tokens_out")
_MISSING = -1  # an absent count; absent floats are NaN


@dataclass
class Table:
    """Records as columns: strings and discrete fields interned, numbers in flat arrays.

    Rows are in read order, duplicates included; `survivors()` keeps the last of each
    (run_id, case, host, run_index).
    """

    runs: Vocab = field(default_factory=Vocab)
    cases: Vocab = field(default_factory=Vocab)
    hosts: Vocab = field(default_factory=Vocab)
    shapes: Vocab = field(default_factory=Vocab)
    configs: Vocab = field(default_factory=Vocab)
    case_hashes: Vocab = field(default_factory=Vocab)
    columns: dict[str, array[Any]] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    #: What `load_table(summarise=...)` computed over all rows in the reader processes (None otherwise).
    summary: Any = None

    def __post_init__(self) -> None:
        for name in _ID_COLUMNS:  # 4-byte ints: interned ids and run_index (≤ 2**31 − 1) fit
            self.columns.setdefault(name, array("i"))
        for name in _FLOAT_COLUMNS:
            self.columns.setdefault(name, array("d"))
        for name in (*_INT_COLUMNS, _KEY_COLUMN):
            self.columns.setdefault(name, array("q"))

    def __len__(self) -> int:
        return len(self.columns["run"])

    def add_records(self, records: Iterable[dict[str, Any]]) -> None:
        """Append record dicts, validating each (LedgerError names the first bad one)."""
        sink = self.sink()
        for record in records:
            if not sink(record):
                validate(record)  # raises, naming the field
                if not sink({key: record[key] for key in FIELD_NAMES}):
                    raise AssertionError(f"a valid record was refused: {record!r}")

    def sink(self) -> Callable[[Any], bool]:
        """A function that appends one record and returns True, or returns False and appends nothing.

        It is the reader's hot path, run once per record: one set lookup checks the key order and all 31
        value types; nested values (failure and call lists, scaffold, names) are checked only when their
        interned value is new, so each distinct list is checked once instead of once per record. False
        means "take the slow path" (validate() explains), never a silent skip.
        """
        c = self.columns
        run_a, case_a, host_a, index_a = c["run"].append, c["case"].append, c["host"].append, c["run_index"].append
        shape_a, config_a, chash_a = c["shape"].append, c["config"].append, c["case_hash"].append
        sec_a, start_a, end_a, cost_a = c["seconds"].append, c["started"].append, c["ended"].append, c["cost"].append
        tin_a, tout_a, key_a = c["tokens_in"].append, c["tokens_out"].append, c[_KEY_COLUMN].append
        runs, cases, hosts = self.runs.ids, self.cases.ids, self.hosts.ids
        shapes, configs, chashes = self.shapes.ids, self.configs.ids, self.case_hashes.ids
        good_tags: set[tuple[str, ...]] = set()
        names, signatures, outcomes, nan = FIELD_NAMES, _SIGNATURES, _OUTCOME_SET, math.nan

        def sink(record: Any) -> bool:
            if type(record) is not dict or tuple(record) != names:
                return False
            values = tuple(record.values())
            if tuple(map(type, values)) not in signatures:
                return False
            (schema, run_id, case, host, model, provider, run_index, outcome, failures, slides, has_plex, deck,
             polls, calls, cexp, creach, eexp, ecall, replan, seconds, _, tokens, cost, skill_hash, case_hash,
             tags, version, started, ended, fingerprint, scaffold) = values
            if schema != SCHEMA or not 1 <= run_index <= MAX_RUN_INDEX:
                return False
            if tokens is not None and not _tokens_ok(tokens):
                return False
            try:
                shape = (outcome, tuple(failures), slides, has_plex, deck, polls, tuple(calls), cexp, creach, eexp,
                         ecall, replan)
                shape_id = shapes.get(shape)
                config = (model, provider, skill_hash, fingerprint, version, tuple(scaffold.items()))
                config_id = configs.get(config)
                tag_key = tuple(tags)
                if tag_key not in good_tags:
                    if not _strings(tags):
                        return False
                    good_tags.add(tag_key)
            except TypeError:  # an unhashable item inside a list: not a string, so not valid
                return False
            if shape_id is None and (outcome not in outcomes or not _strings(failures) or not _strings(calls)):
                return False
            if config_id is None and not _strings(scaffold.values()):
                return False
            run = runs.get(run_id)
            case_id = cases.get(case)
            host_id = hosts.get(host)
            if (run is None and not run_id) or (case_id is None and not case) or (host_id is None and not host):
                return False
            # Every check passed: from here on the record is appended whole.
            run_a(self.runs.add(run_id) if run is None else run)
            case_a(self.cases.add(case) if case_id is None else case_id)
            host_a(self.hosts.add(host) if host_id is None else host_id)
            index_a(run_index)
            key_a(hash(((run_id, case, host), run_index)))  # the grammar's reader hashes the same pair
            shape_a(self.shapes.add(shape) if shape_id is None else shape_id)
            config_a(self.configs.add(config) if config_id is None else config_id)
            chash = chashes.get(case_hash)
            chash_a(self.case_hashes.add(case_hash) if chash is None else chash)
            sec_a(nan if seconds is None else seconds)
            start_a(started)
            end_a(ended)
            cost_a(nan if cost is None else cost)
            if tokens is None:
                tin_a(_MISSING)
                tout_a(_MISSING)
            else:
                tin_a(tokens["input"])
                tout_a(tokens["output"])
            return True

        return sink

    def extend(self, other: Table) -> None:
        """Append another table's rows after this one's, translating its interned ids into ours."""
        for mine, theirs, column in ((self.runs, other.runs, "run"), (self.cases, other.cases, "case"),
                                     (self.hosts, other.hosts, "host"), (self.shapes, other.shapes, "shape"),
                                     (self.configs, other.configs, "config"),
                                     (self.case_hashes, other.case_hashes, "case_hash")):
            remap = [mine.add(item) for item in theirs.items]
            self.columns[column].extend(array("i", map(remap.__getitem__, other.columns[column])))
        for name in ("run_index", *_FLOAT_COLUMNS, *_INT_COLUMNS, _KEY_COLUMN):
            self.columns[name].extend(other.columns[name])
        self.problems.extend(other.problems)
        self.files.extend(f for f in other.files if f not in self.files)

    def survivors(self) -> tuple[list[int] | None, int]:
        """(rows to keep, or None for all of them; how many duplicates were dropped).

        The last record of each (run_id, case, host, run_index) wins: resume appends a re-run after the
        errored original, so the later line is the newer verdict.
        """
        c = self.columns
        # Fast proof of "no duplicates": equal keys have equal hashes, so distinct hashes mean distinct keys.
        # (Hashes agree across the forked readers: they share the parent's hash seed.) A collision only
        # sends us to the exact check below.
        if len(set(c[_KEY_COLUMN])) == len(self):
            return None, 0
        if len(self.cases.items) >= 2**20 or len(self.hosts.items) >= 2**11:
            keys: Iterable[Hashable] = zip(c["run"], c["case"], c["host"], c["run_index"], strict=False)
        else:  # one int per row instead of a 4-tuple: a third of the memory on a million rows
            keys = map(_pack, c["run"], c["case"], c["host"], c["run_index"])
        last = dict(zip(keys, range(len(self)), strict=False))  # dict() keeps the last row for a repeated key
        dropped = len(self) - len(last)
        return (None, 0) if not dropped else (sorted(last.values()), dropped)


def _pack(run: int, case: int, host: int, index: int) -> int:
    return (((run << 20 | case) << 11 | host) << 31) | index


def _strings(values: Iterable[Any]) -> bool:
    return all(type(value) is str for value in values)


def _tokens_ok(tokens: dict[str, Any]) -> bool:
    return (tokens.keys() == _TOKEN_KEYS and type(tokens["input"]) is int and type(tokens["output"]) is int
            and 0 <= tokens["input"] <= MAX_TOKENS and 0 <= tokens["output"] <= MAX_TOKENS)


def _read_range(table: Table, path: Path, start: int, end: int) -> None:
    """Append the records of the lines that start in [start, end) of one ledger file to the table.

    A block of lines that all match the writer's exact grammar is tabled in C-level passes
    (ledger_grammar); a block holding any other line is read line by line, each odd line through json and
    the table's sink, or through `_recover`, which says what is wrong with it.
    """
    sink, loads, problems, name = table.sink(), _loads, table.problems, str(path)
    reader = grammar.Reader(table)

    def one(offset: int, line: bytes, complete: bool) -> None:
        try:
            if complete and sink(loads(line)):
                return
        except ValueError:  # not JSON
            pass
        record, notes = _recover(line, complete)
        problems.extend(Problem(name, offset, note) for note in notes)
        if record is not None and not sink(record):
            raise AssertionError(f"{name}: a record that validates was refused by the table: {record!r}")

    def batch(rows: list[grammar.Row], lines: list[tuple[int, bytes]]) -> None:
        try:
            reader.add(rows)
        except grammar.NotFast:
            for offset, line in lines:
                one(offset, line, True)

    def scan(block: bytes, offset: int) -> None:
        """`block`: whole lines, each ending in a newline, the first starting at `offset`."""
        rows = grammar.LINES.findall(block)
        if len(rows) == block.count(b"\n"):  # anchored to lines: as many matches as lines means all matched
            try:
                reader.add(rows)
                return
            except grammar.NotFast:
                pass
        rows, lines = [], []  # consecutive matching lines, tabled together in file order
        for line in block.split(b"\n")[:-1]:
            match = grammar.LINE.fullmatch(line)
            if match is not None:
                rows.append(match.groups(b""))  # as findall gives: b"" for an unmatched group
                lines.append((offset, line))
            else:
                batch(rows, lines)
                rows, lines = [], []
                one(offset, line, True)
            offset += len(line) + 1
        batch(rows, lines)

    with open(path, "rb") as handle:
        if start:
            handle.seek(start - 1)
            if handle.read(1) != b"\n":
                handle.readline()  # that line began in the previous range, which reads it
        position = offset = handle.tell()  # position: where the next read starts; offset: the next line's
        carry = b""
        while position < end:
            block = handle.read(min(_BLOCK, end - position))
            if not block:
                break
            position += len(block)
            if position >= end and not block.endswith(b"\n"):
                block += handle.readline()  # the line that straddles `end` started in this range: finish it
            block = carry + block
            cut = block.rfind(b"\n") + 1
            carry = block[cut:]
            if cut:
                scan(block if cut == len(block) else block[:cut], offset)
                offset += cut
        if carry:
            one(offset, carry, False)  # no newline at the end of the file: always worth a warning


def _load_ranges(units: list[tuple[str, int, int]], summarise: Callable[[Table], Any] | None = None) -> Table:
    """Read byte ranges of ledger files into one table (runs in a worker process for big ledgers)."""
    table = Table()
    with _collector_paused():
        for name, start, end in units:
            _read_range(table, Path(name), start, end)
        if summarise is not None:
            table.summary = summarise(table)
    return table


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Reading builds no reference cycles, only many short-lived tuples: the collector would run every 700
    of them for nothing (and, in a forked reader, dirty the parent's shared pages as it walks them)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


#: Below this many bytes one process reads faster than two can start.
PARALLEL_THRESHOLD = 16 << 20


def load_table(path: str | os.PathLike[str], *, workers: int | None = None,
               summarise: Callable[[Table], Any] | None = None) -> Table:
    """Read every results.jsonl at or under `path` into a Table, warning about each skipped line.

    Big ledgers are split into byte ranges read by `workers` forked processes (default: one per CPU, at
    most 4); the rows come back in file order, so the result is identical to a one-process read. With
    `summarise`, each reader also summarises its own rows, and the merged `table.summary` (summaries need a
    `merge` method) spares the caller a pass over every row when nothing needs de-duplicating.
    """
    files = ledger_files(path)
    sizes = [(str(f), f.stat().st_size) for f in files]
    indexes = [_index_of(Path(name), size) for name, size in sizes]
    if any(index is not None for index in indexes):
        table = Table()
        for (name, size), index in zip(sizes, indexes, strict=True):
            _load_file(table, Path(name), size, index)
        return _finish(table, [name for name, _ in sizes])
    total = sum(size for _, size in sizes)
    if workers is None:
        workers = min(4, os.cpu_count() or 1) if total >= PARALLEL_THRESHOLD else 1
    parts = _split(sizes, workers) if workers > 1 and _can_fork() else [[(n, 0, s) for n, s in sizes]]
    if len(parts) == 1:
        table = _load_ranges(parts[0])
    else:
        import multiprocessing

        gc.freeze()  # the readers' collectors then leave the parent's objects (and their pages) alone
        try:
            with multiprocessing.get_context("fork").Pool(len(parts) - 1) as pool:
                others = pool.map_async(functools.partial(_load_ranges, summarise=summarise), parts[1:])
                table = _load_ranges(parts[0], summarise)  # this process reads the first range meanwhile
                loaded = others.get()
        finally:
            gc.unfreeze()
        for other in loaded:
            table.extend(other)
            if table.summary is not None:
                table.summary.merge(other.summary)
    return _finish(table, [name for name, _ in sizes])


def _finish(table: Table, files: list[str]) -> Table:
    table.files = files
    if table.problems:
        emit_warnings(table.problems)
    return table


def _index_of(path: Path, size: int) -> ledger_index.Indexed | None:
    """The ledger's index, or None (no index, or one that cannot be trusted: said in a warning)."""
    try:
        return ledger_index.read(path, size)
    except ledger_index.Stale as error:
        index, spans = ledger_index.paths(path)
        warnings.warn(f"{path}: {error}: reading the ledger itself (remove {index.name} and {spans.name} to "
                      "stop this warning)", LedgerWarning, stacklevel=3)
        return None


def _load_file(table: Table, path: Path, size: int, index: ledger_index.Indexed | None) -> None:
    """One ledger into the table, in file order: indexed rows from the index, every other byte range parsed."""
    with _collector_paused():
        if index is None:
            _read_range(table, path, 0, size)
            return
        reader = grammar.Reader(table)
        offsets = index.slots[ledger_index.OFFSET]
        for kind, start, end in index.pieces:
            if kind == "gap":
                _read_range(table, path, start, end)
                continue
            try:
                reader.add_columns(*index.rows(start, end))
            except grammar.NotFast:  # spans the grammar's reader refuses: read those lines themselves
                _read_range(table, path, offsets[start], offsets[end - 1] + 1)


def _can_fork() -> bool:
    import multiprocessing

    return "fork" in multiprocessing.get_all_start_methods()


def _split(sizes: list[tuple[str, int]], workers: int) -> list[list[tuple[str, int, int]]]:
    """Cut the files' bytes into `workers` contiguous, near-equal ranges, in file order."""
    total = sum(size for _, size in sizes)
    share = -(-total // workers)
    parts: list[list[tuple[str, int, int]]] = [[]]
    room = share
    for name, size in sizes:
        start = 0
        while start < size:
            take = min(room, size - start)
            parts[-1].append((name, start, start + take))
            start += take
            room -= take
            if room == 0 and len(parts) < workers:
                parts.append([])
                room = share
    return [part for part in parts if part]
