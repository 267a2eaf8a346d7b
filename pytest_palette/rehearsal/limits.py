"""A model's limits, for the rehearsal model to meet as a real model does: its output and its context, in tokens.

`--palette-rehearsal-limits output=40,context=8192`: an answer in words longer than `output` tokens is cut
there, and says so as a provider does (`finish_reason: "length"`, `stop_reason: "max_tokens"`); a request
longer than `context` tokens is refused with a 400 in the words real servers use. Tokens are the rehearsal
model's estimate (characters / 4), the one its usage reports. Applied by the in-process model (react) and by
the HTTP server (cuga, claude), so each host's own reading of a limit is what is tested.
"""

from __future__ import annotations

from dataclasses import dataclass

#: What the words of an OpenAI-compatible server's refusal name: the `code` of its error.
CONTEXT_CODE = "context_length_exceeded"


@dataclass(frozen=True)
class ModelLimits:
    """The most tokens one answer may hold (`output`) and one request may send (`context`); None: no limit."""

    output: int | None = None
    context: int | None = None

    @classmethod
    def parse(cls, text: str) -> ModelLimits:
        """`output=N[,context=N]` in either order; ValueError in one line naming the part that is wrong."""
        given: dict[str, int] = {}
        for part in (p.strip() for p in text.split(",")):
            if not part:
                continue
            name, sep, value = part.partition("=")
            if not sep or name not in ("output", "context"):
                raise ValueError(f"{part!r}: write output=TOKENS or context=TOKENS")
            if not value.strip().isdigit() or int(value) < 1:
                raise ValueError(f"{part!r}: the limit is not a whole number of tokens >= 1")
            given[name] = int(value)
        if not given:
            raise ValueError("no limit named; e.g. output=40 or context=8192")
        return cls(**given)

    def cut(self, text: str) -> tuple[str, bool]:
        """The answer `text` as the model could write it, and whether it was cut at the output limit."""
        if self.output is None or (len(text) + 3) // 4 <= self.output:
            return text, False
        return text[:self.output * 4], True

    def openai_refusal(self, asked: int) -> str | None:
        """What an OpenAI-compatible server says of a request of `asked` tokens over the context; None: it fits."""
        if self.context is None or asked <= self.context:
            return None
        return (f"This model's maximum context length is {self.context} tokens. However, your messages resulted "
                f"in {asked} tokens. Please reduce the length of the messages.")

    def anthropic_refusal(self, asked: int) -> str | None:
        """What the Messages API says of a request of `asked` tokens over the context; None: it fits."""
        if self.context is None or asked <= self.context:
            return None
        return f"prompt is too long: {asked} tokens > {self.context} maximum"

    def __str__(self) -> str:
        return ",".join(f"{name}={value}" for name, value in (("output", self.output), ("context", self.context))
                        if value is not None)
