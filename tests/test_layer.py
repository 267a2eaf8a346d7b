"""The model layer (layer/route.py, layer/serving.py): `--model` resolved into a route, and no host that knows a
provider's name."""

from __future__ import annotations

import ast
from pathlib import Path, PurePosixPath

import pytest

from pytest_palette.hosts.base import HostError, HostSettings
from pytest_palette.layer.route import REHEARSAL_WIRES, route_of
from pytest_palette.layer.serving import ModelLayer, provider
from pytest_palette.models import PROVIDER_KEYS, parse_model

HOSTS = Path(__file__).resolve().parent.parent / "pytest_palette" / "hosts"
#: Every name `--model` takes as a provider, and the two the harness answers itself.
PROVIDERS = {*PROVIDER_KEYS, "watsonx", "rits", "rehearsal", "replay"}


def provider_comparisons(source: str) -> list[str]:
    """Each comparison in `source` against a provider's name, or of a `.provider` attribute, as `line: text`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        names = {value for side in sides for value in _strings(side)}
        attribute = any(isinstance(side, ast.Attribute) and side.attr == "provider" for side in sides)
        if names & PROVIDERS or attribute:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def _strings(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {value for element in node.elts for value in _strings(element)}
    return set()


def test_no_host_compares_a_provider_name() -> None:
    found = {path.name: provider_comparisons(path.read_text(encoding="utf-8")) for path in sorted(HOSTS.glob("*.py"))}
    assert {name: lines for name, lines in found.items() if lines} == {}
    # The check finds what it looks for: the comparisons a host made before the layer.
    assert provider_comparisons('if model.provider == "rehearsal":\n    pass\n') == \
        ["1: model.provider == 'rehearsal'"]
    assert provider_comparisons('x = name in ("rehearsal", "replay")\n') == \
        ["1: name in ('rehearsal', 'replay')"]
    assert provider_comparisons('x = wire in NEEDS\n') == []


def test_a_route_says_who_answers_on_which_wires_and_who_holds_the_key() -> None:
    rehearsal, sonnet = route_of(parse_model("rehearsal:spins")), route_of(parse_model("anthropic:claude-sonnet-4-5"))
    watsonx, gpt = route_of(parse_model("watsonx:openai/gpt-oss-120b")), route_of(parse_model("openai:gpt-4o"))
    assert (rehearsal.source, rehearsal.wires, rehearsal.live) == ("rehearsal", REHEARSAL_WIRES, False)
    assert rehearsal.client_model("cuga") == "rehearsal:spins" and rehearsal.rehearsed("claude")
    assert (sonnet.wires, sonnet.live, sonnet.forwarded) == (("langchain", "anthropic"), True, True)
    assert sonnet.client_model("claude") == "claude-sonnet-4-5" and not sonnet.rehearsed("claude")
    # watsonx's client exchanges its key itself: it holds it, and the layer does not forward it.
    assert (watsonx.forwarded, watsonx.client_keys) == (False, ("WATSONX_", "WX_"))
    assert (gpt.forwarded, gpt.client_keys, gpt.counts_retries) == (True, (), True)
    assert gpt.first("anthropic", "responses", "openai") == "responses" and sonnet.first("openai") is None
    assert sonnet.missing({}) == ["ANTHROPIC_API_KEY"] and sonnet.missing({"ANTHROPIC_API_KEY": "k"}) == []
    assert rehearsal.missing({}) == []


def test_a_live_route_goes_to_the_flag_then_the_clients_variable_then_the_provider() -> None:
    gpt = route_of(parse_model("openai:gpt-4o"))
    assert provider(gpt, "openai", {}) == ("https://api.openai.com/v1", {})
    assert provider(gpt, "responses", {"OPENAI_BASE_URL": "http://gw/v1", "OPENAI_API_KEY": "k"}) == \
        ("http://gw/v1", {"Authorization": "Bearer k"})
    local = route_of(parse_model("openai:llama", "http://127.0.0.1:8000/v1"))
    assert provider(local, "openai", {"OPENAI_BASE_URL": "http://gw/v1"})[0] == "http://127.0.0.1:8000/v1"


def test_the_layer_forwards_no_client_that_holds_its_own_key(tmp_path: Path) -> None:
    from pytest_palette.arena.workspace import Workspace
    from pytest_palette.run.conversation import open_sandbox

    workspace = Workspace(tmp_path, PurePosixPath("item"))
    workspace.work.mkdir(parents=True)
    settings = HostSettings(sandbox="none")
    layer = ModelLayer()
    with pytest.raises(HostError, match="forwards no watsonx client for --model watsonx:m"):
        layer.endpoint(route_of(parse_model("watsonx:m")), "watsonx", workspace, {}, settings,
                       open_sandbox(workspace, settings))
    layer.close()


def test_conversations_starting_together_share_one_question_to_the_rehearsal_server(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import itertools
    import threading
    import types

    from pytest_palette.layer import endpoint

    rehearsal = endpoint.RehearsalEndpoint()
    model = parse_model("rehearsal")
    first = rehearsal.server(model)
    asked = []
    monkeypatch.setattr(first, "answers", lambda: asked.append(1) or True)
    # A clock that counts: each caller reads it once before it waits for the question under way.
    ticks, arrived, callers = itertools.count(), threading.Event(), 5

    def monotonic() -> float:
        tick = next(ticks)
        if tick == callers - 1:
            arrived.set()
        return float(tick)

    monkeypatch.setattr(endpoint, "time", types.SimpleNamespace(monotonic=monotonic))
    got: list[object] = []
    try:
        with rehearsal._probing:  # a question under way while they all arrive
            threads = [threading.Thread(target=lambda: got.append(rehearsal.server(model))) for _ in range(callers)]
            for thread in threads:
                thread.start()
            assert arrived.wait(30), "the callers did not wait for the question under way"
        for thread in threads:
            thread.join(30)
        # One question, asked after they all arrived, answers every one of them.
        assert got == [first] * callers and len(asked) == 1
        # A server that stops answering is replaced, once, for every caller.
        monkeypatch.setattr(first, "answers", lambda: False)
        replaced = rehearsal.server(model)
        assert replaced is not first and rehearsal.server(model) is replaced
    finally:
        rehearsal.close()
