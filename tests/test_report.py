"""`report` and `compare`: the numbers, the sections, the refusals, shard merges and the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ledger_records import as_record, record, records

from pytest_palette.cases import DEFAULT_MAX_POLLS as POLL_CEILING
from pytest_palette.commands import main as palette_bench
from pytest_palette.results import compare as compare_module
from pytest_palette.results.compare import SAME_SKILL
from pytest_palette.results.ledger import append, load
from pytest_palette.results.markdown import to_markdown
from pytest_palette.results.model import ReportError
from pytest_palette.results.model import build_report as build_from_records
from pytest_palette.results.report_json import to_json


def build_report(items: list[dict[str, Any]] | Any, **options: Any) -> Any:
    """The report of schema-1 lines (as ledgers written before schema 2 hold them), or of a ledger reading."""
    return build_from_records(records(items) if isinstance(items, list) else items, **options)


def compare(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> compare_module.Comparison:
    return compare_module.compare(records(before), records(after))

CASES = ("alpha", "beta", "gamma", "delta", "epsilon")


def repeated(host: str = "react", runs: int = 3, fails: dict[str, int] | None = None, **fields: Any
             ) -> list[dict[str, Any]]:
    """`runs` records per case on one host; `fails[case]` of them fail (the first ones)."""
    out = []
    for case in CASES:
        for index in range(1, runs + 1):
            failed = index <= (fails or {}).get(case, 0)
            out.append(record(case=case, host=host, run_index=index, outcome="fail" if failed else "pass",
                              failures=["asked for 3 slides, got 2"] if failed else [], **fields))
    return out


def test_three_runs_per_cell_show_passes_over_n_pass_at_k_pass_hat_k_and_intervals() -> None:
    report = build_report(repeated(fails={"beta": 2}))
    markdown = to_markdown(report)
    assert report.ks == [1, 2, 3]
    [react] = report.columns
    assert (react.passes, react.n) == (13, 15)
    assert react.pass_at[1] == (pytest.approx((1 + 1 / 3 + 1 + 1 + 1) / 5), 5)
    # beta: 1 of 3 → pass@3 = 1, pass^3 = 0; the other four: 1 and 1.
    assert react.pass_at[3] == (pytest.approx(1.0), 5)
    assert react.pass_hat[3] == (pytest.approx(4 / 5), 5)
    assert "| react | 13/15 |" in markdown
    assert "pass@1 | pass@2 | pass@3 | pass^2 | pass^3" in markdown
    assert "| alpha | ✅ 3/3 · 3 sl · 2p |" in markdown and "| beta | ◐ 1/3 · 3 sl · 2p |" in markdown
    assert "62.1% – 96.3%" in markdown  # Wilson 13/15: centre .791906 ± .170731
    assert "**Few repeats: n = 3 judged runs per cell.**" in markdown


def test_errors_and_skips_are_counted_apart_and_kept_out_of_the_denominators() -> None:
    records = [record(run_index=1), record(run_index=2, outcome="fail", failures=["x"]),
               record(run_index=3, outcome="error", failures=["HostError: timed out"], slides=None, polls=None),
               record(run_index=4, outcome="skipped", failures=["budget exhausted"])]
    report = build_report(records)
    [column] = report.columns
    assert (column.passes, column.n, column.errors, column.skipped) == (1, 2, 1, 1)
    assert column.pass_at[1] == (0.5, 1)
    markdown = to_markdown(report)
    assert "| react | 1/2 | 1 error, 1 skipped |" in markdown
    assert "◐ 1/2 · 3 sl · 2p (+1 error, 1 skipped)" in markdown
    assert "error: HostError: timed out" in markdown
    assert "**1 errored and 1 skipped run(s) are outside every denominator:**" in markdown


def test_duplicates_keep_the_last_and_say_how_many_were_dropped() -> None:
    records = [record(outcome="error", failures=["HostError"]), record(run_index=2),
               record(outcome="fail", failures=["late"])]
    report = build_report(records)
    assert report.duplicates_dropped == 1
    cell = report.cell("three_slides", "react")
    assert cell is not None and (cell.passes, cell.fails, cell.errors) == (1, 1, 0)
    assert "1 duplicate record(s)" in to_markdown(report)


def test_one_run_per_cell_reads_as_pass_fail_error_and_lists_failures_with_calls() -> None:
    records = [record(case="a"), record(case="b", outcome="fail", failures=["no .pptx was produced"],
                                        calls=["plan", "status"], slides=None),
               record(case="c", outcome="error", failures=["HostError: gone"])]
    markdown = to_markdown(build_report(records))
    assert "| a | ✅ pass · 3 sl · 2p |" in markdown
    assert "| b | ❌ FAIL 0.00 · ? sl · 2p |" in markdown  # no deck: its gate scores 0
    assert "| c | ⚠ ERROR ×1 |" in markdown
    assert "## Failures" in markdown and "- **b** (0/1): no .pptx was produced" in markdown
    assert "  - calls: plan → status" in markdown
    assert "**One run per cell.** One run per cell is a reason to look, not a ranking" in markdown


def test_several_hosts_disagreements_discrimination_missing_cases_and_models() -> None:
    records = (repeated("react", fails={"beta": 3}) + repeated("claude", model="sonnet", fingerprint="other")
               + [record(case="zeta", host="react")])
    report = build_report(records)
    markdown = to_markdown(report)
    assert [c.label for c in report.columns] == ["claude", "react"]
    assert report.disagreements == ["beta"]
    assert "## Where the hosts disagree" in markdown
    assert "  - react (0/3): asked for 3 slides, got 2 (×3)" in markdown
    assert "  - claude (3/3): passed every judged run" in markdown
    assert "**1 of 6 cases discriminate** between the hosts." in markdown
    assert "**1 case(s) did not run on every host:** zeta." in markdown
    assert "**Different models across hosts** (claude: sonnet; react: rehearsal): not like-for-like" in markdown
    assert "| claude | react | 1 | 0 | 4 | 1 | not distinguishable from noise |" in markdown


def test_the_seed_metrics_table() -> None:
    base: dict[str, Any] = {"context_expected": True, "edit_expected": True}
    records = [
        record(run_index=1, polls=POLL_CEILING, seconds=10.0, started_at=100.0, ended_at=110.0,
               context_reached=True, edit_called=True, calls=["plan", "edit", "build"], **base),
        record(run_index=2, outcome="fail", failures=["13 polls"], polls=13, seconds=30.0, started_at=105.0,
               ended_at=135.0, has_plex=False, edit_called=True, replanned_after_edit=True,
               calls=["plan", "edit", "plan", "build", "status"], **base),
        record(run_index=3, outcome="fail", failures=["no deck"], deck=False, has_plex=False, polls=0,
               seconds=20.0, started_at=140.0, ended_at=160.0, calls=["plan"], **base),
        record(run_index=4, outcome="error", failures=["HostError"], seconds=999.0, started_at=90.0,
               ended_at=200.0, polls=50, **base),
    ]
    report = build_report(records)
    metrics = report.columns[0].metrics
    assert metrics.decks_built == 2 and metrics.decks_with_plex == 1
    assert metrics.median_case_seconds == 20.0  # the error's 999 s is not a case time
    assert metrics.wall_clock_seconds == 110.0  # first start (the error's 90) to last end (200)
    assert metrics.median_calls == 3
    assert (metrics.polls_total, metrics.polls_worst) == (25, 13)
    assert (metrics.at_poll_ceiling, metrics.over_poll_ceiling) == (1, 1)
    assert (metrics.context_reached, metrics.context_expected) == (1, 3)
    assert (metrics.edit_called, metrics.edit_expected) == (2, 3)
    assert metrics.replanned_after_edit == 1
    markdown = to_markdown(report)
    assert "| Worst case polls that did not wait | 13 / 12 |" in markdown
    assert "| Pasted material reached `--context` (or `--source`) | 1/3 |" in markdown
    assert "| Total wall clock (first start → last end) | 1.8 min |" in markdown
    assert "| Cases passed (every judged run) | 0/1 |" in markdown


def test_mixed_skill_hashes_are_refused_unless_allowed_and_then_labelled_not_pooled() -> None:
    records = repeated(skill_hash="111111111111") + repeated(skill_hash="222222222222", run_id="second")
    with pytest.raises(ReportError, match=r"2 skill hashes \(111111111111, 222222222222\).*--allow-mixed"):
        build_report(records)
    report = build_report(records, allow_mixed=True)
    assert [c.label for c in report.columns] == ["react [A]", "react [B]"]
    markdown = to_markdown(report)
    assert "[A] skill 111111111111 · fingerprint f00df00df00df00d; [B] skill 222222222222" in markdown
    assert to_json(report)["groups"]["B"] == {"skill_hash": "222222222222", "fingerprint": "f00df00df00df00d"}


def test_one_host_under_two_fingerprints_is_refused_but_two_hosts_may_differ() -> None:
    with pytest.raises(ReportError, match="host react under 2 fingerprints"):
        build_report(repeated(fingerprint="one") + repeated(fingerprint="two", run_id="again"))
    report = build_report(repeated("react", fingerprint="one") + repeated("claude", fingerprint="two"))
    assert len(report.columns) == 2


def _write(folder: Path, items: list[dict[str, Any]]) -> None:
    for item in items:
        append(folder / "results.jsonl", as_record(item))


def test_a_sharded_run_reports_exactly_like_the_unsharded_run(tmp_path: Path) -> None:
    items = []
    for i, item in enumerate(repeated("react", fails={"beta": 1, "gamma": 3}, runs=4)
                             + repeated("claude", fails={"alpha": 2}, runs=4, fingerprint="fp2")):
        item.update(seconds=float(i % 7) + 0.1 * i, started_at=1000.0 + 3 * i, ended_at=1010.5 + 3 * i,
                    cost_usd=0.1 + i / 1000, polls=i % 15)
        items.append(item)
    _write(tmp_path / "whole", items)
    for shard in (1, 2, 3):  # round-robin, the way --palette-shard partitions items
        _write(tmp_path / "shards" / f"shard-{shard}", items[shard - 1::3])
    whole, sharded = build_report(load(tmp_path / "whole")), build_report(load(tmp_path / "shards"))
    whole_json, sharded_json = to_json(whole), to_json(sharded)
    assert len(sharded_json.pop("ledgers")) == 3 and len(whole_json.pop("ledgers")) == 1
    assert whole_json == sharded_json

    def body(markdown: str) -> list[str]:
        return [line for line in markdown.splitlines() if "ledger file(s)" not in line]

    assert body(to_markdown(whole)) == body(to_markdown(sharded))


def test_json_carries_the_same_numbers() -> None:
    data = to_json(build_report(repeated(fails={"beta": 2})))
    [host] = data["hosts"]
    assert (host["passes"], host["n"], host["errors"]) == (13, 15, 0)
    assert host["pass_at_k"]["3"] == {"value": 1.0, "cases": 5}
    beta = next(c for c in data["cases"] if c["case"] == "beta")["cells"]["react"]
    assert beta["pass_hat_k"]["2"] == 0.0 and beta["pass_at_k"]["2"] == pytest.approx(2 / 3)
    assert beta["failures"] == {"asked for 3 slides, got 2": 2}
    # The metrics' keys, in order, as readers of the JSON know them.
    assert list(host["metrics"]) == [
        "runs_judged", "runs_passed", "cases_passed", "cases_judged", "decks_built", "decks_with_plex",
        "median_case_seconds", "wall_clock_seconds", "median_calls", "polls_total", "polls_worst",
        "polls_worst_ceiling", "at_poll_ceiling", "over_poll_ceiling", "context_expected", "context_reached",
        "edit_expected", "edit_called", "replanned_after_edit", "triggers"]
    assert (host["metrics"]["runs_passed"], host["metrics"]["triggers"]) == (
        13, {"needed": 15, "needed_and_used": 15, "used": 15, "near_misses": 0})
    json.dumps(data)  # serialisable as is


# ---------------------------------------------------------------------------------------------- compare


def test_compare_flags_regressions_and_improvements_with_the_paired_test() -> None:
    before = repeated(skill_hash="111111111111", fails={"delta": 3})
    after = repeated(skill_hash="222222222222", run_id="after", fails={"alpha": 2, "beta": 3})
    result = compare(before, after)
    flags = {(c.case, c.flag) for c in result.changes if c.flag}
    assert flags == {("alpha", "regression"), ("beta", "regression"), ("delta", "improvement")}
    [host] = result.hosts
    assert (host.test.b, host.test.c, host.shared) == (2, 1, 5)
    assert host.test.p == pytest.approx(1.0)
    markdown = compare_module.to_markdown(result)
    assert "| alpha | react | 3/3 | 1/3 | **regression** |" in markdown
    assert "| delta | react | 0/3 | 3/3 | **improvement** |" in markdown
    assert "Skill hash: 111111111111 → 222222222222." in markdown and SAME_SKILL not in markdown


def test_compare_warns_loudly_when_the_skill_hash_did_not_change() -> None:
    result = compare(repeated(), repeated(run_id="again"))
    assert not result.skill_changed and SAME_SKILL in result.warnings
    assert f"> ⚠ **{SAME_SKILL}**" in compare_module.to_markdown(result)


def test_compare_says_what_changed_in_the_configuration() -> None:
    before = repeated(skill_hash="1" * 12, model="granite", fingerprint="a")
    after = repeated(skill_hash="2" * 12, model="llama", fingerprint="b")
    [host] = compare(before, after).hosts
    assert host.config_changes == ["model: granite → llama"]
    hidden = compare(repeated(fingerprint="a"), repeated(fingerprint="b"))
    assert "a budget" in hidden.hosts[0].config_changes[0]


def test_six_cases_that_all_regress_are_more_than_noise() -> None:
    cases = [f"c{i}" for i in range(6)]
    before = [record(case=c, run_index=r) for c in cases for r in (1, 2, 3)]
    after = [record(case=c, run_index=r, outcome="fail", failures=["x"], skill_hash="b" * 12)
             for c in cases for r in (1, 2, 3)]
    [host] = compare(before, after).hosts
    assert (host.test.b, host.test.c, host.test.p) == (6, 0, 0.03125)
    assert host.test.verdict == "more than noise at p < 0.05"


# ---------------------------------------------------------------------------------------------- the command


def test_report_command_prints_markdown_and_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path / "run", repeated())
    assert palette_bench(["report", str(tmp_path / "run"), "--json", str(tmp_path / "r.json")]) == 0
    assert capsys.readouterr().out.startswith("# Palette skill benchmark — results")
    assert json.loads((tmp_path / "r.json").read_text())["hosts"][0]["passes"] == 15
    assert palette_bench(["report", str(tmp_path / "run"), "--out", str(tmp_path / "R.md")]) == 0
    assert "## What these numbers are not entitled to say" in (tmp_path / "R.md").read_text()


def test_report_command_exits_2_naming_the_path_when_nothing_was_recorded(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    assert palette_bench(["report", str(tmp_path / "empty")]) == 2
    error = capsys.readouterr()
    assert f"{tmp_path / 'empty'}: no results.jsonl" in error.err and error.out == ""
    assert palette_bench(["report", str(tmp_path / "missing")]) == 2
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "results.jsonl").write_text("garbage\n")
    with pytest.warns(UserWarning):
        assert palette_bench(["report", str(tmp_path / "junk")]) == 2
    assert "hold no valid record" in capsys.readouterr().err


def test_report_command_refuses_mixed_records_unless_allowed(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path / "one", repeated(skill_hash="1" * 12))
    _write(tmp_path / "two", repeated(skill_hash="2" * 12, run_id="two"))
    assert palette_bench(["report", str(tmp_path)]) == 2
    assert "--allow-mixed" in capsys.readouterr().err
    assert palette_bench(["report", str(tmp_path), "--allow-mixed"]) == 0
    assert "react [B]" in capsys.readouterr().out


def test_compare_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path / "a", repeated())
    _write(tmp_path / "b", repeated(run_id="b", fails={"gamma": 2}))
    assert palette_bench(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    captured = capsys.readouterr()
    assert "| gamma | react | 3/3 | 1/3 | **regression** |" in captured.out
    assert f"warning: {SAME_SKILL}" in captured.err
    assert palette_bench(["compare", str(tmp_path / "a"), str(tmp_path / "nowhere")]) == 2


def test_usage_is_summed_per_host_over_the_runs_that_reported_it(tmp_path: Path) -> None:
    items = (repeated("react", fails={"beta": 1}, runs=40, cost_usd=0.25)
             + repeated("claude", fails={"alpha": 9}, runs=40, fingerprint="fp2", tokens={"input": 3, "output": 1}))
    for i, item in enumerate(items):
        item.update(seconds=float(i % 11), started_at=50.0 + i, ended_at=60.0 + i)
    _write(tmp_path, items)
    report = build_report(load(tmp_path))
    from_ledger, from_records = to_json(report), to_json(build_report(items))
    assert from_ledger.pop("ledgers") == [str(tmp_path / "results.jsonl")] and from_records.pop("ledgers") == []
    assert from_ledger == from_records
    claude, react = report.columns
    graders = {"grader_input_tokens": None, "grader_output_tokens": None, "grader_cost_usd": None,
               "model_calls": None, "commands": None}  # records that did not count them
    assert claude.usage == {"turns": 400, "input_tokens": 600, "output_tokens": 200, "cost_usd": None,
                            "retries": None, **graders}
    assert react.usage == {"turns": 400, "input_tokens": None, "output_tokens": None, "cost_usd": 50.0,
                           "retries": None, **graders}
    markdown = to_markdown(report)
    assert "Reported usage: claude: 400 turns; react: 400 turns." in markdown
    # Tokens without a price are said to be unpriced, naming the model; a cost of a schema-1 record kept no source.
    assert "| claude | 600 | 200 | 4 | — | — | no price for rehearsal: pass --palette-prices |" in markdown
    assert "| react | — | — | — | $50.00 | $0.25 | recorded (its source not said) |" in markdown
    assert from_ledger["hosts"][0]["unpriced"] == {"runs": 200, "models": ["rehearsal"]}


# ------------------------------------------------------------------------------ issue 21's small things (route 11)


def test_compare_names_a_change_of_sandbox_as_a_change_of_the_configuration() -> None:
    import msgspec

    def sandboxed(items: list[dict[str, Any]]) -> list[Any]:
        return [msgspec.structs.replace(r, terms=msgspec.structs.replace(r.terms, sandbox="bubblewrap"))
                for r in records(items)]

    result = compare_module.compare(records(repeated(fingerprint="a")), sandboxed(repeated(fingerprint="b")))
    assert result.hosts[0].config_changes == ["the agent's commands: unconfined → bubblewrap"]


@pytest.mark.parametrize("argv", [["report", "RUN", "--out", "DIR"], ["report", "RUN", "--json", "DIR"],
                                  ["compare", "RUN", "RUN", "--out", "DIR"]])
def test_an_output_that_is_a_folder_is_one_line_before_any_work(tmp_path: Path, argv: list[str],
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path / "run", repeated())
    (tmp_path / "out").mkdir()
    given = [str(tmp_path / "run") if a == "RUN" else str(tmp_path / "out") if a == "DIR" else a for a in argv]
    assert palette_bench(given) == 2
    error = capsys.readouterr().err
    flag = argv[-2]
    assert error.startswith(f"palette-bench {argv[0]}: {flag} {tmp_path / 'out'}: is a folder; name a file")
    assert error.count("\n") == 1 and "Traceback" not in error and list((tmp_path / "out").iterdir()) == []


def test_an_output_that_cannot_be_written_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path / "run", repeated())
    (tmp_path / "file").write_text("not a folder")
    assert palette_bench(["report", str(tmp_path / "run"), "--out", str(tmp_path / "file" / "r.md")]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"palette-bench report: {tmp_path / 'file'}") and "cannot be written" in error
    assert error.count("\n") == 1


# ---------------------------------------------------------------------------------------------- scores


def scored(scores: dict[str, list[float]], host: str = "react", **fields: Any) -> list[Any]:
    """Records with checks and a score: each case's runs score as given (1.0 passes; below it fails its slide
    count, a scored check, for the rest of the credit)."""
    import msgspec

    from pytest_palette.results.record import Check

    out = []
    for case, values in scores.items():
        for index, value in enumerate(values, 1):
            failed = value < 1
            line = as_record(record(case=case, host=host, run_index=index, outcome="fail" if failed else "pass",
                                    failures=["asked for 3 slides, got 2"] if failed else [], **fields))
            checks = (Check(name="deck", role="gate", weight=1.0, passed=True, credit=1.0),
                      Check(name="slides", role="scored", weight=1.0, passed=not failed, credit=value))
            assert line.judged is not None
            out.append(msgspec.structs.replace(line, judged=msgspec.structs.replace(line.judged, checks=checks,
                                                                                     score=value)))
    return out


def test_the_report_gives_each_hosts_mean_score_its_interval_score_at_k_and_each_cells_score() -> None:
    from pytest_palette.results import stats

    given = {"alpha": [1.0, 1.0, 1.0], "beta": [0.5, 1.0, 0.0], "gamma": [0.25, 0.75, 0.5]}
    report = build_from_records(scored(given))
    [react] = report.columns
    means = [sum(v) / len(v) for v in given.values()]
    expected = stats.mean_score(means)
    assert react.score == expected and react.score is not None and react.score.interval is not None
    for k in (1, 2, 3):
        assert react.score_at[k] == (pytest.approx(sum(stats.score_at_k(v, k) or 0 for v in given.values()) / 3), 3)
    assert react.score_at[2][0] == pytest.approx((1 + (0.5 + 1 + 1) / 3 + (0.5 + 0.75 + 0.75) / 3) / 3)
    markdown = to_markdown(report)
    low, high = react.score.interval
    assert f"| {react.score.mean:.2f} ({low:.2f}–{high:.2f}) |" in markdown
    assert "| beta | ◐ 1/3 0.50±0.50 · 3 sl · 2p |" in markdown and "| alpha | ✅ 3/3 · 3 sl · 2p |" in markdown
    assert "| score@1 | score@2 | score@3 |" in markdown
    data = to_json(report)
    assert data["hosts"][0]["score"]["mean"] == pytest.approx(react.score.mean)
    assert data["hosts"][0]["score_at_k"]["3"]["value"] == pytest.approx(react.score_at[3][0])
    [beta] = [c for c in data["cases"] if c["case"] == "beta"]
    assert beta["cells"]["react"]["score"]["sd"] == pytest.approx(0.5)


def test_two_hosts_get_the_paired_signed_rank_test_on_scores() -> None:
    cases = {f"c{i}": [1.0] for i in range(6)}
    worse = {case: [0.5 - i / 20] for i, case in enumerate(cases)}
    report = build_from_records(scored(cases) + scored(worse, host="cuga"))
    [pair] = report.pairs
    # The columns are in host order: cuga is A, and scores lower on every case.
    assert (pair.a, pair.scores.better, pair.scores.worse, pair.scores.p, pair.scores.exact) == \
        ("cuga", 0, 6, 2 / 64, True)
    markdown = to_markdown(report)
    assert "Wilcoxon signed-rank" in markdown
    assert "| cuga | react | 0 | 6 | 0 | 0 | 0.03125 | more than noise" in markdown


def test_compare_shows_the_paired_score_test_and_each_sides_mean_score() -> None:
    before = scored({f"c{i}": [1.0, 1.0] for i in range(6)}, skill_hash="1" * 12)
    after = scored({f"c{i}": [1.0, 0.5] for i in range(6)}, skill_hash="2" * 12, run_id="after")
    result = compare_module.compare(before, after)
    [host] = result.hosts
    # Every case fails one run of two: the outcome test sees six regressions, the score test six lower means.
    assert (host.scores.better, host.scores.worse, host.scores.p) == (0, 6, 2 / 64)
    assert host.score_before is not None and host.score_after is not None
    assert (host.score_before.mean, host.score_after.mean) == (1.0, 0.75)
    markdown = compare_module.to_markdown(result)
    assert "| react | 1.00 | 0.75 | 0 | 6 | 0 | 0 | 0.03125 | more than noise at p < 0.05 |" in markdown
    assert "| c0 | react | 2/2 | 1/2 · 0.75 | **regression** |" in markdown


def test_two_runs_of_the_same_cases_on_different_hosts_compare_host_against_host() -> None:
    one = scored({f"c{i}": [1.0] for i in range(4)})
    other = scored({f"c{i}": [1.0 if i else 0.5] for i in range(4)}, host="cuga", run_id="cuga-job")
    result = compare_module.compare(one, other)
    assert result.across_hosts and {c.flag for c in result.changes} <= {"", "regression"}
    assert {c.host for c in result.changes} == {"react vs cuga"}
    assert [result.host_on(result.changes[0], side) for side in (0, 1)] == ["react", "cuga"]
    [host] = result.hosts
    assert (host.shared, host.test.b, host.scores.worse) == (4, 1, 1)
    markdown = compare_module.to_markdown(result)
    assert markdown.startswith("# Palette benchmark — host against host") and "| new |" not in markdown
    assert "| c0 | react vs cuga | 1/1 | 0/1 · 0.50 | **regression** |" in markdown
    # Two hosts a side, or one host on both, are before and after as ever.
    assert not compare_module.compare(one, scored({"c0": [1.0]}, run_id="again")).across_hosts


def test_the_terminal_table_shows_each_cells_score_and_each_hosts_mean() -> None:
    from pytest_palette.results.table import render, session_matrix_of

    lines = render(session_matrix_of(scored({"alpha": [1.0], "beta": [0.25]}), ["react"]))
    row = next(line for line in lines if line.startswith("beta"))
    assert "FAIL 0.25" in row
    footer = next(line for line in lines if line.startswith("react:"))
    assert "· score 0.62 (95% 0.00–1.00)" in footer  # (1 + 0.25) / 2 over two cases; t(1) = 12.7
