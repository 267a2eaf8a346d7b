"""`palette-bench view RUN [RUN …] --out DIR`: a static site to look at — the matrix with the decks' first slides,
a page per item (slides, plan and its revisions, the conversation, the calls on a timeline, the judge's words),
and comparisons of two runs or two hosts. It opens from file://, with no server."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..run.credentials import secrets_here
from ..site.build import SiteError, write

#: Files of the run folders left out of the site named here one by one; the rest are counted (each item's page
#: names its own).
LEFT_OUT_SHOWN = 10


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", type=Path, nargs="+", metavar="RUN",
                        help="a run folder, or a folder of runs; two runs also get a before → after comparison")
    parser.add_argument("--out", type=Path, required=True,
                        help="the folder to write the site into (new, empty, or a site written here before)")


def run(args: argparse.Namespace) -> int:
    try:
        # Absolute: each file of a run is read as a path inside it, and a relative one (`view runs/<id>`) is not.
        written = write([run.absolute() for run in args.runs], args.out, secrets=secrets_here())
    except SiteError as error:
        print(f"palette-bench view: {error}", file=sys.stderr)
        return 2
    for page, line in written.left_out[:LEFT_OUT_SHOWN]:
        print(f"left out: {line} ({page})")
    if len(written.left_out) > LEFT_OUT_SHOWN:
        print(f"left out: {len(written.left_out) - LEFT_OUT_SHOWN} more, each named on its item's page")
    print(f"wrote {written.pages} pages for {written.items} item(s) in {written.seconds:.1f} s: "
          f"{written.index.resolve().as_uri()}")
    return 0
