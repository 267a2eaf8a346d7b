"""How a user's reply to a plan reads: the skill's reply table, as rules. The case loader derives what a
case expects from them (a reply that asks for a change expects an edit), and the rehearsal model acts on them.

The order of the rules is the point. "yes, but drop the last slide" carries an approval word
and a change, and a change wins; "can it be more casual?" is phrased as a question and asks
for a change; "actually, hold off" declines even though it starts like a new request.
"""

from __future__ import annotations

import enum
import re


class ReplyKind(enum.Enum):
    APPROVAL = "approval"
    CHANGE = "change"
    QUESTION = "question"
    DECLINE = "decline"
    NEW_DECK = "new deck"


_NEW_DECK = re.compile(
    r"\b(instead|different (deck|presentation|topic)|new (deck|presentation) (on|about)|"
    r"start over (with|on)|scrap (that|this|it)\b.*\b(on|about))\b"
)
_NEW_DECK_SUBJECT = re.compile(r"\b(one|a deck|a presentation|deck|slides)\b.*\b(on|about)\b")

_DECLINE = re.compile(
    r"\b(hold off|not now|not yet|cancel|never ?mind|forget (it|about it)|don'?t build|do not build|"
    r"no thanks|no, thanks|let'?s not|skip it|stop|wait|pause|abort|leave it|let me think|think about it|"
    r"not sure yet|maybe later|later)\b"
)

# Words that ask for the plan to be different. A question that carries one asks for a change.
_CHANGE = re.compile(
    r"\b(make (it|the|this|that|them|slide)|add|drop|remove|delete|cut|trim|shorten|shorter|longer|"
    r"expand|extend|more|less|fewer|fix|rewrite|reword|change|replace|swap|move|reorder|rename|"
    r"lead with|open with|start with|end with|focus|only|split|merge|combine|include|mention|use|"
    r"tone|casual|formal|friendlier|punchier|simpler|instead of|turn (it|slide)|put)\b"
    r"|\b\d+\s*-?\s*slides?\b"
)

_QUESTION_START = re.compile(
    r"^(why|what|how|where|who|which|when|is|are|was|were|does|do|did|will|would|should|has|have)\b"
)

_APPROVAL = re.compile(
    r"\b(yes|yep|yeah|yup|sure|ok|okay|looks good|look good|looks great|lgtm|go ahead|go for it|"
    r"build it|build the deck|ship it|perfect|great|sounds good|approved?|do it|proceed|"
    r"good to go|let'?s go|that works|all good|fine|correct|nice)\b"
)

_NEGATION = re.compile(r"^(no|nope|nah)\b")


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().lower().replace("’", "'"))


def classify_reply(text: str) -> ReplyKind:
    """Classify a reply to a presented plan."""
    said = normalise(text)
    if not said:
        return ReplyKind.QUESTION
    if _NEW_DECK.search(said) and _NEW_DECK_SUBJECT.search(said):
        return ReplyKind.NEW_DECK
    wants_change = bool(_CHANGE.search(said))
    if _DECLINE.search(said) and not wants_change:
        return ReplyKind.DECLINE
    if _NEGATION.match(said) and not wants_change:
        return ReplyKind.DECLINE
    asks = said.endswith("?") or bool(_QUESTION_START.match(said))
    if wants_change:
        # "why is there no agenda slide?" asks about the plan; "can it be more formal?" asks for a change.
        if asks and _QUESTION_START.match(said) and not re.search(r"\b(more|less|fewer|shorter|longer)\b", said):
            return ReplyKind.QUESTION
        return ReplyKind.CHANGE
    if asks:
        return ReplyKind.QUESTION
    if _APPROVAL.search(said) or said in {"y", "👍", "✅"}:
        return ReplyKind.APPROVAL
    # Anything else that states something about the deck ("use our Q3 numbers") is a change.
    return ReplyKind.CHANGE


def asks_for_change(text: str) -> bool:
    """The reply asks for the plan to be changed (an edit), not for a different deck, not a question."""
    return classify_reply(text) is ReplyKind.CHANGE


#: "slide 2", "slide #3", "slide two": a reply that names one slide of the plan.
_NAMED_SLIDE = re.compile(
    r"\bslide\s+(?:#|no\.?\s*|number\s+)?(\d+|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)\b")
_NUMBER_WORDS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve")


def named_slide(text: str) -> int | None:
    """The slide (1-based) a change reply names by number, if it names exactly one."""
    found = {int(n) if n.isdigit() else _NUMBER_WORDS.index(n) + 1 for n in _NAMED_SLIDE.findall(normalise(text))}
    return found.pop() if len(found) == 1 and asks_for_change(text) else None


#: "add a slide on X", "include X", "cover X too", "it should be about X": a change that names what the deck must
#: say. Only phrasings that name a subject: "add more detail" or "include 3 slides" name none.
_NAMED_TOPIC = (
    re.compile(r"\b(?:add|insert|include|append|put in)\s+(?:a|an|one|another)?\s*(?:new\s+|extra\s+|separate\s+)?"
               r"(?:slides?|sections?|page)\s+(?:on|about|covering|for|explaining|regarding)\s+(?P<topic>.+)"),
    re.compile(r"\b(?:should|must|needs? to|ought to|has to)\s+(?:be\s+)?(?:about|on|cover)\s+(?P<topic>.+)"),
    re.compile(r"\b(?:include|mention|cover)\s+(?!(?:a|an|one|another|more|less|fewer|some|\d+)\b)(?P<topic>.+)"),
)
#: Where a named subject ends: a position, an aside, a second command, punctuation.
_TOPIC_END = re.compile(
    r"\s+(?:(?:at|to)\s+the\s+(?:end|start|beginning|front|top)|(?:after|before)\s+slide|too|as well|also|please|"
    r"and\s+(?:then|make|drop|remove|add|build|cut))\b|\s+[-\u2013\u2014]\s|[,.;:!?()\"]")
_LEADING_ARTICLE = re.compile(r"^(?:the|a|an)\s+")


def named_topic(text: str) -> str | None:
    """The subject a change reply asks the deck to cover ("add a slide on escalation paths" → "escalation
    paths"), if it names one."""
    if not asks_for_change(text):
        return None
    said = normalise(text)
    for pattern in _NAMED_TOPIC:
        match = pattern.search(said)
        if match:
            topic = _LEADING_ARTICLE.sub("", _TOPIC_END.split(match.group("topic"), maxsplit=1)[0].strip())
            if topic:
                return topic
    return None
