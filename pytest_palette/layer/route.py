"""A `--model`, resolved once per item before its host opens: who answers, on which wires, and who holds the key.

With models.py, the one place that knows the providers. A host asks the model layer (layer/serving.py) for an
endpoint on its client's wire, or for a chat model in its own process, and reads what it needs of the model from
its route: no module under hosts/ tests a provider's name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from ..models import ModelSpec, missing_credentials

#: Who answers an item's model calls: the scripted rehearsal agent, a live provider, or a recorded run's cassettes.
Source = Literal["rehearsal", "provider", "replay"]
#: How a host's client speaks to its model. "langchain": a LangChain chat model in the harness's own process (react);
#: "openai": chat completions; "responses": the OpenAI Responses API; "anthropic": the Messages API; "watsonx" and
#: "rits": those providers' own clients, which exchange or send their keys themselves.
Wire = Literal["langchain", "openai", "responses", "anthropic", "watsonx", "rits"]

#: The wires the rehearsal agent (and a replay, whose recording says per item which it was) answers on.
REHEARSAL_WIRES: tuple[Wire, ...] = ("langchain", "openai", "responses", "anthropic")
#: Each provider's wires besides LangChain's, which every provider has (init_chat_model).
PROVIDER_WIRES: dict[str, tuple[Wire, ...]] = {
    "openai": ("openai", "responses"),
    "anthropic": ("anthropic",),
    "watsonx": ("watsonx",),
    "rits": ("rits",),
}
#: Providers whose clients send their key as it is (a Bearer token, `x-api-key`): the layer's forwarder holds it and
#: adds it to each call. Every other provider's client exchanges or signs with its key itself, and holds it.
FORWARDABLE = frozenset({"openai", "anthropic"})
#: The variables that carry a provider's credentials, for a client that holds them itself.
CLIENT_KEYS: dict[str, tuple[str, ...]] = {"watsonx": ("WATSONX_", "WX_"), "rits": ("RITS_",)}


@dataclass(frozen=True)
class Route:
    """Where one item's model calls go."""

    model: ModelSpec
    source: Source
    #: The wires it answers on.
    wires: tuple[Wire, ...]

    @property
    def label(self) -> str:
        """What reports print of the model (`ModelSpec.label`)."""
        return self.model.label

    @property
    def live(self) -> bool:
        """Its calls reach a provider: they can fail, be retried and cost money."""
        return self.source == "provider"

    @property
    def forwarded(self) -> bool:
        """The layer holds the key (or there is none) and a forwarder adds it: the client never does."""
        return not self.live or self.model.provider in FORWARDABLE

    @property
    def client_keys(self) -> tuple[str, ...]:
        """The prefixes of the variables a client that is not `forwarded` holds: its provider's credentials."""
        return () if self.forwarded else CLIENT_KEYS.get(self.model.provider, ())

    @property
    def counts_retries(self) -> bool:
        """Its LangChain client is the openai SDK's, which stamps each retry where the harness can count it."""
        return self.live and self.model.provider == "openai"

    def serves(self, wire: Wire) -> bool:
        return wire in self.wires

    def first(self, *wires: Wire) -> Wire | None:
        """The first of `wires` (a client's, in its order of preference) this route answers on, or None."""
        return next((wire for wire in wires if wire in self.wires), None)

    def rehearsed(self, host: str) -> bool:
        """`host`'s client talks to the rehearsal agent: today's, or the one a replayed run recorded."""
        if self.source == "replay" and self.model.recording is not None:
            return self.model.recording.client_model(host)[0] == "rehearsal"
        return self.source == "rehearsal"

    def client_model(self, host: str) -> str:
        """The model `host`'s client names in its calls: a replay's, the one it named when it was recorded; the
        rehearsal agent's, its `--model` (`rehearsal:spins`)."""
        if self.source == "replay" and self.model.recording is not None:
            return self.model.recording.client_model(host)[1]
        return self.model.text if self.source == "rehearsal" else self.model.model_id

    def missing(self, env: Mapping[str, str]) -> list[str]:
        """The variables its provider needs from `env` and does not have (none for a rehearsal or a replay)."""
        return missing_credentials(self.model, env)


def route_of(model: ModelSpec) -> Route:
    """`model`'s route."""
    if model.provider == "rehearsal":
        return Route(model, "rehearsal", REHEARSAL_WIRES)
    if model.provider == "replay":
        return Route(model, "replay", REHEARSAL_WIRES)
    return Route(model, "provider", ("langchain", *PROVIDER_WIRES.get(model.provider, ())))
