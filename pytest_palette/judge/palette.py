"""Palette's rules (docs/judge.md), registered through the same hook a project uses for its own skill (rules.py).

Each rule reads only the evidence (evidence.py): the deck, the skill's call trace, our record of the commands.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..cases import Case
from ..replies import ReplyKind, classify_reply, named_slide, named_topic
from ..results.checks import APPROVED_FIRST, CONTEXT_FLAGS, EDITED, NO_DECK, PALETTE_CHECKS, PALETTE_DECK, spun
from ..rules import Failure, Finding, Note, Passed, SkillRules
from .content import coverage, deck_text, figures, headings, not_mentioned, topic_words
from .evidence import MIN_PPTX_BYTES, Evidence

#: The skill the package ships and judges out of the box.
PALETTE = "palette"

POLL_COMMANDS = frozenset({"status", "plan-status"})
#: The job each command starts or asks about: a poll is judged against the job it polls.
JOBS = {"plan": "plan", "edit": "plan", "plan-status": "plan", "start": "build", "status": "build"}
#: A poll that holds at least this long (asked for, or took) waited for the work; one that answers sooner while
#: the work still runs is a spin. Far below deck.py's own holds (60-90 s), far above any process start-up.
HOLD_FLOOR = 10.0


@dataclass(frozen=True)
class CallFacts:
    """What the calls show, read once: the verdict records it, Palette's rules judge it."""

    polls: int
    #: The polls that did not wait for the work (`spinning_polls`), as indexes into the calls.
    spinning: tuple[int, ...]
    first_edit: int | None
    replanned: bool
    context_reached: bool

    @classmethod
    def of(cls, evidence: Evidence) -> CallFacts:
        commands = evidence.commands
        first_edit = commands.index("edit") if "edit" in commands else None
        return cls(
            polls=sum(command in POLL_COMMANDS for command in commands),
            spinning=tuple(spinning_polls(evidence.calls)),
            first_edit=first_edit,
            replanned=first_edit is not None and "plan" in commands[first_edit:],
            context_reached=any(call_args(call).get("context") or call_args(call).get("source")
                                for call in evidence.calls))


def palette_rules(case: Case, evidence: Evidence) -> Iterator[Finding]:
    """Palette's rules, in order (docs/judge.md)."""
    facts = CallFacts.of(evidence)
    commands = evidence.commands
    starts = [i for i, command in enumerate(commands) if command == "start"]
    plans = [i for i, command in enumerate(commands) if command == "plan"]
    expect = case.expect
    if not expect.deck:
        # Nothing else is judged: the user never approved, so there is no deck to inspect.
        if evidence.decks:
            yield Failure(f"a deck was built although the user never approved it — the confirmation gate "
                          f"was skipped ({evidence.decks[0].name})", tuple(starts[:1]), "declined",
                          expected=NO_DECK, observed=evidence.decks[0].name)
        elif evidence.unfinished:
            yield Failure(f"a build was started although the user never approved it — the confirmation gate "
                          f"was skipped (still running in {evidence.unfinished[0]})", tuple(starts[:1]), "declined",
                          expected=NO_DECK, observed="a build still running")
        else:
            yield Passed("declined", expected=NO_DECK, observed=NO_DECK)
        return
    early = built_before_approval(case, evidence)
    if early:
        yield Failure(early[0], (early[1],) if early[1] is not None else (), "confirmation", expected=APPROVED_FIRST,
                      observed="a build before the approval")
    elif case.replies:  # with no reply there is no approval to wait for
        yield Passed("confirmation", expected=APPROVED_FIRST, observed=APPROVED_FIRST)
    if evidence.pptx is None:
        yield Failure(f"no .pptx was produced (no deck.pptx of at least {MIN_PPTX_BYTES:,} bytes under the "
                      "workspace)", tuple(starts[-1:]), "deck", expected=PALETTE_DECK, observed="no .pptx")
        if evidence.unfinished:
            yield Failure(f"a build was still running when the conversation ended: {evidence.unfinished[0]}",
                          tuple(starts[-1:]), "deck", expected=PALETTE_DECK, observed="no .pptx")
        return
    if not evidence.has_plex:
        yield Failure("the .pptx does not carry IBM Plex — it was not rendered by Palette", tuple(starts[-1:]), "deck",
                      expected=PALETTE_DECK, observed="a .pptx without IBM Plex")
    else:
        yield Passed("deck", expected=PALETTE_DECK, observed=PALETTE_DECK)
    if expect.slides is not None:
        if evidence.slides != expect.slides:
            yield Failure(f"asked for {expect.slides} slides, got {evidence.slides}", tuple(starts[-1:]), "slides",
                          expected=expect.slides, observed=evidence.slides)
        else:
            yield Passed("slides", expected=expect.slides, observed=evidence.slides)
    if expect.edit:
        if facts.first_edit is None:
            # What was done instead: the plan drafted again, else the build of the unchanged plan.
            yield Failure(f"the user asked for a change but edit-plan was never called "
                          f"(calls: {', '.join(commands) or 'none'})", tuple((plans[1:] or starts)[:1]), "edit",
                          expected=EDITED, observed="no edit-plan")
        elif facts.replanned:
            yield Failure("edit-plan was called and then the plan was drafted again from scratch — "
                          "the revision the user approved was discarded",
                          tuple([i for i in plans if i > facts.first_edit][:1]), "edit", expected=EDITED,
                          observed="edit-plan, then a new plan")
        else:
            yield Passed("edit", expected=EDITED, observed=EDITED)
    unchanged, untold, told = named_slides_unchanged(case, evidence)
    for words, edit in unchanged:
        yield Failure(words, (edit,), "named_slide")
    if told and not unchanged:
        yield Passed("named_slide")
    spins, polls = len(facts.spinning), facts.polls
    if spins > expect.max_polls:
        yield Failure(f"{spins} status polls did not wait for the work ({polls} polls in all: each answered "
                      f"while it still ran without holding {HOLD_FLOOR:g} s, or asked again about work already "
                      "collected) — each is a model round trip, and the step budget is finite. "
                      "The commands should be holding, not spinning", facts.spinning, "polls",
                      expected=spun(expect.max_polls), observed=spun(spins, polls))
    else:
        yield Passed("polls", expected=spun(expect.max_polls), observed=spun(spins, polls))
    if expect.context:
        if not facts.context_reached:
            yield Failure("pasted material never reached the plan — neither --context nor --source was used, "
                          "so it was retyped or summarised into the request, which loses the grounding",
                          tuple(plans[:1]), "context", expected=CONTEXT_FLAGS, observed="neither")
        else:
            yield Passed("context", expected=CONTEXT_FLAGS, observed=CONTEXT_FLAGS)
    yield from material_missing(case, evidence)
    yield from named_topics_missing(case, evidence)
    yield from questions_acted_on(case, evidence)
    if spins == expect.max_polls and spins:
        yield Note("at the poll ceiling")
    for words in untold:
        yield Note(words)
    if evidence.unfinished:
        yield Note(f"a build was still running when the deck was read: {evidence.unfinished[0]}")


#: The first user of the rules hook: the plugin registers these for the skill named "palette".
PALETTE_RULES = SkillRules(judge=palette_rules, description="Palette's rules (docs/judge.md)", checks=PALETTE_CHECKS)


def built_before_approval(case: Case, evidence: Evidence) -> tuple[str, int | None] | None:
    """A build started before the user approved, in words, and which call it was (None when none did, or when
    the turns' times were not recorded). A case that builds a deck is approved by its last reply; each call is
    placed in the turn it was made in by its time, on the same clock as the turns'. Where no call did, the disk
    may still say so: a build's state file or a deck in the agent's folder as the approving reply was sent
    (`Evidence.builds_before`) — then there is no call to name (None)."""
    starts = evidence.turns_started
    if not case.replies or len(starts) != 1 + len(case.replies):
        return None
    approved_at = starts[-1]
    held = evidence.builds_before[-1] if len(evidence.builds_before) == len(starts) else ()
    for index, call in enumerate(evidence.calls):
        at = call.get("at")
        if call.get("command") == "start" and isinstance(at, (int, float)) and at < approved_at:
            turn = sum(1 for started in starts if started <= at)
            after = "the opening request" if turn <= 1 else f"reply {turn - 1} ({case.replies[turn - 2]!r})"
            line = f", in `{call['line']}`" if call.get("line") else ""
            return (f"the build started before the user approved — the confirmation gate was skipped (it started "
                    f"after {after}{line}; the approval came with reply {len(case.replies)}, {case.replies[-1]!r})",
                    index)
    if held:  # the disk's word: a build some call no record holds started (a changed copy of the script, say)
        return (f"a build was on disk before the user approved — the confirmation gate was skipped "
                f"({', '.join(held)} in the agent's folder when reply {len(case.replies)}, {case.replies[-1]!r}, was "
                "sent; no call the records hold started it)", None)
    return None


def spinning_polls(calls: tuple[dict[str, Any], ...]) -> list[int]:
    """The polls that did not wait for the work they asked about (see `Verdict.spins`), as indexes into `calls`.
    A poll whose hold or answer is not known (a foreign trace) is given the benefit of the doubt."""
    collected: dict[str, bool] = {}
    spins: list[int] = []
    for index, call in enumerate(calls):
        command = str(call.get("command"))
        job = JOBS.get(command)
        if job is None:
            continue
        done = answer_of(call).get("done") is True
        if command not in POLL_COMMANDS:  # it starts the job again
            collected[job] = done
            continue
        if collected.get(job) or not (done or held(call)):
            spins.append(index)
        collected[job] = collected.get(job, False) or done
    return spins


def held(call: dict[str, Any]) -> bool:
    """The call waited for the work: it asked to hold at least HOLD_FLOOR (or did not say), or it took that."""
    asked, took = call_args(call).get("hold_seconds"), call.get("seconds")
    if isinstance(took, (int, float)) and took >= HOLD_FLOOR:
        return True
    return not isinstance(asked, (int, float)) or asked >= HOLD_FLOOR


def answer_of(call: dict[str, Any]) -> dict[str, Any]:
    """The JSON object a call printed, or {} when it printed something else (or it was cut short)."""
    try:
        answer = json.loads(str(call.get("stdout", "")))
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) else {}


def plan_slides(text: str) -> list[str]:
    """A plan's slides ("## " sections), each as its title and lines without [[directives]], for comparison."""
    slides: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("## "):
            slides.append(line[3:].strip())
        elif slides and line and not (line.startswith("[[") and line.endswith("]]")):
            slides[-1] += "\n" + line
    return slides


def named_slides_unchanged(case: Case, evidence: Evidence) -> tuple[list[tuple[str, int]], tuple[str, ...], int]:
    """For each reply that names a slide to change ("fix slide 2, …"), whether the plan's slide changed between
    the plan shown before the reply and the plan after the edits made in its turn: failures, and notes where it
    could not be told (no turn times, no plan text in the calls' answers, a plan format not in "## " sections),
    and how many were told. Each failure comes with the edit call that left the slide as it was."""
    failures: list[tuple[str, int]] = []
    untold: list[str] = []
    told = 0
    starts = evidence.turns_started
    for index, reply in enumerate(case.replies):
        number = named_slide(reply)
        if number is None:
            continue
        said = f"reply {index + 1} ({reply!r}) asked to change slide {number}"
        if len(starts) != 1 + len(case.replies):
            untold.append(f"{said}; whether it changed could not be told (the turns' times were not recorded)")
            continue
        begin = starts[index + 1]
        end = starts[index + 2] if index + 2 < len(starts) else float("inf")
        before, after, edited = None, None, None
        for position, call in enumerate(evidence.calls):
            at, text = call.get("at"), answer_of(call).get("text")
            if JOBS.get(str(call.get("command"))) != "plan" or not isinstance(at, (int, float)):
                continue
            in_turn = begin <= at < end and call.get("command") in ("edit", "plan-status")
            if in_turn and call.get("command") == "edit":
                edited = position
            if not isinstance(text, str):
                continue
            if at < begin:
                before = text
            elif in_turn:
                after = text
        if edited is None:
            continue  # no edit in that turn: the edit rule speaks for it
        old, new = plan_slides(before or ""), plan_slides(after or "")
        if after is None:
            untold.append(f"{said}; whether it changed could not be told (no revised plan's text came back in "
                          "that turn)")
        elif len(old) < number or not new:
            untold.append(f"{said}; whether it changed could not be told (no plan with a slide {number} was "
                          "shown before it)")
        else:
            told += 1
            if len(new) >= number and new[number - 1] == old[number - 1]:
                title = old[number - 1].split("\n")[0]
                failures.append((f"{said}, but the edit left slide {number} as it was (\u201c{title}\u201d)",
                                 edited))
    return failures, tuple(untold), told


def turn_window(case: Case, evidence: Evidence, reply: int) -> tuple[float, float] | None:
    """When the turn of reply `reply` (0-based) began and ended, or None when the turns' times were not recorded."""
    starts = evidence.turns_started
    if len(starts) != 1 + len(case.replies):
        return None
    return starts[reply + 1], starts[reply + 2] if reply + 2 < len(starts) else float("inf")


def in_window(call: dict[str, Any], window: tuple[float, float]) -> bool:
    at = call.get("at")
    return isinstance(at, (int, float)) and window[0] <= at < window[1]


def material_missing(case: Case, evidence: Evidence) -> Iterator[Finding]:
    """Rule 10: the figures and headings of the pasted material are in the deck's text, at least the share the
    case asks for (`expect.content`). Blames the plan call that was given the material (or should have been)."""
    expect = case.expect
    if not (expect.context and expect.content > 0 and evidence.pptx is not None):
        return
    if not figures(case.context) and not headings(case.context):
        return  # prose without a figure or a heading: nothing this rule can look for
    text = deck_text(evidence.pptx)
    if text is None:
        yield Note("whether the pasted material's figures and headings reached the deck could not be told (its "
                   "text could not be read)")
        return
    covered = coverage(case.context, text)
    # Full credit at the share the case asks for, part below it: "carries 86%" is nearer a pass than "carries 0%".
    share, credit = round(covered.share, 4), round(min(1.0, covered.share / expect.content), 4)
    if covered.share < expect.content:
        given = [i for i, call in enumerate(evidence.calls)
                 if call.get("command") == "plan" and (call_args(call).get("context") or call_args(call).get("source"))]
        plans = [i for i, command in enumerate(evidence.commands) if command == "plan"]
        yield Failure(f"{covered.missing()} (the deck carries {covered.share:.0%} of its {covered.total} figures "
                      f"and headings; the case asks for at least {expect.content:.0%})", tuple((given or plans)[:1]),
                      "content", credit, share, expected=expect.content, observed=share)
    else:
        yield Passed("content", credit, share, f"the deck carries {covered.share:.0%} of the pasted material's "
                                               f"{covered.total} figures and headings", expected=expect.content,
                     observed=share)


def named_topics_missing(case: Case, evidence: Evidence) -> Iterator[Finding]:
    """Rule 11: a change that names a subject ("add a slide on X", "include X") — its words are in the plan revised
    in that turn, or in the deck. Blames the edit (or plan) of that turn, else the build."""
    starts = [i for i, command in enumerate(evidence.commands) if command == "start"]
    for index, reply in enumerate(case.replies):
        topic = named_topic(reply)
        words = topic_words(topic) if topic else []
        if not words or evidence.pptx is None:
            continue
        window = turn_window(case, evidence, index)
        revised, changed = None, None
        for position, call in enumerate(evidence.calls):
            if window is None or JOBS.get(str(call.get("command"))) != "plan" or not in_window(call, window):
                continue
            if call.get("command") in ("edit", "plan"):
                changed = position
            text = answer_of(call).get("text")
            revised = text if isinstance(text, str) else revised
        if revised is not None and not not_mentioned(revised, words):
            yield Passed("subject", expected=topic, observed="covered")
            continue
        text = deck_text(evidence.pptx)
        said = f"reply {index + 1} ({reply!r}) asked for {topic}"
        if text is None:
            yield Note(f"{said}; whether the deck covers it could not be told (its text could not be read)")
            continue
        absent = not_mentioned(text, words)
        if not absent:
            yield Passed("subject", expected=topic, observed="covered")
            continue
        listed = ", ".join(f"\u201c{word}\u201d" for word in absent)
        if changed is not None:
            yield Failure(f"{said}, but the edit left it out: neither the plan revised in that turn nor the deck "
                          f"mentions it (no {listed})", (changed,), "subject", expected=topic, observed="left out")
        else:
            yield Failure(f"{said}, but the deck does not mention it (no {listed})", tuple(starts[-1:]), "subject",
                          expected=topic, observed="left out")


#: What the question check expects: an answer, and nothing changed in its turn.
ANSWERED = "an answer, nothing changed"
#: The calls that change what will be built: none belongs in the turn of a question.
CHANGING = frozenset({"plan", "edit", "start"})


def questions_acted_on(case: Case, evidence: Evidence) -> Iterator[Finding]:
    """Rule 12: a reply that asks a question gets an answer before anything is built — in its turn no plan, edit or
    build, and the agent said something (turns.json, the harness's record: whether it spoke, never what it
    claimed)."""
    for index, reply in enumerate(case.replies):
        if classify_reply(reply) is not ReplyKind.QUESTION:
            continue
        said = f"reply {index + 1} ({reply!r}) asked a question"
        window = turn_window(case, evidence, index)
        if window is None:
            yield Note(f"{said}; whether it was answered before anything changed could not be told (the turns' "
                       "times were not recorded)")
            continue
        acted = tuple(i for i, call in enumerate(evidence.calls)
                      if call.get("command") in CHANGING and in_window(call, window))
        if acted:
            done = ", ".join(str(evidence.calls[i].get("command")) for i in acted)
            yield Failure(f"{said}, but the agent acted on it instead of answering ({done} in that turn): a question "
                          "asks for nothing to change", acted, "question", expected=ANSWERED,
                          observed=f"{done} in its turn")
        answers = evidence.answers
        silent = len(answers) == 1 + len(case.replies) and not answers[index + 1].strip()
        if silent:
            yield Failure(f"{said}, but the agent said nothing in that turn", (), "question", expected=ANSWERED,
                          observed="said nothing")
        if not acted and not silent:
            yield Passed("question", expected=ANSWERED, observed=ANSWERED)


def call_args(call: dict[str, Any]) -> dict[str, Any]:
    """A call's arguments; a foreign trace line without a mapping there has none."""
    args = call.get("args")
    return args if isinstance(args, dict) else {}

