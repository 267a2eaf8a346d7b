"""`--model replay:RUN`: the rule a replayed request is held to, and what a run to replay must be (docs/runs.md,
"Replay"). A whole recorded run replayed on react is tests/test_benchmark_suite.py's."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_palette.arena.cassette import Exchange
from pytest_palette.arena.replay import ReplayDiverged, ReplayUnavailable, divergence, recorded_run, replay_model
from pytest_palette.models import ModelUnavailable, parse_model


def message(kind: str, content: str, calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"content": content, "type": kind}
    if kind == "tool":
        data["tool_call_id"] = "call_1"
    if calls is not None:
        data["tool_calls"] = calls
    return {"type": kind, "data": data}


RUN = {"name": "run_command", "args": {"command": "python3 skills/palette/scripts/deck.py status --hold-seconds 60"},
       "id": "call_1", "type": "tool_call"}
RECORDED = [
    message("system", "Skills live in /work/runs/20261204-0800-aaaa/react/plain/work/skills."),
    message("human", "Build a 3-slide deck"),
    message("ai", "", [RUN]),
    message("tool", json.dumps({"state": "done", "done": True, "seconds": 61.2, "out": "/tmp/a/deck.pptx"})),
]


def test_a_request_matches_with_other_paths_times_and_ids() -> None:
    again = [message("system", "Skills live in /work/runs/20261205-0900-bbbb/react/plain/work/skills."),
             RECORDED[1], RECORDED[2],
             message("tool", json.dumps({"state": "done", "done": True, "seconds": 3.0, "out": "/tmp/b/deck.pptx"}))]
    assert divergence(RECORDED, again) is None
    text = [message("tool", "took 61.2 s; wrote /tmp/a/deck.pptx (job 1f2e3d4c5b6a)")]
    assert divergence(text, [message("tool", "took 3.0 s; wrote /tmp/b/deck.pptx (job 99aa88bb77cc)")]) is None


@pytest.mark.parametrize(("changed", "said"), [
    (RECORDED[:3], "it sent 3 message(s) where the recording sent 4"),
    ([*RECORDED[:1], message("human", "Build a 4-slide deck"), *RECORDED[2:]], "message 2 (human) differs"),
    ([*RECORDED[:2], message("ai", "", [{**RUN, "args": {"command": "ls"}}]), RECORDED[3]], "message 3 (ai) differs"),
    ([*RECORDED[:3], message("tool", json.dumps({"state": "failed", "error": "boom"}))], "message 4 (tool) differs"),
    ([*RECORDED[:3], message("human", "done")], "message 4 is a human message where the recording has a tool"),
])
def test_a_request_that_departs_from_the_recording_is_named(changed: list[dict[str, Any]], said: str) -> None:
    found = divergence(RECORDED, changed)
    assert found is not None and found.startswith(said), found


def exchange(index: int, answer: dict[str, Any] | None, messages: list[dict[str, Any]]) -> Exchange:
    return Exchange(index=index, turn=1, model="rehearsal", provider="rehearsal", started_at=0.0, ended_at=1.0,
                    messages=messages, tools=[], answer=answer, error="" if answer else "RateLimitError: 429")


def test_the_replayed_model_answers_in_order_and_stops_where_the_recording_does() -> None:
    from langchain_core.messages import messages_from_dict

    answer = {"type": "ai", "data": {"content": "Here is the plan.", "type": "ai",
                                     "usage_metadata": {"input_tokens": 9, "output_tokens": 3, "total_tokens": 12}}}
    model = replay_model([exchange(1, answer, RECORDED[:2]), exchange(2, None, RECORDED)], "replay of x from r")
    said = model.invoke(messages_from_dict(RECORDED[:2]))
    assert said.content == "Here is the plan." and said.usage_metadata is None  # no tokens are spent by a replay
    with pytest.raises(ReplayDiverged, match=r"call 2 \(turn 1\): the recorded call failed \(RateLimitError: 429\)"):
        model.invoke(messages_from_dict(RECORDED))
    with pytest.raises(ReplayDiverged, match="call 3: the agent asked the model again, and the recording ends after 2"):
        model.invoke(messages_from_dict(RECORDED))


def test_a_run_to_replay_must_be_a_recorded_run_of_its_own(tmp_path: Path) -> None:
    with pytest.raises(ReplayUnavailable, match="no run folder at"):
        recorded_run(str(tmp_path / "none"))
    with pytest.raises(ReplayUnavailable, match=r"no results\.jsonl with records in"):
        recorded_run(str(tmp_path))
    with pytest.raises(ModelUnavailable, match="name the recorded run folder"):
        parse_model("replay:")
    with pytest.raises(ModelUnavailable, match=re.escape(f"--model replay:{tmp_path}: no results.jsonl")):
        parse_model(f"replay:{tmp_path}")
