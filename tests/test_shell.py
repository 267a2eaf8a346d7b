"""The react host's shell tool: fixed cwd, reported exit codes, clipping and an honest timeout."""

from __future__ import annotations

import os
from pathlib import Path

from pytest_palette.hosts.base import COMMAND_TIMEOUT
from pytest_palette.hosts.shell import DEFAULT_OUTPUT_LIMIT, run_shell


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


def test_long_output_is_clipped_and_says_how_much(tmp_path: Path) -> None:
    text = run_shell("python3 -c \"print('x' * 50000)\"", tmp_path, os.environ, limit=1000)
    assert text.startswith("x" * 1000)
    assert "truncated, 49000 more characters" in text
    assert DEFAULT_OUTPUT_LIMIT >= 20_000


def test_a_timeout_is_not_evidence_of_failure_and_stops_the_command(tmp_path: Path) -> None:
    text = run_shell("echo $$ > pid; sleep 30; touch late", tmp_path, os.environ, timeout=0.5)
    assert "not evidence" in text and "Poll" in text
    # Stopped, not waited for: the shell that ran it is gone (a 30 s wait would have left "late"). On a busy
    # machine the time limit may come before the shell wrote its pid; then there is nothing left to look for.
    shell = (tmp_path / "pid").read_text().strip() if (tmp_path / "pid").exists() else ""
    assert not (shell.isdigit() and Path(f"/proc/{shell}").exists()) and not (tmp_path / "late").exists()


def test_the_default_timeout_outlasts_deck_py_holds() -> None:
    assert COMMAND_TIMEOUT > 90
