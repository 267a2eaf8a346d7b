"""Why a cuga turn ended (issue 37): CUGA's own step limit, the model's output and context limits, a long error —
each read from what CUGA or the client reported, never from the model's words.

The first half needs no cuga: the harness's reading of what its worker said and its forwarder heard, and the
worker's words of an error. The second half runs real sessions (`pytest cases --host cuga`), each once per test
session and asserted on by every test that needs it: a looping agent under a lowered step limit, the good agent
under one it cannot finish in, the rehearsal model's output and context limits, an upstream whose 500 is 40 KB.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from sweeps import REPO, Sweep, Sweeps, run_session
from upstream import FailingUpstream

from pytest_palette.hosts import cuga as cuga_module
from pytest_palette.hosts.base import HostError, HostSettings, OptionRefused
from pytest_palette.hosts.cuga import CugaHost, Done, Heard, ended, finish_reason, installed_problem
from pytest_palette.hosts.cuga_worker import error_words
from pytest_palette.hosts.stops import TurnStopped
from pytest_palette.layer.route import route_of
from pytest_palette.models import parse_model
from pytest_palette.rehearsal import openai_wire
from pytest_palette.rehearsal.limits import ModelLimits
from pytest_palette.rehearsal.policy import RehearsalPolicy

#: What llama.cpp's server answers a request over its context: the sizes are in its body, not in its message.
LLAMA_CPP = json.dumps({"error": {"code": 400, "message": "the request exceeds the available context size, try "
                                  "increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 9120,
                                  "n_ctx": 8192}})


# -- the harness's reading: no cuga ------------------------------------------------------------------------------


def test_the_finish_reason_is_read_from_a_whole_answer_and_a_streamed_one() -> None:
    request = {"model": "rehearsal", "messages": [{"role": "user", "content": "Build a 3-slide deck on tides"}]}
    cut = openai_wire.complete(RehearsalPolicy(), request, ModelLimits(output=3))
    assert cut["choices"][0]["finish_reason"] == "length"
    assert finish_reason(json.dumps(cut).encode()) == "length"
    assert finish_reason(openai_wire.to_sse(cut, include_usage=True)) == "length"
    whole = openai_wire.complete(RehearsalPolicy(), request)
    assert finish_reason(openai_wire.to_sse(whole)) in ("stop", "tool_calls")
    assert finish_reason(b'{"error": {"message": "busy"}}') == finish_reason(b"not json") == ""


def _ended(done: Done, heard: Heard | None = None) -> HostError | None:
    return ended(done, heard)


def test_cugas_step_limit_is_the_workers_report_of_cuga_ending_the_turn_never_its_words() -> None:
    stopped = _ended(Done(answer="Maximum step limit (7) reached. …", stop="step_budget",
                          limit="cuga_lite_max_steps 7"), Heard(calls=8, status=200, finish="stop"))
    assert isinstance(stopped, TurnStopped) and stopped.reason == "step_budget"
    assert str(stopped) == "ended at the step budget (cuga_lite_max_steps 7) before the agent answered"
    # The same words as an answer the model gave are an answer: only CUGA's own check says the limit ended it.
    assert _ended(Done(answer="Maximum step limit (7) reached. …"), Heard(calls=2, status=200, finish="stop")) is None
    # A limit's words from the worker are bounded to a line.
    long = _ended(Done(stop="step_budget", limit="x\n" * 500))
    assert long is not None and "\n" not in str(long) and len(str(long)) < 200


def test_a_cut_or_refused_last_answer_is_read_from_its_finish_reason() -> None:
    cut = _ended(Done(answer="Here is the plan for your deck: # Promp"), Heard(calls=4, status=200, finish="length"))
    assert isinstance(cut, TurnStopped) and cut.reason == "output_limit"
    assert str(cut) == 'ended at the model\'s output limit (finish_reason "length"): the agent\'s last answer was cut'
    refused = _ended(Done(answer=""), Heard(calls=1, status=200, finish="content_filter"))
    assert isinstance(refused, TurnStopped) and refused.reason == "refused"
    # A provider that reaches the worker's client itself is not heard: its answers end the turn as they are.
    assert _ended(Done(answer="Your deck is ready")) is None


def test_a_refused_context_names_the_sizes_from_the_providers_own_body() -> None:
    # The openai SDK keeps llama.cpp's message and drops its sizes; the forwarder heard the whole body.
    said = ("CUGA raised OpenAIInvalidRequestError: Error code: 400 - the request exceeds the available context "
            "size, try increasing it")
    stopped = _ended(Done(error=said, stop="error"), Heard(calls=1, status=400, refusal=LLAMA_CPP))
    assert isinstance(stopped, TurnStopped) and stopped.reason == "context_limit"
    assert str(stopped) == ("ended at the model's context limit (8,192 tokens; the request was 9,120) before the "
                            "agent answered")
    # Without the body, the client's words still name the limit, without sizes; other errors are errors.
    named = _ended(Done(error=said, stop="error"))
    assert isinstance(named, TurnStopped) and named.reason == "context_limit" and "named no sizes" in str(named)
    other = _ended(Done(error="CUGA raised ValueError: no", stop="error"), Heard(calls=1, status=400,
                                                                               refusal='{"error": "bad tool"}'))
    assert type(other) is HostError and str(other) == "CUGA raised ValueError: no"


def test_the_workers_timeout_keeps_its_words() -> None:
    stopped = _ended(Done(error="turn timed out after 5 s", stop="turn_timeout"))
    assert isinstance(stopped, TurnStopped) and stopped.reason == "turn_timeout"
    assert str(stopped) == "turn timed out after 5 s"


def test_an_error_is_sent_in_its_words_and_its_causes_without_a_traceback() -> None:
    def raised() -> BaseException:
        try:
            try:
                raise ConnectionError("Error code: 400 - maximum context length is 500 tokens")
            except ConnectionError as inner:
                raise RuntimeError("model call failed\nTraceback (most recent call last):\n  File x\n\nDuring "
                                   "handling of the above exception, another exception occurred:\n") from inner
        except RuntimeError as outer:
            return outer
        raise AssertionError

    words = error_words(raised())
    assert words == ("RuntimeError: model call failed; caused by ConnectionError: Error code: 400 - maximum "
                     "context length is 500 tokens")
    # A cause that repeats its wrapper's words adds nothing.
    try:
        try:
            raise ValueError("the same words")
        except ValueError as inner:
            raise KeyError("the same words") from inner
    except KeyError as error:
        assert error_words(error) == "KeyError: 'the same words'"


# -- the step limit as an option of the host's own --------------------------------------------------------------


def test_the_step_limit_is_an_option_of_the_hosts_and_a_term_only_when_given(
        monkeypatch: pytest.MonkeyPatch) -> None:
    host = CugaHost()
    host.configure({"cuga-max-steps": None})
    assert host.max_steps is None and host.terms() == {}  # earlier runs keep their fingerprints
    with pytest.raises(OptionRefused, match="at least 1"):
        host.configure({"cuga-max-steps": 0})
    host.configure({"cuga-max-steps": 7})
    assert host.terms() == {"cuga_max_steps": 7}
    monkeypatch.setattr(cuga_module, "installed_problem", lambda: "not installed here")
    described = host.describe(route_of(parse_model("rehearsal")), HostSettings())
    assert described["cuga_max_steps"] == "7 (--palette-cuga-max-steps)"
    assert [option.flag() for option in CugaHost.options] == ["--palette-cuga-max-steps"]


# -- real sessions ---------------------------------------------------------------------------------------------

_REASON = installed_problem()
needs_cuga = pytest.mark.skipif(_REASON is not None, reason=f"cuga host unavailable: {_REASON}")
ITEM = "plain_request[cuga]"


def _turns(sweep: Sweep, case: str = "plain_request") -> list[dict[str, Any]]:
    [turns] = sweep.runs.glob(f"*/cuga/{case}/turns.json")
    found: list[dict[str, Any]] = json.loads(turns.read_text(encoding="utf-8"))["turns"]
    return found


def _record(sweep: Sweep, case: str = "plain_request") -> dict[str, Any]:
    [ledger] = sweep.runs.glob("*/results.jsonl")
    [record] = [r for r in map(json.loads, ledger.read_text(encoding="utf-8").splitlines()) if r["case"] == case]
    return record


def _error(sweep: Sweep, item: str = ITEM) -> str:
    """The item's ERROR as JUnit has it; it must be one."""
    result = sweep.items[item]
    assert result.outcome == "error", f"{item} {result.outcome}: {result.said}"
    return "".join(result.said)


def _shown(sweep: Sweep, words: str) -> list[str]:
    """The terminal's lines that hold `words`."""
    return [line for line in sweep.stdout.splitlines() if words in line]


@pytest.fixture(scope="module")
def looping(sweeps: Sweeps) -> Sweep:
    """The agent that builds the deck, then never answers, under a step limit of 7 (its plan takes 7 steps)."""
    return sweeps.run("--host=cuga", "--model=rehearsal:loops", "-k", "plain_request", "--palette-cuga-max-steps=7")


@pytest.mark.end_to_end
@needs_cuga
def test_a_looping_agent_ends_at_cugas_step_limit_as_an_error_naming_it(looping: Sweep) -> None:
    words = "cuga: turn 2 ended at the step budget (cuga_lite_max_steps 7) before the agent answered"
    assert words in _error(looping) and _shown(looping, words)
    assert any(words in failure for failure in _record(looping)["failures"])
    first, second = _turns(looping)
    assert first["stop"] == "answered" and first["model_calls"] >= 2
    # CUGA put its own words where the answer goes; the record says why they are not the agent's.
    assert second["stop"] == "step_budget" and second["answer"].startswith("Maximum step limit (7)")
    assert second["model_calls"] >= 4 and second["commands"] >= 3 and second["usage"]["input_tokens"] > 0
    assert ["cuga_max_steps", "7 (--palette-cuga-max-steps)"] in _record(looping)["terms"]["scaffold"]


@pytest.mark.end_to_end
@needs_cuga
def test_a_good_agent_under_a_step_limit_it_cannot_finish_in_is_never_a_pass(sweeps: Sweeps) -> None:
    cut = sweeps.run("--host=cuga", "--model=rehearsal", "-k", "plain_request", "--palette-cuga-max-steps=3")
    assert cut.items and all(result.outcome == "error" for result in cut.items.values()), cut.items
    assert "cuga: turn 1 ended at the step budget (cuga_lite_max_steps 3) before the agent answered" in _error(cut)
    [turn] = _turns(cut)
    assert turn["stop"] == "step_budget" and turn["model_calls"] >= 1


@pytest.mark.end_to_end
@needs_cuga
def test_an_answer_cut_at_the_output_limit_is_an_error_naming_it(sweeps: Sweeps) -> None:
    cut = sweeps.run("--host=cuga", "--model=rehearsal", "-k", "plain_request", "--palette-rehearsal-limits=output=10")
    words = ('cuga: turn 1 ended at the model\'s output limit (finish_reason "length"): the agent\'s last answer '
             "was cut")
    assert words in _error(cut) and _shown(cut, words)
    [turn] = _turns(cut)
    assert turn["stop"] == "output_limit" and turn["model_calls"] >= 1
    assert len(turn["answer"]) <= 40  # ten tokens of the rehearsal model's estimate


@pytest.mark.end_to_end
@needs_cuga
def test_a_request_over_the_context_is_an_error_in_one_line_naming_the_sizes(sweeps: Sweeps) -> None:
    over = sweeps.run("--host=cuga", "--model=rehearsal", "-k", "plain_request",
                      "--palette-rehearsal-limits=context=500")
    words = re.compile(r"cuga: turn 1 ended at the model's context limit \(500 tokens; the request was [\d,]+\) "
                       r"before the agent answered")
    error = _error(over)
    assert words.search(error) and "During handling" not in error and "Traceback" not in error
    [recorded] = _record(over)["failures"]
    assert words.fullmatch(recorded)  # one line, and nothing else
    assert _shown(over, "↳ cuga: turn 1 ended at the model's context limit (500 tokens; the request was ")
    [turn] = _turns(over)
    # The turn's record keeps the client's words; the item names the stop.
    assert turn["stop"] == "context_limit" and turn["model_calls"] == 1 and "maximum context length" in turn["error"]


#: An upstream's whole answer to every call: a 500 of 40 KB.
BIG_ERROR = json.dumps({"error": {"message": "upstream exploded: " + "x" * 40_000 + " (the end)",
                                  "type": "server_error"}}).encode()


@pytest.fixture(scope="module")
def upstream_500() -> Iterator[str]:
    with FailingUpstream(lambda asked: BIG_ERROR) as upstream:
        yield upstream.base_url


@pytest.mark.end_to_end
@needs_cuga
def test_a_40_kb_error_is_a_few_hundred_characters_and_the_whole_is_kept_in_the_items_file(
        sweeps: Sweeps, upstream_500: str) -> None:
    # Shared by name, not by its arguments: the upstream's port is this worker's.
    failed = sweeps.shared("cuga-stops-500", lambda folder: run_session(folder, [
        str(REPO / "cases"), f"--rootdir={REPO}", "--host=cuga", "--model=openai:big-errors", "-k",
        "plain_request", f"--palette-base-url={upstream_500}"], env={"OPENAI_API_KEY": "sk-test-not-a-key"}))
    error = _error(failed)
    assert "upstream exploded" in error and "characters cut]" in error and len(error) < 1000
    [shown] = _shown(failed, "↳ cuga: turn 1 failed")
    assert len(shown) < 600
    [recorded] = _record(failed)["failures"]
    assert len(recorded) < 600 and "(the whole error: turn-1-error.txt)" in recorded
    [turn] = _turns(failed)
    assert turn["stop"] == "error" and turn["error_file"] == "turn-1-error.txt" and len(turn["error"]) <= 300
    assert turn["model_calls"] == turn["retries"] == 3  # the call and the openai SDK's two retries, each heard
    [kept] = failed.runs.glob("*/cuga/plain_request/turn-1-error.txt")
    assert "x" * 40_000 + " (the end)" in kept.read_text(encoding="utf-8")
