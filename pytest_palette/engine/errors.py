"""The one exception type the engine raises for problems a caller should see."""

from __future__ import annotations


class EngineError(Exception):
    """A user-facing failure; the CLI prints it as one ``error: ...`` line and exits 1."""
