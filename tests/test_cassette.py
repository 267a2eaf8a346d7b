"""`--palette-record`: each model call of an item in its cassette.jsonl, with no key in it
(pytest_palette/arena/cassette.py).

A react session records for real here; the known-bad agents' replay over a whole recorded run is in
tests/test_benchmark_suite.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from known_bad_cases import first_divergence
from ledger_records import record

from pytest_palette.arena.cassette import CASSETTE_NAME, REDACTED, Cassette, Exchange, WireRecorder, read_cassette
from pytest_palette.rehearsal.known_bad import KNOWN_BAD
from pytest_palette.rehearsal.policy import RehearsalPolicy

KEY = "sk-test-0123456789abcdef"


def exchange(index: int, text: str) -> Exchange:
    return Exchange(index=index, turn=1, model="m", provider="openai", started_at=1.0, ended_at=2.0,
                    messages=[{"type": "human", "data": {"content": text}}], tools=[], answer=None, error=text)


def test_a_cassette_replaces_every_key_it_was_given_and_reads_back_in_order(tmp_path: Path) -> None:
    cassette = Cassette(tmp_path / CASSETTE_NAME, "m", "openai", [KEY, "", "abc"])  # too short to be a key: left alone
    cassette.add(exchange(1, f"my key is {KEY}, abc"))
    cassette.add(exchange(2, 'a "quoted" \\ line'))
    text = (tmp_path / CASSETTE_NAME).read_text()
    assert KEY not in text and text.count(REDACTED) == 2 and "abc" in text
    assert [e.index for e in read_cassette(tmp_path)] == [1, 2]
    assert read_cassette(tmp_path)[1].error == 'a "quoted" \\ line'
    # A line cut short (a host killed mid-write) ends what is read; no cassette reads as none.
    with (tmp_path / CASSETTE_NAME).open("a") as handle:
        handle.write('{"index": 3, "tur')
    assert len(read_cassette(tmp_path)) == 2 and read_cassette(tmp_path / "nowhere") == []


def test_a_wire_call_keeps_the_place_it_was_made_in_though_its_answer_ends_after_the_next(tmp_path: Path) -> None:
    # A client sends its next call on the last event of an answer, before that answer's stream has closed: the
    # second call's answer can be written first. Each is numbered as it began, and read back in that order.
    cassette = Cassette(tmp_path / CASSETTE_NAME, "m", "openai")
    recorder = WireRecorder(cassette, "responses", tmp_path, lambda: 1)
    first, second, listing = recorder.begin("/v1/responses"), recorder.begin("/v1/responses"), \
        recorder.begin("/v1/models")
    for index, said in ((second, "second"), (first, "first")):
        recorder("/v1/responses", json.dumps({"input": said}).encode(), 200, "text/event-stream", b"", 0.0, 1.0,
                 index)
    assert listing is None
    assert [(json.loads(line)["index"]) for line in (tmp_path / CASSETTE_NAME).read_text().splitlines()] == [2, 1]
    assert [(e.index, e.messages[0]["content"]) for e in read_cassette(tmp_path)] == [(1, "first"), (2, "second")]


def test_a_cassette_that_is_a_link_is_not_read(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    Cassette(elsewhere / CASSETTE_NAME, "m", "openai").add(exchange(1, "outside"))
    item = tmp_path / "item"
    item.mkdir()
    os.symlink(elsewhere / CASSETTE_NAME, item / CASSETTE_NAME)
    with pytest.raises(Exception, match="link"):
        read_cassette(item)


@pytest.mark.parametrize("flag", ["--palette-record", "--model=replay:{run}"])
def test_recording_or_replaying_on_a_host_that_cannot_is_refused_by_name(pytester: pytest.Pytester, tmp_path: Path,
                                                                        flag: str) -> None:
    # The built-in hosts all record and replay; one that holds no model itself (the manual host) cannot.
    run = tmp_path / "recorded"
    run.mkdir()
    (run / "results.jsonl").write_text(json.dumps(record()) + "\n", encoding="utf-8")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--palette-run-dir", str(pytester.path / "r"),
                                          flag.format(run=run), "--host", "react,manual")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    said = "\n".join(result.errlines)
    assert "the manual host cannot record a cassette yet; record on claude or codex or cuga or react" in said or \
        "the manual host cannot replay a cassette yet; replay on claude or codex or cuga or react" in said, said


CASES = """
- name: three_slides
  covers: a request, a plan, one approval
  request: Build a 3-slide deck about tides
  replies: ["yes"]
"""


@pytest.mark.end_to_end
def test_a_react_run_records_every_call_and_the_good_agent_replays_it(pytester: pytest.Pytester,
                                                                     cases: Path) -> None:
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--palette-record")
    result.assert_outcomes(passed=1)
    [item] = (pytester.path / "runs").glob("*/react/three_slides")
    recorded = read_cassette(item)
    turns = json.loads((item / "turns.json").read_text())["turns"]
    # One line per call, numbered in order, across both turns; each ends with the answer it got.
    assert [e.index for e in recorded] == list(range(1, len(recorded) + 1)) and len(recorded) >= 4
    assert [e.turn for e in recorded] == sorted(e.turn for e in recorded) and recorded[-1].turn == len(turns) == 2
    assert all(e.answer is not None and not e.error and e.ended_at >= e.started_at for e in recorded)
    assert {(e.model, e.provider) for e in recorded} == {("rehearsal", "rehearsal")}
    assert recorded[0].messages[-1]["data"]["content"] == "Build a 3-slide deck about tides"
    assert {tool["function"]["name"] for tool in recorded[0].tools} == {"load_skill", "bash"}
    assert recorded[-1].answer is not None and recorded[-1].answer["data"]["content"] == turns[-1]["answer"]
    # The good agent, asked again at each call, answers as recorded; one that builds early answers otherwise (it
    # builds where the good one asks for approval); one whose flaw needs pasted material agrees everywhere.
    assert first_divergence(item, RehearsalPolicy()) is None
    assert first_divergence(item, KNOWN_BAD["builds_early"]()) is not None
    assert first_divergence(item, KNOWN_BAD["retypes_context"]()) is None
