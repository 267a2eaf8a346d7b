"""One row per item run as CSV (the standard library's writer) or Parquet (pyarrow, the optional `export` extra).

Both carry the columns of results/rows.py with their kinds, so a number stays a number and an unknown stays empty
(CSV) or null (Parquet): DuckDB and pandas read either as it is.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..results.redaction import Secrets
from ..results.rows import COLUMNS, NAMES, Value


class ExportError(ValueError):
    """An export that cannot be written, in one line."""


def scrubbed(rows: Sequence[dict[str, Value]], secrets: Secrets) -> list[dict[str, Value]]:
    """The rows with every secret of this machine's taken out of their text (records are scrubbed as they are
    written; a ledger from elsewhere may not have been)."""
    return [{name: secrets.scrub(value) if isinstance(value, str) else value for name, value in each.items()}
            for each in rows]


def to_csv(rows: Sequence[dict[str, Value]]) -> str:
    """The rows as CSV with a header line; an unknown value is an empty field, a yes or no is true or false."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=NAMES, lineterminator="\n")
    writer.writeheader()
    for each in rows:
        writer.writerow({name: ("true" if value else "false") if isinstance(value, bool) else value
                         for name, value in each.items()})
    return out.getvalue()


def write_parquet(rows: Sequence[dict[str, Value]], path: Path) -> None:
    """The rows as a Parquet file with a schema from the columns' kinds; ExportError when pyarrow is missing."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ExportError("Parquet needs pyarrow: pip install 'pytest-palette[export]'") from None
    kinds: dict[str, Any] = {"text": pa.string(), "integer": pa.int64(), "number": pa.float64(),
                             "boolean": pa.bool_()}
    schema = pa.schema([pa.field(c.name, kinds[c.kind], metadata={"about": c.about}) for c in COLUMNS])
    table = pa.Table.from_pylist(list(rows), schema=schema)
    pq.write_table(table, path)
