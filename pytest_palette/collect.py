"""Case files as pytest collectors, and one item per (case, host).

An item runs its conversation in setup, so a host that fails (timeout, crash, missing client) makes the
item ERROR; the call phase only judges what is on disk, so a FAIL is always a verdict on the skill.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _pytest._code.code import ExceptionInfo, TerminalRepr

from . import stash
from ._fixtures import fill_fixtures, init_fixtures
from .backend import agent_environment
from .cases import Case, CaseFileError, load_cases
from .hosts.base import Host
from .judge import Verdict, explain, judge
from .ledger import LEDGER_NAME
from .ledger import append as append_record
from .manual import RUN_SHEET, ManualHost, append_to_run_sheet, prepare
from .records import ItemIdentity, fingerprint
from .records import build as build_record
from .runner import HostFailure, as_left, converse, workspace_name
from .skill import load_card, skill_hash


class PaletteFailure(AssertionError):
    """The judge's verdict was not a pass."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__("\n".join(explain(verdict)))
        self.verdict = verdict


class CaseFile(pytest.File):
    """A YAML file holding a list of cases."""

    def collect(self) -> Iterator[CaseItem]:
        try:
            cases = load_cases(self.path)
        except CaseFileError as error:
            raise self.CollectError(str(error)) from None
        seen = self.config.stash.setdefault(stash.CASE_NAMES, {})
        for case in cases:
            where = f"{case.path}:{case.line}"
            if case.name in seen and seen[case.name] != where:
                raise self.CollectError(f"{where}: case name {case.name!r} is already used at {seen[case.name]}")
            seen[case.name] = where
        settings = self.config.stash[stash.SETTINGS]
        for tag in sorted({tag for case in cases for tag in case.tags}):
            # Tags become registered markers, so `-m corpus` works under --strict-markers.
            self.config.addinivalue_line("markers", f"{tag}: pytest-palette case tag")
        for case in cases:
            for host in settings.hosts:
                for index in range(1, settings.runs + 1):
                    label = host if settings.runs == 1 else f"{host}-{index}"
                    yield CaseItem.from_parent(self, name=f"{case.name}[{label}]", case=case, host=host,
                                               run_index=index)


class CaseItem(pytest.Item):
    """One run of one case on one host."""

    def __init__(self, *, case: Case, host: str, run_index: int = 1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case
        self.host_name = host
        self.run_index = run_index
        self.stash[stash.HOST_NAME] = host
        for tag in case.tags:
            self.add_marker(tag)
        init_fixtures(self, "palette_host")

    def setup(self) -> None:
        self._started = time.time()
        host: Host = fill_fixtures(self)["palette_host"]
        settings = self.config.stash[stash.SETTINGS]
        digest = skill_hash(settings.skill_dir)
        describe = host.describe(settings.model, settings.host)
        self.identity = ItemIdentity(
            run_id=self.config.stash[stash.RUN_ID], case=self.case, host=self.host_name, model=settings.model,
            run_index=self.run_index, skill_hash=digest, fingerprint=fingerprint(settings, digest),
            scaffold={k: v for k, v in describe.items() if k != "model"})
        self.user_properties += [
            ("case", self.case.name), ("host", self.host_name), ("run", self.run_index),
            ("model", describe.get("model", "")), ("skill_hash", digest), ("case_hash", self.case.digest()),
        ]
        reason = host.unavailable()
        if reason:
            self._finish("skipped", [f"{self.host_name}: {reason}"])
            pytest.skip(f"{self.host_name}: {reason}")
        if self.case.problem:
            self._error(self.case.problem)
            # pytest.fail in setup makes an ERROR whose report is this text alone (setup reports do not
            # go through repr_failure).
            pytest.fail(f"case {self.case.name} cannot run here: {self.case.problem}", pytrace=False)
        skill = load_card(settings.skill_dir)
        workspace = self.run_folder / self.host_name / workspace_name(self.case.name, self.run_index, settings.runs)
        if isinstance(host, ManualHost) and settings.collect_dir is None:
            sheet = self.run_folder / self.host_name / RUN_SHEET
            append_to_run_sheet(sheet, prepare(self.case, skill, workspace, agent_environment(None)))
            self._finish("skipped", [f"prepared for a person to run: {sheet}"])
            pytest.skip(f"prepared for a person to run: follow {sheet}")
        try:
            if settings.collect_dir is not None:
                record = as_left(self.case, workspace, settings.build_grace)
            else:
                record = converse(self.case, host, skill, settings.model, settings.host, workspace,
                                  settings.turn_timeout, settings.build_grace)
        except HostFailure as failure:
            self._error(f"{self.host_name}: {failure}")
            pytest.fail(f"host {self.host_name} failed: {failure}\n"
                        "(an error of the run, not a verdict on the skill)", pytrace=False)
        self.stash[stash.RECORD] = record
        self.user_properties.append(("seconds", record.seconds))

    @property
    def run_folder(self) -> Path:
        settings = self.config.stash[stash.SETTINGS]
        return settings.collect_dir or settings.run_root / self.config.stash[stash.RUN_ID]

    def _error(self, message: str) -> None:
        self.user_properties += [("verdict", "error"), ("failures", json.dumps([message]))]
        self._finish("error", [message])

    def _finish(self, outcome: str, failures: list[str], verdict: Verdict | None = None) -> None:
        """Append this item's record to the run's ledger: every finished item leaves one."""
        run = self.stash.get(stash.RECORD, None)
        record = build_record(self.identity, outcome, failures, self._started, time.time(), verdict, run)
        append_record(self.run_folder / LEDGER_NAME, record)

    def runtest(self) -> None:
        record = self.stash[stash.RECORD]
        assert record.evidence is not None
        verdict = judge(self.case, record.evidence, self.host_name)
        self.user_properties += [
            ("verdict", "pass" if verdict.ok else "fail"), ("slides", verdict.slides), ("polls", verdict.polls),
            ("calls", " ".join(verdict.commands)), ("failures", json.dumps(list(verdict.failures))),
        ]
        self._finish("pass" if verdict.ok else "fail", list(verdict.failures), verdict)
        if not verdict.ok:
            raise PaletteFailure(verdict)

    def repr_failure(self, excinfo: ExceptionInfo[BaseException], style: Any = None) -> str | TerminalRepr:
        # Plain strings: they travel unchanged through xdist.
        if isinstance(excinfo.value, PaletteFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, self.case.line - 1, f"palette: {self.name}"
