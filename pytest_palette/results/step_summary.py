"""The session's matrix for a GitHub Actions run page: appended, in Markdown, to the file $GITHUB_STEP_SUMMARY
names, when it names one.

The same matrix and footer as the terminal table (cases × hosts, each cell's outcome or passes/n; per host what
passed, failed and errored, the model and the sandbox), then each failed item with the judge's words.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

from ..cases import item_name
from .marks import MARK, cell_text, table_lines
from .record import Record
from .redaction import Secrets
from .table import footer, session_matrix_of

VARIABLE = "GITHUB_STEP_SUMMARY"


def markdown(records: Sequence[Record], hosts: Sequence[str]) -> str:
    """The matrix, the footer and the failures as Markdown (empty without records)."""
    if not records:
        return ""
    shown = session_matrix_of(records, hosts)
    runs = sorted({record.run_id for record in records})
    lines = [f"### pytest-palette: run {', '.join(runs)}", ""]
    lines += table_lines(["case", *(c.label for c in shown.columns)],
                         ([_text(case)] + [cell_text(shown.cell(case, c)) for c in shown.columns]
                          for case in shown.cases))
    lines += ["", *(f"- {_text(line)}" for line in footer(shown))]
    failed = [record for record in records if record.outcome in ("fail", "error")]
    if failed:
        repeated = any(record.run_index > 1 for record in records)
        lines += ["", "Failures, in the judge's words:", ""]
        for record in failed:
            label = item_name(record.case, record.host, record.run_index if repeated else None)
            lines.append(f"- `{label}` {MARK[record.outcome]}: {_text('; '.join(record.failures))}")
    return "\n".join(lines) + "\n\n"


def append(records: Sequence[Record], hosts: Sequence[str], warn: Callable[[str], object],
           environ: Mapping[str, str] = os.environ, secrets: Secrets | None = None) -> None:
    """Append the matrix to $GITHUB_STEP_SUMMARY when it is set, scrubbed of `secrets` (the session's; those of
    `environ` when not given); a file that cannot be written is a warning (through `warn`), never the session's
    failure."""
    path = environ.get(VARIABLE, "").strip()
    text = markdown(records, hosts) if path else ""
    if not text:
        return
    text = (secrets if secrets is not None else Secrets.of(environ)).scrub(text)
    try:
        with open(path, "a", encoding="utf-8") as summary:  # appended: other steps' summaries stay
            summary.write(text)
    except OSError as error:
        warn(f"palette: could not append the matrix to ${VARIABLE} ({path}): {error.strerror or error}")


def _text(words: str) -> str:
    """Words as Markdown text: GitHub renders HTML in a summary, so a `<` of the agent's must not open a tag."""
    return words.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
