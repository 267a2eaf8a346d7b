"""Real runs of cases, as a user starts them (`pytest cases --host … --model …` in a subprocess), each run once per
test session and shared by every test — and every xdist worker — that asks for the same one.

A sweep is the suite's most expensive thing: a whole benchmark session, with the agent's every command run for real
in the sandbox. Tests that assert different things on the same run ask `sweeps.run(...)` with the same arguments and
get the same finished folder; the first worker to need it runs it under a file lock (filelock, as pytest-xdist
documents for session data), the others wait for it and read it. A sweep's folder is read, never written, by the
tests: one that changes a run copies it first (`Sweep.copy`).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
from filelock import FileLock

T = TypeVar("T")
REPO = Path(__file__).resolve().parent.parent
#: One whole session, far above what the longest takes with both cores busy: it ends a hang, nothing else.
SWEEP_TIMEOUT = 1500


@dataclass(frozen=True)
class ItemResult:
    """One item of a finished session, as its JUnit report says: pass, fail, error or skipped."""

    outcome: str
    #: A failure's judge lines (the `↳ …` of its message); an error's or a skip's message.
    said: tuple[str, ...] = ()


def junit_results(junit: Path) -> dict[str, ItemResult]:
    """Each item of a JUnit report by its name (`case[host]`, `case[host-2]`)."""
    results = {}
    for testcase in ET.parse(junit).getroot().iter("testcase"):
        outcome, said = "pass", ()
        for kind in ("failure", "error", "skipped"):
            found = testcase.find(kind)
            if found is None:
                continue
            text = found.text or found.get("message") or ""
            if kind == "failure":
                outcome = "fail"
                said = tuple(line.strip()[2:] for line in text.splitlines() if line.strip().startswith("↳"))
            else:
                outcome, said = kind, ((found.get("message") or "") + (found.text or ""),)
        results[str(testcase.get("name"))] = ItemResult(outcome, said)
    return results


@dataclass(frozen=True)
class Sweep:
    """A finished session: its run folder, each item's result, and what it printed."""

    folder: Path
    items: dict[str, ItemResult]
    returncode: int
    stdout: str
    stderr: str

    @property
    def runs(self) -> Path:
        """The run folder (`--palette-run-dir`): one `<run id>/` per session."""
        return self.folder / "runs"

    def by_case(self, host: str | None = None) -> dict[str, list[str]]:
        """Each case's failure lines ([] for a pass), on `host` or on the only host; an error or a skip fails the
        calling test, naming it (a sweep that cannot run an item proves nothing about it)."""
        results: dict[str, list[str]] = {}
        for name, result in self.items.items():
            case, _, label = name.rstrip("]").partition("[")
            if host is not None and label.partition("-")[0] != host:
                continue
            assert result.outcome in ("pass", "fail"), f"{name} {result.outcome}: {result.said}"
            results[case] = list(result.said) if result.outcome == "fail" else []
        return results

    def copy(self, where: Path) -> Path:
        """A copy of the run folder for a test that writes into it (rejudge, a report's files); returns it."""
        shutil.copytree(self.runs, where, symlinks=True)
        return where


#: The variable naming the folder every session the tests start keeps pytest's cache in (set by conftest.py for
#: the whole test session): there the cuga host keeps its probe of CUGA, 5 CPU-s a session otherwise.
CACHE_VARIABLE = "TESTS_INNER_PYTEST_CACHE"


def inner_cache() -> list[str]:
    """The options that give a session the tests start the test session's common pytest cache, or none at all
    (`-p no:cacheprovider`) outside a test session: never a `.pytest_cache` in the repository or a test's folder."""
    folder = os.environ.get(CACHE_VARIABLE)
    return ["-o", f"cache_dir={folder}"] if folder else ["-p", "no:cacheprovider"]


def run_session(folder: Path, args: Sequence[str], *, cwd: Path = REPO, env: Mapping[str, str] | None = None,
                timeout: float = SWEEP_TIMEOUT) -> Sweep:
    """`python -m pytest *args` in `cwd`, into `folder/runs`, with a JUnit report read back."""
    folder.mkdir(parents=True, exist_ok=True)
    junit = folder / "junit.xml"
    # Neither a developer's Palette settings nor their OpenTelemetry collector (--palette-otlp reads its variables).
    environment = {name: value for name, value in os.environ.items()
                   if not name.startswith(("PALETTE_", "OTEL_EXPORTER_OTLP"))}
    environment.update(env or {})
    argv = [sys.executable, "-m", "pytest", *inner_cache(), "-p", "no:randomly",
            f"--palette-run-dir={folder / 'runs'}", f"--junitxml={junit}", "-q", *args]
    if environment.get("PYTHONPATH") and not any(a.startswith("--palette-sandbox-env") for a in args):
        # The sandbox keeps no PYTHONPATH: without it, deck.py's engine would import whatever copy of the package
        # the venv points at, not the one these tests run (a git worktree beside the venv's checkout).
        argv.append("--palette-sandbox-env=PYTHONPATH")
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=environment,
                          check=False)
    assert junit.exists(), f"{' '.join(args)}: no JUnit report (exit {done.returncode}):\n" \
                           f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return Sweep(folder, junit_results(junit), done.returncode, done.stdout, done.stderr)


class Sweeps:
    """The session's shared sweeps, under `root` (the xdist workers' common temporary folder)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def run(self, *args: str, env: Mapping[str, str] | None = None) -> Sweep:
        """The shipped cases (`cases/`) run with `args`, once per session whoever asks first."""
        return self.session([str(REPO / "cases"), f"--rootdir={REPO}", *args], env=env)

    def shared(self, name: str, make: Callable[[Path], T]) -> T:
        """`make(folder)`, once per test session whichever worker asks first; the others get what it returned
        (pickled beside it). For a module's costly fixture — a whole session run in a process of its own — that
        xdist would otherwise run again on each worker its tests are spread to."""
        folder = self.root / name
        with FileLock(str(folder.with_suffix(".lock"))):
            saved, failed = folder.with_suffix(".pickle"), folder.with_suffix(".failed")
            if saved.is_file():
                kept: T = pickle.loads(saved.read_bytes())
                return kept
            if failed.is_file():  # made once and failed: its first asker's test says why, in full
                pytest.fail(f"{name}, shared with another test, failed there: {failed.read_text(encoding='utf-8')}",
                            pytrace=False)
            folder.mkdir()
            try:
                made = make(folder)
            except BaseException as error:
                failed.write_text(f"{type(error).__name__}: {str(error)[:2000]}", encoding="utf-8")
                raise
            saved.write_bytes(pickle.dumps(made))
            return made

    def session(self, args: Sequence[str], *, cwd: Path = REPO, env: Mapping[str, str] | None = None,
                project: Path | None = None) -> Sweep:
        """Any session started with `args` in `cwd`, once per test session. With `project`, a fresh copy of that
        folder, as a user's checkout, is made in the sweep's folder and the session runs there."""
        key = hashlib.sha256(json.dumps([list(args), str(cwd), dict(env or {}), str(project)]).encode()).hexdigest()

        def start(folder: Path) -> Sweep:
            where = cwd
            if project is not None:
                where = folder / project.name
                shutil.copytree(project, where, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            return run_session(folder, args, cwd=where, env=env)

        return self.shared(f"sweep-{key[:16]}", start)
