"""The one record schema: a field added in one place is written, read, validated and reported; a ledger of the
first format still reads and reports as it did; every read path refuses the same records with the same words."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from ledger_records import as_record, record

from pytest_palette.commands import main as palette_bench
from pytest_palette.results.ledger import LedgerWarning, append, load
from pytest_palette.results.markdown import to_markdown
from pytest_palette.results.model import build_report
from pytest_palette.results.record import Judged, RecordError, from_json
from pytest_palette.results.report_json import to_json

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_palette"
SCHEMA_1_RUN = Path(__file__).parent / "fixtures" / "run-schema-1"

ADDED = "    retries: Count | None = None  # the one line this test adds\n"
EXERCISE = textwrap.dedent('''
    import json, sys, warnings
    from pathlib import Path
    import msgspec
    from pytest_palette.commands import main
    from pytest_palette.results.ledger import append, load
    from pytest_palette.results.record import from_json

    run = Path(sys.argv[1])
    line = (run / "seed.json").read_bytes()
    seed = from_json(line)
    append(run / "results.jsonl", msgspec.structs.replace(seed, usage=msgspec.structs.replace(seed.usage, retries=3)))
    written = (run / "results.jsonl").read_bytes()
    bad = written.replace(b'"retries":3', b'"retries":"three"').replace(b'"run_index":1', b'"run_index":2')
    with open(run / "results.jsonl", "ab") as ledger:
        ledger.write(bad)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        [read] = load(run).latest.values()
    main(["report", str(run), "--json", str(run / "report.json"), "--out", str(run / "report.md")])
    import pytest_palette
    print(json.dumps({"module": pytest_palette.__file__, "written": written.decode(), "read": read.usage.retries,
                      "refused": [str(w.message) for w in caught],
                      "reported": json.loads((run / "report.json").read_text())["hosts"][0]["usage"],
                      "markdown": (run / "report.md").read_text()}))
''')


def test_a_field_added_to_the_record_in_one_place_is_written_read_validated_and_reported(tmp_path: Path) -> None:
    package = tmp_path / "copy" / "pytest_palette"
    shutil.copytree(PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__", "skills", "engine"))
    source = package / "results" / "record.py"
    text = source.read_text(encoding="utf-8")
    anchor = "    output_tokens: Count | None\n    cost_usd: Amount | None\n"
    assert text.count(anchor) == 1  # the one place: the Usage struct's last counted field
    source.write_text(text.replace(anchor, anchor + ADDED), encoding="utf-8")
    run = tmp_path / "run"
    run.mkdir()
    (run / "seed.json").write_text(json.dumps(record()))  # a schema-1 line: the upgrade fills the new field too
    done = subprocess.run([sys.executable, "-c", EXERCISE, str(run)], capture_output=True, text=True, timeout=120,
                          cwd=run, env={**os.environ, "PYTHONPATH": str(package.parent)}, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["module"].startswith(str(package))  # the copy ran, not the installed package
    assert '"cost_usd":null,"retries":3,' in result["written"]  # written
    assert result["read"] == 3  # read back
    assert any(":2: invalid record: usage.retries: expected int | null, got str" in w for w in result["refused"])
    assert result["reported"]["retries"] == 3  # reported, in JSON and in words
    assert "react: 2 turns, 3 retries." in result["markdown"]


def test_a_ledger_written_in_the_first_format_reads_and_reports_as_it_did() -> None:
    with pytest.warns(LedgerWarning, match="written by an earlier version and are not read"):
        reading = load(SCHEMA_1_RUN)
    assert len(reading.latest) == 6 and reading.skipped == 0
    three = reading.latest[("schema-1", "three_slides", "react", 2)]
    assert three.workspace is None and three.judged is not None and three.judged.max_polls is None
    assert three.judged.calls == ("find", "plan", "find", "start", "status") and three.usage.turns == 2
    markdown = to_markdown(build_report(reading))
    # The numbers the version that wrote it reported for it (its own `palette-bench report`).
    for line in ("| react | 4/6 | — | 30.0% – 90.3% | ", "| react | 66.7% | 66.7% | 66.7% |",
                 "| held_off | ✅ 2/2 · 0 sl · 0p |", "| three_slides | ✅ 2/2 · 3 sl · 1p |",
                 "| wrong_count | ❌ 0/2 · 3 sl · 1p |", "| Worst case polls that did not wait | 1 / 12 |",
                 "| Decks built | 4/6 |",
                 "- **wrong_count** (0/2): asked for 4 slides, got 3 (×2)"):
        assert line in markdown, line
    # Its scores, derived where its records allow: the passes score 1, the fails of a scored check are not known.
    assert "| 1.00 (1.00–1.00) over 2 of 3 cases; 2 run(s) unscored (written before checks) | rehearsal |" in markdown
    assert "| 66.7% | 66.7% | 66.7% | 1.00 (2 cases) | 1.00 (2 cases) |" in markdown


def test_show_finds_the_workspaces_of_a_first_format_run(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.warns(LedgerWarning):
        assert palette_bench(["show", str(SCHEMA_1_RUN), "--case", "wrong_count"]) == 0
    shown = capsys.readouterr().out
    assert "── FAIL  wrong_count[react-1]" in shown and "── FAIL  wrong_count[react-2]" in shown
    assert "covers: the judge compares the slide count exactly" in shown and "plan " in shown


@pytest.mark.parametrize("damage", ["random bytes", "truncated", "spans deleted"])
def test_an_earlier_versions_index_in_any_state_changes_nothing_and_is_named_once(
        tmp_path: Path, damage: str, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "schema-1"
    shutil.copytree(SCHEMA_1_RUN, run)
    index, spans = run / "results.jsonl.index", run / "results.jsonl.spans"
    if damage == "random bytes":
        index.write_bytes(os.urandom(index.stat().st_size))
    elif damage == "truncated":
        index.write_bytes(index.read_bytes()[:200])
    else:
        spans.unlink()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert palette_bench(["report", str(run), "--json", str(tmp_path / "r.json")]) == 0
    assert [str(w.message).split(": ", 1)[1] for w in caught] == [
        f"{'results.jsonl.index' if damage == 'spans deleted' else 'results.jsonl.index and results.jsonl.spans'} "
        "beside it were written by an earlier version and are not read (the ledger is read itself; delete them to "
        "stop this warning)"]
    reported = json.loads((tmp_path / "r.json").read_text())
    assert (reported["hosts"][0]["passes"], reported["hosts"][0]["n"], reported["records"]) == (4, 6, 6)
    capsys.readouterr()


# -- the same refusal on every read path ---------------------------------------------------------------------


@pytest.fixture(params=[float("inf"), -1.0], ids=["non-finite", "negative"])
def bad_run(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, str]:
    """A run whose second line claims an impossible time; its first is a good record."""
    run = tmp_path / "runs" / "r"
    append(run / "results.jsonl", as_record(record()))
    good = (run / "results.jsonl").read_text()
    seconds = "1e999" if request.param == float("inf") else "-1.0"
    bad = good.replace('"seconds":10.0', f'"seconds":{seconds}').replace('"run_index":1', '"run_index":2')
    with (run / "results.jsonl").open("a") as ledger:
        ledger.write(bad)
    message = ("usage.seconds: not a finite number" if seconds == "1e999"
               else "usage.seconds: expected float >= 0.0")
    return run, f"{run / 'results.jsonl'}:2: invalid record: {message}"


def test_an_impossible_time_is_refused_with_the_same_message_on_every_read_path(
        bad_run: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run, expected = bad_run
    with pytest.raises(RecordError, match=expected.rsplit("invalid record: ", 1)[1].replace(".", r"\.")):
        from_json((run / "results.jsonl").read_text().splitlines()[1])
    commands = {"report": ["report", str(run)], "show": ["show", str(run)], "rejudge": ["rejudge", str(run)],
                "compare": ["compare", str(run), str(run)]}
    for name, argv in commands.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            palette_bench(argv)
        said = {str(w.message) for w in caught if issubclass(w.category, LedgerWarning)}
        assert said == {expected}, name
    report = capsys.readouterr().out
    assert "1 record(s) from 1 ledger file(s)" in report


def test_a_case_with_its_own_ceiling_is_reported_against_it() -> None:
    within = as_record(record(polls=15, calls=["plan", *["status"] * 15, "build"]))
    within = type(within)(**{**{f: getattr(within, f) for f in within.__struct_fields__},
                             "judged": Judged(**{**{f: getattr(within.judged, f) for f in Judged.__struct_fields__},
                                                 "max_polls": 20})})
    metrics = build_report([within]).columns[0].metrics
    assert (metrics.polls_worst, metrics.polls_worst_ceiling) == (15, 20)
    assert (metrics.at_poll_ceiling, metrics.over_poll_ceiling) == (0, 0)
    assert "| Worst case polls that did not wait | 15 / 20 |" in to_markdown(build_report([within]))
    # The same 15 polls, from a first-format record (which did not carry its ceiling), are over the default.
    old = build_report([as_record(record(polls=15))]).columns[0].metrics
    assert (old.polls_worst_ceiling, old.over_poll_ceiling) == (12, 1)
    assert to_json(build_report([within]))["hosts"][0]["metrics"]["over_poll_ceiling"] == 0
