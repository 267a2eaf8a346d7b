"""Trigger cases: a case can say the request needs no skill (`expect: {skill: false}`, a near miss); the judge fails
any call of the skill there; the good rehearsal model answers such a request in words and `always_triggers` plans
a deck from it; the report gives each host's trigger recall and precision, every run counted."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from ledger_records import as_record, record

from pytest_palette.cases import Case, CaseFileError, Expect, load_cases
from pytest_palette.judge import PASSED, judge
from pytest_palette.judge.evidence import Evidence
from pytest_palette.rehearsal.conversation import Conversation, LoadSkill, Reply, RunCommand, ToolResult, UserSaid
from pytest_palette.rehearsal.known_bad import AlwaysTriggers
from pytest_palette.rehearsal.policy import RehearsalPolicy, asks_for_deck
from pytest_palette.results.markdown import to_markdown
from pytest_palette.results.model import build_report
from pytest_palette.results.record import Judged, Record, Terms, Usage
from pytest_palette.results.report_json import to_json
from pytest_palette.results.table import render, session_matrix_of
from pytest_palette.results.tally import Triggers, tally, triggered, triggers
from pytest_palette.skill import load_skill

REPO = Path(__file__).resolve().parent.parent
SHIPPED = [case for path in sorted((REPO / "cases").glob("*.yaml")) for case in load_cases(path)]
USED = "the skill was used although the request needed none"


def cases_of(tmp_path: Path, text: str) -> list[Case]:
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    return load_cases(path, env={})


def error_of(tmp_path: Path, text: str) -> CaseFileError:
    with pytest.raises(CaseFileError) as raised:
        cases_of(tmp_path, text)
    return raised.value


# --------------------------------------------------------------------------- the case key


def test_a_near_miss_expects_no_deck_no_edit_no_context_and_waits_for_no_reply(tmp_path: Path) -> None:
    [near, asked, deck] = cases_of(tmp_path, (
        "- {name: near, covers: x, tags: [edit], request: How many slides for a talk?, context: notes,\n"
        "   expect: {skill: false}}\n"
        "- {name: asked, covers: x, request: r, replies: ['make it shorter'], expect: {skill: false, deck: false}}\n"
        "- {name: deck, covers: x, request: Build a deck}\n"))
    assert near.expect == Expect(skill=False, deck=False, edit=False, context=False)
    assert near.replies == () and near.context == "notes"
    # Replies given are kept (a user who says more), and `deck: false` says what skill: false already says.
    assert asked.replies == ("make it shorter",) and asked.expect == Expect(skill=False, deck=False)
    assert deck.expect.skill is True and deck.replies == ("yes",)


@pytest.mark.parametrize(("key", "value"), [("deck", "true"), ("slides", "3"), ("edit", "true"),
                                            ("context", "false"), ("max_polls", "4")])
def test_a_near_miss_that_also_expects_driving_the_skill_is_an_error_at_that_line(tmp_path: Path, key: str,
                                                                                   value: str) -> None:
    error = error_of(tmp_path, f"- name: near\n  covers: x\n  request: r\n  expect:\n    skill: false\n"
                               f"    {key}: {value}\n")
    assert error.line == 6 and "\n" not in str(error) and str(error).startswith(f"{tmp_path / 'c.yaml'}:6: ")
    assert "skill: false" in str(error) and "case 'near'" in str(error)


def test_skill_must_be_a_boolean(tmp_path: Path) -> None:
    error = error_of(tmp_path, "- name: near\n  covers: x\n  request: r\n  expect:\n    skill: 'no'\n")
    assert error.line == 5 and "'skill' must be bool, not str" in str(error)


def test_a_near_miss_round_trips_and_a_case_json_from_before_the_key_still_loads(tmp_path: Path) -> None:
    [near] = cases_of(tmp_path, "- {name: near, covers: x, request: r, expect: {skill: false}}\n")
    assert Case.from_json(json.loads(json.dumps(near.to_json()))) == near
    old = {**near.to_json(), "expect": {"deck": True, "slides": 3, "edit": False, "context": False, "max_polls": 12},
           "replies": ["yes"]}
    assert Case.from_json(old).expect == Expect(slides=3)


def test_the_key_leaves_the_digest_of_every_case_that_needs_the_skill_as_it_was() -> None:
    case = Case(name="c", covers="x", tags=(), request="Build a deck", context="", replies=("yes",),
                expect=Expect(slides=3), path=Path("c.yaml"), line=1)
    # The digest an earlier version computed, before Expect had `skill`.
    earlier = {"deck": True, "slides": 3, "edit": False, "context": False, "max_polls": 12}
    payload = json.dumps([case.request, case.context, list(case.replies), earlier], sort_keys=True)
    assert case.digest() == hashlib.sha256(payload.encode()).hexdigest()[:12]
    near = Case(**{**case.__dict__, "expect": Expect(skill=False, deck=False)})
    assert near.digest() != Case(**{**case.__dict__, "expect": Expect(deck=False)}).digest()


# --------------------------------------------------------------------------- the judge


def near_miss() -> Case:
    return Case(name="near", covers="x", tags=("trigger",), request="What does pptx stand for?", context="",
                replies=(), expect=Expect(skill=False, deck=False), path=Path("cases/trigger.yaml"), line=1)


def evidence(*commands: str, decks: tuple[Path, ...] = ()) -> Evidence:
    calls = tuple({"at": 0.0, "command": c, "args": {}, "seconds": 0.1, "exit_code": 0, "stdout": "{}"}
                  for c in commands)
    return Evidence(workspace=Path("/w"), pptx=None, slides=0, has_plex=False, size=0, decks=decks, calls=calls,
                    calls_from="trace" if calls else "")


def test_a_near_miss_with_no_call_of_the_skill_passes() -> None:
    verdict = judge(near_miss(), evidence(), "react")
    assert verdict == PASSED and (verdict.skill_expected, verdict.skill_used) == (False, False)


@pytest.mark.parametrize("chain", [("find",), ("find", "plan"), ("plan", "start", "status")])
def test_any_call_of_the_skill_fails_a_near_miss_and_blames_the_first(chain: tuple[str, ...]) -> None:
    verdict = judge(near_miss(), evidence(*chain), "react")
    assert verdict.failures == (f"{USED}: {' → '.join(chain)}",)
    assert verdict.blame == ((0,),) and verdict.skill_used and not verdict.skill_expected


def test_nothing_else_is_judged_on_a_near_miss() -> None:
    # A deck left without a call of the skill is no call of it: noted, not failed (no Plex, count or gate rule).
    verdict = judge(near_miss(), evidence(decks=(Path("/w/hand.pptx"),)), "react")
    assert verdict == PASSED and verdict.notes == ("a .pptx was left in the workspace without a call of the skill: "
                                                   "hand.pptx",)


def test_a_deck_case_carries_whether_the_skill_was_used() -> None:
    case = Case(name="deck", covers="x", tags=(), request="Build a deck", context="", replies=("yes",),
                expect=Expect(), path=Path("c.yaml"), line=1)
    assert (judge(case, evidence(), "react").skill_used, judge(case, evidence("plan"), "react").skill_used) == \
        (False, True)
    assert judge(case, evidence(), "react").skill_expected is True


# --------------------------------------------------------------------------- the rehearsal model


def test_the_shipped_openings_ask_for_a_deck_exactly_where_the_case_needs_the_skill() -> None:
    wrong = {case.name for case in SHIPPED if asks_for_deck(case.opening) is not case.expect.skill}
    assert wrong == set()
    assert sum(not case.expect.skill for case in SHIPPED) >= 8


@pytest.mark.parametrize(("message", "wanted"), [
    ("Can you build a deck on tides?", True),
    ("Could I get a 5-slide deck on owls?", True),
    ("I'd like a short presentation on our roadmap", True),
    ("A deck about solar power", True),
    ("I need to present our Q3 numbers to the board", True),
    ("Make slide 3 punchier", False),  # a slide of a deck that exists
    ("I need to give a talk tomorrow; how long should it be?", False),
    ('Rewrite this slide title: "Build a better deck"', False),  # quoted text asks for nothing
    ("How should I explain a delayed launch to the leadership team?", False),
    ("Can PowerPoint open a Keynote presentation, or do I need to export it first?", False),
    ("yes", False),
])
def test_what_asks_for_a_deck(message: str, wanted: bool) -> None:
    assert asks_for_deck(message) is wanted


#: Issue 23: the ways people ask for something to present with no deck word, and counts in words — and the near
#: misses that look like them (docs/rehearsal-model.md).
AS_PEOPLE_WRITE = [
    ("I'm talking to the board on Friday about Q3 churn, can you put something together I can walk them through?",
     True),
    ("I'm talking to the board on Friday about Q3 churn. Can you put something together I can walk them through?",
     True),
    ("need something to show the new hires on day one about our security rules", True),
    ("We're presenting to investors next week; could you get something ready for it?", True),
    ("prepare a pitch for investors", True),
    ("walk-through for the sales kickoff", True),
    ("talk for the team offsite", True),
    ("Slides for Monday's review, please", True),
    ("Quarterly planning deck please", True),
    ("Half a dozen slides for the new hires on our security rules", True),
    ("Just a couple of slides for the sales kickoff on our new pricing", True),
    ("Can you make a handful of slides on the outage?", True),
    # Near misses: a talk given, tips, counting, finance, ideas, an explanation for the user, a reply about a deck.
    ("I gave a presentation to the board yesterday and it ran long; what should I cut next time?", False),
    ("I talked to the board yesterday; can you put something together summarising their feedback?", False),
    ("I'm presenting to the board tomorrow; what should I wear?", False),
    ("Give me tips for presenting to the board without losing the room", False),
    ("Presentation tips for new managers", False),
    ("Count the slides in my quarterly review deck and tell me which have no title", False),
    ("Work out the present value of a $50,000 payment due in five years at 6%, for our finance team", False),
    ("I need a handful of icebreaker ideas for the team offsite, just a list here", False),
    ("Walk me through how our on-call rotation works for the team", False),
    ("Can you do a walkthrough of this function?", False),
    ("Can you put something together for the team's lunch order?", False),
    ("My talk on Friday went well, thanks", False),
    ("Slides are hard to read at the back of the room", False),
    ("Make a couple of the slides punchier", False),
]


@pytest.mark.parametrize(("message", "wanted"), AS_PEOPLE_WRITE, ids=[m[:60] for m, _ in AS_PEOPLE_WRITE])
def test_what_asks_for_a_deck_as_people_write(message: str, wanted: bool) -> None:
    assert asks_for_deck(message) is wanted


#: Issue 37: a request for a deck made by its purpose alone — presenting something to people, at an occasion — with
#: no word for a deck: a presenting verb, its audience, and maybe the subject and the occasion, as an imperative or
#: the user's need.
BY_PURPOSE = [
    "Walk the board through the quarter on Monday",
    "Take the sales team through the new pricing next week",
    "Brief the execs on Q3 at Thursday's offsite",
    "I need to present our roadmap to investors on Friday",
    "walk the board through the quarter on monday",
    "Please walk the leadership team through our hiring plan at the offsite",
    "Can you help me update the investors on Q3 at the annual meeting?",
    "Could you walk the board through the quarter for me on Monday?",
    "Help me take the new hires through our security rules on their first day",
    "Help me get ready to walk the board through the numbers",
    "We need to pitch the redesign to the execs next Tuesday",
    "I have to brief the board on the acquisition before Thursday's meeting",
    "I've got to take the board through the budget tomorrow",
    "We'll need to walk our customers through the new API at the conference",
    "I must present the findings to the steering committee on Wednesday",
    "I'd like to present the new pricing at the sales kickoff",
    "Need to walk the board through Q3 on Monday",
    "Pitch potential investors on our seed round next week",
    "Take everyone through the migration plan at Friday's all-hands",
    "Update the team on the migration at Monday's standup",
    "Brief the new starters on our security rules",
    "Explain the new expense policy to all staff at the town hall",
    "Go over the budget with the board on Monday",
    "Talk the team through it",
    "On Friday, walk the sales team through the new pricing",
    "Okay so I need to take the sales team through the new pricing next week",
    "Walk the new hires through onboarding, then email them the checklist",
]
#: The near misses of the same grammar: a question about presenting, a report, no audience or the user as it, a
#: message, another request that mentions presenting, a need that comes with a question or a request for tips.
NOT_BY_PURPOSE = [
    "How should I present the quarter to the board?",
    "Any tips for walking the board through the numbers?",
    "What's the best way to take the sales team through the new pricing?",
    "Should I brief the execs on Q3 before the offsite?",
    "Do I need to walk the board through the numbers?",
    "When I walk the board through Q3 on Monday, what should I lead with?",
    "Give me tips for walking the board through the numbers",
    "I walked the board through it yesterday",
    "Last week, I walked the board through Q3",
    "I briefed the execs on Q3 at Thursday's offsite",
    "I presented our roadmap to investors on Friday",
    "I'm going to walk the board through Q3 on Monday",
    "The board walked out",
    "Walk the dog",
    "Walk the dog before the board meeting",
    "We need to take the dog through the park",
    "Take the team out for lunch on Friday",
    "Brief me on the quarter",
    "Please brief me on what the board decided",
    "Brief me on the quarter so I can present it to the board",
    "Walk us through the quarter",
    "Walk through this function with me",
    "Show me the numbers for the team",
    "Explain to me how the board works for investors",
    "Explain how to train new hires",
    "Explain the plan to hire engineers",
    "Pitch in to help the team",
    "Update the team page with the new pricing",
    "Update the board's calendar for Monday",
    "Update the team on Slack",
    "Brief the team on the outage in Slack",
    "I need to update the board on the hiring numbers by email",
    "Write an email to brief the execs on Q3",
    "Remind me to brief the execs on Q3 at Thursday's offsite",
    "Schedule time to walk the board through the quarter on Monday",
    "If you brief the execs on Q3, mention churn",
    "Present value calculations for the finance team",
    "I need to walk the dog before I present to the board",
    "I need to present our roadmap to investors on Friday; how long should it be?",
    "I need to present our roadmap to investors on Friday — give me three tips for handling questions",
]


@pytest.mark.parametrize("message", BY_PURPOSE)
def test_a_request_to_present_to_people_asks_for_a_deck_with_no_word_for_one(message: str) -> None:
    assert asks_for_deck(message)


@pytest.mark.parametrize("message", NOT_BY_PURPOSE)
def test_a_question_report_or_other_task_about_presenting_asks_for_none(message: str) -> None:
    assert not asks_for_deck(message)


SYSTEM = "Available skills:\n- palette: REQUIRED for every request that produces slides: a deck.\n"
SKILL = load_skill("palette").body


def test_the_good_model_answers_a_near_miss_in_words_without_loading_the_skill() -> None:
    for system in (SYSTEM, f"{SYSTEM}--- begin palette instructions ---\n{SKILL}\n--- end palette instructions ---"):
        action = RehearsalPolicy().next_action(Conversation(system, [UserSaid("What does pptx stand for?")]))
        assert isinstance(action, Reply) and "“What does pptx stand for?”" in action.text
        assert "not a deck" in action.text


def test_a_reply_in_a_conversation_already_on_a_deck_goes_to_the_skill_whatever_it_says() -> None:
    conversation = Conversation(SYSTEM, [UserSaid("Build a deck on tides"), LoadSkill("palette", "c1"),
                                         ToolResult("c1", SKILL), UserSaid("yes")])
    assert isinstance(RehearsalPolicy().next_action(conversation), RunCommand)


def test_always_triggers_reaches_for_the_skill_on_a_question() -> None:
    assert AlwaysTriggers().next_action(Conversation(SYSTEM, [UserSaid("What does pptx stand for?")])) == \
        LoadSkill("palette")


def test_the_good_model_loads_the_skill_for_a_request_made_by_its_purpose() -> None:
    for message, wanted in (("Walk the board through the quarter on Monday", True),
                            ("How should I present the quarter to the board?", False)):
        action = RehearsalPolicy().next_action(Conversation(SYSTEM, [UserSaid(message)]))
        assert (action == LoadSkill("palette")) is wanted, action


# --------------------------------------------------------------------------- the metric


def judged_record(case: str, run_index: int, *, expected: bool | None, used: bool | None, host: str = "react",
                  calls: tuple[str, ...] = ()) -> Record:
    facts = Judged(slides=0, has_plex=False, deck=False, calls=calls, polls=0, max_polls=12, context_expected=False,
                   context_reached=False, edit_expected=False, edit_called=False, replanned_after_edit=False,
                   skill_expected=expected, skill_used=used)
    fails = (expected is False and used) or (expected and not used)
    return Record(run_id="r", case=case, host=host, run_index=run_index, workspace=f"{host}/{case}-{run_index}",
                  outcome="fail" if fails else "pass", failures=("x",) if fails else (), judged=facts,
                  terms=Terms(model="m", label="m", provider="p", skill_hash="s", fingerprint="f",
                              plugin_version="0"),
                  usage=Usage(seconds=1.0, turns=1, input_tokens=None, output_tokens=None, cost_usd=None,
                              started_at=1.0, ended_at=2.0),
                  case_hash="h", tags=())


def test_recall_and_precision_count_every_run() -> None:
    records = [
        # A deck case run 3 times, the skill used in 2; another used once; a near miss used in 1 of 2 runs.
        *(judged_record("deck_a", i, expected=True, used=i != 3) for i in (1, 2, 3)),
        judged_record("deck_b", 1, expected=True, used=True),
        judged_record("near", 1, expected=False, used=True), judged_record("near", 2, expected=False, used=False),
    ]
    counted = triggers(tally(records).cells.values())
    assert counted == Triggers(needed=4, needed_and_used=3, used=4, near_misses=2)
    assert (counted.recall, counted.precision) == ((3, 4), (3, 4))
    assert counted.text() == "recall 3/4 = 75% · precision 3/4 = 75%"
    markdown = to_markdown(build_report(records))
    assert "| Trigger recall: the skill used where the request needed it | 3/4 = 75% |" in markdown
    assert "| Trigger precision: the skill needed where it was used | 3/4 = 75% |" in markdown
    assert to_json(build_report(records))["hosts"][0]["metrics"]["triggers"] == {
        "needed": 4, "needed_and_used": 3, "used": 4, "near_misses": 2}
    assert "react trigger: recall 3/4 = 75% · precision 3/4 = 75%" in render(session_matrix_of(records, ["react"]))


def test_without_a_near_miss_precision_is_not_applicable_and_the_table_says_nothing() -> None:
    records = [judged_record("deck_a", 1, expected=True, used=True), judged_record("deck_b", 1, expected=True,
                                                                                    used=False)]
    markdown = to_markdown(build_report(records))
    assert "| Trigger recall: the skill used where the request needed it | 1/2 = 50% |" in markdown
    assert "| Trigger precision: the skill needed where it was used | n/a (no near-miss case) |" in markdown
    assert not any("trigger" in line for line in render(session_matrix_of(records, ["react"])))


def test_records_from_before_the_fields_count_as_needing_the_skill_and_using_it_when_they_called_it() -> None:
    old = as_record(record())  # a first-format line: no such fields, calls made
    assert old.judged is not None and (old.judged.skill_expected, old.judged.skill_used) == (None, None)
    assert triggered(old.judged) == (True, True)
    silent = judged_record("deck", 1, expected=None, used=None)
    assert silent.judged is not None and triggered(silent.judged) == (True, False)
    # A current-format line written before the fields existed reads, with both None.
    line = json.loads(silent.to_json())
    for key in ("skill_expected", "skill_used"):
        del line["judged"][key]
    assert as_record(line).judged == silent.judged
