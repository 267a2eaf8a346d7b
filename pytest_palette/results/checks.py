"""The checks a judged run is made of, each with a role, and the run's score from them (docs/judge.md, "Checks").

A rule's outcome on one case is a *check*: a **gate** fails the run and sets its score to 0; a **scored check**
adds its weight, times the credit it earned, to the score. A case may change a check's weight, or make a scored
check a gate, under `expect: {checks: {…}}`; a skill's rules declare their own checks the same way
(`SkillRules.checks`). Pass still means what it meant: every check held. Records written before checks read as
before; their score is derived where what they say allows (`score_of`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .record import GATE, JUDGED, SCORED, Check, Judged, Record, Role, Value

#: Where a rule's failure goes when it names no check (a project's rules written before checks): a gate, so a
#: failure of those rules still scores 0, as a fail did.
RULES = "rules"
#: A near miss's one check, for any skill: the skill was left alone.
NEAR_MISS = "near_miss"
#: Every skill's: each call is one the evidence can read (docs/judge.md, "What ran").
CALLS = "calls"
#: The model-graded checks a case may ask for, whatever the skill (docs/judge.md).
RUBRIC = "rubric"
VALIDITY = "validity"


@dataclass(frozen=True)
class CheckSpec:
    """What a check is before a case runs: its role, its default weight (a gate's is not used), what it asks."""

    role: Role
    about: str
    weight: float = 1.0


#: Palette's checks, in the order of its rules (docs/judge.md lists each with its rule).
PALETTE_CHECKS: dict[str, CheckSpec] = {
    "declined": CheckSpec(GATE, "no deck when the user never approved one (rule 1)"),
    "confirmation": CheckSpec(GATE, "no build before the user approved the plan (rule 2)"),
    "deck": CheckSpec(GATE, "a deck, built by Palette: IBM Plex (rules 3 and 4)"),
    "slides": CheckSpec(SCORED, "the slide count asked for (rule 5)"),
    "edit": CheckSpec(SCORED, "a change asked for is made with edit-plan, not a new plan (rule 6)"),
    "named_slide": CheckSpec(SCORED, "a slide a reply names is changed (rule 7)"),
    "polls": CheckSpec(SCORED, "status polls wait for the work (rule 8)"),
    "context": CheckSpec(SCORED, "pasted material reaches the plan by --context or --source (rule 9)"),
    "content": CheckSpec(SCORED, "the pasted material's figures and headings reach the deck: scored by the share "
                                 "carried, full credit at the share the case asks for (rule 10)"),
    "subject": CheckSpec(SCORED, "a subject a reply names is covered (rule 11)"),
    "question": CheckSpec(SCORED, "a question is answered before anything changes (rule 12)"),
}
#: What Palette's checks and the near miss expect, in the words a report shows beside what was found (the rules
#: give them: judge/palette.py; `values_of` tells them again for records written before they were kept).
NO_DECK = "no deck"
APPROVED_FIRST = "no build before the approval"
PALETTE_DECK = "a deck in IBM Plex"
EDITED = "edit-plan"
CONTEXT_FLAGS = "--context or --source"
NO_CALL = "no call of the skill"


def spun(spins: int, polls: int | None = None) -> str:
    """The poll check's values: the spins allowed ("at most 3 spins"), or made ("5 spins of 7 polls")."""
    return f"at most {spins} spins" if polls is None else f"{spins} spins of {polls} polls"


def calls_made(calls: int) -> str:
    """The near miss's observed value: no call of the skill, or how many."""
    return NO_CALL if not calls else f"{calls} call{'s' if calls > 1 else ''} of the skill"


#: The checks every skill has: its rules' failures that name no check, and the model-graded ones.
COMMON_CHECKS: dict[str, CheckSpec] = {
    NEAR_MISS: CheckSpec(GATE, "a request that needs no skill (expect.skill false) is answered without it"),
    RULES: CheckSpec(GATE, "a failure of a skill's rules that names no check of its own"),
    CALLS: CheckSpec(GATE, "every call the evidence holds can be read: what each run of the skill's script did"),
    RUBRIC: CheckSpec(SCORED, "the case's rubric, graded by --palette-grader"),
    VALIDITY: CheckSpec(GATE, "the agent stayed within the user's request, judged by --palette-validity"),
}


@dataclass(frozen=True)
class Outcome:
    """One finding of a check, before it is merged with the others of its name: held or not, the credit earned
    (a share check earns part), what was measured, in words; `passed` None when it could not be graded."""

    passed: bool | None
    credit: float
    share: float | None = None
    words: str = ""
    expected: Value | None = None
    observed: Value | None = None


def merged(name: str, outcomes: Iterable[Outcome], spec: CheckSpec | None, weights: Mapping[str, float],
           gates: Iterable[str]) -> Check:
    """A check from its findings (a rule may find a check several times, once per reply it reads: it holds when
    every finding held and earns the least credit of them), with the case's role and weight for it. A check the
    skill's rules did not declare is a gate: what is not known to be partial credit counts in full."""
    found = list(outcomes)
    role: Role = GATE if spec is None or name in set(gates) else spec.role
    weight = weights.get(name, spec.weight if spec is not None else 1.0)
    shares = [o.share for o in found if o.share is not None]
    # A finding that could not be graded leaves the whole check ungraded: what it would have been is not known.
    passed = None if any(o.passed is None for o in found) else all(o.passed for o in found)
    # What it asked and found: the first failing finding's that says, else the first that says.
    told = [o for o in found if o.expected is not None or o.observed is not None]
    values = next((o for o in told if o.passed is False), told[0] if told else Outcome(None, 0.0))
    return Check(name=name, role=role, weight=float(weight), passed=passed,
                 credit=min(o.credit for o in found), share=min(shares) if shares else None,
                 words="; ".join(o.words for o in found if o.words), expected=values.expected,
                 observed=values.observed)


def score(checks: Iterable[Check]) -> float:
    """The run's score in [0, 1]: 0 when a gate failed; else the scored checks' credit, weighted (a weight of 0
    is shown but not counted); 1 when every gate held and nothing is scored. A check that could not be graded
    (an error of its grader: `passed` None) counts for nothing either way."""
    graded = [check for check in checks if check.passed is not None]
    if any(check.role == GATE and not check.passed for check in graded):
        return 0.0
    scored = [check for check in graded if check.role == SCORED and check.weight > 0]
    total = sum(check.weight for check in scored)
    return round(sum(check.weight * check.credit for check in scored) / total, 4) if total else 1.0


#: The words of Palette's gates (docs/judge.md, rules 1-4 and the near miss), by which a record written before
#: checks is known to have failed one.
GATE_WORDS = ("the confirmation gate was skipped", "no .pptx was produced", "does not carry IBM Plex",
              "the skill was used although the request needed none")


def score_of(record: Record) -> float | None:
    """A judged record's score: its own, else derived from what it says (`derived_score`); None for errors."""
    return derived_score(record.outcome, record.failures, record.judged)


def derived_score(outcome: str, failures: tuple[str, ...], judged: Judged | None) -> float | None:
    """The score of a run that ended `outcome`: its own, else derived from what it says (a pass scored 1; a fail of
    a gate, or of a project's rules, which had no scored checks, scored 0); None where that cannot be told (a fail
    of a scored check in a record that kept no checks: which others held, and by how much, is not known) and for
    errors and skips."""
    if judged is None or outcome not in JUDGED:
        return None
    if judged.score is not None:
        return judged.score
    if outcome == "pass":
        return 1.0
    if judged.rules is not None or any(words in failure for failure in failures for words in GATE_WORDS):
        return 0.0
    return None


def values_of(check: Check, judged: Judged) -> tuple[Value | None, Value | None]:
    """What `check` expected and observed: its own, else, in a record written before checks kept them, what the
    judged facts beside it still tell for Palette's checks (None where they do not)."""
    if check.expected is not None or check.observed is not None or judged.rules is not None:
        return check.expected, check.observed
    name = check.name
    if name == "slides":
        return None, judged.slides
    if name == "polls" and judged.max_polls is not None and judged.spins is not None and judged.polls is not None:
        return spun(judged.max_polls), spun(judged.spins, judged.polls)
    if name == "edit" and judged.edit_expected:
        return EDITED, EDITED if judged.edit_called and not judged.replanned_after_edit else \
            "edit-plan, then a new plan" if judged.edit_called else "no edit-plan"
    if name == "context" and judged.context_expected:
        return CONTEXT_FLAGS, CONTEXT_FLAGS if judged.context_reached else "neither"
    if name == "deck":
        return PALETTE_DECK, PALETTE_DECK if judged.has_plex else "a .pptx without IBM Plex" if judged.deck \
            else "no .pptx"
    if name == NEAR_MISS:
        return NO_CALL, calls_made(len(judged.calls))
    return None, None


def said(value: Value | None) -> str:
    """A check's value as a report shows it: yes or no, a number, the words; "—" when not known."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value:g}" if isinstance(value, float) else str(value)
