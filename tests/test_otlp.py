"""OpenTelemetry traces (`--palette-otlp`, pytest_palette/run/tracing.py), received by a real OTLP/HTTP receiver:
Arize Phoenix (tests/phoenix_server.py), started once for the test session. A real run of two cases on react and
cuga, two xdist workers each sending their own items' traces, is read back through Phoenix's REST API: one trace per
item, turns under the item, the model calls and commands under each turn, GenAI attributes and token counts as the
ledger holds them, and no secret of the session's anywhere. With nothing listening where the collector should be,
the run ends as it would have, with one warning."""

from __future__ import annotations

import json
import socket
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import phoenix_server
import pytest
from sweeps import REPO, Sweep, Sweeps, run_session

from pytest_palette.options import _otlp

#: The session's key, and a case that puts it into a command of the agent's (the request reaches deck.py's argv):
#: a scrub that missed a span would show it there.
KEY = "sk-ant-api03-" + "Q" * 40
CASES = f"""
- name: leaked_key_request
  covers: a request that carries the session's key reaches a command; its span must not
  request: Build a 3-slide deck on rotating the key {KEY} after it leaked
  replies: ["yes"]
  expect:
    slides: 4    # three are asked for: a FAIL, whose failed check its trace names
"""
SELECTION = ("-k", "edit_slide_count or leaked_key_request")


@dataclass(frozen=True)
class Traced:
    """A finished run with its traces sent to Phoenix, and what Phoenix stored of them."""

    sweep: Sweep
    records: list[dict[str, Any]]
    spans: list[dict[str, Any]]


def _traced(folder: Path) -> Traced:
    with phoenix_server.Phoenix(folder / "phoenix") as receiver:
        cases = folder / "otlp-cases.yaml"
        cases.write_text(CASES, encoding="utf-8")
        sweep = run_session(folder / "session", [str(REPO / "cases" / "interaction.yaml"), str(cases),
                                                 f"--rootdir={REPO}", "--host=react,cuga", "--model=rehearsal",
                                                 *SELECTION, "-n", "2", f"--palette-otlp={receiver.url}"],
                            env={"ANTHROPIC_API_KEY": KEY})
        [ledger] = (folder / "session" / "runs").glob("*/results.jsonl")
        records = [json.loads(line) for line in ledger.read_text(encoding="utf-8").splitlines()]
        # An item's trace: itself, and per turn its span and its model calls', and a span per command.
        expected = sum(1 + 2 * (r["usage"]["turns"] or 0) + (r["usage"]["commands"] or 0) for r in records)
        return Traced(sweep, records, receiver.stored(expected))


@pytest.fixture(scope="module")
def traced(sweeps: Sweeps) -> Traced:
    phoenix_server.require()
    return sweeps.shared("otlp-phoenix", _traced)


def _by_trace(spans: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    traces: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        traces.setdefault(span["context"]["trace_id"], []).append(span)
    return traces


def _operation(span: dict[str, Any]) -> str | None:
    return span["attributes"].get("gen_ai.operation.name")


def test_each_item_is_one_trace_of_its_turns_model_calls_and_commands(traced: Traced) -> None:
    assert traced.sweep.returncode == 1, traced.sweep.stdout[-3000:]  # the leaked key's case FAILs, as it should
    assert {r["outcome"] for r in traced.records} == {"pass", "fail"} and len(traced.records) == 4
    traces = _by_trace(traced.spans)
    assert len(traces) == len(traced.records)
    items = {}
    for spans in traces.values():
        [root] = [span for span in spans if span["parent_id"] is None]
        items[(root["attributes"]["palette.case"], root["attributes"]["palette.host"])] = (root, spans)
    for record in traced.records:
        root, spans = items[(record["case"], record["host"])]
        usage, attributes = record["usage"], root["attributes"]
        assert root["name"] == f"{record['case']}[{record['host']}]"
        assert attributes["gen_ai.operation.name"] == "invoke_workflow"
        assert attributes["palette.run_id"] == record["run_id"] and attributes["palette.outcome"] == record["outcome"]
        assert attributes["palette.score"] == record["judged"]["score"]
        assert attributes["palette.failed_checks"] == [c["name"] for c in record["judged"]["checks"]
                                                       if c["passed"] is False]
        assert attributes["palette.failures"] == record["failures"]
        assert (attributes["palette.input_tokens"], attributes["palette.output_tokens"]) == \
            (usage["input_tokens"], usage["output_tokens"])
        turns = [span for span in spans if _operation(span) == "invoke_agent"]
        assert len(turns) == usage["turns"] and len(usage["stops"]) == len(turns)
        assert all(turn["parent_id"] == root["context"]["span_id"] for turn in turns)
        assert sorted(turn["attributes"]["palette.turn"] for turn in turns) == list(range(1, len(turns) + 1))
        turn_ids = {turn["context"]["span_id"] for turn in turns}
        calls = [span for span in spans if _operation(span) == "chat"]
        commands = [span for span in spans if _operation(span) == "execute_tool"]
        assert len(calls) == len(turns) and len(commands) == usage["commands"] > 0
        assert len(spans) == 1 + len(turns) + len(calls) + len(commands)
        assert all(span["parent_id"] in turn_ids for span in calls + commands)
        assert Counter(span["parent_id"] for span in calls) == Counter(turn_ids)  # one span of model calls a turn
        # The tokens were spent by the model calls: their spans hold them, and sum to the ledger's.
        assert sum(c["attributes"]["gen_ai.usage.input_tokens"] for c in calls) == usage["input_tokens"]
        assert sum(c["attributes"]["gen_ai.usage.output_tokens"] for c in calls) == usage["output_tokens"]
        assert sum(c["attributes"]["palette.model_calls"] for c in calls) == usage["model_calls"]
        for span in calls + turns + [root]:
            assert span["attributes"]["gen_ai.request.model"] == "rehearsal"
            assert span["attributes"]["gen_ai.provider.name"] == "rehearsal"
        assert {turn["attributes"]["gen_ai.agent.name"] for turn in turns} == {record["host"]}
        assert all(c["attributes"]["gen_ai.tool.name"] == "shell" and c["attributes"]["process.exit.code"] == 0
                   and "deck.py" in c["attributes"]["palette.command"] for c in commands)


def test_no_secret_of_the_session_reaches_a_span(traced: Traced) -> None:
    assert KEY not in json.dumps(traced.spans) and KEY[:20] not in json.dumps(traced.spans)
    planned = [span["attributes"]["palette.command"] for span in traced.spans
               if "--request" in span["attributes"].get("palette.command", "")
               and "rotating the key" in span["attributes"]["palette.command"]]
    assert planned and all("[redacted]" in command for command in planned)


@pytest.mark.end_to_end
def test_a_collector_that_is_down_costs_the_run_one_warning(tmp_path: Path) -> None:
    # Bound and never listening: every connection to it is refused, and no other process can take the port.
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        sweep = run_session(tmp_path, [str(REPO / "cases"), f"--rootdir={REPO}", "--host=react", "--model=rehearsal",
                                       "-k", "plain_request or approve_casually", "-n", "2",
                                       f"--palette-otlp=http://127.0.0.1:{port}"])
    assert sweep.returncode == 0, sweep.stdout[-3000:]
    assert {name: result.outcome for name, result in sweep.items.items()} == \
        {"plain_request[react]": "pass", "approve_casually[react]": "pass"}
    said = sweep.stdout + sweep.stderr
    assert said.count("OtlpWarning:") == 1 and "2 passed, 1 warning" in said, said[-3000:]
    assert f"collector at http://127.0.0.1:{port}/v1/traces (--palette-otlp) did not take this run's traces" in said
    assert "Connection refused" in said and "Failed to export" not in said  # the SDK's own lines are kept out


def _options(given: str | None, ini: str = "", **environ: str) -> tuple[str | None, str]:
    return _otlp(SimpleNamespace(getoption=lambda name: given, getini=lambda name: ini), environ)  # type: ignore[arg-type]


def test_the_collector_is_named_by_the_flag_else_by_opentelemetrys_variables() -> None:
    assert _options(None) == (None, "")
    assert _options("http://127.0.0.1:4318") == ("http://127.0.0.1:4318/v1/traces", "--palette-otlp")
    assert _options("https://otel.example/v1/traces/")[0] == "https://otel.example/v1/traces"
    assert _options(None, OTEL_EXPORTER_OTLP_ENDPOINT="http://c:4318/") == \
        ("http://c:4318/v1/traces", "$OTEL_EXPORTER_OTLP_ENDPOINT")
    # The traces' own variable is its URL as it is, and wins over the base one, as the SDK reads them.
    assert _options(None, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="http://t:9/spans",
                    OTEL_EXPORTER_OTLP_ENDPOINT="http://c:4318") == \
        ("http://t:9/spans", "$OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    assert _options("none", OTEL_EXPORTER_OTLP_ENDPOINT="http://c:4318") == (None, "--palette-otlp")
    # A project's ini names its collector below the flag and above the variables.
    assert _options(None, "http://i:4318", OTEL_EXPORTER_OTLP_ENDPOINT="http://c:4318") == \
        ("http://i:4318/v1/traces", "ini palette_otlp")
    assert _options("http://f:4318", "http://i:4318")[0] == "http://f:4318/v1/traces"
    assert _options(None, "none", OTEL_EXPORTER_OTLP_ENDPOINT="http://c:4318") == (None, "ini palette_otlp")


@pytest.mark.parametrize(("given", "environ", "said"), [
    ("localhost:4318", {}, "--palette-otlp 'localhost:4318': not the http(s) URL of an OTLP/HTTP collector"),
    ("grpc://c:4317", {}, "--palette-otlp 'grpc://c:4317': not the http(s) URL"),
    (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "c:4318"}, "$OTEL_EXPORTER_OTLP_ENDPOINT 'c:4318': not the http(s) URL"),
    (None, {"ini": "c:4318"}, "ini palette_otlp 'c:4318': not the http(s) URL"),
])
def test_a_collector_that_is_no_url_is_one_line_naming_where_it_came_from(
        given: str | None, environ: dict[str, str], said: str) -> None:
    with pytest.raises(pytest.UsageError) as refused:
        _options(given, **environ)  # an "ini" key is the project's ini value
    assert str(refused.value).startswith(said) and "\n" not in str(refused.value)
