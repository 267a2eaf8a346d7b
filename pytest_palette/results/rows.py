"""One row per item run: the flat view of a record that tables, spreadsheets and dataframes read.

Every column is a plain value (text, a number, a yes or no, or empty where the record does not know), so the same
rows are a CSV file and a Parquet table alike (exports/table.py), and DuckDB and pandas read either as it is. A
new column is added here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from .checks import score_of
from .record import Record
from .record import Value as Said

#: A column's kind, as a table's schema says it.
Kind = Literal["text", "integer", "number", "boolean"]


@dataclass(frozen=True)
class Column:
    name: str
    kind: Kind
    about: str


#: The columns, in order: what a row says of its item run.
COLUMNS: tuple[Column, ...] = (
    Column("run_id", "text", "the run"), Column("case", "text", "the case (a task family's task)"),
    Column("host", "text", "the host that drove it"), Column("run_index", "integer", "which repeat of the item"),
    Column("workspace", "text", "its folder, relative to the run's"),
    Column("outcome", "text", "pass, fail, error or skipped"),
    Column("score", "number", "0 to 1 from its checks; empty for an error or a skip, or where it is not known"),
    Column("failed_checks", "text", "the checks that failed, by name, comma-separated"),
    Column("failures", "text", "the judge's words for a fail, the reason for an error or a skip (one a line)"),
    Column("model", "text", "--model as given"), Column("label", "text", "the model as the host described it"),
    Column("provider", "text", "the model's provider"), Column("skill_hash", "text", "the skill's ('none': none)"),
    Column("sandbox", "text", "where the agent's commands ran"),
    Column("plugin_version", "text", "pytest-palette's version"),
    Column("seconds", "number", "wall time of the conversation"), Column("turns", "integer", "turns taken"),
    Column("input_tokens", "integer", "the agent's input tokens"),
    Column("output_tokens", "integer", "the agent's output tokens"),
    Column("cost_usd", "number", "the agent's cost in dollars"),
    Column("cost_source", "text", "provider (the client said) or prices (--palette-prices)"),
    Column("retries", "integer", "model calls its client retried"),
    Column("model_calls", "integer", "model calls made"), Column("commands", "integer", "commands the agent ran"),
    Column("stops", "text", "why each turn ended, comma-separated"),
    Column("calls", "text", "the skill's calls as the judge read them, comma-separated"),
    Column("deck_by", "text", "who made the deck: palette, agent or none"),
    Column("started_at", "number", "Unix time it started"), Column("ended_at", "number", "Unix time it ended"),
    Column("tags", "text", "the case's tags, comma-separated"), Column("family", "text", "a task family's name"),
    Column("case_hash", "text", "the case as it was asked"),
)
NAMES = tuple(column.name for column in COLUMNS)

#: A cell: a value as a record says it, or None where it does not know.
Value = Said | None


def row(record: Record) -> dict[str, Value]:
    """The row of one record."""
    judged, usage, terms = record.judged, record.usage, record.terms
    return {
        "run_id": record.run_id, "case": record.case, "host": record.host, "run_index": record.run_index,
        "workspace": record.workspace, "outcome": record.outcome, "score": score_of(record),
        "failed_checks": ",".join(c.name for c in judged.checks if c.passed is False) if judged else None,
        "failures": "\n".join(record.failures), "model": terms.model, "label": terms.label,
        "provider": terms.provider, "skill_hash": terms.skill_hash, "sandbox": terms.sandbox,
        "plugin_version": terms.plugin_version, "seconds": usage.seconds, "turns": usage.turns,
        "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens, "cost_usd": usage.cost_usd,
        "cost_source": usage.cost_source, "retries": usage.retries, "model_calls": usage.model_calls,
        "commands": usage.commands, "stops": ",".join(usage.stops),
        "calls": ",".join(judged.calls) if judged else None, "deck_by": judged.deck_by if judged else None,
        "started_at": usage.started_at, "ended_at": usage.ended_at, "tags": ",".join(record.tags),
        "family": record.family.family if record.family else None, "case_hash": record.case_hash,
    }


def rows(records: Iterable[Record]) -> list[dict[str, Value]]:
    """The rows of `records`, in the order of (run, host, case, repeat)."""
    ordered = sorted(records, key=lambda r: (r.run_id, r.host, r.case, r.run_index))
    return [row(record) for record in ordered]
