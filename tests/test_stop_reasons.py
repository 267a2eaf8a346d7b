"""Every turn says why it ended (hosts/stops.py): read from what the host's client reports, never from the model's
words; every reason but `answered` is an ERROR of the run that names it, in one line, the whole kept in a file."""

from __future__ import annotations

import http.client
import json
import re
from pathlib import Path
from typing import Any

import pytest
from sweeps import REPO, run_session
from upstream import FailingUpstream

from pytest_palette.arena.workspace import TRACE_NAME, Workspace
from pytest_palette.backend import agent_environment
from pytest_palette.hosts import stops
from pytest_palette.hosts.react import ReactSession
from pytest_palette.rehearsal.conversation import Action, Conversation, Reply
from pytest_palette.rehearsal.known_bad import Loops
from pytest_palette.rehearsal.langchain_model import RehearsalChatModel
from pytest_palette.rehearsal.limits import ModelLimits
from pytest_palette.rehearsal.policy import RehearsalPolicy
from pytest_palette.rehearsal.server import RehearsalServer
from pytest_palette.results.ledger import load, read
from pytest_palette.run.conversation import Transcript
from pytest_palette.skill import load_skill

# -- the words ----------------------------------------------------------------------------------------------------

#: How providers word a request over the context, as their clients relay it: (words, limit, asked).
CONTEXT_WORDS = [
    ("Error code: 400 - {'error': {'message': \"This model's maximum context length is 8192 tokens. However, your "
     "messages resulted in 9120 tokens. Please reduce the length of the messages.\", 'code': "
     "'context_length_exceeded'}}", 8192, 9120),
    ("openai.BadRequestError: This model's maximum context length is 128,000 tokens. However, you requested "
     "130,500 tokens (129,000 in the messages, 1,500 in the completion).", 128000, 130500),
    ('{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 '
     'maximum"}}', 200000, 210000),
    ('{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":'
     '"exceed_context_size_error","n_prompt_tokens":9000,"n_ctx":8192}}', 8192, 9000),
]


@pytest.mark.parametrize(("words", "limit", "asked"), CONTEXT_WORDS)
def test_a_providers_context_refusal_is_named_with_its_sizes(words: str, limit: int, asked: int) -> None:
    stopped = stops.context_limit(words)
    assert stopped is not None and stopped.reason == "context_limit"
    assert str(stopped) == (f"ended at the model's context limit ({limit:,} tokens; the request was {asked:,}) "
                            "before the agent answered")


def test_other_errors_are_not_a_context_limit_and_sizes_are_not_invented() -> None:
    for words in ("Error code: 500 - internal error", "RateLimitError: 429 too many requests", "the context of the "
                  "plan is long", "ConnectionResetError: [Errno 104] Connection reset by peer",
                  # a gateway's 500 quoting back a conversation that speaks of these very words
                  "InternalServerError: Error code: 502 - {'echo': 'prompt is too long: 9 tokens > 8 maximum'}",
                  "the CLI's result is an error (api_error_status 500 api_error): maximum context length is 8 tokens"):
        assert stops.context_limit(words) is None, words
    unnamed = stops.context_limit("BadRequestError: context_length_exceeded")
    assert unnamed is not None and "named no sizes" in str(unnamed)


def test_an_error_is_one_line_of_bounded_length_keeping_its_start_and_end() -> None:
    words = "Traceback (most recent call last):\n" + "  quoted system prompt " * 2000 + "\nAPIError: 500 the cause"
    line = stops.one_line(words)
    assert "\n" not in line and len(line) <= stops.WORDS
    assert line.startswith("Traceback (most recent call last):") and line.endswith("APIError: 500 the cause")
    assert "characters cut" in line
    assert stops.one_line("  short\n  words ") == "short words"


def test_the_rehearsal_models_limits_read_as_written_and_refuse_what_is_not() -> None:
    assert ModelLimits.parse("output=40,context=8192") == ModelLimits(40, 8192)
    assert ModelLimits.parse("context=5") == ModelLimits(None, 5) and str(ModelLimits(7, None)) == "output=7"
    for bad, said in (("output", "write output=TOKENS"), ("tokens=5", "write output=TOKENS"),
                      ("output=0", "not a whole number"), ("output=x", "not a whole number"), ("", "no limit")):
        with pytest.raises(ValueError, match=said):
            ModelLimits.parse(bad)
    assert ModelLimits(output=2).cut("12345678") == ("12345678", False)
    assert ModelLimits(output=2).cut("123456789") == ("12345678", True)
    assert ModelLimits(context=10).openai_refusal(10) is None
    refusal = ModelLimits(context=10).openai_refusal(11)
    assert refusal is not None and stops.context_limit(refusal) is not None
    assert stops.context_limit(ModelLimits(context=10).anthropic_refusal(11) or "") is not None


# -- the rehearsal server meets its limits as providers do ------------------------------------------------------


def _post(server: RehearsalServer, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        data = json.dumps(body).encode()
        connection.request("POST", path, data, {"Content-Type": "application/json", "Content-Length": str(len(data))})
        answer = connection.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        connection.close()


def test_the_rehearsal_server_cuts_an_answer_and_refuses_a_long_request_on_both_wires() -> None:
    asked = {"model": "rehearsal", "max_tokens": 1000, "messages": [{"role": "user", "content": "What is a tide?"}]}
    tool = [{"name": "Bash", "description": "run", "input_schema": {"type": "object", "properties": {
        "command": {"type": "string"}}}}]
    with RehearsalServer(limits=ModelLimits(output=3)) as server:
        status, completion = _post(server, "/v1/chat/completions", asked)
        assert status == 200 and completion["choices"][0]["finish_reason"] == "length"
        assert len(completion["choices"][0]["message"]["content"]) == 12
        status, message = _post(server, "/v1/messages", {**asked, "tools": tool})
        assert status == 200 and message["stop_reason"] == "max_tokens"
    with RehearsalServer(limits=ModelLimits(context=5)) as server:
        status, refused = _post(server, "/v1/chat/completions", asked)
        assert status == 400 and refused["error"]["code"] == "context_length_exceeded"
        assert stops.context_limit(refused["error"]["message"]) is not None
        status, refused = _post(server, "/v1/messages", {**asked, "tools": tool})
        assert status == 400 and stops.context_limit(refused["error"]["message"]) is not None
    with RehearsalServer() as server:  # no limits: answered as before
        status, completion = _post(server, "/v1/chat/completions", asked)
        assert status == 200 and completion["choices"][0]["finish_reason"] == "stop"


# -- react reads its stops from LangChain, not from the words ---------------------------------------------------


def _react(tmp_path: Path, model: RehearsalChatModel, recursion_limit: int = 120) -> ReactSession:
    return ReactSession(model, [load_skill("palette")], tmp_path, agent_environment(tmp_path / TRACE_NAME),
                        recursion_limit=recursion_limit)


class SaysItNeedsMoreSteps(RehearsalPolicy):
    """Answers, in the very words LangGraph's agent puts in place of an answer when its steps run out."""

    name = "says_it_needs_more_steps"

    def next_action(self, conversation: Conversation) -> Action:
        return Reply("Sorry, need more steps to process this request.")


def test_react_a_looping_agent_ends_at_the_step_budget_and_an_answer_in_its_words_does_not(tmp_path: Path) -> None:
    session = _react(tmp_path / "loops", RehearsalChatModel(policy=Loops()), recursion_limit=30)
    session.send("Build a 3-slide deck on prompt caching", timeout=120)
    with pytest.raises(stops.TurnStopped) as stopped:
        session.send("yes", timeout=120)
    assert stopped.value.reason == "step_budget"
    assert str(stopped.value) == "ended at the step budget (30 steps) before the agent answered"
    # LangGraph's own stop (remaining_steps), not a recursion error: the graph answered in its words.
    turn = session.turns[-1]
    assert turn.answer == "Sorry, need more steps to process this request."
    assert turn.model_calls is not None and turn.model_calls >= 10 and turn.usage["input_tokens"] > 0
    assert sum("ls -la ./deck" in step for step in turn.steps) >= 5
    # The same words from a model that answered are an answer.
    said = _react(tmp_path / "says", RehearsalChatModel(policy=SaysItNeedsMoreSteps())).send("Hello", timeout=60)
    assert said.answer == "Sorry, need more steps to process this request." and said.model_calls == 1


def test_react_an_answer_cut_at_the_output_limit_and_a_request_over_the_context_are_named(tmp_path: Path) -> None:
    cut = _react(tmp_path / "cut", RehearsalChatModel(limits=ModelLimits(output=10)))
    with pytest.raises(stops.TurnStopped) as stopped:
        cut.send("Build a 3-slide deck on prompt caching", timeout=120)
    assert stopped.value.reason == "output_limit" and 'finish_reason "length"' in str(stopped.value)
    assert cut.turns[-1].answer and len(cut.turns[-1].answer) <= 40
    over = _react(tmp_path / "over", RehearsalChatModel(limits=ModelLimits(context=50)))
    with pytest.raises(stops.HostError) as failed:
        over.send("Build a 3-slide deck on prompt caching", timeout=120)
    named = stops.context_limit(str(failed.value))
    assert named is not None and "(50 tokens; the request was" in str(named)


# -- a whole session: the verdict follows, in one line, everywhere it is shown -----------------------------------


def _big_error(size: int) -> bytes:
    """A 500's body of about `size` bytes: a gateway quoting back the whole request."""
    return json.dumps({"error": {"message": "upstream failed: " + "quoted prompt " * (size // 14),
                                 "type": "api_error"}}).encode()


DECK_CASES = [f"{REPO / 'cases' / 'interaction.yaml'}::plain_request[react]",
              f"{REPO / 'cases' / 'interaction.yaml'}::edit_slide_count[react]"]


def _junit_errors(folder: Path) -> list[str]:
    import xml.etree.ElementTree as ET

    return [str(error.get("message")) for error in ET.parse(folder / "junit.xml").getroot().iter("error")]


@pytest.mark.end_to_end
def test_a_lowered_step_budget_errs_every_item_naming_it_in_turns_record_junit_and_terminal(tmp_path: Path) -> None:
    sweep = run_session(tmp_path, [*DECK_CASES, f"--rootdir={REPO}", "--model=rehearsal",
                                   "--palette-recursion-limit=3"])
    assert {result.outcome for result in sweep.items.values()} == {"error"} and len(sweep.items) == 2
    assert all("ended at the step budget (3 steps) before the agent answered" in message
               for message in _junit_errors(tmp_path)), _junit_errors(tmp_path)
    assert "react: turn 1 ended at the step budget (3 steps) before the agent answered" in sweep.stdout
    records = list(load(sweep.runs).latest.values())
    assert {r.outcome for r in records} == {"error"} and all(r.usage.stops == ("step_budget",) for r in records)
    assert all(r.usage.model_calls and r.usage.input_tokens for r in records)
    assert all(r.failures == ("react: turn 1 ended at the step budget (3 steps) before the agent answered",)
               for r in records)
    for turns in sweep.runs.glob("*/react/*/turns.json"):
        [turn] = json.loads(turns.read_text())["turns"]
        assert turn["stop"] == "step_budget" and turn["model_calls"] >= 1 and turn["commands"] >= 0
    # Records and turns written before stops were kept still read: nobody said why those turns ended.
    [ledger] = sweep.runs.glob("*/results.jsonl")
    old = tmp_path / "old" / "results.jsonl"
    old.parent.mkdir()
    lines = [json.loads(line) for line in ledger.read_text().splitlines()]
    for line in lines:
        for name in ("stops", "model_calls", "commands"):
            del line["usage"][name]
    old.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert [r.usage.stops for r in read(old)] == [(), ()]
    folder = next(sweep.runs.glob("*/react/plain_request"))
    saved = json.loads((folder / "turns.json").read_text())
    for turn in saved["turns"]:
        for name in ("stop", "model_calls", "commands", "error_file"):
            del turn[name]
    kept = Workspace.of(tmp_path / "old", "react", "plain_request", 1, False)
    kept.folder.parent.mkdir()
    kept.folder.mkdir()
    kept.turns.write_text(json.dumps(saved))
    [turn] = Transcript.saved(kept).turns
    assert turn.stop is None and turn.error and "step budget" in turn.error


@pytest.mark.end_to_end
def test_a_40_kb_server_error_is_one_short_line_with_the_whole_body_in_the_items_file(tmp_path: Path) -> None:
    body = _big_error(40_000)
    with FailingUpstream(lambda asked: body) as upstream:
        sweep = run_session(tmp_path, [DECK_CASES[0], f"--rootdir={REPO}", "--model=openai:some-model",
                                       f"--palette-base-url={upstream.base_url}", "--palette-model-retries=0"],
                            env={"OPENAI_API_KEY": "sk-test-not-a-real-key"})
    assert len(body) >= 40_000
    [result] = sweep.items.values()
    assert result.outcome == "error"
    [message] = _junit_errors(tmp_path)
    [record] = load(sweep.runs).latest.values()
    [failure] = record.failures
    assert len(failure) <= 400 and "\n" not in failure and "turn-1-error.txt" in failure, failure
    assert len(message) <= 600 and "quoted prompt quoted prompt quoted prompt " * 20 not in sweep.stdout
    [folder] = sweep.runs.glob("*/react/plain_request")
    whole = (folder / "turn-1-error.txt").read_text()
    assert len(whole) >= 40_000 and "sk-test-not-a-real-key" not in whole
    [turn] = json.loads((folder / "turns.json").read_text())["turns"]
    assert turn["stop"] == "error" and turn["error_file"] == "turn-1-error.txt" and len(turn["error"]) <= stops.WORDS


@pytest.mark.end_to_end
def test_a_request_over_the_models_context_errs_naming_both_sizes_in_one_line(tmp_path: Path) -> None:
    sweep = run_session(tmp_path, [DECK_CASES[0], f"--rootdir={REPO}", "--model=rehearsal",
                                   "--palette-rehearsal-limits=context=600"])
    [result] = sweep.items.values()
    [record] = load(sweep.runs).latest.values()
    assert result.outcome == "error" and record.usage.stops == ("context_limit",)
    [failure] = record.failures
    assert re.fullmatch(r"react: turn 1 ended at the model's context limit \(600 tokens; the request was "
                        r"[\d,]+\) before the agent answered", failure), failure
    assert failure in _junit_errors(tmp_path)[0] and failure in sweep.stdout
    assert "During handling" not in sweep.stdout and "Traceback" not in sweep.stdout
