"""Which Palette answers the skill's deck.py, and whether it does.

A deck.py decides as IBM's does: `PALETTE_URL` (a Palette web server) before `PALETTE_HOME` (a checkout holding
palette.py), else — the reference skill's own fallback — the reference engine. `PALETTE_HOME` may name the
reference engine's own palette.py (`python -m pytest_palette.engine --home`), so a deck.py written for the real
Palette runs against it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, MutableMapping
from pathlib import Path

from .skill import SkillCard, install

#: The folder to set PALETTE_HOME to for the reference engine: it holds a palette.py that runs it.
REFERENCE_HOME = Path(__file__).parent / "engine" / "home"
#: Seconds the round trip of --palette-check may take: a plan from a real Palette takes 40-180 s.
ROUND_TRIP_TIMEOUT = 240.0


def describe_backend(env: Mapping[str, str] | None = None) -> str:
    """The backend a deck.py that decides as IBM's does will use, in words."""
    environ = os.environ if env is None else env
    url = environ.get("PALETTE_URL", "").strip()
    if url:
        return f"Palette web server at {url} (PALETTE_URL)"
    home = environ.get("PALETTE_HOME", "").strip()
    if home:
        entry = Path(home).expanduser() / "palette.py"
        if not entry.is_file():
            return f"Palette at {home} (no palette.py there!)"
        if entry.resolve() == (REFERENCE_HOME / "palette.py").resolve():
            return f"reference engine through its palette.py at {home} (PALETTE_HOME)"
        return f"Palette at {home}"
    return "reference engine (pytest_palette.engine, python-pptx)"


#: Room a run folder needs before a case starts: decks, previews and traces of a sweep, with a margin.
MIN_FREE_BYTES = 200_000_000


def setting_problems(env: Mapping[str, str] | None = None) -> list[str]:
    """Every `PALETTE_*` setting that is malformed, each in one line naming the variable and the fix: checked
    before any case runs, so a typo is not reported as 33 failed decks."""
    from .engine.errors import EngineError
    from .engine.latency import ENV_VAR, parse_latency

    environ = os.environ if env is None else env
    problems = []
    try:
        parse_latency(environ.get(ENV_VAR))
    except EngineError as error:
        problems.append(str(error))
    url = environ.get("PALETTE_URL", "").strip()
    if url and not url.startswith(("http://", "https://")):
        problems.append(f"PALETTE_URL={url[:80]!r} is not an http:// or https:// address")
    home = environ.get("PALETTE_HOME", "").strip()
    if home and not url and not (Path(home).expanduser() / "palette.py").is_file():
        problems.append(f"PALETTE_HOME={home[:200]!r} holds no palette.py: point it at a Palette checkout, or at "
                        f"{REFERENCE_HOME} for the reference engine")
    python = environ.get("PALETTE_PYTHON", "").strip()
    if python and not (shutil.which(python) or os.access(python, os.X_OK)):
        problems.append(f"PALETTE_PYTHON={python[:200]!r} is not an interpreter this machine can run")
    return problems


def run_folder_problem(folder: Path, need: int = MIN_FREE_BYTES) -> str | None:
    """Why runs cannot be written under `folder` (not writable, or less than `need` bytes free), or None. Asked
    of the folder, or of its nearest existing parent: nothing is created before a run starts."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        if not existing.is_dir():
            raise NotADirectoryError(20, "not a directory", str(existing))
        with tempfile.TemporaryFile(dir=existing):
            pass
        free = shutil.disk_usage(existing).free
    except OSError as error:
        return f"the run folder {folder} cannot be written: {error.strerror or error}"
    if free < need:
        return f"the run folder {folder} has {free / 1e6:,.0f} MB free; a run needs at least {need / 1e6:,.0f} MB"
    return None


def agent_environment(trace: Path | None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment an agent's shell gets: the caller's, plus the trace path for this conversation.

    PALETTE_PYTHON lets deck.py, which runs under whatever `python3` the agent's shell finds, start
    the reference engine with an interpreter that has this package installed.
    """
    env: MutableMapping[str, str] = dict(os.environ if base is None else base)
    env.setdefault("PALETTE_PYTHON", sys.executable)
    env.pop("PALETTE_TRACE", None)
    if trace is not None:
        env["PALETTE_TRACE"] = str(trace)
    return dict(env)


def round_trip(skill: SkillCard, env: Mapping[str, str] | None = None,
               timeout: float = ROUND_TRIP_TIMEOUT) -> tuple[str | None, str]:
    """Ask the skill's deck.py for one small plan, as an agent would, in a scratch folder.

    Returns (the problem, or None when a plan came back; what happened, in words).
    """
    script = Path("skills") / skill.name / "scripts" / "deck.py"
    if not (skill.directory / "scripts" / "deck.py").is_file():
        return None, f"not checked: {skill.directory} has no scripts/deck.py to ask"
    agent = agent_environment(None, env)
    python = shutil.which("python3", path=agent.get("PATH")) or sys.executable  # what SKILL.md's `python3` finds
    with tempfile.TemporaryDirectory(prefix="palette-backend-check-") as scratch:
        install(skill, Path(scratch))
        started = time.monotonic()
        try:
            done = subprocess.run([python, str(script), "plan", "--request", "A 2-slide deck on tides",
                                   "--out", "plan.md"], cwd=scratch, env=agent, capture_output=True, text=True,
                                  timeout=timeout, stdin=subprocess.DEVNULL, check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"deck.py plan did not answer: {error}", "no plan came back"
        seconds = time.monotonic() - started
        answer = _json_object(done.stdout)
        if answer.get("done") and (Path(scratch) / "plan.md").is_file():
            return None, f"a plan came back in {seconds:.1f} s"
        said = answer.get("error") or answer.get("note") or (done.stderr or done.stdout).strip()[-300:]
        fix = f" — {answer['fix']}" if answer.get("fix") else ""
        return f"deck.py plan (exit {done.returncode}): {said or 'no answer'}{fix}", "no plan came back"


def _json_object(text: str) -> dict[str, object]:
    start, end = text.find("{"), text.rfind("}")
    try:
        found = json.loads(text[start:end + 1]) if 0 <= start < end else {}
    except json.JSONDecodeError:
        return {}
    return found if isinstance(found, dict) else {}
