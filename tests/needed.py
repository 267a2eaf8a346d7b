"""A tool some tests need (a browser, Arize Phoenix): skipped where it is missing on a developer's machine, a failure
where it must be there (CI, or the tool's own REQUIRE_… variable), so a CI run cannot pass by skipping them."""

from __future__ import annotations

import os
from collections.abc import Sequence

import pytest


def required(variables: Sequence[str]) -> bool:
    """Whether any of `variables` is set to anything but empty, 0 or false."""
    return any(os.environ.get(name, "").strip().lower() not in ("", "0", "false") for name in variables)


def require(reason: str | None, variables: Sequence[str], tests: str) -> None:
    """Nothing when `reason` (what is missing) is None; else skip the calling test with it, or fail it where one of
    `variables` says the tool must be there (`tests`: whose tests they are, in the words)."""
    if reason is None:
        return
    if required(variables):
        pytest.fail(f"{reason} — and {' or '.join(variables)} is set, so the {tests} tests may not skip", pytrace=False)
    pytest.skip(reason)
