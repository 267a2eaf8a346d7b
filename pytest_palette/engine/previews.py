"""slide-N.png previews drawn with Pillow from the same layout as the pptx.

A person looking at one sees the slide: the family's colours and side band, the title,
the bullets (wrapped) and any table as a grid. Pillow is imported only here.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from .families import Family, rgb
from .layout import BULLET_INDENT, CODE_PAD, SLIDE_W, Box, SlideLayout, column_widths
from .markdown import plain, runs
from .plan_format import Plan

WIDTH, HEIGHT = 1280, 720
PX_PER_IN = WIDTH / SLIDE_W
PX_PER_PT = PX_PER_IN / 72
FontType = ImageFont.FreeTypeFont | ImageFont.ImageFont

_FONT_DIRS = ("/usr/share/fonts", "/usr/local/share/fonts", "~/.fonts", "~/.local/share/fonts",
              "/Library/Fonts", "~/Library/Fonts", "C:/Windows/Fonts")


@functools.lru_cache(maxsize=1)
def plex_files() -> dict[str, str]:
    """IBM Plex Sans TTF/OTF files installed on this machine, by weight ("regular", "bold")."""
    found: dict[str, str] = {}
    for folder in _FONT_DIRS:
        root = Path(os.path.expanduser(folder))
        if not root.is_dir():
            continue
        for path in root.rglob("IBMPlexSans-*"):
            stem = path.stem.lower()
            if path.suffix.lower() in (".ttf", ".otf"):
                if stem.endswith("-regular"):
                    found.setdefault("regular", str(path))
                elif stem.endswith(("-semibold", "-bold")):
                    found.setdefault("bold", str(path))
    return found


_MONO_FILES = ("IBMPlexMono-Regular.ttf", "IBMPlexMono-Regular.otf", "DejaVuSansMono.ttf",
               "LiberationMono-Regular.ttf")


@functools.lru_cache(maxsize=1)
def mono_file() -> str | None:
    """A monospaced face for code: IBM Plex Mono if installed, else a common one."""
    for folder in _FONT_DIRS:
        root = Path(os.path.expanduser(folder))
        if root.is_dir():
            for name in _MONO_FILES:
                found = next(iter(sorted(root.rglob(name))), None)
                if found:
                    return str(found)
    return None


@functools.lru_cache(maxsize=64)
def font(size_px: int, bold: bool = False, mono: bool = False) -> FontType:
    """IBM Plex when installed, else Pillow's built-in scalable font (Pillow >= 10.1)."""
    if mono and mono_file():
        return ImageFont.truetype(str(mono_file()), size_px)
    files = plex_files()
    path = files.get("bold" if bold else "regular") or files.get("regular") or fallback_file(bold)
    if path:
        return ImageFont.truetype(path, size_px)
    return ImageFont.load_default(size=size_px)


@functools.lru_cache(maxsize=2)
def fallback_file(bold: bool) -> str | None:
    """Without Plex, a common sans face: Pillow's built-in one has no dashes, arrows or accents."""
    names = ("DejaVuSans-Bold.ttf", "LiberationSans-Bold.ttf") if bold else ("DejaVuSans.ttf",
                                                                            "LiberationSans-Regular.ttf")
    for folder in _FONT_DIRS:
        root = Path(os.path.expanduser(folder))
        if root.is_dir():
            for name in names:
                found = next(iter(sorted(root.rglob(name))), None)
                if found:
                    return str(found)
    return None


def _px(box: Box) -> tuple[int, int, int, int]:
    return (round(box.x * PX_PER_IN), round(box.y * PX_PER_IN),
            round((box.x + box.w) * PX_PER_IN), round((box.y + box.h) * PX_PER_IN))


# A word as a preview draws it: its text, bold?, monospaced?, and whether a space comes before it.
Word = tuple[str, bool, bool, bool]


def _words(text: str, bold: bool) -> list[Word]:
    """``text``'s Markdown as styled words, so a preview shows bold and code as the slide does."""
    words: list[Word] = []
    space = False
    for run in runs(text, bold=bold):
        for piece in re.split(r"(\s+)", run.text):
            if not piece:
                continue
            if piece.isspace():
                space = True
                continue
            words.append((piece, run.bold, run.code, space and bool(words)))
            space = False
    return words


def _face(size: int, word: Word) -> FontType:
    return font(size, word[1], mono=word[2])


def _wrap(words: list[Word], size: int, width: float) -> list[list[Word]]:
    lines: list[list[Word]] = []
    current: list[Word] = []
    used = 0.0
    for word in words:
        gap = _face(size, word).getlength(" ") if word[3] and current else 0.0
        need = _face(size, word).getlength(word[0])
        if current and used + gap + need > width:
            lines.append(current)
            current, used = [], 0.0
            gap = 0.0
        current.append(word)
        used += gap + need
    return [*lines, current] if current else lines or [[]]


def _draw_text(draw: ImageDraw.ImageDraw, box: Box, texts: list[str], size_pt: float, colour: str,
               family: Family, bullets: bool, bold: bool = False, bottom: bool = False) -> None:
    size = max(8, round(size_pt * PX_PER_PT))
    left, top, right, low = _px(box)
    indent = round(BULLET_INDENT * PX_PER_IN) if bullets else 0
    line_h = round(size * 1.2)
    wrapped = (_wrap(_words(text, bold), size, right - left - indent) for text in texts)
    if bottom:  # set on the box's foot: the whole height is needed first
        blocks: Iterable[list[list[Word]]] = list(wrapped)
        height = sum(len(b) * line_h for b in blocks) + round(size * 0.45) * (len(texts) - 1)
        y = max(top, low - height)
    else:  # wrapped only as far as the box shows: a slide of a huge plan has thousands of lines below it
        blocks, y = wrapped, top
    for block in blocks:
        if y >= low:
            break  # past the box: PowerPoint would shrink it; the preview clips
        if bullets:
            r = max(2, size // 6)
            cy = y + line_h // 2
            draw.ellipse((left + 4, cy - r, left + 4 + 2 * r, cy + r), fill=rgb(family.accent))
        for line in block:
            x = float(left + indent)
            for index, word in enumerate(line):
                face = _face(size, word)
                if index and word[3]:
                    x += face.getlength(" ")
                # Pillow's built-in face has no bold weight: a hairline stroke stands in for it.
                stroke = 1 if word[1] and not word[2] and not plex_files() and not fallback_file(True) else 0
                draw.text((x, y), word[0], font=face, fill=rgb(colour), stroke_width=stroke,
                          stroke_fill=rgb(colour))
                x += face.getlength(word[0])
            y += line_h
        y += round(size * 0.45)


def _draw_table(draw: ImageDraw.ImageDraw, box: Box, table: list[list[str]], size_pt: float,
                family: Family) -> None:
    left, top, right, low = _px(box)
    cols = max(len(row) for row in table)
    edges = [float(left)]
    for width in column_widths(table, box.w):
        edges.append(edges[-1] + width * PX_PER_IN)
    row_h = (low - top) / len(table)
    size = max(8, min(round(size_pt * PX_PER_PT), int(row_h * 0.7)))
    for r, row in enumerate(table):
        fill = family.header_fill if r == 0 else family.row_fill if r % 2 == 0 else family.background
        y0, y1 = top + r * row_h, top + (r + 1) * row_h
        draw.rectangle((left, y0, right, y1), fill=rgb(fill))
        face = font(size, r == 0)
        for c in range(cols):
            text = plain(row[c]) if c < len(row) else ""
            x0, col_w = edges[c], edges[c + 1] - edges[c]
            while text and face.getlength(text) > col_w - 12:
                text = text[:-2] + "…" if len(text) > 2 else ""
            draw.text((x0 + 6, y0 + (row_h - size) / 2), text, font=face,
                      fill=rgb(family.header_text if r == 0 else family.body))
    for x in edges:
        draw.line((x, top, x, low), fill=rgb(family.grid), width=1)
    for r in range(len(table) + 1):
        y = top + r * row_h
        draw.line((left, y, right, y), fill=rgb(family.grid), width=1)


def _draw_code(draw: ImageDraw.ImageDraw, box: Box, code: str, size_pt: float, family: Family) -> None:
    left, top, right, low = _px(box)
    draw.rectangle((left, top, right, low), fill=rgb(family.row_fill))
    draw.rectangle((left, top, left + round(0.06 * PX_PER_IN), low), fill=rgb(family.accent))
    size = max(7, round(size_pt * PX_PER_PT))
    face = font(size, mono=True)
    pad = round(CODE_PAD * PX_PER_IN)
    y = top + pad // 2 + 2
    for line in code.split("\n"):
        if y + size > low:
            break
        draw.text((left + pad, y), line, font=face, fill=rgb(family.body))
        y += round(size * 1.2)


def draw_preview(plan: Plan, index: int, layout: SlideLayout, family: Family) -> Image.Image:
    section = plan.sections[index]
    image = Image.new("RGB", (WIDTH, HEIGHT), rgb(family.background))
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, round(0.18 * PX_PER_IN), HEIGHT), fill=rgb(family.accent))
    _draw_text(draw, layout.title_box, [section.title], layout.title_size, family.title, family,
               bullets=False, bold=True, bottom=True)
    rule_y = (layout.title_box.y + layout.title_box.h + 0.08) * PX_PER_IN
    x0 = layout.title_box.x * PX_PER_IN
    draw.rectangle((x0, rule_y, x0 + 1.2 * PX_PER_IN, rule_y + 0.06 * PX_PER_IN), fill=rgb(family.accent))
    for box, lines in layout.bullet_columns:
        if lines:
            _draw_text(draw, box, lines, layout.bullet_size, family.body, family, bullets=layout.kind != "title")
    for box, table in layout.tables:
        _draw_table(draw, box, table, layout.table_size, family)
    for box, code in layout.code:
        _draw_code(draw, box, code, layout.code_size, family)
    footer = f"{plan.title}  \u00b7  {index + 1} / {len(plan.sections)}"
    _draw_text(draw, layout.footer_box, [footer], 11, family.muted, family, bullets=False)
    return image


def write_previews(plan: Plan, layouts: list[SlideLayout], family: Family, paths: list[Path]) -> None:
    for index, (layout, path) in enumerate(zip(layouts, paths, strict=True)):
        # Level 1: flat slide art compresses well anyway, and encoding is the costliest step here.
        draw_preview(plan, index, layout, family).save(path, format="PNG", compress_level=1)
