"""edit-plan: apply a user's instruction, verbatim, to a plan, deterministically.

The instruction is split into clauses ("yes, but drop the last slide" -> "yes" and "drop the
last slide"); each clause is mapped to at most one change and applied in order, so slide
numbers in a later clause refer to the plan as the earlier clauses left it. Every
instruction is recorded in the plan's ``Revisions:`` list with what was done, including
"noted, not mapped" when nothing matched: an edit is never a silent no-op.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .counting import MAX_SLIDES, NUMBER, ORDINALS, clamp, count_in_text, to_int
from .errors import EngineError
from .generic import MIDDLE, capitalise, filler_sections, make_section, topic_section
from .plan_format import Plan, Section
from .shaping import fit_to, headline
from .tone import reword, reword_title, tone_in_text

_ORDINAL = "|".join(sorted(ORDINALS, key=len, reverse=True))
_TRIGGERS = [
    "make", "add", "insert", "include", "append", "drop", "remove", "delete", "cut", "trim", "reduce", "shrink",
    "shorten", "lengthen", "expand", "fix", "rewrite", "redo", "rework", "reword", "rephrase", "revise", "improve",
    "clean", "polish", "tidy", "tighten", "update", "lead", "start", "open", "begin", "put", "move", "focus",
    "concentrate", "only", "just", "keep", "change", "use", "more", "less", "fewer", "shorter", "longer", "casual",
    "formal", "professional", "can", "could", "would", "please", "also", "then", "go", "get", "lose", "kill", "scrap",
    "skip", "tone", "sound", "bring", "take", "set", "limit", "condense", "yes", "ok", "okay", "sure", "swap",
]
_SEPARATOR = re.compile(r"\s*(,|;|\n|\bbut\b|\band then\b|\bthen\b|\band also\b|\balso\b|\band\b|\bplus\b)\s*",
                        re.IGNORECASE)
_HARD_SEPARATORS = {";", "\n", "but"}
_FILLER = re.compile(
    r"^(?:ok(?:ay)?|yes|yeah|yep|sure|great|thanks|thank you|please|just|also|then|and|but|so|now|"
    r"actually|maybe|hmm|well|i think|i'd like (?:you to |it to )?|i would like (?:you to |it to )?|"
    r"i want (?:you to |it to )?|let's|can you|could you|would you|can we|could we|can it be|"
    r"could it be|make sure to)\b[\s,]*",
    re.IGNORECASE,
)
_APPROVAL = re.compile(
    r"^(?:yes|yeah|yep|ok(?:ay)?|sure|looks good|sounds good|great|perfect|fine|good|go ahead|"
    r"that works|love it|nice)$",
    re.IGNORECASE,
)
_STOPWORDS = set(
    [
        "the", "a", "an", "of", "on", "about", "to", "for", "and", "or", "with", "in", "at", "by", "slide", "slides",
        "section", "deck", "it", "its", "this", "that", "only", "just", "more", "please", "all", "our", "my", "your",
        "their",
    ]
)
_CLOSING_TITLES = ("summary", "next steps", "questions and discussion", "questions", "thank you")

Handler = Callable[[Plan, str], "str | None"]  # what it did, or None: not this kind of change


def split_clauses(instruction: str) -> list[str]:
    """Split on ; / "but" always, and on , / "and" / "then" only before a new command."""
    tokens = _SEPARATOR.split(instruction.strip())
    clauses = [tokens[0]]
    for index in range(1, len(tokens) - 1, 2):
        separator, piece = tokens[index], tokens[index + 1]
        if not piece.strip():
            continue  # ", but": two separators in a row
        first_word = re.split(r"[\s,]+", piece.strip().lower(), maxsplit=1)[0] if piece.strip() else ""
        if separator.lower() in _HARD_SEPARATORS or first_word in _TRIGGERS or not clauses[-1].strip():
            clauses.append(piece)
        else:  # "add a slide on cost and pricing", "remove slides 2 and 3": one clause
            joiner = f"{separator} " if separator in ",;" else f" {separator} "
            clauses[-1] = f"{clauses[-1]}{joiner}{piece}"
    return [c.strip() for c in clauses if c.strip()]


def _strip_filler(clause: str) -> str:
    text = clause.strip().strip("?!.").strip()
    previous = None
    while previous != text:
        previous = text
        text = _FILLER.sub("", text).strip()
    return re.sub(r"[\s,]*\bplease$", "", text, flags=re.IGNORECASE).strip()


def _words(text: str) -> set[str]:
    """Significant lower-case words, with a plural 's' folded away."""
    words = re.findall(r"[a-z0-9$%][a-z0-9$%'-]*", text.lower())
    return {w[:-1] if len(w) > 3 and w.endswith("s") else w for w in words if w not in _STOPWORDS}


def find_section(plan: Plan, phrase: str) -> int | None:
    """Index of the section best matching ``phrase`` (title words count double); ties -> earliest."""
    wanted = _words(phrase)
    if not wanted:
        return None
    best, best_score = None, 0
    for index, section in enumerate(plan.sections):
        score = 2 * len(wanted & _words(section.title)) + len(wanted & _words(section.text()))
        if score > best_score:
            best, best_score = index, score
    return best


def _slide_ref(plan: Plan, text: str) -> int | None:
    """A 0-based slide index from "slide 2", "the second slide", "the last slide"."""
    count = len(plan.sections)
    match = re.search(rf"\bslide\s+(?:number\s+|no\.?\s*|#)?({NUMBER}|\d+)\b", text, re.IGNORECASE)
    if match:
        number = to_int(match.group(1))
        return number - 1 if number and 1 <= number <= count else -1
    match = re.search(rf"\b(?:the\s+)?({_ORDINAL}|last|final|penultimate)(?:\s+one)?(?:\s+slide)?\b",
                      text, re.IGNORECASE)
    if match:
        word = match.group(1).lower()
        if word in ("last", "final"):
            return count - 1
        if word == "penultimate":
            return count - 2 if count >= 2 else -1
        number = ORDINALS[word]
        return number - 1 if number <= count else -1
    return None


def topic_of_plan(plan: Plan) -> str:
    """The subject generated slides talk about: the planner's ``Topic:`` line, else the title."""
    for line in plan.header:
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() == "topic" and value.strip():
            return value.strip()
    return plan.title


def _first_content(plan: Plan) -> int:
    """Where content starts: after the title slide, which stays slide 1."""
    return 1 if len(plan.sections) > 1 and plan.sections[0].is_title else 0


def _describe(section: Section, index: int) -> str:
    return f"slide {index + 1} (\u201c{section.title}\u201d)"


# --- handlers: each returns what it did, or None when the clause is not its kind ----------


def _approval(plan: Plan, clause: str) -> str | None:
    return f"acknowledged \u201c{clause}\u201d, no change" if _APPROVAL.match(clause) else None


def _set_count(plan: Plan, count: int) -> str:
    before = len(plan.sections)
    count = clamp(count)
    if count == before:
        return f"already {before} slides"
    plan.sections = fit_to(plan.sections, count, topic_of_plan(plan), plan.tone)
    how = "merged neighbouring slides" if count < before else "added slides"
    return f"length {before} -> {count} slides ({how})"


def _count(plan: Plan, clause: str) -> str | None:
    match = re.search(
        rf"\b(?:cut|trim|reduce|shrink|bring|take|expand|increase|grow|pare|condense|shorten|lengthen|"
        rf"make|keep|limit|change|go|drop|get)\b.*?\b(?:to|at|down to|up to)\s+({NUMBER})\b(?!\s*(?:st|nd|rd|th)\b)",
        clause, re.IGNORECASE)
    if match and not re.search(r"\bslide\s+\d", clause, re.IGNORECASE):
        value = to_int(match.group(1))
        if value:
            return _set_count(plan, value)
    count = count_in_text(clause)
    if count is not None and not re.match(r"(?:add|insert|include|append)\b", clause, re.IGNORECASE):
        removal = re.match(rf"(?:remove|drop|delete|cut|lose|kill|scrap)\s+({NUMBER})\s+slides?\b",
                           clause, re.IGNORECASE)
        if removal:
            return _set_count(plan, len(plan.sections) - count)
        return _set_count(plan, count)
    return None


def _add(plan: Plan, clause: str) -> str | None:
    match = re.match(r"(?:add|insert|include|append|put in)\b(.*)$", clause, re.IGNORECASE)
    if not match:
        return None
    rest = match.group(1)
    if not re.search(r"\b(?:slides?|section|page)\b", rest, re.IGNORECASE) and not re.search(
            r"\b(?:on|about|covering)\b", rest, re.IGNORECASE):
        return None  # "add more detail", "add our logo": not a slide
    many = re.search(rf"\b({NUMBER})\s+(?:more\s+|new\s+|extra\s+)?slides\b", rest, re.IGNORECASE)
    how_many = (to_int(many.group(1)) or 1) if many else 1
    position = len(plan.sections)
    where = "at the end"
    if re.search(r"\b(?:at|to)\s+the\s+(?:start|beginning|front|top)\b|\bfirst\b", rest, re.IGNORECASE):
        position = _first_content(plan)
        where = "at the start" if not position else "after the title slide"
    elif ref := re.search(rf"\b(after|before)\s+slide\s+({NUMBER})\b", rest, re.IGNORECASE):
        number = min(max(to_int(ref.group(2)) or 1, 1), len(plan.sections))
        position = number if ref.group(1).lower() == "after" else number - 1
        where = f"{ref.group(1).lower()} slide {number}"
    elif not re.search(r"\b(?:at|to)\s+the\s+end\b|\blast\b", rest, re.IGNORECASE):
        # No position given: before the closing slides (summary, next steps), not after them.
        while position > 0 and plan.sections[position - 1].title.lower() in _CLOSING_TITLES:
            position -= 1
        where = f"as slide {position + 1}"
    subject_match = re.search(r"\b(?:on|about|covering|regarding|for|explaining)\s+(?:the\s+)?(.+?)"
                              r"(?:\s+(?:at|to|after|before|as)\s+(?:the\s+)?(?:end|start|beginning|front|"
                              r"top|slide)\b.*)?$", rest, re.IGNORECASE)
    subject = subject_match.group(1).strip(" .") if subject_match else ""
    if not subject:
        named = re.match(r"\s*(?:a|an|one|another)\s+(?!new\b|more\b|extra\b)(.+?)\s+slide\b", rest, re.IGNORECASE)
        subject = named.group(1).strip() if named else ""
    room = MAX_SLIDES - len(plan.sections)
    if room <= 0:
        return f"not added: the reference engine drafts at most {MAX_SLIDES} slides"
    how_many = min(how_many, room)
    if subject:
        new = [topic_section(subject, topic_of_plan(plan), plan.tone)]
        new += [make_section(MIDDLE[i], subject, plan.tone) for i in range(how_many - 1)]
    else:
        new = filler_sections(topic_of_plan(plan), how_many, plan.tone, {s.title.lower() for s in plan.sections})
    plan.sections[position:position] = new
    titles = ", ".join(f"\u201c{s.title}\u201d" for s in new)
    return f"added {len(new)} slide{'s' if len(new) > 1 else ''} {titles} {where}"


def _remove(plan: Plan, clause: str) -> str | None:
    match = re.match(r"(?:remove|drop|delete|cut|lose|kill|scrap|skip|get rid of|take out|ditch)\b(.*)$",
                     clause, re.IGNORECASE)
    if not match:
        return None
    rest = match.group(1)
    count = len(plan.sections)
    targets: list[int] = []
    numbers = re.search(rf"\bslides\s+((?:{NUMBER}|\d+)(?:\s*(?:,|and|&)\s*(?:{NUMBER}|\d+))+)", rest,
                        re.IGNORECASE)
    last_n = re.search(rf"\b(?:last|final)\s+({NUMBER})\s+slides\b", rest, re.IGNORECASE)
    if numbers:
        values = [to_int(t) for t in re.split(r"\s*(?:,|and|&)\s*", numbers.group(1))]
        targets = [v - 1 for v in values if v and 1 <= v <= count]
    elif last_n:
        n = min(to_int(last_n.group(1)) or 1, count)
        targets = list(range(count - n, count))
    else:
        ref = _slide_ref(plan, rest)
        if ref is not None and ref >= 0:
            targets = [ref]
        elif ref is None:
            found = find_section(plan, rest)
            targets = [found] if found is not None else []
    if not targets:
        return None
    targets = sorted(set(targets), reverse=True)
    if len(targets) >= count:
        return "not removed: a deck needs at least one slide"
    removed = [_describe(plan.sections[i], i) for i in sorted(targets)]
    for index in targets:  # highest first, so the other indices stay valid
        del plan.sections[index]
    return "removed " + ", ".join(removed)


def _shorter_longer(plan: Plan, clause: str) -> str | None:
    lowered = clause.lower()
    if _slide_ref(plan, clause) is not None:
        return None  # "make slide 2 shorter" is about one slide: a rewrite
    count = len(plan.sections)
    step = max(1, count // 4)
    if re.search(r"\b(shorter|shorten|condense|more concise|tighter|fewer slides|trim it|cut it down|too long)\b",
                 lowered):
        if count == 1:
            return "already 1 slide, the shortest a deck can be"
        return _set_count(plan, count - step)
    if re.search(r"\b(longer|lengthen|more slides|expand it|more detail|too short|flesh it out)\b", lowered):
        if count >= MAX_SLIDES:
            return f"already {MAX_SLIDES} slides, the most the reference engine drafts"
        return _set_count(plan, count + step)
    return None


def _tone(plan: Plan, clause: str) -> str | None:
    tone = tone_in_text(clause)
    if tone is None:
        return None
    changed = 0
    for section in plan.sections:
        new_title = reword_title(section.title, tone)
        new_bullets = [reword(b, tone) for b in section.bullets]
        changed += (new_title != section.title) + sum(a != b for a, b in zip(new_bullets, section.bullets, strict=True))
        section.title, section.bullets = new_title, new_bullets
    before = plan.tone
    plan.preferences["Tone"] = tone
    note = f"tone {before} -> {tone}" if before != tone else f"tone kept {tone}"
    return f"{note} (reworded {changed} line{'s' if changed != 1 else ''})"


def rewrite_section(section: Section, plan: Plan) -> Section:
    """Tidy a section: one idea per bullet, consistent case and tone; mark it revised."""
    bullets: list[str] = []
    seen: set[str] = set()
    for bullet in section.bullets:
        for raw in re.split(r"\s*;\s+", " ".join(bullet.split())):
            part = reword(capitalise(raw.strip()), plan.tone)
            if part.count(". ") == 0:
                part = part.rstrip(".")
            if part and part.lower() not in seen:
                seen.add(part.lower())
                bullets.append(part)
    title = " ".join(section.title.split()).strip(" .:")
    if len(title.split()) > 9:
        title = headline(title)
    if not bullets and not section.tables and not section.code:
        bullets = topic_section(title, topic_of_plan(plan), plan.tone).bullets
    directives = [d for d in section.directives if d.lower() != "revised"] + ["revised"]
    return Section(capitalise(title), bullets, section.tables, directives, section.code)


def _rewrite(plan: Plan, clause: str) -> str | None:
    if not re.search(r"\b(fix|rewrite|redo|rework|reword|rephrase|revise|improve|clean up|polish|tidy|"
                     r"tighten|update|simplify|shorter|simpler|clearer|is wrong|needs work|is off|is confusing)\b",
                     clause, re.IGNORECASE):
        return None
    index = _slide_ref(plan, clause)
    if index is None:
        named = re.search(r"\bslide\s+(?:on|about)\s+(?:the\s+)?(.+)$", clause, re.IGNORECASE)
        index = find_section(plan, named.group(1)) if named else None
    if index is None:
        return None
    if index < 0:
        return f"not rewritten: the plan has {len(plan.sections)} slides"
    # "fix slide 2, it should be about timelines": the slide takes the new subject, not just a tidy.
    subject = re.search(r"\b(?:should|must|needs? to|ought to|has to)\s+(?:be\s+)?(?:about|on|cover)\s+"
                        r"(?:the\s+)?(.+)$|\b(?:make it|turn it into a slide)\s+(?:about|on)\s+(?:the\s+)?(.+)$",
                        clause, re.IGNORECASE)
    if subject:
        was = plan.sections[index].title
        about = str(subject.group(1) or subject.group(2)).strip(" .")
        section = topic_section(about, topic_of_plan(plan), plan.tone)
        section.directives.append("revised")
        plan.sections[index] = section
        return f"rewrote slide {index + 1} (\u201c{was}\u201d) to be about {about}, marked [[revised]]"
    plan.sections[index] = rewrite_section(plan.sections[index], plan)
    return f"rewrote {_describe(plan.sections[index], index)}, marked [[revised]]"


def _move_to(plan: Plan, index: int, position: int) -> str:
    section = plan.sections.pop(index)
    plan.sections.insert(position, section)
    return f"moved \u201c{section.title}\u201d from slide {index + 1} to slide {position + 1}"


def _lead(plan: Plan, clause: str) -> str | None:
    match = re.search(r"\b(?:lead|start|open|begin|kick off)\s+(?:it\s+|the deck\s+)?with\s+(.+)$", clause,
                      re.IGNORECASE) or re.search(
        r"\b(?:put|move|bring)\s+(.+?)\s+(?:first|up front|(?:to\s+|at\s+)?the\s+(?:front|start|beginning|top))\b",
        clause, re.IGNORECASE)
    to_end = re.search(r"\b(?:put|move)\s+(.+?)\s+(?:last|(?:to\s+|at\s+)?the\s+end)\b", clause, re.IGNORECASE)
    target = match or to_end
    if target is None:
        return None
    phrase = target.group(1)
    index = _slide_ref(plan, phrase)
    if index is None:
        index = find_section(plan, phrase)
    if index is None or index < 0:
        return None
    position = (_first_content(plan) if index else 0) if match else len(plan.sections) - 1
    if index == position:
        return f"\u201c{plan.sections[index].title}\u201d is already slide {position + 1}"
    return _move_to(plan, index, position)


def _focus(plan: Plan, clause: str) -> str | None:
    match = re.search(r"\b(?:focus|concentrate)\s+(?:only\s+|just\s+|solely\s+)?on\s+(?:the\s+)?(.+?)"
                      r"(?:\s+only|\s+alone)?$", clause, re.IGNORECASE) or re.search(
        r"^(?:only|just)\s+(?:cover|talk about|be about|about)\s+(?:the\s+)?(.+)$", clause, re.IGNORECASE) or re.search(
        r"^make it (?:all |only |just )?about\s+(?:the\s+)?(.+)$", clause, re.IGNORECASE)
    if not match:
        return None
    subject = match.group(1).strip(" .")
    wanted = _words(subject)
    if not wanted:
        return None
    count = len(plan.sections)
    kept = [s for i, s in enumerate(plan.sections) if wanted & _words(s.text()) or (i == 0 and s.is_title)]
    extra = count - len(kept)
    new = [topic_section(subject, topic_of_plan(plan), plan.tone)] if extra > 0 and not any(
        wanted & _words(s.title) for s in kept) else []
    new += [make_section(MIDDLE[i], subject, plan.tone) for i in range(max(0, extra - len(new)))]
    plan.sections = kept + new
    plan.preferences["Focus"] = subject
    return (f"focused on {subject}: kept {len(kept)} matching slide{'s' if len(kept) != 1 else ''}, "
            f"replaced {extra} other{'s' if extra != 1 else ''} with slides on {subject}")


HANDLERS: tuple[Handler, ...] = (_approval, _add, _count, _remove, _shorter_longer, _tone, _rewrite, _lead,
                                 _focus)


def one_line(text: str) -> str:
    return " ".join(text.split()).replace('"', "'")


def apply_instruction(plan: Plan, instruction: str) -> list[str]:
    """Apply every mappable clause in order; returns one note per clause."""
    notes: list[str] = []
    for clause in split_clauses(instruction):
        text = _strip_filler(clause)
        if not text:  # only "yes" / "ok" / "thanks": acknowledged, nothing to change
            notes.append(f"acknowledged \u201c{one_line(clause)}\u201d, no change")
            continue
        # Lazy: the first handler that recognises the clause applies it; later ones never run.
        done = next((d for d in (h(plan, text) for h in HANDLERS) if d is not None), None)
        notes.append(done if done is not None else f"noted, not mapped: \u201c{one_line(clause)}\u201d")
    return notes


def edit_plan(plan: Plan, instruction: str) -> Plan:
    if not instruction.strip():
        raise EngineError("empty instruction: nothing to change")
    if not plan.sections:
        raise EngineError("the plan has no slides (no '## ' sections) to edit")
    notes = apply_instruction(plan, instruction)
    plan.sync_length()
    plan.revisions.append(f"\"{one_line(instruction)}\" -> " + "; ".join(notes))
    return plan
