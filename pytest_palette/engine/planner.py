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

from .counting import DEFAULT_SLIDES, clamp, count_in_text, declared_count, strip_count
from .errors import EngineError
from .generic import capitalise, generic_sections
from .markdown import FENCE, is_rule, normalise_headings, plain, split_blocks
from .plan_format import TITLE_LAYOUTS, Plan, Section, Table, parse_plan
from .shaping import fit_to, headline
from .tone import DEFAULT_TONE, tone_in_text

SOURCE_SUFFIXES = (".md", ".markdown", ".txt")
DEFAULT_AUDIENCE = "General audience"

# Words after which a request names its subject: "a deck on X", "tell the team about X", "explain X".
_TOPIC = re.compile(
    r"\b(?:on|about|covering|regarding|explaining|explain|introducing|introduce|summari[sz]ing|summari[sz]e|"
    r"describing|describe|presenting|present|titled|called|overview of|introduction to|intro to|update on)"
    r"\s+(?=(.+))", re.IGNORECASE)  # a lookahead: "on Friday about Q3 churn" is tried at "about" too
# Where the subject ends: an audience, an occasion, a time, a clause, punctuation.
_TOPIC_END = re.compile(
    r"\s+(?:for(?!\s+(?:next|this|last)\s+(?:year|quarter|month))|aimed at|targeted at|that|which|so that|so|"
    r"please|using|based on|from|in time for|by|"
    r"to (?:the|our|my|your|their|all|everyone|leadership|management|investors|customers)\b|"
    r"at (?:the|our|my|their|a|an|next)\b|in (?:the|our|my|a|an|next|this) (?:meeting|stand-?up|sync|all-hands|"
    r"review|call|session|offsite)|(?:on|this|next|by) (?:monday|tuesday|wednesday|thursday|friday|saturday|"
    r"sunday|week|month|quarter)|tomorrow|today|tonight|next week)\b|[.,;:!?()\n\"\u2014\u2013]|\s[-/]\s",
    re.IGNORECASE,
)
# A pointer at the pasted material is not a subject: "a deck on this", "about my notes"; nor is a day ("talking
# to the board on Friday about Q3 churn").
_NOT_A_TOPIC = re.compile(
    r"^(?:it|this|that|these|those|them|here|below|above|me|us)$|^(?:monday|tuesday|wednesday|thursday|friday|"
    r"saturday|sunday|day\s+one|the\s+(?:first\s+)?day|their\s+first\s+day|tomorrow|today)(?:\s|$)|"
    r"^(?:the|this|these|those|my|our|your)\s+"
    r"(?:following|attached|pasted|below|above|notes?|document|doc|material|text|transcript|outline|content|"
    r"file|draft|numbers|data)\b", re.IGNORECASE)
_AUDIENCE = re.compile(
    r"\b(?:for|aimed at|targeted at|audience:?)\s+(?!me\b|us\b|you\b|myself\b|a\s+\d|\d|"
    r"(?:next|this|last)\s+(?:year|week|month|quarter)\b|tomorrow\b|today\b)"
    r"(.+?)(?=\s+(?:on|about|covering|regarding|with|that|which|next|tomorrow|today|in\s+\w+\s+slides?)\b"
    r"|[.,;:!?()\n]|$)",
    re.IGNORECASE,
)
# People a request addresses without "for": "tell the team about X", "explain X to the leadership team".
_TOLD = re.compile(
    r"\b(?:(?:tell|brief|update|show)\s+|to\s+)((?:the|our)\s+(?:[\w-]+\s+)?(?:team|board|leadership|executives|"
    r"execs|staff|engineers|investors|customers|managers|company|committee|org|hires|starters|joiners)|everyone|"
    r"leadership)\b",
    re.IGNORECASE,
)
_FILLER_WORDS = re.compile(
    r"^(?:please|can you|could you|would you|i need|we need|i want|give me|make me|make|create|build|"
    r"draft|prepare|put together|write|generate|turn|me|a|an|the|deck|slide deck|presentation|pitch|talk|"
    r"walk-?through|"
    r"slides|short|quick|new|just|some|for|something|this|these|that|it|them|into|from|out of|"
    r"(?:my|our|the) notes)\b\s*",
    re.IGNORECASE,
)
_LONE_TITLE = re.compile(r"^(?![-*+>|#`~\d])(?!.*[.:;,!?]$).{3,70}$")
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
    """"a deck on prompt caching for the board" -> "prompt caching"; "tell the team about our Q3
    results" -> "our Q3 results". The first subject marker that yields a real subject wins."""
    line = strip_count(request.strip().split("\n", 1)[0])
    for match in _TOPIC.finditer(line):
        topic = _TOPIC_END.split(match.group(1), maxsplit=1)[0]
        topic = re.sub(r"\s+(?:deck|presentation|slides?|slideshow)$", "", topic.strip(), flags=re.IGNORECASE)
        topic = topic.strip(" '\u2018\u2019\u201c\u201d")
        if topic and not _NOT_A_TOPIC.match(topic):
            return " ".join(topic.split()[:10])
    return None


def audience_of(request: str) -> str | None:
    """"... for the board" -> "The board"; "tell the team about ..." -> "The team"."""
    match = _AUDIENCE.search(request) or _TOLD.search(request)
    if not match:
        return None
    audience = strip_count(match.group(1)).strip()
    return capitalise(audience) if audience else None


def fallback_title(request: str) -> str:
    text = re.split(r"[.,;:!?()\u2014\u2013]|\s-\s", strip_count(request.split("\n", 1)[0]))[0].strip()
    previous = None
    while previous != text:  # strip leading filler words, and trailing deck words, one at a time
        previous = text
        text = _FILLER_WORDS.sub("", text).strip(" .!?,")
        text = re.sub(r"\s*\b(?:deck|presentation|slides?|slideshow|please)$", "", text, flags=re.IGNORECASE)
    words = text.split()
    return capitalise(" ".join(words[:8])) if len(text) >= 3 else "Presentation"


def _prose_items(lines: list[str]) -> list[str]:
    """Bullets from a block: each list item, each heading (in bold), each sentence of prose. Prose
    wrapped over several lines is one paragraph, as Markdown reads it, before it is split."""
    items: list[str] = []
    paragraph: list[str] = []

    def flush() -> None:
        text = " ".join(paragraph)
        items.extend(s.strip() for s in _SENTENCE_SPLIT.split(text) if s.strip())
        paragraph.clear()

    for raw in lines:
        line = re.sub(r"^\s*(?:>\s*)+", "", raw)  # a quote's words, without its markers
        bullet = _BULLET.match(line)
        heading = _HEADING.match(line.strip())
        if is_rule(line) or not line.strip() or bullet or heading:
            flush()
        if is_rule(line) or not line.strip():
            continue
        if bullet:
            items.append(bullet.group(1).strip())
        elif heading:  # a heading inside a block leads what follows it, in bold
            items.append(f"**{plain(heading.group(1).strip())}**")
        else:
            paragraph.append(line.strip())
    flush()
    return items


def _block_parts(lines: list[str]) -> tuple[list[str], list[Table], list[str]]:
    """A block's prose lines, tables and fenced code, in that order of kinds."""
    prose: list[str] = []
    tables: list[Table] = []
    code: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if FENCE.match(line):  # split_blocks keeps a fence whole: up to its closing line is code
            end = next((j for j in range(index + 1, len(lines)) if FENCE.match(lines[j])), len(lines))
            code.append("\n".join(lines[index + 1:end]).strip("\n"))
            index = end + 1
            continue
        if line.lstrip().startswith("|"):
            end = index
            while end < len(lines) and lines[end].lstrip().startswith("|"):
                end += 1
            tables.extend(parse_plan("## t\n" + "\n".join(lines[index:end])).sections[0].tables)
            index = end
            continue
        prose.append(line)
        index += 1
    return prose, tables, [c for c in code if c.strip()]


def unsectioned_sections(text: str) -> list[Section]:
    """Material without ``## `` headings: one section per paragraph block, tables and code kept."""
    sections: list[Section] = []
    for block in split_blocks(text):
        lines = [line.rstrip() for line in block if line.strip() or FENCE.match(line) is None]
        prose, tables, code = _block_parts(lines)
        prose = [line for line in prose if line.strip()]
        heading: str | None = None
        if prose:
            first = prose[0].strip()
            match = _HEADING.match(first)
            if match:
                heading, prose = match.group(1).strip(), prose[1:]
            elif (len(prose) > 1 or tables or code) and len(first) <= 70 \
                    and (first.endswith(":") or first[-1:].isalnum()) and not _BULLET.match(first):
                heading, prose = first.rstrip(":"), prose[1:]
        items = _prose_items(prose)
        if not items and not tables and not code and heading is None:
            continue
        last = sections[-1] if sections else None
        if heading is None and not items and not tables and last is not None:
            last.code.extend(code)  # a code block on its own illustrates what came just before it
            continue
        if heading is None and items:
            heading = headline(plain(items[0]))
        elif heading is None:
            heading = "Key figures" if tables else "Example"
        if last is not None and not last.bullets and not last.tables and not last.code:
            last.bullets.extend(items)  # a heading on its own line titles the next block
            last.tables.extend(tables)
            last.code.extend(code)
            continue
        sections.append(Section(title=plain(heading), bullets=items, tables=tables, code=code))
    return sections


def _split_head(text: str) -> tuple[str, str]:
    """(everything before the first ``## `` heading, the rest); a ``## `` inside a code fence is code."""
    lines = text.splitlines()
    fence = False
    for index, line in enumerate(lines):
        if FENCE.match(line):
            fence = not fence
        elif not fence and line.startswith("## "):
            return "\n".join(lines[:index]), "\n".join(lines[index:])
    return text, ""


def _material_sections(text: str) -> tuple[Plan, list[Section], bool]:
    """(header, sections, sectioned?) for one piece of material."""
    text = normalise_headings(text)
    head, body = _split_head(text)
    if body:
        opening = head.lstrip("\n").split("\n", 2)
        if len(opening) > 1 and not opening[1].strip() and _LONE_TITLE.match(opening[0].strip()):
            head = f"# {plain(opening[0].strip())}\n" + "\n".join(opening[1:])  # a lone first line is the title
            text = head + "\n" + body
        header = parse_plan(head)
        parsed = parse_plan(text)
        # Prose, tables or code before the first section: keep them, on the first slide. The header
        # block (title, metadata, preferences, directives) is what the header parse already took.
        intro = "\n".join(line for line in head.splitlines() if not _HEADER_LINE.match(line.strip())
                          and not re.match(r"^\s*(?:preferences|revisions)\s*:\s*$", line, re.IGNORECASE))
        prose, tables, code = _block_parts(intro.splitlines())
        said = [line.strip() for line in prose if line.strip()]
        if len(said) == 1 and not tables and not code and len(said[0]) <= 100 and not _BULLET.match(said[0]):
            header.header.append(f"Subtitle: {said[0]}")  # one short line under the title is its subtitle
            prose = []
        if parsed.sections:
            first = parsed.sections[0]
            first.bullets[:0] = _prose_items(prose)
            first.tables[:0] = tables
            first.code[:0] = code
        header.sections = []
        return header, parsed.sections, True
    # No sections: only a leading block of "# Title" / "Key: value" lines is a header;
    # "Revenue: $4.2M" further down is content, not metadata.
    lines = text.strip().splitlines()
    lead = 0
    while lead < len(lines) and lines[lead].strip() and _HEADER_LINE.match(lines[lead].strip()):
        lead += 1
    header_lines = lines[:lead] if lead < len(lines) else [ln for ln in lines[:lead] if ln.startswith("# ")]
    header = parse_plan("\n".join(header_lines))
    rest = lines[len(header_lines):]
    # A short first line standing alone ("Team update – March") is the document's title, as a
    # "# " heading would be.
    if not header.title and len(rest) > 2 and not rest[1].strip() and _LONE_TITLE.match(rest[0].strip()):
        header.title, rest = plain(rest[0].strip()), rest[2:]
    return header, unsectioned_sections("\n".join(rest)), False


_COVER_TITLES = ("cover", "cover slide", "cover page", "title", "title slide", "title page", "front page")


def _cover_of(sections: list[Section]) -> Section | None:
    """The material's own title slide, if its first section is one: "## Cover", or [[layout: title]]."""
    if not sections:
        return None
    first = sections[0]
    if first.title.strip().lower().rstrip(":") in _COVER_TITLES or (first.layout in TITLE_LAYOUTS
                                                                   and not first.tables and not first.code):
        return sections.pop(0)
    return None


def title_section(title: str, audience: str, cover: Section | None, subtitle: str = "") -> Section:
    """Slide 1: the deck's title, with the audience (or the material's own cover lines) under it."""
    lines = list(cover.bullets) if cover and cover.bullets else \
        [subtitle] if subtitle else [audience] if audience != DEFAULT_AUDIENCE else []
    if cover and cover.title.strip().lower().rstrip(":") not in _COVER_TITLES and cover.title != title:
        lines.insert(0, cover.title)  # the material's own heading for slide 1 stays, under the deck's title
    directives = [d for d in (cover.directives if cover else []) if not d.lower().startswith("layout")]
    return Section(title=title, bullets=list(lines), directives=["layout: title", *directives])


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
        title = fallback_title(request)
        if sections and (title == "Presentation" or not sectioned):  # the material says more than "this"
            title = headline(plain(sections[0].title))
    subject = topic or title
    tone = tone_in_text(request) or (mat_tone.lower() if mat_tone else "") or DEFAULT_TONE

    audience = mat_audience or audience_of(request) or DEFAULT_AUDIENCE
    cover = _cover_of(sections) if sectioned else None
    # Slide 1 is the title slide and counts among the slides asked for ("a 5-slide deck" is the title
    # and four more). Material whose sections set the length keeps its count, one slide per section
    # (the shipped cases count on it), so its two smallest neighbours share a slide; a material's own
    # cover section is that title slide, and a single section is a one-pager as written.
    by_sections = clamp(len(sections) + (1 if cover else 0)) if sectioned else DEFAULT_SLIDES
    count = count_in_text(request) or declared or by_sections
    body = count - 1 if count > 1 else 1  # a one-slide deck is all content, titled by its content
    if cover and count == 1:
        sections.insert(0, cover)
    if sections:
        # Pasted prose splits finely (it is meant to spread over the slides); authored
        # sections split only when long.
        sections = fit_to(sections, body, subject, tone, min_split=6 if sectioned else 2,
                          retitle=not sectioned)
    else:
        sections = generic_sections(subject, body, tone)
    if count > 1:
        subtitle = next((line.split(":", 1)[1].strip() for h in headers for line in h.header
                         if line.lower().startswith("subtitle:")), "")
        sections.insert(0, title_section(title, audience, cover, subtitle))

    plan = Plan(title=title, audience=audience)
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
