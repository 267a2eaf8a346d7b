"""`palette-bench compare RUN_A RUN_B`: before vs after, per case and host, with the paired test."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..results.compare import SAME_SKILL, compare, to_markdown
from ..results.model import ReportError
from .report import counted, emit_markdown, refuse_outputs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("before", type=Path, metavar="RUN_A", help="the earlier run (or folder of shards)")
    parser.add_argument("after", type=Path, metavar="RUN_B", help="the later run (or folder of shards)")
    parser.add_argument("--out", type=Path, help="write the Markdown here instead of printing it")


def run(args: argparse.Namespace) -> int:
    try:
        refuse_outputs(("--out", args.out, "compare.md"))
        comparison = compare(counted(args.before), counted(args.after))
        emit_markdown(to_markdown(comparison), args.out)
    except ReportError as error:
        print(f"palette-bench compare: {error}", file=sys.stderr)
        return 2
    if not comparison.skill_changed:
        print(f"warning: {SAME_SKILL}", file=sys.stderr)
    return 0
