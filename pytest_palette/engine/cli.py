"""Command line of the reference engine, mirroring Palette's palette.py.

    python -m pytest_palette.engine build-plan REQUEST --out PATH [--context TEXT] [--source PATH ...]
    python -m pytest_palette.engine edit-plan INSTRUCTION --plan PATH --out PATH
    python -m pytest_palette.engine build-deck --plan PATH --out-dir DIR [--json] [--palette-family NAME]
    python -m pytest_palette.engine --home      the folder to set PALETTE_HOME to (it holds a palette.py)

Exit 0 on success; otherwise one ``error: ...`` line on stderr (always the last line) and exit 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from . import ENGINE_NAME
from .errors import EngineError
from .latency import ENV_VAR, latency_for, parse_latency, simulate
from .plan_format import Plan, serialize_plan

DESCRIPTION = (
    f"{ENGINE_NAME}: an offline, deterministic stand-in for the Palette service, for tests and "
    "benchmarks. It is not the real Palette service."
)


class _Parser(argparse.ArgumentParser):
    """Usage errors follow the same contract as every other failure: one line, exit 1."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {message} (run with --help for usage)\n")
        raise SystemExit(1)


#: A folder shaped like a Palette checkout: its palette.py runs this engine.
HOME = Path(__file__).parent / "home"


class _PrintHome(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> NoReturn:
        print(HOME)
        raise SystemExit(0)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m pytest_palette.engine", description=DESCRIPTION)
    parser.add_argument("--home", action=_PrintHome, nargs=0,
                        help="print the folder to set PALETTE_HOME to: its palette.py runs this engine, so a "
                             "deck.py written for the real Palette runs against it")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    plan = sub.add_parser("build-plan", help="draft a plan from a request (and pasted material)")
    plan.add_argument("request")
    plan.add_argument("--out", required=True, help="where to write the plan markdown")
    plan.add_argument("--context", default=None, help="pasted material, verbatim")
    plan.add_argument("--source", action="append", default=[], help="a .md/.txt file of material (repeatable)")
    edit = sub.add_parser("edit-plan", help="revise a plan with the user's instruction")
    edit.add_argument("instruction")
    edit.add_argument("--plan", required=True)
    edit.add_argument("--out", required=True, help="where to write the revised plan (may equal --plan)")
    deck = sub.add_parser("build-deck", help="render a plan to deck.pptx, deck.json and slide-N.png")
    deck.add_argument("--plan", required=True)
    deck.add_argument("--out-dir", required=True)
    deck.add_argument("--json", action="store_true", help="print one JSON object describing the deck")
    deck.add_argument("--palette-family", default=None, help="colour scheme (default ibm_watsonx)")
    return parser


def write_atomic(path: Path, text: str) -> None:
    """Write via a temp file and rename, so a poller never reads half a plan."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temp.write_text(text, encoding="utf-8")
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


def _finish_plan(plan: Plan, out: Path, stage: str, say: Callable[[str], None]) -> None:
    delay = latency_for(stage)
    if delay > 0:
        say(f"simulated latency: {delay:g}s (PALETTE_ENGINE_LATENCY)")
        simulate(delay)
    write_atomic(out, serialize_plan(plan))
    say(f"wrote {len(plan.sections)}-slide plan \u201c{plan.title}\u201d to {out}")


def _run(args: argparse.Namespace, say: Callable[[str], None]) -> int:
    if args.command == "build-plan":
        from .planner import build_plan

        say(f"{ENGINE_NAME}: drafting a plan")
        _finish_plan(build_plan(args.request, args.context, args.source), Path(args.out), "plan", say)
        return 0
    if args.command == "edit-plan":
        from .build import read_plan
        from .editor import edit_plan

        say(f"{ENGINE_NAME}: revising {args.plan}")
        plan = edit_plan(read_plan(Path(args.plan)), args.instruction)
        say(f"revision: {plan.revisions[-1]}")
        _finish_plan(plan, Path(args.out), "edit", say)
        return 0
    from .build import build_deck

    say(f"{ENGINE_NAME}: building a deck from {args.plan}")
    info = build_deck(Path(args.plan), Path(args.out_dir), args.palette_family, latency_for("build"), say)
    say(f"wrote {info['deck']} ({info['slides']} slides, {info['bytes']} bytes)")
    if args.json:
        print(json.dumps(info), flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # With --json, stdout carries exactly one JSON object, so progress goes to stderr.
    stream = sys.stderr if getattr(args, "json", False) else sys.stdout

    def say(line: str) -> None:
        print(line, file=stream, flush=True)

    try:
        parse_latency(os.environ.get(ENV_VAR))  # a malformed setting fails every stage up front
        return _run(args, say)
    except EngineError as exc:
        sys.stderr.write(f"error: {exc}\n")
    except Exception as exc:  # a bug: keep the traceback for the log, but end with the one-line error
        traceback.print_exc()
        sys.stderr.write(f"error: {ENGINE_NAME} failed: {type(exc).__name__}: {exc}\n")
    return 1
