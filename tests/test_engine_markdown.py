"""Decks from Markdown written the way people write it (issue 14, step 4).

The fixtures in tests/fixtures/messy/ carry what the shipped corpus does not: bold and emphasis,
code spans and fences, tables inside prose, headings that follow no plan format, a "## Cover"
section, and ``[[ ]]`` holding data or wiki links. Every check reads the built .pptx.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pptx import Presentation

from pytest_palette.engine.build import build_deck
from pytest_palette.engine.plan_format import serialize_plan
from pytest_palette.engine.planner import build_plan

MESSY = Path(__file__).parent / "fixtures" / "messy"
DOCS = sorted(p.stem for p in MESSY.glob("*.md"))
_TABLE_ROW = re.compile(r"^\s*\|(.+)\|\s*$")
_SEPARATOR = re.compile(r"^\s*\|?[\s:|-]+\|?\s*$")


def _build(root: Path, name: str, request: str, context: str) -> Path:
    plan = root / f"{name}.md"
    plan.write_text(serialize_plan(build_plan(request, context)), encoding="utf-8")
    build_deck(plan, root / name, None, 0.0, lambda line: None)
    return root / name


@pytest.fixture(scope="module")
def decks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("messy")
    return {name: _build(root, name, "Turn this into a deck", (MESSY / f"{name}.md").read_text(encoding="utf-8"))
            for name in DOCS}


def _slides(out: Path) -> list[Any]:
    return list(Presentation(str(out / "deck.pptx")).slides)


def _texts(slide: Any, code: bool = True) -> list[str]:
    """Every paragraph a slide shows, in text boxes and table cells (code blocks too, unless not asked)."""
    found: list[str] = []
    for shape in slide.shapes:
        if shape.has_text_frame:
            found.extend(p.text for p in shape.text_frame.paragraphs
                         if code or not all(r.font.name == "IBM Plex Mono" for r in p.runs))
        if shape.has_table:
            found.extend(cell.text for row in shape.table.rows for cell in row.cells)
    return found


def _source_tables(text: str) -> list[list[str]]:
    """Each Markdown table's header row in a source document, code fences skipped."""
    headers: list[list[str]] = []
    fence, previous = False, False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
        row = not fence and bool(_TABLE_ROW.match(line))
        if row and not previous and not _SEPARATOR.match(line):
            headers.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        previous = row
    return headers


@pytest.mark.parametrize("name", DOCS)
def test_no_markdown_markers_in_slide_text(decks: dict[str, Path], name: str) -> None:
    for number, slide in enumerate(_slides(decks[name]), 1):
        for text in _texts(slide, code=False):
            assert "**" not in text and "`" not in text and "[[" not in text and "]]" not in text, (number, text)
            assert not re.search(r"(?<![\w_])__\w|\w__(?![\w_])", text), (number, text)
            assert not re.search(r"(?<![\w*])\*(?=\w)|(?<=\w)\*(?![\w*])", text), (number, text)  # *em*
            assert not text.lstrip().startswith(("|", "~~~", "#")), (number, text)


@pytest.mark.parametrize("name", DOCS)
def test_slide_one_is_a_title_slide_with_the_documents_title(decks: dict[str, Path], name: str) -> None:
    heading = (MESSY / f"{name}.md").read_text(encoding="utf-8").splitlines()[0].lstrip("# ").strip()
    data = json.loads((decks[name] / "deck.json").read_text(encoding="utf-8"))
    first = data["slides"][0]
    assert first["title"] == heading and first["layout"] == "title"
    assert all(s["title"].lower() not in ("cover", "title", "title slide") for s in data["slides"])
    assert heading in _texts(_slides(decks[name])[0])


@pytest.mark.parametrize("name", DOCS)
def test_every_markdown_table_is_a_slide_table(decks: dict[str, Path], name: str) -> None:
    source = (MESSY / f"{name}.md").read_text(encoding="utf-8")
    wanted = _source_tables(source)
    assert wanted, "each messy fixture has a table"
    found = [[cell.text for cell in shape.table.rows[0].cells]
             for slide in _slides(decks[name]) for shape in slide.shapes if shape.has_table]
    plain = [[re.sub(r"[*`_]", "", cell) for cell in header] for header in wanted]
    assert found == plain


def test_table_cells_all_arrive(decks: dict[str, Path]) -> None:
    tables = [shape.table for slide in _slides(decks["release_notes"]) for shape in slide.shapes if shape.has_table]
    cells = [[cell.text for cell in row.cells] for row in tables[0].rows]
    assert cells == [["Metric", "2.3", "2.4", "Change"], ["p95 latency", "420 ms", "180 ms", "-57%"],
                     ["Throughput", "1,200 req/s", "3,100 req/s", "+158%"],
                     ["Error rate", "0.42%", "0.07%", "-0.35 pt"]]
    bold = [run for cell in tables[0].rows[1].cells for p in cell.text_frame.paragraphs for run in p.runs
            if run.text == "-57%"]
    assert bold and bold[0].font.bold  # **-57%** in a cell is a bold run


def _runs(out: Path) -> list[Any]:
    return [run for slide in _slides(out) for shape in slide.shapes if shape.has_text_frame
            for p in shape.text_frame.paragraphs for run in p.runs]


def test_bold_emphasis_and_code_become_formatting(decks: dict[str, Path]) -> None:
    runs = _runs(decks["release_notes"])
    by_text = {run.text: run for run in runs}
    assert by_text["throughput"].font.bold and by_text["safety"].font.italic
    assert by_text["blocking"].font.bold  # __bold__
    assert by_text["420 ms"].font.name == "IBM Plex Mono" and not by_text["420 ms"].font.bold
    assert by_text["batching.enabled"].font.name == "IBM Plex Mono"
    assert by_text["Rollback"].font.bold  # a ### sub-heading leads in bold
    assert all(run.font.name.startswith("IBM Plex") for run in runs)


def test_code_fences_become_monospaced_blocks(decks: dict[str, Path]) -> None:
    for name, first_line in (("release_notes", "pip install ingest-service==2.4.0"),
                             ("design_doc", "def rerank(query: str, hits: list[Hit], k: int = 10) -> list[Hit]:")):
        blocks = [shape.text_frame for slide in _slides(decks[name]) for shape in slide.shapes
                  if shape.has_text_frame and shape.text_frame.paragraphs[0].text == first_line]
        assert len(blocks) == 1, name
        lines = [p.text for p in blocks[0].paragraphs]
        assert all(run.font.name == "IBM Plex Mono" for p in blocks[0].paragraphs for run in p.runs)
        assert not any(line.startswith(("```", "~~~")) for line in lines)
    code = [p.text for slide in _slides(decks["design_doc"]) for shape in slide.shapes if shape.has_text_frame
            for p in shape.text_frame.paragraphs if "pipes and" in p.text]
    assert code == ["\u00a0\u00a0\u00a0\u00a0# | pipes and ## hashes inside code stay code"]  # indent kept


def test_data_in_double_brackets_is_content_and_directives_still_apply(decks: dict[str, Path]) -> None:
    text = " ".join(t for slide in _slides(decks["release_notes"]) for t in _texts(slide))
    for kept in ("Q3 revenue impact: $4.2M is the finance team's estimate", "(ISSUE-812)",
                 "see Windows setup guide"):
        assert kept in text
    team = " ".join(t for slide in _slides(decks["team_update"]) for t in _texts(slide))
    assert "Support tickets: 312, down 18%" in team
    design = json.loads((decks["design_doc"] / "deck.json").read_text(encoding="utf-8"))
    assert design["slides"][0]["bullets"] == ["Draft for the ranking guild, *not final*"]  # one line: a subtitle
    proposal = next(s for s in design["slides"] if "Proposal" in s["title"])
    assert proposal["directives"] == ["layout: two-column"]  # a directive, not text
    assert any("GPU budget: 4 x A10G, ~$3.1k/month" in b for b in proposal["bullets"])


def test_a_cover_section_becomes_the_title_slide(tmp_path: Path) -> None:
    doc = "# Field Guide\nAudience: Rangers\n\n## Cover\n[[layout: title]]\n- Spring 2026\n\n## Birds\n- 41 species\n"
    out = _build(tmp_path, "cover", "Turn this into a deck", doc)
    data = json.loads((out / "deck.json").read_text(encoding="utf-8"))
    assert [(s["title"], s["layout"]) for s in data["slides"]] == [("Field Guide", "title"), ("Birds", "bullets")]
    assert data["slides"][0]["bullets"] == ["Spring 2026"]  # the cover's own line, under the deck's title


def test_plain_requests_get_a_title_slide_too(tmp_path: Path) -> None:
    out = _build(tmp_path, "plain", "Tell the team about our Q3 results, keep it to four", "")
    slides = _slides(out)
    assert len(slides) == 4
    assert "Our Q3 results" in _texts(slides[0])
    data = json.loads((out / "deck.json").read_text(encoding="utf-8"))
    assert data["slides"][0]["layout"] == "title"
    assert not any(s["title"].lower().startswith(("why about", "presentation")) for s in data["slides"])


def test_same_input_same_deck(tmp_path: Path) -> None:
    context = (MESSY / "design_doc.md").read_text(encoding="utf-8")
    first = serialize_plan(build_plan("Turn this into a deck", context))
    assert first == serialize_plan(build_plan("Turn this into a deck", context))
