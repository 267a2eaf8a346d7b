"""The rehearsal model classifies replies to a plan the way the skill's reply table says."""

from __future__ import annotations

import pytest

from pytest_palette.replies import ReplyKind, classify_reply, named_topic

A, C, Q, D, N = (ReplyKind.APPROVAL, ReplyKind.CHANGE, ReplyKind.QUESTION, ReplyKind.DECLINE, ReplyKind.NEW_DECK)

PHRASINGS = [
    ("yes", A), ("Yes!", A), ("yes please", A), ("y", A), ("looks good", A), ("Looks good to me.", A),
    ("go ahead", A), ("build it", A), ("ship it", A), ("Perfect", A), ("perfect, ship it", A),
    ("sounds good", A), ("LGTM", A), ("ok", A), ("okay, go for it", A), ("approved", A), ("👍", A),
    ("make it 3 slides", C), ("Make it 5 slides", C), ("cut it to 4", C), ("add a slide on cost", C),
    ("more casual", C), ("drop slide 2", C), ("use our Q3 numbers", C), ("fix slide 2", C),
    ("yes, but drop the last slide", C), ("Yes but make it shorter", C), ("ok, just make it shorter", C),
    ("can it be more formal?", C), ("Could you add a slide about pricing?", C), ("lead with the results", C),
    ("focus on pricing only", C), ("no, make it 3 slides", C), ("looks good, but 4 slides", C),
    ("why is there no agenda slide?", Q), ("What is on slide 3?", Q), ("Does it cover pricing?", Q),
    ("how long will the build take?", Q), ("is this for executives?", Q),
    ("actually, hold off for now", D), ("not now", D), ("cancel", D), ("no", D), ("No thanks.", D),
    ("never mind", D), ("hmm, let me think about it", D), ("maybe later", D), ("let's not build it yet", D),
    ("please don't build it", D),
    ("actually, do one on Kubernetes instead", N), ("scrap that, make a deck about our hiring plan instead", N),
    ("different deck: one on onboarding", N),
]


@pytest.mark.parametrize(("reply", "kind"), PHRASINGS, ids=[p for p, _ in PHRASINGS])
def test_each_phrasing_is_read_as_the_skill_says(reply: str, kind: ReplyKind) -> None:
    assert classify_reply(reply) is kind


def test_an_approval_that_carries_a_condition_is_a_change_not_an_approval() -> None:
    assert classify_reply("yes") is ReplyKind.APPROVAL
    assert classify_reply("yes, but drop the last slide") is ReplyKind.CHANGE


@pytest.mark.parametrize(("reply", "topic"), [
    ("add a slide on escalation paths", "escalation paths"),
    ("add a slide about buddy pairing at the end", "buddy pairing"),
    ("Could you add a section on risks — and keep it short?", "risks"),
    ("fix slide 2, it should be about timelines", "timelines"),
    ("can you include pricing?", "pricing"),
    ("also cover the Q3 numbers, and make it shorter", "q3 numbers"),
    ("cover security too", "security"),
    ("make it all about the launch", None),  # a new focus for the whole deck, not a subject to add to it
    ("include 3 slides", None), ("add more detail", None), ("make it 3 slides", None),
    ("drop the last slide", None), ("yes, but drop the last slide", None), ("can it be a bit more casual?", None),
    ("why is there no slide on rollback?", None),  # a question names a subject but asks for no change
    ("yes", None),
])
def test_which_replies_name_a_subject_to_cover(reply: str, topic: str | None) -> None:
    assert named_topic(reply) == topic
