"""`palette-bench diff RUN_A RUN_B`: two recordings of the same cases, item by item — the first answer of the model
that differs (its turn and call in each, what each answered), or that they answered the same throughout.

Items are matched by their folder (`<host>/<case>[-k]`); each run's cassettes are read as every saved run is, as
regular files inside the run (arena/cassette.py). Exit 0 when every item answered the same, 1 when one differs
(as `diff` does), 2 when a run cannot be read."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path, PurePosixPath

from ..arena.cassette import Exchange, read_cassette
from ..arena.replay import first_difference
from ..arena.workspace import UnsafeRecord, Workspace
from ..results.ledger import load
from .show import run_folder


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("before", type=Path, metavar="RUN_A", help="a run recorded with --palette-record")
    parser.add_argument("after", type=Path, metavar="RUN_B", help="another recording of the same cases")
    parser.add_argument("--case", action="append", default=[], help="only this case (repeatable)")


def recordings(folder: Path, cases: list[str]) -> dict[PurePosixPath, list[Exchange]] | str:
    """Each recorded item of the run at `folder` by its folder in the run, or why there is none to read."""
    records = list(load(folder).latest.values())
    if not records:
        return f"no results.jsonl with records under {folder}"
    found: dict[PurePosixPath, list[Exchange]] = {}
    for record in records:
        if cases and record.case not in cases:
            continue
        try:
            workspace = Workspace.locate(folder, record)
        except UnsafeRecord as refused:
            print(f"palette-bench diff: warning: {refused}", file=sys.stderr)
            continue
        exchanges = read_cassette(workspace.folder)
        if exchanges:
            found[workspace.relative] = exchanges
    if not found:
        return f"no item of {folder} has a cassette (record a run with --palette-record)"
    return found


def run(args: argparse.Namespace) -> int:
    sides = [recordings(run_folder(path), args.case) for path in (args.before, args.after)]
    for path, side in zip((args.before, args.after), sides, strict=True):
        if isinstance(side, str):
            print(f"palette-bench diff: {path}: {side}", file=sys.stderr)
            return 2
    before, after = sides
    assert not isinstance(before, str) and not isinstance(after, str)
    differ = 0
    for item in sorted(set(before) | set(after)):
        if item not in after or item not in before:
            print(f"{item}: recorded in {'RUN_A' if item in before else 'RUN_B'} only")
            differ += 1
            continue
        found = first_difference(before[item], after[item])
        if found is None:
            answers = sum(not e.error and e.answer is not None for e in before[item])
            print(f"{item}: the same {answers} answer(s)")
        else:
            print(f"{item}: {found}")
            differ += 1
    print(f"{differ} of {len(set(before) | set(after))} item(s) differ")
    return 1 if differ else 0
