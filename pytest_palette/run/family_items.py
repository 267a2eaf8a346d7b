"""A task family as pytest items: one per (task, host, run), graded by the family's hooks and hidden tests
(pytest_palette/families/, docs/families.md).

A family item is a case item whose case is the task's prompt (one turn: the agent works until it says it is done)
and whose judge is the family's graders. Before its agent starts, its folder is laid out (the family's and the
task's `workdir/` and `specs/`, the rendered `.env` files) and `preflight.sh` runs: a preflight that fails is an
ERROR with no agent started. After the agent, the invariants and the hidden checks grade the folder and everything
the graders started is ended. A grader's fault is an ERROR naming it, never a failed check. Everything else — the
host, the sandbox, the ledger, shards, resume, -k/-m, JUnit, the table — is the case item's.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ..arena import command_log
from ..cases import Case, Expect, item_name
from ..families import grading, hidden_tests, judge_task, staging
from ..families.errors import FamilyError
from ..families.hooks import HOOK_SECONDS, Graders
from ..families.identity import revision, skill_set_hash, skills_hash, unstaged_packs
from ..families.layout import PROMPT, Family, Task, is_family
from ..families.profiles import agent_profile, judge_profile
from ..hosts.base import HostSettings
from ..models import rehearsal_policy
from ..rehearsal.reference import Reference, Solutions
from ..results.record import GATE, NO_SKILL, Check, FamilyRun, Judged, Outcome, Terms
from ..results.redaction import Secrets
from ..skill import SkillCard, SkillNotFound, load_card
from ._private import TerminalRepr
from .conversation import NotStarted
from .grading import GraderError, Spent, conversation_text
from .items import CaseItem
from .session import CASE_NAMES, SESSION, arguments

#: The solutions of the tasks this session collected: what the oracle agents know (rehearsal/reference.py).
SOLUTIONS = pytest.StashKey[Solutions]()
#: The tag (and marker) of every family item: `-m family`.
TAG = "family"
#: The judge gate's check (`judge.task.md`).
JUDGE = "judge"


def task_case(task: Task) -> Case:
    """The scripted user of a task: its prompt (and the supervisor's context, where there is one), no reply."""
    request = task.prompt.strip()
    if task.supervisor:
        request += f"\n\n## The supervisor's context\n\n{task.supervisor.strip()}"
    return Case(name=task.id, covers=f"task {task.id} of the family {task.family.root.name}", tags=(TAG,),
                request=request, context="", replies=(), expect=Expect(deck=False), path=task.folder / PROMPT,
                line=1)


@dataclass(frozen=True)
class Identity:
    """What identifies the family a run had (families/identity.py), read once per family."""

    skill_set_hash: str
    skills_hash: str
    revision: str
    unstaged_packs: tuple[str, ...]


class FamilyFailure(AssertionError):
    """The graders' verdict on a task was not a pass."""


class FamilyDir(pytest.Directory):
    """A family root: its tasks, each on each host and run."""

    def collect(self) -> Iterator[FamilyItem]:
        session = self.config.stash[SESSION]
        settings = session.settings
        try:
            family = Family.load(self.path)
            tasks = family.tasks()
            self.skills = family_skills(family.root)
            self.profile = agent_profile(family.root, settings.agent_profile)
            self.judge_profile = judge_profile(family.root, settings.judge_profile)
            environments = [staging.environment(task, os.environ) for task in tasks]
        except FamilyError as error:
            raise self.CollectError(str(error)) from None
        root = family.root
        self.identity = Identity(skill_set_hash(root), skills_hash(root), revision(root), tuple(unstaged_packs(root)))
        # Every value the family's .env files give is a secret, whatever its name: out of every record and report.
        session.add_secrets(pair for environment in environments for pair in environment.values.items())
        solutions = self.config.stash.setdefault(SOLUTIONS, Solutions())
        seen = self.config.stash.setdefault(CASE_NAMES, {})
        for task in tasks:
            solutions.add(task_case(task).opening, task.folder)
            where = f"{task.folder / PROMPT}:1"
            if task.id in seen and seen[task.id] != where:
                raise self.CollectError(f"{where}: task {task.id!r} has the name of the case at {seen[task.id]}")
            seen[task.id] = where
        self.config.addinivalue_line("markers", f"{TAG}: an item of a task family")
        for task in tasks:
            for host in settings.hosts:
                for index in range(1, settings.runs + 1):
                    name = item_name(task.id, host, None if settings.runs == 1 else index)
                    yield FamilyItem.from_parent(self, name=name, task=task, host=host, run_index=index)


def family_skills(root: Path) -> tuple[SkillCard, ...]:
    """The skills a family's `.claude/skills/` offers, by folder name; () when it has none."""
    folder = root / ".claude" / "skills"
    found = sorted(entry for entry in folder.iterdir() if (entry / "SKILL.md").is_file()) if folder.is_dir() else []
    cards = []
    for entry in found:
        try:
            cards.append(load_card(entry))
        except (SkillNotFound, OSError, UnicodeDecodeError) as error:
            raise FamilyError(f"{entry / 'SKILL.md'}: {error}") from None
    names = [card.name for card in cards]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise FamilyError(f"{folder}: two skills are named {', '.join(twice)} (SKILL.md's name)")
    return tuple(cards)


class FamilyItem(CaseItem):
    """One run of one task on one host."""

    def __init__(self, *, task: Task, **kwargs: Any) -> None:
        super().__init__(case=task_case(task), **kwargs)
        self.task = task
        self._graders: Graders | None = None
        self._grade: grading.Grade | None = None
        self._secrets = Secrets()
        self._redacted: tuple[list[str], list[str]] = ([], [])

    @property
    def family_dir(self) -> FamilyDir:
        parent = self.parent
        assert isinstance(parent, FamilyDir)
        return parent

    @property
    def skill(self) -> SkillCard | None:
        """The family's first skill (by folder name); the others go to the host in `host_settings.skills`."""
        skills = self.family_dir.skills
        return skills[0] if skills else None

    @property
    def host_settings(self) -> HostSettings:
        """The session's, with the family's agent profile and its further skills."""
        return dataclasses.replace(super().host_settings, profile=self.family_dir.profile,
                                   skills=self.family_dir.skills[1:])

    @property
    def skill_scripts(self) -> frozenset[str] | None:
        return None  # a family's skills keep no record of their runs: Palette's protocol is not theirs

    @property
    def grading_seconds(self) -> float:
        """The longest its graders may take: each hook, and each hidden check, at its bound."""
        return 2 * HOOK_SECONDS + hidden_tests.CHECK_SECONDS * len(self.task.checks)

    def cannot_run(self) -> str | None:
        """A reference agent (the oracle) skips a task that has no script for it, with the reason."""
        policy = rehearsal_policy(self.palette_session.settings.model) \
            if self.palette_session.settings.model.provider == "rehearsal" else None
        return policy.missing(self.task.folder) if isinstance(policy, Reference) else None

    def terms(self) -> Terms:
        """The host's terms, with the family's skill set as the skill under test."""
        identity = self.family_dir.identity
        return msgspec.structs.replace(super().terms(), skill_hash=identity.skill_set_hash
                                       or identity.skills_hash or NO_SKILL)

    @property
    def agent_folder(self) -> Path:
        """Where the agent's commands start (its host says): where the task is laid out and graded."""
        return self.palette_session.hosts[self.host_name].agent_folder(self.workspace)

    def before_agent(self) -> None:
        """Lay the agent's folder out, hand it to the agent's user id, and run preflight; NotStarted when either
        fails (no agent runs, nothing is spent)."""
        work = self.agent_folder
        settings = self.palette_session.settings
        try:
            environment = staging.stage(self.task, work, os.environ)
        except FamilyError as error:
            raise NotStarted(str(error)) from None
        self._secrets = environment.secrets(os.environ)
        uid = self._sandbox.uid if self._sandbox is not None else None
        if uid is not None:
            staging.hand_over(self.workspace.work, uid)
        self._graders = Graders(self.task, work, environment.values, mode=settings.host.sandbox)
        ran = self._graders.hook("preflight.sh")
        self._graders.release_folder()
        if ran is not None and ran.failed:
            raise NotStarted(f"preflight failed: {self._secrets.scrub(ran.fault())} (no agent ran; nothing was "
                             "spent)")

    def judge(self) -> None:
        """The graders over what the agent left: its processes ended first; a grader's fault is an ERROR."""
        if self._sandbox is not None:
            self._sandbox.stop()
        graders, self._graders = self._graders, None
        work = self.agent_folder
        if graders is None:  # a saved run (--palette-collect): its graders from the start, preflight too
            environment = staging.environment(self.task, os.environ)
            self._secrets = environment.secrets(os.environ)
            grade = grading.grade(self.task, work, mode=self.palette_session.settings.host.sandbox)
        else:
            left = hidden_tests.snapshot(work)
            try:
                graders.take_folder()
                grade = grading.after_agent(self.task, graders, self._secrets)
            finally:
                graders.close()
            # The folder is evidence: the graders leave it byte for byte as the agent did, or the run says so.
            differences = hidden_tests.changed(left, hidden_tests.snapshot(work))
            if differences:
                self._grade = grade
                self._error(f"the graders left the agent's folder changed: {', '.join(differences[:5])}"
                            + (f" and {len(differences) - 5} more" if len(differences) > 5 else ""))
        if grade.healthy and self.task.judge is not None and self.palette_session.graders.validity is not None:
            grade = self._judge_gate(grade)
        self._grade = grade
        if grade.preflight_error:
            self._error(f"preflight failed: {grade.preflight_error}")
        if grade.errors:
            self._error("; ".join(grade.errors))

    def _judge_gate(self, grade: grading.Grade) -> grading.Grade:
        """The judge gate (`judge.task.md`, graded by `--palette-validity` in a session of its own): a gate, so a
        failure sets the score to 0 and a success leaves the mechanical score as it is. A judge that cannot judge
        is an ERROR naming it, never a failure of the skill."""
        judge = self.palette_session.graders.validity
        assert judge is not None and self.task.judge is not None
        identity = self.family_dir.identity
        prompt = judge_task.fill(self.task.judge, {
            "AGENT_INSTRUCTIONS": self.task.prompt, "AGENT_PROFILE": self.family_dir.profile or "",
            "AGENT_TRACE_PATH": str(self.workspace.commands), "GRADE_RESULT": judge_task.grade_result(grade.to_data()),
            "SKILL_SET_HASH": identity.skill_set_hash, "TASK_ID": self.task.id, "TASK_DIR": str(self.agent_folder)})
        answers = [turn.answer or "" for turn in self._transcript.turns] if self._transcript is not None else []
        conversation = conversation_text(self.case, answers)
        commands = [run.command for run in command_log.read(self.workspace.commands)]
        failed: str | None = None
        try:
            said = judge.judge(self.family_dir.judge_profile, prompt, conversation, commands)
        except GraderError as error:
            failed = str(error)
        if failed is not None:  # outside the except: the ERROR is one line, not chained
            self._error(f"the judge gate (--palette-validity) could not judge: {self._secrets.scrub(failed)}")
        self._graded = Spent().add(said)
        check = Check(name=JUDGE, role=GATE, weight=1.0, passed=said.score >= 1, credit=1.0 if said.score >= 1 else
                      0.0, words=self._secrets.scrub(f"{said.reason} ({said.grader})"))
        return dataclasses.replace(grade, checks=(*grade.checks, grading.Graded("judge", check)))

    def teardown(self) -> None:
        if self._graders is not None:  # the item ended before its grading: what preflight started ends with it
            self._graders.close()
            self._graders = None
        super().teardown()

    def runtest(self) -> None:
        grade = self._grade
        assert grade is not None  # setup graded the folder, or ended the item as an ERROR
        checks = tuple(graded.check for graded in grade.checks)
        failures = [f"{'gate' if c.role == 'gate' else 'check'} {c.name} failed" + (f": {c.words}" if c.words else "")
                    for c in checks if c.passed is False and (c.role == "gate" or c.weight > 0)]
        judged = Judged(slides=None, has_plex=False, deck=False, calls=(), polls=None, max_polls=None,
                        context_expected=False, context_reached=False, edit_expected=False, edit_called=False,
                        replanned_after_edit=False, rules=TAG, checks=checks, score=grade.score)
        self._finish("pass" if grade.verdict == "pass" else "fail", failures, judged)
        if grade.verdict != "pass":
            raise FamilyFailure("\n".join([f"task {self.task.id} scored {grade.score:.2f}", *failures]))

    def _finish(self, outcome: Outcome, failures: list[str], judged: Judged | None = None) -> None:
        """Once the item is over, no secret stays in its folder (the rendered .env files hold the family's values),
        then its record."""
        if self._secrets.pattern is not None:
            self._redacted = staging.redact(self.workspace.folder, self._secrets)
        super()._finish(outcome, failures, judged)

    def family_run(self) -> FamilyRun:
        identity = self.family_dir.identity
        grade = self._grade
        return FamilyRun(
            family=self.task.family.root.name, task=self.task.id, revision=identity.revision,
            skills_hash=identity.skills_hash, unstaged_packs=identity.unstaged_packs,
            sources=tuple(g.source for g in grade.checks) if grade else (),
            malformed=grade.malformed if grade else 0, backed_up=grade.backed_up if grade else (),
            graders=grade.sandbox if grade else "", redacted=tuple(self._redacted[0]),
            unredacted=tuple(self._redacted[1]))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str | TerminalRepr:
        if isinstance(excinfo.value, FamilyFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.task.folder / PROMPT, 0, f"palette family: {self.name}"


def collect_directory(path: Path, parent: pytest.Collector) -> FamilyDir | None:
    """A family root is collected as a family, never as a folder of Python tests (its hidden tests are not ours)."""
    named = path.resolve() in arguments(parent.config)
    return FamilyDir.from_parent(parent, path=path) if is_family(path, named) else None


__all__ = ["SOLUTIONS", "FamilyDir", "FamilyItem", "collect_directory", "is_family", "task_case"]
