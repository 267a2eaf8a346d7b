"""`palette-bench converse`: the hand-driving command, run as a real process in a scratch workspace."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_palette.arena.workspace import TRACE_NAME
from pytest_palette.commands.converse import add_arguments, run
from pytest_palette.hosts.claude import find_cli
from pytest_palette.hosts.cuga import installed_problem
from pytest_palette.judge.evidence import inspect_deck, newest_deck, read_trace

pytestmark = pytest.mark.end_to_end

REQUEST = "Build a 3-slide deck on prompt caching"


def converse(workspace: Path, *args: str, env: dict[str, str] | None = None,
             host: str = "react") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_palette.commands", "converse", "--host", host, *args],
        cwd=workspace, env=env or dict(os.environ), capture_output=True, text=True, timeout=300,
        stdin=subprocess.DEVNULL,
    )


def test_a_plain_yes_builds_three_slides_and_prints_the_deck_and_trace(tmp_path: Path) -> None:
    done = converse(tmp_path, "--model", "rehearsal", REQUEST, "--reply", "yes")
    assert done.returncode == 0, done.stdout + done.stderr
    deck = newest_deck(tmp_path)
    assert deck is not None and deck.parent == tmp_path / "deck"
    facts = inspect_deck(deck)
    assert facts.size >= 20_000 and facts.slides == 3 and facts.has_plex
    assert f"deck: {deck} · {facts.size:,} bytes · 3 slides" in done.stdout
    assert "→ bash: python3 skills/palette/scripts/deck.py plan" in done.stdout
    assert "model rehearsal (scripted stand-in, not a language model)" in done.stdout
    calls = read_trace(tmp_path / TRACE_NAME)
    assert [c["command"] for c in calls] == ["find", "plan", "find", "start", "status"]
    for call in calls:
        assert list(call) == ["at", "command", "args", "seconds", "exit_code", "stdout"]
    assert calls[1]["args"]["request"] == REQUEST


def test_a_change_then_yes_builds_five_slides_through_edit(tmp_path: Path) -> None:
    done = converse(tmp_path, "--model", "rehearsal", REQUEST, "--reply", "make it 5 slides", "--reply", "yes")
    assert done.returncode == 0, done.stdout + done.stderr
    commands = [c["command"] for c in read_trace(tmp_path / TRACE_NAME)]
    assert "edit" in commands and "plan" not in commands[commands.index("edit"):]
    deck = newest_deck(tmp_path)
    assert deck is not None and inspect_deck(deck).slides == 5


def test_holding_off_leaves_no_deck(tmp_path: Path) -> None:
    done = converse(tmp_path, "--model", "rehearsal", REQUEST, "--reply", "actually, hold off for now")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not list(tmp_path.rglob("*.pptx"))
    assert "deck: none" in done.stdout


def test_watsonx_without_credentials_stops_before_the_agent_starts(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WATSONX_")}
    done = converse(tmp_path, "--model", "watsonx:openai/gpt-oss-120b", REQUEST, env=env)
    assert done.returncode == 2
    for name in ("WATSONX_APIKEY", "WATSONX_URL", "WATSONX_PROJECT_ID or WATSONX_SPACE_ID"):
        assert name in done.stdout
    assert not (tmp_path / "skills").exists() and not (tmp_path / TRACE_NAME).exists()


def test_an_earlier_trace_is_kept_not_overwritten(tmp_path: Path) -> None:
    (tmp_path / TRACE_NAME).write_text('{"command": "find"}\n')
    done = converse(tmp_path, "--model", "rehearsal", REQUEST, "--reply", "actually, hold off for now")
    assert done.returncode == 0
    kept = list(tmp_path.glob("palette-calls.*.jsonl"))
    assert len(kept) == 1 and kept[0].read_text() == '{"command": "find"}\n'


def test_an_unknown_host_is_a_usage_error(tmp_path: Path) -> None:
    other = subprocess.run([sys.executable, "-m", "pytest_palette.commands", "converse", "--host", "nope", REQUEST],
                           cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert other.returncode == 2 and "--host 'nope'" in other.stdout and "react" in other.stdout


def test_each_hosts_own_options_reach_converse_spelled_without_palette(tmp_path: Path) -> None:
    # In process: no conversation starts, each answer comes before any host is opened.
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args([REQUEST, "--eager", "--recursion-limit", "5", "--claude-cli", "/x"])
    assert (args.eager, args.recursion_limit, args.claude_cli) == (True, 5, "/x")
    said: list[str] = []
    assert run(parser.parse_args([REQUEST, "--recursion-limit", "0"]), said.append) == 2
    assert said == ["error: --recursion-limit must be at least 1 (got 0)"]
    assert run(parser.parse_args([REQUEST, "--host", "manual"]), said.append) == 2
    assert said[-1].endswith("known: claude, codex, cuga, react")
    assert "the agent host: react, claude, cuga" in " ".join(parser.format_help().split())


CUGA_MISSING = installed_problem()  # not the import probe: a second of CPU per worker at collection
CLAUDE_MISSING = None if find_cli() else "no Claude Code CLI (pip install claude-agent-sdk)"


@pytest.mark.parametrize(("host", "step"), [
    pytest.param("cuga", "→ run_command: python3 ",
                 marks=pytest.mark.skipif(CUGA_MISSING is not None, reason=f"cuga: {CUGA_MISSING}")),
    pytest.param("claude", "→ Bash: python3 ",
                 marks=pytest.mark.skipif(CLAUDE_MISSING is not None, reason=f"claude: {CLAUDE_MISSING}")),
])
def test_every_host_holds_a_conversation_by_hand_offline(tmp_path: Path, host: str, step: str) -> None:
    done = converse(tmp_path, "--model", "rehearsal", REQUEST, "--reply", "yes", host=host)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"host {host} · model rehearsal (scripted stand-in, not a language model)" in done.stdout
    assert any(line.strip().startswith(step) and "deck.py plan --request" in line for line in done.stdout.splitlines())
    assert "agent ◂ Here is the plan" in done.stdout
    deck = newest_deck(tmp_path)
    assert deck is not None and inspect_deck(deck).slides == 3 and inspect_deck(deck).has_plex
    assert f"deck: {deck} · " in done.stdout
    assert [c["command"] for c in read_trace(tmp_path / TRACE_NAME)][-2:] == ["start", "status"]
    turns = json.loads((tmp_path / "turns.json").read_text())["turns"]
    assert [turn["sent"] for turn in turns] == [REQUEST, "yes"] and all(turn["error"] is None for turn in turns)


def test_a_skill_folder_of_the_users_is_never_deleted_or_changed(tmp_path: Path) -> None:
    mine = tmp_path / "skills" / "palette"
    mine.mkdir(parents=True)
    (mine / "MY_EDITS.md").write_text("my notes\n", encoding="utf-8")
    done = converse(tmp_path, "--model", "rehearsal", REQUEST, "--reply", "yes")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "already exists and is not the skill under test" in done.stdout and "nothing was changed" in done.stdout
    assert sorted(p.name for p in mine.iterdir()) == ["MY_EDITS.md"]
    assert (mine / "MY_EDITS.md").read_text(encoding="utf-8") == "my notes\n"


def test_a_second_conversation_in_the_same_folder_reuses_the_identical_skill(tmp_path: Path) -> None:
    assert converse(tmp_path, "--model", "rehearsal", REQUEST, "--reply", "actually, hold off").returncode == 0
    again = converse(tmp_path, "--model", "rehearsal", REQUEST, "--reply", "actually, hold off")
    assert again.returncode == 0, again.stdout + again.stderr
