"""The formats other tools read, written from one real offline run (the good and the bad run of tests/sites.py):
one row per item run in CSV and Parquet, read back by DuckDB with the ledger's outcomes, scores, tokens and cost;
no secret of the machine's in either."""

from __future__ import annotations

import math
from pathlib import Path

import duckdb
import msgspec
import pytest
from sites import OfflineRuns

from pytest_palette.commands import main
from pytest_palette.results.checks import score_of
from pytest_palette.results.ledger import append, load
from pytest_palette.results.rows import NAMES

pytestmark = pytest.mark.end_to_end

KEYS = ("run_id", "host", "case", "run_index")
SAID = ("outcome", "score", "input_tokens", "output_tokens", "cost_usd", "turns")
QUOTED = ", ".join(f'"{name}"' for name in KEYS + SAID)  # "case" is a word of SQL's


def ledger_rows(*runs: Path) -> dict[tuple[object, ...], tuple[object, ...]]:
    """What the ledger says of each item run, keyed as the export's rows are."""
    return {(r.run_id, r.host, r.case, r.run_index): (r.outcome, score_of(r), r.usage.input_tokens,
                                                      r.usage.output_tokens, r.usage.cost_usd, r.usage.turns)
            for run in runs for r in load(run).latest.values()}


def same(left: tuple[object, ...], right: tuple[object, ...]) -> bool:
    return all((a is None and b is None) or (isinstance(a, float) and isinstance(b, float) and math.isclose(a, b))
               or a == b for a, b in zip(left, right, strict=True))


@pytest.mark.parametrize("form", ["parquet", "csv"])
def test_an_export_reads_back_in_duckdb_one_row_per_item_run_as_the_ledger_says(
        offline_runs: OfflineRuns, tmp_path: Path, form: str, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / f"runs.{form}"
    assert main(["export", form, str(offline_runs.good), str(offline_runs.bad), "--out", str(out)]) == 0
    expected = ledger_rows(offline_runs.good, offline_runs.bad)
    assert f"wrote {out}: {len(expected)} item run(s)" in capsys.readouterr().out
    read = "read_parquet" if form == "parquet" else "read_csv_auto"
    connection = duckdb.connect()
    columns = [row[0] for row in connection.execute(f"DESCRIBE SELECT * FROM {read}(?)", [str(out)]).fetchall()]
    assert tuple(columns) == NAMES
    found = {tuple(row[:4]): tuple(row[4:]) for row in connection.execute(
        f"SELECT {QUOTED} FROM {read}(?)", [str(out)]).fetchall()}
    assert len(found) == len(expected) == connection.execute(f"SELECT count(*) FROM {read}(?)",
                                                             [str(out)]).fetchone()[0]  # type: ignore[index]
    assert found.keys() == expected.keys()
    differ = {key: (found[key], expected[key]) for key in expected if not same(found[key], expected[key])}
    assert not differ
    # The bad run failed exactly where the ledger says, and a failed run names its checks.
    failed = connection.execute(f"SELECT \"case\", failed_checks FROM {read}(?) WHERE run_id = 'bad' AND "
                                "outcome = 'fail'", [str(out)]).fetchall()
    assert {case for case, _ in failed} == offline_runs.bad_fails and all(checks for _, checks in failed)
    # Tokens are counted as numbers (DuckDB sums them), not as text.
    total = connection.execute(f"SELECT sum(input_tokens) FROM {read}(?)", [str(out)]).fetchone()
    assert total is not None and total[0] == sum(v[2] or 0 for v in expected.values())


def test_no_secret_reaches_an_export_and_bad_arguments_are_one_line(
        offline_runs: OfflineRuns, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    secret = "sk-ant-api03-" + "Q" * 40
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    monkeypatch.setenv("HOME", str(tmp_path))  # no credentials file of the developer's
    # A ledger from elsewhere whose record was not scrubbed: a failure that quotes the key.
    run = tmp_path / "elsewhere"
    record = next(r for r in load(offline_runs.bad).latest.values() if r.outcome == "fail")
    append(run / "results.jsonl", msgspec.structs.replace(record, failures=(f"the key was {secret}",)))
    for form in ("csv", "parquet"):
        out = tmp_path / f"leak.{form}"
        assert main(["export", form, str(run), "--out", str(out)]) == 0
        assert secret.encode() not in out.read_bytes()
    capsys.readouterr()
    assert main(["export", "csv", str(tmp_path / "none"), "--out", str(tmp_path / "x.csv")]) == 2
    assert capsys.readouterr().err.strip() == f"palette-bench export: {tmp_path / 'none'}: no such file or folder"
    assert main(["export", "csv", str(run), "--out", str(tmp_path)]) == 2
    assert "is a folder; name a file" in capsys.readouterr().err
