"""`palette-bench export csv|parquet RUN_OR_FOLDER [...] --out FILE`: one row per item run, for DuckDB, pandas or
a spreadsheet (the latest record of each item, as every report counts it)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..exports.table import ExportError, scrubbed, to_csv, write_parquet
from ..results.ledger import LEDGER_NAME, find, load
from ..results.rows import rows
from ..run.credentials import secrets_here

FORMATS = ("csv", "parquet")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("format", choices=FORMATS, help="csv, or parquet (needs pyarrow: the export extra)")
    parser.add_argument("runs", type=Path, nargs="+", metavar="RUN_OR_FOLDER",
                        help="a run folder, or a folder of runs or shards: each run's ledger is read")
    parser.add_argument("--out", type=Path, required=True, help="the file to write (never a folder)")


def run(args: argparse.Namespace) -> int:
    try:
        if args.out.is_dir():
            raise ExportError(f"--out {args.out}: is a folder; name a file, e.g. --out {args.out}/runs.{args.format}")
        for given in args.runs:
            if not given.exists():
                raise ExportError(f"{given}: no such file or folder")
            if not find(given).ledgers:
                raise ExportError(f"{given}: no {LEDGER_NAME} at or under it — nothing was recorded there")
        found = rows(load(*args.runs).latest.values())
        if not found:
            raise ExportError(f"{', '.join(map(str, args.runs))}: the ledger(s) hold no valid record")
        table = scrubbed(found, secrets_here())
        args.out.parent.mkdir(parents=True, exist_ok=True)
        if args.format == "csv":
            args.out.write_text(to_csv(table), encoding="utf-8")
        else:
            write_parquet(table, args.out)
    except ExportError as error:
        print(f"palette-bench export: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"palette-bench export: {args.out}: cannot be written ({error.strerror or error})", file=sys.stderr)
        return 2
    print(f"wrote {args.out}: {len(found)} item run(s)")
    return 0
