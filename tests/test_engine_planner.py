"""build-plan of the reference engine: counts, header fields, grounding in material."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_palette.engine.errors import EngineError
from pytest_palette.engine.plan_format import serialize_plan
from pytest_palette.engine.planner import build_plan

SECTIONED = """# Q3 results
Audience: Executives
Preferences:
- Tone: formal

## Revenue
- Revenue grew 12% to $4.2M
| Region | Q3 |
|---|---|
| EMEA | 1.1M |

## Costs
- Costs fell 3.5%

## Hiring
- 14 hires, 2 departures

## Outlook
- Guidance 5.0M for Q4
"""


@pytest.mark.parametrize(
    ("request_text", "count"),
    [
        ("Make a 5-slide deck on prompt caching", 5),
        ("I need 12 slides about our roadmap", 12),
        ("a 3 slide pitch on solar panels", 3),
        ("two slides on Kubernetes please", 2),
        ("Can you do a seven-slide presentation about hiring?", 7),
        ("one slide on the outage", 1),
        ("a single slide about lunch", 1),
        ("twenty slides on history", 20),
        ("a deck on prompt caching", 5),  # default
    ],
)
def test_slide_count_from_request(request_text: str, count: int) -> None:
    plan = build_plan(request_text)
    assert len(plan.sections) == count
    assert plan.preferences["Length"] == (f"{count} slides" if count != 1 else "1 slide")


@pytest.mark.parametrize(
    ("material", "count"),
    [
        ("# Doc\nPreferences:\n- Length: 3 slides\n\n## A\n- a\n## B\n- b\n", 3),
        ("# Doc\nSlides: 6\n\n## A\n- a\n## B\n- b\n", 6),
        ("# Doc\n[[4 slides]]\n\n## A\n- a\n", 4),
        ("# Doc\n\n## A\n- a\n## B\n- b\n## C\n- c\n## D\n- d\n", 4),  # sections count (the title slide among them)
        ("# Doc\n\n## A\n[[1 slide]]\n- a\n## B\n[[1 slide]]\n- b\n", 2),  # per-section directive
        ("# Doc\n\n## Cover\n- Q3 2026\n## A\n- a\n## B\n- b\n", 3),  # the material's cover is slide 1
    ],
)
def test_slide_count_from_material(material: str, count: int) -> None:
    assert len(build_plan("turn this into a deck", context=material).sections) == count


def test_request_count_beats_material() -> None:
    assert len(build_plan("make it 2 slides", context=SECTIONED).sections) == 2


def test_title_audience_tone_from_request() -> None:
    plan = build_plan("A casual 4-slide deck on prompt caching for the board")
    assert (plan.title, plan.audience, plan.tone) == ("Prompt caching", "The board", "casual")
    assert (plan.sections[0].title, plan.sections[0].bullets, plan.sections[0].layout) == (
        "Prompt caching", ["The board"], "title")
    assert all("prompt caching" in " ".join(s.bullets).lower() for s in plan.sections[1:])
    assert "Topic: prompt caching" in plan.header


def test_defaults_without_topic() -> None:
    plan = build_plan("make me a deck")
    assert plan.title and plan.audience == "General audience" and plan.tone == "professional"
    assert len(plan.sections) == 5


def test_material_header_and_grounding() -> None:
    plan = build_plan("a deck from my notes", context=SECTIONED)
    text = serialize_plan(plan)
    assert (plan.title, plan.audience, plan.tone) == ("Q3 results", "Executives", "formal")
    # Slide 1 is the title slide; the two smallest neighbours share a slide to keep the count.
    assert [s.title for s in plan.sections] == ["Q3 results", "Revenue", "Costs & Hiring", "Outlook"]
    for figure in ("$4.2M", "3.5%", "14 hires, 2 departures", "5.0M", "| EMEA | 1.1M |"):
        assert figure in text


@pytest.mark.parametrize("count", [1, 2, 3])
def test_fewer_slides_merge_without_losing_figures(count: int) -> None:
    text = serialize_plan(build_plan(f"{count} slides", context=SECTIONED))
    assert text.count("\n## ") == count
    for figure in ("$4.2M", "3.5%", "14 hires", "5.0M", "| EMEA | 1.1M |"):
        assert figure in text


def test_more_slides_add_sections() -> None:
    plan = build_plan("make it 7 slides", context=SECTIONED)
    titles = [s.title for s in plan.sections]
    assert len(titles) == 7 and titles[:5] == ["Q3 results", "Revenue", "Costs", "Hiring", "Outlook"]
    assert len(set(titles)) == 7


def test_unsectioned_material_is_spread_over_slides() -> None:
    notes = ("We shipped the cache in March. Hit rate went from 41% to 78%.\n\n"
             "Latency dropped by 230 ms at p95.\n\nRisks:\n- vendor lock-in\n- budget of 120k")
    plan = build_plan("a 3 slide deck on the cache rollout", context=notes)
    text = serialize_plan(plan)
    assert len(plan.sections) == 3
    for figure in ("41% to 78%", "230 ms", "120k"):
        assert figure in text


def test_sources_are_read_and_checked(tmp_path: Path) -> None:
    source = tmp_path / "notes.md"
    source.write_text(SECTIONED, encoding="utf-8")
    plan = build_plan("deck please", sources=[str(source)])
    assert "$4.2M" in serialize_plan(plan) and "Sources: notes.md" in plan.header
    pdf = tmp_path / "notes.pdf"
    pdf.write_bytes(b"%PDF")
    with pytest.raises(EngineError, match=r"\.pdf.*only \.md"):
        build_plan("deck", sources=[str(pdf)])
    with pytest.raises(EngineError, match="no source file"):
        build_plan("deck", sources=[str(tmp_path / "missing.txt")])


def test_large_paste_is_fast() -> None:
    sections = "".join(
        f"## Topic {i}\n" + "".join(f"- Point {i}.{j}: figure {i * 100 + j} units, up {j}.5% on last year\n"
                                     for j in range(8))
        for i in range(26)
    )
    material = "# Big document\nAudience: Everyone\nSlides: 10\n\n" + sections
    assert len(material) > 11_000
    plan = build_plan("turn this into a deck", context=material)  # its speed: benchmarks/, not a test
    assert len(plan.sections) == 10
    assert "figure 2507 units" in serialize_plan(plan)


def test_deterministic() -> None:
    assert serialize_plan(build_plan("5 slides on tea", context=SECTIONED)) == serialize_plan(
        build_plan("5 slides on tea", context=SECTIONED))


def test_empty_request_without_material_is_an_error() -> None:
    with pytest.raises(EngineError, match="empty request"):
        build_plan("   ")


def test_prose_before_the_first_section_lands_on_the_first_slide() -> None:
    plan = build_plan("deck", context="- Budget is 120k\nWe grew 9%.\n\n## Plan\n- Hire 3 people\n")
    assert plan.sections[0].bullets == ["Budget is 120k", "We grew 9%.", "Hire 3 people"]
