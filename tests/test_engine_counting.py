"""Slide counts and topics from requests as people write them (issue 14, step 4).

Every supported count form (docs/reference-palette.md, "Slide counts") has a case here; before
this step, anything but "N slides" fell back to 5. The shipped cases still get the counts they
expect, and plain requests get topics that read like titles.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_palette.cases import load_cases
from pytest_palette.engine.counting import DEFAULT_SLIDES, count_in_text
from pytest_palette.engine.editor import edit_plan
from pytest_palette.engine.planner import build_plan, topic_of
from pytest_palette.replies import ReplyKind, classify_reply

CASES_DIR = Path(__file__).parent.parent / "cases"

# One line per form in docs/reference-palette.md.
PHRASINGS = [
    ("Build 3 slides on prompt caching", 3),  # digits + slides
    ("six slides on tea", 6),  # a word + slides
    ("A ten-slide deck on solar panels", 10),  # hyphenated, before the topic
    ("a 5 slide pitch on solar panels", 5),
    ("Solar panels for the board, 4 slides", 4),  # after the topic
    ("A deck on solar panels in seven slides", 7),
    ("a deck of 6 slides about hiring", 6),
    ("a 7-page deck on the outage", 7),  # pages are the deck's pages
    ("six pages on our roadmap", 6),
    ("a dozen slides on the history of tea", 12),  # quantities
    ("half a dozen slides on onboarding", 6),
    ("a couple of slides on the outage", 2),
    ("a few slides on the new office", 3),
    ("a one-pager on the hiring freeze", 1),
    ("a single slide about lunch", 1),
    ("twenty-five slides on history", 20),  # compounds and tens, clamped to the engine's 20
    ("thirty slides on history", 20),
    ("Build a deck on prompt caching, keep it to three", 3),  # a bare number after a limit
    ("A deck on prompt caching. Keep it to 3 slides.", 3),
    ("no more than 4 slides on the migration", 4),
    ("a deck on the migration, at most six", 6),
    ("a deck on the migration, max 8", 8),
    ("a deck on the outage, just 3", 3),
    ("around 8 slides on our strategy", 8),  # approximate: the number itself
    ("8 or so slides on our strategy", 8),
    ("roughly ten slides on our strategy", 10),
    ("8-10 slides on our strategy", 10),  # a range: its upper bound
    ("between 3 and 5 slides on our strategy", 5),
    ("Turn this 30-page report into a 5-slide deck", 5),  # slides win over the source's pages
    # Issue 23: a count after the subject that points back at the slides, and more counts in words.
    ("Put together some slides on our hiring plan for the new office, 6 of them", 6),
    ("a deck on our hiring plan, 6 of them please", 6),
    ("a deck on tea, a dozen of them", 12),
    ("a deck on tea, half a dozen of them.", 6),
    ("a deck on tea — 8 in total", 8),
    ("a deck on the outage, keep it to a couple", 2),
    ("a pair of slides on the outage", 2),
    ("a deck on the outage, keep it to a dozen", 12),
]

# Counts in words that read as the default when they are missed: read, not defaulted (docs/reference-palette.md).
WORDED = [
    ("a handful of slides on tea", 5),
    ("a deck on tea, keep it to a handful", 5),
    ("a deck on tea, a handful of them", 5),
    ("a deck on tea, five of them", 5),
]


@pytest.mark.parametrize(("request_text", "count"), WORDED, ids=[w[0] for w in WORDED])
def test_counts_in_words_are_read_not_defaulted(request_text: str, count: int) -> None:
    assert count_in_text(request_text) == count


@pytest.mark.parametrize(("request_text", "count"), PHRASINGS, ids=[p[0] for p in PHRASINGS])
def test_each_count_phrasing(request_text: str, count: int) -> None:
    plan = build_plan(request_text)
    assert len(plan.sections) == count
    assert plan.preferences["Length"] == (f"{count} slides" if count != 1 else "1 slide")


@pytest.mark.parametrize(
    "request_text",
    [
        "a deck on prompt caching",  # no count at all
        "Summarise this 30-page report",  # the source's pages, not the deck's
        "a deck from 12 pages of notes",
        "Turn our 10-page strategy memo into a deck",
        "keep it to 3 bullets per slide",  # a limit on something else
        "what goes on slide 5?",  # a slide's number, not a count
        "Q3 slides for the board",  # "Q3" is no number
        "a deck on tea, keep it to three minutes",  # a limit on the talk, not the slides
        "a deck on our five regions, focusing on two of them",  # "of them" inside a clause: the regions
        "a deck on our three products, two of them new",
        "our regions for the board, 6 of them",  # no deck word for "them" to point back at
        "a deck with a handful of ideas for the offsite",  # a handful of something else
    ],
)
def test_numbers_that_are_not_a_count(request_text: str) -> None:
    assert count_in_text(request_text) is None
    assert len(build_plan(request_text).sections) == DEFAULT_SLIDES


def _shipped_cases() -> list[object]:
    found = []
    for path in sorted(CASES_DIR.glob("*.yaml")):
        for case in load_cases(path):
            if case.expect.slides is not None:
                found.append(pytest.param(case, id=case.name))
    return found


@pytest.mark.parametrize("case", _shipped_cases())
def test_shipped_cases_still_get_their_counts(case: object) -> None:
    """The engine's own answer to each shipped case: its request (and material), then every reply that
    asks for a change applied as an edit, as a well-behaved agent would."""
    from pytest_palette.cases import Case

    assert isinstance(case, Case)
    plan = build_plan(case.request, case.context or None)
    for reply in case.replies:
        if classify_reply(reply) is ReplyKind.CHANGE:
            plan = edit_plan(plan, reply)
    assert len(plan.sections) == case.expect.slides


# Plain requests -> the topic a title is made from (the title is the topic with a capital).
TOPICS = [
    ("Build a deck on prompt caching", "Prompt caching"),
    ("Tell the team about our Q3 results", "Our Q3 results"),
    ("Build a 4-slide deck on our on-call rotation", "Our on-call rotation"),
    ("Help me explain our hiring plan for next year to the leadership team on Monday",
     "Our hiring plan for next year"),
    ("Make me a 4-slide presentation about our move to a four-day work week",
     "Our move to a four-day work week"),
    ("I need a 6-slide deck on how we handle customer escalations", "How we handle customer escalations"),
    ("Create a 4-slide deck introducing our new expense policy", "Our new expense policy"),
    ("Just two slides summarising Monday's outage", "Monday's outage"),
    ("I need a 12-slide deck for a half-day workshop on data privacy", "Data privacy"),
    ("Build a 5-slide deck on prompt caching for our engineering all-hands", "Prompt caching"),
    ("Present the migration plan to the board", "The migration plan"),
    ("Slides explaining vector databases", "Vector databases"),
    ("Build a deck on prompt caching, keep it to three", "Prompt caching"),
    ("prompt caching deck, 5 slides", "Prompt caching"),
    ("Pitch deck for Acme's seed round", "Acme's seed round"),
    ("Quarterly planning deck please", "Quarterly planning"),
    # Issue 23: requests with no deck word, and a count after the subject.
    ("I'm talking to the board on Friday about Q3 churn. Can you put something together I can walk them through?",
     "Q3 churn"),
    ("need something to show the new hires on day one about our security rules", "Our security rules"),
    ("walk-through for the sales kickoff", "Sales kickoff"),
    ("a deck on our hiring plan, 6 of them", "Our hiring plan"),
]


@pytest.mark.parametrize(("request_text", "title"), TOPICS, ids=[t[0] for t in TOPICS])
def test_plain_requests_get_titles_that_read_like_titles(request_text: str, title: str) -> None:
    plan = build_plan(request_text)
    assert plan.title == title
    assert plan.sections[0].title == title and plan.sections[0].is_title
    text = " ".join(s.title for s in plan.sections).lower()
    assert " about " not in f" {text} " and "presentation" not in text  # no "Why About our … matters"


@pytest.mark.parametrize("request_text", ["Turn this into a deck", "a deck on my notes", "make slides about these"])
def test_a_pointer_at_the_material_is_no_topic(request_text: str) -> None:
    assert topic_of(request_text) is None


@pytest.mark.parametrize(
    ("request_text", "audience"),
    [
        ("Tell the team about our Q3 results", "The team"),
        ("Help me explain our hiring plan for next year to the leadership team on Monday", "The leadership team"),
        ("A casual 4-slide deck on prompt caching for the board", "The board"),
        ("Present the migration plan to the board", "The board"),
        ("a deck on our move to the cloud", "General audience"),  # "the cloud" is no audience
        ("need something to show the new hires on day one about our security rules", "The new hires"),
    ],
)
def test_audience_from_plain_requests(request_text: str, audience: str) -> None:
    assert build_plan(request_text).audience == audience
