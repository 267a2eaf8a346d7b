"""Why a turn ended, on every host: the agent answered, or a limit or an error ended the turn before it did.

A turn that ran out of steps looks, in its answer, exactly like an agent that gave up ("Sorry, need more steps"):
only what the host's client reports tells them apart, so each host reads its reason there — never from the
model's words. Every reason but `answered` makes the item an ERROR of the run that names it: the agent never
handed the turn back, so there is nothing of the skill's to judge.

- `answered`: the agent yielded to the user;
- `step_budget`: the host's step or turn limit ran out (react's recursion limit and its prebuilt agent's
  `remaining_steps` stop, the Claude CLI's max-turns result, CUGA's own step limit);
- `output_limit`: the model's last answer was cut at its token limit (`finish_reason: "length"`,
  `stop_reason: "max_tokens"`);
- `context_limit`: the conversation no longer fits the model's context (the provider's 400 says so);
- `turn_timeout`: the harness's bound on a turn (`--palette-turn-timeout`) ran out;
- `refused`: the provider's content filter or the model's refusal, where the provider says so;
- `error`: anything else that failed the turn, in its words.
"""

from __future__ import annotations

import re
from typing import Literal, get_args

from .base import HostError

StopReason = Literal["answered", "step_budget", "output_limit", "context_limit", "turn_timeout", "refused", "error"]
STOP_REASONS: tuple[StopReason, ...] = get_args(StopReason)
#: How a page says each, beside the turn.
SAID: dict[str, str] = {
    "answered": "the agent answered", "step_budget": "ran out of steps: the host's step budget ended it",
    "output_limit": "the model's answer was cut at its output limit", "context_limit": "over the model's context",
    "turn_timeout": "timed out: the harness ended it", "refused": "the model's answer was refused",
    "error": "failed",
}
#: An error's words in the terminal, JUnit and the ledger: one line of at most this many characters. The whole
#: (an upstream's 40 KB answer) is kept in a file of the item's.
WORDS = 300

#: How providers word a request over the model's context, each with the two numbers it names (limit, asked):
#: OpenAI-compatible servers (vLLM, LiteLLM), the Messages API, llama.cpp's server.
_CONTEXT = (
    re.compile(r"maximum context length is (?P<limit>\d[\d,]*) tokens.{0,200}?(?:resulted in|requested) "
               r"(?P<asked>\d[\d,]*) tokens", re.S),
    re.compile(r"prompt is too long: (?P<asked>\d[\d,]*) tokens > (?P<limit>\d[\d,]*) maximum"),
    re.compile(r"exceeds? the available context size.{0,400}?\"n_prompt_tokens\"\s*:\s*(?P<asked>\d+)"
               r".{0,200}?\"n_ctx\"\s*:\s*(?P<limit>\d+)", re.S),
    re.compile(r"exceeds? the available context size.{0,400}?\"n_ctx\"\s*:\s*(?P<limit>\d+)"
               r".{0,200}?\"n_prompt_tokens\"\s*:\s*(?P<asked>\d+)", re.S),
)
#: A server's own failure: its body may quote the conversation, and with it any of the words above.
_SERVER_FAILED = re.compile(r"\b(?:Error code|status(?:_code)?|api_error_status|HTTP)\W{0,3}5\d\d\b", re.I)
#: The same, where the words name no numbers.
_CONTEXT_WORDS = re.compile(r"context_length_exceeded|maximum context length|prompt is too long|exceeds? the "
                            r"available context size|context window (?:is )?exceeded", re.I)


class TurnStopped(HostError):
    """The turn ended before the agent answered, for `reason` (one of STOP_REASONS but `answered`), in words that
    follow "turn N" ("ended at the step budget (120 steps) before the agent answered")."""

    def __init__(self, reason: StopReason, words: str) -> None:
        super().__init__(words)
        self.reason: StopReason = reason


def step_budget(limit: str) -> TurnStopped:
    """The host's step or turn limit ran out; `limit` names it ("120 steps", "max-turns 60")."""
    return TurnStopped("step_budget", f"ended at the step budget ({limit}) before the agent answered")


def output_limit(reported: str) -> TurnStopped:
    """The model's last answer was cut at its output limit; `reported` is how the client said so."""
    return TurnStopped("output_limit", f"ended at the model's output limit ({reported}): the agent's last answer "
                                       "was cut")


def refused(reported: str) -> TurnStopped:
    """The provider or the model refused the answer; `reported` is how the client said so."""
    return TurnStopped("refused", f"ended in a refusal ({reported}) before the agent answered")


def finished(reason: str, reported: str) -> TurnStopped | None:
    """The stop a model answer's own finish reason names — cut at the output limit (`length`, `max_tokens`) or
    refused (`content_filter`, `refusal`) — in `reported`'s words (how the client said it); None: it ended as an
    answer does."""
    if reason in ("length", "max_tokens"):
        return output_limit(reported)
    if reason in ("content_filter", "refusal"):
        return refused(reported)
    return None


def context_limit(words: str) -> TurnStopped | None:
    """The context limit an error's `words` report (a provider's 400, as any client relays it), named in one line
    with the model's limit and the size asked where the words give them; None when they report something else —
    a server's 5xx among them, whatever the body it quotes says."""
    if _SERVER_FAILED.search(words[:2000]):
        return None
    for pattern in _CONTEXT:
        found = pattern.search(words)
        if found:
            limit, asked = (int(found[name].replace(",", "")) for name in ("limit", "asked"))
            return TurnStopped("context_limit", f"ended at the model's context limit ({limit:,} tokens; the "
                                                f"request was {asked:,}) before the agent answered")
    if _CONTEXT_WORDS.search(words):
        return TurnStopped("context_limit", "ended at the model's context limit (the provider said so; it named "
                                            "no sizes) before the agent answered")
    return None


def one_line(text: str, limit: int = WORDS) -> str:
    """`text` as one line of at most `limit` characters: its whitespace folded, its middle cut with a marker (the
    end of an error often holds its cause)."""
    folded = " ".join(text.split())
    if len(folded) <= limit:
        return folded
    keep = max(limit - 40, 20)  # room for the marker
    head, tail = keep * 2 // 3, keep - keep * 2 // 3
    return f"{folded[:head]} … [{len(folded) - head - tail:,} characters cut] … {folded[len(folded) - tail:]}"
