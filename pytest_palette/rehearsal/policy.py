"""The rehearsal model's policy: what a careful agent does next, given the conversation so far.

It is a scripted, deterministic stand-in for a language model, so that every host can run end to
end with no network. It follows the skill the way a good agent would: it answers a request that asks for
no deck in words (a question about slides) and leaves the skill alone; for a deck, it loads the skill, looks
before it acts, plans with the user's words verbatim and pasted material in --context, asks for
approval (reading the plan from its file when the host cut deck.py's answer), classifies each reply, edits
rather than re-plans, holds rather than spins, builds only after approval and reports the absolute path.
Offered no skill for decks (the baseline), it does what a capable model does without one: an outline, the
user's approval, a deck it writes itself. It decides from the conversation alone — the user's messages and the
tool results — never from knowledge of a benchmark case.

Written once, apart from any message format: adapters serve it to LangChain in-process and, over
HTTP, to other clients.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from ..arena.command_log import without_heredocs
from ..engine import counting
from ..replies import ReplyKind, classify_reply
from . import outline
from .conversation import Action, Conversation, Event, LoadSkill, Reply, RunCommand

#: Printed wherever a model name is printed: this is not a language model.
MODEL_NAME = "rehearsal"

PLAN_FILE = "plan.md"
DECK_DIR = "./deck"
#: Pasted material longer than this goes to deck.py in a file, not in --context: one argument of a command
#: may hold at most 128 KiB on Linux.
CONTEXT_ARGUMENT_LIMIT = 100_000
PASTED_FILE = "pasted-material.md"
#: A careful agent gives up on a turn long before any host's step budget would stop it.
MAX_POLLS_PER_TURN = 20

_DECK_WORDS = re.compile(r"\b(deck|slides?|presentation|pptx|powerpoint|pitch|talk|readout|briefing)\b", re.I)
_SCRIPT = re.compile(r"(python3?\s+\S*deck\.py)")
# Claude Code hands a skill over as "Base directory for this skill: <abs path>" and its SKILL.md.
_BASE_DIRECTORY = re.compile(r"Base directory for this skill:[ \t]*(\S[^\n]*?)[ \t]*$", re.M)
_UNDER_SKILLS = re.compile(r"^(?:\./)?skills/[^/\s]+/")

# -- whether a message asks for a deck (`asks_for_deck`) --------------------------------------------------------
#: A slide count in words or digits, as the reference engine reads it ("six", "a dozen", "half a dozen").
_COUNT = counting.NUMBER
#: A word that names what Palette makes; "slide 3" names a slide of a deck that exists, not one to build.
_DECK_NOUN = re.compile(r"(?:decks?|slides?|presentations?|slideshows?|pptx|powerpoint|talk|readout|briefing|"
                        r"[a-z\d]+-slides?)$")
#: Things made to be shown that are a deck only when the sentence names who will see them: "a pitch for investors",
#: "a walk-through for the sales kickoff" — not "a walkthrough of this function".
_SHOWN_NOUN = re.compile(r"(?:pitch|pitches|walk-?throughs?)$")
#: A deck word that is unambiguously a noun, so a sentence may start with it ("slides for Monday's review").
_PLAIN_NOUN = re.compile(r"(?:decks?|slides?|presentations?|slideshows?|pptx|powerpoint|[a-z\d]+-slides?)$")
#: A count whose "of" does not lead to something else: "a couple of slides", but not "a couple of the slides".
_QUANTITY = frozenset(("couple", "handful", "few", "dozen", "pair"))
_DETERMINERS = frozenset(("the", "my", "our", "your", "their", "these", "those", "them", "this", "its"))
#: What may stand between a build verb and the deck it asks for ("a short 4-slide"): anything but a preposition,
#: a conjunction or another thing to make — "draft an email about the presentation" asks for an email.
_BLOCKS = frozenset((
    "to", "for", "from", "about", "on", "of", "in", "into", "with", "at", "by", "as", "and", "or", "but", "that",
    "this", "these", "those", "which", "if", "than", "when", "while", "so", "because", "it", "its",
    "email", "mail", "message", "note", "notes", "sentence", "title", "titles", "paragraph", "summary", "list", "tip",
    "tips", "font", "fonts", "question", "questions", "answer", "word", "words", "joke", "poem", "script", "invite",
    "invitation", "reply", "comment", "feedback", "bullet", "bullets", "point", "points", "table", "chart", "image",
    "picture", "photo", "colour", "color", "colours", "colors", "idea", "ideas"))
#: What a deck word at the start of a sentence is followed by when the sentence names the deck it wants:
#: "talk for the team offsite", "slides on our pricing" — not "slides are hard to read".
_AFTER_FRAGMENT = frozenset(("for", "on", "about", "covering", "explaining", "introducing", "summarising",
                             "summarizing", "please"))
#: A sentence that reports rather than asks: "my talk on Friday went well".
_STATEMENT = re.compile(r"\b(?:is|are|was|were|went|been|gave|had|did|ran|felt|seemed|looked|got)\b", re.I)
_BUILD_VERB = re.compile(r"\b(?:build|make|create|put\s+together|draft|prepare|need|want|produce|generate|design|"
                         r"do|whip\s+up|(?:would|'d|’d)\s+like)\b", re.I)
#: Asking for "something" made: "put something together", "need something", "get something ready".
_SOMETHING = re.compile(r"\b(?:build|make|create|put|pull|throw|knock|whip|draft|prepare|need|want|produce|"
                        r"design|get|do|(?:would|'d|’d)\s+like)\s+(?:me\s+|us\s+)?(?:something|anything)\b", re.I)
_TURN_INTO = re.compile(r"\bturn\b.*?\binto\b", re.I)
#: "Just two slides on …", "A short deck about …", "Another deck": a deck named as the whole request.
_NAMED = re.compile(rf"^(?:(?:just|only)\s+)?(?:a|an|one|another|some|{_COUNT}|{_COUNT}-slide)\b", re.I)
#: People a deck is shown to: "the board", "the sales team", "our new hires".
_PEOPLE = (r"(?:team|leadership|board|execs?|executives|investors|customers|clients|company|staff|department|org|"
           r"organi[sz]ation|students|class|committee|council|managers|stakeholders|partners|leaders|directors|hires|"
           r"starters|joiners|newcomers|recruits|interns|trainees|volunteers|donors|attendees|audience|engineers|"
           r"developers|parents)")
#: Occasions a deck is shown at: "Thursday's offsite", "the sales kickoff".
_OCCASION = r"(?:all-hands|meeting|offsite|review|kickoff|town\s+hall|conference|workshop)"
#: Who a deck is shown to, or the occasion it is shown at.
_AUDIENCE = rf"(?:{_PEOPLE}|{_OCCASION})"

# -- a request whose purpose is to present something to people (`_purpose`) ----------------------------------------
# A small grammar: how a request begins (an imperative, the user's need), a presenting verb, its audience, and
# optionally the subject and the occasion, in the orders English puts them — "walk the board through the quarter
# on Monday", "brief the execs on Q3 at Thursday's offsite", "I need to present our roadmap to investors on
# Friday". A question ("how should I present the quarter to the board?") is skipped before it is read, a report
# ("I walked the board through it") does not begin as a request does, and the audience is people: "walk me
# through …" and "brief me on …" ask the agent to explain, "walk the dog" shows nobody anything.
#: What may come before the audience: "the", "our", "all of the".
_DETERMINER = r"(?:the|our|my|your|their|all(?:\s+of)?(?:\s+(?:the|our|my))?|both|some\s+of\s+(?:the|our))"
#: A word that describes the audience after a determiner ("the sales team", "Thursday's offsite") — never a
#: pronoun, a preposition, a conjunction or another determiner: "walk me through the board's numbers" names no
#: audience, nor "pitch in to help the team".
_MODIFIER = (r"(?!(?:me|us|you|him|her|them|it|myself|through|on|about|over|to|at|for|with|in|and|or|the|a|an|our|my|"
             r"your|their|this|that|these|those|some|all|every)\b)[\w'’&-]+")
#: A word that describes the audience with no determiner: "new hires", "potential investors" — a closed set, for
#: "explain the plan to hire engineers" has an infinitive there.
_DESCRIBES = r"(?:new|potential|prospective|senior|junior|key|existing|current|incoming|future|visiting)"
#: The audience: people, described by a few words. "The team's calendar" is the team's, not shown to it.
_WHO = (rf"(?:{_DETERMINER}\s+(?:{_MODIFIER}\s+){{0,2}}?|(?:{_DESCRIBES}\s+)?)"
        rf"(?:{_PEOPLE}|everyone|everybody|members|room)\b(?!['’]s)")
#: The occasion: "the sales kickoff", "Thursday's offsite".
_WHERE = rf"(?:{_DETERMINER}\s+|[\w-]+['’]s\s+)(?:{_MODIFIER}\s+){{0,2}}?{_OCCASION}\b"
#: The subject, before the audience: "our roadmap", "the new pricing" — a few words of one clause, none of them
#: the user ("show me the numbers for …") or a question word ("explain how to onboard interns").
_WHAT = r"(?:(?!(?:me|us|myself|yourself|ourselves|how|what|why|when|where|whether|which|who)\b)[^\s,.;:!?]+\s+){0,6}?"
_DAY = r"(?:mon|tues|wednes|thurs|fri|satur|sun)day"
#: The presenting verb and its audience, in each order English puts them.
_PRESENTS = (
    # the audience taken through the subject: "walk the board through the quarter", "take the team through …"
    rf"(?:walk|take|talk|run)\s+{_WHO}\s+through\b|"
    # the audience told about it: "brief the execs on Q3", "update the board at Monday's meeting", "pitch
    # investors on our seed round" — not "update the team page"
    rf"(?:brief|update|pitch(?!\s+in\b))\s+{_WHO}"
    rf"(?=\s+(?:on|about|at|before|ahead|during|in|next|this|tomorrow|today|tonight|{_DAY})\b|\s*(?:[,.!?;:—–]|$))|"
    # the subject shown to them, or at the occasion: "present our roadmap to investors", "pitch the redesign to the
    # execs", "present the new pricing at the sales kickoff" — not "the present value of …" (finance)
    r"(?:present(?!\s+(?:value|values|tense|day|moment|worth|participle|perfect|simple|continuous)\b)|"
    rf"pitch(?!\s+in\b)|introduce|explain|show|demo)\s+{_WHAT}(?:(?:to|in\s+front\s+of)\s+{_WHO}|at\s+{_WHERE})|"
    # the subject gone through with them: "walk through the budget with the board"
    rf"(?:walk|go)\s+(?:through|over)\s+{_WHAT}with\s+{_WHO}")
#: The user's need to present, which asks for what to present with unless the message asks something else:
#: "I need to …", "we have to …", "I've got to …", "I'd like to …", "we'll need to …".
_NEED = (r"(?:(?:i|we)\b(?:['’]ll|['’]ve|\s+will|\s+really|\s+still|\s+also|\s+just)*)?\s*"
         r"(?:(?:['’]d|\s*would)\s+like\s+to|(?:need|have|got|want)\s+to|must)\s+")
#: A request to present, at the start of a clause: an imperative ("walk …", "please brief …", "help me pitch …",
#: after "can you …" is read off) or a need ("I need to present …", "we have to get ready to take …").
_PURPOSE = re.compile(rf"(?:(?:and|then|also|just|now|first|please|so)\s+)*(?P<need>{_NEED})?"
                      rf"(?:help\s+(?:me|us)\s+(?:to\s+)?)?(?:(?:get|be)\s+ready\s+to\s+|prepare\s+to\s+)?"
                      rf"(?:{_PRESENTS})", re.I)
#: Presenting in writing is a message, not a deck: "brief the team on the outage in Slack".
_WRITTEN = re.compile(r"\b(?:e-?mails?|mail|messages?|memos?|notes?|slack|chat|texts?|letters?|posts?|newsletters?|"
                      r"channels?|threads?|dms?|writing|wiki|page|ticket)\b", re.I)
#: What a message with a need to present asks instead of something to present with: "I need to present to
#: investors on Friday — give me three tips".
_ADVICE = re.compile(r"\b(?:tips?|advice|pointers|suggestions?)\b", re.I)
#: Presenting, now or soon, to people named: "I'm talking to the board on Friday", "to show the new hires".
#: Only present forms: "I talked to the board" reports what was done.
_PRESENTING = re.compile(
    r"\b(?:present|presenting|talk|talking|speak|speaking|show|showing|pitch|pitching|brief|briefing|"
    r"address|addressing|teach|teaching|train|training|onboard|onboarding|in\s+front\s+of)\s+"
    rf"(?:to\s+|at\s+)?(?:(?:the|our|my|all|all\s+the|some|a\s+room\s+of)\s+)?(?:[\w-]+\s+){{0,2}}?{_AUDIENCE}\b",
    re.I)
#: A sentence that names who will see what it asks for, or the occasion: "for the sales kickoff", "for investors".
_SHOWN_TO = re.compile(rf"\b(?:to|at|for|with)\s+(?:(?:the|our|my|all|some)\s+)?(?:[\w-]+\s+){{0,2}}?{_AUDIENCE}\b",
                       re.I)
#: "Can you …", "Please …", "Could I get …": a request phrased politely is still a request.
_POLITE = re.compile(r"^(?:(?:please|kindly|hey|hi|ok(?:ay)?|so|now)[,!]?\s+)*(?:(?:can|could|would|will)\s+you\s+|"
                     r"(?:can|could|may)\s+(?:i|we)\s+(?:get|have)\s+)?(?:please\s+)?", re.I)
_QUESTION = re.compile(r"^(?:how|what|what's|which|why|when|where|who|whose|is|are|am|was|were|do|does|did|should|"
                       r"shall|can|could|would|will|may|might|must|have|has|any)\b", re.I)
_QUOTED = re.compile(r'"[^"\n]*"|“[^”\n]*”')
#: The start of a plan answer that the host clipped (a long document makes a long plan): deck.py says it is done
#: and where the plan is, before the text that did not fit. The host may say something first (Claude Code: "Output
#: too large … Preview (first 2KB):").
_CLIPPED_DONE = re.compile(r'\{\s*"state":\s*"done",\s*"done":\s*true,\s*"plan":\s*"((?:[^"\\]|\\.)+)"')
_PLAN_STEPS = frozenset({"plan", "edit", "plan-status"})


@dataclass(frozen=True)
class Step:
    """A deck.py call the agent made in the current turn, with its parsed JSON answer."""

    subcommand: str
    command: str
    answer: dict[str, Any]
    #: The answer was clipped by the host after deck.py said the plan was done: the plan is in this file. The
    #: answer is filled from the file once the agent has read it.
    clipped_plan: str | None = None


def parse_answer(text: str) -> dict[str, Any]:
    """The JSON object a deck.py call printed, or {} when the output is not one (a shell error)."""
    start = text.find("{")
    end = text.rfind("}")
    if start < 0 or end <= start:
        return {}
    try:
        value = json.loads(text[start:end + 1])
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def clipped_plan(text: str) -> str | None:
    """The plan file a clipped plan answer names: deck.py said "done" before the host cut its text; else None."""
    match = _CLIPPED_DONE.search(text)
    if match is None:
        return None
    try:
        return str(json.loads(f'"{match.group(1)}"'))
    except json.JSONDecodeError:
        return None


def split_opening(message: str) -> tuple[str, str]:
    """Separate the user's request from material pasted under it (a blank line apart)."""
    text = message.strip()
    head, sep, rest = text.partition("\n\n")
    if sep and rest.strip() and head.count("\n") < 3:
        return head.strip(), rest.strip()
    if text.count("\n") >= 8:
        # No request line of its own: the first line is the request, the rest the material.
        first, _, rest = text.partition("\n")
        return first.strip(), rest.strip()
    return text, ""


def asks_for_deck(message: str) -> bool:
    """Whether a message asks for a deck to be made — a build verb with a deck as its object ("build a 5-slide
    deck", "turn my notes into a deck", "prepare a pitch for investors"), a deck named as the whole request ("just
    two slides on …", "talk for the team offsite"), a request whose purpose is to present something to people
    (`_purpose`: "walk the board through the quarter on Monday", "help me explain our plan to the leadership team",
    "I need to present our roadmap to investors on Friday"), or something made for a talk the user gives ("I'm
    talking to the board on Friday, can you put something together?") — rather than a question about decks or
    presenting, a report, or some other task ("how many slides does a 10-minute talk need?", "how should I present
    the quarter to the board?", "I walked the board through it yesterday", "fix this sentence from slide 3"). Read
    from the request only: pasted material and quoted text can say anything."""
    request, _ = split_opening(message)
    text = _QUOTED.sub(" ", request)
    presenting = _PRESENTING.search(text) is not None
    needs = asks = False
    for sentence in re.findall(r"[^.!?;:\n—–]+[.!?;:\n—–]?", text):
        words = sentence.strip()
        polite = _POLITE.match(words)
        rest = words[polite.end():] if polite else words
        if not (polite and polite.group(0)) and _QUESTION.match(rest):
            asks = True
            continue  # a question about decks is answered, not built
        purpose = _purpose(rest)
        if purpose == "request":
            return True
        needs = needs or purpose == "need"
        shown = _SHOWN_TO.search(rest) is not None
        if (_NAMED.match(rest) and _object_is_deck(rest, shown)) or _names_deck(rest, shown):
            return True
        into = _TURN_INTO.search(rest)
        if into and _object_is_deck(rest[into.end():], shown):
            return True
        if any(_object_is_deck(rest[verb.end():], shown) for verb in _BUILD_VERB.finditer(rest)):
            return True
        if presenting and _SOMETHING.search(rest):
            return True  # "something" to make, for the talk the request says the user gives
    # "I need to present our roadmap to investors on Friday" asks for what to present with — unless the message asks
    # something else of it: "…; how long should it be?", "… — give me three tips".
    return needs and not asks and not _ADVICE.search(text)


def _purpose(sentence: str) -> str | None:
    """Whether a sentence, or a clause of it, is a request to present something to people (`_PURPOSE`): "request"
    for an imperative ("walk the board through the quarter on Monday", "can you help me brief the execs …"),
    "need" for the user's need ("I need to present our roadmap to investors on Friday"), else None — and None
    for presenting in writing ("brief the team on the outage in Slack")."""
    for clause in re.split(r"\s*[,(]\s*", sentence):
        match = _PURPOSE.match(clause)
        if match and not _WRITTEN.search(clause):
            return "need" if match.group("need") else "request"
    return None


def _is_deck(word: str, shown: bool) -> bool:
    return bool(_DECK_NOUN.match(word) or (shown and _SHOWN_NOUN.match(word)))


def _object_is_deck(text: str, shown: bool = False, reach: int = 5) -> bool:
    """Whether a deck word comes within `reach` words at the start of `text`, with nothing that blocks between.
    `shown`: the sentence names who sees it, so a pitch or a walk-through is a deck too."""
    words = re.findall(r"[\w'’-]+", text.lower())
    for index, word in enumerate(words[:reach]):
        if _is_deck(word, shown):
            # "slide 3" names a slide that exists.
            return not (word.startswith("slide") and index + 1 < len(words) and words[index + 1].isdigit())
        # "a couple of slides" is a count of them; "a couple of the slides" names slides that exist.
        following = words[index + 1] if index + 1 < len(words) else ""
        counted = word == "of" and index > 0 and words[index - 1] in _QUANTITY and following not in _DETERMINERS
        if word in _BLOCKS and not (counted and following):
            return False
    return False


def _names_deck(sentence: str, shown: bool, reach: int = 4) -> bool:
    """Whether a sentence is a deck named with no verb: "talk for the team offsite", "slides on our pricing,
    please" — a deck word near its start, then what it is for or about. A sentence that reports ("my talk on
    Friday went well") names a deck that exists."""
    if _STATEMENT.search(sentence):
        return False
    tokens = list(re.finditer(r"[\w'’-]+", sentence.lower()))
    for index, token in enumerate(tokens[:reach]):
        word = token.group(0)
        if _is_deck(word, shown) and (shown or _PLAIN_NOUN.match(word)):
            after = tokens[index + 1].group(0) if index + 1 < len(tokens) else ""
            between = sentence[token.end():tokens[index + 1].start()] if after else ""
            return not after or after in _AFTER_FRAGMENT or bool(re.search(r"[,(]", between))
        if word in _BLOCKS or word in _AFTER_FRAGMENT:
            return False
    return False


#: What reports call each kind of scripted agent, after its name (`describe_agent`).
GOOD_AGENT = "scripted stand-in"
KNOWN_BAD_AGENT = "known-bad scripted agent"
HOSTILE_AGENT = "hostile scripted agent"


def describe_agent(agent: Callable[[], RehearsalPolicy] | None) -> str:
    """What a scripted agent is, as its label says it after its name, from what it declares
    (`RehearsalPolicy.known_bad`, `.hostile`): never a language model, whatever it does. None: an agent not
    known here, named for what is sure."""
    if agent is None:
        return "scripted agent, not a language model"
    policy = agent if isinstance(agent, type) else agent()  # a factory: what it makes declares
    kind = (HOSTILE_AGENT if getattr(policy, "hostile", False) else
            KNOWN_BAD_AGENT if getattr(policy, "known_bad", False) else GOOD_AGENT)
    return f"{kind}, not a language model"


def catalogue(system: str) -> list[tuple[str, str]]:
    """The skills a host's system prompt offers, as (name, description)."""
    entries = re.findall(r"^\s*-\s*([a-z0-9][\w-]*):\s*(.+)$", system, re.M)
    inlined = re.findall(r"--- begin (\S+) instructions ---", system)
    return entries + [(name, "") for name in inlined if name not in {n for n, _ in entries}]


class RehearsalPolicy:
    """The good agent. Known-bad variants subclass it and override one decision each."""

    name = MODEL_NAME
    #: Whether the agent makes a mistake on purpose, for the judge to catch (rehearsal/known_bad.py, a project's
    #: own): reports then name it a known-bad scripted agent. A good one — this, or a project's agent for its own
    #: skill (`pytest_palette_add_rehearsals`) — is named a scripted stand-in (`describe_agent`).
    known_bad: ClassVar[bool] = False
    #: Whether the agent attacks the harness rather than make a mistake the judge should catch
    #: (rehearsal/hostile.py): named a hostile scripted agent.
    hostile: ClassVar[bool] = False

    def next_action(self, conversation: Conversation) -> Action:
        user_text, turn = conversation.current_turn()
        if not self.engaged(conversation) and not self.wants_deck(user_text):
            return Reply(self.answer_in_words(user_text))
        skill = self.skill_text(conversation)
        if skill is None:
            return self.route(conversation, turn)
        deck = self.deck_command(skill)
        steps = self.steps(conversation, turn)
        if not any(step.subcommand == "find" for step in steps):
            return RunCommand(f"{deck} find --root .")
        return self.continue_turn(conversation, user_text, steps, deck)

    # -- reading the conversation ------------------------------------------------------------

    def wants_deck(self, user_text: str) -> bool:
        """Whether this message asks for a deck, so that the skill is the tool for it (`asks_for_deck`)."""
        return asks_for_deck(user_text)

    def engaged(self, conversation: Conversation) -> bool:
        """Whether the conversation already works on a deck: the skill was loaded or its script run — or, with no
        skill for decks (`without_skill`), an earlier message asked for one. Its replies ("yes", "make it 3
        slides") are then the deck's business, whatever they say."""
        return any(isinstance(event, LoadSkill) or (isinstance(event, RunCommand) and "deck.py" in event.command)
                   for event in conversation.events) or any(map(self.wants_deck, conversation.user_messages()[:-1]))

    def skill_text(self, conversation: Conversation) -> str | None:
        """The skill's instructions, if the agent has them: inlined, or returned by a load."""
        match = re.search(r"--- begin \S+ instructions ---\n(.*?)--- end", conversation.system, re.S)
        if match:
            return match.group(1)
        for event in conversation.events:
            if isinstance(event, LoadSkill):
                text = conversation.result_of(event.call_id)
                if text and "deck.py" in text:
                    return text
        return None

    def deck_command(self, skill: str) -> str:
        """How the skill says to run its script: the rehearsal model follows the instructions."""
        match = _SCRIPT.search(skill)
        command = match.group(1) if match else "python3 skills/palette/scripts/deck.py"
        base = _BASE_DIRECTORY.search(skill)
        interpreter, script = command.split(None, 1)
        if base and _UNDER_SKILLS.match(script):
            # The host says where the skill's folder is; `skills/<name>/` is not under the cwd there.
            script = shlex.quote(base.group(1).rstrip("/") + "/" + _UNDER_SKILLS.sub("", script))
            return f"{interpreter} {script}"
        return command

    def steps(self, conversation: Conversation, events: list[Event]) -> list[Step]:
        found: list[Step] = []
        for index, event in enumerate(events):
            if not isinstance(event, RunCommand):
                continue
            command = without_heredocs(event.command)
            if "deck.py" in command:
                tokens = command.split("deck.py", 1)[1].split()
                sub = tokens[0] if tokens else ""
                output = conversation.result_of(event.call_id) or ""
                answer = parse_answer(output)
                plan = clipped_plan(output) if sub in _PLAN_STEPS and not answer else None
                if plan is not None:
                    answer = self.plan_read_back(conversation, events[index + 1:], plan)
                found.append(Step(sub, event.command, answer, plan))
        return found

    def plan_read_back(self, conversation: Conversation, later: list[Event], plan: str) -> dict[str, Any]:
        """The answer a clipped plan answer stood for, once the agent has read the plan file; else {}."""
        for event in later:
            if isinstance(event, RunCommand) and event.command == self.read_plan(plan):
                text = conversation.result_of(event.call_id) or ""
                return {"state": "done", "done": True, "plan": plan, "text": text}
        return {}

    def read_plan(self, plan: str) -> str:
        """Read a plan whose answer did not fit: the host's limit applies to this output too, but the plan alone
        is shorter than deck.py's JSON of it, and what is cut is cut with the host's marker."""
        return f"cat {shlex.quote(plan)}"

    def route(self, conversation: Conversation, turn: list[Event]) -> Action:
        """Load the skill the request needs, once; with none for decks on offer, do without (`without_skill`)."""
        tried = [e for e in turn if isinstance(e, LoadSkill)]
        offered = catalogue(conversation.system)
        if tried:
            return Reply(f"I could not load the {tried[-1].name} skill: "
                         f"{(conversation.result_of(tried[-1].call_id) or 'no answer').strip()[:300]}")
        for name, description in offered:
            if _DECK_WORDS.search(description) or _DECK_WORDS.search(name):
                return LoadSkill(name)
        if len(offered) == 1:  # the one skill offered is the one under test, whatever its description says
            return LoadSkill(offered[0][0])
        return self.without_skill(conversation)

    def without_skill(self, conversation: Conversation) -> Action:
        """No skill for decks is offered (`--palette-skill none`, the baseline): what a capable model does on its
        own. A request for slides gets an outline; each reply is read as the skill would have it read (a change
        revises the outline, a question is answered, a decline builds nothing); an approval gets a deck it writes
        itself with python-pptx, and where it is. Any other request gets an answer in words."""
        user_text, turn = conversation.current_turn()
        current: outline.Outline | None = None
        kind: ReplyKind | None = None
        for message in conversation.user_messages():  # the outline as the user's messages left it
            if current is None:
                current = outline.drafted(*split_opening(message)) if self.wants_deck(message) else None
                kind = None
            else:
                kind = self.classify(message)
                current = outline.revised(current, message) if kind is ReplyKind.CHANGE else \
                    outline.drafted(message) if kind is ReplyKind.NEW_DECK else current
        wrote = [e for e in turn if isinstance(e, RunCommand) and outline.MARKER in e.command]
        if wrote and current is not None:
            output = conversation.result_of(wrote[-1].call_id)
            path = outline.written(output)
            return Reply(self.report(path, len(current.titles)) if path else
                         f"I could not write the deck: {(output or 'no output').strip()[-400:]}")
        if current is None:
            return Reply(self.answer_in_words(user_text))
        if kind is ReplyKind.APPROVAL:
            return RunCommand(outline.write_command(current))
        if kind is ReplyKind.QUESTION:
            return Reply(self.answer_question(user_text, current.text))
        if kind is ReplyKind.DECLINE:
            return Reply("Understood — I won't make the deck.")
        return Reply(self.present(current.text))

    def state_before(self, conversation: Conversation) -> dict[str, Any]:
        """What earlier turns left: whether a plan was shown, and its text."""
        plan_text = ""
        for step in self.steps(conversation, conversation.earlier_turns()):
            if step.subcommand in {"plan", "edit", "plan-status"} and step.answer.get("done"):
                plan_text = str(step.answer.get("text", ""))
        return {"plan_text": plan_text}

    # -- deciding ------------------------------------------------------------------------------

    def continue_turn(self, conversation: Conversation, user_text: str, steps: list[Step], deck: str) -> Action:
        last = steps[-1]
        if last.clipped_plan is not None and not last.answer:
            # The host cut the answer: deck.py said the plan is done, and where; read it there.
            return RunCommand(self.read_plan(last.clipped_plan))
        if last.subcommand == "find":
            return self.after_find(conversation, user_text, last, deck)
        if last.subcommand in {"plan", "edit", "plan-status"}:
            return self.after_plan(steps, last, deck)
        if last.subcommand in {"start", "status"}:
            return self.after_build(steps, last, deck)
        return Reply(f"deck.py answered something I did not expect: {json.dumps(last.answer)[:400]}")

    def after_find(self, conversation: Conversation, user_text: str, find: Step, deck: str) -> Action:
        builds = [f for f in find.answer.get("found", []) if f.get("kind") == "build"]
        state = builds[-1].get("state") if builds else None
        if state == "running":
            return self.poll_build(deck)
        prior = self.state_before(conversation)
        if not prior["plan_text"] and not conversation.earlier_turns():
            return self.plan(user_text, deck)
        kind = self.classify(user_text)
        if state == "done" and kind is not ReplyKind.CHANGE and kind is not ReplyKind.NEW_DECK:
            done = builds[-1]
            return Reply(self.report(str(done.get("pptx")), done.get("slide_previews")))
        if kind is ReplyKind.APPROVAL:
            if not prior["plan_text"]:
                return Reply("There is no plan to approve yet. What should the deck be about?")
            return self.build(deck)
        if kind is ReplyKind.CHANGE:
            return self.edit(user_text, deck)
        if kind is ReplyKind.QUESTION:
            return Reply(self.answer_question(user_text, prior["plan_text"]))
        if kind is ReplyKind.DECLINE:
            return Reply("Understood — I won't build the deck. The plan is saved as plan.md if you "
                         "want to pick it up later.")
        return self.plan(user_text, deck)

    def classify(self, user_text: str) -> ReplyKind:
        return classify_reply(user_text)

    def plan(self, user_text: str, deck: str) -> Action:
        request, material = split_opening(user_text)
        command = f"{deck} plan --request {shlex.quote(request)} --out {PLAN_FILE}"
        if len(material.encode()) > CONTEXT_ARGUMENT_LIMIT:
            # Too long for one argument: written to a file first (a here-document), then passed as --source.
            end = "PALETTE_PASTED_END"
            while end in material:
                end += "_"
            return RunCommand(f"cat > {PASTED_FILE} <<'{end}'\n{material}\n{end}\n{command} --source {PASTED_FILE}")
        if material:
            command += f" --context {shlex.quote(material)}"
        return RunCommand(command)

    def edit(self, user_text: str, deck: str) -> Action:
        return RunCommand(f"{deck} edit --instruction {shlex.quote(user_text.strip())} --plan {PLAN_FILE}")

    def build(self, deck: str) -> Action:
        return RunCommand(f"{deck} start --plan {PLAN_FILE} --out-dir {DECK_DIR}")

    def poll_build(self, deck: str) -> Action:
        return RunCommand(f"{deck} status --out-dir {DECK_DIR}")

    def poll_plan(self, deck: str) -> Action:
        return RunCommand(f"{deck} plan-status --out {PLAN_FILE}")

    def after_plan(self, steps: list[Step], last: Step, deck: str) -> Action:
        answer = last.answer
        if answer.get("done"):
            return Reply(self.present(str(answer.get("text", ""))))
        if answer.get("state") == "running" and self.polls(steps) < MAX_POLLS_PER_TURN:
            return self.poll_plan(deck)
        return Reply(self.relay(answer))

    def after_build(self, steps: list[Step], last: Step, deck: str) -> Action:
        answer = last.answer
        if answer.get("done") and answer.get("verified"):
            return Reply(self.report(str(answer.get("pptx")), answer.get("slide_previews")))
        running = answer.get("state") == "running" or (last.subcommand == "start" and answer.get("ok") is not False)
        if running and self.polls(steps) < MAX_POLLS_PER_TURN:
            return self.poll_build(deck)
        return Reply(self.relay(answer))

    def polls(self, steps: list[Step]) -> int:
        return sum(step.subcommand in {"status", "plan-status"} for step in steps)

    # -- what it says --------------------------------------------------------------------------

    def present(self, plan_text: str) -> str:
        return (f"Here is the plan for your deck:\n\n{plan_text.strip()}\n\n"
                "Does this look right? Reply **yes** to build the deck, or tell me what you'd like to change.")

    def report(self, pptx: str, slides: Any) -> str:
        return f"Your deck is ready: {pptx} ({slides} slides)."

    def relay(self, answer: dict[str, Any]) -> str:
        detail = answer.get("error") or answer.get("note") or answer.get("hint") or json.dumps(answer)[:400]
        tail = answer.get("log_tail")
        text = f"Palette did not finish: {detail}"
        if tail:
            text += "\n\n" + (tail if isinstance(tail, str) else "\n".join(map(str, tail)))
        return text

    def answer_in_words(self, user_text: str) -> str:
        """A request that needs no deck gets an answer in the chat, and no skill is loaded for it."""
        request, _ = split_opening(user_text)
        shown = " ".join(request.split())
        shown = shown if len(shown) <= 200 else shown[:200] + "…"
        return (f"You asked: \u201c{shown}\u201d. That needs an answer here, not a deck, so I have not used the deck "
                "skill. (The rehearsal model is a scripted stand-in: it does not compose the answer itself.)")

    def answer_question(self, question: str, plan_text: str) -> str:
        titles = re.findall(r"^##\s+(.+)$", plan_text, re.M)
        listing = "\n".join(f"{i}. {title}" for i, title in enumerate(titles, 1)) or "(the plan has no slides yet)"
        words = [w for w in re.findall(r"[a-z]{4,}", question.lower())
                 if w not in {"there", "slide", "slides", "deck", "plan", "what", "which", "does", "have", "about"}]
        missing = [w for w in words if w not in plan_text.lower()]
        note = (f"The plan has no slide about {missing[0]}; I can add one if you'd like. "
                if missing else "")
        return (f"The plan has {len(titles)} slides:\n{listing}\n\n{note}"
                "Reply **yes** to build the deck as planned, or tell me what you'd like to change.")

