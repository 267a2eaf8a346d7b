"""Transient model errors the rehearsal server injects on a schedule, so retries are tested offline.

    --palette-rehearsal-faults 429:0.2,500:0.05,seed=7
    python -m pytest_palette.rehearsal.server --faults 429:0.2,reset:0.05

Each model call (POST /v1/chat/completions, /v1/messages or /v1/responses) draws from the schedule by its sequence
number on the server and the seed, so the same sequence of calls meets the same faults. Kinds:

* `429`: rate limited, with `Retry-After: 1` and `retry-after-ms` (the openai and Anthropic SDKs prefer the
  milliseconds), so a client that honours them waits a fraction of a second;
* a 5xx code (`500`, `502`, `503`, `529`): a server error or overload;
* `reset`: the connection is reset with no response;
* `slow`: no answer at all — the call is held until its client gives up on it (its own timeout, or its turn's),
  the server stops, or SLOW_HOLD has passed: a model that does not answer in time.

A call the server has already failed twice (the same request body) is answered: a client that retries at least
twice always gets through, so a run's outcome never depends on a lucky draw. A schedule whose rates add up to 1
fails every call, for testing what a client does when its retries run out.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

#: Consecutive faults on one request body before it is answered, unless every call is to fail.
MAX_IN_A_ROW = 2
#: What a 429 asks the client to wait: small, so tests do not wait; Retry-After itself holds whole seconds only.
RETRY_AFTER_MS = 100
STATUS_KINDS = {"429": "rate_limit_error", "500": "api_error", "502": "api_error", "503": "api_error",
                "529": "overloaded_error"}
KINDS = (*STATUS_KINDS, "reset", "slow")
#: The longest a `slow` call is held: longer than any turn a test gives it.
SLOW_HOLD = 600.0


@dataclass(frozen=True)
class FaultSchedule:
    """Which kinds of fault, at what rate each, for which seed."""

    rates: tuple[tuple[str, float], ...]
    seed: int = 0

    @classmethod
    def parse(cls, text: str) -> FaultSchedule:
        """`429:0.2,500:0.05,seed=7`; ValueError saying what is wrong."""
        rates: dict[str, float] = {}
        seed = 0
        for part in (p.strip() for p in text.split(",")):
            if not part:
                continue
            if part.startswith("seed="):
                try:
                    seed = int(part.removeprefix("seed="))
                except ValueError:
                    raise ValueError(f"seed {part.removeprefix('seed=')!r} is not a whole number") from None
                continue
            kind, sep, rate_text = part.partition(":")
            if not sep or kind not in KINDS:
                raise ValueError(f"{part!r}: write kind:rate with a kind among {', '.join(KINDS)}")
            try:
                rate = float(rate_text)
            except ValueError:
                raise ValueError(f"{part!r}: the rate is not a number") from None
            if not 0 <= rate <= 1:
                raise ValueError(f"{part!r}: the rate must be between 0 and 1")
            rates[kind] = rates.get(kind, 0.0) + rate
        if not rates:
            raise ValueError("no fault named; e.g. 429:0.2,500:0.05")
        if sum(rates.values()) > 1 + 1e-9:
            raise ValueError("the rates add up to more than 1")
        return cls(tuple(sorted(rates.items())), seed)

    @property
    def always(self) -> bool:
        """Every call fails: the in-a-row limit is off."""
        return sum(rate for _, rate in self.rates) >= 1 - 1e-9

    def draw(self, index: int) -> str | None:
        """The fault for the server's `index`-th model call, or None: a hash of seed and index, not a shared RNG,
        so concurrent calls cannot shift one another's draws."""
        digest = hashlib.sha256(f"{self.seed}:{index}".encode()).digest()
        point = int.from_bytes(digest[:8], "big") / 2**64
        edge = 0.0
        for kind, rate in self.rates:
            edge += rate
            if point < edge:
                return kind
        return None

    def __str__(self) -> str:
        return ",".join([*(f"{kind}:{rate:g}" for kind, rate in self.rates), f"seed={self.seed}"])
