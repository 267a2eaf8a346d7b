"""pytest-palette: benchmark how well agent hosts drive the Palette skill."""

from __future__ import annotations

__version__ = "0.1.0"
