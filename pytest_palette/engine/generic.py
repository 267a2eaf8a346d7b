"""Deterministic sections about a topic, for requests without material and for filler.

Templates are written in the professional voice and passed through ``tone.reword``, the
same rewording the editor applies, so a generated plan and an edited one read alike.
"""

from __future__ import annotations

from .plan_format import Section
from .tone import reword, reword_title

# (title, bullets); "{t}" is the topic as written in the request.
Template = tuple[str, tuple[str, ...]]
OPENING: Template = ("{T} at a glance", ("What {t} is, in one sentence", "Why it is worth our attention now",
                               "What we will cover in this deck"))
MIDDLE: tuple[Template, ...] = (
    ("Why {t} matters", ("The problem {t} addresses", "Who is affected and how",
                         "What happens if we do not act")),
    ("How {t} works", ("The core idea behind {t}", "The main parts and how they fit together",
                       "A simple example of {t} in practice")),
    ("Benefits of {t}", ("Time and cost savings from {t}", "Quality and reliability gains",
                         "Additional benefits for the team")),
    ("Challenges and risks", ("Where {t} can go wrong", "Risks we cannot ignore",
                              "How we will mitigate them")),
    ("Costs and trade-offs", ("What {t} costs to adopt and run", "Trade-offs against the alternatives",
                              "Where the investment pays back")),
    ("Use cases", ("Where {t} fits best today", "Examples from similar teams",
                   "Cases where {t} is not the right tool")),
    ("Measuring success", ("The metrics that show {t} is working", "Baseline and target values",
                           "How we will report progress")),
    ("Roadmap", ("First steps for {t} this quarter", "Milestones for the next two quarters",
                 "What we require to get there")),
    ("Best practices", ("Patterns that work well with {t}", "Common mistakes to avoid",
                        "Checklists the team can reuse")),
    ("Team and ownership", ("Who owns {t} day to day", "Skills the team requires",
                            "How decisions on {t} get made")),
    ("Timeline", ("Now: preparation and a pilot", "Next: rollout to the wider team",
                  "Later: review and improve {t}")),
    ("Alternatives considered", ("Options we compared with {t}", "Why {t} came out ahead",
                                 "When we would revisit the choice")),
    ("Case study", ("A team that adopted {t}", "What they changed and what it cost",
                    "Results they reported")),
    ("Frequently asked questions", ("Is {t} hard to adopt?", "What does {t} cost to run?",
                                    "How long until it pays off?")),
    ("Open questions", ("Decisions still open on {t}", "Information we still require",
                        "Who will answer each question")),
    ("Questions and discussion", ("Questions about {t}", "Concerns we have not addressed yet",
                                  "Thank you")),
    ("Appendix", ("Sources and further reading on {t}", "Glossary of {t} terms",
                  "Detailed figures behind this deck")),
)
SUMMARY: Template = ("Summary", ("{T} in one line", "The main benefits and risks", "The decision we are asking for"))
NEXT_STEPS: Template = ("Next steps", ("Agree on the scope for {t}", "Name an owner and a first milestone",
                             "Review progress in four weeks"))
TOPIC_SLIDE: Template = ("{T}", ("What {t} means for {d}", "Key facts and figures on {t}",
                       "What we recommend on {t}"))


def capitalise(text: str) -> str:
    return text[:1].upper() + text[1:]


def make_section(template: Template, topic: str, tone: str, deck: str = "") -> Section:
    values = {"t": topic, "T": capitalise(topic), "d": deck or "this deck"}
    title, bullets = template
    return Section(
        title=reword_title(capitalise(title.format(**values)), tone),
        bullets=[reword(capitalise(b.format(**values)), tone) for b in bullets],
    )


def generic_sections(topic: str, count: int, tone: str) -> list[Section]:
    """``count`` sections about ``topic``: an opening, a middle, a summary and next steps."""
    if count <= 0:
        return []
    if count == 1:
        chosen: list[Template] = [OPENING]
    elif count < 5:
        chosen = [OPENING, *MIDDLE[: count - 2], NEXT_STEPS]
    else:
        chosen = [OPENING, *MIDDLE[: count - 3], SUMMARY, NEXT_STEPS]
    return [make_section(template, topic, tone) for template in chosen]


def filler_sections(topic: str, count: int, tone: str, taken: set[str]) -> list[Section]:
    """Up to ``count`` extra sections whose titles are not in ``taken`` (lower-case)."""
    out: list[Section] = []
    for template in (SUMMARY, NEXT_STEPS, *MIDDLE):
        if len(out) >= count:
            break
        section = make_section(template, topic, tone)
        if section.title.lower() not in taken:
            taken.add(section.title.lower())
            out.append(section)
    while len(out) < count:  # only reachable past 20 titles; numbered, still deterministic
        section = make_section(("Notes on {t}", ("Further detail on {t}",)), topic, tone)
        section.title += f" ({len(out) + 1})"
        out.append(section)
    return out


def topic_section(subject: str, deck_topic: str, tone: str) -> Section:
    """A slide on one subject ("add a slide on cost")."""
    return make_section(TOPIC_SLIDE, subject, tone, deck=deck_topic)
