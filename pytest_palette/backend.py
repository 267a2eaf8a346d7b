"""Which Palette answers deck.py: the real one at $PALETTE_HOME, or the reference engine."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path


def describe_backend(env: Mapping[str, str] | None = None) -> str:
    environ = os.environ if env is None else env
    home = environ.get("PALETTE_HOME", "").strip()
    if home:
        return f"Palette at {home}" + ("" if (Path(home) / "palette.py").is_file() else " (no palette.py there!)")
    return "reference engine (pytest_palette.engine, python-pptx)"


def agent_environment(trace: Path | None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment an agent's shell gets: the caller's, plus the trace path for this conversation.

    PALETTE_PYTHON lets deck.py, which runs under whatever `python3` the agent's shell finds, start
    the reference engine with an interpreter that has this package installed.
    """
    env: MutableMapping[str, str] = dict(os.environ if base is None else base)
    env.setdefault("PALETTE_PYTHON", sys.executable)
    env.pop("PALETTE_TRACE", None)
    if trace is not None:
        env["PALETTE_TRACE"] = str(trace)
    return dict(env)
