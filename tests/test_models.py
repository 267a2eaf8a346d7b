"""Model names: offline rehearsal, watsonx, provider:model — and missing credentials named up front."""

from __future__ import annotations

import pytest

from pytest_palette.models import (
    ModelUnavailable,
    build_chat_model,
    check_model,
    missing_credentials,
    parse_model,
)


def test_rehearsal_needs_nothing_and_says_what_it_is() -> None:
    spec = parse_model("rehearsal")
    assert missing_credentials(spec, {}) == []
    assert "not a language model" in spec.label
    assert build_chat_model(spec, {})._llm_type == "rehearsal"


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
