"""The verdict: a case's result from what is on disk, never from what the agent said.

Every host is scored by `judge()` with the rules of the skill under test (Palette's unless given, palette.py).
The item asserts on its Verdict, and the assertion hook renders a failed Verdict the same way in a user's own
Python test (`assert verdict == PASSED`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from ..cases import DEFAULT_MAX_POLLS, Case, Expect, item_name
from ..results.checks import (
    CALLS,
    COMMON_CHECKS,
    NEAR_MISS,
    NO_CALL,
    RULES,
    CheckSpec,
    Outcome,
    calls_made,
    merged,
    score,
)
from ..results.record import GATE, Check
from ..rules import Failure, Finding, Note, Passed, SkillRules, Ungraded
from .evidence import Evidence
from .palette import PALETTE, PALETTE_RULES, CallFacts


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """A case's result on one host: passed when no rule failed, with every fact the rules read, so that a
    record of it needs to apply no rule again."""

    case: str
    host: str
    failures: tuple[str, ...]
    slides: int
    polls: int
    commands: tuple[str, ...]
    pptx: str | None = None
    has_plex: bool = False
    notes: tuple[str, ...] = field(default=())
    #: The case's own poll ceiling, which `spins` was judged against.
    max_polls: int = DEFAULT_MAX_POLLS
    context_expected: bool = False
    #: A call passed the pasted material by --context or --source.
    context_reached: bool = False
    edit_expected: bool = False
    edit_called: bool = False
    #: The plan was drafted again after the first edit: the approved revision was discarded.
    replanned_after_edit: bool = False
    #: Polls that did not wait for the work: answered "still running" without holding, or asked again about
    #: work already collected. Counted from what each call was, so the same agent counts the same on any machine.
    spins: int = 0
    #: Where the calls were read: "trace" (the skill's), "host" (our record of the commands), "" (no call).
    calls_from: str = "trace"
    #: Whether the case needed the skill (`expect.skill`), and whether it was used: any call of it. A trigger is a
    #: call of the skill's script; loading its instructions alone leaves nothing the judge can read on every host.
    skill_expected: bool = True
    skill_used: bool = False
    #: Beside each failure, the calls that broke its rule (indexes into the evidence's calls): the page of a
    #: failed item shows the command beside the words. Empty where the failure is what was not done.
    blame: tuple[tuple[int, ...], ...] = field(default=(), compare=False)
    #: The skill whose rules judged the case (`pytest_palette_add_rules`).
    rules: str = PALETTE
    #: Every check the rules made of the case, with its role and weight (results/checks.py).
    checks: tuple[Check, ...] = field(default=(), compare=False)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def score(self) -> float:
        """The run's score in [0, 1] from its checks: 0 when a gate failed (docs/judge.md, "Checks")."""
        return score(self.checks) if self.checks or self.ok else 0.0

    def __eq__(self, other: object) -> bool:
        # `assert verdict == PASSED` reads like what it asks, and lets pytest_assertrepr_compare explain it.
        if other is PASSED:
            return self.ok
        if isinstance(other, Verdict):
            return (self.case, self.host, self.failures) == (other.case, other.host, other.failures)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.case, self.host, self.failures))


class _Passed:
    """The verdict a passing case equals."""

    def __repr__(self) -> str:
        return "PASSED"


PASSED = _Passed()


def judge(case: Case, evidence: Evidence, host: str = "", rules: SkillRules | None = None,
          skill: str = PALETTE) -> Verdict:
    """Apply the rules of `skill` (Palette's unless given) and return every failure in words, with the facts of
    the calls beside them. A near miss (`expect.skill` false) is judged by `near_miss` alone, for any skill."""
    facts = CallFacts.of(evidence)
    rules = rules or PALETTE_RULES
    # A call the evidence cannot read could have been anything, a build before the approval among them: the item
    # cannot pass on it, whatever the rules find in the calls it can read.
    unread = [Failure(words, (), CALLS) for words in evidence.doubts]
    findings = [*unread, *(near_miss(case, evidence) if not case.expect.skill else rules.judge(case, evidence))]
    expect = case.expect
    found = assessed(findings, {**COMMON_CHECKS, **rules.checks}, expect)
    return Verdict(
        case=case.name, host=host, failures=found.failures, slides=evidence.slides, polls=facts.polls,
        commands=tuple(evidence.commands), pptx=str(evidence.pptx) if evidence.pptx else None,
        has_plex=evidence.has_plex, notes=evidence.call_notes + found.notes, max_polls=expect.max_polls,
        context_expected=expect.context, context_reached=facts.context_reached, edit_expected=expect.edit,
        edit_called=facts.first_edit is not None, replanned_after_edit=facts.replanned, spins=len(facts.spinning),
        calls_from=evidence.calls_from, skill_expected=expect.skill, skill_used=bool(evidence.calls),
        blame=found.blame, rules=skill, checks=found.checks)


@dataclass(frozen=True)
class Assessed:
    """What findings come to: the failures in words with the calls each blames, the notes, and the checks."""

    failures: tuple[str, ...]
    blame: tuple[tuple[int, ...], ...]
    notes: tuple[str, ...]
    checks: tuple[Check, ...]


def assessed(findings: Iterable[Finding], specs: Mapping[str, CheckSpec], expect: Expect) -> Assessed:
    """Findings as a verdict holds them: each failure in words (a plain string is one that blames no call), each
    check merged from its findings with the case's weights and gates (`specs`: the checks the rules declare)."""
    failures: list[str] = []
    blame: list[tuple[int, ...]] = []
    notes: list[str] = []
    found: dict[str, list[Outcome]] = {}
    for finding in findings:
        if isinstance(finding, Note):
            notes.append(finding.words)
        elif isinstance(finding, Passed):
            found.setdefault(finding.check, []).append(
                Outcome(True, finding.credit, finding.share, finding.words, finding.expected, finding.observed))
        elif isinstance(finding, Ungraded):
            found.setdefault(finding.check, []).append(Outcome(None, 0.0, None, finding.words))
        elif isinstance(finding, Failure):
            failures.append(finding.words)
            blame.append(finding.calls)
            found.setdefault(finding.check or RULES, []).append(
                Outcome(False, finding.credit, finding.share, finding.words, finding.expected, finding.observed))
        else:
            failures.append(str(finding))
            blame.append(())
            found.setdefault(RULES, []).append(Outcome(False, 0.0, None, str(finding)))
    checks = tuple(merged(name, outcomes, specs.get(name), dict(expect.weights), expect.gates)
                   for name, outcomes in found.items())
    return Assessed(tuple(failures), tuple(blame), tuple(notes), checks)


def with_findings(verdict: Verdict, findings: Iterable[Finding], specs: Mapping[str, CheckSpec],
                  expect: Expect) -> Verdict:
    """The verdict with more findings (the model-graded checks, run/grading.py) judged into it as the rules' are."""
    found = assessed(findings, specs, expect)
    return replace(verdict, failures=verdict.failures + found.failures, blame=verdict.blame + found.blame,
                   notes=verdict.notes + found.notes, checks=verdict.checks + found.checks)


def near_miss(case: Case, evidence: Evidence) -> Iterator[Finding]:
    """A case whose request needs no skill (`expect.skill` false): any call of the skill fails it, with the blame
    on the first; no call passes. Nothing else is judged — with no call there is nothing to judge."""
    commands = evidence.commands
    if commands:
        yield Failure(f"the skill was used although the request needed none: {' → '.join(commands)}", (0,), NEAR_MISS,
                      expected=NO_CALL, observed=calls_made(len(commands)))
        return
    yield Passed(NEAR_MISS, expected=NO_CALL, observed=NO_CALL)
    if evidence.decks:  # not a failure (the skill was not the one to make it), but worth a look
        yield Note(f"a .pptx was left in the workspace without a call of the skill: {evidence.decks[0].name}")


def explain(verdict: Verdict) -> list[str]:
    """A failed verdict in lines: what failed, then the call chain that shows why."""
    lines = [f"palette case {item_name(verdict.case, verdict.host)} failed:"] if verdict.host else \
        [f"palette case {verdict.case} failed:"]
    lines += [f"  ↳ {failure}" for failure in verdict.failures]
    failed = [check for check in verdict.checks if check.passed is False]
    gates = [check.name for check in failed if check.role == GATE]
    if gates:
        lines.append(f"  score: 0 — the {' and '.join(gates)} gate{'s' if len(gates) > 1 else ''} failed")
    elif failed:
        lines.append(f"  score: {verdict.score:.2f} — failed: {', '.join(check.name for check in failed)}")
    deck = f"{verdict.slides} slides, IBM Plex={verdict.has_plex}, {verdict.pptx}" if verdict.pptx else "none"
    lines.append(f"  deck: {deck}")
    calls = " → ".join(verdict.commands) if verdict.commands else "(none — the skill was never driven)"
    lines.append(f"  calls: {calls}")
    lines += [f"  note: {note}" for note in verdict.notes]
    return lines
