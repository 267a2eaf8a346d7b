"""Model names → chat models, with every missing credential named before anything runs.

`rehearsal` is the offline stand-in; `watsonx:<model_id>` goes through langchain-ibm; any other
`provider:model` goes through LangChain's `init_chat_model` when that provider's package is there.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .rehearsal.policy import RehearsalPolicy

if TYPE_CHECKING:  # LangChain loads only when a model is built: the plugin stays cheap to import.
    from langchain_core.language_models import BaseChatModel

WATSONX_DEFAULT_MODEL = "openai/gpt-oss-120b"
WATSONX_DEFAULT_URL = "https://us-south.ml.cloud.ibm.com"

# The variables each provider's LangChain package reads. Names only: values are never printed.
PROVIDER_KEYS: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "google_genai": ("GOOGLE_API_KEY",),
    "mistralai": ("MISTRAL_API_KEY",),
    "groq": ("GROQ_API_KEY",),
    "ollama": (),
}


class ModelUnavailable(RuntimeError):
    """The model cannot be used here: a usage error to report before any conversation starts."""


@dataclass(frozen=True)
class ModelSpec:
    """A parsed `--model` value."""

    text: str
    provider: str
    model_id: str

    @property
    def label(self) -> str:
        """What reports print: the rehearsal model is never dressed up as a language model."""
        if self.provider == "rehearsal" and self.model_id != "rehearsal":
            return f"rehearsal:{self.model_id} (known-bad scripted agent, not a language model)"
        if self.provider == "rehearsal":
            return "rehearsal (scripted stand-in, not a language model)"
        return f"{self.provider}:{self.model_id}"


def parse_model(text: str) -> ModelSpec:
    value = text.strip()
    if value == "rehearsal":
        return ModelSpec(value, "rehearsal", "rehearsal")
    if value.startswith("rehearsal:"):
        from .rehearsal.known_bad import SCRIPTED

        flaw = value.partition(":")[2]
        if flaw not in SCRIPTED:
            raise ModelUnavailable(f"--model {text!r}: no known-bad rehearsal agent named {flaw!r}; "
                                   f"known: {', '.join(sorted(SCRIPTED))}")
        return ModelSpec(value, "rehearsal", flaw)
    provider, sep, model_id = value.partition(":")
    if provider == "watsonx":
        return ModelSpec(value, "watsonx", model_id or WATSONX_DEFAULT_MODEL)
    if not sep or not provider or not model_id:
        raise ModelUnavailable(
            f"--model {text!r}: name a provider and a model as provider:model "
            "(for example watsonx:openai/gpt-oss-120b), or use 'rehearsal' to run offline")
    return ModelSpec(value, provider, model_id)


def missing_credentials(spec: ModelSpec, env: Mapping[str, str] | None = None) -> list[str]:
    """The environment variables this model needs and does not have."""
    environ = os.environ if env is None else env
    if spec.provider == "rehearsal":
        return []
    if spec.provider == "watsonx":
        missing = [name for name in ("WATSONX_APIKEY", "WATSONX_URL") if not environ.get(name)]
        if not (environ.get("WATSONX_PROJECT_ID") or environ.get("WATSONX_SPACE_ID")):
            missing.append("WATSONX_PROJECT_ID or WATSONX_SPACE_ID")
        return missing
    return [name for name in PROVIDER_KEYS.get(spec.provider, ()) if not environ.get(name)]


def check_model(spec: ModelSpec, env: Mapping[str, str] | None = None) -> None:
    """Raise ModelUnavailable naming everything missing for this model; return when it can run."""
    missing = missing_credentials(spec, env)
    if missing:
        raise ModelUnavailable(f"--model {spec.text} needs {', '.join(missing)} in the environment; "
                               f"{'it is' if len(missing) == 1 else 'they are'} not set")
    needed = {"rehearsal": None, "watsonx": "langchain_ibm"}.get(spec.provider, "langchain")
    if needed and importlib.util.find_spec(needed) is None:
        extra = ("" if needed == "langchain_ibm"
                 else " (pip install 'pytest-palette[providers]' and the provider's package)")
        raise ModelUnavailable(f"--model {spec.text} needs the {needed} package, which is not installed{extra}")


def rehearsal_policy(spec: ModelSpec) -> RehearsalPolicy:
    """The rehearsal policy a `rehearsal` or `rehearsal:<known-bad>` spec names."""
    from .rehearsal.known_bad import SCRIPTED

    return SCRIPTED[spec.model_id]() if spec.model_id in SCRIPTED else RehearsalPolicy()


def build_chat_model(spec: ModelSpec, env: Mapping[str, str] | None = None) -> BaseChatModel:
    """A chat model for the spec; credentials are checked first."""
    check_model(spec, env)
    environ = os.environ if env is None else env
    if spec.provider == "rehearsal":
        from .rehearsal.langchain_model import RehearsalChatModel

        return RehearsalChatModel(policy=rehearsal_policy(spec), model_name=spec.text)
    if spec.provider == "watsonx":
        from langchain_ibm import ChatWatsonx
        from pydantic import SecretStr

        # Temperature 0.1 matches the setting CUGA uses for the same model.
        return ChatWatsonx(
            model_id=spec.model_id,
            url=SecretStr(environ.get("WATSONX_URL") or WATSONX_DEFAULT_URL),
            apikey=SecretStr(environ.get("WATSONX_APIKEY", "")),
            project_id=environ.get("WATSONX_PROJECT_ID") or None,
            space_id=None if environ.get("WATSONX_PROJECT_ID") else environ.get("WATSONX_SPACE_ID"),
            temperature=0.1,
            max_tokens=16000,
        )
    from langchain.chat_models import init_chat_model  # type: ignore[import-not-found, unused-ignore]

    try:
        model: BaseChatModel = init_chat_model(spec.model_id, model_provider=spec.provider)
        return model
    except (ImportError, ValueError) as error:
        raise ModelUnavailable(f"--model {spec.text}: {error}") from error
