"""Markdown as people write it, turned into what a slide shows.

Plans keep the user's Markdown verbatim (``**bold**``, ``` `code` ```, ``[[data]]``): the plan is
Markdown, and an edit or a judge reading it sees what was pasted. Only the renderer turns it into
formatting, through ``runs``; ``plain`` is the same text without markers, for fitting and previews.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: A fence line: ``` or ~~~, maybe with a language ("```python").
FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w+#.-]*)\s*$")

# Directives a plan may carry in [[ ]] (plan_format.py, docs/reference-palette.md): a known key with a
# value, a known word, or a per-section length. Anything else in [[ ]] is the author's content.
DIRECTIVE_KEYS = ("layout", "notes", "speaker notes", "image", "chart", "visual", "style", "background",
                  "theme", "accent", "icon", "transition")
DIRECTIVE_WORDS = ("revised", "new", "draft", "hidden", "skip", "keep", "title", "section", "two-column",
                   "one-column")
_DIRECTIVE = re.compile(
    rf"^\s*(?:(?:{'|'.join(DIRECTIVE_KEYS)})\s*:.*|(?:{'|'.join(DIRECTIVE_WORDS)})|\d{{1,3}}\s*slides?)\s*$",
    re.IGNORECASE)

# One inline token: a code span, **bold** / __bold__, *em* / _em_, a [[wiki or data]] span, a [link](url).
# Underscores count only at word edges, so snake_case_names stay as they are.
_INLINE = re.compile(
    r"(?P<code>`+)(?P<code_text>.+?)(?P=code)"
    r"|\*\*\*(?P<strong_em>(?=\S).+?(?<=\S))\*\*\*"
    r"|\*\*(?P<bold>(?=\S).+?(?<=\S))\*\*"
    r"|(?<![\w_])__(?P<bold_u>(?=\S).+?(?<=\S))__(?![\w_])"
    r"|(?<![\w*])\*(?P<em>(?=[^\s*]).*?(?<=[^\s*]))\*(?![\w*])"
    r"|(?<![\w_])_(?P<em_u>(?=[^\s_]).*?(?<=[^\s_]))_(?![\w_])"
    r"|\[\[(?P<wiki>.+?)\]\]"
    r"|\[(?P<link>[^\]\n]+)\]\((?P<url>[^)\s]+)\)"
)


@dataclass(frozen=True)
class Run:
    text: str
    bold: bool = False
    italic: bool = False
    code: bool = False


_RULE = re.compile(r"^\s*(?:[-*_]\s*){3,}$")


def is_rule(line: str) -> bool:
    """A horizontal rule ("---", "***", "* * *"): a divider, never slide text."""
    return bool(_RULE.match(line))


def is_directive(text: str) -> bool:
    """Whether the inside of ``[[ ]]`` reads like a directive ("layout: two-column", "revised", "1 slide")
    rather than data ("Q3 revenue: $4.2M") or a wiki link ("Onboarding guide")."""
    return bool(_DIRECTIVE.match(text))


def runs(text: str, bold: bool = False, italic: bool = False) -> list[Run]:
    """``text`` as formatted runs, markers removed; nested emphasis ("**a *b* c**") is honoured."""
    out: list[Run] = []
    position = 0
    for match in _INLINE.finditer(text):
        if match.start() > position:
            out.append(Run(text[position:match.start()], bold, italic))
        if match.group("code") is not None:
            out.append(Run(match.group("code_text").strip(), bold, italic, code=True))
        elif match.group("strong_em") is not None:
            out.extend(runs(match.group("strong_em"), True, True))
        elif match.group("bold") is not None or match.group("bold_u") is not None:
            out.extend(runs(match.group("bold") or match.group("bold_u"), True, italic))
        elif match.group("em") is not None or match.group("em_u") is not None:
            out.extend(runs(match.group("em") or match.group("em_u"), bold, True))
        elif match.group("wiki") is not None:  # data or a wiki link: its words, without the brackets
            out.extend(runs(match.group("wiki").split("|")[-1].strip(), bold, italic))
        else:  # a link shows its words; the address would only clutter a slide
            out.extend(runs(match.group("link"), bold, italic))
        position = match.end()
    if position < len(text):
        out.append(Run(text[position:], bold, italic))
    return _merge([run for run in out if run.text])


def _merge(items: list[Run]) -> list[Run]:
    merged: list[Run] = []
    for run in items:
        last = merged[-1] if merged else None
        if last and (last.bold, last.italic, last.code) == (run.bold, run.italic, run.code):
            merged[-1] = Run(last.text + run.text, run.bold, run.italic, run.code)
        else:
            merged.append(run)
    return merged


def plain(text: str) -> str:
    """``text`` as a slide shows it: no Markdown markers."""
    return "".join(run.text for run in runs(text))


def split_blocks(text: str) -> list[list[str]]:
    """Blank-line separated blocks of lines, a fenced code block always whole (its blank lines kept)."""
    blocks: list[list[str]] = []
    current: list[str] = []
    fence: str | None = None
    for line in text.splitlines():
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)[0] * 3
        elif fence is not None and match and match.group(1).startswith(fence) and not match.group(2):
            fence = None
        elif fence is None and not line.strip():
            if current:
                blocks.append(current)
            current = []
            continue
        current.append(line)
    if current:
        blocks.append(current)
    return blocks


_HEADING_LINE = re.compile(r"^(#{1,6})\s+\S")


def normalise_headings(text: str) -> str:
    """Headings that follow no plan format, turned into it: a document with no ``## `` heading but
    several ``# `` (or ``### ``) ones uses those as its sections. Its first line, if a ``# `` heading,
    stays the title; deeper headings stay deeper (they lead in bold). Code fences are left alone."""
    lines = text.splitlines()
    levels: dict[int, int] = {}  # line index -> heading level, outside fences
    fence = False
    for index, line in enumerate(lines):
        if FENCE.match(line):
            fence = not fence
        elif not fence and (match := _HEADING_LINE.match(line)):
            levels[index] = len(match.group(1))
    first = next((i for i, line in enumerate(lines) if line.strip()), -1)
    body = {i: level for i, level in levels.items() if not (i == first and level == 1)}
    if 2 in body.values() or not body:
        return text
    counts = {level: list(body.values()).count(level) for level in set(body.values())}
    section = min((level for level, n in counts.items() if n >= 2), default=None)
    if section is None:
        return text
    for index, level in body.items():
        if level == section:
            lines[index] = "## " + lines[index].lstrip("#").strip()
        elif level > section:
            lines[index] = "### " + lines[index].lstrip("#").strip()
    return "\n".join(lines)
