"""What each known-bad agent must fail, derived from the case definitions (docs/known-bad-agents.md): the
oracle of the suite's mutation tests and of benchmarks/known_bad_hosts.py. It lives with the tests, not in
the package: the package's agents must not know the cases they are judged on."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pytest_palette.arena.cassette import read_cassette
from pytest_palette.cases import Case
from pytest_palette.judge.content import figures, headings
from pytest_palette.rehearsal.known_bad import Spins
from pytest_palette.rehearsal.policy import RehearsalPolicy
from pytest_palette.replies import ReplyKind, classify_reply, named_slide, named_topic

#: What a class of a known-bad agent's diverging cases is alike in (`classes`).
ClassKey = tuple[tuple[str, ...], tuple[Any, ...]]


def expected_failures(cases: Iterable[Case]) -> dict[str, tuple[frozenset[str], str]]:
    """Each known-bad agent's cases to fail, and a phrase each of those cases' failures carries (one of several,
    "|"-separated, where its flaw shows in more than one rule)."""
    cases = list(cases)

    def named(keep: Callable[[Case], bool]) -> frozenset[str]:
        return frozenset(case.name for case in cases if keep(case))

    deck = named(lambda c: c.expect.deck)
    edit = named(lambda c: c.expect.edit)
    conditional = named(lambda c: any(classify_reply(r) is ReplyKind.CHANGE and r.lower().startswith(("yes", "ok"))
                                      for r in c.replies))
    # The content rule's cases: pasted material with a figure or a heading to look for, and a share asked for.
    substance = named(lambda c: c.expect.deck and c.expect.context and c.expect.content > 0
                      and bool(figures(c.context) or headings(c.context)))
    named_what = named(lambda c: c.expect.deck and any(named_slide(r) is not None or named_topic(r) is not None
                                                       for r in c.replies))
    question = named(lambda c: c.expect.deck and any(classify_reply(r) is ReplyKind.QUESTION for r in c.replies))
    return {
        # It builds once the plan is drafted: before the approval of every case that drives the skill and has a reply
        # to wait for (a near miss drafts no plan: like the good agent, it answers in words).
        "builds_early": (named(lambda c: c.expect.skill and bool(c.replies)), "the confirmation gate was skipped"),
        "retypes_context": (named(lambda c: c.expect.context), "pasted material never reached the plan"),
        "replans": (edit, "edit-plan was never called"),
        # Its zero-second polls are judged by what they were, never timed: each answers "still running" or repeats
        # a build already collected (the first "done" is a collection), so at least all but one count, on any
        # machine — every deck case whose ceiling is below that.
        "spins": (named(lambda c: c.expect.deck and c.expect.max_polls < Spins.polls_per_build - 1), "status polls"),
        "yes_but_is_yes": (conditional, "edit-plan was never called"),
        "never_edits": (edit, "edit-plan was never called"),
        "hand_writes": (deck, "does not carry IBM Plex"),
        # It plans a deck from any request: exactly the near misses, which need no skill, fail.
        "always_triggers": (named(lambda c: not c.expect.skill), "the skill was used although the request needed none"),
        # Its summary reaches --context, so the context rule passes; the figures and headings do not reach the deck,
        # nor do the points of a rubric on pasted material (a case's rubric names what the material says).
        "summarises_context": (substance | named(lambda c: c.expect.deck and c.expect.context
                                                 and c.expect.rubric is not None),
                               "of the pasted material are not in the deck|the rubric was graded"),
        # "polish the plan" leaves the named slide as it was and the named subject out; both rules say so.
        "vague_edits": (named_what, "but the edit left"),
        "questions_are_changes": (question, "asked a question, but the agent acted on it"),
    }


def expected_errors(cases: Iterable[Case]) -> dict[str, tuple[frozenset[str], str]]:
    """Each looping agent's cases to end as an ERROR of the run, and the words every one of those ERRORs carries: a
    turn that never ends is no verdict on the skill."""
    cases = list(cases)
    return {
        # It loops where it would say the deck is ready: in every case whose deck gets built, and in no other.
        "loops": (frozenset(case.name for case in cases if case.expect.deck), "ended at the step budget"),
    }


#: The checks each known-bad agent's flaw fails (docs/judge.md, "Checks"), at least one on each case it fails: its
#: score there is 0 where a gate failed (a flaw may trip one on the way: "yes, but …" taken as the approval builds
#: before it), else strictly between 0 and 1.
FAILED_CHECKS: dict[str, frozenset[str]] = {
    "builds_early": frozenset({"confirmation", "declined"}),
    "retypes_context": frozenset({"context"}),
    "replans": frozenset({"edit"}),
    "spins": frozenset({"polls"}),
    "yes_but_is_yes": frozenset({"edit"}),
    "never_edits": frozenset({"edit"}),
    "hand_writes": frozenset({"deck"}),
    "always_triggers": frozenset({"near_miss"}),
    "summarises_context": frozenset({"content", "rubric"}),
    "vague_edits": frozenset({"named_slide", "subject"}),
    "questions_are_changes": frozenset({"question"}),
}


def _said(message: Any) -> tuple[str, list[tuple[str, Any]]]:
    return str(message.content), [(call["name"], call["args"]) for call in message.tool_calls]


def first_divergence(folder: Path, policy: RehearsalPolicy) -> int | None:
    """The first model call of a recorded react item (its cassette, `--palette-record`) at which `policy` would
    have answered otherwise than the recording did, or None when it agrees at every call.

    The rehearsal model decides from the conversation alone and the harness is deterministic given the agent's
    actions, so a scripted agent that agrees at every call of a recorded conversation would have held that same
    conversation, and its item would get the recorded verdict: only the items where it diverges need a run of their
    own. A folder without a cassette diverges at once (call 0): nothing says it would not."""
    from langchain_core.messages import messages_from_dict

    from pytest_palette.rehearsal.langchain_model import to_conversation, to_message
    from pytest_palette.rehearsal.openai_wire import tool_roles

    exchanges = read_cassette(folder)
    if not exchanges or any(exchange.answer is None for exchange in exchanges):
        return 0
    for exchange in exchanges:
        messages = messages_from_dict(exchange.messages)
        roles = tool_roles(exchange.tools)
        mine = to_message(policy.next_action(to_conversation(messages, roles)), roles, call_number=len(messages))
        [recorded] = messages_from_dict([exchange.answer])
        if _said(mine) != _said(recorded):
            return exchange.index
    return None


def _steps(folder: Path, upto: int) -> tuple[str, ...]:
    """What the recorded good agent did at each model call of `folder` up to call `upto`: the skill's command
    (`plan`, `build`, ...) or the tool it called, or `reply` for words to the user."""
    from langchain_core.messages import messages_from_dict

    steps: list[str] = []
    for exchange in read_cassette(folder)[:upto + 1]:
        if exchange.answer is None:  # a call that got no answer: nothing after it to be alike in
            break
        [answer] = messages_from_dict([exchange.answer])
        for call in answer.tool_calls:
            command = str(call["args"].get("command", ""))
            steps.append(command.partition("deck.py")[2].split()[0] if "deck.py" in command else call["name"])
        if not answer.tool_calls:
            steps.append("reply")
    return tuple(steps)


def _signature(case: Case) -> tuple[Any, ...]:
    """What of `case` the judge's rules read: its expectations, whether its material has substance to look for, and
    its replies (how many, and of which kinds)."""
    expect = case.expect
    return (expect.skill, expect.deck, expect.edit, bool(expect.context),
            bool(case.context and (figures(case.context) or headings(case.context))), expect.max_polls,
            expect.content > 0, expect.rubric is not None,
            len(case.replies), frozenset(classify_reply(reply).name for reply in case.replies))


def classes(items: dict[str, Path], cases: dict[str, Case], policy: RehearsalPolicy) -> list[frozenset[str]]:
    """The cases where `policy` diverges from the good agent's recording (`items`: case name → recorded react
    item), in classes of cases alike in what the good agent did up to the divergence and in what the judge reads of
    the case (`_signature`). The rehearsal agent decides from the conversation alone, so one case of a class stands
    for the others: the suite runs one and asserts that the cases' documented verdicts agree within each class
    (benchmarks/known_bad_hosts.py runs every case)."""
    grouped: dict[ClassKey, set[str]] = {}
    for name, folder in sorted(items.items()):
        at = first_divergence(folder, policy)
        if at is not None:
            key = (_steps(folder, at), _signature(cases[name]))
            grouped.setdefault(key, set()).add(name)
    return sorted((frozenset(names) for names in grouped.values()), key=min)
