"""The model layer: what every host's client talks to, whoever answers.

A host hands it the item's route (layer/route.py) and the wire its client speaks, and gets either an endpoint — a
forwarder of the conversation's own, which adds the key the client never holds, records each call
(`--palette-record`), or answers from the item's recording (a replay) — or, for a client in the harness's own
process, a chat model. The rehearsal servers, their injected faults, latency and limits, are the layer's too. So
record, replay, faults and keys are written once, for every wire.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, cast

from ..arena.cassette import CASSETTE_NAME, Cassette, WireRecorder
from ..arena.cassette import Wire as RecordedWire
from ..arena.replay import WireReplay
from .endpoint import (
    ANTHROPIC_ROUTES,
    FORWARDER_LOG,
    OPENAI_ROUTES,
    RELAY,
    RELAY_PORT,
    RESPONSES_ROUTES,
    Call,
    KeyForwarder,
    RehearsalEndpoint,
    credentials,
)
from .route import Route, Wire

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from ..arena.sandbox import Sandbox
    from ..arena.workspace import Workspace
    from ..hosts.base import HostSettings
    from ..models import RetryCounter

#: Where each wire's provider is reached when neither `--palette-base-url` nor the client's own variable names
#: another server, and that variable.
DEFAULT_UPSTREAMS: dict[str, tuple[str, str]] = {
    "anthropic": ("https://api.anthropic.com", "ANTHROPIC_BASE_URL"),
    "openai": ("https://api.openai.com/v1", "OPENAI_BASE_URL"),
    "responses": ("https://api.openai.com/v1", "OPENAI_BASE_URL"),
}
#: The calls each wire's client makes of its model: nothing else is forwarded.
CALLS: dict[str, tuple[Call, ...]] = {"anthropic": ANTHROPIC_ROUTES, "openai": OPENAI_ROUTES,
                                      "responses": RESPONSES_ROUTES}


@dataclass
class Endpoint:
    """What a host points its client at: `base_url` with `key` (the forwarder's token, not a key), and — where the
    client has no network — `relay`, the argv prefix that runs it with the forwarder's socket on its loopback."""

    forwarder: KeyForwarder
    base_url: str
    key: str
    relay: list[str] = field(default_factory=list)

    @property
    def replay(self) -> WireReplay | None:
        return self.forwarder.replay

    def stop(self) -> None:
        self.forwarder.stop()


def provider(route: Route, wire: Wire, env: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """Where a live route's calls on `wire` go — `--palette-base-url`, else the client's own variable in `env`
    (a gateway), else the provider's API — and the headers that carry its key there."""
    default, variable = DEFAULT_UPSTREAMS[wire]
    url = route.model.base_url or env.get(variable) or default
    if wire == "anthropic":
        return url, credentials(env)
    key = env.get("OPENAI_API_KEY")
    return url, {"Authorization": f"Bearer {key}"} if key else {}


class ModelLayer:
    """One host's model layer for the session: its rehearsal servers and its conversations' forwarders, every one
    stopped by `close`."""

    def __init__(self) -> None:
        self.rehearsal = RehearsalEndpoint()
        self._forwarders: weakref.WeakSet[KeyForwarder] = weakref.WeakSet()

    def endpoint(self, route: Route, wire: Wire, workspace: Workspace, env: Mapping[str, str],
                 settings: HostSettings, sandbox: Sandbox, *,
                 observe: Callable[[int, bytes], None] | None = None,
                 turn: Callable[[], int] = lambda: 0) -> Endpoint:
        """A forwarder for one conversation of a client on `wire`: to the provider with the key from `env`,
        to the rehearsal server, or answering from the item's recording. `turn` says which turn a recorded call is
        of; `observe` hears each answer before the client has the whole of it."""
        from ..hosts.base import HostError, recorded_exchanges, secret_values

        if not route.forwarded or wire not in CALLS:
            raise HostError(f"the model layer forwards no {wire} client for --model {route.model.text}")
        recorded = cast("RecordedWire", wire)  # each wire it forwards, a cassette records as that wire
        upstream: str | None = None
        held: dict[str, str] = {}
        replay = recorder = None
        if route.source == "replay":
            replay = WireReplay(recorded_exchanges(route.model, workspace, recorded),
                                workspace.folder.resolve())
        elif route.source == "rehearsal":
            server = self.rehearsal.server(route.model, settings)
            upstream = server.base_url if wire == "anthropic" else server.openai_base_url
        else:
            upstream, held = provider(route, wire, env)
        if settings.record and replay is None:
            cassette = Cassette(workspace.own(CASSETTE_NAME), route.model.text, route.model.provider,
                                secret_values(env, sandbox))
            recorder = WireRecorder(cassette, recorded, workspace.folder.resolve(), turn)
        # With no network for the client, it reaches the forwarder's socket, relayed to a port on its own loopback,
        # so its own tools reach nothing else; only a client that keeps the network gets a port on 127.0.0.1.
        relayed = sandbox.confined and not sandbox.network
        try:
            forwarder = KeyForwarder(upstream, held, routes=CALLS[wire], observe=observe, record=recorder,
                                     replay=replay, loopback=not relayed, log=workspace.own(FORWARDER_LOG)).start()
        except ValueError as error:
            raise HostError(str(error)) from None
        self._forwarders.add(forwarder)
        if not relayed:
            return Endpoint(forwarder, forwarder.base_url, forwarder.token)
        # The socket alone is bound in: its folder outside is open to this process's user only.
        sandbox.readable(forwarder.socket, RELAY)
        relay = [sys.executable, str(RELAY), str(forwarder.socket), str(RELAY_PORT), "--"]
        return Endpoint(forwarder, f"http://127.0.0.1:{RELAY_PORT}", forwarder.token, relay)

    def chat_model(self, route: Route, workspace: Workspace, env: Mapping[str, str],
                   settings: HostSettings) -> tuple[BaseChatModel, RetryCounter | None, KeyForwarder | None]:
        """A LangChain chat model in this process for `route`, the counter of its client's retries where the
        client stamps them (None elsewhere), and the forwarder its calls pass, where they pass one: the rehearsal
        model is served on the OpenAI wire when faults are injected, for they are injected on a wire."""
        from ..arena.replay import replay_model
        from ..hosts.base import recorded_exchanges
        from ..models import RetryCounter, build_chat_model

        if route.source == "replay":
            return (replay_model(recorded_exchanges(route.model, workspace, "langchain"), route.model.label), None,
                    None)
        if route.source == "rehearsal" and settings.rehearsal_faults is not None:
            server = self.rehearsal.server(route.model, settings)
            forwarder = KeyForwarder(server.openai_base_url, {}, routes=OPENAI_ROUTES, loopback=True,
                                     log=workspace.own(FORWARDER_LOG)).start()
            self._forwarders.add(forwarder)
            served = replace(route.model, provider="openai", base_url=forwarder.base_url)
            counter = RetryCounter()
            chat = build_chat_model(served, {"OPENAI_API_KEY": forwarder.token}, max_retries=settings.model_retries,
                                    retries=counter)
            return chat, counter, forwarder
        retries = RetryCounter() if route.counts_retries else None
        # The model's client gets `env` (its key); the agent's shell gets only the sandbox's.
        chat = build_chat_model(route.model, env, max_retries=settings.model_retries if route.live else None,
                                retries=retries, latency=settings.rehearsal_latency,
                                limits=settings.rehearsal_limits)
        return chat, retries, None

    def fault(self, route: Route) -> str | None:
        """Why a turn may have failed here: the rehearsal server it was served by stopped answering (or None)."""
        return self.rehearsal.fault(route.model) if route.source == "rehearsal" else None

    def close(self) -> None:
        self.rehearsal.close()
        for forwarder in list(self._forwarders):
            forwarder.stop()
