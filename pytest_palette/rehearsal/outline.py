"""The outline the rehearsal model drafts when no skill is offered (`--palette-skill none`, the baseline).

A capable model without the skill still makes decks: it shows an outline, waits for the user's approval, then
writes the .pptx itself with python-pptx. This module is that outline and that script — drafted from the
user's words, revised by their replies, the same every time for the same conversation. It knows nothing of
Palette: no plan file, no deck.py, no IBM Plex. It reads a slide count as the reference engine does
(`engine/counting.py`): that is English, not Palette, and one reading keeps the two from disagreeing on what
a user asked.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, replace

from ..engine.counting import count_in_text

#: The line every script it writes starts with: how it knows, in a later step, that it wrote the deck.
MARKER = "from pptx import Presentation"
#: Where it saves the deck, in its working folder.
DECK_FILE = "deck.pptx"
#: Slides when the user names no count and pastes no sections.
DEFAULT_SLIDES = 5
#: Titles after the first (the topic), in order, for a deck the user gave no sections for.
FILLERS = ("Background", "Key points", "How it works", "Examples", "Challenges", "Options", "Recommendation",
           "Timeline", "Risks", "Next steps", "Questions", "Summary")

_NUMBERS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve")
_TOPIC = re.compile(r"\b(?:on|about|summari[sz]ing|introducing|covering)\s+(.+?)(?:\s+instead)?[.!]?$", re.I)
_HEADING = re.compile(r"^##\s+(.+?)\s*$", re.M)
_NAMED = re.compile(r"\bslide\s+(\d+|" + "|".join(_NUMBERS) + r")\b", re.I)
_DROP = re.compile(r"\b(?:drop|remove|delete|cut)\b", re.I)
_ADD = re.compile(r"\badd (?:a|one more|another) slide (?:on|about|for|with)\s+(.+?)(?:\s+at the end)?[.!]?$", re.I)
_ABOUT = re.compile(r"\b(?:about|on|to be)\s+(.+?)[.!]?$", re.I)


def _number(word: str) -> int:
    return int(word) if word.isdigit() else _NUMBERS.index(word.lower()) + 1


def _titled(text: str) -> str:
    text = text.strip().rstrip(".!?")
    return text[:1].upper() + text[1:]


@dataclass(frozen=True)
class Outline:
    """The deck it would write: a topic, a title per slide, and the changes asked for that titles cannot show."""

    topic: str
    titles: tuple[str, ...]
    notes: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """As shown to the user: "## " per slide, so a question about it is answered from its titles."""
        lines = [f"# {self.topic}", ""] + [f"## {title}" for title in self.titles]
        return "\n".join(lines + ([""] + [f"> {note}" for note in self.notes] if self.notes else []))

    def resized(self, count: int) -> Outline:
        titles = list(self.titles[:max(1, count)])
        spare = (title for title in (*FILLERS, *(f"Part {n}" for n in range(1, count + 1))) if title not in titles)
        while len(titles) < count:
            titles.append(next(spare))
        return replace(self, titles=tuple(titles))


def drafted(request: str, material: str = "") -> Outline:
    """The outline for a request: its pasted material's "## " sections, else its topic and fillers."""
    found = _TOPIC.search(request)
    heading = re.search(r"^#\s+(.+?)\s*$", material, re.M)
    topic = _titled(found.group(1) if found else heading.group(1) if heading else request)
    sections = tuple(_titled(title) for title in _HEADING.findall(material))
    titles = sections or (topic,)
    return Outline(topic, titles).resized(count_in_text(request) or len(sections) or DEFAULT_SLIDES)


def revised(outline: Outline, reply: str) -> Outline:
    """The outline after a reply asking for a change: a count, a slide added, dropped or retitled, or a note."""
    count = count_in_text(reply)
    if count is not None:
        return outline.resized(count)
    added = _ADD.search(reply.strip())
    if added:
        return replace(outline, titles=(*outline.titles, _titled(added.group(1))))
    named = _NAMED.search(reply)
    index = _number(named.group(1)) - 1 if named else None
    if _DROP.search(reply) and ("last slide" in reply.lower() or index is not None) and len(outline.titles) > 1:
        gone = len(outline.titles) - 1 if index is None else index
        return replace(outline, titles=tuple(t for i, t in enumerate(outline.titles) if i != gone))
    about = _ABOUT.search(reply)
    if index is not None and index < len(outline.titles) and about:
        titles = list(outline.titles)
        titles[index] = _titled(about.group(1))
        return replace(outline, titles=tuple(titles))
    return replace(outline, notes=(*outline.notes, reply.strip()))


def write_command(outline: Outline) -> str:
    """A shell command that writes the outline as a .pptx with python-pptx and prints the file's absolute path.
    The python is $PALETTE_PYTHON where set: the interpreter in this environment that has python-pptx."""
    script = (
        f"import pathlib; {MARKER}\n"
        f"titles = {list(outline.titles)!r}\n"
        f"topic = {outline.topic!r}\n"
        "deck = Presentation()\n"
        "for number, title in enumerate(titles):\n"
        "    slide = deck.slides.add_slide(deck.slide_layouts[0 if number == 0 else 1])\n"
        "    slide.shapes.title.text = title\n"
        "    slide.placeholders[1].text = topic\n"
        f"path = pathlib.Path({DECK_FILE!r}).resolve()\n"
        "deck.save(path)\n"
        "print(path)\n"
    )
    return f'"${{PALETTE_PYTHON:-python3}}" -c {shlex.quote(script)}'


def written(output: str | None) -> str | None:
    """The path the script printed, or None when it did not get that far."""
    lines = [line.strip() for line in (output or "").splitlines()]
    return next((line for line in reversed(lines) if line.endswith(".pptx")), None)
