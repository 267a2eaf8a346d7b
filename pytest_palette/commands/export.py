"""`palette-bench export csv|parquet RUN_OR_FOLDER [...] --out FILE`: one row per item run, for DuckDB, pandas or
a spreadsheet; `palette-bench export inspect … --out FOLDER`: an inspect_ai eval log per run and host, for
`inspect view` (the latest record of each item, as every report counts it)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..exports.table import ExportError, scrubbed, to_csv, write_parquet
from ..results.ledger import load, nothing_at
from ..results.rows import rows
from ..run.credentials import secrets_here

FORMATS = ("csv", "parquet", "inspect")
#: The formats written as one file; inspect writes a folder of logs (an inspect log has one model: one per host).
TABLES = ("csv", "parquet")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("format", choices=FORMATS,
                        help="csv; parquet (needs pyarrow: the export extra); or inspect: inspect_ai eval logs, one "
                             "<run>-<host>.eval per run and host, for `inspect view` (needs the inspect extra)")
    parser.add_argument("runs", type=Path, nargs="+", metavar="RUN_OR_FOLDER",
                        help="a run folder, or a folder of runs or shards: each run's ledger is read")
    parser.add_argument("--out", type=Path, required=True,
                        help="the file to write (never a folder); for inspect, the folder to write the logs into")


def run(args: argparse.Namespace) -> int:
    try:
        if args.format in TABLES and args.out.is_dir():
            raise ExportError(f"--out {args.out}: is a folder; name a file, e.g. --out {args.out}/runs.{args.format}")
        if args.format not in TABLES and args.out.exists() and not args.out.is_dir():
            raise ExportError(f"--out {args.out}: is a file; name a folder: one log per run and host goes there")
        for given in args.runs:
            missing = nothing_at(given)
            if missing:
                raise ExportError(missing)
        if args.format not in TABLES:
            return _inspect(args)
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


def _inspect(args: argparse.Namespace) -> int:
    """The inspect logs (inspect_ai imported only here: the command without the extra says what to install)."""
    from ..exports.inspect import write_logs

    written = write_logs(args.runs, args.out, secrets_here())
    for log in written:
        print(f"wrote {log.path}: {log.samples} item run(s)")
    return 0
