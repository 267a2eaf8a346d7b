"""Why a claude turn ended, as the Claude Code CLI reports it: its step budget (`--palette-max-turns`, the CLI's
`--max-turns`), the model's output limit, its context limit, an API error whose words are 40 KB — each an ERROR
of the run that names it in one line, with turns.json's `stop` saying which.

Each test is one pytest session of one item, the real CLI (skipped, with the reason, where there is none) against
the rehearsal model or a tiny upstream here; each turn that fails does so at its first CLI start but the looping
one's. Every bound asserted is a count the CLI or the harness reports, never a time.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sweeps import inner_cache
from upstream import FailingUpstream

from pytest_palette.hosts.claude import find_cli
from pytest_palette.hosts.stops import WORDS

pytestmark = [pytest.mark.end_to_end,
              pytest.mark.skipif(find_cli() is None, reason="no Claude Code CLI: pip install claude-agent-sdk (it "
                                                            "bundles the CLI) or put `claude` on PATH")]

#: One case of two turns: the plan, then the approval that builds (and, for the looping agent, never answers).
CASE = [{"name": "plain_request", "covers": "a turn that ends before the agent answers",
         "request": "Build a 3-slide deck on prompt caching", "replies": ["yes"], "expect": {"deck": True}}]
#: The looping agent's budget: the build's calls (start, status) fit well within it, then it lists ./deck until
#: the CLI stops it.
BUDGET = 8
#: What the upstream's 500 says: the size a gateway's was that quoted the CLI's whole request back.
BODY = 40_000


def session(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, Path]:
    """One session of the case on claude, with a JUnit report; its result and the item's folder."""
    (pytester.path / "cases").mkdir(exist_ok=True)
    (pytester.path / "cases" / "one.yaml").write_text(json.dumps(CASE), encoding="utf-8")
    result = pytester.runpytest(*inner_cache(), "--host", "claude", "--junitxml=out.xml", *args)
    result.assert_outcomes(errors=1)
    [item] = (pytester.path / "runs").glob("*/claude/plain_request")
    return result, item


def turns(item: Path) -> list[dict[str, Any]]:
    return list(json.loads((item / "turns.json").read_text(encoding="utf-8"))["turns"])


def ledger(item: Path) -> list[dict[str, Any]]:
    """The run's ledger records (runs/<id>/results.jsonl)."""
    return [json.loads(line) for line in (item.parent.parent / "results.jsonl").read_text().splitlines()]


def error_lines(result: pytest.RunResult, item: Path, pytester: pytest.Pytester) -> list[str]:
    """The item's ERROR words as JUnit, the ledger and the terminal show them, each a line of its own."""
    [junit] = [case.find("error") for case in ET.parse(pytester.path / "out.xml").getroot().iter("testcase")]
    assert junit is not None and junit.text is not None
    [record] = ledger(item)
    [failure] = record["failures"]
    shown = [line for line in result.outlines if "turn 1" in line and "(the whole error: " in line]
    assert shown, result.outlines[-20:]
    return [str(junit.get("message")), *junit.text.splitlines()[:1], failure, *shown]


def test_the_looping_agent_ends_at_its_step_budget(pytester: pytest.Pytester) -> None:
    result, item = session(pytester, "--model", "rehearsal:loops", "--palette-max-turns", str(BUDGET))
    result.stdout.fnmatch_lines([f"*claude: turn 2 ended at the step budget (max-turns {BUDGET}) before the agent "
                                 "answered*"])
    first, second = turns(item)
    assert first["stop"] == "answered" and second["stop"] == "step_budget"
    # The CLI stopped it after its budget of model calls, each asking for a command: the build, then `ls`s.
    assert second["model_calls"] == BUDGET and 0 < second["commands"] <= BUDGET
    assert second["usage"]["input_tokens"] > 0  # the calls it made are counted, as an answered turn's are
    assert second["steps"][-1].startswith("← ") and any("ls -la ./deck" in step for step in second["steps"])
    assert second["error"].startswith("ended at the step budget") and second["error_file"] is None
    # The budget is among the terms the run was measured under.
    [record] = ledger(item)
    assert ["max_turns", f"{BUDGET} model calls a turn (the CLI's --max-turns)"] in record["terms"]["scaffold"]


def test_an_answer_cut_at_the_output_limit_is_named(pytester: pytest.Pytester) -> None:
    # The CLI meets stop_reason "max_tokens" by asking the model to go on; the rehearsal model's answer is cut
    # again each time, and the CLI gives up: its result says api_error "max_output_tokens".
    result, item = session(pytester, "--model", "rehearsal", "--palette-rehearsal-limits", "output=10")
    result.stdout.fnmatch_lines(["*claude: turn 1 ended at the model's output limit (the CLI's result: api_error "
                                 '"max_output_tokens"*): the agent\'s last answer was cut*'])
    [first] = turns(item)
    assert first["stop"] == "output_limit" and first["model_calls"] > 1


def test_a_request_over_the_context_is_named_with_its_sizes(pytester: pytest.Pytester) -> None:
    # The API's 400 names the sizes; the CLI's result says only "Prompt is too long": the host reads them in the
    # answer its forwarder passed on.
    result, item = session(pytester, "--model", "rehearsal", "--palette-rehearsal-limits", "context=500")
    result.stdout.fnmatch_lines(["*claude: turn 1 ended at the model's context limit (500 tokens; the request was "
                                 '*) before the agent answered (API status 400, terminal_reason "prompt_too_long")*'])
    [first] = turns(item)
    assert first["stop"] == "context_limit" and first["model_calls"] == 0 and first["error_file"] is None


def _quoting(asked: bytes) -> bytes:
    """A 500's body that quotes the request back, BODY characters of it, as a gateway's did."""
    text = asked.decode("utf-8", "replace")
    quoted = (text * (BODY // max(len(text), 1) + 1))[:BODY]
    return json.dumps({"type": "error", "error": {"type": "api_error",
                                                  "message": f"upstream failed on: {quoted} END"}}).encode()


@pytest.fixture
def failing() -> Iterator[str]:
    with FailingUpstream(_quoting) as upstream:
        yield upstream.url


def test_a_40_kb_api_error_is_one_line_and_kept_whole(pytester: pytest.Pytester, failing: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-not-a-key")
    result, item = session(pytester, "--model", "anthropic:claude-sonnet-4-5", "--palette-base-url", failing,
                           "--palette-model-retries", "1")
    lines = error_lines(result, item, pytester)
    # What the model layer saw, then what the CLI's result says of itself, without "success": its API status; its
    # retry.
    for shown in lines:
        assert "turn 1 failed: the model answered HTTP 500: upstream failed on: " in shown, shown
        assert "(failed: the CLI's result is an error (api_error_status 500 api_error" in shown, shown
        assert "success" not in shown and "retried model call(s)" in shown and "turn-1-error.txt" in shown
        # The error's words at most WORDS characters, their middle cut with a marker; around them the harness's.
        assert len(shown) <= WORDS + 200 and "characters cut" in shown
    [first] = turns(item)
    assert first["stop"] == "error" and first["error_file"] == "turn-1-error.txt" and len(first["error"]) <= WORDS
    whole = (item / "turn-1-error.txt").read_text(encoding="utf-8")
    assert len(whole) > BODY and whole.startswith("the CLI's result is an error") and " END" in whole
