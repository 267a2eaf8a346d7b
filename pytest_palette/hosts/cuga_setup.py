"""How CUGA is set up for a model, and asked before a run: the models file and variables a route maps onto
(`cuga_model`), what they need of the environment (`credentials_needed`), and the probe that asks an installed
CUGA, in a process of its own (cuga_probe.py), what it makes of them and which skills it discovers."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import site
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..layer.route import Route, Wire
from ..models import NO_KEY_HINT
from .base import HostError

if TYPE_CHECKING:
    import pytest

#: The version the host and its lean dependency set were proven against.
CUGA_VERSION = "0.4.3"
INSTALL_HINT = ("pip install -r requirements-cuga.txt && pip install --no-deps cuga==" + CUGA_VERSION
                + " (the lean set the SDK path needs; a plain `pip install cuga` pulls several GB)")
#: The probe (cuga_probe.py, a process of its own: CUGA reads its models file once, at import) may take this long.
IMPORT_PROBE_TIMEOUT = 180.0


@dataclass(frozen=True)
class CugaModel:
    """How a `--model` maps onto CUGA's own settings: a models file plus the variables it reads."""

    settings_file: str
    env: dict[str, str] = field(default_factory=dict)


#: The wire CUGA's client speaks → its models file. `MODEL_NAME` overrides the file's model for every platform.
SETTINGS_FILES: dict[str, str] = {
    "openai": "settings.openai.toml",  # the rehearsal agent's and a replay's too: on the OpenAI wire
    "watsonx": "settings.watsonx.toml",
    "rits": "settings.rits.toml",
}


def cuga_wire(route: Route) -> Wire | None:
    """The wire CUGA's client speaks to `route`'s model (None: none of CUGA's settings)."""
    return route.first("openai", "watsonx", "rits")


def unsupported_reason(route: Route) -> str | None:
    if cuga_wire(route) is not None:
        return None
    mapped = ", ".join(sorted({*SETTINGS_FILES, "rehearsal"}))  # the rehearsal agent on the openai wire
    return (f"the cuga host runs models through CUGA's own settings and maps only {mapped} (as provider:model); "
            f"{route.model.provider!r} is not one of them")


def _openai_needs(route: Route, env: Mapping[str, str]) -> tuple[list[str], str]:
    return [], (f" ({NO_KEY_HINT})" if route.model.base_url
                else " (any OpenAI-compatible endpoint: also give --palette-base-url URL, or set OPENAI_BASE_URL)")


def _rits_needs(route: Route, env: Mapping[str, str]) -> tuple[list[str], str]:
    default = rits_default_model()
    # Each RITS model has its own URL; CUGA's file holds only its default model's.
    missing = [f"RITS_BASE_URL (settings.rits.toml only knows the URL of {default})"] \
        if default and route.model.model_id != default and not env.get("RITS_BASE_URL") else []
    return missing, " (RITS is IBM's internal gateway)"


#: What a wire's CUGA settings need of the environment beyond its provider's key, and the hint that goes with it.
NEEDS: dict[str, Callable[[Route, Mapping[str, str]], tuple[list[str], str]]] = {
    "openai": _openai_needs, "rits": _rits_needs}
#: The variable that names another server for a wire's client (`--palette-base-url` first).
BASE_URL_VARIABLES = {"openai": "OPENAI_BASE_URL"}


def credentials_needed(route: Route, env: Mapping[str, str]) -> list[str]:
    """Each missing credential for `route`'s model on CUGA, named with its fix. Names only, never values."""
    wire = cuga_wire(route)
    if not route.live or wire is None:
        return []
    more, hint = NEEDS[wire](route, env) if wire in NEEDS else ([], "")
    missing = [*route.missing(env), *more]
    if not missing:
        return []
    return [f"--model {route.model.text} on cuga needs {', '.join(missing)} in the environment{hint}; "
            f"{'it is' if len(missing) == 1 else 'they are'} not set"]


def rits_default_model() -> str | None:
    """The model CUGA's installed settings.rits.toml configures for its code agent (read, not imported)."""
    import importlib.util
    import re

    spec = importlib.util.find_spec("cuga")
    for root in (spec.submodule_search_locations or []) if spec else []:
        path = Path(root) / "configurations" / "models" / "settings.rits.toml"
        if path.is_file():
            section = path.read_text(encoding="utf-8").partition("[agent.code.model]")[2].partition("\n[")[0]
            found = re.search(r'^model_name\s*=\s*"([^"]+)"', section, re.M)
            return found.group(1) if found else None
    return None


def cuga_model(route: Route, env: Mapping[str, str], url: str | None = None) -> CugaModel:
    """The CUGA settings file and variables for `route`'s model; `url` is the model layer's endpoint (its /v1 URL)
    for a model no provider serves."""
    wire = cuga_wire(route)
    if wire is None:
        raise HostError(unsupported_reason(route) or "")
    settings_file = SETTINGS_FILES[wire]
    if not route.live:
        if not url:
            raise HostError(f"the {route.source} model needs its endpoint's URL")
        # CUGA's OpenAI client, pointed at the model layer (the rehearsal server, or the replay); the key is a
        # placeholder. A replay names the model it replays, as CUGA was told when it was recorded.
        return CugaModel(settings_file, {"OPENAI_BASE_URL": url, "OPENAI_API_KEY": "dummy",
                                         "MODEL_NAME": route.client_model("cuga")})
    variables = {"MODEL_NAME": route.model.model_id}
    # --palette-base-url first, then the caller's OPENAI_BASE_URL: CUGA's OpenAI client reads the variable.
    variable = BASE_URL_VARIABLES.get(wire)
    base_url = route.model.base_url or env.get(variable) if variable else None
    if base_url:
        variables["OPENAI_BASE_URL"] = base_url
    return CugaModel(settings_file, variables)


# -- CUGA asked before a run, in a process of its own (cuga_probe.py) ----------------------------------------

#: The probe the host runs once per model (run by path: the standard library and CUGA only).
PROBE = Path(__file__).with_name("cuga_probe.py")


@dataclass(frozen=True)
class Probe:
    """What cuga_probe.py found: why CUGA cannot run here (and then nothing else), or the skills its discovery
    finds in the folder it was given, the model its settings resolve to, and its step limit."""

    problem: str | None = None
    skills: tuple[str, ...] | None = None
    model: str = "?"
    max_steps: str = "?"


#: The environment a probe's answer may depend on beside its models file and variables: CUGA's own settings.
PROBE_ENVIRONMENT = ("CUGA_", "AGENT_", "PYTHON")
#: Names of variables that hold a credential: left out of a probe's fingerprint.
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD", re.IGNORECASE)


def probe_fingerprint(settings_file: str, variables: Mapping[str, str], skills: str | None) -> str:
    """What a probe by this interpreter would answer depends on, as one digest: the probe itself, the models file,
    the model's variables (keys left out: no answer depends on them, and a key is written nowhere), CUGA's settings
    and PYTHONPATH in the environment, the skill's content (`skill_hash`), and this interpreter's site-packages
    folders, whose modification time changes when a package is installed, upgraded or removed there."""
    digest = hashlib.sha256()
    plain = {name: value for name, value in variables.items() if not SECRET_NAME.search(name)}
    environment = {name: value for name, value in os.environ.items()
                   if name.startswith(PROBE_ENVIRONMENT) and not SECRET_NAME.search(name)}
    folders = {}
    # Where the probe imports from: the probe runs in a scratch folder, so the caller's folder is not among them.
    for entry in {sysconfig.get_path("purelib"), sysconfig.get_path("platlib"), site.getusersitepackages()}:
        with contextlib.suppress(OSError):
            folders[entry] = os.stat(entry).st_mtime_ns
    for part in (sys.executable, PROBE.read_text(encoding="utf-8"), settings_file, plain, environment, skills,
                 folders):
        digest.update(json.dumps(part, sort_keys=True).encode())
        digest.update(b"\0")
    return digest.hexdigest()[:24]


def cached_probe(cache: pytest.Cache | None, settings_file: str, variables: Mapping[str, str],
                 skills: Path | None = None, skill: str | None = None) -> Probe:
    """`probe`, answered from `cache` when this interpreter probed the same inputs before (a probe costs 5 CPU-s
    at every session's start). Only an answer that found CUGA working is kept: a problem is asked again, so its fix
    is seen at once. `skill` is the content hash of the skill in `skills`."""
    if cache is None:
        return probe(settings_file, variables, skills)
    key = f"palette/cuga-probe/{probe_fingerprint(settings_file, variables, skill)}"
    kept = cache.get(key, None)
    if isinstance(kept, dict):
        with contextlib.suppress(KeyError, TypeError, ValueError):
            named = kept["skills"]
            return Probe(skills=None if named is None else tuple(map(str, named)), model=str(kept["model"]),
                         max_steps=str(kept["max_steps"]))
    found = probe(settings_file, variables, skills)
    if found.problem is None:
        cache.set(key, {"skills": None if found.skills is None else list(found.skills), "model": found.model,
                        "max_steps": found.max_steps})
    return found


def probe(settings_file: str, variables: Mapping[str, str], skills: Path | None = None,
          python: str = sys.executable) -> Probe:
    """Run cuga_probe.py with CUGA's models file `settings_file` and the model's `variables`, asking its discovery
    about `skills` (a folder holding `skills/<name>/`) when given.

    With the OpenAI-compatible models file it builds an agent's graph too, which imports the rest of the lean set.
    With another provider's, CUGA's agents would make that provider's clients (a key exchange, the network): not
    before a run."""
    import importlib.util

    graph = ["--graph"] if settings_file == SETTINGS_FILES["openai"] else []
    if importlib.util.find_spec("cuga") is None:
        return Probe(f"the CUGA SDK is not installed: {INSTALL_HINT}")
    with tempfile.TemporaryDirectory(prefix="palette-cuga-probe-") as scratch:
        # CUGA prefers a settings.toml in the cwd and loads the first .env above it: the scratch folder has neither.
        env = {**os.environ, "CUGA_DBS_DIR": f"{scratch}/dbs", "CUGA_LOGGING_DIR": f"{scratch}/logging",
               "ENV_FILE": os.devnull, "OPENAI_API_KEY": os.environ.get("OPENAI_API_KEY") or "dummy",
               **variables, "AGENT_SETTING_CONFIG": settings_file}
        try:
            argv = [python, str(PROBE), *graph, *([str(skills)] if skills is not None else [])]
            done = subprocess.run(argv, cwd=scratch, env=env, capture_output=True, text=True,
                                  timeout=IMPORT_PROBE_TIMEOUT, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return Probe(f"importing the CUGA SDK took longer than {IMPORT_PROBE_TIMEOUT:g} s")
    answer = done.stdout.strip().rpartition("\n")[2]
    if done.returncode == 0:
        with contextlib.suppress(ValueError):
            found = json.loads(answer)
            named = found["skills"]
            return Probe(skills=None if named is None else tuple(map(str, named)), model=str(found["model"]),
                         max_steps=str(found["max_steps"]))
    lines = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith(" ")]
    last = lines[-1] if lines else f"exit code {done.returncode}" if done.returncode else f"no answer: {answer[:200]!r}"
    return Probe(f"the CUGA SDK cannot be imported ({last}): {INSTALL_HINT}")
