"""`palette-bench`: the project's command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import __version__, converse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="palette-bench", description="Benchmark agent hosts driving the Palette skill.")
    parser.add_argument("--version", action="version", version=f"pytest-palette {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    talk = commands.add_parser("converse", help="drive one conversation by hand and show what it left on disk")
    converse.add_arguments(talk)
    talk.set_defaults(run=converse.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
