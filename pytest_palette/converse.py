"""Drive one conversation by hand: `palette-bench converse --host react --model rehearsal "..." --reply yes`."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from .backend import agent_environment, describe_backend
from .evidence import TRACE_NAME, format_call, inspect_deck, newest_deck, read_trace
from .hosts.base import HostError
from .hosts.react import DEFAULT_RECURSION_LIMIT, ReactSession
from .hosts.shell import DEFAULT_COMMAND_TIMEOUT
from .models import ModelUnavailable, build_chat_model, parse_model
from .skill import PACKAGED_SKILLS, SkillNotFound, load_skill, skill_hash

HOSTS = ("react",)
DEFAULT_TURN_TIMEOUT = 1500.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("request", help="the opening message (a request, maybe with pasted material)")
    parser.add_argument("--reply", action="append", default=[],
                        help="a reply sent each time the agent hands the turn back (repeatable, in order)")
    parser.add_argument("--host", default="react", help=f"the agent host ({', '.join(HOSTS)})")
    parser.add_argument("--model", default="rehearsal",
                        help="rehearsal (offline), watsonx:<model_id>, or any provider:model LangChain knows")
    parser.add_argument("--workspace", type=Path, default=None,
                        help="the conversation's working directory (default: the current directory)")
    parser.add_argument("--context-file", type=Path, default=None,
                        help="material pasted under the request (a blank line apart), read from this file")
    parser.add_argument("--skills-root", type=Path, default=PACKAGED_SKILLS,
                        help="the folder holding skill folders (default: the reference Palette skill)")
    parser.add_argument("--skill", default="palette", help="the skill under test")
    parser.add_argument("--eager", action="store_true", help="inline the skill in the system prompt")
    parser.add_argument("--recursion-limit", type=int, default=DEFAULT_RECURSION_LIMIT)
    parser.add_argument("--command-timeout", type=float, default=DEFAULT_COMMAND_TIMEOUT,
                        help="seconds one shell command may run (must outlast deck.py's holds)")
    parser.add_argument("--turn-timeout", type=float, default=DEFAULT_TURN_TIMEOUT,
                        help="seconds one agent turn may run")


def _replies(given: list[str], interactive: bool, ask: Callable[[str], str]) -> Iterator[str]:
    yield from given
    while interactive:
        try:
            reply = ask("you ▸ ").strip()
        except EOFError:
            return
        if not reply:
            return
        yield reply


def run(args: argparse.Namespace, out: Callable[[str], None] = print) -> int:
    """Run the conversation; 0 when every turn ran, 1 on a host failure, 2 on a usage error."""
    if args.host not in HOSTS:
        out(f"error: --host {args.host!r} is not a host this command drives; known: {', '.join(HOSTS)}")
        return 2
    try:
        spec = parse_model(args.model)
        model = build_chat_model(spec)
        card = load_skill(args.skill, args.skills_root)
    except (ModelUnavailable, SkillNotFound) as error:
        out(f"error: {error}")
        return 2

    workspace = (args.workspace or Path.cwd()).resolve()
    workspace.mkdir(parents=True, exist_ok=True)
    trace = workspace / TRACE_NAME
    if trace.exists():
        # A new conversation gets a new trace; the old one is kept, not overwritten.
        kept = trace.with_name(f"palette-calls.{int(trace.stat().st_mtime)}.jsonl")
        trace.rename(kept)
        out(f"(kept the previous trace as {kept.name})")
    opening = args.request
    if args.context_file is not None:
        opening = f"{opening}\n\n{args.context_file.read_text(encoding='utf-8')}"

    out(f"host {args.host} · model {spec.label} · skill {card.directory} ({skill_hash(card.directory)})")
    out(f"palette: {describe_backend()} · workspace {workspace}")
    session = ReactSession(
        model, [card], workspace, agent_environment(trace), eager=args.eager,
        recursion_limit=args.recursion_limit, command_timeout=args.command_timeout,
    )
    status = 0
    started = time.monotonic()
    messages = [opening, *_replies(args.reply, sys.stdin.isatty() and not args.reply, input)]
    for message in messages:
        out(f"\nyou ▸ {message if len(message) < 400 else message[:400] + f' … [+{len(message) - 400} chars]'}")
        try:
            turn = session.send(message, args.turn_timeout, on_event=lambda line: out(f"  {line}"))
        except HostError as error:
            out(f"error ! {error}")
            status = 1
            break
        out(f"agent ◂ {turn.answer}")
    out(f"\n— {len(session.turns)} turn(s) in {time.monotonic() - started:.1f}s")
    _summarise(workspace, trace, out)
    return status


def _summarise(workspace: Path, trace: Path, out: Callable[[str], None]) -> None:
    deck = newest_deck(workspace)
    if deck is None:
        out("deck: none")
    else:
        facts = inspect_deck(deck)
        plex = "IBM Plex on slide 1" if facts.has_plex else "NO IBM Plex on slide 1: not rendered by Palette"
        out(f"deck: {facts.path} · {facts.size:,} bytes · {facts.slides} slides · {plex}")
    calls = read_trace(trace)
    out(f"trace: {trace} ({len(calls)} call{'s' if len(calls) != 1 else ''})")
    for call in calls:
        out(f"  {format_call(call)}")
