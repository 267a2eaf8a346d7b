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

One ``## `` section per slide. ``serialize_plan(parse_plan(text)) == text`` holds for text
in this canonical form, and ``parse_plan(serialize_plan(plan)) == plan`` for any plan whose
strings are single-line. Non-canonical input (``*`` bullets, prose lines, nested bullets,
``###`` headings) is read leniently and comes back as flat bullets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

Table = list[list[str]]  # first row is the header row

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

    @property
    def layout(self) -> str | None:
        """The ``[[layout: X]]`` directive, if any (lower-case)."""
        for directive in self.directives:
            key, sep, value = directive.partition(":")
            if sep and key.strip().lower() == "layout":
                return value.strip().lower()
        return None

    def text(self) -> str:
        """All words of the section, for matching instructions against it."""
        cells = [cell for table in self.tables for row in table for cell in row]
        return " ".join([self.title, *self.bullets, *cells])


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
    for raw in text.splitlines():
        line = raw.rstrip()
        stripped = line.strip()
        if section is not None and stripped.startswith("|"):
            cells = _split_row(stripped)
            if table is None:
                table = []
                section.tables.append(table)
            if not _is_separator(cells):
                table.append(cells)
            continue
        table = None
        if not stripped:
            continue
        if line.startswith("## "):
            section = Section(title=_DIRECTIVE.sub("", line[3:]).strip())
            section.directives.extend(d.strip() for d in _DIRECTIVE.findall(line[3:]))
            plan.sections.append(section)
            continue
        if section is None:
            mode = _read_header_line(plan, stripped, mode)
            continue
        directives = _DIRECTIVE.findall(stripped)
        rest = _DIRECTIVE.sub("", stripped).strip()
        section.directives.extend(d.strip() for d in directives)
        if not rest:
            continue
        bullet = _BULLET.match(rest)
        if bullet:
            rest = bullet.group(1).strip()
        else:
            rest = rest.lstrip("#").strip()  # a ### sub-heading or prose becomes a bullet
        if rest:
            section.bullets.append(rest)
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
    return "\n".join(lines) + "\n"
