"""`palette-bench report RUN_OR_FOLDER [...]`: every run's ledger under the folders given, as Markdown and JSON. A
run with the skill and one with `--palette-skill none` report together as the skill's lift."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..results.ledger import load, nothing_at
from ..results.markdown import to_markdown
from ..results.model import ReportError, build_report
from ..results.report_json import to_json
from ..results.tally import Tally, tally
from ..run.credentials import secrets_here


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", type=Path, nargs="+", metavar="RUN_OR_FOLDER",
                        help="a run folder, or a folder of runs or shards: each run's ledger is read (a run with "
                             "the skill and one with --palette-skill none: the lift of the skill over no skill)")
    parser.add_argument("--out", type=Path, help="write the Markdown here instead of printing it")
    parser.add_argument("--json", type=Path, help="also write the numbers as JSON here")
    parser.add_argument("--allow-mixed", action="store_true",
                        help="report records of different skill hashes or fingerprints side by side (never pooled)")


def run(args: argparse.Namespace) -> int:
    try:
        refuse_outputs(("--out", args.out, "report.md"), ("--json", args.json, "report.json"))
        report = build_report(counted(*args.runs), allow_mixed=args.allow_mixed)
        if args.json:
            data = secrets_here().scrub_data(to_json(report))  # each string, so that JSON stays JSON
            write(args.json, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        emit_markdown(to_markdown(report), args.out, also=args.json)
    except ReportError as error:
        print(f"palette-bench report: {error}", file=sys.stderr)
        return 2
    return 0


def refuse_outputs(*outputs: tuple[str, Path | None, str]) -> None:
    """ReportError for an output named as a folder (flag, path, a file name to suggest), before any work."""
    for flag, path, example in outputs:
        if path is not None and path.is_dir():
            raise ReportError(f"{flag} {path}: is a folder; name a file, e.g. {flag} {path / example}")


def counted(path: Path, *more: Path) -> Tally:
    """The tally of every run at or under each path; ReportError naming a path with nothing to report."""
    for given in (path, *more):
        missing = nothing_at(given)
        if missing:
            raise ReportError(missing)
    result = tally(load(path, *more))
    if not len(result):
        named = ", ".join(map(str, (path, *more)))
        raise ReportError(f"{named}: the ledger(s) hold no valid record ({result.skipped} line(s) skipped)")
    return result


def emit_markdown(markdown: str, out: Path | None, also: Path | None = None) -> None:
    """The Markdown to `out`, saying what was written (and `also`, written beside it), or to stdout."""
    if out is None:
        sys.stdout.write(markdown)
        return
    write(out, markdown)
    print(f"wrote {out}" + (f" and {also}" if also else ""))


def write(path: Path, text: str) -> None:
    """`text` into `path`, with no secret of this machine's in it (results/redaction.py); ReportError in one line
    when it cannot be written (a folder, a file as a folder…)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets_here().scrub(text), encoding="utf-8")
    except OSError as error:
        raise ReportError(f"{path}: cannot be written ({error.strerror or error})") from None
