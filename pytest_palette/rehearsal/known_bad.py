"""Known-bad agents: the rehearsal policy with one documented mistake each.

They are the benchmark's equivalent of running gold and empty patches: if the judge passes one of
them on a case it is documented to fail, the judge is broken. Select one with
`--model rehearsal:<name>`; docs/known-bad-agents.md lists which cases each must fail.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable

from ..cases import Case
from .conversation import Action, Conversation, Reply, RunCommand
from .policy import PLAN_FILE, RehearsalPolicy, Step, split_opening
from .replies import ReplyKind, classify_reply


class BuildsEarly(RehearsalPolicy):
    """Builds as soon as the plan is drafted, without waiting for approval."""

    name = "builds_early"

    def after_plan(self, steps: list[Step], last: Step, deck: str) -> Action:
        if last.answer.get("done") and not any(step.subcommand == "start" for step in steps):
            return self.build(deck)
        return super().after_plan(steps, last, deck)

    def after_build(self, steps: list[Step], last: Step, deck: str) -> Action:
        action = super().after_build(steps, last, deck)
        plan = next((s for s in reversed(steps) if s.subcommand in {"plan", "edit"} and s.answer.get("done")), None)
        if isinstance(action, Reply) and plan is not None:
            return Reply(f"{action.text}\n\n{self.present(str(plan.answer.get('text', '')))}")
        return action


class RetypesContext(RehearsalPolicy):
    """Retypes pasted material into --request; when deck.py refuses, squeezes it onto one line."""

    name = "retypes_context"

    def plan(self, user_text: str, deck: str) -> Action:
        request, material = split_opening(user_text)
        if material:
            request = f"{request}: {' '.join(material.split())[:300]}"
        return RunCommand(f"{deck} plan --request {shlex.quote(request)} --out {PLAN_FILE}")


class Replans(RehearsalPolicy):
    """Answers every change by drafting a new plan from scratch instead of editing."""

    name = "replans"

    def edit(self, user_text: str, deck: str) -> Action:
        return RunCommand(f"{deck} plan --request {shlex.quote(user_text.strip())} --out {PLAN_FILE}")


class Spins(RehearsalPolicy):
    """Polls without holding: dozens of zero-second status calls while the work runs."""

    name = "spins"

    def poll_build(self, deck: str) -> Action:
        return RunCommand(f"{deck} status --out-dir ./deck --hold-seconds 0")

    def poll_plan(self, deck: str) -> Action:
        return RunCommand(f"{deck} plan-status --out {PLAN_FILE} --hold-seconds 0")

    def polls(self, steps: list[Step]) -> int:
        return 0  # never gives up: that is the mistake


class YesButIsYes(RehearsalPolicy):
    """Treats an approval that carries a condition ("yes, but …") as plain approval."""

    name = "yes_but_is_yes"

    def classify(self, user_text: str) -> ReplyKind:
        kind = classify_reply(user_text)
        words = user_text.strip().lower()
        if kind is ReplyKind.CHANGE and words.startswith(("yes", "ok", "sure", "looks good")):
            return ReplyKind.APPROVAL
        return kind


class NeverEdits(RehearsalPolicy):
    """Ignores changes: every change request is taken as approval and the original plan is built."""

    name = "never_edits"

    def classify(self, user_text: str) -> ReplyKind:
        kind = classify_reply(user_text)
        return ReplyKind.APPROVAL if kind is ReplyKind.CHANGE else kind


class HandWrites(RehearsalPolicy):
    """Plans with the skill, then writes the deck itself with python-pptx instead of running `start`."""

    name = "hand_writes"
    marker = "from pptx import Presentation"

    def next_action(self, conversation: Conversation) -> Action:
        _, turn = conversation.current_turn()
        if any(isinstance(event, RunCommand) and self.marker in event.command for event in turn):
            return Reply("Your deck is ready: deck/deck.pptx")
        return super().next_action(conversation)

    def build(self, deck: str) -> Action:
        script = (
            f"import re, pathlib; {self.marker}\n"
            f"text = pathlib.Path({PLAN_FILE!r}).read_text()\n"
            "deck = Presentation()\n"
            "for title in re.findall(r'^## (.+)$', text, re.M):\n"
            "    slide = deck.slides.add_slide(deck.slide_layouts[1]); slide.shapes.title.text = title\n"
            "pathlib.Path('deck').mkdir(exist_ok=True); deck.save('deck/deck.pptx')\n"
        )
        # PALETTE_PYTHON is the interpreter in this environment that has python-pptx.
        return RunCommand(f'"${{PALETTE_PYTHON:-python3}}" -c {shlex.quote(script)}')


KNOWN_BAD: dict[str, type[RehearsalPolicy]] = {
    cls.name: cls for cls in (BuildsEarly, RetypesContext, Replans, Spins, YesButIsYes, NeverEdits, HandWrites)
}


def expected_failures(cases: Iterable[Case]) -> dict[str, tuple[frozenset[str], str]]:
    """The documented matrix, derived from case definitions: each known-bad agent's cases to fail, and a
    phrase every one of its failures carries. docs/known-bad-agents.md explains each row."""
    cases = list(cases)

    def named(keep: Callable[[Case], bool]) -> frozenset[str]:
        return frozenset(case.name for case in cases if keep(case))

    deck = named(lambda c: c.expect.deck)
    edit = named(lambda c: c.expect.edit)
    conditional = named(lambda c: any(classify_reply(r) is ReplyKind.CHANGE and r.lower().startswith(("yes", "ok"))
                                      for r in c.replies))
    return {
        "builds_early": (named(lambda c: not c.expect.deck), "the confirmation gate was skipped"),
        "retypes_context": (named(lambda c: c.expect.context), "pasted material never reached the plan"),
        "replans": (edit, "edit-plan was never called"),
        "spins": (deck, "status polls"),
        "yes_but_is_yes": (conditional, "edit-plan was never called"),
        "never_edits": (edit, "edit-plan was never called"),
        "hand_writes": (deck, "does not carry IBM Plex"),
    }


#: The spinner is judged against a slow build: against an instant one a zero-second poller's count is a race.
#: Each of its polls costs a model round trip, so the build must outlast 12 of them with room to spare —
#: about 0.15 s each through LangGraph or CUGA, about 0.35 s through the Claude Code CLI.
SPIN_LATENCY = {"PALETTE_ENGINE_LATENCY": "build=4"}
SPIN_LATENCY_BY_HOST = {"claude": {"PALETTE_ENGINE_LATENCY": "build=12"}}


def spin_latency(host: str) -> dict[str, str]:
    """The engine latency the spinner is judged against on `host`."""
    return SPIN_LATENCY_BY_HOST.get(host, SPIN_LATENCY)
