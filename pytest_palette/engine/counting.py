"""Slide counts as people write them: "a 5-slide deck", "twelve slides", "Length: 6 slides"."""

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

_WORDS = "|".join(sorted((re.escape(w) for w in NUMBER_WORDS), key=len, reverse=True))
NUMBER = rf"(?:\d{{1,3}}|{_WORDS})"
# "5 slides", "5-slide", "five slide", "a single slide"; not "slide 5".
_COUNT_IN_TEXT = re.compile(rf"\b({NUMBER})[\s-]*slides?\b", re.IGNORECASE)
_DECLARED = (
    re.compile(r"^\s*(?:[-*]\s*)?length\s*:\s*(\d{1,3})\s*slides?\b", re.IGNORECASE | re.MULTILINE),
    re.compile(r"^\s*(?:[-*]\s*)?slides\s*:\s*(\d{1,3})\b", re.IGNORECASE | re.MULTILINE),
    re.compile(r"\[\[\s*(\d{1,3})\s*slides?\b", re.IGNORECASE),
)


def to_int(token: str) -> int | None:
    """'7' -> 7, 'seven' -> 7, 'seventh' -> 7; anything else -> None."""
    token = token.strip().lower()
    if token.isdigit():
        return int(token)
    return NUMBER_WORDS.get(token, ORDINALS.get(token))


def clamp(count: int) -> int:
    return max(1, min(MAX_SLIDES, count))


def count_in_text(text: str) -> int | None:
    """The first "N slides" phrase in a request or instruction."""
    match = _COUNT_IN_TEXT.search(text)
    if not match:
        return None
    value = to_int(match.group(1))
    return clamp(value) if value else None


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
