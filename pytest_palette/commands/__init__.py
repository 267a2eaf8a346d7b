"""`palette-bench`: the project's command line. Each command is a module here: its arguments and its output."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import sys
import warnings
from collections.abc import Sequence
from typing import TextIO

from .. import __version__
from ..results.redaction import Secrets
from ..run.credentials import secrets_here

# (command, module, summary). Modules are imported only for the command that runs: converse pulls in
# langgraph (~1 s), which `report` over a big ledger cannot afford.
COMMANDS = (
    ("converse", "converse", "drive one conversation by hand and show what it left on disk"),
    ("show", "show", "one run in depth: each call with its arguments and output, each failure"),
    ("rejudge", "rejudge", "the current judge over a saved run, with no host; lists every changed verdict"),
    ("report", "report", "every run's ledger under the folders given as Markdown (and JSON): scores, pass@k, "
                         "metrics; a run with the skill beside one without it: the lift"),
    ("compare", "compare", "two runs before vs after (or with the skill vs without it), per case and host, with a "
                           "paired exact test"),
    ("diff", "diff", "two recordings of the same cases (--palette-record): the first answer of the model that "
                     "differs, item by item"),
    ("grade", "grade", "a task family's hooks and hidden tests over a saved or hand-made agent's folder, with no "
                       "agent; the exit status is the verdict"),
    ("export", "export", "one row per item run as CSV or Parquet, for DuckDB, pandas or a spreadsheet; "
                          "or inspect_ai eval logs, for inspect view"),
    ("view", "view", "a static HTML site to look at: the matrix, a page per item with its slides, comparisons"),
)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; with `only`, just that subcommand's module is imported (the others keep their help line)."""
    parser = argparse.ArgumentParser(prog="palette-bench",
                                     description="Benchmark agent hosts driving the Palette skill.")
    parser.add_argument("--version", action="version", version=f"pytest-palette {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, module_name, summary in COMMANDS:
        sub = commands.add_parser(name, help=summary, description=summary)
        if only is None or only == name:
            module = importlib.import_module(f"{__package__}.{module_name}")
            module.add_arguments(sub)
            sub.set_defaults(handler=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # The first bare word is the command (the top level has only --help and --version).
    chosen = next((word for word in argv if not word.startswith("-")), None)
    known = {name for name, _, _ in COMMANDS}
    args = build_parser(chosen if chosen in known else None).parse_args(argv)
    formatting = warnings.formatwarning
    warnings.formatwarning = _one_line  # what was read past, said in one line on stderr
    secrets = secrets_here()
    try:
        # Whatever a command prints, no secret of this machine's (results/redaction.py).
        with contextlib.redirect_stdout(Scrubbed(sys.stdout, secrets)), \
                contextlib.redirect_stderr(Scrubbed(sys.stderr, secrets)):
            return int(args.handler(args))
    except BrokenPipeError:  # `palette-bench show RUN | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    finally:
        warnings.formatwarning = formatting


def _one_line(message: Warning | str, category: type[Warning], filename: str, lineno: int,
              line: str | None = None) -> str:
    return f"palette-bench: warning: {message}\n"


class Scrubbed(io.TextIOBase):
    """A text stream that writes through to `stream` with every secret taken out."""

    def __init__(self, stream: TextIO, secrets: Secrets) -> None:
        super().__init__()
        self.stream, self.secrets = stream, secrets

    def write(self, text: str) -> int:
        self.stream.write(self.secrets.scrub(text))
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def fileno(self) -> int:
        return self.stream.fileno()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def writable(self) -> bool:
        return True
