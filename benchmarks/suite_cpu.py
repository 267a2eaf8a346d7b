"""A pytest plugin for benchmarks/bench_suite.py: each test's CPU seconds (its process's and its waited-for children's:
the sessions, sandboxes and clients it started) and wall seconds, written per xdist worker to $SUITE_CPU_DIR."""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

_ROWS: list[tuple[str, float, float]] = []
#: When this process's first test started and its last one ended (time.time()): a worker idle at the end shows.
_SPAN: list[float] = []


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    cpu, wall = _cpu(), time.monotonic()
    if not _SPAN:
        _SPAN.append(time.time())
    yield
    _ROWS.append((item.nodeid, round(_cpu() - cpu, 2), round(time.monotonic() - wall, 2)))
    _SPAN[1:] = [time.time()]


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = os.environ.get("SUITE_CPU_DIR")
    if folder:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        Path(folder, f"{worker}.json").write_text(json.dumps({"rows": _ROWS, "cpu": _cpu(), "span": _SPAN}))
