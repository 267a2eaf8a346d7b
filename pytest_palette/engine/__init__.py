"""The reference engine: an offline, deterministic stand-in for the Palette service.

It mirrors the command line of Palette's ``palette.py`` (``build-plan``, ``edit-plan``,
``build-deck``) closely enough for ``deck.py`` to drive it, so benchmark cases can run
without network or model access. It is not the real Palette service and never claims to be.
"""

from __future__ import annotations

ENGINE_NAME = "the pytest-palette reference engine"
