"""The second wall at pytest's seams: every report and warning is scrubbed of the session's secrets
(results/redaction.py) before JUnit, the terminal or the table read it.

An item's report carries its record (already scrubbed as the ledger holds it), its failure text, its captured
output and its properties; a collection's report carries a case file's error. Each could hold what a message
was never meant to: this takes the secrets out of all of them, on the controller and on each xdist worker alike.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest

from ..results.redaction import Secrets
from ._private import ReprFileLocation
from .failure_message import WordedFailure, reword


def scrub(report: pytest.TestReport | pytest.CollectReport, secrets: Secrets) -> None:
    """Take every secret out of what JUnit and the terminal show of `report`. A text that holds none keeps its
    form (a traceback stays one); one that holds some becomes plain text, its crash line scrubbed too."""
    longrepr: Any = report.longrepr
    if isinstance(longrepr, tuple):  # a skip: (path, line, reason)
        report.longrepr = tuple(secrets.scrub(p) if isinstance(p, str) else p for p in longrepr)  # type: ignore[assignment]
    elif longrepr is not None and secrets.found(text := str(longrepr)):
        crash = getattr(longrepr, "reprcrash", None)
        report.longrepr = secrets.scrub(text) if crash is None else WordedFailure(
            secrets.scrub(text), ReprFileLocation(crash.path, crash.lineno, secrets.scrub(crash.message)))
    report.sections = [(title, secrets.scrub(content)) for title, content in report.sections]
    if isinstance(report, pytest.TestReport):
        report.user_properties = [(name, secrets.scrub(value) if isinstance(value, str) else value)
                                  for name, value in report.user_properties]


class Scrubber:
    """The session's seams to pytest's reports and warnings: registered once per process, before anything is
    collected."""

    def __init__(self, secrets: Secrets | Callable[[], Secrets]) -> None:
        # A callable: the session's, read each time (a task family's values join them as it is collected).
        self._secrets = secrets

    @property
    def secrets(self) -> Secrets:
        return self._secrets() if callable(self._secrets) else self._secrets

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Before junitxml, the terminal and the table read it: the judge's words as its crash line
        (failure_message.py), then no secret anywhere in it."""
        reword(report)
        scrub(report, self.secrets)

    @pytest.hookimpl(tryfirst=True)
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        scrub(report, self.secrets)

    @pytest.hookimpl(tryfirst=True)
    def pytest_warning_recorded(self, warning_message: warnings.WarningMessage) -> None:
        """The terminal's summary of warnings reads the message after this."""
        text = str(warning_message.message)
        if self.secrets.found(text):
            warning_message.message = self.secrets.scrub(text)
