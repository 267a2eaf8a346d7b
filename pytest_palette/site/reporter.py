"""`--palette-html DIR`: the session's run written as a site when the session ends (on the controller only,
after every worker's record is in the ledger)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ..results.ledger import find
from ..results.redaction import Secrets
from .build import SiteError, write


class SiteReporter:
    def __init__(self, run_dir: Path, out: Path, secrets: Secrets | Callable[[], Secrets] | None = None) -> None:
        self.run_dir = run_dir
        self.out = out
        # A callable: the session's, read when the site is written (a family's values join them at collection).
        self._secrets = secrets

    @property
    def secrets(self) -> Secrets | None:
        return self._secrets() if callable(self._secrets) else self._secrets

    @pytest.hookimpl(trylast=True)  # after the table: the site's address is the last thing to read
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.run_dir.is_dir() or not find(self.run_dir).ledgers:
            terminalreporter.write_line(f"palette: no site written to {self.out}: this session recorded nothing")
            return
        try:
            written = write([self.run_dir], self.out, secrets=self.secrets)
        except SiteError as error:
            terminalreporter.write_line(f"palette: no site written: {error}", red=True)
            return
        terminalreporter.write_line(f"palette: site of {written.items} item(s) written to "
                                    f"{written.index.as_uri()} ({written.seconds:.1f} s)")
