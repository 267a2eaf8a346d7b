"""A skill's judge rules, as a project registers them: the Palette rules are the first user.

`pytest_palette_add_rules` (hookspecs.py) fills a mapping of skill name → `SkillRules`; the session judges
every case with the rules of the skill under test. A rule reads only what is on disk (`Evidence`: the
workspace, the skill's call trace, our record of the commands) and yields what failed, in words.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .cases import Case, ExpectCheck

if TYPE_CHECKING:
    from .run.evidence import Evidence


@dataclass(frozen=True)
class Failure:
    """A rule that failed, in words a skill author can act on, and the calls that broke it (indexes into
    `Evidence.calls`; empty where the failure is what was not done)."""

    words: str
    calls: tuple[int, ...] = ()


@dataclass(frozen=True)
class Note:
    """What the reader of a verdict must know that is not a failure: a rule that could not be applied."""

    words: str


#: What a rule yields: a Failure, a Note, or plain words (a Failure with no call to blame).
Finding = Failure | Note | str
#: A skill's rules: every finding about one case's evidence.
Judge = Callable[[Case, "Evidence"], Iterable[Finding]]


@dataclass(frozen=True)
class SkillRules:
    """What judges one skill: its rules, and the check of its own keys in a case's `expect:` (under the
    skill's name), None when it has none."""

    judge: Judge
    expect: ExpectCheck | None = None
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
