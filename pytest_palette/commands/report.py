"""`palette-bench report RUN_OR_FOLDER`: every run's ledger under a folder, as Markdown and JSON."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..results.ledger import LEDGER_NAME, find, load
from ..results.report import ReportError, build_report, to_json, to_markdown
from ..results.tally import Tally, tally


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", type=Path, metavar="RUN_OR_FOLDER",
                        help="a run folder, or a folder of runs or shards: each run's ledger is read")
    parser.add_argument("--out", type=Path, help="write the Markdown here instead of printing it")
    parser.add_argument("--json", type=Path, help="also write the numbers as JSON here")
    parser.add_argument("--allow-mixed", action="store_true",
                        help="report records of different skill hashes or fingerprints side by side (never pooled)")


def run(args: argparse.Namespace) -> int:
    try:
        report = build_report(counted(args.run), allow_mixed=args.allow_mixed)
    except ReportError as error:
        print(f"palette-bench report: {error}", file=sys.stderr)
        return 2
    if args.json:
        write(args.json, json.dumps(to_json(report), indent=2, ensure_ascii=False) + "\n")
    emit_markdown(to_markdown(report), args.out, also=args.json)
    return 0


def counted(path: Path) -> Tally:
    """The tally of every run at or under `path`; ReportError naming the path when there is nothing to report."""
    if not path.exists():
        raise ReportError(f"{path}: no such file or folder")
    if not find(path).ledgers:
        raise ReportError(f"{path}: no {LEDGER_NAME} at or under it — nothing was recorded there")
    result = tally(load(path))
    if not len(result):
        raise ReportError(f"{path}: its ledger(s) hold no valid record ({result.skipped} line(s) skipped)")
    return result


def emit_markdown(markdown: str, out: Path | None, also: Path | None = None) -> None:
    """The Markdown to `out`, saying what was written (and `also`, written beside it), or to stdout."""
    if out is None:
        sys.stdout.write(markdown)
        return
    write(out, markdown)
    print(f"wrote {out}" + (f" and {also}" if also else ""))


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
