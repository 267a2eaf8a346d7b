"""Tokens and cost on every host: what each client reports, priced by the provider or the user's table (never a
price for a model that did not run), shown per host, and a run that stops at --palette-max-cost."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from ledger_records import as_record, record
from sweeps import inner_cache

from pytest_palette.commands import main as palette_bench
from pytest_palette.hosts.base import TurnRecord
from pytest_palette.hosts.cuga_worker import reported_usage
from pytest_palette.models import parse_model
from pytest_palette.results.ledger import append, load
from pytest_palette.results.prices import Price, PriceError, load_prices, money, price_of
from pytest_palette.results.record import Record
from pytest_palette.run.conversation import Transcript
from pytest_palette.run.items import _usage

PRICES = "rehearsal: {input: 2.5, output: 10}\nanthropic:claude-sonnet-4-5: {input: 3, output: 15}\n"
CASE = """
- name: three_slides
  covers: a plain yes builds what was asked
  request: Build a 3-slide deck on prompt caching
  expect: {slides: 3}
"""


# -- the price table --------------------------------------------------------------------------------


def test_a_price_table_reads_as_yaml_or_json(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(PRICES)
    (tmp_path / "p.json").write_text(json.dumps({"rehearsal": {"input": 2.5, "output": 10},
                                                 "anthropic:claude-sonnet-4-5": {"input": 3, "output": 15}}))
    assert load_prices(tmp_path / "p.yaml") == load_prices(tmp_path / "p.json") == {
        "rehearsal": Price(2.5, 10.0), "anthropic:claude-sonnet-4-5": Price(3.0, 15.0)}
    assert Price(2.5, 10.0).cost(1_000_000, 100_000) == 3.5


@pytest.mark.parametrize(("text", "said"), [
    ("rehearsal: {input: 2.5, output: x}\n", "rehearsal.output: 'x' is not a price (a number of USD ≥ 0)"),
    ("rehearsal: {input: -1, output: 1}\n", "rehearsal.input: -1 is not a price"),
    ("rehearsal: {input: 1}\n", "rehearsal.output: missing (USD per million tokens)"),
    ("rehearsal: {input: 1, output: 1, cached: 0.1}\n", "rehearsal.cached: unknown key"),
    ("rehearsal: 3\n", "rehearsal: expected {input: USD, output: USD} per million tokens"),
    ("- rehearsal\n", "expected a mapping of model names"),
    ("rehearsal: {input: 1, output: [\n", "line 2: not YAML or JSON"),
    ("rehearsal: {input: 1, output: 2}\nopenai:gpt-4o: {input: 2.5, output: 10}\nrehearsal: {input: 9, output: 9}\n",
     "line 3: rehearsal is priced twice (first at line 1); keep one price per model"),
    ('"rehearsal ": {input: 1, output: 2}\nrehearsal: {input: 9, output: 9}\n', "line 2: rehearsal is priced twice"),
])
def test_a_bad_price_table_is_named_with_its_key(tmp_path: Path, text: str, said: str) -> None:
    bad = tmp_path / "prices.yaml"
    bad.write_text(text)
    with pytest.raises(PriceError) as caught:
        load_prices(bad)
    assert str(caught.value).startswith(f"{bad}: ") and said in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_bad_price_table_is_a_one_line_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makefile(".yaml", prices="openai:gpt-4o: {input: 2.5, output: lots}\n")
    result = pytester.runpytest("--palette-prices", "prices.yaml", "--co")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--palette-prices */prices.yaml: openai:gpt-4o.output: 'lots' is not a price*"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
    missing = pytester.runpytest("--palette-prices", "nowhere.yaml", "--co")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines(["*--palette-prices */nowhere.yaml: cannot be read (No such file or directory)"])
    for bad in ("0", "-2", "nan"):
        limit = pytester.runpytest("--palette-max-cost", bad, "--co")
        assert limit.ret == pytest.ExitCode.USAGE_ERROR
        limit.stderr.fnmatch_lines(["*--palette-max-cost must be a number of USD more than 0*"])


def test_a_table_prices_the_rehearsal_model_only_when_it_names_it() -> None:
    table = {"claude-sonnet-4-5": Price(3, 15), "rehearsal:builds_early": Price(1, 1), "gpt-4o": Price(2, 8)}
    assert price_of(table, parse_model("anthropic:claude-sonnet-4-5")) == Price(3, 15)  # by the bare model id
    assert price_of(table, parse_model("openai:gpt-4o")) == Price(2, 8)
    assert price_of(table, parse_model("rehearsal")) is None  # a real model's price never lands on it
    assert price_of(table, parse_model("rehearsal:builds_early")) == Price(1, 1)
    assert price_of({"rehearsal": Price(1, 1)}, parse_model("rehearsal:builds_early")) is None
    assert price_of(None, parse_model("openai:gpt-4o")) is None


def test_an_items_cost_is_the_clients_else_the_tables_else_none() -> None:
    def transcript(*turns: TurnRecord) -> Transcript:
        return Transcript(turns=list(turns), seconds=1.0)

    tokens = {"input_tokens": 600_000, "output_tokens": 20_000}
    priced = _usage(transcript(TurnRecord("a", usage=tokens), TurnRecord("b", usage=tokens)), 0, 1, Price(2.5, 10))
    assert (priced.input_tokens, priced.output_tokens) == (1_200_000, 40_000)
    assert (priced.cost_usd, priced.cost_source) == (3.4, "prices")
    told = _usage(transcript(TurnRecord("a", usage=tokens, cost_usd=0.5), TurnRecord("b", cost_usd=0.25)), 0, 1,
                  Price(2.5, 10))
    assert (told.cost_usd, told.cost_source) == (0.75, "provider")  # the client's own figure wins
    unpriced = _usage(transcript(TurnRecord("a", usage=tokens)), 0, 1)
    assert (unpriced.input_tokens, unpriced.cost_usd, unpriced.cost_source) == (600_000, None, None)
    silent = _usage(transcript(TurnRecord("a")), 0, 1, Price(2.5, 10))  # no tokens: nothing to price
    assert (silent.input_tokens, silent.cost_usd, silent.cost_source) == (None, None, None)


def test_money_reads_as_money() -> None:
    assert [money(v) for v in (0, 3.4, 1234.5, 0.0123, 0.000012)] == ["$0.00", "$3.40", "$1,234.50", "$0.0123",
                                                                     "$1.2e-05"]


def test_cugas_tokens_are_read_from_either_place_langchain_puts_them_never_both() -> None:
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, LLMResult

    message = AIMessage("hi", usage_metadata={"input_tokens": 40, "output_tokens": 2, "total_tokens": 42})
    both = LLMResult(generations=[[ChatGeneration(message=message)]],
                     llm_output={"token_usage": {"prompt_tokens": 40, "completion_tokens": 2}})
    assert reported_usage(both) == {"input_tokens": 40, "output_tokens": 2}
    only_output = LLMResult(generations=[[ChatGeneration(message=AIMessage("hi"))]],
                            llm_output={"token_usage": {"prompt_tokens": 7, "completion_tokens": 3}})
    assert reported_usage(only_output) == {"input_tokens": 7, "output_tokens": 3}
    assert reported_usage(LLMResult(generations=[[ChatGeneration(message=AIMessage("hi"))]])) == {}


# -- every host, offline -----------------------------------------------------------------------------


def _host_unavailable(host: str) -> str | None:
    if host == "cuga":
        from pytest_palette.hosts.cuga import installed_problem

        return installed_problem()
    if host == "claude":
        from pytest_palette.hosts.claude import find_cli

        return None if find_cli() else "no Claude Code CLI here"
    return None


@pytest.mark.end_to_end
@pytest.mark.parametrize("host", ["react", "cuga", "claude"])
def test_every_host_records_tokens_offline_and_a_table_naming_the_rehearsal_model_prices_them(
        pytester: pytest.Pytester, host: str) -> None:
    reason = _host_unavailable(host)
    if reason:
        pytest.skip(f"the {host} host cannot run here: {reason}")
    pytester.mkdir("cases")
    (pytester.path / "cases" / "c.yaml").write_text(CASE)
    pytester.makefile(".yaml", prices=PRICES)
    # In a process of its own: CUGA's numpy cannot be imported twice in one process.
    result = pytester.runpytest_subprocess(*inner_cache(), "--host", host, "--palette-prices",
                                           "prices.yaml")
    result.assert_outcomes(passed=1)
    [run] = (pytester.path / "runs").iterdir()
    [item] = load(run).latest.values()
    usage = item.usage
    # Tokens as the host's client counted them, on every turn and summed for the item.
    turns = json.loads((run / host / "three_slides" / "turns.json").read_text())["turns"]
    assert len(turns) == 2 and all(turn["usage"]["input_tokens"] > 0 for turn in turns)
    assert usage.input_tokens == sum(turn["usage"]["input_tokens"] for turn in turns)
    assert usage.output_tokens == sum(turn["usage"]["output_tokens"] for turn in turns) > 0
    # Dollars only because the user's table names the rehearsal model; never the client's own estimate.
    assert all(turn["cost_usd"] is None for turn in turns)
    assert usage.cost_source == "prices"
    assert usage.cost_usd == Price(2.5, 10).cost(usage.input_tokens, usage.output_tokens) > 0
    result.stdout.fnmatch_lines([
        "palette: cost from --palette-prices */prices.yaml ($2.50 input, $10.00 output per million tokens)",
        f"{host}: 1 passed, 0 failed, 0 errored · model rehearsal* · {usage.input_tokens:,} in / "
        f"{usage.output_tokens:,} out tokens · {money(usage.cost_usd)} (from your --palette-prices) · commands *"])


@pytest.mark.end_to_end
def test_without_a_price_the_rehearsal_model_gets_tokens_and_no_dollars(pytester: pytest.Pytester) -> None:
    pytester.mkdir("cases")
    (pytester.path / "cases" / "c.yaml").write_text(CASE)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    [run] = (pytester.path / "runs").iterdir()
    [item] = load(run).latest.values()
    assert item.usage.input_tokens and item.usage.cost_usd is None and item.usage.cost_source is None
    result.stdout.fnmatch_lines(["react: 1 passed* out tokens · no price for rehearsal: pass --palette-prices · "
                                 "commands *"])
    assert palette_bench(["report", str(run), "--out", str(pytester.path / "report.md")]) == 0
    report = (pytester.path / "report.md").read_text()
    assert f"| react | {item.usage.input_tokens:,} | {item.usage.output_tokens:,} |" in report
    assert "| — | — | no price for rehearsal: pass --palette-prices |" in report


# -- the report and compare -------------------------------------------------------------------------


def _costed(run_id: str, host: str, source: str | None, cost: float | None, tokens: tuple[int, int] = (900, 100),
            model: str = "rehearsal", case: str = "three_slides") -> Record:
    base = as_record(record(run_id=run_id, host=host, case=case, model=model, provider=model.partition(":")[0]))
    usage = msgspec.structs.replace(base.usage, input_tokens=tokens[0], output_tokens=tokens[1], cost_usd=cost,
                                    cost_source=source)
    return msgspec.structs.replace(base, usage=usage)


def test_the_report_and_compare_show_tokens_and_cost_per_host_and_where_the_cost_came_from(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for record_ in (_costed("a", "react", "prices", 0.25), _costed("a", "claude", None, None),
                    _costed("b", "react", "prices", 0.5, (1900, 100)), _costed("b", "claude", None, None)):
        append(tmp_path / record_.run_id / "results.jsonl", record_)
    assert palette_bench(["report", str(tmp_path / "a"), "--out", str(tmp_path / "a.md")]) == 0
    report = (tmp_path / "a.md").read_text()
    assert "| react | 900 | 100 | 1,000 | $0.25 | $0.25 | your --palette-prices table |" in report
    assert "| claude | 900 | 100 | 1,000 | — | — | no price for rehearsal: pass --palette-prices |" in report
    # A price on the rehearsal model is the user's, and the report says nothing was charged.
    assert "The cost of react is your price table applied to the rehearsal model's estimated tokens" in report
    assert palette_bench(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    compared = capsys.readouterr().out
    assert "| react | 1,000 | 2,000 | $0.25 ($0.25 a run) | $0.50 ($0.50 a run) |" in compared
    assert "| claude | 1,000 | 1,000 | no price for rehearsal | no price for rehearsal |" in compared


def test_a_client_reported_cost_is_said_to_be_the_clients(tmp_path: Path) -> None:
    append(tmp_path / "results.jsonl", _costed("a", "claude", "provider", 1.5, model="anthropic:claude-sonnet-4-5"))
    assert palette_bench(["report", str(tmp_path), "--out", str(tmp_path / "r.md")]) == 0
    report = (tmp_path / "r.md").read_text()
    assert "| claude | 900 | 100 | 1,000 | $1.50 | $1.50 | reported by the client |" in report
    assert "rehearsal model's estimated tokens" not in report


# -- --palette-max-cost ------------------------------------------------------------------------------

#: Five cases that ask the same thing under names of one length: the rehearsal model's token estimate reads the
#: paths in its tool results, so each costs the same.
SAME_FIVE = "".join(f"""
- name: deck_{letter}
  covers: a plain yes builds what was asked
  request: Build a 3-slide deck on prompt caching
  expect: {{slides: 3}}
""" for letter in "abcde")


@pytest.mark.end_to_end
def test_a_run_stops_starting_items_at_its_max_cost_and_records_the_rest_as_skipped(
        pytester: pytest.Pytester) -> None:
    pytester.mkdir("cases")
    (pytester.path / "cases" / "c.yaml").write_text(SAME_FIVE)
    pytester.makefile(".yaml", prices=PRICES)
    common = ["-p", "no:cacheprovider", "-p", "no:randomly", "--palette-prices", "prices.yaml"]
    # What one item costs, measured (the estimate counts characters, not the machine's speed).
    pytester.runpytest(*common, "--palette-run-id", "calib", "-k", "deck_a").assert_outcomes(passed=1)
    [one] = load(pytester.path / "runs" / "calib").latest.values()
    assert one.usage.cost_usd
    limit = 1.5 * one.usage.cost_usd  # reached by the second item, not the first
    result = pytester.runpytest(*common, "--palette-run-id", "limit", "--palette-max-cost", f"{limit:.6f}", "-rs")
    result.assert_outcomes(passed=2, skipped=3)
    records = sorted(load(pytester.path / "runs" / "limit").latest.values(), key=lambda r: r.case)
    assert [r.outcome for r in records] == ["pass", "pass", "skipped", "skipped", "skipped"]
    spent = sum(r.usage.cost_usd or 0 for r in records)
    assert spent == pytest.approx(2 * one.usage.cost_usd, rel=0.05)
    reason = f"the run reached --palette-max-cost {money(float(f'{limit:.6f}'))} after {money(spent)}"
    assert {r.failures for r in records[2:]} == {(reason,)}
    assert all(r.usage.cost_usd is None for r in records[2:])
    result.stdout.fnmatch_lines([f"*no item starts after the session has recorded {money(limit)}*",
                                 f"SKIPPED*: {reason}"])


@pytest.mark.end_to_end
def test_the_spend_is_read_from_the_shared_ledger_counting_only_this_sessions_records(
        pytester: pytest.Pytester) -> None:
    from pytest_palette.run.session import SESSION

    pytester.mkdir("cases")
    (pytester.path / "cases" / "c.yaml").write_text(CASE)
    config = pytester.parseconfigure("--palette-run-id", "shared", "--palette-max-cost", "1")
    session = config.stash[SESSION]
    ledger = session.ledger
    earlier = _costed("shared", "react", "prices", 5.0)  # an earlier session's, before a resume
    append(ledger, msgspec.structs.replace(earlier, usage=msgspec.structs.replace(
        earlier.usage, started_at=session.began - 60, ended_at=session.began - 50)))
    assert session.spent() == 0 and session.over_budget() is None

    def ours(cost: float, case: str) -> Record:
        mine = _costed("shared", "react", "prices", cost, case=case)
        return msgspec.structs.replace(mine, usage=msgspec.structs.replace(
            mine.usage, started_at=session.began + 1, ended_at=session.began + 2))

    append(ledger, ours(0.4, "one"))  # as another xdist worker of this session would
    with ledger.open("ab") as torn:
        torn.write(b'{"schema": 2, "run_id": "sha')  # a record still being written is counted at the next look
    assert session.spent() == pytest.approx(0.4) and session.over_budget() is None
    with ledger.open("ab") as rest:
        rest.write(b"\n")
    graded = ours(0.5, "two")  # the agent's half, and the grader's, kept apart in the record, counted together
    append(ledger, msgspec.structs.replace(graded, usage=msgspec.structs.replace(graded.usage, grader_cost_usd=0.1)))
    assert session.spent() == pytest.approx(1.0)
    assert session.over_budget() == "the run reached --palette-max-cost $1.00 after $1.00"
    config._ensure_unconfigure()
