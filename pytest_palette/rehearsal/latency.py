"""How long the rehearsal model takes to answer a call: a real model's latency, to measure a harness under it.

`--palette-rehearsal-latency SPEC`: `2` (two seconds a call), `2,jitter=0.5` (each call 1.5–2.5 s), with
`seed=N` for another deterministic draw. The delay of call k depends only on the seed and k, so two runs wait
alike. Applied by the in-process model (react) and by the HTTP server (cuga, claude) before each answer.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import threading
import time


class ModelLatency:
    """A delay per model call: `seconds` ± `jitter`, drawn from `seed` and the call's number."""

    def __init__(self, seconds: float, jitter: float = 0.0, seed: int = 0) -> None:
        self.seconds, self.jitter, self.seed = seconds, jitter, seed
        self._calls = itertools.count()
        self._lock = threading.Lock()

    @classmethod
    def parse(cls, text: str) -> ModelLatency:
        """`SECONDS[,jitter=SECONDS][,seed=N]`; ValueError in one line naming the part that is wrong."""
        parts = [part.strip() for part in text.split(",") if part.strip()]
        if not parts:
            raise ValueError("expected seconds per call, e.g. 2 or 2,jitter=0.5")
        seconds, jitter, seed = _number(parts[0], "seconds"), 0.0, 0
        for part in parts[1:]:
            name, sep, value = part.partition("=")
            if name == "jitter" and sep:
                jitter = _number(value, "jitter")
            elif name == "seed" and sep and value.strip().isdigit():
                seed = int(value)
            else:
                raise ValueError(f"{part!r} is not jitter=SECONDS or seed=N")
        if jitter > seconds:
            raise ValueError(f"jitter {jitter:g} is larger than the latency {seconds:g}: a delay cannot be negative")
        return cls(seconds, jitter, seed)

    def delay(self, call: int) -> float:
        """The delay of call number `call`: seconds ± jitter, uniform, from the seed and the number alone."""
        if not self.jitter:
            return self.seconds
        digest = hashlib.sha256(f"{self.seed}:{call}".encode()).digest()
        unit = int.from_bytes(digest[:8], "big") / 2**64
        return self.seconds + (2 * unit - 1) * self.jitter

    def wait(self) -> float:
        """Sleep this call's delay (other calls go on meanwhile); return it."""
        with self._lock:
            call = next(self._calls)
        seconds = self.delay(call)
        time.sleep(seconds)
        return seconds

    def __str__(self) -> str:
        return f"{self.seconds:g} s a call" + (f" ± {self.jitter:g} s" if self.jitter else "")


def _number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} {text.strip()!r} is not a number of seconds >= 0")
    return value
