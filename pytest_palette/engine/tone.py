"""Tone: detected from a request, and applied to wording by word-level substitution.

Substitution only swaps words and phrases, so numbers and figures from the material are
never touched.
"""

from __future__ import annotations

import functools
import re

TONES = ("professional", "casual", "formal")
DEFAULT_TONE = "professional"

# formal/professional phrase -> casual phrase. Only unambiguous pairs, so that going back
# to formal restores the wording.
_CASUAL_PAIRS: tuple[tuple[str, str], ...] = (
    ("do not", "don't"),
    ("does not", "doesn't"),
    ("did not", "didn't"),
    ("cannot", "can't"),
    ("will not", "won't"),
    ("is not", "isn't"),
    ("are not", "aren't"),
    ("it is", "it's"),
    ("that is", "that's"),
    ("there is", "there's"),
    ("we are", "we're"),
    ("we will", "we'll"),
    ("you will", "you'll"),
    ("let us", "let's"),
    ("approximately", "about"),
    ("additional", "extra"),
    ("utilise", "use"),
    ("utilize", "use"),
    ("therefore", "so"),
    ("however", "but"),
    ("purchase", "buy"),
    ("numerous", "lots of"),
    ("demonstrates", "shows"),
    ("demonstrate", "show"),
    ("assist", "help"),
    ("require", "need"),
    ("requires", "needs"),
    ("sufficient", "enough"),
    ("commence", "start"),
    ("in order to", "to"),
    ("substantial", "big"),
)
# Reverse direction: skip casual words that are too common to map back blindly.
_AMBIGUOUS_CASUAL = {"about", "use", "so", "but", "show", "help", "need", "needs", "start", "to", "big"}


def _pattern(phrase: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w']){re.escape(phrase)}(?![\w'])", re.IGNORECASE)


_TO_CASUAL = [(_pattern(a), b) for a, b in _CASUAL_PAIRS]
_TO_FORMAL = [(_pattern(b), a) for a, b in _CASUAL_PAIRS if b not in _AMBIGUOUS_CASUAL]
# Words only casual writing uses, so mapping them to formal ones loses nothing.
_TO_FORMAL += [(_pattern(a), b) for a, b in (
    ("lots of", "many"), ("a lot of", "a great deal of"), ("stuff", "material"), ("a bit", "somewhat"),
    ("pretty much", "largely"), ("kinda", "somewhat"), ("gonna", "going to"), ("wanna", "want to"),
    ("guys", "everyone"), ("awesome", "excellent"), ("cool", "good"),
)]
_SMALL_WORDS = set([
    "a", "an", "the", "and", "or", "but", "nor", "of", "on", "in", "to", "for", "with", "at", "by", "as", "from", "vs",
    "via", "per",
])


def _keep_case(replacement: str, found: str) -> str:
    if found[:1].isupper():
        return replacement[:1].upper() + replacement[1:]
    return replacement


def reword(text: str, tone: str) -> str:
    """Rewrite one line of text in the given tone; unchanged when nothing maps."""
    # Professional wording is formal minus stiffness: contractions are expanded either way.
    pairs = _TO_CASUAL if tone == "casual" else _TO_FORMAL
    for pattern, replacement in pairs:
        text = pattern.sub(functools.partial(_substitute, replacement), text)
    return text


def _substitute(replacement: str, match: re.Match[str]) -> str:
    return _keep_case(replacement, match.group(0))


def title_case(title: str) -> str:
    """Formal headings: capitalise every word but small ones; acronyms and figures untouched."""
    words = title.split(" ")
    out = []
    for index, word in enumerate(words):
        cased = word
        if word[:1].islower() and (index == 0 or word.lower() not in _SMALL_WORDS):
            cased = word[:1].upper() + word[1:]
        out.append(cased)
    return " ".join(out)


def reword_title(title: str, tone: str) -> str:
    """A slide title in the given tone: formal titles are also Title Case."""
    title = reword(title, tone)
    return title_case(title) if tone == "formal" else title


def tone_in_text(text: str) -> str | None:
    """'casual' / 'formal' / 'professional' when the text asks for one."""
    lowered = text.lower()
    # "less casual" / "less formal" name the opposite tone, so they are checked first.
    if re.search(r"\bless (casual|relaxed|informal)\b", lowered):
        return "formal"
    if re.search(r"\b(casual|informal|relaxed|friendl(y|ier)|laid[- ]back|light[- ]hearted|chatty)\b",
                 lowered) or re.search(r"\bless (formal|stiff|corporate)\b", lowered):
        return "casual"
    if re.search(r"\b(formal|buttoned[- ]up)\b", lowered):
        return "formal"
    if re.search(r"\b(professional|businesslike|business-like)\b", lowered):
        return "professional"
    return None
