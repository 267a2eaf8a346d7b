"""The shell an agent is given: one command at a time, in a fixed working directory."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from ..run.command_log import CommandLog
from .base import COMMAND_TIMEOUT

DEFAULT_OUTPUT_LIMIT = 24_000


def clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n… [output truncated, {len(text) - limit} more characters]"


def run_shell(
    command: str,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float = COMMAND_TIMEOUT,
    limit: int = DEFAULT_OUTPUT_LIMIT,
    log: CommandLog | None = None,
) -> str:
    """Run `command` with /bin/sh in `cwd`, record it in `log`, and render what a model should read back.

    The command gets its own process group so a timeout stops everything it started in the
    foreground; work that deck.py detached runs in a session of its own and survives, as it must.
    """
    started = time.time()
    try:
        process = subprocess.Popen(
            command, shell=True, cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )
    except OSError as error:
        if log:
            log.add(command, started, time.time(), None, "", str(error))
        return f"[could not run the command: {error}]"
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        stdout, stderr = process.communicate()
        if log:
            log.add(command, started, time.time(), None, stdout, stderr)
        return (f"[the command was stopped after {timeout:g} s by this shell's time limit. That is not "
                "evidence that it failed: slow work may still be running. Poll for the result instead "
                "of re-running it.]")
    if log:
        log.add(command, started, time.time(), process.returncode, stdout, stderr)
    parts = [stdout]
    if stderr:
        parts.append(f"[stderr]\n{stderr}" if stdout else stderr)
    if process.returncode:
        parts.append(f"[exit code {process.returncode}]")
    text = "\n".join(part.rstrip("\n") for part in parts if part)
    return clip(text, limit) if text.strip() else "[no output]"


def _kill_group(process: subprocess.Popen[str]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()
