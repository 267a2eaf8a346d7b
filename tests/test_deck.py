"""Tests for the Palette skill's command script, skills/palette/scripts/deck.py.

Every test drives deck.py as a real subprocess, the way an agent's shell does.
The backend is a stand-in for an external Palette checkout: a tiny palette.py
written into a temporary PALETTE_HOME, whose speed and outcome are set through
FAKE_PALETTE_* environment variables. It appends each call to a counter file
so the tests can prove that only one writer or builder was ever started.

No test depends on how fast the machine is: a job that must still be running
at some assertion waits on a gate file (Deck.closed_gate / Deck.release), not
on a sleep, and durations are never bounded from above (speed targets are
measured by scripts, not asserted here).
"""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

import pytest_palette

DECK = Path(pytest_palette.__file__).parent / "skills" / "palette" / "scripts" / "deck.py"
TRACE_KEYS = ["at", "command", "args", "seconds", "exit_code", "stdout"]

# The stand-in for a real Palette checkout's palette.py.
FAKE_PALETTE = r'''
import json, os, sys, time
from pathlib import Path

sub, rest = sys.argv[1], sys.argv[2:]
home = Path(__file__).parent
with open(os.environ.get("FAKE_PALETTE_COUNTER", str(home / "calls.txt")), "a") as f:
    f.write(sub + "\n")
(home / ("seen-" + sub + ".json")).write_text(json.dumps({
    "argv": sys.argv[1:], "cwd": os.getcwd(), "via_venv": os.environ.get("FAKE_VIA_VENV"),
    "dotenv_new": os.environ.get("FAKE_DOTENV_NEW"), "dotenv_old": os.environ.get("FAKE_DOTENV_OLD"),
    "dotenv_home": os.environ.get("FAKE_DOTENV_HOME"),
}))

def opt(name, default=None):
    return rest[rest.index(name) + 1] if name in rest else default

print("starting " + sub, flush=True)
print("rendering slide 1", flush=True)
time.sleep(float(os.environ.get("FAKE_PALETTE_SLEEP", "0")))
gate = os.environ.get("FAKE_PALETTE_GATE")
if gate:  # hold the job open until the test creates this file
    give_up = time.monotonic() + 300
    while not os.path.exists(gate) and time.monotonic() < give_up:
        time.sleep(0.02)
mode = os.environ.get("FAKE_PALETTE_MODE", "ok")
if mode == "fail":
    print("boom: model unreachable", flush=True)
    sys.exit(3)
pad = "x" * int(os.environ.get("FAKE_PLAN_PAD", "0"))
if sub == "build-plan":
    text = "# Plan\n\nRequest: " + rest[0] + "\n"
    if opt("--context") is not None:
        text += "Context: " + opt("--context") + "\n"
    Path(opt("--out")).write_text(text + pad)
elif sub == "edit-plan":
    old = Path(opt("--plan")).read_text()
    Path(opt("--out")).write_text(old + "Edited: " + rest[0] + "\n")
elif sub == "build-deck":
    out = Path(opt("--out-dir"))
    size = 1000 if mode == "small" else 25000
    (out / "deck.pptx").write_bytes(b"PK" + b"\0" * (size - 2))
    for n in (1, 2):
        (out / ("slide-%d.png" % n)).write_bytes(b"png")
    print(json.dumps({"pptx": str(out / "deck.pptx")}), flush=True)
'''


class Run:
    """One finished deck.py call: exit code, parsed JSON, raw stdout, wall time."""

    def __init__(self, proc: subprocess.CompletedProcess[str], seconds: float) -> None:
        self.code = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.seconds = seconds
        # The contract: exactly one JSON object on stdout, whatever happened.
        self.json: dict[str, Any] = json.loads(proc.stdout) if proc.stdout.strip() else {}
        if proc.stdout.strip():
            assert isinstance(self.json, dict)


class Deck:
    """Runs deck.py in a workspace with a stand-in Palette home."""

    def __init__(self, ws: Path, home: Path) -> None:
        self.ws = ws
        self.home = home
        self.env: dict[str, str] = {
            k: v for k, v in os.environ.items() if not k.startswith(("PALETTE_", "FAKE_PALETTE"))
        }
        self.env["PALETTE_HOME"] = str(home)
        self.env["FAKE_PALETTE_COUNTER"] = str(home / "calls.txt")

    def __call__(self, *args: str, python: list[str] | None = None, **env: str) -> Run:
        full_env = dict(self.env)
        full_env.update(env)
        for key in [k for k, v in full_env.items() if v == "<unset>"]:
            del full_env[key]
        t0 = time.monotonic()
        proc = subprocess.run(
            (python or [sys.executable]) + [str(DECK), *args],
            cwd=self.ws, env=full_env, capture_output=True, text=True, timeout=30,
        )
        return Run(proc, time.monotonic() - t0)

    def closed_gate(self) -> dict[str, str]:
        """Env for a job that cannot end until release(), however slow or busy the machine is."""
        return {"FAKE_PALETTE_GATE": str(self.home / "gate")}

    def release(self) -> None:
        """Open the gate: every job started with closed_gate() may now finish."""
        (self.home / "gate").touch()

    def calls(self) -> list[str]:
        path = self.home / "calls.txt"
        return path.read_text().split() if path.exists() else []

    def trace(self) -> list[dict[str, Any]]:
        path = self.ws / "trace.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def wait_until(check: Callable[[], bool], what: str, seconds: float = 60) -> None:
    """Poll until check() is true; the deadline only turns a hang into a failure."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def _kill_leftovers(root: Path) -> None:
    """Stop any detached job a test left running (each is its own process group)."""
    for state in list(root.rglob(".*.plan.json")) + list(root.rglob(".palette-build.json")):
        try:
            pid = json.loads(state.read_text()).get("pid")
        except (OSError, ValueError):
            continue
        if isinstance(pid, int):
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass


@pytest.fixture
def deck(tmp_path: Path) -> Iterator[Deck]:
    home = tmp_path / "palette-home"
    home.mkdir()
    (home / "palette.py").write_text(FAKE_PALETTE)
    ws = tmp_path / "ws"
    ws.mkdir()
    yield Deck(ws, home)
    _kill_leftovers(tmp_path)


def load_deck_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("palette_deck_under_test", DECK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_plan(deck: Deck, name: str = "plan.md") -> Path:
    r = deck("plan", "--request", "a deck on tides", "--out", name, "--hold-seconds", "10")
    assert r.json["state"] == "done", r.stdout
    return deck.ws / name


# --------------------------------------------------------------------------- plan / plan-status


def test_fast_plan_is_done_inside_the_hold_with_plan_status_shape(deck: Deck) -> None:
    r = deck("plan", "--request", "a deck on tides", "--out", "plan.md", "--hold-seconds", "10")
    assert r.code == 0
    assert list(r.json) == ["state", "done", "plan", "elapsed_seconds", "text"]
    assert r.json["state"] == "done" and r.json["done"] is True
    assert r.json["plan"] == str(deck.ws / "plan.md")
    assert "Request: a deck on tides" in r.json["text"]
    assert r.stdout.startswith("{\n  ")  # pretty-printed, like plan-status

    sidecar = json.loads((deck.ws / ".plan.md.plan.json").read_text())
    assert list(sidecar) == ["state", "stage", "pid", "plan", "started_at", "backend"]
    assert sidecar["state"] == "done" and sidecar["stage"] == "build-plan"
    assert sidecar["backend"] == "palette" and isinstance(sidecar["started_at"], int)
    assert (deck.ws / ".plan.md.plan.exit").read_text().strip() == "0"
    assert "starting build-plan" in (deck.ws / ".plan.md.plan.log").read_text()
    assert not (deck.ws / ".plan.md.plan.exit.tmp").exists()


def test_backend_gets_absolute_paths_home_cwd_dotenv_and_venv(deck: Deck) -> None:
    (deck.home / ".env").write_text(
        '# comment\nexport FAKE_DOTENV_NEW="from file"\nFAKE_DOTENV_OLD=loses\nFAKE_DOTENV_HOME=~/x\n'
    )
    venv_bin = deck.home / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").write_text(f'#!/bin/sh\nFAKE_VIA_VENV=1 exec {sys.executable} "$@"\n')
    (venv_bin / "python").chmod(0o755)
    (deck.ws / "notes.md").write_text("notes")
    r = deck("plan", "--request", "tides", "--context", "ctx", "--source", "notes.md", "--out", "sub/plan.md",
             "--hold-seconds", "10", FAKE_DOTENV_OLD="wins")
    assert r.json["state"] == "done"
    seen = json.loads((deck.home / "seen-build-plan.json").read_text())
    assert seen["argv"] == ["build-plan", "tides", "--out", str(deck.ws / "sub" / "plan.md"),
                            "--context", "ctx", "--source", str(deck.ws / "notes.md")]
    assert seen["cwd"] == str(deck.home)
    assert seen["via_venv"] == "1"
    assert seen["dotenv_new"] == "from file" and seen["dotenv_old"] == "wins"
    assert seen["dotenv_home"] == os.path.expanduser("~/x")


@pytest.mark.end_to_end
def test_slow_plan_detaches_then_plan_status_collects(deck: Deck) -> None:
    r = deck("plan", "--request", "tides", "--out", "plan.md", "--hold-seconds", "0.3", **deck.closed_gate())
    assert r.code == 0 and r.json["state"] == "running" and r.json["done"] is False
    assert r.json["stage"] == "build-plan" and "pid" in r.json and "elapsed_seconds" in r.json
    assert "plan-status" in r.json["note"] and "do NOT" in r.json["note"]
    assert r.json["next"].endswith("plan-status --out plan.md")
    assert r.seconds >= 0.3  # it held for its --hold-seconds before detaching

    mid = deck("plan-status", "--out", "plan.md", "--hold-seconds", "0")
    assert mid.json["state"] == "running" and list(mid.json) == [
        "state", "done", "elapsed_seconds", "note", "next"]

    deck.release()
    done = deck("plan-status", "--out", "plan.md", "--hold-seconds", "60")
    assert done.code == 0 and done.json["state"] == "done" and "Request: tides" in done.json["text"]
    assert deck.calls() == ["build-plan"]


def test_hold_seconds_zero_returns_at_once(deck: Deck) -> None:
    # The gated job cannot end, and a hold of the default 90 s would trip deck()'s 30 s timeout:
    # answering "running" at all shows the call returned at its 0 s limit.
    r = deck("plan", "--request", "tides", "--out", "plan.md", "--hold-seconds", "0", **deck.closed_gate())
    assert r.code == 0 and r.json["state"] == "running"


@pytest.mark.end_to_end
def test_hold_returns_done_when_the_job_ends_within_it(deck: Deck) -> None:
    # How promptly a hold notices the end is a speed target, measured by scripts, not here.
    r = deck("plan", "--request", "tides", "--out", "plan.md", "--hold-seconds", "60",
             FAKE_PALETTE_SLEEP="0.7")
    assert r.code == 0 and r.json["state"] == "done"

    plan = deck.ws / "plan.md"
    assert deck("start", "--plan", str(plan), "--out-dir", "out", FAKE_PALETTE_SLEEP="0.7").code == 0
    s = deck("status", "--out-dir", "out", "--hold-seconds", "60")
    assert s.code == 0 and s.json["state"] == "done"


def test_second_plan_collects_the_running_one(deck: Deck, monkeypatch: pytest.MonkeyPatch) -> None:
    first = deck("plan", "--request", "tides", "--out", "plan.md", "--hold-seconds", "0", **deck.closed_gate())
    assert first.json["state"] == "running"
    # The first writer cannot end before release(): the second call meets it running and starts no other.
    second = deck("plan", "--request", "tides again", "--out", "plan.md", "--hold-seconds", "0")
    assert second.code == 0 and second.json["state"] == "running"
    assert "do NOT run plan or edit again" in second.json["note"]
    assert json.loads((deck.ws / ".plan.md.plan.json").read_text())["pid"] == first.json["pid"]

    deck.release()
    done = deck("plan-status", "--out", "plan.md", "--hold-seconds", "60")
    assert done.code == 0 and done.json["state"] == "done"
    assert "Request: tides\n" in done.json["text"]  # the first writer's result
    assert deck.calls() == ["build-plan"]
    assert json.loads((deck.ws / ".plan.md.plan.json").read_text())["pid"] == first.json["pid"]

    # When the running writer ends within the second call's hold, that call answers with its result.
    # In-process, with "still running when the second call looked" pinned, so no race decides it.
    mod = load_deck_module()
    monkeypatch.chdir(deck.ws)
    monkeypatch.setattr(mod, "plan_running", lambda out: True)
    collected = mod.launch_plan("build-plan", ["tides again"], deck.ws / "plan.md", "plan.md", 60, False)
    assert collected.code == 0 and collected.payload["state"] == "done"
    assert "Request: tides\n" in collected.payload["text"]
    assert "already running" in collected.payload["note"]
    assert deck.calls() == ["build-plan"]


@pytest.mark.end_to_end
def test_plan_wait_ignores_the_hold_limit(deck: Deck) -> None:
    r = deck("plan", "--request", "tides", "--out", "plan.md", "--wait", "--hold-seconds", "0",
             FAKE_PALETTE_SLEEP="0.5")
    assert r.json["state"] == "done"
    failed = deck("plan", "--request", "tides", "--out", "p2.md", "--wait", FAKE_PALETTE_MODE="fail")
    assert failed.code == 1 and failed.json["ok"] is False
    assert failed.json["error"] == "boom: model unreachable"


def test_plan_error_state_has_log_tail_and_exit_1(deck: Deck) -> None:
    r = deck("plan", "--request", "tides", "--out", "plan.md", "--hold-seconds", "10",
            FAKE_PALETTE_MODE="fail")
    assert r.code == 1
    assert list(r.json) == ["state", "done", "exit_code", "elapsed_seconds", "log_tail", "hint"]
    assert r.json["exit_code"] == 3 and r.json["log_tail"][-1] == "boom: model unreachable"
    assert json.loads((deck.ws / ".plan.md.plan.json").read_text())["state"] == "error"


def test_plan_whose_process_died_without_exit_file_is_error(deck: Deck) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()  # reaped, so its pid is gone
    (deck.ws / "plan.md").write_text("old\n")
    (deck.ws / ".plan.md.plan.json").write_text(json.dumps(
        {"state": "running", "stage": "build-plan", "pid": dead.pid, "plan": str(deck.ws / "plan.md"),
         "started_at": int(time.time())}))
    # A known-dead job ends the hold, it does not run it out: a 300 s hold run out would trip
    # deck()'s 30 s timeout, so an answer at all shows the hold ended on the death.
    r = deck("plan-status", "--out", "plan.md", "--hold-seconds", "300")
    assert r.code == 1 and r.json["state"] == "error" and r.json["exit_code"] is None
    assert "stopped without recording an exit code" in r.json["hint"]


def test_plan_status_without_sidecar_is_an_answer(deck: Deck) -> None:
    write_plan(deck, "real.md")
    r = deck("plan-status", "--out", "wrong.md")
    assert r.code == 0
    assert list(r.json) == ["state", "done", "asked_about", "note", "plans_here", "next"]
    assert r.json["state"] == "none" and r.json["asked_about"] == "wrong.md"
    assert r.json["plans_here"] == ["real.md"]
    assert r.json["next"].endswith("plan-status --out real.md")


def test_unindent_fixes_literal_indent_but_trace_keeps_raw(deck: Deck) -> None:
    request = "Tides deck\n    for sailors\n    short"
    context = "Notes:\n        - springs\n\n        - neaps"
    r = deck("plan", "--request", request, "--context", context, "--out", "plan.md", "--hold-seconds", "10",
             PALETTE_TRACE=str(deck.ws / "trace.jsonl"))
    assert "Request: Tides deck\nfor sailors\nshort\n" in r.json["text"]
    assert "Context: Notes:\n- springs\n\n- neaps\n" in r.json["text"]
    assert deck.trace()[0]["args"]["context"] == context
    # Not the narrow pattern (first line indented): untouched.
    r2 = deck("plan", "--request", "  a\n  b", "--out", "p2.md", "--hold-seconds", "10")
    assert "Request:   a\n  b\n" in r2.json["text"]


@pytest.mark.parametrize(
    "request_text",
    ["line\n" * 8 + "end", "word " * 81 + "\n\n\n"],
    ids=["eight-newlines", "over-400-chars-three-newlines"],
)
@pytest.mark.end_to_end
def test_pasted_request_is_refused_unless_context_or_source(deck: Deck, request_text: str) -> None:
    r = deck("plan", "--request", request_text, "--out", "plan.md",
            PALETTE_TRACE=str(deck.ws / "trace.jsonl"))
    assert r.code == 2 and r.json["ok"] is False
    assert r.json["error"].startswith(f"--request is {len(request_text)} characters over")
    assert "--context" in r.json["fix"] and "--source" in r.json["fix"]
    assert deck.calls() == [] and not (deck.ws / ".plan.md.plan.json").exists()
    line = deck.trace()[0]
    assert line["exit_code"] == 2 and line["error"] == r.json["error"]

    ok = deck("plan", "--request", request_text, "--context", "the notes", "--out", "plan.md",
              "--hold-seconds", "10")
    assert ok.code == 0 and ok.json["state"] == "done"
    (deck.ws / "notes.md").write_text("notes")
    ok2 = deck("plan", "--request", request_text, "--source", "notes.md", "--out", "p2.md",
            "--hold-seconds", "10")
    assert ok2.json["state"] == "done"


@pytest.mark.parametrize("request_text", ["a\n" * 7 + "b", "w" * 500 + "\n\n"], ids=["seven-newlines",
        "long-two"])
def test_request_below_the_paste_rules_proceeds(deck: Deck, request_text: str) -> None:
    r = deck("plan", "--request", request_text, "--out", "plan.md", "--hold-seconds", "10")
    assert r.code == 0 and r.json["state"] == "done"


# --------------------------------------------------------------------------- edit


@pytest.mark.end_to_end
def test_edit_overwrites_plan_and_collects_like_plan(deck: Deck) -> None:
    plan = write_plan(deck)
    r = deck("edit", "--instruction", "make it 3 slides", "--plan", "plan.md", "--hold-seconds", "10")
    assert r.code == 0 and r.json["state"] == "done"
    assert r.json["text"].endswith("Edited: make it 3 slides\n") and plan.read_text() == r.json["text"]
    assert json.loads((deck.ws / ".plan.md.plan.json").read_text())["stage"] == "edit-plan"
    assert json.loads((deck.home / "seen-edit-plan.json").read_text())["argv"] == [
        "edit-plan", "make it 3 slides", "--plan", str(plan), "--out", str(plan)]

    other = deck("edit", "--instruction", "more casual", "--plan", "plan.md", "--out", "v2.md",
                 "--hold-seconds", "0", **deck.closed_gate())
    assert other.json["state"] == "running" and other.json["stage"] == "edit-plan"
    assert other.json["next"].endswith("plan-status --out v2.md")
    assert (deck.ws / ".v2.md.plan.json").exists()
    deck.release()
    assert deck("plan-status", "--out", "v2.md", "--hold-seconds",
            "60").json["text"].endswith("more casual\n")
    assert "more casual" not in plan.read_text()


def test_edit_of_missing_plan_is_a_json_error(deck: Deck) -> None:
    r = deck("edit", "--instruction", "shorter", "--plan", "nope.md")
    assert r.code == 1 and r.json["ok"] is False
    assert r.json["error"] == f"no plan at {deck.ws / 'nope.md'}" and r.json["fix"]
    assert deck.calls() == []


# --------------------------------------------------------------------------- start / status


def test_start_then_status_done_with_state_files(deck: Deck) -> None:
    plan = write_plan(deck)
    r = deck("start", "--plan", "plan.md", "--out-dir", "out", "--palette-family", "ocean")
    assert r.code == 0 and r.stdout.count("\n") == 1  # one compact line
    assert list(r.json) == ["state", "pid", "plan", "out_dir", "log", "started_at", "backend", "note", "next"]
    assert r.json["state"] == "running" and r.json["plan"] == str(plan)
    assert r.json["next"].endswith("status --out-dir out")
    state = json.loads((deck.ws / "out" / ".palette-build.json").read_text())
    assert list(state) == ["state", "pid", "plan", "out_dir", "log", "started_at", "backend"]
    assert state["log"] == str(deck.ws / "out" / "build.log")

    s = deck("status", "--out-dir", "out", "--hold-seconds", "10")
    assert s.code == 0
    assert list(s.json) == ["state", "done", "pptx", "pptx_bytes", "slide_previews", "verified",
            "elapsed_seconds"]
    assert s.json["pptx"] == str(deck.ws / "out" / "deck.pptx")
    assert s.json["pptx_bytes"] == 25000 and s.json["slide_previews"] == 2 and s.json["verified"] is True
    assert (deck.ws / "out" / ".palette-exit").read_text().strip() == "0"
    assert json.loads((deck.ws / "out" / ".palette-build.json").read_text())["state"] == "done"
    seen = json.loads((deck.home / "seen-build-deck.json").read_text())
    assert seen["argv"] == ["build-deck", "--plan", str(plan), "--out-dir", str(deck.ws / "out"), "--json",
                            "--palette-family", "ocean"]


@pytest.mark.end_to_end
def test_start_under_captured_pipes_returns_while_build_runs(deck: Deck) -> None:
    write_plan(deck)
    r = deck("start", "--plan", "plan.md", "--out-dir", "out", **deck.closed_gate())
    # subprocess.run(capture_output=True) waits for EOF on the pipes: a child that
    # inherited them would hold this call for the whole build. The gated build cannot
    # end, so this call returning at all (deck() times out at 30 s) shows it did not wait.
    assert r.code == 0 and r.json["state"] == "running"
    log = deck.ws / "out" / "build.log"
    wait_until(lambda: "rendering slide 1" in log.read_text(), "the build to log its progress")
    s = deck("status", "--out-dir", "out", "--hold-seconds", "0.5")
    assert s.code == 0 and s.json["state"] == "running"
    assert s.json["progress"] == "rendering slide 1"
    assert s.json["next"].endswith("status --out-dir out")


@pytest.mark.end_to_end
def test_second_start_collects_the_running_build(deck: Deck) -> None:
    write_plan(deck)
    first = deck("start", "--plan", "plan.md", "--out-dir", "out", **deck.closed_gate())
    # The first build cannot end before release(): the second start meets it running.
    second = deck("start", "--plan", "plan.md", "--out-dir", "out")
    assert second.code == 0 and second.json["note"] == "already building; poll with status"
    assert second.json["pid"] == first.json["pid"]
    deck.release()
    assert deck("status", "--out-dir", "out", "--hold-seconds", "60").json["state"] == "done"
    assert deck.calls().count("build-deck") == 1


@pytest.mark.end_to_end
def test_stale_exit_file_and_old_deck_do_not_read_as_done(deck: Deck) -> None:
    write_plan(deck)
    out = deck.ws / "out"
    out.mkdir()
    (out / ".palette-exit").write_text("0\n")
    (out / "deck.pptx").write_bytes(b"\0" * 30000)
    deck("start", "--plan", "plan.md", "--out-dir", "out", FAKE_PALETTE_MODE="fail", **deck.closed_gate())
    assert deck("status", "--out-dir", "out", "--hold-seconds", "0").json["state"] == "running"
    deck.release()
    s = deck("status", "--out-dir", "out", "--hold-seconds", "60")
    assert s.code == 1 and s.json["state"] == "error" and s.json["exit_code"] == 3


@pytest.mark.parametrize(
    ("mode", "exit_code", "hint"),
    [("small", 0, "under 20000 bytes"), ("fail", 3, "exit code 3")],
)
@pytest.mark.end_to_end
def test_status_error_state_has_log_tail(deck: Deck, mode: str, exit_code: int, hint: str) -> None:
    write_plan(deck)
    deck("start", "--plan", "plan.md", "--out-dir", "out", FAKE_PALETTE_MODE=mode)
    s = deck("status", "--out-dir", "out", "--hold-seconds", "10")
    assert s.code == 1 and s.json["state"] == "error" and s.json["done"] is False
    assert list(s.json) == ["state", "done", "elapsed_seconds", "exit_code", "pptx", "pptx_bytes",
                            "slide_previews", "verified", "log_tail", "hint"]
    assert s.json["exit_code"] == exit_code and s.json["verified"] is False and hint in s.json["hint"]
    assert s.json["log_tail"][0] == "starting build-deck" and len(s.json["log_tail"]) <= 15
    if mode == "small":
        assert s.json["pptx_bytes"] == 1000
    else:
        assert s.json["log_tail"][-1] == "boom: model unreachable"
    assert json.loads((deck.ws / "out" / ".palette-build.json").read_text())["state"] == "error"


def test_status_with_no_build_is_an_answer(deck: Deck) -> None:
    r = deck("status", "--out-dir", "deck")
    assert r.code == 0
    assert r.json == {"state": "none", "done": False, "out_dir": str(deck.ws / "deck"),
                      "note": "no build has been started in this directory", "next": r.json["next"]}
    assert "start --plan" in r.json["next"]


def test_start_with_missing_plan_is_a_json_error(deck: Deck) -> None:
    r = deck("start", "--plan", "plan.md", "--out-dir", "out")
    assert r.code == 1 and r.json["error"] == f"no plan at {deck.ws / 'plan.md'}" and "fix" in r.json
    assert not (deck.ws / "out").exists()


# --------------------------------------------------------------------------- find


@pytest.mark.end_to_end
def test_find_lists_plans_and_builds_in_each_state(deck: Deck) -> None:
    write_plan(deck, "done.md")
    # Gated, never released: these two are still running when find looks.
    deck("plan", "--request", "x", "--out", "running.md", "--hold-seconds", "0", **deck.closed_gate())
    deck("plan", "--request", "x", "--out", "failed.md", "--hold-seconds", "10", FAKE_PALETTE_MODE="fail")
    deck("start", "--plan", "done.md", "--out-dir", "b-done")
    deck("start", "--plan", "done.md", "--out-dir", "b-run", **deck.closed_gate())
    deck("start", "--plan", "done.md", "--out-dir", "b-err", FAKE_PALETTE_MODE="small")
    assert deck("status", "--out-dir", "b-done", "--hold-seconds", "10").json["state"] == "done"
    assert deck("status", "--out-dir", "b-err", "--hold-seconds", "10").json["state"] == "error"

    r = deck("find")
    assert r.code == 0 and r.json["root"] == str(deck.ws) and r.json["note"] == "1 finished deck(s)"
    by_key = {e.get("path") or e.get("dir"): e for e in r.json["found"]}
    ws = deck.ws
    assert by_key[str(ws / "done.md")] == {"kind": "plan", "path": str(ws / "done.md"), "written": True,
                                           "state": "done"}
    assert by_key[str(ws / "running.md")]["state"] == "running"
    assert by_key[str(ws / "running.md")]["written"] is False
    assert by_key[str(ws / "failed.md")]["state"] == "error"
    done = by_key[str(ws / "b-done")]
    assert done["kind"] == "build" and done["state"] == "done" and done["pptx_bytes"] == 25000
    assert done["pptx"] == str(ws / "b-done" / "deck.pptx") and done["slide_previews"] == 2
    assert by_key[str(ws / "b-run")]["state"] == "running" and "elapsed_seconds" in by_key[str(ws / "b-run")]
    err = by_key[str(ws / "b-err")]
    assert err["state"] == "error" and err["log"] == str(ws / "b-err" / "build.log")
    assert len(r.json["found"]) == 6


def test_find_on_empty_root_and_on_a_file(deck: Deck) -> None:
    r = deck("find", "--root", ".")
    assert r.json == {"root": str(deck.ws), "found": [], "note": "no finished deck under this root"}
    (deck.ws / "f.txt").write_text("x")
    bad = deck("find", "--root", "f.txt", PALETTE_HOME="<unset>")
    assert bad.code == 1 and bad.json["error"] == f"no directory at {deck.ws / 'f.txt'}"


# --------------------------------------------------------------------------- backends and errors


def test_palette_home_without_palette_py_names_it(deck: Deck, tmp_path: Path) -> None:
    empty = tmp_path / "empty-home"
    empty.mkdir()
    (deck.ws / "plan.md").write_text("# plan\n")
    for args in (["plan", "--request", "x", "--out", "p.md"], ["start", "--plan", "plan.md", "--out-dir",
            "o"]):
        r = deck(*args, PALETTE_HOME=str(empty))
        assert r.code == 1 and "PALETTE_HOME" in r.json["error"]
        assert str(empty / "palette.py") in r.json["error"] and r.json["fix"]


def test_palette_url_is_refused_as_unsupported_remote_mode(deck: Deck) -> None:
    r = deck("plan", "--request", "x", "--out", "p.md", PALETTE_URL="http://localhost:8000")
    assert r.code == 1 and "remote mode is not supported" in r.json["error"]
    assert "PALETTE_URL" in r.json["error"] and "unset PALETTE_URL" in r.json["fix"]
    assert deck.calls() == []


def test_reference_engine_command_line(deck: Deck, tmp_path: Path) -> None:
    recorder = tmp_path / "recording-python"
    recorder.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/argv.txt\n')
    recorder.chmod(0o755)
    (deck.ws / "plan.md").write_text("# plan\n")
    r = deck("start", "--plan", "plan.md", "--out-dir", "out", PALETTE_HOME="<unset>",
            PALETTE_PYTHON=str(recorder))
    assert r.code == 0 and r.json["backend"] == "reference"
    s = deck("status", "--out-dir", "out", "--hold-seconds", "10")
    assert s.json["state"] == "error" and "under 20000 bytes" in s.json["hint"]
    assert (tmp_path / "argv.txt").read_text().splitlines() == [
        "-u", "-m", "pytest_palette.engine", "build-deck", "--plan", str(deck.ws / "plan.md"),
        "--out-dir", str(deck.ws / "out"), "--json"]


def test_reference_engine_that_cannot_import_surfaces_in_status(deck: Deck, tmp_path: Path) -> None:
    # An interpreter without site-packages cannot import pytest_palette.
    nosite = tmp_path / "python-nosite"
    nosite.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    nosite.chmod(0o755)
    (deck.ws / "plan.md").write_text("# plan\n")
    deck("start", "--plan", "plan.md", "--out-dir", "out", PALETTE_HOME="<unset>", PALETTE_PYTHON=str(nosite))
    s = deck("status", "--out-dir", "out", "--hold-seconds", "10")
    assert s.code == 1 and s.json["state"] == "error" and s.json["exit_code"] == 1
    assert any("No module named" in line for line in s.json["log_tail"])


def test_missing_palette_python_is_a_json_error(deck: Deck) -> None:
    (deck.ws / "plan.md").write_text("# plan\n")
    r = deck("start", "--plan", "plan.md", "--out-dir", "out", PALETTE_HOME="<unset>",
             PALETTE_PYTHON="/nonexistent/python")
    assert r.code == 1 and "PALETTE_PYTHON=/nonexistent/python" in r.json["error"]
    assert "PALETTE_HOME" in r.json["fix"]


def test_no_backend_error_names_both_fixes(deck: Deck) -> None:
    (deck.ws / "plan.md").write_text("# plan\n")
    # -S: no site-packages, so this interpreter cannot import pytest_palette.
    r = deck("start", "--plan", "plan.md", "--out-dir", "out", python=[sys.executable, "-S"],
             PALETTE_HOME="<unset>", PALETTE_PYTHON="<unset>")
    assert r.code == 1 and r.json["ok"] is False
    assert sys.executable in r.json["error"] and "pytest_palette" in r.json["error"]
    assert "PALETTE_HOME" in r.json["fix"] and "palette.py" in r.json["fix"]
    assert "PALETTE_PYTHON" in r.json["fix"]


# --------------------------------------------------------------------------- trace


def test_trace_lines_key_by_key(deck: Deck) -> None:
    trace = str(deck.ws / "logs" / "trace.jsonl")  # parent is created
    long_request = "r" * 700
    before = time.time()
    r = deck("plan", "--request", long_request, "--out", "plan.md", "--hold-seconds", "10",
             PALETTE_TRACE=trace, FAKE_PLAN_PAD="5000", SECRET_TOKEN="hunter2-sentinel")
    after = time.time()
    [line] = [json.loads(x) for x in Path(trace).read_text().splitlines()]
    assert list(line) == TRACE_KEYS  # no "error" on success
    assert before <= line["at"] <= after and round(line["at"], 3) == line["at"]
    assert line["command"] == "plan"
    assert line["args"] == {"request": "r" * 600 + "… [+100 chars]", "out": "plan.md", "wait": False,
                            "hold_seconds": 10}
    assert line["seconds"] == round(line["seconds"], 2) and 0 <= line["seconds"] <= after - before
    assert line["exit_code"] == 0
    assert len(r.stdout) > 4000
    assert line["stdout"] == r.stdout[:4000] + f"… [+{len(r.stdout) - 4000} chars]"
    assert "hunter2-sentinel" not in Path(trace).read_text()


def test_trace_edit_error_and_lists(deck: Deck) -> None:
    trace = str(deck.ws / "trace.jsonl")
    (deck.ws / "a.md").write_text("a")
    long_path = "./" + "d/" * 320 + "x.md"
    deck("plan", "--request", "x", "--source", "a.md", "--source", long_path, "--out", "p.md",
            PALETTE_TRACE=trace)
    deck("edit", "--instruction", "shorter", "--plan", "missing.md", PALETTE_TRACE=trace)
    deck("status", "--out-dir", "nowhere", PALETTE_TRACE=trace)
    src, edit, status = deck.trace()
    assert src["args"]["source"] == ["a.md", long_path]  # lists are not clipped
    assert src["error"].startswith("no source file at") and src["exit_code"] == 1
    assert edit["command"] == "edit" and list(edit) == TRACE_KEYS + ["error"]
    assert edit["error"] == f"no plan at {deck.ws / 'missing.md'}" and edit["exit_code"] == 1
    assert edit["args"] == {"instruction": "shorter", "plan": "missing.md", "wait": False, "hold_seconds": 90}
    assert status["command"] == "status" and "error" not in status
    assert status["args"] == {"out_dir": "nowhere", "hold_seconds": 60}


@pytest.mark.end_to_end
def test_status_error_state_traces_exit_1_without_error_key(deck: Deck) -> None:
    write_plan(deck)
    deck("start", "--plan", "plan.md", "--out-dir", "out", FAKE_PALETTE_MODE="small")
    s = deck("status", "--out-dir", "out", "--hold-seconds", "10", PALETTE_TRACE=str(deck.ws / "trace.jsonl"))
    [line] = deck.trace()
    assert line["exit_code"] == 1 and "error" not in line and json.loads(line["stdout"]) == s.json


@pytest.mark.end_to_end
def test_no_trace_for_usage_errors_or_when_unset_or_blank(deck: Deck) -> None:
    trace = deck.ws / "trace.jsonl"
    usage = deck("plan", "--request", "x", PALETTE_TRACE=str(trace))  # --out missing
    assert usage.code == 2 and usage.stdout == "" and not trace.exists()
    deck("find", PALETTE_TRACE="   ")
    deck("find", PALETTE_TRACE="")
    deck("find")
    assert not trace.exists() and list(deck.ws.iterdir()) == []


def test_unwritable_trace_never_breaks_the_command(deck: Deck) -> None:
    (deck.ws / "blocker").write_text("a file, not a directory")
    r = deck("find", PALETTE_TRACE=str(deck.ws / "blocker" / "trace.jsonl"))
    assert r.code == 0 and r.json["found"] == []


def test_trace_appends_one_line_per_call(deck: Deck) -> None:
    trace = str(deck.ws / "t" / "trace.jsonl")
    deck("find", PALETTE_TRACE=trace)
    deck("plan-status", "--out", "plan.md", "--hold-seconds", "0", PALETTE_TRACE=trace)
    lines = [json.loads(x) for x in Path(trace).read_text().splitlines()]
    assert [x["command"] for x in lines] == ["find", "plan-status"]
    assert lines[0]["args"] == {"root": "."} and lines[1]["args"] == {"out": "plan.md", "hold_seconds": 0}


# --------------------------------------------------------------------------- liveness, in-process


def test_permission_error_liveness_is_unknown_not_dead(tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    mod = load_deck_module()

    def denied(pid: int, sig: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(mod.os, "kill", denied)
    assert mod.alive(12345) is None
    out = tmp_path / "plan.md"
    (tmp_path / ".plan.md.plan.json").write_text(json.dumps(
        {"state": "running", "stage": "build-plan", "pid": 12345, "plan": str(out),
                "started_at": int(time.time())}))
    assert mod.plan_running(out) is True
    monkeypatch.chdir(tmp_path)
    result = mod.collect_plan(out, "plan.md", 0)
    assert result.payload["state"] == "running" and result.code == 0
    assert mod.find_plan(out)["state"] == "running"

    def gone(pid: int, sig: int) -> None:
        raise ProcessLookupError(3, "No such process")

    monkeypatch.setattr(mod.os, "kill", gone)
    assert mod.alive(12345) is False
    assert mod.collect_plan(out, "plan.md", 0).payload["state"] == "error"


def test_liveness_when_ps_cannot_run_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = load_deck_module()

    def no_ps(*a: Any, **k: Any) -> None:
        raise OSError("ps: not permitted")

    monkeypatch.setattr(subprocess, "run", no_ps)
    assert mod.alive(os.getpid()) is None
    assert mod.alive(None) is None


@pytest.mark.parametrize(("ps_line", "expected"), [
    ("S    /bin/sh -c python -u -m pytest_palette.engine build-deck", True),
    ("S    [sh]", None),  # mid-exec: no command line yet — the race that once ended a hold at once
    ("R    ", None),
    ("Z    [sh] <defunct>", False),
    ("S    /usr/sbin/sshd -D", False),  # a recycled pid
])
def test_liveness_reads_state_and_command_line(monkeypatch: pytest.MonkeyPatch, ps_line: str,
                                               expected: bool | None) -> None:
    mod = load_deck_module()
    monkeypatch.setattr(mod.os, "kill", lambda pid, sig: None)
    monkeypatch.setattr(subprocess, "run",
                        lambda *a, **k: SimpleNamespace(returncode=0, stdout=ps_line + "\n"))
    assert mod.alive(4242) is expected


def test_dotenv_parser_and_unindent_units(tmp_path: Path) -> None:
    mod = load_deck_module()
    env = tmp_path / ".env"
    env.write_text(textwrap.dedent("""\
        # comment
        export A=1
        B='two words'
        C="x # not a comment"
        D=plain # a comment
        E=~/dir
        not a pair
    """))
    assert mod.parse_dotenv(env) == {"A": "1", "B": "two words", "C": "x # not a comment", "D": "plain",
                                     "E": os.path.expanduser("~/dir")}
    assert mod.unindent("a\n  b\n    c") == "a\nb\n  c"
    assert mod.unindent("a\n  b\nc") == "a\n  b\nc"  # no shared indent
    assert mod.unindent("single line") == "single line"


@pytest.mark.end_to_end
def test_liveness_reads_full_args_and_rejects_foreign_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = load_deck_module()
    monkeypatch.setenv("COLUMNS", "40")  # ps would otherwise clip args to this width
    ours = subprocess.Popen(["/bin/sh", "-c", "sleep 5 # " + "x" * 200 + " palette.py"])
    foreign = subprocess.Popen(["sleep", "5"])
    try:
        assert mod.alive(ours.pid) is True
        assert mod.alive(foreign.pid) is False  # alive, but not a Palette job (a recycled pid)
    finally:
        for proc in (ours, foreign):
            proc.kill()
            proc.wait()
    assert mod.alive(ours.pid) is False


def test_hold_poll_schedule_never_lags_past_a_tenth_of_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    """Drive hold() on a fake clock: whenever the job ends, the hold notices within 0.1 s."""
    mod = load_deck_module()
    clock = {"now": 0.0}

    def sleep(seconds: float) -> None:
        assert 0 <= seconds <= 0.1
        clock["now"] += seconds

    monkeypatch.setattr(mod, "time", SimpleNamespace(monotonic=lambda: clock["now"], sleep=sleep,
            time=time.time))
    for end in [0.01, 0.3, 1.0, 1.7, 2.5, 9.99, 59.0, 300.123]:
        clock["now"] = 0.0
        mod.hold(lambda end=end: clock["now"] >= end, None, 600)
        assert end <= clock["now"] <= end + 0.1 + 1e-9
    clock["now"] = 0.0
    mod.hold(lambda: False, None, 3.3)  # never ends: returns at the hold limit, not past it
    assert clock["now"] == pytest.approx(3.3)
    clock["now"] = 0.0
    mod.hold(lambda: False, None, 0)
    assert clock["now"] == 0.0


def test_plan_out_that_is_a_directory_is_a_json_error(deck: Deck) -> None:
    (deck.ws / "sub").mkdir()
    r = deck("plan", "--request", "x", "--out", "sub")
    assert r.code == 1 and r.json["error"] == "--out sub is a directory" and "plan.md" in r.json["fix"]


@pytest.mark.end_to_end
def test_killed_hold_still_answers_and_traces(deck: Deck) -> None:
    write_plan(deck)
    deck("start", "--plan", "plan.md", "--out-dir", "out", **deck.closed_gate())  # never released
    env = dict(deck.env, PALETTE_TRACE=str(deck.ws / "trace.jsonl"))
    proc = subprocess.Popen([sys.executable, str(DECK), "status", "--out-dir", "out", "--hold-seconds", "600"],
                            cwd=deck.ws, env=env, stdout=subprocess.PIPE, text=True)

    def holding_with_handler() -> bool:
        assert proc.poll() is None, "status ended before it was signalled"
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines())
        catches = int(fields["SigCgt"], 16) & (1 << (signal.SIGTERM - 1))
        # Sleeping with the handler installed: only the hold (inside main's try) sleeps after that.
        return bool(catches) and fields["State"].split()[0] == "S"

    # Signal only once deck.py has installed its SIGTERM handler; its hold cannot end before then.
    wait_until(holding_with_handler, "deck.py to install its SIGTERM handler and hold")
    proc.send_signal(signal.SIGTERM)  # what a host does at its command time limit
    stdout, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    answer = json.loads(stdout)
    assert answer["ok"] is False and "status again" in answer["fix"]
    [line] = deck.trace()
    assert line["command"] == "status" and line["exit_code"] == 143 and line["error"] == answer["error"]
    # The build itself was not touched.
    assert deck("status", "--out-dir", "out", "--hold-seconds", "0").json["state"] == "running"


def test_a_job_that_ends_between_the_two_looks_is_read_as_ended_not_killed(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # The race a busy machine opens: no exit file yet, then the job writes it and exits before the liveness
    # check (a `ps` call) is done. Its code is there on a second look; "killed" would be a false fault.
    module = load_deck_module()
    exit_file = tmp_path / ".palette-exit"

    def ends_meanwhile(pid: object) -> bool:
        exit_file.write_text("0\n")
        return False

    monkeypatch.setattr(module, "alive", ends_meanwhile)
    assert module.job_state(exit_file, 12345) == (False, 0)
    exit_file.unlink()
    monkeypatch.setattr(module, "alive", lambda pid: False)
    assert module.job_state(exit_file, 12345) == (False, None)  # gone with no code: killed
    monkeypatch.setattr(module, "alive", lambda pid: True)
    assert module.job_state(exit_file, 12345) == (True, None)
