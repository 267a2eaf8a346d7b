"""What a deck says, read from the .pptx, and what of the pasted material it carries: the figures and headings
a reader would look for first. Deterministic text checks, no model: the judge's content rules read these.

A figure is a number that carries what makes it one — a currency sign, a percent sign, a multiplier, a
magnitude ($12.4M, 600K), a unit (1.2 s, 40 GB) — or a year (2026). Plain counts ("9 open roles") are left
out: a deck may fairly write them in words. Figures compare after normalising thousands separators, a
typographic minus and a plus sign; headings compare as words, case and Markdown markers aside.
"""

from __future__ import annotations

import functools
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISREG
from typing import Any

#: A number as people write it: 1,400 / 12.4 / .5 is not one (a version string's tail is not a figure).
_NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_FIGURE = re.compile(
    rf"(?<![\w.,/$€£¥%])(?P<sign>[-+]?)(?:(?P<currency>[$€£¥])\s?)?(?P<number>{_NUMBER})"
    r"(?:(?P<percent>\s?%)|(?P<times>x)(?![A-Za-z0-9])"
    r"|(?P<magnitude>[KMB]|bn|k|m)(?![A-Za-z0-9])"
    r"|\s?(?P<unit>ms|s|h|GB|MB|TB|KB|kg|km|pts?|bps)(?![A-Za-z0-9]))?"
    r"(?![\d.,]*\d)")
_YEAR = re.compile(r"(?:19|20)\d\d")
#: A Markdown (ATX) heading line, its closing #s aside.
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)(?:\s+#+)?\s*$")
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_MARKERS = re.compile(r"[*_`]+|\[\[|\]\]|\]\([^)]*\)|\[")


def figures(text: str) -> list[str]:
    """The figures in `text`, normalised, each once, in the order they first appear."""
    text = _typographic(text)
    found: dict[str, None] = {}
    for match in _FIGURE.finditer(text):
        raw, currency, sign = match.group("number"), match.group("currency") or "", match.group("sign")
        number = raw.replace(",", "")
        if match.group("percent"):
            suffix = "%"
        elif match.group("times"):
            suffix = "x"
        elif match.group("magnitude"):
            suffix = match.group("magnitude").upper().replace("BN", "B")
        elif match.group("unit"):
            suffix = " " + match.group("unit")
        elif currency or (_YEAR.fullmatch(raw) and not sign):
            suffix = ""
        else:
            continue  # a plain count: not a figure
        found.setdefault(f"{'-' if sign == '-' else ''}{currency}{number}{suffix}", None)
    return list(found)


def _typographic(text: str) -> str:
    """A typographic minus (U+2212) or a dash before a digit is a minus; a multiplication sign is an x."""
    text = re.sub(r"[\u2212\u2012\u2013](?=[$€£¥]?\d)", "-", text)
    return text.replace("\u00d7", "x").replace("\u00a0", " ").replace("\u202f", " ")


def headings(text: str) -> list[str]:
    """The Markdown headings of `text` (outside code fences), as a slide would show them, each once."""
    found: dict[str, None] = {}
    fence = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fence = not fence
            continue
        match = None if fence else _HEADING.match(line)
        if match and (words := words_of(match.group(1))):
            found.setdefault(" ".join(words), None)
    return list(found)


def words_of(text: str) -> list[str]:
    """Lower-case words of `text`, Markdown markers and punctuation aside: what two texts compare on."""
    text = _MARKERS.sub(" ", text.replace("\u2019", "'").replace("&", " and ")).lower()
    return re.findall(r"[^\W_]+(?:['.][^\W_]+)*", text)


#: Words a named subject carries that say nothing of it ("a slide on our pricing" is about pricing).
_FILLER = frozenset(("a", "an", "the", "of", "on", "about", "our", "my", "your", "their", "its", "to", "for", "and",
                     "or", "with", "in", "at", "by", "we", "us", "it", "this", "that", "these", "those", "some",
                     "slide", "slides", "deck", "section"))


def folded(word: str) -> str:
    """A word with its plural folded away, so "path" finds "paths"."""
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def topic_words(topic: str) -> list[str]:
    """The words of a named subject that must appear for a text to mention it, folded, each once."""
    return list(dict.fromkeys(folded(w) for w in words_of(topic) if w not in _FILLER))


def not_mentioned(text: str, words: list[str]) -> list[str]:
    """Those of `words` (folded, as `topic_words` gives them) that `text` does not carry."""
    present = {folded(w) for w in words_of(text)}
    return [w for w in words if w not in present]


@dataclass(frozen=True)
class Coverage:
    """How much of a material's figures and headings a deck's text carries."""

    figures: tuple[str, ...]
    missing_figures: tuple[str, ...]
    headings: tuple[str, ...]
    missing_headings: tuple[str, ...]

    @property
    def total(self) -> int:
        return len(self.figures) + len(self.headings)

    @property
    def share(self) -> float:
        """The share found; 1.0 when the material has nothing to look for."""
        missing = len(self.missing_figures) + len(self.missing_headings)
        return 1.0 - missing / self.total if self.total else 1.0

    def missing(self, shown: int = 8) -> str:
        """What is missing, in words: "7 of 23 figures … are not in the deck: $3.1M, …"."""
        parts = []
        for kind, everything, absent, quote in (("figures", self.figures, self.missing_figures, False),
                                                ("headings", self.headings, self.missing_headings, True)):
            if absent:
                listed = [f"\u201c{a}\u201d" if quote else a for a in absent[:shown]]
                more = f" and {len(absent) - shown} more" if len(absent) > shown else ""
                parts.append(f"{len(absent)} of {len(everything)} {kind} of the pasted material are not in the "
                             f"deck: {', '.join(listed)}{more}")
        return "; ".join(parts)


def coverage(material: str, deck: str) -> Coverage:
    """Which of the material's figures and headings the deck's text carries."""
    in_deck = set(figures(deck))
    wanted = figures(material)
    said = f" {' '.join(words_of(deck))} "
    titles = headings(material)
    return Coverage(tuple(wanted), tuple(f for f in wanted if f not in in_deck),
                    tuple(titles), tuple(t for t in titles if f" {t} " not in said))


def deck_text(pptx: Path) -> str | None:
    """Every text of a deck — titles, bodies, tables, grouped shapes, speaker notes — a paragraph a line;
    None when the file cannot be read as a presentation. Read once per version of the file: two rules ask."""
    try:
        stat = pptx.lstat()  # the deck as the evidence found it: a link left in its place is not followed
    except OSError:
        return None
    if not S_ISREG(stat.st_mode):
        return None
    return _deck_text(str(pptx), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=16)
def _deck_text(pptx: str, mtime_ns: int, size: int) -> str | None:
    # python-pptx is slow to import, and only the content rules need it.
    from pptx import Presentation
    from pptx.exc import PythonPptxError

    try:
        deck = Presentation(pptx)
    except (OSError, zipfile.BadZipFile, KeyError, ValueError, SyntaxError, PythonPptxError):
        return None  # lxml's parse errors are SyntaxErrors
    lines: list[str] = []
    for slide in deck.slides:
        lines.extend(_shape_texts(slide.shapes))
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
            lines.append(slide.notes_slide.notes_text_frame.text)
    return "\n".join(line for line in lines if line.strip())


def _shape_texts(shapes: Any) -> Iterator[str]:
    for shape in shapes:
        if getattr(shape, "shapes", None) is not None:  # a group
            yield from _shape_texts(shape.shapes)
        if getattr(shape, "has_text_frame", False) and shape.has_text_frame:
            yield from (paragraph.text for paragraph in shape.text_frame.paragraphs)
        if getattr(shape, "has_table", False) and shape.has_table:
            for row in shape.table.rows:
                yield " | ".join(cell.text for cell in row.cells)
