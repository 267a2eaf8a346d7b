"""Palette's plan markdown, parsed into dataclasses and written back.

The format::

    # Title
    Audience: ...
    Preferences:
    - Tone: professional
    - Length: 5 slides
    Revisions:
    - "make it 3 slides" -> ...

    ## First slide title
    [[layout: two-column]]
    - bullet

    | a | b |
    |---|---|
    | 1 | 2 |

    ```
    code, shown in a monospaced block
    ```

One ``## `` section per slide. ``[[ ]]`` is a directive only when it reads like one
(``markdown.is_directive``); ``[[Q3 revenue: $4.2M]]`` or a wiki link stays in the text as
content. ``serialize_plan(parse_plan(text)) == text`` holds for text in this canonical form,
and ``parse_plan(serialize_plan(plan)) == plan`` for any plan whose strings are single-line.
Non-canonical input (``*`` bullets, prose lines, nested bullets, ``###`` headings, which lead in
bold) is read leniently and comes back as flat bullets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .markdown import FENCE, is_directive, is_rule

Table = list[list[str]]  # first row is the header row
#: Layouts that make a slide a title slide (a big title, a subtitle under it).
TITLE_LAYOUTS = ("title", "title-only", "section", "section-header", "cover")

_DIRECTIVE = re.compile(r"\[\[(.+?)\]\]")
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)])\s+(.*)$")
_SEPARATOR_CELL = re.compile(r"^:?-{1,}:?$")
_PREFERENCE = re.compile(r"^\s*[-*]\s+([^:]+?)\s*:\s*(.*)$")


@dataclass
class Section:
    title: str
    bullets: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    directives: list[str] = field(default_factory=list)  # text inside [[...]], kept verbatim
    code: list[str] = field(default_factory=list)  # fenced code blocks, each verbatim without its fences

    @property
    def layout(self) -> str | None:
        """The ``[[layout: X]]`` directive, if any (lower-case)."""
        for directive in self.directives:
            key, sep, value = directive.partition(":")
            if sep and key.strip().lower() == "layout":
                return value.strip().lower()
        return None

    @property
    def is_title(self) -> bool:
        return self.layout in TITLE_LAYOUTS

    def text(self) -> str:
        """All words of the section, for matching instructions against it."""
        cells = [cell for table in self.tables for row in table for cell in row]
        return " ".join([self.title, *self.bullets, *cells, *self.code])


@dataclass
class Plan:
    title: str
    audience: str = ""
    preferences: dict[str, str] = field(default_factory=dict)
    header: list[str] = field(default_factory=list)  # other header lines, kept verbatim
    revisions: list[str] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)

    @property
    def tone(self) -> str:
        return self.preferences.get("Tone", "professional")

    def sync_length(self) -> None:
        """Keep the Length preference equal to the number of sections."""
        count = len(self.sections)
        self.preferences["Length"] = f"{count} slide" if count == 1 else f"{count} slides"


def take_directives(line: str) -> tuple[str, list[str]]:
    """The line without the [[ ]] spans that read like directives, and those directives."""
    found: list[str] = []

    def keep(match: re.Match[str]) -> str:
        if is_directive(match.group(1)):
            found.append(match.group(1).strip())
            return ""
        return match.group(0)

    return _DIRECTIVE.sub(keep, line).strip(), found


def _split_row(line: str) -> list[str]:
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|") and not body.endswith("\\|"):
        body = body[:-1]
    cells = re.split(r"(?<!\\)\|", body)
    return [cell.strip().replace("\\|", "|") for cell in cells]


def _is_separator(cells: list[str]) -> bool:
    return bool(cells) and all(_SEPARATOR_CELL.match(cell.replace(" ", "")) for cell in cells)


def parse_plan(text: str) -> Plan:
    """Read plan markdown (or pasted material in the same shape) leniently."""
    plan = Plan(title="")
    section: Section | None = None
    table: Table | None = None
    mode = ""  # "preferences" / "revisions" while reading those header lists
    code: list[str] | None = None  # the lines of an open code fence
    fence = ""
    for raw in text.splitlines():
        line = raw.rstrip()
        stripped = line.strip()
        fenced = FENCE.match(line)
        if code is not None:  # inside a fence everything is code, "## " and "|" included
            if fenced and fenced.group(1).startswith(fence) and not fenced.group(2):
                if section is not None:
                    section.code.append("\n".join(code).strip("\n"))
                code = None
            else:
                code.append(raw.replace("\t", "    "))
            continue
        if fenced:
            code, fence, table = [], fenced.group(1)[0] * 3, None
            continue
        if section is not None and stripped.startswith("|"):
            cells = _split_row(stripped)
            if table is None:
                table = []
                section.tables.append(table)
            if not _is_separator(cells):
                table.append(cells)
            continue
        table = None
        if not stripped or is_rule(stripped):
            continue
        if line.startswith("## "):
            title, directives = take_directives(line[3:])
            section = Section(title=title, directives=directives)
            plan.sections.append(section)
            continue
        if section is None:
            mode = _read_header_line(plan, stripped, mode)
            continue
        rest, directives = take_directives(stripped)
        section.directives.extend(directives)
        if not rest:
            continue
        rest = re.sub(r"^(?:>\s*)+", "", rest)  # a quote's words, without its markers
        bullet = _BULLET.match(rest)
        if bullet:
            rest = bullet.group(1).strip()
        elif rest.startswith("#"):  # a ### sub-heading becomes a bold lead bullet
            rest = rest.lstrip("#").strip()
            rest = f"**{rest}**" if rest and "**" not in rest else rest
        if rest:
            section.bullets.append(rest)
    if code is not None and section is not None:  # an unclosed fence runs to the end, as in Markdown
        section.code.append("\n".join(code).strip("\n"))
    # A table whose rows were all separators carries nothing.
    for sec in plan.sections:
        sec.tables = [t for t in sec.tables if t]
    return plan


def _read_header_line(plan: Plan, stripped: str, mode: str) -> str:
    if stripped.startswith("# ") and not plan.title:
        plan.title = stripped[2:].strip()
        return ""
    lowered = stripped.lower()
    if lowered.startswith("audience:") and not plan.audience:
        plan.audience = stripped.split(":", 1)[1].strip()
        return ""
    if lowered == "preferences:":
        return "preferences"
    if lowered == "revisions:":
        return "revisions"
    if mode == "preferences":
        pref = _PREFERENCE.match(stripped)
        if pref:
            plan.preferences[pref.group(1).strip()] = pref.group(2).strip()
            return mode
    if mode == "revisions":
        bullet = _BULLET.match(stripped)
        if bullet:
            plan.revisions.append(bullet.group(1).strip())
            return mode
    plan.header.append(stripped)
    return ""


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def serialize_plan(plan: Plan) -> str:
    """Write the canonical plan markdown (ends with one newline)."""
    lines = [f"# {plan.title}"]
    if plan.audience:
        lines.append(f"Audience: {plan.audience}")
    lines.extend(plan.header)
    if plan.preferences:
        lines.append("Preferences:")
        lines.extend(f"- {key}: {value}" for key, value in plan.preferences.items())
    if plan.revisions:
        lines.append("Revisions:")
        lines.extend(f"- {revision}" for revision in plan.revisions)
    for section in plan.sections:
        lines.append("")
        lines.append(f"## {section.title}")
        lines.extend(f"[[{directive}]]" for directive in section.directives)
        lines.extend(f"- {bullet}" for bullet in section.bullets)
        for table in section.tables:
            lines.append("")
            lines.append(_row(table[0]))
            lines.append(_row(["---"] * len(table[0])))
            lines.extend(_row(row) for row in table[1:])
        for block in section.code:
            fence = "~~~" if "```" in block else "```"
            lines.extend(["", fence, *block.split("\n"), fence])
    return "\n".join(lines) + "\n"
