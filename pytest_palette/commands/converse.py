"""Drive one conversation by hand: `palette-bench converse --host react --model rehearsal "..." --reply yes`."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ..arena.workspace import Workspace
from ..backend import describe_backend
from ..hosts import builtin, builtin_classes
from ..hosts.base import COMMAND_TIMEOUT, TURN_TIMEOUT, HostError, HostSettings, OptionRefused, TurnRecord
from ..judge.evidence import format_call, inspect_deck, newest_deck, read_trace
from ..layer.route import route_of
from ..models import ModelUnavailable, parse_model
from ..run.conversation import Transcript, conversation_environment, open_sandbox
from ..run.readiness import readiness
from ..skill import PACKAGED_SKILLS, InstallError, SkillNotFound, load_skill, skill_hash


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("request", help="the opening message (a request, maybe with pasted material)")
    parser.add_argument("--reply", action="append", default=[],
                        help="a reply sent each time the agent hands the turn back (repeatable, in order)")
    drivable = ", ".join(host.name for host in builtin_classes() if not host.hands_over)
    parser.add_argument("--host", default="react", help=f"the agent host: {drivable}")
    parser.add_argument("--model", default="rehearsal",
                        help="rehearsal (offline), watsonx:<model_id>, or any provider:model LangChain knows")
    parser.add_argument("--workspace", type=Path, default=None,
                        help="the conversation's working directory (default: the current directory)")
    parser.add_argument("--context-file", type=Path, default=None,
                        help="material pasted under the request (a blank line apart), read from this file")
    parser.add_argument("--skills-root", type=Path, default=PACKAGED_SKILLS,
                        help="the folder holding skill folders (default: the reference Palette skill)")
    parser.add_argument("--skill", default="palette", help="the skill under test")
    parser.add_argument("--command-timeout", type=float, default=COMMAND_TIMEOUT,
                        help="seconds one shell command may run (must outlast deck.py's holds)")
    parser.add_argument("--turn-timeout", type=float, default=TURN_TIMEOUT, help="seconds one agent turn may run")
    parser.add_argument("--sandbox", default="bubblewrap", choices=("bubblewrap", "none"),
                        help="where the agent's commands run (default bubblewrap; none: unconfined)")
    added: set[str] = set()
    for host in builtin_classes():  # each host's own options, spelled without pytest's `palette-`
        for option in host.options:
            if option.name not in added:
                option.add_to(parser.add_argument, prefix="")
                added.add(option.name)


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
    hosts = builtin()
    drivable = sorted(name for name, host in hosts.items() if not host.hands_over)
    if args.host not in drivable:
        out(f"error: --host {args.host!r} is not a host this command drives; known: {', '.join(drivable)}")
        return 2
    host = hosts[args.host]
    try:
        host.configure({option.name: getattr(args, option.dest(""), None) for option in host.options})
    except OptionRefused as refused:
        out(f"error: --{refused.option} {refused}")
        return 2
    try:
        spec = parse_model(args.model)
        card = load_skill(args.skill, args.skills_root)
    except (ModelUnavailable, SkillNotFound) as error:
        out(f"error: {error}")
        return 2
    settings = HostSettings(command_timeout=args.command_timeout, sandbox=args.sandbox)
    ready = readiness({args.host: host}, spec, settings, None)
    problems = [*ready.settings, *filter(None, [ready.confinement]), *map(str, ready.hosts[args.host])]
    if problems:
        for problem in problems:
            out(f"error: {problem}")
        return 2

    workspace = Workspace.here((args.workspace or Path.cwd()).resolve())
    workspace.folder.mkdir(parents=True, exist_ok=True)
    if workspace.trace.exists():
        # A new conversation gets a new trace; the old one is kept, not overwritten.
        kept = workspace.trace.with_name(f"palette-calls.{int(workspace.trace.stat().st_mtime)}.jsonl")
        workspace.trace.rename(kept)
        out(f"(kept the previous trace as {kept.name})")
    opening = args.request
    if args.context_file is not None:
        opening = f"{opening}\n\n{args.context_file.read_text(encoding='utf-8')}"

    route = route_of(spec)
    described = host.describe(route, settings)
    out(f"host {args.host} · model {described.get('model', spec.label)} · skill {card.directory} "
        f"({skill_hash(card.directory)})")
    out(f"palette: {describe_backend()} · workspace {workspace.folder} · commands "
        f"{host.sandbox_kind(settings)}")
    transcript = Transcript()
    status = 0
    started = time.monotonic()
    sandbox = open_sandbox(workspace, settings)
    try:
        sandbox.prepare()
        session = host.open(workspace, card, conversation_environment(workspace), route, settings, sandbox)
    except (HostError, InstallError) as error:
        out(f"error ! could not start: {error}")
        sandbox.close()
        host.close()
        return 1
    streamed: list[str] = []

    def stream(line: str) -> None:
        streamed.append(line)
        out(f"  {line}")

    session.on_step = stream
    try:
        for message in [opening, *_replies(args.reply, sys.stdin.isatty() and not args.reply, input)]:
            out(f"\nyou ▸ {message if len(message) < 400 else message[:400] + f' … [+{len(message) - 400} chars]'}")
            streamed.clear()
            try:
                turn = session.send(message, args.turn_timeout)
            except HostError as error:
                transcript.turns.append(error.turn or TurnRecord(sent=message, error=str(error)))
                out(f"error ! {error}")
                status = 1
                break
            transcript.turns.append(turn)
            if not streamed:  # a client that reports its steps only when the turn is over
                for line in turn.steps:
                    out(f"  {line}")
            out(f"agent ◂ {turn.answer}")
    finally:
        session.close()
        sandbox.close()
        host.close()
    transcript.seconds = round(time.monotonic() - started, 3)
    transcript.save(workspace)
    out(f"\n— {len(transcript.turns)} turn(s) in {transcript.seconds:.1f}s")
    _summarise(workspace, out)
    return status


def _summarise(workspace: Workspace, out: Callable[[str], None]) -> None:
    deck = newest_deck(workspace.work)
    if deck is None:
        out("deck: none")
    else:
        facts = inspect_deck(deck)
        plex = "IBM Plex on slide 1" if facts.has_plex else "NO IBM Plex on slide 1: not rendered by Palette"
        out(f"deck: {facts.path} · {facts.size:,} bytes · {facts.slides} slides · {plex}")
    calls = read_trace(workspace.trace)
    out(f"trace: {workspace.trace} ({len(calls)} call{'s' if len(calls) != 1 else ''})")
    for call in calls:
        out(f"  {format_call(call)}")
