"""Known-bad agents: the rehearsal policy with one documented mistake each.

They are the benchmark's equivalent of running gold and empty patches: if the judge passes one of
them on a case it is documented to fail, the judge is broken. Select one with
`--model rehearsal:<name>`; docs/known-bad-agents.md lists which cases each must fail.
"""

from __future__ import annotations

import re
import shlex

from ..replies import ReplyKind, classify_reply, named_slide, named_topic
from .conversation import Action, Conversation, Reply, RunCommand
from .hostile import HOSTILE
from .policy import DECK_DIR, PLAN_FILE, RehearsalPolicy, Step, split_opening


class BuildsEarly(RehearsalPolicy):
    """Builds as soon as the plan is drafted, without waiting for approval."""

    name = "builds_early"
    known_bad = True

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
    known_bad = True

    def plan(self, user_text: str, deck: str) -> Action:
        request, material = split_opening(user_text)
        if material:
            request = f"{request}: {' '.join(material.split())[:300]}"
        return RunCommand(f"{deck} plan --request {shlex.quote(request)} --out {PLAN_FILE}")


class Replans(RehearsalPolicy):
    """Answers every change by drafting a new plan from scratch instead of editing."""

    name = "replans"
    known_bad = True

    def edit(self, user_text: str, deck: str) -> Action:
        return RunCommand(f"{deck} plan --request {shlex.quote(user_text.strip())} --out {PLAN_FILE}")


class Spins(RehearsalPolicy):
    """Polls without holding: dozens of zero-second status calls, whether or not the work is still running."""

    name = "spins"
    known_bad = True
    #: The zero-second polls it makes on every build before it reads an answer at all: two past the judge's default
    #: ceiling of 12, so that at least 13 count on any machine, fast or busy (each is a process: more only cost).
    polls_per_build = 14

    def after_build(self, steps: list[Step], last: Step, deck: str) -> Action:
        if super().polls(steps) < self.polls_per_build:
            return self.poll_build(deck)
        return super().after_build(steps, last, deck)

    def poll_build(self, deck: str) -> Action:
        return RunCommand(f"{deck} status --out-dir ./deck --hold-seconds 0")

    def poll_plan(self, deck: str) -> Action:
        return RunCommand(f"{deck} plan-status --out {PLAN_FILE} --hold-seconds 0")

    def polls(self, steps: list[Step]) -> int:
        return 0  # never gives up: that is the mistake


class YesButIsYes(RehearsalPolicy):
    """Treats an approval that carries a condition ("yes, but …") as plain approval."""

    name = "yes_but_is_yes"
    known_bad = True

    def classify(self, user_text: str) -> ReplyKind:
        kind = classify_reply(user_text)
        words = user_text.strip().lower()
        if kind is ReplyKind.CHANGE and words.startswith(("yes", "ok", "sure", "looks good")):
            return ReplyKind.APPROVAL
        return kind


class NeverEdits(RehearsalPolicy):
    """Ignores changes: every change request is taken as approval and the original plan is built."""

    name = "never_edits"
    known_bad = True

    def classify(self, user_text: str) -> ReplyKind:
        kind = classify_reply(user_text)
        return ReplyKind.APPROVAL if kind is ReplyKind.CHANGE else kind


class HandWrites(RehearsalPolicy):
    """Plans with the skill, then writes the deck itself with python-pptx instead of running `start`."""

    name = "hand_writes"
    known_bad = True
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


class AlwaysTriggers(RehearsalPolicy):
    """Reaches for the skill on every request: a question about slides, or any other task, gets a deck planned."""

    name = "always_triggers"
    known_bad = True

    def wants_deck(self, user_text: str) -> bool:
        return True


class SummarisesContext(RehearsalPolicy):
    """Passes --context, but only a summary of the pasted material: the first words of each part, no figure, no
    heading — the material "reached the plan", its substance did not."""

    name = "summarises_context"
    known_bad = True
    words_per_part = 4

    def plan(self, user_text: str, deck: str) -> Action:
        request, material = split_opening(user_text)
        if not material:
            return super().plan(user_text, deck)
        summary = self.summarise(material)
        return RunCommand(f"{deck} plan --request {shlex.quote(request)} --out {PLAN_FILE} "
                          f"--context {shlex.quote(summary)}")

    def summarise(self, material: str) -> str:
        points: list[str] = []
        for part in re.split(r"\n\s*\n|\n(?=\s*#)", material):
            lines = [line for line in part.splitlines() if line.strip() and not line.lstrip().startswith(("#", "|"))]
            if lines:
                # Figures go whole and Markdown goes: what is left is the gist, in words.
                kept = (re.sub(r"[^A-Za-z']", "", word) for word in lines[0].split()
                        if not re.search(r"[\d$€£¥%]", word))
                words = [word for word in kept if word][:self.words_per_part]
                if words:
                    points.append(f"- {' '.join(words)}")
        return "\n".join(points) or "- notes pasted by the user"


class VagueEdits(RehearsalPolicy):
    """Edits, but when the user says which slide or what subject, passes a generic instruction instead of their
    words: the plan is "polished", the slide or subject they named is not touched."""

    name = "vague_edits"
    known_bad = True
    instruction = "polish the plan"

    def edit(self, user_text: str, deck: str) -> Action:
        if named_slide(user_text) is None and named_topic(user_text) is None:
            return super().edit(user_text, deck)
        return RunCommand(f"{deck} edit --instruction {shlex.quote(self.instruction)} --plan {PLAN_FILE}")


class QuestionsAreChanges(RehearsalPolicy):
    """Takes a question about the plan for a change request, and edits the plan with it instead of answering."""

    name = "questions_are_changes"
    known_bad = True

    def classify(self, user_text: str) -> ReplyKind:
        kind = classify_reply(user_text)
        return ReplyKind.CHANGE if kind is ReplyKind.QUESTION else kind


class Loops(RehearsalPolicy):
    """Builds correctly, then never answers: where it would say the deck is ready, it lists the deck's folder,
    again and again, until the host's step budget ends the turn. Its items are ERRORs naming the budget, never a
    verdict: a turn that ran out of steps is not an agent that answered."""

    name = "loops"
    known_bad = True

    def next_action(self, conversation: Conversation) -> Action:
        action = super().next_action(conversation)
        built = any(step.subcommand in {"start", "status"} and step.answer.get("done")
                    for step in self.steps(conversation, conversation.events))
        if isinstance(action, Reply) and built:
            return RunCommand(f"ls -la {DECK_DIR}")
        return action


#: The agents whose flaw is a turn that never ends: their items are ERRORs of the run, not FAILs.
LOOPING: dict[str, type[RehearsalPolicy]] = {Loops.name: Loops}

KNOWN_BAD: dict[str, type[RehearsalPolicy]] = {
    cls.name: cls for cls in (BuildsEarly, RetypesContext, Replans, Spins, YesButIsYes, NeverEdits, HandWrites,
                              AlwaysTriggers, SummarisesContext, VagueEdits, QuestionsAreChanges)
}


#: Every scripted agent `--model rehearsal:<name>` can select: the known-bad ones and the hostile one.
SCRIPTED: dict[str, type[RehearsalPolicy]] = {**KNOWN_BAD, **LOOPING, **HOSTILE}
