"""build-plan: request (+ pasted material) -> Plan, deterministically.

Precedence, as in the brief: the slide count comes from the request, else the material's
declared length, else its ``## `` sections, else 5. Title and audience come from the
material's header, else the request. Tone comes from the request when it names one (the
user's latest words), else the material, else professional.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .counting import DEFAULT_SLIDES, NUMBER, clamp, count_in_text, declared_count
from .errors import EngineError
from .generic import capitalise, generic_sections
from .plan_format import Plan, Section, Table, parse_plan
from .shaping import fit_to, headline
from .tone import DEFAULT_TONE, tone_in_text

SOURCE_SUFFIXES = (".md", ".markdown", ".txt")
DEFAULT_AUDIENCE = "General audience"

_COUNT_PHRASE = re.compile(rf"\b(?:in|with|using|of)?\s*(?:a\s+)?{NUMBER}[\s-]*slides?\b", re.IGNORECASE)
_TOPIC = re.compile(r"\b(?:on|about|covering|regarding|explaining|introducing|titled|called)\s+(.+)",
                    re.IGNORECASE)
_TOPIC_END = re.compile(
    r"\s+(?:for|aimed at|targeted at|that|which|so that|please|using|based on|from)\b|[.,;:!?()\n\"]",
    re.IGNORECASE,
)
_NOT_A_TOPIC = re.compile(r"^(?:my|our|these|this|those|the (?:following|attached|pasted|notes|below))\b",
                          re.IGNORECASE)
_AUDIENCE = re.compile(
    r"\b(?:for|aimed at|targeted at|audience:?)\s+(?!me\b|us\b|you\b|myself\b|a\s+\d|\d)"
    r"(.+?)(?=\s+(?:on|about|covering|regarding|with|that|which|next|tomorrow|today|in\s+\w+\s+slides?)\b"
    r"|[.,;:!?()\n]|$)",
    re.IGNORECASE,
)
_FILLER_WORDS = re.compile(
    r"^(?:please|can you|could you|would you|i need|we need|i want|give me|make me|make|create|build|"
    r"draft|prepare|put together|write|generate|turn|me|a|an|the|deck|slide deck|presentation|pitch|"
    r"slides|short|quick|new)\b\s*",
    re.IGNORECASE,
)
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
_HEADING = re.compile(r"^#{1,6}\s+(.*)$")
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)])\s+(.*)$")
_METADATA = re.compile(r"^[A-Z][\w /-]{0,30}:\s*\S")
_HEADER_LINE = re.compile(r"^(?:# .+|[A-Z][\w /-]{0,30}:.*|[-*]\s+[A-Z][\w /-]{0,30}:.*|\[\[.+\]\])$")
_SLIDE_DECLARATION = re.compile(r"^(?:[-*]\s*)?(?:slides\s*:|length\s*:)|^\[\[\s*\d+\s*slides?",
                                re.IGNORECASE)


@dataclass
class Material:
    """Pasted context and --source files, each parsed on its own."""

    texts: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not any(t.strip() for t in self.texts)


def load_material(context: str | None, sources: list[str]) -> Material:
    material = Material()
    if context and context.strip():
        material.texts.append(context)
        material.labels.append(f"pasted context ({len(context)} characters)")
    for source in sources:
        path = Path(source)
        if path.suffix.lower() not in SOURCE_SUFFIXES:
            raise EngineError(
                f"--source {source} is a {path.suffix or 'suffix-less'} file; the reference engine "
                f"reads only {', '.join(SOURCE_SUFFIXES)} sources"
            )
        if not path.is_file():
            raise EngineError(f"no source file at {source}")
        material.texts.append(path.read_text(encoding="utf-8", errors="replace"))
        material.labels.append(path.name)
    return material


def topic_of(request: str) -> str | None:
    """"a deck on prompt caching for the board" -> "prompt caching"."""
    match = _TOPIC.search(request)
    if not match:
        return None
    topic = _TOPIC_END.split(match.group(1), maxsplit=1)[0]
    topic = _COUNT_PHRASE.sub("", topic).strip()
    topic = re.sub(r"\s+(?:deck|presentation|slides?)$", "", topic, flags=re.IGNORECASE).strip()
    if not topic or _NOT_A_TOPIC.match(topic):
        return None
    return " ".join(topic.split()[:10])


def audience_of(request: str) -> str | None:
    match = _AUDIENCE.search(request)
    if not match:
        return None
    audience = _COUNT_PHRASE.sub("", match.group(1)).strip()
    return capitalise(audience) if audience else None


def fallback_title(request: str) -> str:
    text = _COUNT_PHRASE.sub(" ", request.split("\n", 1)[0]).strip(" .!?")
    previous = None
    while previous != text:  # strip leading filler words one at a time
        previous = text
        text = _FILLER_WORDS.sub("", text).strip(" .!?,")
    words = text.split()
    return capitalise(" ".join(words[:8])) if len(text) >= 3 else "Presentation"


def _prose_items(lines: list[str]) -> list[str]:
    items: list[str] = []
    for line in lines:
        bullet = _BULLET.match(line)
        if bullet:
            items.append(bullet.group(1).strip())
        else:
            items.extend(s.strip() for s in _SENTENCE_SPLIT.split(line.strip()) if s.strip())
    return items


def unsectioned_sections(text: str) -> list[Section]:
    """Material without ``## `` headings: one section per paragraph block, tables kept."""
    sections: list[Section] = []
    for block in re.split(r"\n\s*\n", text):
        lines = [line.rstrip() for line in block.splitlines() if line.strip()]
        if not lines:
            continue
        heading: str | None = None
        tables: list[Table] = []
        if all(line.lstrip().startswith("|") for line in lines):
            tables = parse_plan("## t\n" + "\n".join(lines)).sections[0].tables
            lines = []
        else:
            first = lines[0].strip()
            match = _HEADING.match(first)
            if match:
                heading, lines = match.group(1).strip(), lines[1:]
            elif len(lines) > 1 and len(first) <= 70 and (first.endswith(":") or first[-1:].isalnum()) \
                    and not _BULLET.match(first):
                heading, lines = first.rstrip(":"), lines[1:]
        items = _prose_items([line for line in lines if not _HEADING.match(line.strip())])
        if not items and not tables and heading is None:
            continue
        if heading is None and items:
            heading = headline(items[0])
        elif heading is None:
            heading = "Key figures"
        if sections and not sections[-1].bullets and not sections[-1].tables:
            sections[-1].bullets.extend(items)  # a heading on its own line titles the next block
            sections[-1].tables.extend(tables)
            continue
        sections.append(Section(title=heading, bullets=items, tables=tables))
    return sections


def _material_sections(text: str) -> tuple[Plan, list[Section], bool]:
    """(header, sections, sectioned?) for one piece of material."""
    parsed = parse_plan(text)
    if parsed.sections:
        intro = [line for line in parsed.header if not _METADATA.match(line) and not line.startswith("[[")]
        if intro:  # prose before the first section: keep its figures, on the first slide
            parsed.sections[0].bullets[:0] = _prose_items(intro)
        return parsed, parsed.sections, True
    # No sections: only a leading block of "# Title" / "Key: value" lines is a header;
    # "Revenue: $4.2M" further down is content, not metadata.
    lines = text.strip().splitlines()
    lead = 0
    while lead < len(lines) and lines[lead].strip() and _HEADER_LINE.match(lines[lead].strip()):
        lead += 1
    header_lines = lines[:lead] if lead < len(lines) else [ln for ln in lines[:lead] if ln.startswith("# ")]
    header = parse_plan("\n".join(header_lines))
    return header, unsectioned_sections("\n".join(lines[len(header_lines):])), False


def build_plan(request: str, context: str | None = None, sources: list[str] | None = None) -> Plan:
    material = load_material(context, sources or [])
    if not request.strip() and material.empty:
        raise EngineError("empty request and no material: nothing to plan")

    headers: list[Plan] = []
    sections: list[Section] = []
    sectioned = False
    declared: int | None = None
    for text in material.texts:
        header, found, has_sections = _material_sections(text)
        headers.append(header)
        sections.extend(found)
        sectioned = sectioned or has_sections
        declared = declared or declared_count(text)
    # First header with a value wins; the request fills what the material leaves out.
    mat_title = next((h.title for h in headers if h.title), "")
    mat_audience = next((h.audience for h in headers if h.audience), "")
    mat_tone = next((h.preferences.get("Tone", "") for h in headers if h.preferences.get("Tone")), "")
    mat_tone = mat_tone or next((line.split(":", 1)[1].strip() for h in headers for line in h.header
                                 if line.lower().startswith("tone:")), "")

    topic = topic_of(request)
    title = mat_title or (capitalise(topic) if topic else "")
    if not title:
        title = headline(sections[0].title) if sections and not sectioned else fallback_title(request)
    subject = topic or title
    tone = tone_in_text(request) or (mat_tone.lower() if mat_tone else "") or DEFAULT_TONE

    count = count_in_text(request) or declared or (clamp(len(sections)) if sectioned else None)
    count = count or DEFAULT_SLIDES
    if sections:
        # Pasted prose splits finely (it is meant to spread over the slides); authored
        # sections split only when long.
        sections = fit_to(sections, count, subject, tone, min_split=6 if sectioned else 2,
                          retitle=not sectioned)
    else:
        sections = generic_sections(subject, count, tone)

    plan = Plan(title=title, audience=mat_audience or audience_of(request) or DEFAULT_AUDIENCE)
    plan.preferences["Tone"] = tone
    for header in headers:  # other preferences the material set (style, colours ...)
        for key, value in header.preferences.items():
            if key not in ("Tone", "Length", "Slides"):
                plan.preferences.setdefault(key, value)
        plan.header.extend(line for line in header.header
                           if _METADATA.match(line) and not _SLIDE_DECLARATION.match(line)
                           and not line.lower().startswith(("tone:", "audience:")))
    if topic:
        plan.header.append(f"Topic: {topic}")  # what generated slides talk about, for later edits
    if material.labels:
        plan.header.append("Sources: " + "; ".join(material.labels))
    plan.sections = sections
    plan.sync_length()
    return plan
