"""The rows an invariants script writes to `$RESULTS_FD`, as checks (docs/families.md, "Hooks").

Each line is one JSON row, and the rows are authoritative: every row is a check. Its role is in its own fields,
classified as the peer does:

- `{"gate": true, "pass": …}` with no `weight`: a gate;
- `{"weight": 0}` with no gate: a diagnostic, shown and never scored (its `pass` may be absent);
- `{"pass": …}` with no weight, or a weight > 0 (and no gate): a scored check of that weight.

Anything else is malformed — a line that is not a JSON object, a row with no name or no boolean `pass`, a row
both a gate and weighted: kept in its place, named, and counted as a failing scored check of weight 1 (as the
seed's report counts it; the peer's code counts a valid weight of the row's own, which issue 38 does not follow).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from ..results.record import GATE, SCORED, Check

#: The bounds of what is read of the rows: their bytes, and the words of one row.
ROWS_BYTES = 1024 * 1024
ROW_WORDS = 2000


@dataclass(frozen=True)
class Row:
    """One row's check, and whether the row was malformed (its check then a failing one of weight 1)."""

    check: Check
    malformed: bool = False


def rows(text: str, script: str = "invariants.sh") -> list[Row]:
    """The checks of an invariants script's output on `$RESULTS_FD`, in order."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            found.append(row(line, number, script))
    return found


def row(line: str, number: int, script: str = "invariants.sh") -> Row:
    """The check of one line, the `number`th of `script`'s rows."""
    where = f"{script} row {number}"
    try:
        data: Any = json.loads(line)
    except ValueError:
        return _malformed(where, f"not a JSON row: {_clip(line)}")
    if not isinstance(data, dict):
        return _malformed(where, f"not a JSON object: {_clip(line)}")
    name = data.get("test")
    message = data.get("message")
    said = message if isinstance(message, str) else ""
    if not isinstance(name, str) or not name.strip():
        return _malformed(where, f"a row with no name (`test`): {_clip(line)}")
    passed = data.get("pass")
    gate = data.get("gate", False)
    has_weight = "weight" in data
    if gate is True and has_weight:
        return _malformed(name, f"{where} is both a gate and weighted: {_clip(line)}")
    if gate not in (True, False):
        return _malformed(name, f"{where}: `gate` is not true or false: {_clip(line)}")
    weight = data.get("weight", 1)
    if has_weight and (isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight)
                       or weight < 0):
        return _malformed(name, f"{where}: `weight` is not a number ≥ 0: {_clip(line)}")
    if has_weight and weight == 0 and not gate:  # a diagnostic: shown, never scored
        held = passed if isinstance(passed, bool) else None
        return Row(Check(name=name, role=SCORED, weight=0.0, passed=held, credit=1.0 if held else 0.0,
                         words=_clip(said)))
    if not isinstance(passed, bool):
        return _malformed(name, f"{where}: `pass` is not true or false: {_clip(line)}")
    return Row(Check(name=name, role=GATE if gate else SCORED, weight=1.0 if gate else float(weight), passed=passed,
                     credit=1.0 if passed else 0.0, words="" if passed and not said else _clip(said)))


def _malformed(name: str, words: str) -> Row:
    return Row(Check(name=name, role=SCORED, weight=1.0, passed=False, credit=0.0, words=f"malformed: {words}"),
               malformed=True)


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= ROW_WORDS else text[:ROW_WORDS - 1] + "…"
