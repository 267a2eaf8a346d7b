"""Route 3 of issue 21 on the claude host: an agent that rewrites the Claude CLI's settings, hooks and MCP servers,
reads /proc and fills /tmp and /dev/shm changes nothing of what the CLI runs or where it connects, and holds no key.

One session, two items: the hostile agent (`rehearsal:hostile_claude_settings`, rehearsal/hostile.py) attacks only
in the case whose request holds its marker, and is the good agent in the other. The model is a real model's path
(`anthropic:<model>`) to a gateway on loopback, with a key: the rehearsal server plays the gateway, so the key is
one the harness must keep from the agent, and the test sees that it still reaches the model.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ports import ProbePort
from sweeps import Sweeps
from test_sandbox import FAKE_KEYS, needs_bubblewrap

from pytest_palette.arena.sandbox import Limits
from pytest_palette.hosts.claude import find_cli
from pytest_palette.models import parse_model, rehearsal_policy
from pytest_palette.rehearsal.hostile import CLAUDE_MARKER, CLAUDE_SETTINGS_ATTACK, CLAUDE_SETTINGS_CHECK
from pytest_palette.rehearsal.server import RehearsalServer

CASES = f"""
- name: hostile_settings
  covers: an agent that rewrites the CLI's settings is contained, and its conversation still judged
  request: Build a 3-slide deck on prompt caching ({CLAUDE_MARKER}).
  replies: ["yes"]
  expect: {{slides: 3}}
- name: next_item
  covers: the item after it runs normally
  request: Build a 3-slide deck on tide pools.
  replies: ["yes"]
  expect: {{slides: 3}}
"""
#: Every form in which a planted key could leave: as is, and the base64 the agent prints to pass a redaction.
LEAKS = [form for value in FAKE_KEYS.values() for form in (value, base64.b64encode(value.encode()).decode())]


def _session(folder: Path) -> dict[str, Any]:
    """The session, with a loopback port that is neither the model nor its forwarder open for its whole length:
    what reached that port is part of what it returns."""
    (folder / "cases.yaml").write_text(CASES)
    (folder / "pytest.ini").write_text("[pytest]\npalette_cases = .\n")
    gateway = RehearsalServer(rehearsal_policy(parse_model("rehearsal:hostile_claude_settings"))).start()
    env = {name: value for name, value in os.environ.items() if not name.startswith(("PALETTE_", "ANTHROPIC_"))}
    args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", f"--rootdir={folder}",
            "--host=claude", "--model=anthropic:claude-sonnet-4-5"]
    if os.environ.get("PYTHONPATH"):  # a checkout run with PYTHONPATH: deck.py's engine must import it too
        args.append("--palette-sandbox-env=PYTHONPATH")
    try:
        with ProbePort() as probe:
            env.update({**FAKE_KEYS, "PALETTE_PROBE_PORT": str(probe.port), "ANTHROPIC_BASE_URL": gateway.base_url})
            result = subprocess.run(args, cwd=folder, env=env, capture_output=True, text=True, timeout=600,
                                    check=False)
        knocked = list(probe.knocked)
        served = list(gateway.served)
    finally:
        gateway.stop()
    runs = list((folder / "runs").glob("*/results.jsonl"))
    assert runs, f"the run left no ledger (exit {result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-2000:]}"
    run = runs[0].parent
    records = {r["case"]: r for r in map(json.loads, (run / "results.jsonl").open())}
    item = run / "claude" / "hostile_settings"
    ran = {c["command"]: c["stdout"] + c["stderr"] for c in map(json.loads, (item / "commands.jsonl").open())}
    return {"output": result.stdout + result.stderr, "run": run, "records": records, "item": item, "ran": ran,
            "knocked": knocked, "served": served}


@pytest.fixture(scope="module")
def sweep(sweeps: Sweeps) -> dict[str, Any]:
    """The one session every test here reads, once per test session (pytester is per test; this is run as a user
    runs it)."""
    return sweeps.shared("hostile-claude", _session)


pytestmark = [needs_bubblewrap, pytest.mark.skipif(find_cli() is None, reason="no Claude Code CLI")]


@pytest.mark.end_to_end
def test_the_agent_tried_every_route_and_both_items_were_judged(sweep: dict[str, Any]) -> None:
    assert set(CLAUDE_SETTINGS_ATTACK) <= set(sweep["ran"]) and set(CLAUDE_SETTINGS_CHECK) <= set(sweep["ran"])
    hostile, after = sweep["records"]["hostile_settings"], sweep["records"]["next_item"]
    assert hostile["outcome"] in ("pass", "fail"), hostile["failures"]  # judged, not an error of the run
    assert after["outcome"] == "pass", after["failures"]
    assert sweep["served"], "the model (the gateway) was reached, through the harness's forwarder"


def test_no_setting_the_agent_wrote_sent_the_cli_or_a_command_anywhere(sweep: dict[str, Any]) -> None:
    assert sweep["knocked"] == []  # neither ANTHROPIC_BASE_URL nor a command's socket reached the listener
    ran = sweep["ran"]
    # Turn 2: had the shell prefix, a hook, an MCP server or the apiKeyHelper run, escape.sh would have said so.
    escaped = ran[CLAUDE_SETTINGS_CHECK[0]]
    assert "reached the probe port" not in escaped and "key " not in escaped
    assert "connected to the probe port" not in ran[CLAUDE_SETTINGS_CHECK[1]]
    assert "ANTHROPIC" not in ran[CLAUDE_SETTINGS_CHECK[2]] and "PALETTE_TRACE=" in ran[CLAUDE_SETTINGS_CHECK[2]]
    # What the CLI reads is still the harness's: the agent's writes failed or landed where nothing reads them.
    folder = sweep["item"]
    for path in (folder / "claude" / "config" / "settings.json", folder / "work" / ".claude" / "settings.json",
                 folder / "work" / ".claude" / "settings.local.json"):
        assert path.read_text() == "{}\n", path
    assert (folder / "claude" / "home" / ".bashrc").read_text() == ""
    assert "read /proc" not in ran[CLAUDE_SETTINGS_ATTACK[0]]  # no process's environment with a key was readable


def test_tmp_and_shm_fill_stop_at_their_bound(sweep: dict[str, Any]) -> None:
    said = ran_lines(sweep["ran"][CLAUDE_SETTINGS_ATTACK[1]], "filled ")
    bound = Limits().tmp_bytes // 2**20
    assert {line.split()[1] for line in said} == {"/tmp", "/dev/shm"}
    assert all(int(line.split()[2]) <= bound for line in said), said


def test_no_key_reaches_any_file_of_the_run_nor_the_output(sweep: dict[str, Any]) -> None:
    for path in sweep["run"].rglob("*"):
        if path.is_file() and not path.is_symlink():
            text = path.read_bytes().decode(errors="replace")
            assert not any(leak in text for leak in LEAKS), path
    assert not any(leak in sweep["output"] for leak in LEAKS)


def ran_lines(output: str, prefix: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(prefix)]
