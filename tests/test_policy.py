"""The rehearsal policy on hand-built conversations: each decision the skill asks of an agent."""

from __future__ import annotations

import ast
import json
import re
import shlex
from typing import Any

import pytest

from pytest_palette.judge.content import figures, headings
from pytest_palette.rehearsal.conversation import (
    AgentSaid,
    Conversation,
    LoadSkill,
    Reply,
    RunCommand,
    ToolResult,
    UserSaid,
)
from pytest_palette.rehearsal.known_bad import QuestionsAreChanges, SummarisesContext, VagueEdits, YesButIsYes
from pytest_palette.rehearsal.policy import RehearsalPolicy, split_opening
from pytest_palette.skill import load_skill

SKILL = load_skill("palette").body
SYSTEM = "Available skills:\n- palette: REQUIRED for every request that produces slides: a deck.\n"
DECK = "python3 skills/palette/scripts/deck.py"
PLAN_TEXT = "# Prompt caching\nAudience: engineers\n\n## Why cache\n- cost\n\n## How it works\n- prefix\n"


class Script:
    """Builds a conversation the way a host would: each action answered by a tool result."""

    def __init__(self, opening: str, policy: RehearsalPolicy | None = None) -> None:
        self.conversation = Conversation(system=SYSTEM, events=[UserSaid(opening)])
        self.count = 0
        self.policy = policy or RehearsalPolicy()

    def answer(self, action: Any, result: str | dict[str, Any]) -> None:
        self.count += 1
        call_id = f"c{self.count}"
        text = result if isinstance(result, str) else json.dumps(result)
        self.conversation.events += [type(action)(*_fields(action), call_id), ToolResult(call_id, text)]

    def say(self, user: str, agent: str = "ok") -> None:
        self.conversation.events += [AgentSaid(agent), UserSaid(user)]

    def next(self) -> Any:
        return self.policy.next_action(self.conversation)


def _fields(action: Any) -> tuple[str]:
    return (action.name,) if isinstance(action, LoadSkill) else (action.command,)


def args_of(command: str) -> dict[str, str]:
    tokens = shlex.split(command)
    return {tokens[i][2:]: tokens[i + 1] for i in range(len(tokens) - 1) if tokens[i].startswith("--")}


def planned(opening: str, policy: RehearsalPolicy | None = None) -> Script:
    """A conversation that has loaded the skill, looked, planned and shown the plan."""
    script = Script(opening, policy)
    script.answer(script.next(), SKILL)
    script.answer(script.next(), {"root": ".", "found": [], "note": "no finished deck under this root"})
    script.answer(script.next(), {"state": "done", "done": True, "plan": "/w/plan.md", "text": PLAN_TEXT})
    return script


def test_it_loads_the_skill_the_catalogue_offers_then_looks_before_acting() -> None:
    script = Script("Build a 3-slide deck on prompt caching")
    assert script.next() == LoadSkill("palette")
    script.answer(LoadSkill("palette"), SKILL)
    assert script.next() == RunCommand(f"{DECK} find --root .")


def test_an_inlined_skill_needs_no_load() -> None:
    conversation = Conversation(
        system=f"{SYSTEM}--- begin palette instructions ---\n{SKILL}\n--- end palette instructions ---",
        events=[UserSaid("Build a deck on tides")])
    assert RehearsalPolicy().next_action(conversation) == RunCommand(f"{DECK} find --root .")


def test_it_runs_the_script_where_the_skill_says() -> None:
    script = Script("Build a deck on tides")
    script.answer(script.next(), SKILL.replace("skills/palette/scripts/deck.py", "tools/deck.py"))
    assert script.next() == RunCommand("python3 tools/deck.py find --root .")


def unskilled(*messages: str, system: str = "You are an agent with a shell.",
              policy: RehearsalPolicy | None = None) -> tuple[list[Any], Conversation]:
    """Each action the policy takes over these user messages with no skill offered; a command it runs is
    answered with the path a python-pptx script would print."""
    conversation, actions = Conversation(system=system), []
    for message in messages:
        conversation.events.append(UserSaid(message))
        while True:
            action = (policy or RehearsalPolicy()).next_action(conversation)
            actions.append(action)
            if isinstance(action, Reply):
                conversation.events.append(AgentSaid(action.text))
                break
            call = f"c{len(actions)}"
            conversation.events += [RunCommand(action.command, call), ToolResult(call, "/w/deck.pptx\n")]
    return actions, conversation


def written_titles(command: str) -> list[str]:
    """The slide titles a python-pptx command of the policy's writes."""
    script = shlex.split(command)[2]
    found = re.search(r"^titles = (.+)$", script, re.M)
    assert found is not None, script
    titles: list[str] = ast.literal_eval(found.group(1))
    return titles


def test_without_a_skill_it_outlines_waits_for_approval_then_writes_the_deck_itself() -> None:
    actions, _ = unskilled("Build a 3-slide deck on tides", "looks good to me")
    outline, write, done = actions
    assert isinstance(outline, Reply) and outline.text.count("\n## ") == 3 and "Reply **yes**" in outline.text
    assert isinstance(write, RunCommand) and "from pptx import Presentation" in write.command
    assert "deck.py" not in write.command and write.command.startswith('"${PALETTE_PYTHON:-python3}" -c ')
    assert done == Reply("Your deck is ready: /w/deck.pptx (3 slides).")
    assert written_titles(write.command)[0] == "Tides"


def test_without_a_skill_each_reply_is_read_as_the_skill_has_it_read() -> None:
    actions, _ = unskilled("Build a 4-slide deck on our API deprecation timeline", "yes, but drop the last slide",
                           "why is there no slide on rollback?", "yes")
    shown, revised, answered, write, _ = actions
    assert shown.text.count("\n## ") == 4 and revised.text.count("\n## ") == 3  # a change revises, builds nothing
    assert "The plan has 3 slides" in answered.text and "rollback" in answered.text
    assert isinstance(write, RunCommand) and len(written_titles(write.command)) == 3
    # A known-bad agent's reading of the replies is kept too: "yes, but …" is an approval to it.
    actions, _ = unskilled("Build a 4-slide deck on our API deprecation timeline", "yes, but drop the last slide",
                           policy=YesButIsYes())
    assert isinstance(actions[1], RunCommand)


@pytest.mark.parametrize(("opening", "count"), [
    ("Half a dozen slides for the new hires on our security rules", 6),
    ("Put together some slides on our hiring plan for the new office, 6 of them", 6),
    ("Build a deck on tides, keep it to a couple", 2),
])
def test_without_a_skill_the_outline_has_the_count_asked_for_in_words_or_after_the_subject(opening: str,
                                                                                          count: int) -> None:
    actions, _ = unskilled(opening, "yes")
    assert actions[0].text.count("\n## ") == count
    assert isinstance(actions[1], RunCommand) and len(written_titles(actions[1].command)) == count


def test_without_a_skill_nothing_is_written_unless_the_user_approves() -> None:
    actions, _ = unskilled("Build a 3-slide deck on our holiday schedule", "hmm, let me think about it",
                           "actually, hold off for now")
    assert all(isinstance(action, Reply) for action in actions) and len(actions) == 3
    assert "won't" in actions[1].text and "won't" in actions[2].text


def test_without_a_skill_a_request_for_no_deck_is_just_answered() -> None:
    actions, _ = unskilled("What is prompt caching, in two sentences?", "thanks")
    assert all(isinstance(action, Reply) and "## " not in action.text for action in actions)


def test_skills_that_are_not_about_decks_are_not_loaded_for_one_but_the_only_skill_offered_is() -> None:
    others = "Skills:\n- deep-research: Research a question in depth\n- code-review: Review a change\n"
    actions, _ = unskilled("Build a 3-slide deck on tides", system=others)
    assert isinstance(actions[0], Reply) and "\n## " in actions[0].text  # its own outline, no skill loaded
    only = Conversation(system="Skills:\n- house-style: Our house style\n", events=[UserSaid("Build a deck")])
    assert RehearsalPolicy().next_action(only) == LoadSkill("house-style")


def test_the_request_goes_verbatim_and_pasted_material_goes_to_context() -> None:
    notes = "# Q3\n## Revenue\n- $4.2M, up 12%\n## Hiring\n- 14 engineers"
    script = Script(f"Turn these notes into a deck for the board\n\n{notes}")
    script.answer(script.next(), SKILL)
    script.answer(script.next(), {"found": []})
    action = script.next()
    assert isinstance(action, RunCommand) and " plan " in action.command
    assert args_of(action.command) == {
        "request": "Turn these notes into a deck for the board", "out": "plan.md", "context": notes}


def test_a_plain_request_has_no_context() -> None:
    assert split_opening("Build a 3-slide deck on prompt caching") == ("Build a 3-slide deck on prompt caching", "")


def test_it_shows_the_plan_and_asks_for_approval() -> None:
    action = planned("Build a deck on prompt caching").next()
    assert isinstance(action, Reply)
    assert PLAN_TEXT.strip() in action.text and "Reply **yes**" in action.text


def test_a_plan_still_drafting_is_collected_with_plan_status_not_replanned() -> None:
    script = Script("Build a deck on tides")
    script.answer(script.next(), SKILL)
    script.answer(script.next(), {"found": []})
    script.answer(script.next(), {"state": "running", "done": False})
    assert script.next() == RunCommand(f"{DECK} plan-status --out plan.md")


def test_approval_builds_holds_and_reports_the_absolute_path() -> None:
    script = planned("Build a deck on prompt caching")
    script.say("looks good")
    assert script.next() == RunCommand(f"{DECK} find --root .")
    script.answer(script.next(), {"found": [{"kind": "plan", "path": "plan.md", "state": "done"}]})
    start = script.next()
    assert start == RunCommand(f"{DECK} start --plan plan.md --out-dir ./deck")
    script.answer(start, {"state": "running", "note": "building"})
    poll = script.next()
    assert poll == RunCommand(f"{DECK} status --out-dir ./deck")
    script.answer(poll, {"state": "running", "done": False})
    assert script.next() == poll
    script.answer(poll, {"state": "done", "done": True, "verified": True, "pptx": "/w/deck/deck.pptx",
                         "slide_previews": 2})
    action = script.next()
    assert isinstance(action, Reply) and "/w/deck/deck.pptx" in action.text and "2 slides" in action.text


@pytest.mark.parametrize("reply", ["make it 5 slides", "yes, but drop the last slide", "can it be more casual?"])
def test_a_change_is_an_edit_with_the_users_words_verbatim(reply: str) -> None:
    script = planned("Build a deck on prompt caching")
    script.say(reply)
    script.answer(script.next(), {"found": []})
    action = script.next()
    assert isinstance(action, RunCommand) and " edit " in action.command and " plan " not in action.command
    assert args_of(action.command) == {"instruction": reply, "plan": "plan.md"}
    script.answer(action, {"state": "done", "done": True, "text": PLAN_TEXT})
    again = script.next()
    assert isinstance(again, Reply) and "Reply **yes**" in again.text


def test_a_decline_builds_nothing() -> None:
    script = planned("Build a deck on prompt caching")
    script.say("actually, hold off for now")
    script.answer(script.next(), {"found": []})
    action = script.next()
    assert isinstance(action, Reply) and "won't build" in action.text


def test_a_question_is_answered_from_the_plan_and_approval_asked_again() -> None:
    script = planned("Build a deck on prompt caching")
    script.say("why is there no agenda slide?")
    script.answer(script.next(), {"found": []})
    action = script.next()
    assert isinstance(action, Reply)
    assert "1. Why cache" in action.text and "agenda" in action.text and "Reply **yes**" in action.text


def test_a_different_deck_is_planned_from_scratch() -> None:
    script = planned("Build a deck on prompt caching")
    script.say("actually, do one on Kubernetes instead")
    script.answer(script.next(), {"found": []})
    action = script.next()
    assert isinstance(action, RunCommand)
    assert args_of(action.command)["request"] == "actually, do one on Kubernetes instead"


def test_a_running_build_is_collected_not_restarted() -> None:
    script = planned("Build a deck on prompt caching")
    script.say("yes")
    script.answer(script.next(), {"found": [{"kind": "build", "dir": "/w/deck", "state": "running"}]})
    assert script.next() == RunCommand(f"{DECK} status --out-dir ./deck")


def test_a_finished_deck_is_reported_not_rebuilt() -> None:
    script = planned("Build a deck on prompt caching")
    script.say("yes")
    script.answer(script.next(), {"found": [{"kind": "build", "dir": "/w/deck", "state": "done",
                                             "pptx": "/w/deck/deck.pptx", "slide_previews": 2}]})
    action = script.next()
    assert isinstance(action, Reply) and "/w/deck/deck.pptx" in action.text


def test_an_error_is_relayed_verbatim() -> None:
    script = planned("Build a deck on prompt caching")
    script.say("yes")
    script.answer(script.next(), {"found": []})
    script.answer(script.next(), {"state": "running"})
    script.answer(script.next(), {"state": "error", "done": False, "log_tail": "error: font missing",
                                  "hint": "see build.log"})
    action = script.next()
    assert isinstance(action, Reply) and "error: font missing" in action.text


def test_it_stops_polling_long_before_a_step_budget() -> None:
    script = planned("Build a deck on prompt caching")
    script.say("yes")
    script.answer(script.next(), {"found": []})
    action: Any = script.next()
    polls = 0
    while isinstance(action, RunCommand):
        script.answer(action, {"state": "running", "done": False})
        polls += "status" in action.command
        action = script.next()
        assert polls <= 25
    assert isinstance(action, Reply)




def test_a_skill_handed_over_with_its_base_directory_runs_its_script_from_there() -> None:
    # Claude Code: the Skill result, then "Base directory for this skill: <abs path>" and SKILL.md.
    base = "/w/.claude/skills/palette"
    script = Script("Build a deck on tides")
    script.answer(script.next(), f"Launching skill: palette\n\nBase directory for this skill: {base}\n\n{SKILL}")
    find = script.next()
    assert find == RunCommand(f"python3 {base}/scripts/deck.py find --root .")
    script.answer(find, {"found": []})
    plan = script.next()
    assert isinstance(plan, RunCommand) and plan.command.startswith(f"python3 {base}/scripts/deck.py plan ")


# --------------------------------------------------------------------------- the content rules' known-bad agents


def test_summarises_context_passes_context_without_a_figure_or_a_heading() -> None:
    notes = "# Q3\n## Revenue\n- $4.2M, up 12% on Q2\n\n## Hiring\n- 14 engineers joined in March"
    script = Script(f"Turn these notes into a deck for the board\n\n{notes}", SummarisesContext())
    script.answer(script.next(), SKILL)
    script.answer(script.next(), {"found": []})
    action = script.next()
    assert isinstance(action, RunCommand) and " plan " in action.command
    args = args_of(action.command)
    assert args["request"] == "Turn these notes into a deck for the board"
    assert args["context"] == "- up on\n- engineers joined in March"
    assert figures(args["context"]) == [] and headings(args["context"]) == []
    plain = Script("Build a deck on prompt caching", SummarisesContext())
    plain.answer(plain.next(), SKILL)
    plain.answer(plain.next(), {"found": []})
    assert "--context" not in plain.next().command  # nothing pasted, nothing to summarise


@pytest.mark.parametrize(("reply", "instruction"), [
    ("add a slide on escalation paths", "polish the plan"), ("fix slide 2, it should be about timelines",
                                                            "polish the plan"),
    ("make it 3 slides", "make it 3 slides"), ("drop the last slide", "drop the last slide")])
def test_vague_edits_drops_the_words_that_name_a_slide_or_a_subject(reply: str, instruction: str) -> None:
    script = planned("Build a deck on prompt caching", VagueEdits())
    script.say(reply)
    script.answer(script.next(), {"found": []})
    action = script.next()
    assert isinstance(action, RunCommand) and args_of(action.command) == {"instruction": instruction,
                                                                          "plan": "plan.md"}


def test_questions_are_changes_edits_the_plan_with_a_question() -> None:
    script = planned("Build a deck on prompt caching", QuestionsAreChanges())
    script.say("why is there no agenda slide?")
    script.answer(script.next(), {"found": []})
    action = script.next()
    assert isinstance(action, RunCommand)
    assert args_of(action.command) == {"instruction": "why is there no agenda slide?", "plan": "plan.md"}
