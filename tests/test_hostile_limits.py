"""The hostile route of every resource an agent can fill (issue 21): each is bounded on its own item, and an item
held at the same time runs untouched. One session, asserted on many times."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from sweeps import Sweeps, inner_cache
from test_sandbox import FAKE_KEYS, needs_bubblewrap

from pytest_palette.arena.sandbox import Limits, problem
from pytest_palette.rehearsal.hostile import HOSTILE_LIMITS, LIMITS_MARKER

CASES = f"""
- name: attacker
  covers: an agent that fills every resource it can is bounded on its own item
  request: "Build a 3-slide deck on prompt caching for our engineering all-hands. {LIMITS_MARKER}"
  replies: ["yes"]
  expect: {{slides: 3}}
- name: bystander
  covers: the item held beside it runs as if it were alone
  request: Build a 3-slide deck on prompt caching for our engineering all-hands.
  replies: ["yes"]
  expect: {{slides: 3}}
"""


@dataclass
class Run:
    host: str
    folder: Path
    records: dict[str, dict[str, object]]
    shown: dict[str, str]  #: the attacker's commands → what they printed
    files: list[Path]
    output: str


def _session(host: str, folder: Path) -> Run:
    """The session on `host`, in a process of its own, and what the attacker's commands printed."""
    (folder / "cases.yaml").write_text(CASES, encoding="utf-8")
    (folder / "pytest.ini").write_text("[pytest]\npalette_cases = .\n", encoding="utf-8")
    env = {**os.environ, **FAKE_KEYS}
    passed = ["--palette-sandbox-env=PYTHONPATH"] if os.environ.get("PYTHONPATH") else []
    done = subprocess.run([sys.executable, "-m", "pytest", *inner_cache(), f"--host={host}",
                           "--model=rehearsal:hostile_limits", "--palette-conversations", "2", *passed],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=600, check=False)
    [results] = (folder / "runs").glob("*/results.jsonl")
    records = {record["case"]: record for record in map(json.loads, results.open())}
    [attacker] = (folder / "runs").glob(f"*/{host}/attacker")
    ran = {entry["command"]: entry for entry in map(json.loads, (attacker / "commands.jsonl").open())}
    shown = {command: entry["stdout"] + entry["stderr"] for command, entry in ran.items()}
    return Run(host, folder, records, shown, [path for path in (folder / "runs").rglob("*") if path.is_file()],
               done.stdout + done.stderr)


@pytest.fixture(scope="module", params=["react", "cuga", "claude"])
def run(request: pytest.FixtureRequest, sweeps: Sweeps) -> Run:
    """One session per host (react runs each command itself; claude's CLI runs them through its shell prefix),
    the two items held at once (--palette-conversations 2), fake keys in the caller's environment. Each once per
    test session, whichever worker asks first."""
    host: str = request.param
    if problem("bubblewrap") is not None:
        pytest.skip(f"no sandbox here: {problem('bubblewrap')}")
    return sweeps.shared(f"hostile-limits-{host}", functools.partial(_session, host))


def _said(run: Run, number: int) -> str:
    command = HOSTILE_LIMITS[number]
    assert command in run.shown, f"the attacker never ran {command[:60]!r}"
    return run.shown[command]


def _stopped_at(said: str) -> int:
    return int(said.split("stopped at ")[1].split()[0])


@pytest.mark.end_to_end
@needs_bubblewrap
def test_the_item_held_beside_the_attacker_passes_untouched(run: Run) -> None:
    assert run.records["bystander"]["outcome"] == "pass", run.records["bystander"]["failures"]
    # Judged, not an error of the run: every limit it met was its own item's, and each kind is a note on it.
    attacker = run.records["attacker"]
    assert attacker["outcome"] in ("pass", "fail"), attacker["failures"]
    notes = " | ".join(attacker["judged"]["notes"])  # type: ignore[index]
    assert "filled a bound of its sandbox (No space left on device" in notes, notes
    assert "(File too large)" in notes and "Resource temporarily unavailable" in notes, notes
    assert "the skill's trace is larger than 32 MiB" in notes, notes  # 200 MiB written, read no further
    assert not [note for note in run.records["bystander"]["judged"]["notes"]  # type: ignore[index]
                if "bound of its sandbox" in note]


@needs_bubblewrap
def test_tmp_and_shm_are_bounded(run: Run) -> None:
    assert 0 < _stopped_at(_said(run, 0)) <= Limits().tmp_bytes // 2**20
    assert 0 < _stopped_at(_said(run, 1)) <= Limits().shm_bytes // 2**20


@needs_bubblewrap
def test_one_file_in_work_is_bounded(run: Run) -> None:
    assert 0 < _stopped_at(_said(run, 2)) <= Limits().file_bytes // 2**20


@needs_bubblewrap
def test_a_command_sees_only_its_items_processes_and_no_key(run: Run) -> None:
    said = _said(run, 3)
    seen = int(said.split("processes seen: ")[1].split()[0])
    assert "PALETTE_TRACE=" in said  # it did read environments: its own item's
    if run.host == "claude" and os.geteuid() != 0:
        # Not as root the CLI's commands cannot join the keeper (docs/sandbox.md): they see the machine's.
        assert seen > 0
    else:
        assert 0 < seen < 20


@needs_bubblewrap
def test_a_fork_loop_stops_at_the_item_process_limit(run: Run) -> None:
    said = _said(run, 4)
    assert int(said.split("fork refused after ")[1].split()[0]) < Limits().processes


@pytest.mark.end_to_end
@needs_bubblewrap
def test_no_key_anywhere_and_nothing_left_running(run: Run) -> None:
    for path in run.files:
        text = path.read_bytes().decode(errors="replace")
        assert not any(value in text for value in FAKE_KEYS.values()), path
    assert not any(value in run.output for value in FAKE_KEYS.values())
    assert not [p for p in psutil.process_iter() if _inside(p, run.folder)]


def _inside(process: psutil.Process, folder: Path) -> bool:
    """Whether `process` works in `folder` (not a fork of another test's hostile agent)."""
    try:
        return process.cwd().startswith(str(folder))
    except psutil.Error:
        return False
