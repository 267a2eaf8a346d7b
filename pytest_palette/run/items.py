"""Case files as pytest collectors, and one item per (case, host, run).

An item has its conversation and judges its folder in setup, so a host that fails (timeout, crash, missing
client), a fault on disk or a rule that raises makes the item ERROR; the call phase only gives the verdict on what
is on disk, so a FAIL is always a verdict on the skill. Every item that finishes leaves exactly one record in the
run's ledger, and carries it on its report.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from ..arena.sandbox import Sandbox
from ..backend import agent_environment
from ..cases import Case, CaseFileError, item_name, load_cases
from ..hosts.base import HandedOver, Host, HostSettings
from ..judge import PALETTE, Verdict, evidence, explain
from ..layer.route import route_of
from ..options import Settings
from ..results.ledger import append, open_run
from ..results.prices import FROM_PROVIDER, FROM_TABLE, Price
from ..results.record import CostSource, FamilyRun, Judged, Outcome, Record, Terms, Usage, from_json
from ..results.table import RECORD_PROPERTY
from ..skill import SkillCard
from . import schedule, tracing
from ._private import TerminalRepr, fill_fixtures, init_fixtures
from .conversation import HostFailure, NotStarted, Transcript, as_left, converse, open_sandbox
from .grading import Spent, grade
from .judging import judge_folder
from .overlap import Ahead, Overlap
from .progress import ItemWatch
from .session import CASE_NAMES, SESSION, Session, arguments, finished


class PaletteFailure(AssertionError):
    """The judge's verdict was not a pass."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__("\n".join(explain(verdict)))
        self.verdict = verdict


class CaseFile(pytest.File):
    """A YAML file holding a list of cases."""

    def collect(self) -> Iterator[CaseItem]:
        session = self.config.stash[SESSION]
        settings = session.settings
        if settings.agent_profile is not None:  # a case has no .claude/agents/: the option would do nothing
            raise self.CollectError(f"{self.path}: --palette-agent-profile names a task family's agent profile; "
                                    "a case file has none")
        try:
            cases = load_cases(self.path, max_context=settings.max_context, namespaces=session.namespaces,
                               checks=session.checks, secrets=session.secrets)
        except CaseFileError as error:
            raise self.CollectError(str(error)) from None
        seen = self.config.stash.setdefault(CASE_NAMES, {})
        for case in cases:
            where = f"{case.path}:{case.line}"
            if case.name in seen and seen[case.name] != where:
                raise self.CollectError(f"{where}: case name {case.name!r} is already used at {seen[case.name]}")
            seen[case.name] = where
        for tag in sorted({tag for case in cases for tag in case.tags}):
            # Tags become registered markers, so `-m corpus` works under --strict-markers.
            self.config.addinivalue_line("markers", f"{tag}: pytest-palette case tag")
        for case in cases:
            for host in settings.hosts:
                for index in range(1, settings.runs + 1):
                    name = item_name(case.name, host, None if settings.runs == 1 else index)
                    yield CaseItem.from_parent(self, name=name, case=case, host=host,
                                               run_index=index)


class CaseItem(pytest.Item):
    """One run of one case on one host."""

    def __init__(self, *, case: Case, host: str, run_index: int = 1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case
        self.host_name = host
        self.run_index = run_index
        self._sandbox: Sandbox | None = None
        self._transcript: Transcript | None = None
        self._verdict: Verdict | None = None
        #: What the model-graded checks took (run/grading.py), kept apart from the agent's usage.
        self._graded: Spent | None = None
        for tag in case.tags:
            self.add_marker(tag)
        init_fixtures(self, "palette_host")

    @property
    def palette_session(self) -> Session:
        return self.config.stash[SESSION]

    def setup(self) -> None:
        session = self.palette_session
        host: Host = fill_fixtures(self)["palette_host"]
        if session.overlap is not None and self.nodeid in session.overlap:
            # Its conversation and its judging ran ahead of it (--palette-conversations): what they raised (an
            # ERROR, a skip) is raised here, as if they had run now.
            session.overlap.take(self.nodeid)
            return
        self._started = time.time()
        self.workspace = session.workspace(self.host_name, self.case.name, self.run_index)
        reason = session.unavailable.get(self.host_name)
        if reason:
            self._finish("skipped", [f"{self.host_name}: {reason}"])
            pytest.skip(f"{self.host_name}: {reason}")
        cannot = self.cannot_run()
        if cannot:
            self._finish("skipped", [cannot])
            pytest.skip(cannot)
        if self.case.problem:
            self._finish("error", [self.case.problem])
            # pytest.fail in setup makes an ERROR whose report is this text alone (setup reports do not
            # go through repr_failure).
            pytest.fail(f"case {self.case.name} cannot run here: {self.case.problem}", pytrace=False)
        self._setup_conversation(host)

    def cannot_run(self) -> str | None:
        """Why this item is skipped before it starts, beside an unavailable host; None for a case."""
        return None

    @property
    def grading_seconds(self) -> float:
        """The longest its judging may take beyond the build grace: none for a case (a family's graders take
        some: run/family_items.py)."""
        return 0.0

    def has_conversation(self) -> bool:
        """Whether this item will have a conversation (not skipped, not a case that cannot run, not judging a
        saved run): the ones --palette-conversations starts ahead."""
        session = self.palette_session
        return (session.settings.collect_dir is None and not session.unavailable.get(self.host_name)
                and not self.case.problem and not self.cannot_run())

    def converse(self, host: Host, ahead: Ahead | None = None) -> Transcript | str:
        """Open this item's folder and sandbox and have its conversation — in its setup, or ahead of it in a
        thread of its own (`ahead` then says what to close should the session end first). A str is the
        reason it did not start: the run already spent --palette-max-cost."""
        session = self.palette_session
        settings = session.settings
        self._started = time.time()
        self.workspace = session.workspace(self.host_name, self.case.name, self.run_index)
        if session.progress is not None:  # -v: its turns and commands are shown as they happen
            self.workspace = dataclasses.replace(self.workspace, watch=ItemWatch(self.name, session.progress))
        over = session.over_budget()
        if over:
            return over
        open_run(session.ledger)  # before an agent can write anything into the run
        self._sandbox = open_sandbox(self.workspace, settings.host, scripts=self.skill_scripts)
        on_open = None
        if ahead is not None:
            ahead.closers.append(self._sandbox.stop)
            on_open = functools.partial(setattr, ahead, "session")
        return converse(self.case, host, skill=self.skill, model=settings.model, settings=self.host_settings,
                        workspace=self.workspace, turn_timeout=settings.turn_timeout, sandbox=self._sandbox,
                        on_open=on_open, before=self.before_agent)

    @property
    def skill(self) -> SkillCard | None:
        """The skill this item's host offers: the session's skill under test."""
        return self.palette_session.skill

    @property
    def host_settings(self) -> HostSettings:
        """What its host is opened with: the session's (a family's item adds its agent profile)."""
        return self.palette_session.settings.host

    @property
    def skill_scripts(self) -> frozenset[str] | None:
        """The hashes of the scripts whose runs are recorded (`Session.skill_scripts`)."""
        return self.palette_session.skill_scripts

    def before_agent(self) -> None:
        """What is done in the item's new folder before its agent starts: nothing for a case (a task family's
        item lays out the agent's folder and runs its preflight: run/family_items.py)."""

    def ahead(self, host: Host, ahead: Ahead) -> None:
        """Its setup, ahead of it in a thread of its own: the conversation, then the judging (the graders' too), so
        items judged side by side never wait for one another. `ahead` says what to close should the session end
        first."""
        self._setup_conversation(host, ahead)

    def _setup_conversation(self, host: Host, ahead: Ahead | None = None) -> None:
        unwritable = None
        try:
            self._converse_and_judge(host, ahead)
        except OSError as error:  # the run folder went read-only, or the disk filled, under the harness
            unwritable = f"the harness could not write {error.filename or 'its files'}: {error.strerror or error}"
        except Exception as error:  # a bug of ours: recorded as an error of the run, traceback kept for us
            with contextlib.suppress(OSError):
                self._finish("error", [f"{self.host_name}: the harness failed: {type(error).__name__}: {error}"])
            raise
        if unwritable:  # outside the except: the ERROR says it once, not under the OSError it replaces
            self._error(unwritable)

    def _converse_and_judge(self, host: Host, ahead: Ahead | None) -> None:
        """Have the conversation (here, or in its thread ahead of it: `ahead`) and judge what it left; a fault of the
        host, backend or machine is an ERROR."""
        session = self.palette_session
        settings = session.settings
        failed: HostFailure | None = None
        not_started: str | None = None
        try:
            if settings.collect_dir is not None:
                open_run(session.ledger)
                self._transcript = as_left(self.case, self.workspace)
            else:
                result = self.converse(host, ahead)
                if isinstance(result, str):  # --palette-max-cost was reached before it started
                    self._finish("skipped", [result])
                    pytest.skip(result)
                assert isinstance(result, Transcript)
                self._transcript = result
        except HandedOver as handed:
            reason = str(handed)
            self._finish("skipped", [reason])
            pytest.skip(reason)
        except HostFailure as failure:
            failed = failure
        except NotStarted as refused:
            not_started = str(refused)
        else:
            not_started = None
        if not_started is not None:  # nothing was spent: no agent ran
            self._error(not_started)
        if failed is not None:  # outside the except: the ERROR is one line, not chained to the failure it names
            # What the turns took before the failure (retries, tokens) still counts: read back what was kept.
            self._transcript = Transcript.saved(self.workspace)
            self._error(str(failed), said=f"host {self.host_name} failed: {failed}")
        assert self._transcript is not None
        self.judge()

    def judge(self) -> None:
        """Judge what the conversation left: the skill's rules over the folder, then the model-graded checks. A
        fault on disk is an ERROR."""
        session = self.palette_session
        settings = session.settings
        assert self._transcript is not None
        if self._sandbox is not None:  # the last answers of the skill's runs are in their record before it is read
            self._sandbox.record_settled()
        judgement = judge_folder(
            self.case, self.workspace, host=self.host_name, started=self._transcript.started,
            grace=settings.build_grace, save=True, rules=session.rules, skill=session.judged_as,
            # With no skill installed (a baseline), no command of the agent's is a call of one.
            scripts=session.skill.script_names if session.skill is not None else (),
            # What the agent started and left running ends with its item, before its folder is measured.
            settle=self._sandbox.stop if self._sandbox is not None else None, copies=session.copies)
        self._evidence = judgement.evidence
        if judgement.fault:
            self._error(judgement.fault)
        verdict = judgement.verdict
        if verdict is not None:  # the model-graded checks, beside the rules: a model call, so never in rejudge
            verdict, self._graded = grade(self.case, judgement.evidence, verdict, session.graders)
        self._verdict = verdict

    def teardown(self) -> None:
        if self._sandbox is not None:  # stops what is left (setup may have failed midway), frees its user id
            self._sandbox.close()
            self._sandbox = None

    def _error(self, cause: str, said: str | None = None) -> NoReturn:
        """End the item as an ERROR of the run whose cause is one line; the record is kept when it can be."""
        try:
            self._finish("error", [f"{self.host_name}: {cause}"])
        except OSError:
            pass  # the ledger cannot be written either: the report still names the cause
        pytest.fail(f"{said or cause}\n(an error of the run, not a verdict on the skill)", pytrace=False)

    def runtest(self) -> None:
        verdict = self._verdict
        assert verdict is not None  # setup judged the folder, or ended the item as an ERROR
        self._finish("pass" if verdict.ok else "fail", list(verdict.failures), _judged(verdict, self._evidence))
        if not verdict.ok:
            raise PaletteFailure(verdict)

    def terms(self) -> Terms:
        """What this item's result depends on besides its case: its host's terms in this session."""
        return self.palette_session.terms(self.host_name)

    def family_run(self) -> FamilyRun | None:
        """What a task family's item records of its family (None for a case)."""
        return None

    def _finish(self, outcome: Outcome, failures: list[str], judged: Judged | None = None) -> None:
        """Append this item's record to the run's ledger, and carry it on the item's report: both as the ledger
        holds it, scrubbed of the session's secrets."""
        session = self.palette_session
        record = Record(
            run_id=session.run_id, case=self.case.name, host=self.host_name, run_index=self.run_index,
            workspace=self.workspace.relative.as_posix(), outcome=outcome,
            failures=tuple(failures), judged=judged, terms=self.terms(),
            usage=_usage(self._transcript, self._started, time.time(), session.price, self._graded),
            case_hash=self.case.digest(), tags=self.case.tags, family=self.family_run())
        line = append(session.ledger, record, session.secrets)
        written = from_json(line)
        self.user_properties += properties(written, line)
        # --palette-otlp: the item's trace leaves as it ends, from the record as the ledger holds it.
        tracing.item_ended(self.config, written, self._transcript.turns if self._transcript is not None else (),
                           self.workspace, session.secrets)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str | TerminalRepr:
        # Plain strings: they travel unchanged through xdist.
        if isinstance(excinfo.value, PaletteFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, self.case.line - 1, f"palette: {self.name}"


def _judged(verdict: Verdict, on_disk: evidence.Evidence) -> Judged:
    return Judged(slides=verdict.slides, has_plex=verdict.has_plex, deck=verdict.pptx is not None,
                  calls=verdict.commands, polls=verdict.polls, max_polls=verdict.max_polls,
                  context_expected=verdict.context_expected, context_reached=verdict.context_reached,
                  edit_expected=verdict.edit_expected, edit_called=verdict.edit_called,
                  replanned_after_edit=verdict.replanned_after_edit, spins=verdict.spins,
                  calls_from=verdict.calls_from, notes=verdict.notes, skill_expected=verdict.skill_expected,
                  skill_used=verdict.skill_used, rules=None if verdict.rules == PALETTE else verdict.rules,
                  deck_by=evidence.deck_by(on_disk), checks=verdict.checks,
                  score=verdict.score, blame=verdict.blame)


def _usage(transcript: Transcript | None, started: float, ended: float, price: Price | None = None,
           graded: Spent | None = None) -> Usage:
    """Time, turns, tokens and cost, summed over turns when the host reported them; None when it did not. The
    cost is the client's when it reported one, else the user's price for the tokens, else None. What the
    graders took (`graded`) is kept apart."""
    graded = graded or Spent()
    if transcript is None:
        return Usage(seconds=None, turns=None, input_tokens=None, output_tokens=None, cost_usd=None,
                     started_at=round(started, 3), ended_at=round(ended, 3), grader_input_tokens=graded.input_tokens,
                     grader_output_tokens=graded.output_tokens, grader_cost_usd=graded.cost_usd)
    turns = transcript.turns
    inputs = [t.usage.get("input_tokens") for t in turns]
    outputs = [t.usage.get("output_tokens") for t in turns]
    costs = [t.cost_usd for t in turns]
    retries = [t.retries for t in turns]
    calls = [t.model_calls for t in turns]
    commands = [t.commands for t in turns]
    reported = any(v is not None for v in inputs + outputs)
    input_tokens = sum(i or 0 for i in inputs) if reported else None
    output_tokens = sum(o or 0 for o in outputs) if reported else None
    cost: float | None = None
    source: CostSource | None = None
    if any(c is not None for c in costs):
        cost, source = round(sum(c or 0.0 for c in costs), 6), FROM_PROVIDER
    elif price is not None and reported:
        cost, source = price.cost(input_tokens or 0, output_tokens or 0), FROM_TABLE
    return Usage(
        seconds=transcript.seconds, turns=len(turns), input_tokens=input_tokens, output_tokens=output_tokens,
        cost_usd=cost, cost_source=source, started_at=round(started, 3), ended_at=round(ended, 3),
        retries=sum(r or 0 for r in retries) if any(r is not None for r in retries) else None,
        grader_input_tokens=graded.input_tokens, grader_output_tokens=graded.output_tokens,
        grader_cost_usd=graded.cost_usd, stops=tuple(t.stop or "unknown" for t in turns),
        model_calls=sum(c or 0 for c in calls) if any(c is not None for c in calls) else None,
        commands=sum(c or 0 for c in commands) if any(c is not None for c in commands) else None)


def properties(record: Record, line: bytes) -> list[tuple[str, object]]:
    """What JUnit shows of a record (flat, readable in CI), and the record itself (its ledger line) for the
    terminal table."""
    judged = record.judged
    return [
        ("case", record.case), ("host", record.host), ("run", record.run_index), ("model", record.terms.label),
        ("skill_hash", record.terms.skill_hash), ("case_hash", record.case_hash), ("verdict", record.outcome),
        ("score", "" if judged is None or judged.score is None else judged.score),
        ("checks", json.dumps({c.name: c.credit if c.passed is not None else "error" for c in judged.checks})
         if judged else "{}"),
        ("slides", judged.slides if judged else ""), ("polls", judged.polls if judged else ""),
        ("calls", " ".join(judged.calls) if judged else ""),
        ("seconds", "" if record.usage.seconds is None else record.usage.seconds),
        ("stops", " ".join(record.usage.stops)),
        ("failures", json.dumps(list(record.failures))),
        ("notes", json.dumps(list(judged.notes)) if judged else "[]"),
        (RECORD_PROPERTY, line.decode()),
    ]


def is_case_file(config: pytest.Config, path: Path) -> bool:
    """YAML in a case folder, or named on the command line wherever it lives."""
    if path.suffix not in (".yaml", ".yml"):
        return False
    return path in arguments(config) or any(path.is_relative_to(d) for d in config.stash[SESSION].settings.case_dirs)


def select(items: list[pytest.Item], settings: Settings) -> list[pytest.Item]:
    """The items this session runs: a resumed run's missing or errored ones, then this shard's share.

    Sharding is round-robin over the selection in collection order, so the runs of one slow case spread
    across shards and every item lands in exactly one shard.
    """
    cases = [item for item in items if isinstance(item, CaseItem)]
    if settings.resume_dir is not None:
        done = finished(settings.resume_dir)
        cases = [i for i in cases if (i.case.name, i.host_name, i.run_index) not in done]
    if settings.shard is not None:
        index, total = settings.shard
        cases = cases[index - 1::total]
    chosen = set(map(id, cases))
    return [item for item in items if not isinstance(item, CaseItem) or id(item) in chosen]


def timeouts(items: list[pytest.Item], settings: Settings) -> None:
    """Bound each item with pytest-timeout: every turn plus the build grace, with a minute to spare."""
    for item in items:
        if isinstance(item, CaseItem):
            turns = 1 + len(item.case.replies)
            item.add_marker(pytest.mark.timeout(settings.turn_timeout * turns + settings.build_grace
                                                + item.grading_seconds + 60))


def start_longest_first(items: list[pytest.Item], session: Session, config: pytest.Config) -> list[str]:
    """Where items run side by side (--palette-conversations, an xdist worker), start the longest expected first
    (run/schedule.py); the order in words, for -v. Other tests keep their places."""
    settings = session.settings
    worker = getattr(config, "workerinput", None)
    cases = [item for item in items if isinstance(item, CaseItem)]
    if len(cases) < 2 or settings.collect_dir is not None or (settings.conversations <= 1 and worker is None):
        return []
    model = settings.model.text
    expect = schedule.expected([((i.case.name, i.host_name, model), i.case) for i in cases], session.history())
    order = schedule.longest_first(expect)
    places = iter(n for n, item in enumerate(items) if isinstance(item, CaseItem))
    for place, index in zip(places, order, strict=True):
        items[place] = cases[index]
    said = schedule.said([cases[i].nodeid for i in order], [expect[i] for i in order])
    # xdist's controller collects nothing; every worker orders alike (the same history), and the first says it.
    if worker is not None and worker.get("workerid") == "gw0" and session.progress is not None:
        session.progress.send({"kind": "said", "lines": said})
    return said


def converse_ahead(items: list[pytest.Item], session: Session) -> Overlap | None:
    """Start the conversations of `items` ahead of them, `--palette-conversations` at once (None when 1)."""
    if session.settings.conversations <= 1:
        return None
    overlap = Overlap(session.settings.conversations)
    jobs = []
    hosts: dict[str, Host] = {}
    for item in items:
        if isinstance(item, CaseItem) and item.has_conversation():
            host = hosts[item.host_name] = session.hosts[item.host_name]
            jobs.append((item.nodeid, None if host.concurrent else item.host_name,
                         functools.partial(item.ahead, host)))
    warm_up(hosts.values(), session)
    overlap.start(jobs)
    return overlap


def warm_up(hosts: Iterable[Host], session: Session) -> None:
    """Each host starts what its conversations would wait for (`Host.warm_up`: it returns at once, the warming goes
    on meanwhile), before the first of them opens; and here, not in a thread, so that nothing it starts can outlive
    the session's end."""
    settings = session.settings
    route = route_of(settings.model)
    for host in hosts:
        with contextlib.suppress(Exception):  # a host that cannot warm says why as its first conversation opens
            host.warm_up(route, settings.host, agent_environment(None))
