"""One result: what ran, what the judge found, the terms it ran under and what it took.

`Record` is the only definition of a ledger record. It is a msgspec Struct, so the schema below is also the
parser and the validator: every reader decodes a line through it (one C-level pass that checks every key,
type and bound), every writer encodes through it, and a new field is added here and nowhere else.

Records written by an earlier version (schema 1: flat, with `tokens` as an object) are read beside the
current ones and upgraded on the way in, so an old ledger still reports as it did.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal, Union, get_args

import msgspec
from msgspec import Meta, Struct

SCHEMA = 2
Outcome = Literal["pass", "fail", "error", "skipped"]
CostSource = Literal["provider", "prices"]
#: Who made the deck an item left, read from disk: a build of the skill's ("palette"), the agent itself ("agent":
#: a .pptx no build of the skill made), or nobody ("none": no .pptx at all).
DeckBy = Literal["palette", "agent", "none"]
#: How each is said wherever a report shows what an agent did.
DECK_BY = {"palette": "built with Palette", "agent": "wrote a deck itself", "none": "no deck"}
#: The skill hash of a run with no skill installed (`--palette-skill none`): the baseline a skill is measured
#: against. A real hash is 12 hex digits, so a baseline can never be taken for a skill run.
NO_SKILL = "none"
OUTCOMES: tuple[str, ...] = get_args(Outcome)
#: The outcomes that are verdicts on the skill; errors and skips are not, and stay out of every denominator.
JUDGED = ("pass", "fail")

Name = Annotated[str, Meta(min_length=1)]
Count = Annotated[int, Meta(ge=0, le=2**63 - 1)]
#: Seconds and dollars: finite (JSON cannot hold anything else) and never negative.
Amount = Annotated[float, Meta(ge=0)]
RunIndex = Annotated[int, Meta(ge=1, le=2**31 - 1)]
#: A part of a whole: a credit, a share, a score.
Fraction = Annotated[float, Meta(ge=0, le=1)]
#: A check's role (results/checks.py): a gate fails the run and zeroes its score; a scored check adds to it.
Role = Literal["gate", "scored"]
GATE: Role = "gate"
SCORED: Role = "scored"
#: A value a check expected or observed: a count, a share, a yes or no, or a few words.
Value = str | int | float | bool
#: A folder inside the run: relative, with no `..` that could lead out of it.
Folder = Annotated[str, Meta(pattern=r"^(?!/)(?!(?:.*/)?\.\.(?:/|$)).+$")]

# Frozen, and strict about unknown keys. gc=False: records hold only strings, numbers and other records, so they
# cannot form cycles, and a million of them cost the collector nothing. The parts are keyword-only, so a new field
# (with a default, so older lines still read) goes where it belongs; a Record is also built by position (the
# reader's fast path), so a new field of its own goes last. Terms and Judged keep their hash: many records share
# one, and the tally counts by them.
_STRUCT: dict[str, Any] = {"frozen": True, "forbid_unknown_fields": True, "gc": False}
_PARTS: dict[str, Any] = {**_STRUCT, "kw_only": True}


class RecordError(ValueError):
    """A record that does not follow the schema; the message names the field."""


class Terms(Struct, cache_hash=True, **_PARTS):
    """What a result depends on besides its case: the same for every item of one host in one session."""

    model: str  # --model as given
    label: str  # the model as the host describes what ran (the rehearsal model named as what it is)
    provider: str
    skill_hash: str
    fingerprint: str  # of everything else a result depends on: budgets, backend, plugin version
    plugin_version: str
    scaffold: tuple[tuple[str, str], ...] = ()  # what the host reports of itself, as (name, value) pairs
    #: Where the agent's commands ran: "bubblewrap", or "unconfined" (`--palette-sandbox none`, the manual host,
    #: and every record written before the sandbox existed).
    sandbox: str = "unconfined"

    @property
    def baseline(self) -> bool:
        """Whether no skill was installed (`--palette-skill none`)."""
        return self.skill_hash == NO_SKILL


class Check(Struct, **_PARTS):
    """One check of a judged run (results/checks.py): whether it held, and what it earned."""

    name: Name
    role: Role
    weight: Amount
    #: None when it could not be graded (its grader failed: an error of the check, never a 0 for the skill).
    passed: bool | None
    #: What it earned, 0 to 1: 1 or 0, or part for a share check (the share carried against the share asked for).
    credit: Fraction
    #: What a share check measured (the share of the pasted figures and headings carried); None for the others.
    share: Fraction | None = None
    #: The judge's words: why it failed, what it measured.
    words: str = ""
    #: What the check asked for and what the judge found on disk (slides asked and built, polls allowed and
    #: spun, the edit asked and made, the skill expected and used); None where a check says neither, and in
    #: records written before they were kept (`checks.values_of` tells them from the judged facts where it can).
    expected: Value | None = None
    observed: Value | None = None


class Judged(Struct, cache_hash=True, **_PARTS):
    """What the judge read from disk for a pass or a fail. Errors and skips were not judged and have none."""

    slides: int | None  # None only in schema-1 records
    has_plex: bool
    deck: bool
    calls: tuple[str, ...]
    polls: int | None
    max_polls: int | None  # the case's own poll ceiling; None in schema-1 records (the default then)
    context_expected: bool
    context_reached: bool
    edit_expected: bool
    edit_called: bool
    replanned_after_edit: bool
    #: The polls that did not wait for the work, which the ceiling judges; None in records written before
    #: polls were judged by what they were (their count of all polls was judged then).
    spins: int | None = None
    #: Where the calls were read: "trace" (the skill's), "host" (our record of the commands the agent ran, the
    #: skill wrote none), "" (no call at all); None in records written before the host kept a record.
    calls_from: str | None = None
    #: What the judge noted beside its rules: the poll ceiling reached, a disagreement between the skill's trace
    #: and the host's record, a rule it could not apply.
    notes: tuple[str, ...] = ()
    #: The skill whose rules judged it (`pytest_palette_add_rules`); None for Palette's (and in records written
    #: before rules were a hook, all Palette's).
    rules: str | None = None
    #: Whether the case needed the skill (False for a near miss), and whether any call of it was made: the trigger
    #: metric's facts. None in records written before near misses were judged (see `tally.triggered`).
    skill_expected: bool | None = None
    skill_used: bool | None = None
    #: Who made the deck (DeckBy), so a run without the skill shows what the agent did instead; None in records
    #: written before it was recorded.
    deck_by: DeckBy | None = None
    #: Every check the rules made, with its role and weight, and the run's score from them; absent (and the score
    #: derived, where the facts allow: `score_of`) in records written before checks.
    checks: tuple[Check, ...] = ()
    score: Fraction | None = None
    #: Beside each of the record's failures, in order, the calls that broke its rule (indexes into the calls the
    #: judge read: `calls`); () for a failure that is what was not done. () in records written before it was kept.
    blame: tuple[tuple[Count, ...], ...] = ()


class Usage(Struct, **_PARTS):
    """What the run took. Counts a host does not report are None, never 0."""

    seconds: Amount | None
    turns: Count | None
    input_tokens: Count | None
    output_tokens: Count | None
    cost_usd: Amount | None
    started_at: float
    ended_at: float
    #: Where cost_usd came from: "provider" (the client reported it), "prices" (the user's --palette-prices
    #: table applied to the tokens); None when there is no cost, and in records written before it was said.
    cost_source: CostSource | None = None
    #: Model calls the host's client retried after a transient error (429, 5xx, reset, timeout), summed over the
    #: turns; None when the client does not say (and in records written before retries were counted).
    retries: Count | None = None
    #: What the model-graded checks took (a rubric's grader, the validity check), apart from the agent's tokens and
    #: cost; None when no model graded (the rehearsal grader counts nothing) and in records written before.
    grader_input_tokens: Count | None = None
    grader_output_tokens: Count | None = None
    grader_cost_usd: Amount | None = None
    #: Why each turn ended, in order (hosts/stops.py: "answered", "step_budget", …); () in records written before.
    stops: tuple[Name, ...] = ()
    #: Model calls and the agent's commands, summed over the turns; None when a host does not count them.
    model_calls: Count | None = None
    commands: Count | None = None


class FamilyRun(Struct, cache_hash=True, **_PARTS):
    """What an item of a task family records of its family and its grading (pytest_palette/families/): the seed's
    identity of what ran, and what the graders said beside the checks."""

    family: Name  # the family root's folder name
    task: Name
    #: The family's revision: its commit where it is in git (`+` when its files differ from it), else a hash of
    #: its files.
    revision: str
    #: The staged `.claude/` tree's hash; the skill-set hash (apm.lock.yaml's) is the terms' `skill_hash`.
    skills_hash: str
    #: Skill packs apm.yml names that are not staged under .claude/ (the run had no such skill).
    unstaged_packs: tuple[str, ...] = ()
    #: For each check, in the record's order, which grader made it: "invariants" or "tests".
    sources: tuple[str, ...] = ()
    #: Rows the invariants wrote that were not rows (each a failing check of weight 1, named).
    malformed: Count = 0
    #: Files of the agent's folder a hidden check was staged over, backed up and restored.
    backed_up: tuple[str, ...] = ()
    #: Where the graders ran: "bubblewrap" or "unconfined".
    graders: str = ""
    #: Files of the item's folder a secret was taken out of once graded (the rendered `.env` files, and any the
    #: agent wrote one into); and those that could not be read to be (too large, unreadable).
    redacted: tuple[str, ...] = ()
    unredacted: tuple[str, ...] = ()


class Record(Struct, tag_field="schema", tag=SCHEMA, **_STRUCT):
    """One finished item — (run_id, case, host, run_index) — and everything a report needs of it."""

    run_id: Name
    case: Name
    host: Name
    run_index: RunIndex
    #: The item's folder, relative to its run folder; None in schema-1 records, which did not say.
    workspace: Folder | None
    outcome: Outcome
    #: The judge's words for a fail; the reason for an error or a skip; empty for a pass.
    failures: tuple[str, ...]
    judged: Judged | None
    terms: Terms
    usage: Usage
    case_hash: str
    tags: tuple[str, ...]
    #: A task family's item: its family and what its graders said (None for a case).
    family: FamilyRun | None = None

    def to_json(self) -> bytes:
        """One compact line of JSON, without its newline; RecordError if it would not read back as itself."""
        try:
            line = _ENCODER.encode(self)
        except (TypeError, ValueError, OverflowError) as error:
            raise RecordError(f"record: {error}") from None
        # msgspec writes inf and NaN as null and checks bounds and rules only when decoding: reading the line
        # back is what proves a reader will take it, and take it as this record.
        if from_json(line) != self:
            raise RecordError("record: holds a value JSON cannot carry (an infinite or NaN number?)")
        return line


# -- schema 1: the flat records of the first ledger format, read and upgraded -----------------------


class _RecordV1(Struct, tag_field="schema", tag=1, **_PARTS):
    run_id: Name
    case: Name
    host: Name
    model: str
    provider: str
    run_index: RunIndex
    outcome: Outcome
    failures: tuple[str, ...]
    slides: int | None
    has_plex: bool
    deck: bool
    polls: int | None
    calls: tuple[str, ...]
    context_expected: bool
    context_reached: bool
    edit_expected: bool
    edit_called: bool
    replanned_after_edit: bool
    seconds: Amount | None
    turns: int | None
    tokens: _TokensV1 | None
    cost_usd: Amount | None
    skill_hash: str
    case_hash: str
    tags: tuple[str, ...]
    plugin_version: str
    started_at: float
    ended_at: float
    fingerprint: str
    scaffold: dict[str, str]

    def upgrade(self) -> Record:
        judged = Judged(
            slides=self.slides, has_plex=self.has_plex, deck=self.deck, calls=self.calls, polls=self.polls,
            max_polls=None, context_expected=self.context_expected, context_reached=self.context_reached,
            edit_expected=self.edit_expected, edit_called=self.edit_called,
            replanned_after_edit=self.replanned_after_edit) if self.outcome in JUDGED else None
        tokens = self.tokens
        return Record(
            run_id=self.run_id, case=self.case, host=self.host, run_index=self.run_index, workspace=None,
            outcome=self.outcome, failures=self.failures, judged=judged,
            terms=Terms(model=self.model, label=self.model, provider=self.provider, skill_hash=self.skill_hash,
                        fingerprint=self.fingerprint, plugin_version=self.plugin_version,
                        scaffold=tuple(self.scaffold.items())),
            usage=Usage(seconds=self.seconds, turns=self.turns, input_tokens=tokens.input if tokens else None,
                        output_tokens=tokens.output if tokens else None, cost_usd=self.cost_usd,
                        started_at=self.started_at, ended_at=self.ended_at),
            case_hash=self.case_hash, tags=self.tags)


class _TokensV1(Struct, **_PARTS):
    input: Count
    output: Count


_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(Union[Record, _RecordV1])  # noqa: UP007 - msgspec needs the Union object
_AT = re.compile(r"^(?P<what>.*?)(?: - at `\$\.?(?P<where>[^`]*)`)?$", re.DOTALL)


def from_json(line: bytes | str) -> Record:
    """The record on one line of JSON, of either schema; RecordError naming the field when it is not one."""
    try:
        found = _DECODER.decode(line)
    except msgspec.ValidationError as error:
        raise RecordError(_explain(str(error))) from None
    except msgspec.DecodeError as error:
        raise RecordError(f"not JSON: {error}") from None
    [record] = _checked([found])
    return record


def from_json_lines(block: bytes, shared: dict[int, dict[bytes, Any]] | None = None) -> list[Record]:
    """The records on whole lines of JSON, blank lines skipped; RecordError if any line is not a record (the
    caller then reads that block line by line, to say which).

    Lines of the current schema take a faster path to the same records: the parts that repeat from record to
    record are decoded once per distinct text (per `shared`, which the caller keeps across blocks) and shared,
    so a million records neither cost a million decodings of the same terms nor hold a million copies of them.
    """
    try:
        views = _VIEW_DECODER.decode_lines(block)
    except (msgspec.ValidationError, msgspec.DecodeError):
        views = None  # another schema, or a bad line: the plain path says which
    if views is not None:
        try:
            return _checked(_assembled(views, {} if shared is None else shared))
        except (msgspec.ValidationError, msgspec.DecodeError):
            pass
    try:
        return _checked(_DECODER.decode_lines(block))
    except (msgspec.ValidationError, msgspec.DecodeError) as error:
        raise RecordError(str(error)) from None


# The reader's view of a line: the Record's own fields, types and checks (derived from it, not written again),
# except that the parts many records share are kept as their raw JSON text until decoded once each.
_SHARED_PARTS = ("failures", "judged", "terms", "tags")
_View = msgspec.defstruct(
    "_View", [(f.name, msgspec.Raw if f.name in _SHARED_PARTS else f.type) if f.required else
              (f.name, msgspec.Raw if f.name in _SHARED_PARTS else f.type, f.default)
              for f in msgspec.structs.fields(Record)],
    tag_field="schema", tag=SCHEMA, **_STRUCT)
_VIEW_DECODER = msgspec.json.Decoder(_View)
_PART_AT = [(i, msgspec.json.Decoder(f.type)) for i, f in enumerate(msgspec.structs.fields(Record))
            if f.name in _SHARED_PARTS]


def _assembled(views: list[Any], shared: dict[int, dict[bytes, Any]]) -> list[Record]:
    """Records from views: each part looked up by its text (decoded and checked the first time it is seen)."""
    astuple = msgspec.structs.astuple
    (a, decode_a), (b, decode_b), (c, decode_c), (d, decode_d) = _PART_AT  # the four shared parts, unrolled
    seen_a, seen_b, seen_c, seen_d = (shared.setdefault(i, {}) for i in (a, b, c, d))
    records: list[Record] = []
    append = records.append
    for view in views:
        values = list(astuple(view))
        text = bytes(values[a])
        values[a] = seen_a[text] if text in seen_a else seen_a.setdefault(text, decode_a.decode(text))
        text = bytes(values[b])
        values[b] = seen_b[text] if text in seen_b else seen_b.setdefault(text, decode_b.decode(text))
        text = bytes(values[c])
        values[c] = seen_c[text] if text in seen_c else seen_c.setdefault(text, decode_c.decode(text))
        text = bytes(values[d])
        values[d] = seen_d[text] if text in seen_d else seen_d.setdefault(text, decode_d.decode(text))
        append(Record(*values))
    return records


def _checked(found: Sequence[Record | _RecordV1]) -> list[Record]:
    """Records upgraded to the current schema, and the one rule the types cannot say: a pass or a fail has
    judged facts, an error or a skip has none. (Checked here, a block at a time, not in __post_init__: a
    Python call per record would cost a fifth of a read.)"""
    records: list[Record] = [r.upgrade() if isinstance(r, _RecordV1) else r for r in found] \
        if _RecordV1 in set(map(type, found)) else list(found)  # type: ignore[arg-type]
    judged = set(JUDGED)
    if any((r.judged is None) is (r.outcome in judged) for r in records):
        bad = next(r for r in records if (r.judged is None) is (r.outcome in judged))
        raise RecordError(f"judged: a {bad.outcome} record {'has no' if bad.judged is None else 'has'} judged facts "
                          "(only a pass or a fail has them)")
    return records


def _explain(message: str) -> str:
    """msgspec's "Expected `int`, got `str` - at `$.usage.turns`" as "usage.turns: expected int, got str"."""
    match = _AT.match(message)
    what, where = (match.group("what"), match.group("where")) if match else (message, None)
    unknown = re.match(r"Object contains unknown field `(.+)`", what)
    if unknown:
        return f"{(where + '.') if where else ''}{unknown.group(1)}: unknown key (schema {SCHEMA} has no such field)"
    missing = re.match(r"Object missing required field `(.+)`", what)
    if missing:
        return f"{(where + '.') if where else ''}{missing.group(1)}: missing"
    what = what.replace("`", "")
    if what.startswith("Invalid value") and (where or "").endswith("schema"):
        what = f"{what} (a schema this version does not read: expected 1 or {SCHEMA})"
    if what == "Number out of range":
        what = "not a finite number"
    if what.startswith("Invalid enum value") and where == "outcome":
        what = f"unknown outcome {what.rsplit(' ', 1)[-1]} (expected one of {', '.join(OUTCOMES)})"
    return f"{where}: {what[0].lower() + what[1:]}" if where else f"record: {what[0].lower() + what[1:]}"
