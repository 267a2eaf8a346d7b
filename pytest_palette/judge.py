"""The one judge: a case's verdict from what is on disk, never from what the agent said.

Every host is scored by `judge()` with the rules of the skill under test: Palette's are here, registered
through the same hook a project uses for its own skill (rules.py). The item asserts on its Verdict, and the
assertion hook renders a failed Verdict the same way in a user's own Python test (`assert verdict == PASSED`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .cases import DEFAULT_MAX_POLLS, Case, Expect, item_name
from .replies import ReplyKind, classify_reply, named_slide, named_topic
from .results.checks import CALLS, COMMON_CHECKS, NEAR_MISS, PALETTE_CHECKS, RULES, CheckSpec, Outcome, merged, score
from .results.record import GATE, Check
from .rules import Failure, Finding, Note, Passed, SkillRules, Ungraded
from .run.content import coverage, deck_text, figures, headings, not_mentioned, topic_words
from .run.evidence import MIN_PPTX_BYTES, Evidence

#: The skill the package ships and judges out of the box.
PALETTE = "palette"

POLL_COMMANDS = frozenset({"status", "plan-status"})
#: The job each command starts or asks about: a poll is judged against the job it polls.
JOBS = {"plan": "plan", "edit": "plan", "plan-status": "plan", "start": "build", "status": "build"}
#: A poll that holds at least this long (asked for, or took) waited for the work; one that answers sooner while
#: the work still runs is a spin. Far below deck.py's own holds (60-90 s), far above any process start-up.
HOLD_FLOOR = 10.0


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
    #: Every check the rules made of the case, with its role and weight (pytest_palette/checks.py).
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
            found.setdefault(finding.check, []).append(Outcome(True, finding.credit, finding.share, finding.words))
        elif isinstance(finding, Ungraded):
            found.setdefault(finding.check, []).append(Outcome(None, 0.0, None, finding.words))
        elif isinstance(finding, Failure):
            failures.append(finding.words)
            blame.append(finding.calls)
            found.setdefault(finding.check or RULES, []).append(
                Outcome(False, finding.credit, finding.share, finding.words))
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


@dataclass(frozen=True)
class CallFacts:
    """What the calls show, read once: the verdict records it, Palette's rules judge it."""

    polls: int
    #: The polls that did not wait for the work (`spinning_polls`), as indexes into the calls.
    spinning: tuple[int, ...]
    first_edit: int | None
    replanned: bool
    context_reached: bool

    @classmethod
    def of(cls, evidence: Evidence) -> CallFacts:
        commands = evidence.commands
        first_edit = commands.index("edit") if "edit" in commands else None
        return cls(
            polls=sum(command in POLL_COMMANDS for command in commands),
            spinning=tuple(spinning_polls(evidence.calls)),
            first_edit=first_edit,
            replanned=first_edit is not None and "plan" in commands[first_edit:],
            context_reached=any(call_args(call).get("context") or call_args(call).get("source")
                                for call in evidence.calls))


def palette_rules(case: Case, evidence: Evidence) -> Iterator[Finding]:
    """Palette's rules, in order (docs/judge.md)."""
    facts = CallFacts.of(evidence)
    commands = evidence.commands
    starts = [i for i, command in enumerate(commands) if command == "start"]
    plans = [i for i, command in enumerate(commands) if command == "plan"]
    expect = case.expect
    if not expect.deck:
        # Nothing else is judged: the user never approved, so there is no deck to inspect.
        if evidence.decks:
            yield Failure(f"a deck was built although the user never approved it — the confirmation gate "
                          f"was skipped ({evidence.decks[0].name})", tuple(starts[:1]), "declined")
        elif evidence.unfinished:
            yield Failure(f"a build was started although the user never approved it — the confirmation gate "
                          f"was skipped (still running in {evidence.unfinished[0]})", tuple(starts[:1]), "declined")
        else:
            yield Passed("declined")
        return
    early = built_before_approval(case, evidence)
    if early:
        yield Failure(early[0], (early[1],) if early[1] is not None else (), "confirmation")
    elif case.replies:  # with no reply there is no approval to wait for
        yield Passed("confirmation")
    if evidence.pptx is None:
        yield Failure(f"no .pptx was produced (no deck.pptx of at least {MIN_PPTX_BYTES:,} bytes under the "
                      "workspace)", tuple(starts[-1:]), "deck")
        if evidence.unfinished:
            yield Failure(f"a build was still running when the conversation ended: {evidence.unfinished[0]}",
                          tuple(starts[-1:]), "deck")
        return
    if not evidence.has_plex:
        yield Failure("the .pptx does not carry IBM Plex — it was not rendered by Palette", tuple(starts[-1:]), "deck")
    else:
        yield Passed("deck")
    if expect.slides is not None:
        if evidence.slides != expect.slides:
            yield Failure(f"asked for {expect.slides} slides, got {evidence.slides}", tuple(starts[-1:]), "slides")
        else:
            yield Passed("slides")
    if expect.edit:
        if facts.first_edit is None:
            # What was done instead: the plan drafted again, else the build of the unchanged plan.
            yield Failure(f"the user asked for a change but edit-plan was never called "
                          f"(calls: {', '.join(commands) or 'none'})", tuple((plans[1:] or starts)[:1]), "edit")
        elif facts.replanned:
            yield Failure("edit-plan was called and then the plan was drafted again from scratch — "
                          "the revision the user approved was discarded",
                          tuple([i for i in plans if i > facts.first_edit][:1]), "edit")
        else:
            yield Passed("edit")
    unchanged, untold, told = named_slides_unchanged(case, evidence)
    for words, edit in unchanged:
        yield Failure(words, (edit,), "named_slide")
    if told and not unchanged:
        yield Passed("named_slide")
    spins, polls = len(facts.spinning), facts.polls
    if spins > expect.max_polls:
        yield Failure(f"{spins} status polls did not wait for the work ({polls} polls in all: each answered "
                      f"while it still ran without holding {HOLD_FLOOR:g} s, or asked again about work already "
                      "collected) — each is a model round trip, and the step budget is finite. "
                      "The commands should be holding, not spinning", facts.spinning, "polls")
    else:
        yield Passed("polls")
    if expect.context:
        if not facts.context_reached:
            yield Failure("pasted material never reached the plan — neither --context nor --source was used, "
                          "so it was retyped or summarised into the request, which loses the grounding",
                          tuple(plans[:1]), "context")
        else:
            yield Passed("context")
    yield from material_missing(case, evidence)
    yield from named_topics_missing(case, evidence)
    yield from questions_acted_on(case, evidence)
    if spins == expect.max_polls and spins:
        yield Note("at the poll ceiling")
    for words in untold:
        yield Note(words)
    if evidence.unfinished:
        yield Note(f"a build was still running when the deck was read: {evidence.unfinished[0]}")


#: The first user of the rules hook: the plugin registers these for the skill named "palette".
PALETTE_RULES = SkillRules(judge=palette_rules, description="Palette's rules (docs/judge.md)", checks=PALETTE_CHECKS)


def near_miss(case: Case, evidence: Evidence) -> Iterator[Finding]:
    """A case whose request needs no skill (`expect.skill` false): any call of the skill fails it, with the blame
    on the first; no call passes. Nothing else is judged — with no call there is nothing to judge."""
    commands = evidence.commands
    if commands:
        yield Failure(f"the skill was used although the request needed none: {' → '.join(commands)}", (0,), NEAR_MISS)
        return
    yield Passed(NEAR_MISS)
    if evidence.decks:  # not a failure (the skill was not the one to make it), but worth a look
        yield Note(f"a .pptx was left in the workspace without a call of the skill: {evidence.decks[0].name}")


def built_before_approval(case: Case, evidence: Evidence) -> tuple[str, int | None] | None:
    """A build started before the user approved, in words, and which call it was (None when none did, or when
    the turns' times were not recorded). A case that builds a deck is approved by its last reply; each call is
    placed in the turn it was made in by its time, on the same clock as the turns'. Where no call did, the disk
    may still say so: a build's state file or a deck in the agent's folder as the approving reply was sent
    (`Evidence.builds_before`) — then there is no call to name (None)."""
    starts = evidence.turns_started
    if not case.replies or len(starts) != 1 + len(case.replies):
        return None
    approved_at = starts[-1]
    held = evidence.builds_before[-1] if len(evidence.builds_before) == len(starts) else ()
    for index, call in enumerate(evidence.calls):
        at = call.get("at")
        if call.get("command") == "start" and isinstance(at, (int, float)) and at < approved_at:
            turn = sum(1 for started in starts if started <= at)
            after = "the opening request" if turn <= 1 else f"reply {turn - 1} ({case.replies[turn - 2]!r})"
            line = f", in `{call['line']}`" if call.get("line") else ""
            return (f"the build started before the user approved — the confirmation gate was skipped (it started "
                    f"after {after}{line}; the approval came with reply {len(case.replies)}, {case.replies[-1]!r})",
                    index)
    if held:  # the disk's word: a build some call no record holds started (a changed copy of the script, say)
        return (f"a build was on disk before the user approved — the confirmation gate was skipped "
                f"({', '.join(held)} in the agent's folder when reply {len(case.replies)}, {case.replies[-1]!r}, was "
                "sent; no call the records hold started it)", None)
    return None


def spinning_polls(calls: tuple[dict[str, Any], ...]) -> list[int]:
    """The polls that did not wait for the work they asked about (see `Verdict.spins`), as indexes into `calls`.
    A poll whose hold or answer is not known (a foreign trace) is given the benefit of the doubt."""
    collected: dict[str, bool] = {}
    spins: list[int] = []
    for index, call in enumerate(calls):
        command = str(call.get("command"))
        job = JOBS.get(command)
        if job is None:
            continue
        done = answer_of(call).get("done") is True
        if command not in POLL_COMMANDS:  # it starts the job again
            collected[job] = done
            continue
        if collected.get(job) or not (done or held(call)):
            spins.append(index)
        collected[job] = collected.get(job, False) or done
    return spins


def held(call: dict[str, Any]) -> bool:
    """The call waited for the work: it asked to hold at least HOLD_FLOOR (or did not say), or it took that."""
    asked, took = call_args(call).get("hold_seconds"), call.get("seconds")
    if isinstance(took, (int, float)) and took >= HOLD_FLOOR:
        return True
    return not isinstance(asked, (int, float)) or asked >= HOLD_FLOOR


def answer_of(call: dict[str, Any]) -> dict[str, Any]:
    """The JSON object a call printed, or {} when it printed something else (or it was cut short)."""
    try:
        answer = json.loads(str(call.get("stdout", "")))
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) else {}


def plan_slides(text: str) -> list[str]:
    """A plan's slides ("## " sections), each as its title and lines without [[directives]], for comparison."""
    slides: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("## "):
            slides.append(line[3:].strip())
        elif slides and line and not (line.startswith("[[") and line.endswith("]]")):
            slides[-1] += "\n" + line
    return slides


def named_slides_unchanged(case: Case, evidence: Evidence) -> tuple[list[tuple[str, int]], tuple[str, ...], int]:
    """For each reply that names a slide to change ("fix slide 2, …"), whether the plan's slide changed between
    the plan shown before the reply and the plan after the edits made in its turn: failures, and notes where it
    could not be told (no turn times, no plan text in the calls' answers, a plan format not in "## " sections),
    and how many were told. Each failure comes with the edit call that left the slide as it was."""
    failures: list[tuple[str, int]] = []
    untold: list[str] = []
    told = 0
    starts = evidence.turns_started
    for index, reply in enumerate(case.replies):
        number = named_slide(reply)
        if number is None:
            continue
        said = f"reply {index + 1} ({reply!r}) asked to change slide {number}"
        if len(starts) != 1 + len(case.replies):
            untold.append(f"{said}; whether it changed could not be told (the turns' times were not recorded)")
            continue
        begin = starts[index + 1]
        end = starts[index + 2] if index + 2 < len(starts) else float("inf")
        before, after, edited = None, None, None
        for position, call in enumerate(evidence.calls):
            at, text = call.get("at"), answer_of(call).get("text")
            if JOBS.get(str(call.get("command"))) != "plan" or not isinstance(at, (int, float)):
                continue
            in_turn = begin <= at < end and call.get("command") in ("edit", "plan-status")
            if in_turn and call.get("command") == "edit":
                edited = position
            if not isinstance(text, str):
                continue
            if at < begin:
                before = text
            elif in_turn:
                after = text
        if edited is None:
            continue  # no edit in that turn: the edit rule speaks for it
        old, new = plan_slides(before or ""), plan_slides(after or "")
        if after is None:
            untold.append(f"{said}; whether it changed could not be told (no revised plan's text came back in "
                          "that turn)")
        elif len(old) < number or not new:
            untold.append(f"{said}; whether it changed could not be told (no plan with a slide {number} was "
                          "shown before it)")
        else:
            told += 1
            if len(new) >= number and new[number - 1] == old[number - 1]:
                title = old[number - 1].split("\n")[0]
                failures.append((f"{said}, but the edit left slide {number} as it was (\u201c{title}\u201d)",
                                 edited))
    return failures, tuple(untold), told


def turn_window(case: Case, evidence: Evidence, reply: int) -> tuple[float, float] | None:
    """When the turn of reply `reply` (0-based) began and ended, or None when the turns' times were not recorded."""
    starts = evidence.turns_started
    if len(starts) != 1 + len(case.replies):
        return None
    return starts[reply + 1], starts[reply + 2] if reply + 2 < len(starts) else float("inf")


def in_window(call: dict[str, Any], window: tuple[float, float]) -> bool:
    at = call.get("at")
    return isinstance(at, (int, float)) and window[0] <= at < window[1]


def material_missing(case: Case, evidence: Evidence) -> Iterator[Finding]:
    """Rule 10: the figures and headings of the pasted material are in the deck's text, at least the share the
    case asks for (`expect.content`). Blames the plan call that was given the material (or should have been)."""
    expect = case.expect
    if not (expect.context and expect.content > 0 and evidence.pptx is not None):
        return
    if not figures(case.context) and not headings(case.context):
        return  # prose without a figure or a heading: nothing this rule can look for
    text = deck_text(evidence.pptx)
    if text is None:
        yield Note("whether the pasted material's figures and headings reached the deck could not be told (its "
                   "text could not be read)")
        return
    covered = coverage(case.context, text)
    # Full credit at the share the case asks for, part below it: "carries 86%" is nearer a pass than "carries 0%".
    share, credit = round(covered.share, 4), round(min(1.0, covered.share / expect.content), 4)
    if covered.share < expect.content:
        given = [i for i, call in enumerate(evidence.calls)
                 if call.get("command") == "plan" and (call_args(call).get("context") or call_args(call).get("source"))]
        plans = [i for i, command in enumerate(evidence.commands) if command == "plan"]
        yield Failure(f"{covered.missing()} (the deck carries {covered.share:.0%} of its {covered.total} figures "
                      f"and headings; the case asks for at least {expect.content:.0%})", tuple((given or plans)[:1]),
                      "content", credit, share)
    else:
        yield Passed("content", credit, share, f"the deck carries {covered.share:.0%} of the pasted material's "
                                               f"{covered.total} figures and headings")


def named_topics_missing(case: Case, evidence: Evidence) -> Iterator[Finding]:
    """Rule 11: a change that names a subject ("add a slide on X", "include X") — its words are in the plan revised
    in that turn, or in the deck. Blames the edit (or plan) of that turn, else the build."""
    starts = [i for i, command in enumerate(evidence.commands) if command == "start"]
    for index, reply in enumerate(case.replies):
        topic = named_topic(reply)
        words = topic_words(topic) if topic else []
        if not words or evidence.pptx is None:
            continue
        window = turn_window(case, evidence, index)
        revised, changed = None, None
        for position, call in enumerate(evidence.calls):
            if window is None or JOBS.get(str(call.get("command"))) != "plan" or not in_window(call, window):
                continue
            if call.get("command") in ("edit", "plan"):
                changed = position
            text = answer_of(call).get("text")
            revised = text if isinstance(text, str) else revised
        if revised is not None and not not_mentioned(revised, words):
            yield Passed("subject")
            continue
        text = deck_text(evidence.pptx)
        said = f"reply {index + 1} ({reply!r}) asked for {topic}"
        if text is None:
            yield Note(f"{said}; whether the deck covers it could not be told (its text could not be read)")
            continue
        absent = not_mentioned(text, words)
        if not absent:
            yield Passed("subject")
            continue
        listed = ", ".join(f"\u201c{word}\u201d" for word in absent)
        if changed is not None:
            yield Failure(f"{said}, but the edit left it out: neither the plan revised in that turn nor the deck "
                          f"mentions it (no {listed})", (changed,), "subject")
        else:
            yield Failure(f"{said}, but the deck does not mention it (no {listed})", tuple(starts[-1:]), "subject")


#: The calls that change what will be built: none belongs in the turn of a question.
CHANGING = frozenset({"plan", "edit", "start"})


def questions_acted_on(case: Case, evidence: Evidence) -> Iterator[Finding]:
    """Rule 12: a reply that asks a question gets an answer before anything is built — in its turn no plan, edit or
    build, and the agent said something (turns.json, the harness's record: whether it spoke, never what it
    claimed)."""
    for index, reply in enumerate(case.replies):
        if classify_reply(reply) is not ReplyKind.QUESTION:
            continue
        said = f"reply {index + 1} ({reply!r}) asked a question"
        window = turn_window(case, evidence, index)
        if window is None:
            yield Note(f"{said}; whether it was answered before anything changed could not be told (the turns' "
                       "times were not recorded)")
            continue
        acted = tuple(i for i, call in enumerate(evidence.calls)
                      if call.get("command") in CHANGING and in_window(call, window))
        if acted:
            done = ", ".join(str(evidence.calls[i].get("command")) for i in acted)
            yield Failure(f"{said}, but the agent acted on it instead of answering ({done} in that turn): a question "
                          "asks for nothing to change", acted, "question")
        answers = evidence.answers
        silent = len(answers) == 1 + len(case.replies) and not answers[index + 1].strip()
        if silent:
            yield Failure(f"{said}, but the agent said nothing in that turn", (), "question")
        if not acted and not silent:
            yield Passed("question")


def call_args(call: dict[str, Any]) -> dict[str, Any]:
    """A call's arguments; a foreign trace line without a mapping there has none."""
    args = call.get("args")
    return args if isinstance(args, dict) else {}


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
