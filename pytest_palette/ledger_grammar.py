"""The ledger's fast path: the exact line `ledger.append` writes, as one regular expression.

`append` writes every record the same way — keys in schema order, compact separators, no NaN — so a line that
matches `LINE` is a valid record: the pattern itself checks every key, every type and every list item. A block
of such lines becomes table columns through C-level passes (`findall`, `zip`, `map`) with no dict and no Python
step per record. (Lines `append` has indexed are not even matched: see ledger_index.)

What the pattern cannot check is done once per distinct value, not once per record: strings are decoded with
`json` (which rejects bad UTF-8), run_id, case and host must not be empty, and run_index must fit 31 bits.
Anything else — a torn line, another writer's spacing or key order, a value the writer would never produce —
does not match, and the caller's slow path parses that line with `json` and says what is wrong with it.
"""

from __future__ import annotations

import json
import re
import sys
from array import array
from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from .ledger import Table

# Possessive repeats (3.11+) skip the backtracking bookkeeping: ~20% faster. Every repeat below is followed by
# a character it cannot match, so possessive and greedy accept exactly the same lines.
_P = "+" if sys.version_info >= (3, 11) else ""
# A JSON string: no raw control character, only JSON's escapes. Raw non-ASCII bytes pass here; their UTF-8 is
# checked when the (distinct) value is decoded.
_STR = (rf'"[^"\\\x00-\x1f]*{_P}(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{{4}})[^"\\\x00-\x1f]*{_P})*{_P}"')
_INT = r"-?(?:0|[1-9][0-9]{0,17})"  # ≤ 18 digits: what json would read as an int that fits 64 bits
_NUM = rf"{_INT}(?:\.[0-9]+{_P})?(?:[eE][+-]?[0-9]{{1,3}})?"
_BOOL = "(?:true|false)"
_LIST = rf"\[(?:{_STR}(?:,{_STR})*{_P})?\]"
_STR_OBJECT = rf"\{{(?:{_STR}:{_STR}(?:,{_STR}:{_STR})*{_P})?\}}"
_COUNT = "(0|[1-9][0-9]{0,17})"

#: One record exactly as `ledger.serialise` writes it, without its newline. Neighbouring fields that are read
#: together are captured as one raw span, decoded once per distinct span. Groups, in order:
IDENT, INDEX, SHAPE, SECONDS, TOKENS_IN, TOKENS_OUT, COST, TERMS, STARTED, ENDED, TAIL = range(11)
PATTERN = (
    # IDENT: run_id … provider
    rf'\{{"schema":1,("run_id":{_STR},"case":{_STR},"host":{_STR},"model":{_STR},"provider":{_STR}),'
    rf'"run_index":([1-9][0-9]{{0,9}}),'  # INDEX
    # SHAPE: outcome … replanned_after_edit
    rf'("outcome":"(?:pass|fail|error|skipped)","failures":{_LIST},"slides":(?:null|{_INT}),"has_plex":{_BOOL},'
    rf'"deck":{_BOOL},"polls":(?:null|{_INT}),"calls":{_LIST},"context_expected":{_BOOL},'
    rf'"context_reached":{_BOOL},"edit_expected":{_BOOL},"edit_called":{_BOOL},"replanned_after_edit":{_BOOL}),'
    # SECONDS, (turns: checked, not kept), TOKENS_IN, TOKENS_OUT, COST
    rf'"seconds":(null|{_NUM}),"turns":(?:null|{_INT}),"tokens":(?:null|\{{"input":{_COUNT},"output":{_COUNT}\}}),'
    rf'"cost_usd":(null|{_NUM}),'
    # TERMS: skill_hash … plugin_version (tags: checked, not kept)
    rf'("skill_hash":{_STR},"case_hash":{_STR},"tags":{_LIST},"plugin_version":{_STR}),'
    rf'"started_at":({_NUM}),"ended_at":({_NUM}),'  # STARTED, ENDED
    rf'("fingerprint":{_STR},"scaffold":{_STR_OBJECT})\}}'  # TAIL
)
LINE = re.compile(PATTERN.encode())
#: The same, anchored to whole lines of a block: `findall` over a block returns one tuple per matching line.
LINES = re.compile(b"^" + PATTERN.encode() + b"$", re.MULTILINE)

Row = tuple[bytes, ...]
#: The largest run_index a record may hold: it is packed into 32 bits of the table's de-duplication key
#: (ledger.Table.survivors). Defined here, where the reader that checks it lives; ledger imports it.
MAX_RUN_INDEX = 2**31 - 1
_NULL_AS_NAN = {b"null": b"nan"}  # float(b"nan") is NaN: an absent time or cost, as the table stores it
_EMPTY_AS_MISSING = {b"": b"-1"}  # no tokens: the table's "not reported" count


class NotFast(Exception):
    """Rows that matched the pattern but fail a check it cannot make: read them the slow way."""


def _members(raw: bytes) -> dict[str, Any]:
    """A captured span of `"key":value` members, decoded (ValueError for bad UTF-8)."""
    return json.loads(b"{" + raw + b"}")  # type: ignore[no-any-return]


class Reader:
    """Tables rows that matched `LINE`, decoding each distinct span once for all the blocks it reads.

    A decoded value is interned into the table's vocabularies when first seen, even if its block is then
    refused (NotFast): an entry no row uses is harmless, as every reader of a Table goes through row ids.
    """

    def __init__(self, table: Table) -> None:
        self.table = table
        self.idents: dict[bytes, tuple[int, int, int, tuple[str, str, str], int]] = {}
        self.shapes: dict[bytes, int] = {}
        self.terms: dict[bytes, tuple[int, int]] = {}
        self.tails: dict[bytes, int] = {}
        self.configs: dict[tuple[int, int, int], int] = {}
        self._model: list[tuple[str, str]] = []  # by ident number: (model, provider)
        self._skill: list[tuple[str, str]] = []  # by terms number: (skill_hash, plugin_version)
        self._tail: list[tuple[str, tuple[tuple[str, str], ...]]] = []  # by tail number: (fingerprint, scaffold)

    def _ident(self, raw: bytes) -> tuple[int, int, int, tuple[str, str, str], int]:
        d = _members(raw)
        run_id, case, host = d["run_id"], d["case"], d["host"]
        if not (run_id and case and host):
            raise NotFast  # validate() names the empty one
        t = self.table
        self._model.append((d["model"], d["provider"]))
        return (t.runs.add(run_id), t.cases.add(case), t.hosts.add(host), (run_id, case, host), len(self._model) - 1)

    def _shape(self, raw: bytes) -> int:
        d = _members(raw)
        return self.table.shapes.add((d["outcome"], tuple(d["failures"]), d["slides"], d["has_plex"], d["deck"],
                                      d["polls"], tuple(d["calls"]), d["context_expected"], d["context_reached"],
                                      d["edit_expected"], d["edit_called"], d["replanned_after_edit"]))

    def _terms(self, raw: bytes) -> tuple[int, int]:
        d = _members(raw)
        self._skill.append((d["skill_hash"], d["plugin_version"]))
        return self.table.case_hashes.add(d["case_hash"]), len(self._skill) - 1

    def _tail_of(self, raw: bytes) -> int:
        d = _members(raw)
        self._tail.append((d["fingerprint"], tuple(d["scaffold"].items())))
        return len(self._tail) - 1

    def _config(self, key: tuple[int, int, int]) -> int:
        (model, provider), (skill_hash, version), (fingerprint, scaffold) = (
            self._model[key[0]], self._skill[key[1]], self._tail[key[2]])
        return self.table.configs.add((model, provider, skill_hash, fingerprint, version, scaffold))

    def add(self, rows: Sequence[Row]) -> None:
        """Append rows that matched `LINE` to the table, all or none (NotFast: none were added)."""
        if not rows:
            return
        columns = list(zip(*rows, strict=True))
        self.add_columns(columns[IDENT], columns[SHAPE], columns[TERMS], columns[TAIL], numbers(columns))

    def add_columns(self, idents_raw: Sequence[bytes], shapes_raw: Sequence[bytes], terms_raw: Sequence[bytes],
                    tails_raw: Sequence[bytes], numbers: Numbers) -> None:
        """Append rows given as their four raw spans and their numbers, all or none (NotFast: none were added)."""
        indexes = numbers[0]
        if indexes and max(indexes) > MAX_RUN_INDEX:
            raise NotFast
        idents = _lookup(self.idents, idents_raw, self._ident)
        shapes = _lookup(self.shapes, shapes_raw, self._shape)
        terms = _lookup(self.terms, terms_raw, self._terms)
        tails = _lookup(self.tails, tails_raw, self._tail_of)
        configs = _lookup(self.configs, list(zip(map(itemgetter(4), idents), map(itemgetter(1), terms), tails,
                                                 strict=True)), self._config)
        # Everything is checked: from here on every row is appended whole.
        c = self.table.columns
        c["run"].extend(array("i", map(itemgetter(0), idents)))
        c["case"].extend(array("i", map(itemgetter(1), idents)))
        c["host"].extend(array("i", map(itemgetter(2), idents)))
        c["run_index"].extend(array("i", indexes))
        # The de-duplication key hashes the decoded values exactly as the table's sink does.
        c["key"].extend(array("q", map(hash, zip(map(itemgetter(3), idents), indexes, strict=True))))
        c["shape"].extend(array("i", shapes))
        c["config"].extend(array("i", configs))
        c["case_hash"].extend(array("i", map(itemgetter(0), terms)))
        rest: list[array[Any]] = list(numbers[1:])
        for name, column in zip(NUMBER_COLUMNS[1:], rest, strict=True):
            c[name].extend(column)


#: The table columns `numbers` fills, in its order.
NUMBER_COLUMNS = ("run_index", "seconds", "started", "ended", "cost", "tokens_in", "tokens_out")
Numbers = tuple["array[int]", "array[float]", "array[float]", "array[float]", "array[float]", "array[int]",
                "array[int]"]


def numbers(columns: Sequence[Sequence[bytes]]) -> Numbers:
    """A block's numbers (columns of `LINE`'s groups) as the table stores them: absent times and costs NaN,
    absent token counts -1. The index's writer converts its one row with this too, so both agree exactly."""
    return (array("q", map(int, columns[INDEX])),
            array("d", map(float, _swap(_NULL_AS_NAN, columns[SECONDS]))),
            array("d", map(float, columns[STARTED])),
            array("d", map(float, columns[ENDED])),
            array("d", map(float, _swap(_NULL_AS_NAN, columns[COST]))),
            array("q", map(int, _swap(_EMPTY_AS_MISSING, columns[TOKENS_IN]))),
            array("q", map(int, _swap(_EMPTY_AS_MISSING, columns[TOKENS_OUT]))))


def _swap(replacements: dict[bytes, bytes], raws: Sequence[bytes]) -> Iterator[bytes]:
    """Each raw value, or its replacement: dict.get with the value itself as the default, at C speed."""
    return cast("Iterator[bytes]", map(replacements.get, raws, raws))


def _lookup(cache: dict[Any, Any], keys: Sequence[Any], decode: Callable[[Any], Any]) -> list[Any]:
    """cache[key] for every key, decoding (and caching) each distinct missing key once."""
    try:
        return list(map(cache.__getitem__, keys))
    except KeyError:
        pass
    for key in dict.fromkeys(keys):
        if key not in cache:
            try:
                cache[key] = decode(key)
            except (ValueError, KeyError) as error:  # not UTF-8, or not what the pattern promised
                raise NotFast from error
    return list(map(cache.__getitem__, keys))
