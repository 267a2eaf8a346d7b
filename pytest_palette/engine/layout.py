"""Where things go on a 16:9 slide, in inches and points, shared by the pptx and the previews.

Computing the geometry once keeps a preview faithful to its slide. Text fitting is an
estimate (average glyph width ~0.52 em for a sans face); the pptx also asks PowerPoint to
shrink on overflow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .markdown import plain
from .plan_format import TITLE_LAYOUTS, Section, Table

SLIDE_W, SLIDE_H = 13.333, 7.5  # inches, 16:9
MARGIN_X = 0.6
TITLE_TOP, TITLE_H = 0.4, 1.05
BODY_TOP = 1.75
BODY_BOTTOM = 6.85
FOOTER_TOP, FOOTER_H = 6.95, 0.35
GLYPH_EM = 0.52
LINE = 1.2  # line height in em
PARA_GAP = 0.45  # space before each bullet, in em
BULLET_INDENT = 0.3  # inches
MONO_EM = 0.6  # a monospaced glyph's width in em
CODE_PAD = 0.12  # inches of padding inside a code block's panel


@dataclass(frozen=True)
class Box:
    x: float
    y: float
    w: float
    h: float


@dataclass
class SlideLayout:
    kind: str  # "bullets", "two-column", "title", "table"
    title_box: Box
    title_size: float
    bullet_columns: list[tuple[Box, list[str]]] = field(default_factory=list)
    bullet_size: float = 20.0
    tables: list[tuple[Box, Table]] = field(default_factory=list)
    table_size: float = 14.0
    code: list[tuple[Box, str]] = field(default_factory=list)
    code_size: float = 14.0
    footer_box: Box = Box(MARGIN_X, FOOTER_TOP, SLIDE_W - 2 * MARGIN_X, FOOTER_H)


def wrap_lines(text: str, width_in: float, size_pt: float) -> int:
    per_line = max(8, int(width_in * 72 / (size_pt * GLYPH_EM)))
    return max(1, math.ceil(len(text) / per_line))


def text_height(lines: list[str], width_in: float, size_pt: float, indent: float = 0.0) -> float:
    total = 0.0
    for index, text in enumerate(lines):
        rows = wrap_lines(plain(text), width_in - indent, size_pt)  # measured as shown, without markers
        total += rows * size_pt * LINE + (PARA_GAP * size_pt if index else 0)
    return total / 72


def fit_size(lines: list[str], box: Box, sizes: tuple[float, ...], indent: float = 0.0) -> float:
    """The largest size whose estimated height fits the box (the smallest if none does)."""
    for size in sizes:
        if text_height(lines, box.w, size, indent) <= box.h:
            return size
    return sizes[-1]


def column_widths(table: Table, width: float) -> list[float]:
    """Column widths (inches) in proportion to each column's longest cell, within bounds: a column of
    long descriptions gets room, a column of "Green" does not take a quarter of the slide."""
    cols = max(len(row) for row in table)
    longest = [max((len(plain(row[c])) for row in table if c < len(row)), default=0) for c in range(cols)]
    weights = [min(40, max(8, n + 2)) for n in longest]  # + 2: a cell's margins
    return [width * w / sum(weights) for w in weights]


def code_size(code: str, box: Box) -> float:
    """The largest size (7 to 14 pt) at which every line of ``code`` fits ``box`` unwrapped."""
    lines = code.split("\n") or [""]
    widest = max(8, *(len(line) for line in lines))
    by_width = (box.w - 2 * CODE_PAD) * 72 / (widest * MONO_EM)
    by_height = (box.h - 2 * CODE_PAD) * 72 / (len(lines) * LINE)
    return max(7.0, min(14.0, by_width, by_height))


BULLET_SIZES = (24.0, 22.0, 20.0, 18.0, 16.0, 14.0, 13.0, 12.0, 11.0, 10.0, 9.0, 8.0)
TITLE_SIZES = (34.0, 30.0, 26.0, 22.0, 20.0, 18.0)


def layout_for(section: Section) -> SlideLayout:
    width = SLIDE_W - 2 * MARGIN_X
    title_box = Box(MARGIN_X, TITLE_TOP, width, TITLE_H)
    body = Box(MARGIN_X, BODY_TOP, width, BODY_BOTTOM - BODY_TOP)
    wanted = section.layout or ""
    if wanted in TITLE_LAYOUTS and not section.tables and not section.code:  # a title slide has no grid
        big = Box(MARGIN_X, 1.9, width, 1.5)
        out = SlideLayout("title", big, fit_size([section.title], big, (44.0, 40.0, 36.0, *TITLE_SIZES)))
        sub = Box(MARGIN_X, 3.75, width, 2.9)
        out.bullet_columns = [(sub, section.bullets)]
        out.bullet_size = fit_size(section.bullets, sub, BULLET_SIZES, BULLET_INDENT) if section.bullets else 20.0
        return out
    out = SlideLayout("bullets", title_box, fit_size([section.title], title_box, TITLE_SIZES))
    if section.tables or section.code:
        out.kind = "table" if section.tables else "code"
        area = body
        # Long code lines would shrink to nothing in a half-width column: code stacks full width instead.
        wide_code = any(len(line) > 60 for block in section.code for line in block.split("\n"))
        if section.bullets and wanted == "two-column" and not wide_code:
            left = Box(body.x, body.y, body.w * 0.42, body.h)
            area = Box(body.x + body.w * 0.46, body.y, body.w * 0.54, body.h)
            out.bullet_columns = [(left, section.bullets)]
        elif section.bullets:
            share = min(0.45, 0.12 + 0.07 * len(section.bullets))
            top = Box(body.x, body.y, body.w, body.h * share)
            area = Box(body.x, body.y + body.h * share + 0.1, body.w, body.h * (1 - share) - 0.1)
            out.bullet_columns = [(top, section.bullets)]
        # Tables, then code blocks, stacked; each gets room in proportion to its rows (code lines are
        # smaller, so count less), and none is stretched past what it needs.
        blocks: list[tuple[float, float]] = [(len(t), 0.6 * len(t)) for t in section.tables]
        blocks += [(0.6 * (c.count("\n") + 1), 0.3 * (c.count("\n") + 1) + 2 * CODE_PAD) for c in section.code]
        # Gaps take at most a fifth of the area: dozens of tables (a plan drafted from a huge paste) still fit.
        gap = min(0.2, area.h / 5 / len(blocks))
        weight = sum(w for w, _ in blocks)
        usable = area.h - gap * (len(blocks) - 1)
        y = area.y
        boxes: list[Box] = []
        for w, cap in blocks:
            h = min(usable * w / weight, cap)
            boxes.append(Box(area.x, y, area.w, h))
            y += h + gap
        out.tables = list(zip(boxes, section.tables, strict=False))
        out.code = list(zip(boxes[len(section.tables):], section.code, strict=True))
        if out.tables:
            row_h_pt = min(b.h * 72 / max(1, len(t)) for b, t in out.tables)
            out.table_size = max(8.0, min(16.0, row_h_pt / 2.0))
        if out.code:
            out.code_size = min(code_size(c, b) for b, c in out.code)
    elif wanted == "two-column" or (len(section.bullets) > 8 and wanted != "one-column"):
        out.kind = "two-column"
        half = (len(section.bullets) + 1) // 2
        col_w = (body.w - 0.4) / 2
        out.bullet_columns = [(Box(body.x, body.y, col_w, body.h), section.bullets[:half]),
                              (Box(body.x + col_w + 0.4, body.y, col_w, body.h), section.bullets[half:])]
    else:
        out.bullet_columns = [(body, section.bullets)]
    sizes = [fit_size(lines, box, BULLET_SIZES, BULLET_INDENT) for box, lines in out.bullet_columns if lines]
    out.bullet_size = min(sizes) if sizes else 20.0
    return out
