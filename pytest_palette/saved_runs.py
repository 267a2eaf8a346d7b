"""Reading a run folder after the fact: its ledger's latest record per item, and each item's workspace."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .ledger import read_records

Key = tuple[str, str, int]


def latest_records(run: Path) -> dict[Key, dict[str, Any]]:
    """The last record of each (case, host, run): a resumed item's new record replaces its error."""
    latest: dict[Key, dict[str, Any]] = {}
    for record in read_records(run):
        latest[(record["case"], record["host"], record["run_index"])] = record
    return latest


def item_folder(run: Path, record: dict[str, Any]) -> Path:
    """Where the item's conversation lives: `<host>/<case>`, or `<host>/<case>-<k>` for repeated runs."""
    host = run / str(record["host"])
    repeated: Path = host / f"{record['case']}-{record['run_index']}"
    return repeated if repeated.is_dir() or int(record["run_index"]) > 1 else host / str(record["case"])


def item_label(record: dict[str, Any], repeated: bool) -> str:
    host = f"{record['host']}-{record['run_index']}" if repeated else record["host"]
    return f"{record['case']}[{host}]"


def repeated(records: Iterable[dict[str, Any]]) -> bool:
    return any(record["run_index"] > 1 for record in records)
