"""Ledger records for the ledger, stats and report tests: lines in today's and the first format."""

from __future__ import annotations

import json
import multiprocessing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pytest_palette.results.record import Record, RecordError, from_json


def record(**overrides: Any) -> dict[str, Any]:
    """A schema-1 record (the first ledger format, as ledgers written before schema 2 hold it): a pass of
    case `three_slides` on host `react`; any field can be overridden."""
    base: dict[str, Any] = {
        "schema": 1, "run_id": "20261130-120000", "case": "three_slides", "host": "react",
        "model": "rehearsal", "provider": "rehearsal", "run_index": 1, "outcome": "pass", "failures": [],
        "slides": 3, "has_plex": True, "deck": True, "polls": 2, "calls": ["plan", "status", "build", "status"],
        "context_expected": False, "context_reached": False, "edit_expected": False, "edit_called": False,
        "replanned_after_edit": False, "seconds": 10.0, "turns": 2, "tokens": None, "cost_usd": None,
        "skill_hash": "aaaaaaaaaaaa", "case_hash": "c0c0c0c0c0c0", "tags": ["core"], "plugin_version": "0.1.0",
        "started_at": 1000.0, "ended_at": 1010.0, "fingerprint": "f00df00df00df00d",
        "scaffold": {"skill_loading": "lazy"},
    }
    unknown = set(overrides) - set(base)
    assert not unknown, f"not a record field: {unknown}"
    base.update(overrides)
    return base


def as_record(fields: dict[str, Any]) -> Record:
    """The record a reader makes of this line."""
    return from_json(json.dumps(fields))


def records(items: Iterable[dict[str, Any]]) -> list[Record]:
    return [as_record(item) for item in items]


def is_valid(candidate: dict[str, Any]) -> bool:
    try:
        as_record(candidate)
    except RecordError:
        return False
    return True


def in_parallel(writer: Callable[[str, int, int], None], path: Path, workers: int, count: int) -> None:
    """Run `writer(path, worker, count)` in `workers` forked processes at once; each must exit cleanly."""
    context = multiprocessing.get_context("fork")
    processes = [context.Process(target=writer, args=(str(path), w, count)) for w in range(workers)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
