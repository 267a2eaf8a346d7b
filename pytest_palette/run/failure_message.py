"""The one line CI shows of a failed palette item: the judge's words, not the heading of our report.

JUnit's `<failure message=…>` and the `-ra` summary line take a report's crash message; a report whose text is
a plain string has none, so they showed its first lines ("palette case x failed:"). On the controller, before
junitxml and the terminal read the report, its text is wrapped with a crash line of our own: a FAIL's failed
rules, "; "-joined, or an ERROR's cause — both from the item's record, which travels with the report (xdist
too). The text itself is unchanged; a report with a traceback keeps it, and only its crash line changes.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ..results.record import RecordError, from_json
from ..results.table import RECORD_PROPERTY
from ._private import ExceptionRepr, ReprFileLocation, TerminalRepr, TerminalWriter


@dataclass(eq=False)
class WordedFailure(TerminalRepr):
    """A palette item's failure text, with the judge's words as its crash line."""

    text: str
    reprcrash: ReprFileLocation

    def toterminal(self, tw: TerminalWriter) -> None:
        for line in self.text.splitlines():
            tw.line(line)


def words(report: pytest.TestReport) -> str | None:
    """A failed palette item's failure words from its record ("; "-joined); None for any other report."""
    for name, value in report.user_properties:
        if name != RECORD_PROPERTY:
            continue
        try:
            record = from_json(str(value))
        except RecordError:  # not ours: a user's property of the same name
            return None
        if record.outcome in ("fail", "error") and record.failures:
            return "; ".join(record.failures)
    return None


def reword(report: pytest.TestReport) -> None:
    """Give a failed palette item's report the judge's words as its crash message (other reports: unchanged)."""
    said = words(report) if report.failed else None
    if said is None:
        return
    crash = ReprFileLocation(report.location[0], (report.location[1] or 0) + 1, said)
    if isinstance(report.longrepr, str):
        report.longrepr = WordedFailure(report.longrepr, crash)
    elif isinstance(report.longrepr, ExceptionRepr):  # an ERROR raised while handling the host's failure
        report.longrepr.reprcrash = crash
