"""Checks and the score: every rule yields its check failing and holding, with its role and weight; the score is 0
through a gate and partial through scored checks; a case's `checks:` changes weights and roles; a record written
before checks gets the score its facts allow (docs/judge.md, "Checks")."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec
import pytest
from test_judge import DECK, PASTED, TURNS, answered, call, make_case, make_evidence, polls

from pytest_palette.cases import Case, CaseFileError, Expect, load_cases
from pytest_palette.judge import judge
from pytest_palette.judge import palette as judge_module
from pytest_palette.results.checks import (
    COMMON_CHECKS,
    PALETTE_CHECKS,
    Outcome,
    merged,
    said,
    score,
    score_of,
    values_of,
)
from pytest_palette.results.record import GATE, SCORED, Check, Judged, Record, Terms, Usage, from_json
from pytest_palette.rules import Failure, Passed, SkillRules

FIX = ("fix slide 2, it should be about timelines", "yes")
PLAN = "# Deck\n## Intro\nhello\n## Costs\nmoney\n"


def checks_of(case: Case, **evidence: Any) -> dict[str, Check]:
    return {check.name: check for check in judge(case, make_evidence(**evidence), "react").checks}


def turn_case(*replies: str, **expect: Any) -> Case:
    return replace(make_case(**expect), replies=replies)


# (what is judged, the check, held?) — each rule failing and holding, on built evidence.
SCENARIOS: list[tuple[str, Case, dict[str, Any], str, bool]] = [
    ("a declined case with no deck", make_case(deck=False), {"pptx": None}, "declined", True),
    ("a declined case with a deck", make_case(deck=False), {}, "declined", False),
    ("a build after the approval", make_case(), {"trace": (call("start") | {"at": 150.0},), "turns_started": (0, 100)},
     "confirmation", True),
    ("a build before the approval", make_case(), {"trace": (call("start") | {"at": 50.0},), "turns_started": (0, 100)},
     "confirmation", False),
    ("a deck with IBM Plex", make_case(), {}, "deck", True),
    ("no deck", make_case(), {"pptx": None}, "deck", False),
    ("a deck without IBM Plex", make_case(), {"has_plex": False}, "deck", False),
    ("the slides asked for", make_case(slides=3), {"slides": 3}, "slides", True),
    ("a slide too many", make_case(slides=3), {"slides": 4}, "slides", False),
    ("an edit", make_case(edit=True), {"trace": tuple(call(c) for c in ("plan", "edit", "start"))}, "edit", True),
    ("no edit", make_case(edit=True), {"trace": tuple(call(c) for c in ("plan", "plan", "start"))}, "edit", False),
    ("polls that wait", make_case(max_polls=2), {"trace": polls(2)}, "polls", True),
    ("polls that spin", make_case(max_polls=2), {"trace": polls(3)}, "polls", False),
    ("context passed", make_case(context=True, pasted=PASTED), {"trace": (call("plan", context=PASTED),)},
     "context", True),
    ("context retyped", make_case(context=True, pasted=PASTED), {"trace": (call("plan", request=PASTED),)},
     "context", False),
]


@pytest.mark.parametrize(("case", "evidence", "name", "held"), [s[1:] for s in SCENARIOS],
                         ids=[s[0] for s in SCENARIOS])
def test_each_rule_yields_its_check_held_or_failed_with_its_role(case: Case, evidence: dict[str, Any], name: str,
                                                                   held: bool) -> None:
    found = checks_of(case, **evidence)
    check = found[name]
    assert (check.passed, check.credit) == (held, 1.0 if held else 0.0)
    assert check.role == PALETTE_CHECKS[name].role and check.weight == 1.0
    assert bool(check.words) is not held  # a failed check says why
    verdict = judge(case, make_evidence(**evidence), "react")
    # Pass still means what it meant: every check held.
    assert verdict.ok is all(c.passed for c in verdict.checks)
    if not held:
        assert verdict.score == (0.0 if check.role == GATE else pytest.approx(
            1 - 1 / sum(1 for c in verdict.checks if c.role == SCORED)))


def test_a_rule_that_does_not_apply_makes_no_check() -> None:
    found = checks_of(make_case(), trace=tuple(call(c) for c in ("plan", "start")))
    assert set(found) == {"confirmation", "deck", "polls"}  # no slide count, edit or material asked for
    assert "confirmation" not in checks_of(replace(make_case(), replies=()))  # no reply, no approval to wait for
    # No deck ends the judging: nothing after the gate is checked.
    assert set(checks_of(make_case(slides=3, edit=True), pptx=None)) == {"confirmation", "deck"}


def test_a_named_slide_a_subject_and_a_question_are_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(judge_module, "deck_text", lambda _: "Intro. Timelines of the launch.")
    case = turn_case(*FIX, edit=True)
    changed = PLAN.replace("## Costs\nmoney", "## Timelines\nwhen")
    trace = (answered("plan", PLAN, 110.0), answered("edit", changed, 210.0), call("start") | {"at": 310.0})
    found = checks_of(case, trace=trace, turns_started=TURNS)
    assert (found["named_slide"].passed, found["subject"].passed) == (True, True)
    unchanged = (answered("plan", PLAN, 110.0), answered("edit", PLAN, 210.0), call("start") | {"at": 310.0})
    monkeypatch.setattr(judge_module, "deck_text", lambda _: "Intro. Costs.")
    found = checks_of(case, trace=unchanged, turns_started=TURNS)
    assert (found["named_slide"].passed, found["subject"].passed) == (False, False)
    assert found["named_slide"].role == SCORED and "left slide 2 as it was" in found["named_slide"].words

    asked = turn_case("why is there no slide on costs?", "yes")
    quiet = {"trace": (call("plan") | {"at": 110.0}, call("start") | {"at": 310.0}), "turns_started": TURNS}
    assert checks_of(asked, **quiet)["question"].passed is True
    acted = {**quiet, "trace": (call("plan") | {"at": 110.0}, call("edit") | {"at": 210.0},
                                call("start") | {"at": 310.0})}
    assert checks_of(asked, **acted)["question"].passed is False


def test_the_share_of_pasted_figures_scores_continuously_with_full_credit_at_the_share_asked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pasted = "# Results\n- Revenue $4.2M\n- Churn 3.1%\n- Growth 12%\n- Margin 41%"
    case = make_case(context=True, pasted=pasted, content=0.8)
    trace = (call("plan", context=pasted), call("start"))
    monkeypatch.setattr(judge_module, "deck_text", lambda _: "Results: revenue $4.2M, churn 3.1%")
    [check] = [c for c in judge(case, make_evidence(trace=trace), "react").checks if c.name == "content"]
    # 3 of 5 (the heading and two figures): 60%, against the 80% asked for.
    assert (check.passed, check.share, check.credit) == (False, 0.6, 0.75)
    verdict = judge(case, make_evidence(trace=trace), "react")
    # polls, context, content
    assert 0 < verdict.score < 1 and verdict.score == pytest.approx((1 + 1 + 0.75) / 3, abs=1e-4)
    monkeypatch.setattr(judge_module, "deck_text", lambda _: "Results: $4.2M 3.1% 12% — margin")
    [check] = [c for c in judge(case, make_evidence(trace=trace), "react").checks if c.name == "content"]
    assert (check.passed, check.share, check.credit) == (True, 0.8, 1.0)


def test_a_case_weighs_its_checks_and_makes_a_scored_check_a_gate() -> None:
    evidence = {"slides": 4, "trace": polls(0)}
    plain = judge(make_case(slides=3), make_evidence(**evidence), "react")
    assert plain.score == 0.5  # slides failed, polls held
    heavy = judge(make_case(slides=3, weights=(("slides", 3.0),)), make_evidence(**evidence), "react")
    assert heavy.score == 0.25 and {c.name: c.weight for c in heavy.checks}["slides"] == 3.0
    unweighed = judge(make_case(slides=3, weights=(("slides", 0.0),)), make_evidence(**evidence), "react")
    assert unweighed.score == 1.0 and not unweighed.ok  # a weight of 0 is shown, not counted: it still fails
    gated = judge(make_case(slides=3, gates=("slides",)), make_evidence(**evidence), "react")
    assert gated.score == 0.0 and {c.name: c.role for c in gated.checks}["slides"] == GATE


def test_a_projects_rules_yield_checks_the_same_way_and_a_bare_failure_is_a_gate() -> None:
    from pytest_palette.results.checks import CheckSpec

    def rules(case: Case, evidence: object) -> Any:
        yield Passed("written")
        yield Failure("two entries short", (), "entries", credit=0.5, share=0.5)

    own = SkillRules(judge=rules, checks={"written": CheckSpec(GATE, "w"), "entries": CheckSpec(SCORED, "e", 2.0)})
    verdict = judge(make_case(), make_evidence(), "mine", own, "mine")
    found = {c.name: c for c in verdict.checks}
    assert (found["written"].role, found["entries"].role, found["entries"].weight) == (GATE, SCORED, 2.0)
    assert verdict.score == 0.5 and not verdict.ok
    bare = SkillRules(judge=lambda case, evidence: iter(["no CHANGELOG.md"]))
    verdict = judge(make_case(), make_evidence(), "mine", bare, "mine")
    assert [(c.name, c.role, c.passed) for c in verdict.checks] == [("rules", GATE, False)] and verdict.score == 0.0
    undeclared = SkillRules(judge=lambda case, evidence: iter([Failure("x", (), "surprise")]))
    assert judge(make_case(), make_evidence(), "mine", undeclared, "mine").checks[0].role == GATE


def test_a_check_found_several_times_holds_when_each_did_and_earns_the_least() -> None:
    spec = PALETTE_CHECKS["subject"]
    both = merged("subject", [Outcome(True, 1.0), Outcome(False, 0.0, None, "no pricing")], spec, {}, ())
    assert (both.passed, both.credit, both.words) == (False, 0.0, "no pricing")
    assert merged("subject", [Outcome(True, 1.0)] * 2, spec, {}, ()).passed is True


def test_the_score_is_zero_through_a_gate_weighted_otherwise_and_an_ungraded_check_counts_for_nothing() -> None:
    def made(name: str, role: Any, passed: bool | None, credit: float, weight: float = 1.0) -> Check:
        return Check(name=name, role=role, weight=weight, passed=passed, credit=credit)

    assert score([]) == 1.0
    assert score([made("deck", GATE, True, 1), made("slides", SCORED, False, 0)]) == 0.0 + 0.0
    assert score([made("deck", GATE, False, 0), made("slides", SCORED, True, 1)]) == 0.0
    assert score([made("a", SCORED, True, 1, 3), made("b", SCORED, False, 0)]) == 0.75
    assert score([made("a", SCORED, True, 1), made("rubric", SCORED, None, 0)]) == 1.0


def record(outcome: str, failures: tuple[str, ...] = (), **judged: Any) -> Record:
    facts = Judged(slides=3, has_plex=True, deck=True, calls=("plan", "start"), polls=0, max_polls=12,
                   context_expected=False, context_reached=False, edit_expected=False, edit_called=False,
                   replanned_after_edit=False, **judged)
    return Record(run_id="r", case="c", host="react", run_index=1, workspace="react/c", outcome=outcome,  # type: ignore[arg-type]
                  failures=failures, judged=facts if outcome in ("pass", "fail") else None,
                  terms=Terms(model="m", label="m", provider="p", skill_hash="abc", fingerprint="f",
                              plugin_version="0"),
                  usage=Usage(seconds=1, turns=1, input_tokens=None, output_tokens=None, cost_usd=None,
                              started_at=0, ended_at=1), case_hash="h", tags=())


def test_a_record_written_before_checks_reads_as_before_and_its_score_is_derived_where_it_can_be() -> None:
    old = record("pass")
    line = json.loads(old.to_json())
    del line["judged"]["checks"], line["judged"]["score"]  # as a line written before checks
    assert from_json(json.dumps(line)) == old and score_of(old) == 1.0
    assert score_of(record("fail", ("no .pptx was produced (no deck.pptx …)",))) == 0.0
    assert score_of(record("fail", ("the .pptx does not carry IBM Plex — it was not rendered by Palette",))) == 0.0
    assert score_of(record("fail", ("changelog short",), rules="changelog")) == 0.0  # a project's rules: binary
    assert score_of(record("fail", ("asked for 3 slides, got 5",))) is None  # which checks held is not known
    assert score_of(record("error", ("host failed",))) is None
    kept = record("fail", ("asked for 3 slides, got 5",), score=0.5,
                  checks=(Check(name="slides", role=SCORED, weight=1, passed=False, credit=0),))
    assert score_of(from_json(kept.to_json())) == 0.5


def write(tmp_path: Path, expect: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(f"- name: weighed\n  covers: weights\n  request: a deck\n  replies: ['yes']\n  expect:\n{expect}",
                    encoding="utf-8")
    return path


@pytest.mark.parametrize(("expect", "line", "said"), [
    ("    checks:\n      slide: 2\n", 7, "unknown key 'slide' in 'expect: checks' of case 'weighed' (known: "),
    ("    checks:\n      slides: -1\n", 7, "the weight of slides must be a number, 0 or more, not -1"),
    ("    checks:\n      slides: heavy\n", 7, "slides must be a weight (a number, 0 or more) or 'gate', not 'heavy'"),
    ("    checks:\n      deck: 2\n", 7, "deck is a gate, which has no weight"),
    ("    checks: [slides]\n", 6, "'expect: checks' of case 'weighed' must be a mapping"),
    ("    rubric: [a, b]\n", 6, "'rubric' must be str, not list"),
    ("    rubric: '  '\n", 6, "rubric is empty"),
])
def test_a_case_file_with_a_wrong_check_or_rubric_is_one_line_with_file_and_line(tmp_path: Path, expect: str,
                                                                                   line: int, said: str) -> None:
    path = write(tmp_path, expect)
    with pytest.raises(CaseFileError) as raised:
        load_cases(path)
    message = str(raised.value)
    assert message.startswith(f"{path}:{line}: ") and said in message and "\n" not in message


def test_a_cases_checks_and_rubric_are_read_and_keep_old_hashes(tmp_path: Path) -> None:
    [case] = load_cases(write(tmp_path, "    slides: 3\n    rubric: covers the costs\n    checks:\n"
                                        "      slides: 2\n      content: gate\n      rubric: gate\n"))
    assert (case.expect.weights, case.expect.gates, case.expect.rubric) == \
        ((("slides", 2.0),), ("content", "rubric"), "covers the costs")
    assert Case.from_json(json.loads(json.dumps(case.to_json()))) == case
    [plain] = load_cases(write(tmp_path, "    slides: 3\n"))
    # A case without the new keys hashes as it did before they existed.
    assert plain.digest() == replace(plain, expect=Expect(slides=3)).digest()
    assert plain.digest() != case.digest()
    assert set(COMMON_CHECKS) | set(PALETTE_CHECKS) >= {"rubric", "validity", "deck", "content"}
    assert DECK.name == "deck.pptx"


def test_docs_list_every_check_with_its_role_and_default_weight() -> None:
    text = (Path(__file__).resolve().parent.parent / "docs" / "judge.md").read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip(" `"): [cell.strip() for cell in line.split("|")[2:4]]
            for line in text.splitlines() if line.startswith("| `")}
    specs = {**COMMON_CHECKS, **PALETTE_CHECKS}
    assert {name: rows.get(name) for name in specs} == \
        {name: [spec.role, "—" if spec.role == GATE else f"{spec.weight:g}"] for name, spec in specs.items()}


# What each check expected and observed, as the record keeps it (docs/judge.md, "Checks"): by scenario above.
VALUES: dict[str, tuple[object, object]] = {
    "a declined case with no deck": ("no deck", "no deck"),
    "a build after the approval": ("no build before the approval", "no build before the approval"),
    "a build before the approval": ("no build before the approval", "a build before the approval"),
    "a deck with IBM Plex": ("a deck in IBM Plex", "a deck in IBM Plex"),
    "no deck": ("a deck in IBM Plex", "no .pptx"),
    "a deck without IBM Plex": ("a deck in IBM Plex", "a .pptx without IBM Plex"),
    "the slides asked for": (3, 3),
    "a slide too many": (3, 4),
    "an edit": ("edit-plan", "edit-plan"),
    "no edit": ("edit-plan", "no edit-plan"),
    "polls that wait": ("at most 2 spins", "2 spins of 2 polls"),
    "polls that spin": ("at most 2 spins", "3 spins of 3 polls"),
    "context passed": ("--context or --source", "--context or --source"),
    "context retyped": ("--context or --source", "neither"),
}


@pytest.mark.parametrize(("case", "evidence", "name", "scenario"), [(*s[1:4], s[0]) for s in SCENARIOS],
                         ids=[s[0] for s in SCENARIOS])
def test_each_check_keeps_what_it_expected_and_what_it_observed(case: Case, evidence: dict[str, Any], name: str,
                                                                 scenario: str) -> None:
    check = checks_of(case, **evidence)[name]
    if scenario == "a declined case with a deck":  # the deck it found, by name
        assert check.expected == "no deck" and str(check.observed).endswith(".pptx")
    else:
        assert (check.expected, check.observed) == VALUES[scenario]
    # The record holds them as they were, and a record written before they were kept tells what its facts can.
    judged = Judged(slides=4, has_plex=True, deck=True, calls=("plan", "start"), polls=3, max_polls=2,
                    context_expected=True, context_reached=False, edit_expected=True, edit_called=False,
                    replanned_after_edit=False, spins=3, checks=(check,), blame=((1,),))
    line = _record(judged).to_json()
    assert from_json(line).judged == judged and b'"expected"' in line
    assert values_of(check, judged) == (check.expected, check.observed)


def test_a_record_written_before_check_values_tells_what_its_facts_can() -> None:
    judged = Judged(slides=4, has_plex=True, deck=True, calls=("plan", "start"), polls=3, max_polls=2,
                    context_expected=True, context_reached=False, edit_expected=True, edit_called=True,
                    replanned_after_edit=True, spins=3)
    bare = {name: Check(name=name, role=GATE, weight=1.0, passed=False, credit=0.0) for name in
            ("slides", "polls", "edit", "context", "deck", "near_miss", "question")}
    assert {name: values_of(check, judged) for name, check in bare.items()} == {
        "slides": (None, 4), "polls": ("at most 2 spins", "3 spins of 3 polls"),
        "edit": ("edit-plan", "edit-plan, then a new plan"), "context": ("--context or --source", "neither"),
        "deck": ("a deck in IBM Plex", "a deck in IBM Plex"),
        "near_miss": ("no call of the skill", "2 calls of the skill"), "question": (None, None)}
    # A project's own rules keep their own: nothing is told for them.
    assert values_of(bare["slides"], msgspec.structs.replace(judged, rules="changelog")) == (None, None)
    assert [said(v) for v in (None, True, False, 0.8, 3, "edit-plan")] == ["—", "yes", "no", "0.8", "3", "edit-plan"]


def test_the_near_miss_keeps_what_it_expected_of_the_skill_and_how_many_calls_it_made() -> None:
    case = make_case(skill=False)
    assert (lambda c: (c.expected, c.observed))(checks_of(case, trace=(call("plan"), call("start")))["near_miss"]) \
        == ("no call of the skill", "2 calls of the skill")
    assert (lambda c: (c.expected, c.observed))(checks_of(case, trace=(), pptx=None)["near_miss"]) \
        == ("no call of the skill", "no call of the skill")


def _record(judged: Judged) -> Record:
    return Record(run_id="r", case="c", host="react", run_index=1, workspace="react/c", outcome="fail",
                  failures=("f",), judged=judged,
                  terms=Terms(model="m", label="m", provider="p", skill_hash="s", fingerprint="f", plugin_version="v"),
                  usage=Usage(seconds=1.0, turns=1, input_tokens=None, output_tokens=None, cost_usd=None,
                              started_at=0.0, ended_at=1.0), case_hash="h", tags=())
