"""Slide counts as people write them: "a 5-slide deck", "a dozen slides", "keep it to three", "Length: 6 slides".

The supported forms are listed, with examples, in docs/reference-palette.md.
"""

from __future__ import annotations

import re

MAX_SLIDES = 20  # the planner never drafts more than this; bigger asks are clamped
DEFAULT_SLIDES = 5

NUMBER_WORDS: dict[str, int] = {
    word: value
    for value, word in enumerate(
        [
            "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
            "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty",
        ]
    )
}
NUMBER_WORDS.update({"a single": 1, "single": 1})
ORDINALS: dict[str, int] = {
    word: value
    for value, word in enumerate(
        [
            "zeroth", "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth",
            "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth", "sixteenth", "seventeenth", "eighteenth",
            "nineteenth", "twentieth",
        ]
    )
    if value
}

# Tens, so "thirty slides" is read (and clamped) rather than missed.
TENS: dict[str, int] = {"thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
                        "ninety": 90}
# Quantities people say instead of a number, read as one fixed value each so a run is repeatable: "a few"
# and "a handful" are vague, so 3 and 5 (docs/reference-palette.md, "Slide counts").
PHRASES: dict[str, int] = {"half a dozen": 6, "a dozen": 12, "dozen": 12, "a couple of": 2, "a couple": 2,
                           "a few": 3, "a handful of": 5, "a handful": 5, "a pair of": 2}
_WORDS = "|".join(sorted((re.escape(w) for w in [*NUMBER_WORDS, *TENS, *PHRASES]), key=len, reverse=True))
#: A count: digits, a word ("seven", "twenty-five") or a phrase ("a dozen").
NUMBER = rf"(?:\d{{1,3}}|(?:twenty|{'|'.join(TENS)})[\s-](?:one|two|three|four|five|six|seven|eight|nine)|{_WORDS})"
_APPROX = r"(?:\s+or\s+so|ish)?"  # "8 or so slides", "8ish slides": read as 8
_UNIT = r"(?:slides?|pages?)"
# "5 slides", "5-slide", "a 7-page deck", "a dozen slides", "8 or so slides"; not "slide 5", "page 3".
_COUNT_IN_TEXT = re.compile(rf"\b({NUMBER}){_APPROX}[\s-]*(?:of\s+)?(slides?|pages?|pager)\b", re.IGNORECASE)
# Pages are the deck's only when the words after say so ("a 7-page deck", "six pages on X", "... in
# six pages."); "this 30-page report", "our 10-page strategy memo", "12 pages of notes" are the source's.
_DECK_PAGES = re.compile(
    r"\s*(?:$|[.,;:!?)\u2014\u2013]|(?:[\w-]+\s+){0,2}?(?:deck|presentation|slideshow|pitch|talk)\b|"
    r"(?:on|about|covering|regarding|for|please|max|maximum|long|total|tops|or\s+so|or\s+less|at\s+most)\b)",
    re.IGNORECASE)
# A bare number after a limit: "keep it to three", "no more than 4", "at most six, please".
_LIMIT = re.compile(
    rf"\b(?:keep\s+(?:it|this|the\s+deck)\s+(?:to|at)|limit\s+(?:it|this)\s+to|cap\s+(?:it|this)\s+at|"
    rf"no\s+more\s+than|at\s+most|max(?:imum)?(?:\s+of)?|just|only)\s+({NUMBER})\b"
    rf"(?=\s*(?:{_UNIT}\b|$|[.,;:!?)\u2014\u2013-]|(?:please|max|maximum|tops|total|long)\b))",
    re.IGNORECASE)
# A count after the subject that points back at the slides asked for: "some slides on hiring, 6 of them",
# "a deck on tea, a dozen in total". It must stand as its own clause after a deck word, so "our five regions,
# focusing on two of them" and "two of them new" are no count.
_DECK_BEFORE = re.compile(r"\b(?:decks?|slides?|presentations?|slideshow|pitch)\b", re.IGNORECASE)
_POINTED_BACK = re.compile(
    rf"(?:^|[,;:(\u2014\u2013]|\s-)\s*(?:(?:and|so|just|only|maybe|about|around|roughly)\s+)*({NUMBER})"
    rf"\s+(?:of\s+(?:them|those)|in\s+total|total)(?:\s+(?:please|max|tops))?\s*(?=$|[.,;:!?)\u2014\u2013])",
    re.IGNORECASE)
#: A count phrase with its lead-in, for cutting it out of a topic or title ("in six pages").
COUNT_PHRASE = re.compile(
    rf"(?:\b(?:in|with|using|of|across|keep\s+it\s+to|no\s+more\s+than|at\s+most|around|about|roughly|"
    rf"approximately|max(?:imum)?(?:\s+of)?)\s+)?(?:\ba\s+)?(?:between\s+)?(?:\b{NUMBER}\s*(?:-|\u2013|to|and|or)\s*)?\b{NUMBER}{_APPROX}[\s-]*(?:of\s+)?"
    rf"(?:slides?|pages?|pager)\b(?:\s+(?:long|max|maximum|tops|total))?",
    re.IGNORECASE)
_DECLARED = (
    re.compile(r"^\s*(?:[-*]\s*)?length\s*:\s*(\d{1,3})\s*slides?\b", re.IGNORECASE | re.MULTILINE),
    re.compile(r"^\s*(?:[-*]\s*)?slides\s*:\s*(\d{1,3})\b", re.IGNORECASE | re.MULTILINE),
    re.compile(r"\[\[\s*(\d{1,3})\s*slides?\b", re.IGNORECASE),
)


def to_int(token: str) -> int | None:
    """'7' -> 7, 'seven' -> 7, 'twenty-five' -> 25, 'a dozen' -> 12, 'seventh' -> 7; else None."""
    token = " ".join(token.strip().lower().replace("-", " ").split())
    if token.isdigit():
        return int(token)
    tens, _, unit = token.partition(" ")
    if unit and (tens == "twenty" or tens in TENS) and unit in NUMBER_WORDS:
        return (TENS.get(tens) or 20) + NUMBER_WORDS[unit]
    value = NUMBER_WORDS.get(token, TENS.get(token, PHRASES.get(token)))
    return value if value is not None else ORDINALS.get(token)


def clamp(count: int) -> int:
    return max(1, min(MAX_SLIDES, count))


def count_in_text(text: str) -> int | None:
    """The slide count a request or instruction asks for, in any of the forms in docs/reference-palette.md.

    Slides win over pages (a deck's pages are its slides, but "a 30-page report" is the source), and a
    bare number counts only after a limit ("keep it to three") or as a clause of its own that points back at the
    slides ("a deck on tea, 6 of them"). A range ("8-10 slides") reads as its
    upper bound, because the grammar finds "10 slides"; an approximate count ("around 8") as its number.
    """
    found: list[tuple[bool, int]] = []  # (is it slides, not pages?, the count)
    for match in _COUNT_IN_TEXT.finditer(text):
        unit = match.group(2).lower()
        if unit == "pager":  # "a one-pager"
            if match.group(1).lower() not in ("one", "1"):
                continue
        elif unit.startswith("page") and not _DECK_PAGES.match(text, match.end()):
            continue
        value = to_int(match.group(1))
        if value:
            found.append((not unit.startswith("page"), value))
    if found:
        return clamp(max(found, key=lambda pair: pair[0])[1])  # the first slide phrase, else the first page one
    limit = _LIMIT.search(text)
    value = to_int(limit.group(1)) if limit else None
    if not value:
        back = next((m for m in _POINTED_BACK.finditer(text) if _DECK_BEFORE.search(text, 0, m.start())), None)
        value = to_int(back.group(1)) if back else None
    return clamp(value) if value else None


def strip_count(text: str) -> str:
    """``text`` without its count phrase: "prompt caching in six pages" -> "prompt caching"."""
    text = _POINTED_BACK.sub(" ", _LIMIT.sub(" ", text))
    return " ".join(COUNT_PHRASE.sub(" ", text).split())


def declared_count(material: str) -> int | None:
    """A length declared in the material's header (before its first ``## `` section).

    Only the header counts: inside a section, ``[[1 slide]]`` is a per-section directive,
    not the length of the whole deck.
    """
    header = re.split(r"^## ", material, maxsplit=1, flags=re.MULTILINE)[0]
    for pattern in _DECLARED:
        match = pattern.search(header)
        if match and int(match.group(1)) > 0:
            return clamp(int(match.group(1)))
    return None
