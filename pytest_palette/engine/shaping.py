"""Fitting a list of sections to a slide count: merge when too many, split or add when too few.

Merging never drops content, so numbers and tables from the material survive any count.
"""

from __future__ import annotations

import re

from .generic import filler_sections
from .plan_format import Section

_SLIDE_DIRECTIVE = re.compile(r"^\s*\d+\s*slides?\s*$", re.IGNORECASE)


def join_titles(titles: list[str]) -> str:
    if len(titles) <= 1:
        return titles[0] if titles else ""
    return ", ".join(titles[:-1]) + " & " + titles[-1]


def merge_sections(group: list[Section]) -> Section:
    """One section holding everything in ``group``, in order."""
    if len(group) == 1:
        return group[0]
    joined = join_titles([s.title for s in group])
    # A long joined title would not fit a slide: keep the first title, and the others as
    # lead bullets so none of their words (or figures) are lost.
    short = len(joined) <= 70
    merged = Section(title=joined if short else group[0].title)
    has_layout = False
    for index, section in enumerate(group):
        derived = bool(section.bullets) and section.bullets[0].startswith(section.title.rstrip("…"))
        if index and not short and not derived:  # a headline made from its first bullet adds nothing
            merged.bullets.append(section.title)
        merged.bullets.extend(section.bullets)
        merged.tables.extend(section.tables)
        merged.code.extend(section.code)
        for directive in section.directives:
            is_layout = directive.lower().startswith("layout")
            # A per-section "[[1 slide]]" no longer describes a merged section.
            if (is_layout and has_layout) or directive in merged.directives or _SLIDE_DIRECTIVE.match(directive):
                continue
            has_layout = has_layout or is_layout
            merged.directives.append(directive)
    return merged


def _size(section: Section) -> int:
    return len(section.bullets) + sum(len(t) for t in section.tables) + sum(c.count("\n") + 1 for c in section.code)


def merge_smallest(sections: list[Section], count: int) -> list[Section]:
    """Merge the smallest pair of neighbours (earliest on a tie) until ``count`` remain: losing a slide
    or two puts two short slides together, instead of folding the opening slides into one."""
    out = list(sections)
    while len(out) > count:
        pair = min(range(len(out) - 1), key=lambda i: _size(out[i]) + _size(out[i + 1]))
        out[pair : pair + 2] = [merge_sections(out[pair : pair + 2])]
    return out


def merge_to(sections: list[Section], count: int) -> list[Section]:
    """Merge contiguous runs into ``count`` sections of near-equal size (earlier runs larger)."""
    if len(sections) <= count:
        return sections
    if len(sections) - count <= max(1, len(sections) // 4):
        return merge_smallest(sections, count)
    size, extra = divmod(len(sections), count)
    out: list[Section] = []
    start = 0
    for index in range(count):
        end = start + size + (1 if index < extra else 0)
        out.append(merge_sections(sections[start:end]))
        start = end
    return out


def headline(text: str) -> str:
    """A short title from a line of prose: its first clause, or its first words and an ellipsis."""
    clause = re.split(r"[:;,.!?(]\s|\s[-–—]\s", text.strip() + " ", maxsplit=1)[0].strip(" .:;,-")
    words = clause.split()
    if not words:
        return "Notes"
    title = " ".join(words) if len(words) <= 9 else " ".join(words[:6]) + "…"
    return title[:1].upper() + title[1:]


def split_section(section: Section, retitle: bool = False) -> tuple[Section, Section]:
    """Halve a section's bullets; tables and code stay with the first half.

    ``retitle`` names the second half after its own first bullet (for prose, whose titles
    are headlines anyway); otherwise it is "<title> (continued)".
    """
    half = (len(section.bullets) + 1) // 2
    first = Section(section.title, section.bullets[:half], section.tables, list(section.directives), section.code)
    rest = section.bullets[half:]
    title = headline(rest[0]) if retitle and rest else f"{section.title} (continued)"
    second = Section(title, rest, [],
                     [d for d in section.directives if not _SLIDE_DIRECTIVE.match(d)])
    return first, second


def grow_to(sections: list[Section], count: int, topic: str, tone: str, min_split: int,
            retitle: bool = False) -> list[Section]:
    """Split the longest sections (at least ``min_split`` bullets), then add filler sections."""
    out = list(sections)
    while len(out) < count:
        longest = max(range(len(out)), key=lambda i: len(out[i].bullets), default=-1)
        if longest < 0 or len(out[longest].bullets) < min_split:
            break
        first, second = split_section(out[longest], retitle)
        out[longest : longest + 1] = [first, second]
    if len(out) < count:
        taken = {s.title.lower() for s in out}
        out.extend(filler_sections(topic, count - len(out), tone, taken))
    return out


def fit_to(sections: list[Section], count: int, topic: str, tone: str, min_split: int = 6,
           retitle: bool = False) -> list[Section]:
    if sections and sections[0].is_title and len(sections) > 1:
        # The title slide stays slide 1 and is never merged into content; a one-slide deck is all content.
        rest = fit_to(sections[1:], max(1, count - 1), topic, tone, min_split, retitle)
        return rest if count <= 1 else [sections[0], *rest]
    if len(sections) > count:
        return merge_to(sections, count)
    return grow_to(sections, count, topic, tone, min_split, retitle)
