"""The one judge: a case's verdict from what is on disk, never from what the agent said.

Every host is scored by `judge()`; the item asserts on its Verdict, and the assertion hook renders a
failed Verdict the same way in a user's own Python test (`assert verdict == PASSED`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .cases import DEFAULT_MAX_POLLS, Case
from .run.evidence import MIN_PPTX_BYTES, Evidence

POLL_COMMANDS = frozenset({"status", "plan-status"})


@dataclass(frozen=True)
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
    #: The case's own poll ceiling, which `polls` was judged against.
    max_polls: int = DEFAULT_MAX_POLLS
    context_expected: bool = False
    #: A call passed the pasted material by --context or --source.
    context_reached: bool = False
    edit_expected: bool = False
    edit_called: bool = False
    #: The plan was drafted again after the first edit: the approved revision was discarded.
    replanned_after_edit: bool = False

    @property
    def ok(self) -> bool:
        return not self.failures

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


def judge(case: Case, evidence: Evidence, host: str = "") -> Verdict:
    """Apply the rules, in order, and return every failure in words."""
    failures: list[str] = []
    commands = evidence.commands
    polls = sum(command in POLL_COMMANDS for command in commands)
    first_edit = commands.index("edit") if "edit" in commands else None
    replanned = first_edit is not None and "plan" in commands[first_edit:]
    context_reached = any(call_args(call).get("context") or call_args(call).get("source") for call in evidence.calls)
    expect = case.expect

    def verdict(notes: tuple[str, ...] = ()) -> Verdict:
        return Verdict(case.name, host, tuple(failures), evidence.slides, polls, tuple(commands),
                       str(evidence.pptx) if evidence.pptx else None, evidence.has_plex, notes, expect.max_polls,
                       expect.context, context_reached, expect.edit, first_edit is not None, replanned)

    if not case.expect.deck:
        # Nothing else is judged: the user never approved, so there is no deck to inspect.
        if evidence.decks:
            failures.append(f"a deck was built although the user never approved it — the confirmation gate "
                            f"was skipped ({evidence.decks[0].name})")
        elif evidence.unfinished:
            failures.append(f"a build was started although the user never approved it — the confirmation gate "
                            f"was skipped (still running in {evidence.unfinished[0]})")
        return verdict()
    early = built_before_approval(case, evidence)
    if early:
        failures.append(early)
    if evidence.pptx is None:
        failures.append(f"no .pptx was produced (no deck.pptx of at least {MIN_PPTX_BYTES:,} bytes "
                        "under the workspace)")
        if evidence.unfinished:
            failures.append(f"a build was still running when the conversation ended: {evidence.unfinished[0]}")
        return verdict()
    if not evidence.has_plex:
        failures.append("the .pptx does not carry IBM Plex — it was not rendered by Palette")
    if case.expect.slides is not None and evidence.slides != case.expect.slides:
        failures.append(f"asked for {case.expect.slides} slides, got {evidence.slides}")
    if case.expect.edit:
        if first_edit is None:
            failures.append(f"the user asked for a change but edit-plan was never called "
                            f"(calls: {', '.join(commands) or 'none'})")
        elif replanned:
            failures.append("edit-plan was called and then the plan was drafted again from scratch — "
                            "the revision the user approved was discarded")
    if polls > case.expect.max_polls:
        failures.append(f"{polls} status polls — each is a model round trip, and the step budget is finite. "
                        "The commands should be holding, not spinning")
    if case.expect.context and not context_reached:
        failures.append("pasted material never reached the plan — neither --context nor --source was used, "
                        "so it was retyped or summarised into the request, which loses the grounding")
    notes: tuple[str, ...] = ("at the poll ceiling",) if polls == case.expect.max_polls and polls else ()
    if evidence.unfinished:
        notes += (f"a build was still running when the deck was read: {evidence.unfinished[0]}",)
    return verdict(notes)


def built_before_approval(case: Case, evidence: Evidence) -> str | None:
    """A build started before the user approved, in words (None when none did, or when the turns' times were
    not recorded). A case that builds a deck is approved by its last reply; each call is placed in the turn it
    was made in by its time, on the same clock as the turns'."""
    starts = evidence.turns_started
    if not case.replies or len(starts) != 1 + len(case.replies):
        return None
    approved_at = starts[-1]
    for call in evidence.calls:
        at = call.get("at")
        if call.get("command") == "start" and isinstance(at, (int, float)) and at < approved_at:
            turn = sum(1 for started in starts if started <= at)
            after = "the opening request" if turn <= 1 else f"reply {turn - 1} ({case.replies[turn - 2]!r})"
            return (f"the build started before the user approved — the confirmation gate was skipped (it started "
                    f"after {after}; the approval came with reply {len(case.replies)}, {case.replies[-1]!r})")
    return None


def call_args(call: dict[str, Any]) -> dict[str, Any]:
    """A call's arguments; a foreign trace line without a mapping there has none."""
    args = call.get("args")
    return args if isinstance(args, dict) else {}


def explain(verdict: Verdict) -> list[str]:
    """A failed verdict in lines: what failed, then the call chain that shows why."""
    lines = [f"palette case {verdict.case}[{verdict.host}] failed:"] if verdict.host else \
        [f"palette case {verdict.case} failed:"]
    lines += [f"  ↳ {failure}" for failure in verdict.failures]
    deck = f"{verdict.slides} slides, IBM Plex={verdict.has_plex}, {verdict.pptx}" if verdict.pptx else "none"
    lines.append(f"  deck: {deck}")
    calls = " → ".join(verdict.commands) if verdict.commands else "(none — the skill was never driven)"
    lines.append(f"  calls: {calls}")
    return lines
