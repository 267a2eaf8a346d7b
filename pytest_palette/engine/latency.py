"""Simulated latency, so hold/poll behaviour and timeouts can be tested offline.

``PALETTE_ENGINE_LATENCY`` is either one number of seconds for every stage, or a
comma-separated ``stage=seconds`` list (stages: plan, edit, build; missing ones are 0).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping

from .errors import EngineError

ENV_VAR = "PALETTE_ENGINE_LATENCY"
STAGES = ("plan", "edit", "build")


def _seconds(text: str, raw: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise EngineError(
            f"{ENV_VAR}={raw!r} is malformed: {text.strip()!r} is not a number of seconds >= 0 "
            "(expected e.g. 2.5 or plan=2,edit=1,build=5)"
        )
    return value


def parse_latency(raw: str | None) -> dict[str, float]:
    """Return the delay per stage; an unset or blank value means no delay."""
    delays = {stage: 0.0 for stage in STAGES}
    if raw is None or not raw.strip():
        return delays
    if "=" not in raw:
        seconds = _seconds(raw, raw)
        return {stage: seconds for stage in STAGES}
    for item in raw.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        key = key.strip().lower()
        if not sep or key not in STAGES:
            raise EngineError(
                f"{ENV_VAR}={raw!r} is malformed: {item.strip()!r} is not stage=seconds "
                f"with stage one of {', '.join(STAGES)}"
            )
        delays[key] = _seconds(value, raw)
    return delays


def latency_for(stage: str, environ: Mapping[str, str] | None = None) -> float:
    env = os.environ if environ is None else environ
    return parse_latency(env.get(ENV_VAR))[stage]


def simulate(seconds: float) -> None:
    """Sleep before a stage finishes; a no-op for zero."""
    if seconds > 0:
        time.sleep(seconds)
