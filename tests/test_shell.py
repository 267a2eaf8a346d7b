"""The react host's shell tool: fixed cwd, reported exit codes, clipping and an honest timeout."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from pytest_palette.hosts.base import COMMAND_TIMEOUT, OUTPUT_LIMIT
from pytest_palette.hosts.shell import DEFAULT_OUTPUT_LIMIT, Shell, clip, run_shell


def test_each_command_starts_in_the_workspace(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    assert run_shell("cd sub && pwd", tmp_path, os.environ).strip() == str(tmp_path / "sub")
    assert run_shell("pwd", tmp_path, os.environ).strip() == str(tmp_path)


def test_the_environment_reaches_the_command(tmp_path: Path) -> None:
    env = {**os.environ, "PALETTE_TRACE": str(tmp_path / "t.jsonl")}
    assert run_shell("echo $PALETTE_TRACE", tmp_path, env).strip() == str(tmp_path / "t.jsonl")


def test_stderr_and_a_non_zero_exit_are_reported(tmp_path: Path) -> None:
    text = run_shell("echo out; echo oops >&2; exit 3", tmp_path, os.environ)
    assert text.splitlines() == ["out", "[stderr]", "oops", "[exit code 3]"]


def test_silence_is_said_out_loud(tmp_path: Path) -> None:
    assert run_shell("true", tmp_path, os.environ) == "[no output]"


def test_long_output_keeps_its_start_and_end_around_a_marker_that_says_how_much(tmp_path: Path) -> None:
    text = run_shell("python3 -c \"print('a' * 30000 + 'b' * 20000)\"; echo oops >&2; exit 3", tmp_path,
                     os.environ, limit=10_000)
    head, marker, tail = text.split("\n", 2)
    # The start (deck.py's answer) and the end (the exit code, the last error) survive; the middle is cut.
    assert head == "a" * 9_000 and tail.endswith("b\n[stderr]\noops\n[exit code 3]") and len(tail) == 1_000
    assert "40,028 of its 50,028 characters cut here" in marker and "limit of 10,000" in marker
    assert "--palette-output-limit" in marker


def test_output_at_the_limit_is_left_whole(tmp_path: Path) -> None:
    assert clip("x" * 5_000, 5_000) == "x" * 5_000
    assert run_shell("printf %05000d 0", tmp_path, os.environ, limit=5_000) == "0" * 5_000


def test_the_default_limit_is_no_tighter_than_any_real_clients() -> None:
    # Claude Code's Bash tool: 30,000 inline by default, BASH_MAX_OUTPUT_LENGTH at most 150,000; CUGA: 70,000.
    assert DEFAULT_OUTPUT_LIMIT == OUTPUT_LIMIT >= 150_000


def test_a_timeout_is_not_evidence_of_failure_and_stops_the_command(tmp_path: Path) -> None:
    text = run_shell("echo $$ > pid; sleep 30; touch late", tmp_path, os.environ, timeout=0.5)
    assert "not evidence" in text and "Poll" in text
    # Stopped, not waited for: the shell that ran it is gone (a 30 s wait would have left "late"). On a busy
    # machine the time limit may come before the shell wrote its pid; then there is nothing left to look for.
    shell = (tmp_path / "pid").read_text().strip() if (tmp_path / "pid").exists() else ""
    assert not (shell.isdigit() and Path(f"/proc/{shell}").exists()) and not (tmp_path / "late").exists()


def test_the_default_timeout_outlasts_deck_py_holds() -> None:
    assert COMMAND_TIMEOUT > 90


def test_a_closed_shell_stops_the_running_command_and_runs_no_other(tmp_path: Path) -> None:
    # What a turn timeout or Ctrl-C does to react's shell while the agent's thread is still in a command.
    shell = Shell(tmp_path, os.environ, timeout=600)
    said: list[str] = []
    worker = threading.Thread(target=lambda: said.append(shell.run("echo started > began; sleep 600; touch late")))
    worker.start()
    while not (tmp_path / "began").exists():  # the command is running (no time assumed)
        time.sleep(0.05)
    shell.close()
    worker.join(timeout=120)
    assert not worker.is_alive() and said and not (tmp_path / "late").exists()
    # The agent's next command (its thread cannot be stopped from outside) is refused, not run.
    assert shell.run("touch after") == "[this conversation is over: the command was not run]"
    assert not (tmp_path / "after").exists()


def test_a_command_longer_than_one_argument_runs_whole(tmp_path: Path) -> None:
    body = "x" * (300 * 1024)  # over Linux's 128 KiB for one argument of `sh -c`
    text = run_shell(f"cat > big.txt <<'END'\n{body}\nEND\nwc -c < big.txt", tmp_path, os.environ)
    assert text.strip() == str(len(body) + 1)
