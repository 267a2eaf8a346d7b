"""The react host end to end: the real LangGraph graph, the rehearsal model, the real skill and engine."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage

from pytest_palette.arena.workspace import TRACE_NAME
from pytest_palette.backend import agent_environment
from pytest_palette.hosts.base import HostError
from pytest_palette.hosts.react import ReactSession, make_tools, system_prompt
from pytest_palette.judge.evidence import inspect_deck, newest_deck, read_trace
from pytest_palette.rehearsal.langchain_model import RehearsalChatModel
from pytest_palette.skill import PACKAGED_SKILLS, load_skill, skill_hash


@pytest.fixture
def session(tmp_path: Path) -> ReactSession:
    env = agent_environment(tmp_path / TRACE_NAME)
    return ReactSession(RehearsalChatModel(), [load_skill("palette")], tmp_path, env, command_timeout=120)


def commands(workspace: Path) -> list[str]:
    return [call["command"] for call in read_trace(workspace / TRACE_NAME)]


def test_the_lazy_prompt_offers_the_skill_without_its_body_or_palette_vocabulary(tmp_path: Path) -> None:
    card = load_skill("palette")
    lazy = system_prompt([card], tmp_path / "skills")
    assert card.description in lazy and "load_skill" in lazy and card.body.strip() not in lazy
    eager = system_prompt([card], tmp_path / "skills", eager=True)
    assert card.body.strip() in eager
    host_text = system_prompt([], tmp_path / "skills")  # no skill (the baseline): nothing about skills at all
    assert "shell" in host_text
    for word in ("plan.md", "--context", "pptx", "slide", "deck", "skill", "load_skill", str(tmp_path)):
        assert word not in host_text


def test_lazy_offers_two_tools_and_eager_drops_the_loader(tmp_path: Path) -> None:
    card = load_skill("palette")
    assert [t.name for t in make_tools([card], tmp_path, {})] == ["load_skill", "bash"]
    assert [t.name for t in make_tools([card], tmp_path, {}, eager=True)] == ["bash"]
    loader = make_tools([card], tmp_path, {})[0]
    assert loader.invoke({"name": " palette "}) == card.body
    assert "Available: palette" in loader.invoke({"name": "slides"})


@pytest.mark.end_to_end
def test_a_three_slide_deck_with_a_plain_yes(session: ReactSession, tmp_path: Path) -> None:
    first = session.send("Build a 3-slide deck on prompt caching", timeout=120)
    assert "Reply **yes**" in first.answer and newest_deck(tmp_path) is None
    last = session.send("yes", timeout=120)
    deck = newest_deck(tmp_path)
    assert deck is not None and str(deck) in last.answer
    facts = inspect_deck(deck)
    assert facts.slides == 3 and facts.has_plex and facts.size >= 20_000
    # Holds collect the plan and the build in one call each: no polling at all.
    assert commands(tmp_path) == ["find", "plan", "find", "start", "status"]
    assert session.turns[0].steps[0].startswith("→ load_skill")


@pytest.mark.end_to_end
def test_a_change_is_edited_not_replanned_and_then_approved(session: ReactSession, tmp_path: Path) -> None:
    for message in ("Build a 3-slide deck on prompt caching", "make it 5 slides", "yes"):
        session.send(message, timeout=120)
    calls = commands(tmp_path)
    assert "edit" in calls and "plan" not in calls[calls.index("edit"):]
    deck = newest_deck(tmp_path)
    assert deck is not None and inspect_deck(deck).slides == 5


@pytest.mark.end_to_end
def test_holding_off_builds_nothing(session: ReactSession, tmp_path: Path) -> None:
    session.send("Build a 3-slide deck on prompt caching", timeout=120)
    session.send("actually, hold off for now", timeout=120)
    assert not list(tmp_path.rglob("*.pptx"))
    assert "start" not in commands(tmp_path)


def test_the_conversation_persists_across_turns_on_one_thread(session: ReactSession) -> None:
    session.send("Build a 3-slide deck on prompt caching", timeout=120)
    state = session.graph.get_state({"configurable": {"thread_id": session.thread_id}})
    assert any(isinstance(m, AIMessage) and "Reply **yes**" in str(m.content) for m in state.values["messages"])


def test_running_a_conversation_leaves_the_skill_under_test_unchanged(session: ReactSession, tmp_path: Path) -> None:
    before = skill_hash(PACKAGED_SKILLS / "palette")
    session.send("Build a 3-slide deck on prompt caching", timeout=120)
    assert skill_hash(PACKAGED_SKILLS / "palette") == before
    assert (tmp_path / "skills" / "palette" / "SKILL.md").is_file()


def test_an_exhausted_step_budget_is_a_host_error(tmp_path: Path) -> None:
    session = ReactSession(RehearsalChatModel(), [load_skill("palette")], tmp_path,
                           agent_environment(tmp_path / TRACE_NAME), recursion_limit=3)
    with pytest.raises(HostError, match="step budget"):
        session.send("Build a 3-slide deck on prompt caching", timeout=60)
    assert session.turns[-1].error


@pytest.mark.end_to_end
def test_a_turn_that_outlives_its_timeout_is_a_host_error(tmp_path: Path) -> None:
    env = agent_environment(tmp_path / TRACE_NAME, {**os.environ, "PALETTE_ENGINE_LATENCY": "plan=5"})
    session = ReactSession(RehearsalChatModel(), [load_skill("palette")], tmp_path, env)
    with pytest.raises(HostError, match="timed out"):
        session.send("Build a 3-slide deck on prompt caching", timeout=1.5)
    with pytest.raises(HostError, match="cannot continue"):
        session.send("yes", timeout=5)


@pytest.mark.end_to_end
def test_each_turn_records_the_tokens_the_model_reported(tmp_path: Path) -> None:
    def conversation(folder: Path) -> list[dict[str, int]]:
        talk = ReactSession(RehearsalChatModel(), [load_skill("palette")], folder,
                            agent_environment(folder / TRACE_NAME))
        return [talk.send(message, timeout=120).usage for message in ("Build a 3-slide deck on tides", "yes")]

    first, again = conversation(tmp_path / "a"), conversation(tmp_path / "b")
    # Summed over the model's answers in each turn (LangChain's usage_metadata). The rehearsal model's words are
    # deterministic, so its output counts the same; what it reads holds deck.py's answers, whose timings vary with
    # the machine's speed, so the input may differ by a token or so, never by a message.
    assert all(turn["input_tokens"] > turn["output_tokens"] > 0 for turn in first)
    assert [turn["output_tokens"] for turn in first] == [turn["output_tokens"] for turn in again]
    assert all(abs(a["input_tokens"] - b["input_tokens"]) <= 0.01 * a["input_tokens"]
               for a, b in zip(first, again, strict=True))
    # The second turn re-reads the whole history: it reads more than the first did.
    assert first[1]["input_tokens"] > first[0]["input_tokens"]
