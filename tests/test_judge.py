"""The judge's own tests: every rule is shown failing and passing, on built Evidence and on real files.

The rules are those of the protocol notes (section 4, "The verdict"): no deck ends the judging; then IBM
Plex, the exact slide count, edit-plan without a fresh plan after it, a slide the user named changed by
the edit, the ceiling on polls that did not wait for the work, and pasted material reaching the plan through
--context or --source. A build before the approving reply fails. A case that forbids a deck is judged on
that alone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_palette.arena.workspace import TRACE_NAME
from pytest_palette.cases import DEFAULT_MAX_POLLS, Case, Expect
from pytest_palette.judge import PASSED, explain, judge
from pytest_palette.judge.evidence import (
    BUILD_EXIT,
    BUILD_STATE,
    MIN_PPTX_BYTES,
    Evidence,
    any_deck,
    inspect_deck,
    newest_deck,
    read_folder,
    read_trace,
    save_outputs,
    wait_for_builds,
)
from pytest_palette.replies import named_slide

WORK = Path("/nonexistent/work")
DECK = WORK / "deck" / "deck.pptx"

NO_DECK = "no .pptx was produced"
NO_PLEX = "the .pptx does not carry IBM Plex — it was not rendered by Palette"
NO_EDIT = "the user asked for a change but edit-plan was never called"
REDRAFTED = "edit-plan was called and then the plan was drafted again from scratch"
NO_CONTEXT = "pasted material never reached the plan — neither --context nor --source was used"
GATE = "confirmation gate"
STILL_RUNNING = "a build was still running when the conversation ended"


# --------------------------------------------------------------------------- builders


def make_case(name: str = "solar", *, pasted: str = "", **expect: Any) -> Case:
    """A case built directly; keyword arguments other than `pasted` (the case's context text) go to Expect."""
    return Case(name=name, covers="the judge's own tests", tags=(), request="a deck about solar power",
                context=pasted, replies=("yes",), expect=Expect(**expect), path=Path("cases/judge.yaml"), line=1)


def call(command: str, **args: Any) -> dict[str, Any]:
    """One trace record shaped like deck.py's write_trace."""
    return {"at": 0.0, "command": command, "args": args, "seconds": 0.1, "exit_code": 0, "stdout": "{}"}


def calls(*commands: str) -> tuple[dict[str, Any], ...]:
    return tuple(call(command) for command in commands)


def make_evidence(*, pptx: Path | None = DECK, slides: int = 3, has_plex: bool = True,
                  trace: Sequence[dict[str, Any]] = (), decks: Sequence[Path] | None = None,
                  unfinished: Sequence[Path] = (), turns_started: Sequence[float] = ()) -> Evidence:
    if decks is None:
        decks = (pptx,) if pptx is not None else ()
    return Evidence(workspace=WORK, pptx=pptx, slides=slides, has_plex=has_plex,
                    size=31_000 if pptx is not None else 0, decks=tuple(decks), calls=tuple(trace),
                    unfinished=tuple(unfinished), turns_started=tuple(turns_started))


def failures_of(case: Case, evidence: Evidence) -> tuple[str, ...]:
    return judge(case, evidence, "react").failures


RUNNING = json.dumps({"state": "running", "done": False})
DONE = json.dumps({"state": "done", "done": True})


def poll(command: str = "status", *, hold: float | None = 0, seconds: float = 0.1, done: bool = False,
         at: float = 0.0) -> dict[str, Any]:
    """A status or plan-status line as deck.py traces it: the hold it asked for, how long it took, its answer."""
    args = {} if hold is None else {"hold_seconds": hold}
    return {"at": at, "command": command, "args": args, "seconds": seconds, "exit_code": 0,
            "stdout": DONE if done else RUNNING}


def polls(n: int, *, status: str = "status") -> tuple[dict[str, Any], ...]:
    """A clean chain (plan, start) with `n` polls of the given command that did not wait (no hold, the work
    still running), and one `find` that is no poll."""
    return (call("plan", request="r"), call("find"), call("start"), *(poll(status) for _ in range(n)))


# --------------------------------------------------------------------------- rule 1-2: no deck


def test_no_deck_is_the_only_failure_and_no_other_rule_runs() -> None:
    # Everything else is wrong too: no Plex, wrong count, no edit, 40 polls, no context.
    case = make_case(slides=3, edit=True, context=True, max_polls=2, pasted=PASTED)
    evidence = make_evidence(pptx=None, slides=0, has_plex=False, trace=polls(40))
    verdict = judge(case, evidence, "react")
    assert len(verdict.failures) == 1
    assert verdict.failures[0].startswith(NO_DECK)
    assert f"{MIN_PPTX_BYTES:,} bytes" in verdict.failures[0]
    assert verdict.pptx is None and not verdict.ok
    assert verdict.polls == 40  # counted for the record, not judged


def test_no_deck_with_an_unfinished_build_adds_the_note() -> None:
    build = WORK / "deck"
    verdict = judge(make_case(slides=3), make_evidence(pptx=None, slides=0, has_plex=False, unfinished=(build,)))
    assert len(verdict.failures) == 2
    assert verdict.failures[0].startswith(NO_DECK)
    assert verdict.failures[1] == f"{STILL_RUNNING}: {build}"


def test_a_deck_that_passes_every_rule() -> None:
    verdict = judge(make_case(slides=3), make_evidence(trace=polls(2)), "react")
    assert verdict.failures == ()
    assert verdict.ok and verdict == PASSED
    assert verdict.pptx == str(DECK) and verdict.has_plex and verdict.slides == 3


# --------------------------------------------------------------------------- rule 3: IBM Plex


def test_no_plex_fails() -> None:
    assert failures_of(make_case(), make_evidence(has_plex=False)) == (NO_PLEX,)


def test_plex_passes() -> None:
    assert failures_of(make_case(), make_evidence(has_plex=True)) == ()


# --------------------------------------------------------------------------- rule 4: slide count


def test_wrong_slide_count_fails() -> None:
    assert failures_of(make_case(slides=3), make_evidence(slides=5)) == ("asked for 3 slides, got 5",)


@pytest.mark.parametrize("got", [2, 4])
def test_slide_count_must_be_exact(got: int) -> None:
    assert failures_of(make_case(slides=3), make_evidence(slides=got)) == (f"asked for 3 slides, got {got}",)


def test_exact_slide_count_passes() -> None:
    assert failures_of(make_case(slides=5), make_evidence(slides=5)) == ()


@pytest.mark.parametrize("got", [1, 7, 40])
def test_slides_none_is_not_checked(got: int) -> None:
    assert failures_of(make_case(slides=None), make_evidence(slides=got)) == ()


# --------------------------------------------------------------------------- rule 5: edit


def test_edit_never_called_lists_the_calls() -> None:
    failures = failures_of(make_case(edit=True), make_evidence(trace=calls("plan", "plan-status", "start", "status")))
    assert failures == (f"{NO_EDIT} (calls: plan, plan-status, start, status)",)


def test_edit_never_called_with_no_calls_says_none() -> None:
    assert failures_of(make_case(edit=True), make_evidence(trace=())) == (f"{NO_EDIT} (calls: none)",)


@pytest.mark.parametrize("chain", [
    ("plan", "edit", "plan", "start", "status"),
    ("plan", "edit", "edit", "start", "plan"),
    ("edit", "plan", "start"),
])
def test_plan_after_the_first_edit_fails(chain: tuple[str, ...]) -> None:
    failures = failures_of(make_case(edit=True), make_evidence(trace=calls(*chain)))
    assert len(failures) == 1 and failures[0].startswith(REDRAFTED)
    assert "the revision the user approved was discarded" in failures[0]


@pytest.mark.parametrize("chain", [
    ("plan", "edit", "start", "status"),
    ("plan", "plan-status", "edit", "plan-status", "start", "status"),  # plan-status is not plan
    ("plan", "plan", "edit", "edit", "start", "status"),
])
def test_plan_before_edit_then_build_passes(chain: tuple[str, ...]) -> None:
    assert failures_of(make_case(edit=True), make_evidence(trace=calls(*chain))) == ()


@pytest.mark.parametrize("chain", [(), ("plan", "start"), ("plan", "edit", "plan", "start")])
def test_edit_rule_is_off_when_not_expected(chain: tuple[str, ...]) -> None:
    assert failures_of(make_case(edit=False), make_evidence(trace=calls(*chain))) == ()


# --------------------------------------------------------------------------- rule 6: polls


def test_polls_count_status_and_plan_status_only() -> None:
    trace = (call("plan"), *calls("plan-status", "plan-status"), call("find"), call("start"),
             *calls("status", "status", "status"), call("edit"))
    verdict = judge(make_case(), make_evidence(trace=trace))
    assert verdict.polls == 5
    assert verdict.commands == ("plan", "plan-status", "plan-status", "find", "start", "status", "status",
                                "status", "edit")


@pytest.mark.parametrize("status", ["status", "plan-status"])
def test_exactly_max_polls_passes_with_a_note(status: str) -> None:
    verdict = judge(make_case(), make_evidence(trace=polls(DEFAULT_MAX_POLLS, status=status)))
    assert DEFAULT_MAX_POLLS == 12
    assert verdict.failures == () and verdict == PASSED
    assert verdict.polls == 12
    assert verdict.notes == ("at the poll ceiling",)


def test_below_max_polls_has_no_note() -> None:
    verdict = judge(make_case(), make_evidence(trace=polls(DEFAULT_MAX_POLLS - 1)))
    assert verdict.failures == () and verdict.notes == ()


def test_no_polls_and_a_ceiling_of_zero_has_no_note() -> None:
    verdict = judge(make_case(max_polls=0), make_evidence(trace=polls(0)))
    assert verdict.failures == () and verdict.notes == ()


def test_one_poll_over_the_ceiling_fails_with_the_count() -> None:
    trace = (*polls(7, status="plan-status"), *(poll() for _ in range(6)))  # 13 in all, mixed
    failures = failures_of(make_case(), make_evidence(trace=trace))
    assert len(failures) == 1
    assert failures[0].startswith("13 status polls did not wait for the work (13 polls in all")
    assert "each is a model round trip" in failures[0]
    assert "holding, not spinning" in failures[0]


def test_a_custom_max_polls_is_honoured() -> None:
    case = make_case(max_polls=2)
    at = judge(case, make_evidence(trace=polls(2)))
    assert at.failures == () and at.notes == ("at the poll ceiling",)
    over = failures_of(case, make_evidence(trace=polls(3)))
    assert len(over) == 1 and over[0].startswith("3 status polls")
    # A higher ceiling lets through what the default would fail.
    assert failures_of(make_case(max_polls=30), make_evidence(trace=polls(30))) == ()
    assert failures_of(make_case(), make_evidence(trace=polls(30)))[0].startswith("30 status polls")


def test_polls_that_hold_never_count_however_many_a_slow_build_needs() -> None:
    # A 20-minute build polled with deck.py's default hold: 20 polls, each answering "still running".
    held = (call("plan"), call("start"), *(poll(hold=60, seconds=60.0) for _ in range(20)), poll(hold=60, done=True))
    verdict = judge(make_case(), make_evidence(trace=held))
    assert verdict == PASSED and verdict.polls == 21 and verdict.spins == 0


def test_a_poll_that_took_the_floor_held_whatever_it_asked_for() -> None:
    # --hold-seconds 0 on a slow backend that answered after 12 s: it waited, so it is no spin.
    slow = (call("start"), *(poll(hold=0, seconds=12.0) for _ in range(20)))
    assert judge(make_case(), make_evidence(trace=slow)).spins == 0
    short = (call("start"), *(poll(hold=5, seconds=5.0) for _ in range(13)))  # asked and took less than 10 s
    assert judge(make_case(), make_evidence(trace=short)).spins == 13


def test_the_same_spinning_agent_counts_the_same_on_a_fast_and_a_busy_machine() -> None:
    # What a loaded machine changes is how long each call takes, never what the calls were.
    fast = (call("start"), *(poll(seconds=0.15) for _ in range(25)))
    busy = (call("start"), *(poll(seconds=0.45) for _ in range(25)))
    counted = [judge(make_case(), make_evidence(trace=trace)).spins for trace in (fast, busy)]
    assert counted == [25, 25]


def test_asking_again_about_work_already_collected_is_a_spin_even_when_it_holds() -> None:
    # The build finished early on this machine: every poll after "done" only repeats it.
    repeated = (call("start"), poll(done=True), *(poll(hold=60, done=True) for _ in range(13)))
    verdict = judge(make_case(), make_evidence(trace=repeated))
    assert verdict.spins == 13 and verdict.failures[0].startswith("13 status polls did not wait")
    # A new build (or a new plan) is new work: its first "done" is a collection again.
    rebuilt = (call("start"), poll(done=True), call("start"), poll(done=True),
               call("plan"), poll("plan-status", done=True), call("edit"), poll("plan-status", done=True))
    assert judge(make_case(), make_evidence(trace=rebuilt)).spins == 0


def test_the_first_answer_of_done_is_a_collection_whatever_its_hold() -> None:
    assert judge(make_case(), make_evidence(trace=(call("start"), poll(hold=0, done=True)))).spins == 0


def test_a_poll_whose_hold_and_answer_are_not_known_gets_the_benefit_of_the_doubt() -> None:
    # A foreign skill's trace (or our record of a command line without --hold-seconds): not counted.
    foreign = (call("start"), *(poll(hold=None) for _ in range(30)))
    verdict = judge(make_case(), make_evidence(trace=foreign))
    assert verdict == PASSED and verdict.polls == 30 and verdict.spins == 0


# --------------------------------------------------------------------------- an edit that names a slide

PLAN = ("# Incident reviews\nAudience: engineers\n\n## Incident reviews at a glance\n- What they are\n\n"
        "## Why incident reviews matter\n- The problem\n- Who is affected\n\n## Next steps\n- Name an owner\n")
TIMELINES = PLAN.replace("## Why incident reviews matter\n- The problem\n- Who is affected",
                         "## Timelines\n[[revised]]\n- What timelines mean for incident reviews")
TIDIED = PLAN.replace("## Why incident reviews matter\n", "## Why incident reviews matter\n[[revised]]\n")
FIX = ("fix slide 2, it should be about timelines", "looks good")
TURNS = (100.0, 200.0, 300.0)  # the request, the change, the approval


def answered(command: str, text: str | None, at: float) -> dict[str, Any]:
    body = {"state": "done", "done": True, **({"text": text} if text is not None else {})}
    return {"at": at, "command": command, "args": {}, "seconds": 0.2, "exit_code": 0, "stdout": json.dumps(body)}


def fix_it(edited: str | None, *, turns: Sequence[float] = TURNS, edit_at: float = 210.0) -> tuple[str, ...]:
    case = Case(name="fix_it", covers="x", tags=(), request="r", context="", replies=FIX,
                expect=Expect(edit=True), path=Path("c.yaml"), line=1)
    trace = (answered("plan", PLAN, 110.0), answered("edit", edited, edit_at), call("start") | {"at": 310.0})
    verdict = judge(case, make_evidence(trace=trace, turns_started=turns))
    # This rule's notes only: the deck here is not a file, so the named-subject rule (test_content.py) notes that
    # it cannot read it.
    return verdict.failures + tuple(f"note: {n}" for n in verdict.notes if "asked to change slide" in n)


def test_an_edit_that_leaves_the_named_slide_as_it_was_fails() -> None:
    # Marked [[revised]], nothing else changed: the seed's "rewritten" slide.
    assert fix_it(TIDIED) == ("reply 1 ('fix slide 2, it should be about timelines') asked to change slide 2, but "
                              "the edit left slide 2 as it was (\u201cWhy incident reviews matter\u201d)",)


def test_an_edit_that_changes_the_named_slide_passes() -> None:
    assert fix_it(TIMELINES) == ()


def test_an_edit_that_drops_the_named_slide_changed_it() -> None:
    assert fix_it(PLAN.split("## Why")[0]) == ()


def test_the_rule_says_when_it_cannot_tell_and_never_guesses() -> None:
    unknown = "whether it changed could not be told"
    assert unknown in fix_it(TIDIED, turns=())[0]  # no turn times (a conversation held by hand)
    assert unknown in fix_it(None)[0]  # the edit answered without the plan's text (a foreign skill)
    assert fix_it(TIDIED, edit_at=320.0) == ()  # no edit in that turn: the edit rule, not this one, speaks


@pytest.mark.parametrize(("reply", "slide"), [("fix slide 2, it should be about timelines", 2),
                                              ("rewrite slide three", 3), ("drop slide #4", 4),
                                              ("make it 3 slides", None), ("why is slide 2 so long?", None),
                                              ("swap slide 1 and slide 2", None), ("yes", None)])
def test_which_replies_name_a_slide_to_change(reply: str, slide: int | None) -> None:
    assert named_slide(reply) == slide


# --------------------------------------------------------------------------- rule 7: context


PASTED = "## Results\n- Activation 64%"


def test_context_never_passed_fails() -> None:
    # The material was retyped into the request: the judge reads the args, not the words.
    trace = (call("plan", request=f"a deck from this {PASTED}", out="plan.md"), call("start"), call("status"))
    assert failures_of(_context_case(), make_evidence(trace=trace)) == (_context_failure(),)


def _context_case(expected: bool = True) -> Case:
    return Case(name="pasted", covers="context", tags=(), request="a deck from this", context=PASTED,
                replies=("yes",), expect=Expect(context=expected), path=Path("cases/judge.yaml"), line=1)


def _context_failure() -> str:
    return f"{NO_CONTEXT}, so it was retyped or summarised into the request, which loses the grounding"


def test_context_with_no_calls_at_all_fails() -> None:
    assert failures_of(_context_case(), make_evidence(trace=())) == (_context_failure(),)


@pytest.mark.parametrize("args", [{"context": ""}, {"source": []}, {"source": None, "context": None}, {}])
def test_empty_context_or_source_does_not_count(args: dict[str, Any]) -> None:
    assert failures_of(_context_case(), make_evidence(trace=(call("plan", **args),))) == (_context_failure(),)


def test_a_call_without_args_does_not_count_and_does_not_crash() -> None:
    trace = ({"command": "plan"}, {"command": "start", "args": None})
    assert failures_of(_context_case(), make_evidence(trace=trace)) == (_context_failure(),)


def test_context_passes() -> None:
    trace = (call("plan", request="a deck from this", context=PASTED, out="plan.md"), call("start"))
    assert failures_of(_context_case(), make_evidence(trace=trace)) == ()


def test_source_passes() -> None:
    trace = (call("plan", request="a deck from this", source=["notes.md"], out="plan.md"), call("start"))
    assert failures_of(_context_case(), make_evidence(trace=trace)) == ()


def test_a_refused_call_then_a_call_with_context_passes() -> None:
    refused = {**call("plan", request=f"a deck from this {PASTED}", out="plan.md"), "exit_code": 1,
               "error": "the request carries pasted material; pass it as --context"}
    retried = call("plan", request="a deck from this", context=PASTED, out="plan.md")
    trace = (refused, retried, call("plan-status", out="plan.md"), call("start"), call("status"))
    assert failures_of(_context_case(), make_evidence(trace=trace)) == ()
    assert failures_of(_context_case(), make_evidence(trace=(refused,))) == (_context_failure(),)


def test_context_rule_is_off_when_not_expected() -> None:
    trace = (call("plan", request=f"a deck from this {PASTED}"), call("start"))
    assert failures_of(_context_case(expected=False), make_evidence(trace=trace)) == ()


# --------------------------------------------------------------------------- expect.deck false


@pytest.mark.parametrize("name", ["deck.pptx", "tiny.pptx", "Solar Draft.pptx"])
def test_a_forbidden_deck_of_any_name_fails_the_confirmation_gate(name: str) -> None:
    # A small stub is not `pptx` (that needs 20 KB and the name deck.pptx) but it is among `decks`.
    stub = WORK / "out" / name
    failures = failures_of(make_case(deck=False), make_evidence(pptx=None, slides=0, has_plex=False, decks=(stub,)))
    assert len(failures) == 1
    assert GATE in failures[0] and failures[0].startswith("a deck was built although the user never approved it")
    assert failures[0].endswith(f"({name})")


def test_no_deck_passes_when_none_is_expected() -> None:
    verdict = judge(make_case(deck=False), make_evidence(pptx=None, slides=0, has_plex=False), "react")
    assert verdict.failures == () and verdict == PASSED


def test_no_other_rule_applies_when_no_deck_is_expected() -> None:
    case = make_case(deck=False, slides=3, edit=True, context=True, max_polls=2, pasted=PASTED)
    quiet = make_evidence(pptx=None, slides=0, has_plex=False, trace=polls(40))
    assert failures_of(case, quiet) == ()
    # With a (real-looking) deck present, the gate is the only failure: no Plex, count, poll or edit rule.
    loud = make_evidence(pptx=DECK, slides=9, has_plex=False, trace=polls(40))
    failures = failures_of(case, loud)
    assert len(failures) == 1 and GATE in failures[0]


# --------------------------------------------------------------------------- several failures, in order


def test_several_failures_are_reported_together_in_rule_order() -> None:
    case = Case(name="all", covers="x", tags=("edit",), request="r", context=PASTED, replies=("yes",),
                expect=Expect(slides=3, edit=True, context=True, max_polls=1), path=Path("c.yaml"), line=1)
    trace = (call("plan", request=f"r {PASTED}"), call("edit", instruction="shorter"), call("plan", request="r"),
             call("start"), poll(), poll())
    failures = failures_of(case, make_evidence(slides=5, has_plex=False, trace=trace))
    assert len(failures) == 5
    assert failures[0] == NO_PLEX
    assert failures[1] == "asked for 3 slides, got 5"
    assert failures[2].startswith(REDRAFTED)
    assert failures[3].startswith("2 status polls")
    assert failures[4] == _context_failure()


def test_each_failure_names_the_calls_that_broke_its_rule() -> None:
    # The item's page shows the command beside the words: the blame of each rule is the call that broke it.
    case = Case(name="all", covers="x", tags=("edit",), request="r", context=PASTED, replies=("yes",),
                expect=Expect(slides=3, edit=True, context=True, max_polls=1), path=Path("c.yaml"), line=1)
    trace = (call("plan", request=f"r {PASTED}"), call("edit", instruction="shorter"), call("plan", request="r"),
             call("start"), poll(), poll(), poll(hold=60, done=True))
    verdict = judge(case, make_evidence(slides=5, has_plex=False, trace=trace))
    assert dict(zip(verdict.failures, verdict.blame, strict=True)) == {
        NO_PLEX: (3,), "asked for 3 slides, got 5": (3,), verdict.failures[2]: (2,), verdict.failures[3]: (4, 5),
        _context_failure(): (0,)}


def test_a_failure_of_what_was_not_done_blames_no_call() -> None:
    verdict = judge(make_case(context=True), make_evidence(trace=calls("find")))
    assert verdict.failures and verdict.blame == ((),)


@pytest.mark.parametrize(("chain", "blamed"), [(("plan", "find", "plan", "start"), (2,)),
                                                (("plan", "start"), (1,)), (("plan",), ())])
def test_an_edit_never_made_blames_what_was_done_instead(chain: tuple[str, ...], blamed: tuple[int, ...]) -> None:
    # A fresh plan instead of an edit, else the build of the unchanged plan.
    verdict = judge(make_case(edit=True, slides=None), make_evidence(trace=calls(*chain)))
    assert verdict.failures[-1].startswith("the user asked for a change") and verdict.blame[-1] == blamed


def test_a_passing_verdict_blames_nothing() -> None:
    assert judge(make_case(), make_evidence(trace=calls("plan", "start"))).blame == ()


def test_a_build_before_approval_blames_that_start() -> None:
    case = make_case()
    trace = (call("plan") | {"at": 110.0}, call("start") | {"at": 120.0}, call("status") | {"at": 210.0})
    verdict = judge(case, make_evidence(trace=trace, turns_started=(100.0, 200.0)))
    assert verdict.failures[0].startswith("the build started before the user approved")
    assert verdict.blame[0] == (1,)


def test_an_edit_that_left_the_named_slide_blames_the_edit() -> None:
    case = Case(name="fix_it", covers="x", tags=(), request="r", context="", replies=FIX,
                expect=Expect(edit=True), path=Path("c.yaml"), line=1)
    trace = (answered("plan", PLAN, 110.0), answered("edit", TIDIED, 210.0), call("start") | {"at": 310.0})
    verdict = judge(case, make_evidence(trace=trace, turns_started=TURNS))
    assert verdict.blame == ((1,),)


# --------------------------------------------------------------------------- Verdict semantics


def test_verdict_equals_passed_only_without_failures() -> None:
    good = judge(make_case(), make_evidence(), "react")
    bad = judge(make_case(), make_evidence(has_plex=False), "react")
    assert good == PASSED
    assert PASSED == good  # noqa: SIM300 - the reflected comparison is what is tested
    assert bad != PASSED
    assert PASSED != bad  # noqa: SIM300
    assert not (bad == PASSED)  # noqa: SIM201 - __eq__ itself, not the default __ne__
    assert good.ok and not bad.ok
    assert repr(PASSED) == "PASSED"


def test_host_and_case_are_carried() -> None:
    verdict = judge(make_case("sunny"), make_evidence(), "shell")
    assert (verdict.case, verdict.host) == ("sunny", "shell")
    assert judge(make_case(), make_evidence()).host == ""


def test_verdicts_compare_on_case_host_and_failures() -> None:
    a = judge(make_case(), make_evidence(slides=3), "react")
    b = judge(make_case(), make_evidence(slides=3, trace=polls(4)), "react")
    assert a == b and hash(a) == hash(b)  # polls and calls are the record, not the verdict's identity
    assert a != judge(make_case(), make_evidence(), "shell")
    assert a != judge(make_case("other"), make_evidence(), "react")
    assert a != judge(make_case(), make_evidence(has_plex=False), "react")
    assert a != "PASSED" and a != object()


# --------------------------------------------------------------------------- explain()


def test_explain_a_failed_verdict() -> None:
    trace = calls("plan", "plan-status", "start", "status")
    verdict = judge(make_case("solar", slides=3), make_evidence(slides=5, has_plex=False, trace=trace), "react")
    assert explain(verdict) == [
        "palette case solar[react] failed:",
        f"  ↳ {NO_PLEX}",
        "  ↳ asked for 3 slides, got 5",
        "  score: 0 — the deck gate failed",
        f"  deck: 5 slides, IBM Plex=False, {DECK}",
        "  calls: plan → plan-status → start → status",
    ]


def test_explain_without_a_deck_or_calls_or_host() -> None:
    lines = explain(judge(make_case("solar"), make_evidence(pptx=None, slides=0, has_plex=False)))
    assert lines[0] == "palette case solar failed:"
    assert lines[1].startswith(f"  ↳ {NO_DECK}") and len(lines) == 5
    assert lines[2] == "  score: 0 — the deck gate failed"
    assert lines[3] == "  deck: none"
    assert lines[4] == "  calls: (none — the skill was never driven)"
    scored = explain(judge(make_case("solar", slides=3), make_evidence(slides=5)))
    assert "  score: 0.50 — failed: slides" in scored  # the slide count failed, the polls held


# --------------------------------------------------------------------------- real files


def run_engine(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALETTE_")}
    return subprocess.run([sys.executable, "-m", "pytest_palette.engine", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=60, check=False)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real 3-slide deck from the reference engine: plan.md, deck/deck.pptx, deck/slide-N.png."""
    root = tmp_path_factory.mktemp("rendered")
    result = run_engine("build-plan", "a 3-slide deck about solar power", "--out", "plan.md", cwd=root)
    assert result.returncode == 0, result.stderr
    result = run_engine("build-deck", "--plan", "plan.md", "--out-dir", "deck", "--json", cwd=root)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["slides"] == 3
    return root


@pytest.fixture
def work(tmp_path: Path, rendered: Path) -> Path:
    """A workspace as an agent leaves it: the plan, a finished build (state and exit files) and its deck."""
    target = tmp_path / "work"
    shutil.copytree(rendered, target)
    (target / "deck" / BUILD_STATE).write_text(json.dumps({"state": "done", "pid": 1}), encoding="utf-8")
    (target / "deck" / BUILD_EXIT).write_text("0\n", encoding="utf-8")
    return target


def write_trace(path: Path, records: Sequence[dict[str, Any]], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail, encoding="utf-8")
    return path


def hand_deck(path: Path, slides: int = 2) -> Path:
    """A deck made with python-pptx, not by Palette: default fonts, no IBM Plex."""
    from pptx import Presentation

    presentation = Presentation()
    for number in range(slides):
        slide = presentation.slides.add_slide(presentation.slide_layouts[1])
        slide.shapes.title.text = f"Slide {number + 1}"
    path.parent.mkdir(parents=True, exist_ok=True)
    presentation.save(str(path))
    return path


def stub_deck(path: Path, slides: int = 1) -> Path:
    """A valid, tiny pptx-shaped zip that even carries IBM Plex: what a failed render can leave."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        for number in range(1, slides + 1):
            archive.writestr(f"ppt/slides/slide{number}.xml", '<p:sld><a:latin typeface="IBM Plex Sans"/></p:sld>')
            archive.writestr(f"ppt/slides/_rels/slide{number}.xml.rels", "<Relationships/>")
    return path


@pytest.mark.end_to_end
def test_inspect_a_rendered_deck(rendered: Path) -> None:
    facts = inspect_deck(rendered / "deck" / "deck.pptx")
    assert facts.slides == 3
    assert facts.has_plex
    assert facts.size == (rendered / "deck" / "deck.pptx").stat().st_size >= MIN_PPTX_BYTES


def test_collect_a_rendered_deck_and_judge_it_passed(work: Path, tmp_path: Path) -> None:
    trace = write_trace(tmp_path / TRACE_NAME, [
        call("plan", request="a deck from this", context=PASTED, out="plan.md"),
        call("plan-status", out="plan.md"),
        call("start", plan="plan.md", out_dir="deck"),
        call("status", out_dir="deck"),
    ])
    evidence = read_folder(work, trace, grace=5.0)
    assert evidence.pptx == work / "deck" / "deck.pptx"
    assert (evidence.slides, evidence.has_plex, evidence.unfinished) == (3, True, ())
    assert evidence.size >= MIN_PPTX_BYTES
    assert evidence.decks == (work / "deck" / "deck.pptx",)
    assert evidence.commands == ["plan", "plan-status", "start", "status"]
    # This deck is about solar power, not the pasted results: the content rule (test_content.py) is off here.
    verdict = judge(replace(_context_case(), expect=Expect(context=True, content=0)), evidence, "react")
    assert verdict == PASSED, explain(verdict)
    assert judge(make_case(slides=3), evidence) == PASSED
    assert judge(make_case(slides=4), evidence).failures == ("asked for 4 slides, got 3",)


def test_a_hand_written_deck_fails_on_plex(tmp_path: Path) -> None:
    work = tmp_path / "work"
    deck = hand_deck(work / "out" / "deck.pptx", slides=2)
    assert deck.stat().st_size >= MIN_PPTX_BYTES  # big enough to be picked: it is the font that gives it away
    evidence = read_folder(work, tmp_path / TRACE_NAME, grace=0)
    assert evidence.pptx == deck and evidence.slides == 2 and not evidence.has_plex
    assert evidence.calls == ()
    assert judge(make_case(slides=2), evidence).failures == (NO_PLEX,)


def test_a_small_deck_is_not_picked_and_judges_as_no_pptx(tmp_path: Path) -> None:
    work = tmp_path / "work"
    stub = stub_deck(work / "deck" / "deck.pptx", slides=3)
    assert stub.stat().st_size < MIN_PPTX_BYTES
    assert inspect_deck(stub).has_plex  # it would pass on Plex: size alone keeps it out
    assert inspect_deck(stub).slides == 3  # slideN.xml counted, _rels/slideN.xml.rels not
    assert newest_deck(work) is None
    evidence = read_folder(work, tmp_path / TRACE_NAME, grace=0)
    assert evidence.pptx is None and evidence.decks == (stub,)
    failures = judge(make_case(), evidence).failures
    assert len(failures) == 1 and failures[0].startswith(NO_DECK)
    # ... but a case that forbids a deck does see it.
    gate = judge(make_case(deck=False), evidence).failures
    assert len(gate) == 1 and GATE in gate[0]


def test_any_deck_sees_every_pptx_whatever_its_name_or_size(tmp_path: Path) -> None:
    a = stub_deck(tmp_path / "a" / "draft.pptx")
    b = hand_deck(tmp_path / "b" / "c" / "Deck Final.pptx")
    (tmp_path / "notes.md").write_text("not a deck", encoding="utf-8")
    (tmp_path / "folder.pptx").mkdir()  # a directory is not a deck
    assert any_deck(tmp_path) == sorted([a, b])
    assert any_deck(tmp_path / "nothing-here") == []


def test_a_corrupt_zip_has_no_slides_and_no_plex(tmp_path: Path) -> None:
    corrupt = tmp_path / "deck.pptx"
    corrupt.write_bytes(b"PK\x03\x04 IBM Plex " + os.urandom(MIN_PPTX_BYTES))
    facts = inspect_deck(corrupt)
    assert (facts.slides, facts.has_plex) == (0, False)
    assert facts.size == corrupt.stat().st_size
    assert newest_deck(tmp_path) == corrupt  # big enough to be picked, and then judged as what it is
    evidence = read_folder(tmp_path, tmp_path / TRACE_NAME, grace=0)
    assert judge(make_case(slides=3), evidence).failures == (NO_PLEX, "asked for 3 slides, got 0")


def test_a_zip_without_slide1_has_no_plex(tmp_path: Path) -> None:
    path = tmp_path / "deck.pptx"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("ppt/slides/slide2.xml", "IBM Plex")
    assert (inspect_deck(path).slides, inspect_deck(path).has_plex) == (0, False)


def test_a_missing_file_inspects_as_empty(tmp_path: Path) -> None:
    facts = inspect_deck(tmp_path / "gone.pptx")
    assert (facts.size, facts.slides, facts.has_plex) == (0, 0, False)


def test_newest_deck_picks_the_newest_of_two(tmp_path: Path, rendered: Path) -> None:
    older = tmp_path / "first" / "deck.pptx"
    newer = tmp_path / "second" / "deck" / "deck.pptx"
    for path in (older, newer):
        path.parent.mkdir(parents=True)
        shutil.copy2(rendered / "deck" / "deck.pptx", path)
    now = time.time()
    os.utime(older, (now - 100, now - 100))
    os.utime(newer, (now - 50, now - 50))
    assert newest_deck(tmp_path) == newer
    os.utime(older, (now, now))
    assert newest_deck(tmp_path) == older


def test_output_copies_named_after_the_case_are_never_picked(work: Path, tmp_path: Path) -> None:
    deck = work / "deck" / "deck.pptx"
    copy = work / "output" / "solar.pptx"
    copy.parent.mkdir()
    shutil.copy2(deck, copy)
    now = time.time()
    os.utime(deck, (now - 100, now - 100))
    os.utime(copy, (now, now))  # newer, bigger than the minimum, but not named deck.pptx
    assert newest_deck(work) == deck
    assert newest_deck(copy.parent) is None


def test_read_trace_reads_records(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / TRACE_NAME, [call("plan", context="x"), call("start")], tail="\n\n")
    assert [r["command"] for r in read_trace(trace)] == ["plan", "start"]
    assert read_trace(tmp_path / "missing.jsonl") == []


def test_read_trace_skips_a_torn_last_line_with_a_warning(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / TRACE_NAME, [call("plan"), call("start")], tail='{"command": "sta')
    with pytest.warns(UserWarning, match=r":3: not a JSON line, skipped"):
        records = read_trace(trace)
    assert [r["command"] for r in records] == ["plan", "start"]


def test_read_trace_warns_about_a_foreign_json_line(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / TRACE_NAME, [call("plan")], tail='["not", "a", "call"]\n')
    with pytest.warns(UserWarning, match=":2:"):
        records = read_trace(trace)
    assert [r["command"] for r in records] == ["plan"]


# --------------------------------------------------------------------------- waiting for builds


def start_build(folder: Path, *, ended: bool) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / BUILD_STATE).write_text(json.dumps({"state": "running", "pid": 0}), encoding="utf-8")
    if ended:
        (folder / BUILD_EXIT).write_text("0\n", encoding="utf-8")
    return folder


def never_sleeps(monkeypatch: pytest.MonkeyPatch) -> None:
    """"At once" without a clock: the wait must not sleep at all."""
    def sleep(seconds: float) -> None:
        raise AssertionError(f"waited {seconds} s where nothing was running")
    monkeypatch.setattr("pytest_palette.judge.evidence.time.sleep", sleep)


def test_wait_returns_at_once_without_builds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    never_sleeps(monkeypatch)
    assert wait_for_builds(tmp_path, grace=3600.0) == []


def test_wait_returns_at_once_when_the_exit_file_exists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    start_build(tmp_path / "deck", ended=True)
    never_sleeps(monkeypatch)
    assert wait_for_builds(tmp_path, grace=3600.0) == []


@pytest.fixture
def exit_later(tmp_path: Path) -> Iterator[Path]:
    """A build whose exit file a background thread writes after ~0.3 s."""
    folder = start_build(tmp_path / "work" / "deck", ended=False)
    timer = threading.Timer(0.3, lambda: (folder / BUILD_EXIT).write_text("0\n", encoding="utf-8"))
    timer.start()
    yield folder
    timer.cancel()
    timer.join()


def test_wait_for_an_exit_file_written_later(exit_later: Path) -> None:
    started = time.monotonic()
    assert wait_for_builds(exit_later.parent, grace=5.0) == []
    waited = time.monotonic() - started
    assert 0.25 <= waited < 2.0  # it waited for the exit, and did not sit out the grace
    assert (exit_later / BUILD_EXIT).exists()


def test_wait_gives_up_on_a_build_that_never_ends(tmp_path: Path) -> None:
    running = start_build(tmp_path / "deck", ended=False)
    start_build(tmp_path / "older", ended=True)
    started = time.monotonic()
    assert wait_for_builds(tmp_path, grace=0.3) == [running]
    assert 0.3 <= time.monotonic() - started < 1.5


def test_collect_records_an_unfinished_build(work: Path, tmp_path: Path) -> None:
    (work / "deck" / BUILD_EXIT).unlink()
    evidence = read_folder(work, tmp_path / TRACE_NAME, grace=0.2)
    assert evidence.unfinished == (work / "deck",)


# --------------------------------------------------------------------------- save_outputs


def test_save_outputs_copies_deck_previews_and_plan(work: Path, tmp_path: Path) -> None:
    evidence = read_folder(work, tmp_path / TRACE_NAME, grace=0)
    output = tmp_path / "output"
    save_outputs(make_case("solar"), evidence, output)
    assert sorted(p.name for p in output.iterdir()) == ["plan.md", "slide-1.png", "slide-2.png", "slide-3.png",
                                                        "solar.pptx"]
    assert (output / "solar.pptx").read_bytes() == (work / "deck" / "deck.pptx").read_bytes()
    assert (output / "plan.md").read_text(encoding="utf-8") == (work / "plan.md").read_text(encoding="utf-8")
    assert inspect_deck(output / "solar.pptx").slides == 3


def test_save_outputs_finds_the_plan_beside_the_deck_folder(tmp_path: Path, rendered: Path) -> None:
    work = tmp_path / "work"
    shutil.copytree(rendered, work / "job")  # work/job/plan.md, work/job/deck/deck.pptx
    evidence = read_folder(work, tmp_path / TRACE_NAME, grace=0)
    save_outputs(make_case("solar"), evidence, tmp_path / "output")
    assert (tmp_path / "output" / "plan.md").is_file()


def test_save_outputs_without_a_deck_copies_nothing(tmp_path: Path) -> None:
    output = tmp_path / "output"
    save_outputs(make_case(), make_evidence(pptx=None), output)
    assert output.is_dir() and list(output.iterdir()) == []


# --------------------------------------------------------------------------- the assertion hook


USER_TEST = '''
from pathlib import Path

from pytest_palette.cases import Case, Expect
from pytest_palette.judge import PASSED, judge
from pytest_palette.judge.evidence import Evidence


def verdict(has_plex, slides, commands):
    case = Case(name="solar", covers="x", tags=(), request="r", context="", replies=("yes",),
                expect=Expect(slides=3), path=Path("c.yaml"), line=1)
    evidence = Evidence(workspace=Path("w"), pptx=Path("w/deck/deck.pptx"), slides=slides, has_plex=has_plex,
                        size=30000, decks=(), calls=tuple({"command": c} for c in commands))
    return judge(case, evidence, "react")


def test_failing():
    assert verdict(False, 5, ["plan", "start", "status"]) == PASSED


def test_failing_reversed():
    assert PASSED == verdict(True, 4, [])


def test_passing():
    assert verdict(True, 3, ["plan", "start", "status"]) == PASSED
'''


def test_assert_verdict_equals_passed_explains_a_failure(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines([
        "*def test_failing():*",
        "*the judge's verdict is not a pass*",
        "*palette case solar[[]react[]] failed:*",
        "*↳ the .pptx does not carry IBM Plex*",
        "*↳ asked for 3 slides, got 5*",
        "*deck: 5 slides, IBM Plex=False, w/deck/deck.pptx*",
        "*calls: plan → start → status*",
    ])
    result.stdout.fnmatch_lines([
        "*def test_failing_reversed():*",
        "*the judge's verdict is not a pass*",
        "*↳ asked for 3 slides, got 4*",
        "*calls: (none — the skill was never driven)*",
    ])
    result.stdout.fnmatch_lines(["*FAILED test_user.py::test_failing - *",
                                 "*FAILED test_user.py::test_failing_reversed - *"])
    result.stdout.no_fnmatch_line("*test_passing*FAILED*")
    result.stdout.no_fnmatch_line("*FAILED*test_passing*")


# --------------------------------------------------------------------------- decisions beyond the seed


def test_a_build_started_without_approval_fails_even_before_its_deck_exists() -> None:
    case = make_case(deck=False)
    running = make_evidence(pptx=None, decks=(), unfinished=(WORK / "deck",))
    [failure] = failures_of(case, running)
    assert "build was started although the user never approved it" in failure and "deck" in failure
    assert failures_of(case, make_evidence(pptx=None, decks=())) == ()


def test_a_deck_read_while_its_build_still_ran_is_noted() -> None:
    verdict = judge(make_case(), make_evidence(unfinished=(WORK / "deck",)), "react")
    assert verdict.ok and any("still running" in note for note in verdict.notes)
    assert not judge(make_case(), make_evidence(), "react").notes


def test_a_foreign_trace_record_without_mapping_args_does_not_crash_the_context_rule() -> None:
    odd = {"command": "plan", "args": "--context notes"}
    assert failures_of(make_case(context=True), make_evidence(trace=(odd,))) == (
        "pasted material never reached the plan — neither --context nor --source was used, so it was retyped "
        "or summarised into the request, which loses the grounding",)
    assert failures_of(make_case(context=True), make_evidence(trace=(odd, call("plan", context="x")))) == ()


# --------------------------------------------------------------------------- a build before the approval


def timed(command: str, at: float) -> dict[str, Any]:
    return {**call(command), "at": at}


APPROVED_AT_20 = (0.0, 10.0, 20.0)  # the opening at 0, reply 1 at 10, reply 2 (the approval) at 20
EDIT_THEN_YES = Case(name="solar", covers="x", tags=(), request="a deck about solar power", context="",
                     replies=("make it 3 slides", "yes"), expect=Expect(slides=3), path=Path("c.yaml"), line=1)


def test_a_build_started_before_the_approving_reply_fails_naming_the_turn() -> None:
    early = make_evidence(trace=(timed("plan", 1.0), timed("start", 2.0), timed("edit", 11.0), timed("start", 21.0)),
                          turns_started=APPROVED_AT_20)
    [failure] = failures_of(EDIT_THEN_YES, early)
    assert failure == ("the build started before the user approved — the confirmation gate was skipped (it started "
                       "after the opening request; the approval came with reply 2, 'yes')")
    after_change = make_evidence(trace=(timed("plan", 1.0), timed("edit", 11.0), timed("start", 12.0)),
                                 turns_started=APPROVED_AT_20)
    [failure] = failures_of(EDIT_THEN_YES, after_change)
    assert "it started after reply 1 ('make it 3 slides')" in failure


def test_a_build_after_the_approving_reply_passes() -> None:
    approved = make_evidence(trace=(timed("plan", 1.0), timed("edit", 11.0), timed("start", 20.0)),
                             turns_started=APPROVED_AT_20)
    assert failures_of(EDIT_THEN_YES, approved) == ()


def test_without_the_turns_times_the_build_order_is_not_judged() -> None:
    unknown = make_evidence(trace=(timed("plan", 1.0), timed("start", 2.0)), turns_started=())
    assert failures_of(EDIT_THEN_YES, unknown) == ()
    partial = make_evidence(trace=(timed("plan", 1.0), timed("start", 2.0)), turns_started=(0.0, 10.0))
    assert failures_of(EDIT_THEN_YES, partial) == ()  # a turn missing: the calls cannot be placed


def test_the_turns_times_come_from_turns_json(tmp_path: Path) -> None:
    from pytest_palette.arena.workspace import Workspace
    from pytest_palette.judge.evidence import read
    from pytest_palette.run.conversation import Transcript

    def read_back(workspace: Workspace) -> Evidence:
        return read(workspace, 0.0, Transcript.saved(workspace).started)

    workspace = Workspace.of(tmp_path, "react", "solar", 1, repeated=False)
    workspace.prepare(EDIT_THEN_YES)
    workspace.turns.write_text(json.dumps({"turns": [{"sent": "x", "started_at": t} for t in APPROVED_AT_20]}))
    assert read_back(workspace).turns_started == APPROVED_AT_20
    workspace.turns.write_text(json.dumps({"turns": [{"sent": "x"}]}))  # an earlier version's turns.json
    assert read_back(workspace).turns_started == ()
