"""A skill's judge rules, as a project registers them, and the checks they make: the Palette rules are the first
user.

`pytest_palette_add_rules` (hookspecs.py) fills a mapping of skill name → `SkillRules`; the session judges
every case with the rules of the skill under test. A rule reads only what is on disk (`Evidence`: the
workspace, the skill's call trace, our record of the commands) and yields what failed, in words, and which
checks held.
(results/checks.py: the checks a finding names, their roles and weights, and the score).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .cases import Case, ExpectCheck
from .results.checks import CheckSpec
from .results.record import Value

if TYPE_CHECKING:
    from .judge.evidence import Evidence


@dataclass(frozen=True)
class Failure:
    """A rule that failed, in words a skill author can act on, and the calls that broke it (indexes into
    `Evidence.calls`; empty where the failure is what was not done). `check` names the check it fails (one the
    rules declare in `SkillRules.checks`; none: the "rules" gate); a share check says what was measured
    (`share`) and the part of its weight that earns (`credit`)."""

    words: str
    calls: tuple[int, ...] = ()
    check: str = ""
    credit: float = 0.0
    share: float | None = None
    #: What the check asked for and what was found (`Check.expected`, `Check.observed`), where a rule says.
    expected: Value | None = None
    observed: Value | None = None


@dataclass(frozen=True)
class Passed:
    """A check that held: it applied to the case, and the evidence met it (a share check with what it measured)."""

    check: str
    credit: float = 1.0
    share: float | None = None
    words: str = ""
    expected: Value | None = None
    observed: Value | None = None


@dataclass(frozen=True)
class Ungraded:
    """A check that could not be graded (its model grader failed, or none was given): an error of the check, in
    words — neither held nor failed, and it counts for nothing in the score."""

    check: str
    words: str


@dataclass(frozen=True)
class Note:
    """What the reader of a verdict must know that is not a failure: a rule that could not be applied."""

    words: str


#: What a rule yields: a Failure, a check that Passed (or was Ungraded), a Note, or plain words (a Failure with no
#: call to blame).
Finding = Failure | Passed | Ungraded | Note | str
#: A skill's rules: every finding about one case's evidence.
Judge = Callable[[Case, "Evidence"], Iterable[Finding]]


@dataclass(frozen=True)
class SkillRules:
    """What judges one skill: its rules, and the check of its own keys in a case's `expect:` (under the
    skill's name), None when it has none."""

    judge: Judge
    expect: ExpectCheck | None = None
    #: The checks the rules name in their findings (name → role, default weight, what it asks); a failure that
    #: names none fails the "rules" gate, and a check not declared here is a gate.
    checks: Mapping[str, CheckSpec] = field(default_factory=dict, compare=False)
    #: Shown in reports and on pages: whose rules these are.
    description: str = field(default="", compare=False)


class RulesMissing(LookupError):
    """The skill under test has no rules registered."""


def rules_for(skill: str, rules: Mapping[str, SkillRules]) -> SkillRules:
    """The rules that judge `skill`, or RulesMissing naming what to do."""
    if skill in rules:
        return rules[skill]
    known = ", ".join(sorted(rules)) or "none"
    raise RulesMissing(f"the skill {skill!r} has no judge rules (rules are registered for: {known}); add them "
                       "from a conftest.py with the pytest_palette_add_rules hook (docs/own-skill.md)")
