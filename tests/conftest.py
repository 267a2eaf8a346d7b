"""Shared fixtures: every test starts from an environment with no Palette settings of the developer's."""

from __future__ import annotations

import pytest

# A developer's real Palette, a leaked trace path or a latency setting would change what these tests
# measure; each test that needs one sets it itself.
_PALETTE_VARIABLES = ("PALETTE_HOME", "PALETTE_URL", "PALETTE_TRACE", "PALETTE_ENGINE_LATENCY", "PALETTE_PYTHON")


@pytest.fixture(autouse=True)
def _clean_palette_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _PALETTE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
