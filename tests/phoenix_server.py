"""Arize Phoenix as a real OpenTelemetry receiver for the tests of `--palette-otlp` (tests/test_otlp.py): `phoenix
serve` started in a folder of its own on free loopback ports, its OTLP/HTTP endpoint for a session to send to, and
its REST API to read the spans back as it stored them.

Phoenix lives in a venv of its own, `.venv-phoenix` (`make phoenix`: some 140 packages, several of which would clash
with the hosts' clients in the project's venv). Where it is missing, `require()` skips with what to install — unless
REQUIRE_PHOENIX or CI is set, where a missing Phoenix fails instead, so a CI run cannot pass by skipping.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

import needed
from ports import free_port

REPO = Path(__file__).resolve().parent.parent
#: Where `make phoenix` installs it, then any `phoenix` on PATH.
CANDIDATES = (REPO / ".venv-phoenix" / "bin" / "phoenix",)
#: Set (to anything but empty, 0 or false) where a missing Phoenix must fail, not skip: `.ci/run` sets the first.
REQUIRE_VARIABLES = ("REQUIRE_PHOENIX", "CI")
#: Seconds Phoenix may take to answer its health check: about 16 s idle (its imports are some 10 CPU-s), far more with
#: both cores busy. It ends a hang, nothing else.
READY_TIMEOUT = 300.0
#: Seconds the spans a session sent may take to be stored (Phoenix inserts them in batches, about every second).
STORED_TIMEOUT = 120.0


def command() -> str | None:
    """The `phoenix` executable, None if there is none."""
    for candidate in CANDIDATES:
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("phoenix")


def unavailable() -> str | None:
    """What is missing, naming what to install; None when Phoenix is here."""
    if command() is None:
        return ("Arize Phoenix is not installed: make phoenix (python3 -m venv .venv-phoenix && "
                ".venv-phoenix/bin/pip install arize-phoenix)")
    return None


def require() -> None:
    """Skip the calling test when Phoenix is not here, or fail it where it is required (CI)."""
    needed.require(unavailable(), REQUIRE_VARIABLES, "OTLP")


class Phoenix:
    """`phoenix serve` in `folder` (its database and its log), from `with Phoenix(folder) as phoenix:` to its end."""

    def __init__(self, folder: Path) -> None:
        executable = command()
        if executable is None:
            raise RuntimeError(unavailable() or "no Phoenix")
        folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = folder / "phoenix.log"
        environment = {**os.environ, "PHOENIX_WORKING_DIR": str(folder), "PHOENIX_HOST": "127.0.0.1",
                       "PHOENIX_PORT": str(self.port), "PHOENIX_GRPC_PORT": str(free_port()),
                       # Nothing reaches for the network: no telemetry of Phoenix's own.
                       "PHOENIX_TELEMETRY_ENABLED": "false", "PHOENIX_LOGGING_LEVEL": "warning"}
        with self.log.open("wb") as log:
            self.process = subprocess.Popen([executable, "serve"], cwd=folder, env=environment, stdout=log,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            self._wait_ready()
        except BaseException:
            self.close()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"phoenix serve exited {self.process.returncode}: {self._tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=5) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.25)
        raise RuntimeError(f"phoenix serve did not answer within {READY_TIMEOUT:g} s: {self._tail()}")

    def _tail(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")[-2000:]

    def spans(self, project: str = "default") -> list[dict[str, Any]]:
        """Every span Phoenix has stored in `project`, as its REST API gives them."""
        found: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            query = "limit=1000" + (f"&cursor={cursor}" if cursor else "")
            with urllib.request.urlopen(f"{self.url}/v1/projects/{project}/spans?{query}", timeout=30) as answer:
                page = json.load(answer)
            found += page["data"]
            cursor = page.get("next_cursor")
            if not cursor:
                return found

    def stored(self, count: int) -> list[dict[str, Any]]:
        """The spans once Phoenix holds at least `count` of them (or what it holds after STORED_TIMEOUT)."""
        deadline = time.monotonic() + STORED_TIMEOUT
        while True:
            spans = self.spans()
            if len(spans) >= count or time.monotonic() > deadline:
                return spans
            time.sleep(0.5)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> Phoenix:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
