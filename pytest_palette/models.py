"""Model names → chat models, with every missing credential named before anything runs.

`rehearsal` is the offline stand-in; `watsonx:<model_id>` goes through langchain-ibm; `openai:<model>` through
langchain-openai's ChatOpenAI, at OpenAI or at any OpenAI-compatible server named by `--palette-base-url` (vLLM,
Ollama, a gateway); any other `provider:model` goes through LangChain's `init_chat_model` when that provider's
package is there.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .arena.replay import RecordedRun, ReplayUnavailable, recorded_run
from .rehearsal.policy import MODEL_NAME, RehearsalPolicy, describe_agent

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
    "rits": ("RITS_API_KEY",),
}
#: The providers whose client can be pointed at another server with --palette-base-url.
BASE_URL_PROVIDERS = ("openai", "anthropic")
#: What to set when a local OpenAI-compatible server checks no key: the client refuses to start without one.
NO_KEY_HINT = "a local server that checks no key (vLLM, Ollama) takes any value, e.g. OPENAI_API_KEY=none"


class ModelUnavailable(RuntimeError):
    """The model cannot be used here: a usage error to report before any conversation starts."""


@dataclass(frozen=True)
class ModelSpec:
    """A parsed `--model` value."""

    text: str
    provider: str
    model_id: str
    #: The server the provider's client talks to instead of its default (--palette-base-url); None: the default.
    base_url: str | None = None
    #: For `rehearsal[:<name>]`, the scripted agent it names, as a project's conftest.py may have registered it
    #: (`pytest_palette_add_rehearsals`); None: the package's own.
    agent: Callable[[], RehearsalPolicy] | None = field(default=None, compare=False, repr=False)
    #: For `replay:<run>`, the recorded run whose cassettes answer (arena/replay.py).
    recording: RecordedRun | None = field(default=None, compare=False, repr=False)

    @property
    def label(self) -> str:
        """What reports print: the rehearsal model is never dressed up as a language model, and a scripted agent
        is named for what it declares it is (`describe_agent`): a stand-in, known-bad or hostile."""
        if self.provider == "rehearsal":
            name = MODEL_NAME if self.model_id == MODEL_NAME else f"rehearsal:{self.model_id}"
            return f"{name} ({describe_agent(self.agent or rehearsal_agents().get(self.model_id))})"
        if self.provider == "replay" and self.recording is not None:
            # Honest about what it is: the recording's answers, not a model asked today.
            return f"replay of {self.recording.model} from {self.recording.run_id}"
        # The endpoint is part of what ran: one model name served by two servers is two columns.
        return f"{self.provider}:{self.model_id}" + (f" at {self.base_url}" if self.base_url else "")


def parse_model(text: str, base_url: str | None = None,
                agents: Mapping[str, Callable[[], RehearsalPolicy]] | None = None) -> ModelSpec:
    """A `--model` value, with the `--palette-base-url` given beside it (checked here: a bad one is a usage error).
    `agents` are the scripted agents `rehearsal[:<name>]` may name (`rehearsal_agents()` when not given)."""
    spec = _parse_model(text, rehearsal_agents() if agents is None else agents)
    if base_url is None:
        return spec
    return replace(spec, base_url=checked_base_url(base_url, spec))


def checked_base_url(url: str, spec: ModelSpec) -> str:
    """`url` as a base URL for `spec`'s client; ModelUnavailable naming the flag when it cannot be one."""
    value = url.strip().rstrip("/")
    if spec.provider not in BASE_URL_PROVIDERS:
        kinds = " and ".join(f"{provider}:<model>" for provider in BASE_URL_PROVIDERS)
        raise ModelUnavailable(f"--palette-base-url applies to {kinds} models, not --model {spec.text}")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as error:
        raise ModelUnavailable(f"--palette-base-url {url!r}: not a URL ({error})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ModelUnavailable(f"--palette-base-url {url!r}: give an http:// or https:// URL with a host, "
                               "e.g. http://localhost:8000/v1")
    if parts.username or parts.password or parts.query:
        # The URL is printed in every report: a key in it would be published.
        raise ModelUnavailable("--palette-base-url: the URL carries credentials or a query; put the key in the "
                               "environment (OPENAI_API_KEY or ANTHROPIC_API_KEY) instead")
    return value


def rehearsal_agents() -> dict[str, Callable[[], RehearsalPolicy]]:
    """The package's scripted agents by the name `--model rehearsal[:<name>]` gives: the good one is "rehearsal"."""
    from .rehearsal.known_bad import SCRIPTED

    return {MODEL_NAME: RehearsalPolicy, **SCRIPTED}


def _parse_model(text: str, agents: Mapping[str, Callable[[], RehearsalPolicy]]) -> ModelSpec:
    value = text.strip()
    if value == MODEL_NAME:
        return ModelSpec(value, "rehearsal", "rehearsal", agent=agents.get(MODEL_NAME))
    if value.startswith("rehearsal:"):
        flaw = value.partition(":")[2]
        if flaw not in agents or flaw == MODEL_NAME:
            known = sorted(set(agents) - {MODEL_NAME})
            raise ModelUnavailable(f"--model {text!r}: no scripted rehearsal agent named {flaw!r}; "
                                   f"known: {', '.join(known)}")
        return ModelSpec(value, "rehearsal", flaw, agent=agents[flaw])
    provider, sep, model_id = value.partition(":")
    if provider == "replay":
        if not model_id:
            raise ModelUnavailable(f"--model {text!r}: name the recorded run folder, as replay:runs/<run-id>")
        try:
            return ModelSpec(value, "replay", model_id, recording=recorded_run(model_id))
        except ReplayUnavailable as error:
            raise ModelUnavailable(str(error)) from None
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
    if spec.provider in ("rehearsal", "replay"):  # a replay asks no provider: its answers are on disk
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
        hint = f"; {NO_KEY_HINT}" if spec.provider == "openai" and spec.base_url else ""
        raise ModelUnavailable(f"--model {spec.text} needs {', '.join(missing)} in the environment; "
                               f"{'it is' if len(missing) == 1 else 'they are'} not set{hint}")
    needed = {"rehearsal": None, "replay": None, "watsonx": "langchain_ibm", "openai": "langchain_openai"}.get(
        spec.provider, "langchain")
    if needed and importlib.util.find_spec(needed) is None:
        extra = ("" if needed in ("langchain_ibm", "langchain_openai")
                 else " (pip install 'pytest-palette[providers]' and the provider's package)")
        raise ModelUnavailable(f"--model {spec.text} needs the {needed} package, which is not installed{extra}")


def rehearsal_policy(spec: ModelSpec) -> RehearsalPolicy:
    """The rehearsal policy a `rehearsal` or `rehearsal:<name>` spec names."""
    if spec.agent is not None:
        return spec.agent()
    agents = rehearsal_agents()
    return agents.get(spec.model_id, RehearsalPolicy)()


class RetryCounter:
    """The retries a model client made, counted where the client says it is retrying.

    The openai SDK stamps every attempt of one call with `x-stainless-retry-count` (0 on the first try, n on the
    n-th retry, whatever caused it: 429, 5xx, a reset, a timeout); an httpx event hook on the client's own
    connection pool sees every attempt, so each request stamped above 0 is one retry. Per client, so per
    conversation: nothing process-wide.
    """

    HEADER = "x-stainless-retry-count"

    def __init__(self) -> None:
        self._count = 0
        self._lock = threading.Lock()

    @property
    def count(self) -> int:
        return self._count

    def saw(self, request: Any) -> None:
        try:
            retry = int(request.headers.get(self.HEADER) or 0)
        except ValueError:
            return
        if retry > 0:
            with self._lock:
                self._count += 1

    async def asaw(self, request: Any) -> None:
        self.saw(request)


def build_chat_model(spec: ModelSpec, env: Mapping[str, str] | None = None, *, max_retries: int | None = None,
                     retries: RetryCounter | None = None, latency: str | None = None,
                     limits: str | None = None) -> BaseChatModel:
    """A chat model for the spec; credentials are checked first. `max_retries` bounds the client's own retries
    of a transient error (where it has them); `retries` counts them (the openai client); `latency` is the
    rehearsal model's time per call (`--palette-rehearsal-latency`), `limits` its limits in tokens
    (`--palette-rehearsal-limits`)."""
    check_model(spec, env)
    environ = os.environ if env is None else env
    if spec.provider == "rehearsal":
        from .rehearsal.langchain_model import RehearsalChatModel
        from .rehearsal.latency import ModelLatency
        from .rehearsal.limits import ModelLimits

        return RehearsalChatModel(policy=rehearsal_policy(spec), model_name=spec.text,
                                  latency=ModelLatency.parse(latency) if latency else None,
                                  limits=ModelLimits.parse(limits) if limits else ModelLimits())
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
    if spec.provider == "openai":
        return _openai_chat_model(spec, environ, max_retries, retries)
    from langchain.chat_models import init_chat_model  # type: ignore[import-not-found, unused-ignore]

    given: dict[str, Any] = {} if max_retries is None else {"max_retries": max_retries}
    if spec.base_url:
        given["base_url"] = spec.base_url
    try:
        model: BaseChatModel = init_chat_model(spec.model_id, model_provider=spec.provider, **given)
        return model
    except (ImportError, ValueError) as error:
        raise ModelUnavailable(f"--model {spec.text}: {error}") from error


def _openai_chat_model(spec: ModelSpec, environ: Mapping[str, str], max_retries: int | None,
                       retries: RetryCounter | None) -> BaseChatModel:
    """ChatOpenAI at OpenAI or at `spec.base_url`. The SDK retries 429s (honouring Retry-After), 5xx, resets and a
    call's timeout itself, with backoff and jitter; its own http clients carry the hook that counts them."""
    import openai
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    hooks: dict[str, Any] = {}
    if retries is not None:
        hooks = {"http_client": openai.DefaultHttpxClient(event_hooks={"request": [retries.saw]}),
                 "http_async_client": openai.DefaultAsyncHttpxClient(event_hooks={"request": [retries.asaw]})}
    # The key only from the environment, held as a SecretStr: never in a repr, a file or a log.
    return ChatOpenAI(model=spec.model_id, api_key=SecretStr(environ.get("OPENAI_API_KEY", "")),
                      base_url=spec.base_url or environ.get("OPENAI_BASE_URL") or None,
                      max_retries=2 if max_retries is None else max_retries,
                      stream_usage=True, **hooks)
