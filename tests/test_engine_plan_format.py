"""The plan markdown parser/serialiser of the reference engine round-trips."""

from __future__ import annotations

from pytest_palette.engine.plan_format import Plan, Section, parse_plan, serialize_plan

CANONICAL = """# Q3 results
Audience: Executives
Sources: notes.md
Preferences:
- Tone: professional
- Length: 3 slides
Revisions:
- "make it 3 slides" -> length 4 -> 3 slides (merged neighbouring slides)

## Revenue
[[layout: two-column]]
[[1 slide]]
- Revenue grew 12% to $4.2M
- EMEA led

| Region | Q3 |
| --- | --- |
| EMEA | 1.1M |
| A \\| B | 2.0M |

## Costs
- Costs fell 3%

## Outlook
- Guidance 5.0M
"""


def test_canonical_text_round_trips() -> None:
    plan = parse_plan(CANONICAL)
    assert serialize_plan(plan) == CANONICAL
    assert plan.title == "Q3 results"
    assert plan.audience == "Executives"
    assert plan.preferences == {"Tone": "professional", "Length": "3 slides"}
    assert plan.header == ["Sources: notes.md"]
    assert len(plan.revisions) == 1
    revenue = plan.sections[0]
    assert revenue.directives == ["layout: two-column", "1 slide"]
    assert revenue.layout == "two-column"
    assert revenue.tables == [[["Region", "Q3"], ["EMEA", "1.1M"], ["A | B", "2.0M"]]]


def test_dataclasses_round_trip() -> None:
    plan = Plan(
        title="Deck",
        audience="Board",
        preferences={"Tone": "casual"},
        sections=[Section("One", ["a", "b"], [[["h1", "h2"], ["1", "2"]]], ["revised"]), Section("Two")],
    )
    plan.sync_length()
    assert plan.preferences["Length"] == "2 slides"
    assert parse_plan(serialize_plan(plan)) == plan


def test_lenient_input_becomes_flat_bullets() -> None:
    plan = parse_plan("# T\n\n## A\n* star\n1. numbered\nplain prose line\n### sub heading\n  - nested\n---\n")
    # A ### sub-heading leads what follows it, in bold; a horizontal rule is no bullet.
    assert plan.sections[0].bullets == ["star", "numbered", "plain prose line", "**sub heading**", "nested"]


def test_inline_directive_in_heading_is_kept() -> None:
    plan = parse_plan("# T\n## Pricing [[layout: two-column]]\n- x\n")
    assert plan.sections[0].title == "Pricing"
    assert plan.sections[0].layout == "two-column"
