"""Model names: offline rehearsal, watsonx, provider:model — and missing credentials named up front."""

from __future__ import annotations

import pytest

from pytest_palette.models import (
    ModelUnavailable,
    build_chat_model,
    check_model,
    missing_credentials,
    parse_model,
    rehearsal_agents,
)
from pytest_palette.rehearsal.hostile import HOSTILE
from pytest_palette.rehearsal.known_bad import KNOWN_BAD, SCRIPTED
from pytest_palette.rehearsal.policy import RehearsalPolicy


def test_rehearsal_needs_nothing_and_says_what_it_is() -> None:
    spec = parse_model("rehearsal")
    assert missing_credentials(spec, {}) == []
    assert "not a language model" in spec.label
    assert build_chat_model(spec, {})._llm_type == "rehearsal"


class Careful(RehearsalPolicy):
    """A project's own good agent, added through `pytest_palette_add_rehearsals`."""

    name = "careful"


class Sloppy(Careful):
    """A project's known-bad agent: it says so."""

    name = "sloppy"
    known_bad = True


def made() -> RehearsalPolicy:
    """An agent given as a factory, not a class: what it makes declares."""
    return Sloppy()


#: What a project's hook leaves: the package's agents, its own good and known-bad ones, and a factory.
PROJECT_AGENTS = {**rehearsal_agents(), "careful": Careful, "sloppy": Sloppy, "made": made}


@pytest.mark.parametrize(("model", "label"), [
    ("rehearsal", "rehearsal (scripted stand-in, not a language model)"),
    ("rehearsal:careful", "rehearsal:careful (scripted stand-in, not a language model)"),
    ("rehearsal:sloppy", "rehearsal:sloppy (known-bad scripted agent, not a language model)"),
    ("rehearsal:made", "rehearsal:made (known-bad scripted agent, not a language model)"),
    ("rehearsal:builds_early", "rehearsal:builds_early (known-bad scripted agent, not a language model)"),
    ("rehearsal:hostile", "rehearsal:hostile (hostile scripted agent, not a language model)"),
])
def test_a_scripted_agent_is_labelled_for_what_it_declares(model: str, label: str) -> None:
    assert parse_model(model, agents=PROJECT_AGENTS).label == label


def test_the_package_labels_its_own_agents_without_the_hook() -> None:
    assert parse_model("rehearsal:spins").label == "rehearsal:spins (known-bad scripted agent, not a language model)"
    assert parse_model("rehearsal:spins").agent is not None
    # A spec made by hand, its agent not given: the package's is read, else only what is sure is said.
    assert parse_model("rehearsal").label == "rehearsal (scripted stand-in, not a language model)"


def test_every_agent_of_the_package_declares_what_it_is() -> None:
    # Every agent of the package but the good one is known-bad or hostile: one added without saying so (no
    # `known_bad = True`) would be labelled a stand-in in every report — caught here.
    assert set(SCRIPTED) >= set(KNOWN_BAD) | set(HOSTILE)
    for name, agent in SCRIPTED.items():
        assert agent.hostile if name in HOSTILE else agent.known_bad and not agent.hostile, name
    good = rehearsal_agents()["rehearsal"]
    assert good is RehearsalPolicy and not good.known_bad and not good.hostile


def test_watsonx_defaults_to_gpt_oss_120b() -> None:
    assert parse_model("watsonx").model_id == "openai/gpt-oss-120b"
    assert parse_model("watsonx:ibm/granite-3-8b-instruct").model_id == "ibm/granite-3-8b-instruct"


def test_watsonx_without_credentials_names_every_missing_variable() -> None:
    spec = parse_model("watsonx:openai/gpt-oss-120b")
    with pytest.raises(ModelUnavailable) as raised:
        check_model(spec, {})
    message = str(raised.value)
    for name in ("WATSONX_APIKEY", "WATSONX_URL", "WATSONX_PROJECT_ID or WATSONX_SPACE_ID"):
        assert name in message


def test_watsonx_accepts_a_space_instead_of_a_project() -> None:
    env = {"WATSONX_APIKEY": "k", "WATSONX_URL": "https://example.invalid", "WATSONX_SPACE_ID": "s"}
    assert missing_credentials(parse_model("watsonx"), env) == []


def test_a_secret_value_never_appears_in_the_message() -> None:
    env = {"WATSONX_APIKEY": "sekrit-value-123"}
    with pytest.raises(ModelUnavailable) as raised:
        check_model(parse_model("watsonx"), env)
    assert "sekrit" not in str(raised.value)


def test_a_known_provider_names_its_key() -> None:
    with pytest.raises(ModelUnavailable, match="OPENAI_API_KEY"):
        check_model(parse_model("openai:gpt-4o"), {})


@pytest.mark.parametrize("bad", ["gpt-4o", ":x", "openai:"])
def test_a_model_without_a_provider_is_a_usage_error(bad: str) -> None:
    with pytest.raises(ModelUnavailable, match="provider:model"):
        parse_model(bad)
