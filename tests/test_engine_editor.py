"""edit-plan of the reference engine: each kind of change users ask for has a visible effect."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pytest_palette.engine.editor import edit_plan, split_clauses
from pytest_palette.engine.errors import EngineError
from pytest_palette.engine.plan_format import Plan, parse_plan, serialize_plan
from pytest_palette.engine.planner import build_plan

MATERIAL = """# Launch review
Audience: Leadership

## Context
- We launched in March to 1,200 customers
## Results
- Activation rose to 64%
- Churn fell to 2.1%
## Pricing
- Entry tier at $29 per seat
## Risks
- It is not clear whether we will hit 5,000 seats
## Next steps
- Do not expand before Q3
"""


def fresh() -> Plan:
    return build_plan("a 6-slide deck from my notes", context=MATERIAL)  # the title slide + one per section


def titles(plan: Plan) -> list[str]:
    return [s.title for s in plan.sections]


Check = Callable[[Plan], bool]

CASES: list[tuple[str, Check]] = [
    ("make it 3 slides", lambda p: len(p.sections) == 3),
    ("cut it to 4", lambda p: len(p.sections) == 4),
    ("only 2 slides", lambda p: len(p.sections) == 2),
    ("Make it seven slides", lambda p: len(p.sections) == 7),
    ("add a slide on cost", lambda p: len(p.sections) == 7 and "Cost" in titles(p)),
    ("add a slide at the end", lambda p: len(p.sections) == 7 and titles(p)[:6] == titles(fresh())),
    # The title slide stays slide 1: "at the start" is the first slide after it.
    ("add a slide at the start about the team", lambda p: titles(p)[:2] == ["Launch review", "Team"]),
    ("drop the last slide", lambda p: titles(p) == titles(fresh())[:-1]),
    ("remove slide 3", lambda p: "Results" not in titles(p) and len(p.sections) == 5),
    ("remove slides 3 and 4", lambda p: titles(p) == ["Launch review", "Context", "Risks", "Next steps"]),
    ("delete the pricing slide", lambda p: "Pricing" not in titles(p)),
    ("make it shorter", lambda p: len(p.sections) == 5 and p.sections[0].is_title),
    ("longer", lambda p: len(p.sections) == 7 and p.sections[0].is_title),
    ("more casual", lambda p: p.tone == "casual" and "It isn't clear whether we'll hit 5,000 seats"
     in p.sections[4].bullets and "Don't expand before Q3" in p.sections[5].bullets),
    ("can it be more formal?", lambda p: p.tone == "formal" and p.sections[5].title == "Next Steps"),
    ("fix slide 2", lambda p: "revised" in p.sections[1].directives and "revised" not in p.sections[0].directives),
    ("rewrite slide 3", lambda p: "revised" in p.sections[2].directives),
    # A new subject for the slide replaces it, not only tidies it (the judge checks the named slide changed).
    ("fix slide 3, it should be about timelines", lambda p: titles(p) == ["Launch review", "Context", "Timelines",
                                                                          "Pricing", "Risks", "Next steps"]
     and "revised" in p.sections[2].directives and "Activation rose to 64%" not in p.sections[2].bullets),
    ("fix the last slide", lambda p: "revised" in p.sections[-1].directives),
    # "Lead with" puts a slide first after the title slide, which stays slide 1.
    ("lead with the results", lambda p: titles(p)[:2] == ["Launch review", "Results"] and len(p.sections) == 6),
    ("move slide 5 to the front", lambda p: titles(p)[:2] == ["Launch review", "Risks"]),
    ("focus on pricing only", lambda p: len(p.sections) == 6 and titles(p)[:2] == ["Launch review", "Pricing"]
     and p.preferences.get("Focus") == "pricing"
     and all("pricing" in s.text().lower() for s in p.sections[1:])),
]


@pytest.mark.parametrize(("instruction", "check"), CASES, ids=[c[0] for c in CASES])
def test_each_edit_has_its_effect(instruction: str, check: Check) -> None:
    plan = edit_plan(fresh(), instruction)
    assert check(plan), serialize_plan(plan)
    assert plan.preferences["Length"].split()[0] == str(len(plan.sections))
    assert plan.revisions[-1].startswith(f'"{instruction}" -> ')
    assert "not mapped" not in plan.revisions[-1]


def test_figures_survive_count_edits() -> None:
    text = serialize_plan(edit_plan(fresh(), "make it 2 slides"))
    for figure in ("1,200", "64%", "2.1%", "$29", "5,000"):
        assert figure in text


@pytest.mark.parametrize(
    ("instruction", "clauses"),
    [
        ("yes, but drop the last slide", ["yes", "drop the last slide"]),
        ("make it 3 slides and more casual", ["make it 3 slides", "more casual"]),
        ("add a slide on cost and pricing", ["add a slide on cost and pricing"]),
        ("remove slides 2 and 3; make it formal", ["remove slides 2 and 3", "make it formal"]),
        ("fix slide 2, the numbers are wrong", ["fix slide 2, the numbers are wrong"]),
    ],
)
def test_split_clauses(instruction: str, clauses: list[str]) -> None:
    assert split_clauses(instruction) == clauses


def test_combined_instructions_apply_in_order() -> None:
    plan = edit_plan(fresh(), "make it 3 slides and more casual")
    assert len(plan.sections) == 3 and plan.tone == "casual"
    plan = edit_plan(fresh(), "yes, but drop the last slide")
    assert titles(plan) == titles(fresh())[:-1]
    assert "acknowledged" in plan.revisions[-1] and "removed slide 6" in plan.revisions[-1]


def test_unmapped_instruction_is_recorded_not_silent() -> None:
    before = fresh()
    plan = edit_plan(fresh(), "why is there no agenda slide?")
    assert titles(plan) == titles(before)
    assert plan.revisions == ['"why is there no agenda slide?" -> noted, not mapped: '
                              "\u201cwhy is there no agenda slide?\u201d"]
    assert "Revisions:" in serialize_plan(plan)


def test_every_instruction_is_recorded_across_edits() -> None:
    plan = fresh()
    for instruction in ("make it 4 slides", "more casual", "use a blue background"):
        plan = parse_plan(serialize_plan(edit_plan(plan, instruction)))
    assert [r.split(" -> ")[0] for r in plan.revisions] == ['"make it 4 slides"', '"more casual"',
                                                            '"use a blue background"']


def test_cannot_remove_every_slide() -> None:
    plan = edit_plan(build_plan("one slide on tea"), "drop the last slide")
    assert len(plan.sections) == 1 and "at least one slide" in plan.revisions[-1]


def test_empty_instruction_is_an_error() -> None:
    with pytest.raises(EngineError):
        edit_plan(fresh(), "  ")
