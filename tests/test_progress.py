"""Progress with -v: a line per item and turn, and a line for a command that runs long — serial, with
--palette-conversations and under xdist — and none without -v."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_palette.arena.command_log import CommandLog
from pytest_palette.cases import load_cases
from pytest_palette.hosts.claude import LiveCommands
from pytest_palette.run import schedule
from pytest_palette.run.progress import Board, ItemWatch, shown

# Two, two and three turns: the counts come from the cases, never from this test.
CASES = """
- name: three_slides
  covers: a plain yes builds what was asked
  request: Build a 3-slide deck on prompt caching
  expect:
    slides: 3
- name: held_off
  covers: no deck without approval
  request: Build a 3-slide deck on tides
  replies: ["actually, hold off for now"]
  expect:
    deck: false
- name: one_more
  covers: a change, then a yes
  request: Build a 3-slide deck on owls
  replies: ["make it 4 slides", "yes"]
  expect:
    slides: 4
"""


def turn_lines(cases: Path) -> list[str]:
    """Every line the turns of every case should print: `  <case>[react] turn i of n`, n its messages."""
    return [f"  {case.name}[react] turn {i} of {1 + len(case.replies)}"
            for case in load_cases(cases) for i in range(1, 2 + len(case.replies))]


# A command's line: item, turn, what runs, and for how long.
LONG_PLAN = re.compile(r"^  three_slides\[react\] turn 1/2 · (running|ran) python3 deck\.py plan --request "
                       r"'Build a 3-slide deck on prompt caching' --out plan\.md \((\d+) s\)$")


# An item in the order -v says they start in.
ORDER = re.compile(r"^ +(\d+)\. \S+::(\w+)\[react\]  (\S+) units \(its shape\)$")


@pytest.mark.parametrize("spread", [[], ["--palette-conversations", "3"], ["-n", "2"]],
                         ids=["serial", "conversations", "xdist"])
@pytest.mark.end_to_end
def test_with_v_every_item_shows_each_turn_and_a_long_command(pytester: pytest.Pytester, cases: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              spread: list[str]) -> None:
    # The engine takes at least 2 s for a plan, so `deck.py plan` runs past the 1 s threshold on any machine.
    monkeypatch.setenv("PALETTE_ENGINE_LATENCY", "plan=2")
    result = pytester.runpytest_subprocess("-v", "--palette-progress-after", "1", "-p", "no:cacheprovider",
                                           *spread)
    result.assert_outcomes(passed=3)
    lines = result.stdout.lines
    missing = [line for line in turn_lines(cases) if line not in lines]
    assert not missing, "\n".join(lines)
    assert len(turn_lines(cases)) == 7
    long = [found for line in lines if (found := LONG_PLAN.match(line))]
    assert long and all(int(found.group(2)) >= 1 for found in long), "\n".join(lines)
    # Side by side, the items start longest first (no history here: by their shapes), and -v says the order once.
    said = [found.groups() for line in lines if (found := ORDER.match(line))]
    ranked = sorted(load_cases(cases), key=lambda case: -schedule.units(case))  # ties keep the file's order
    assert said == ([(str(n), case.name, f"{schedule.units(case):g}") for n, case in enumerate(ranked, 1)]
                    if spread else []), "\n".join(lines)
    assert ("scheduling tests via LongestFirst" in lines) == (spread == ["-n", "2"])


@pytest.mark.end_to_end
def test_without_v_no_progress_line(pytester: pytest.Pytester, cases: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PALETTE_ENGINE_LATENCY", "plan=2")
    result = pytester.runpytest_subprocess("-k", "three_slides", "--palette-progress-after", "1",
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert not [line for line in result.stdout.lines if " turn " in line or "deck.py" in line]


def test_a_threshold_that_is_not_a_positive_number_is_a_usage_error(pytester: pytest.Pytester, cases: Path) -> None:
    result = pytester.runpytest("--palette-progress-after", "0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--palette-progress-after must be more than 0 (got 0)*"])


class Said:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, line: str) -> None:
        self.lines.append(line)


def board(after: float, tmp_path: Path) -> tuple[Board, Said]:
    shown_lines = Said()
    made = Board(after, tmp_path)
    made._write = shown_lines  # what pytest_sessionstart sets to the terminal reporter's write_line
    return made, shown_lines


def test_a_long_command_is_said_when_due_then_every_30_s(tmp_path: Path) -> None:
    made, said = board(10, tmp_path)
    made.send({"item": "all_hands[react]", "kind": "turn", "turn": 2, "turns": 3})
    made.send({"item": "all_hands[react]", "kind": "start", "id": 1, "command": "python3 deck.py status",
               "at": 1000.0})
    made._say(made._due(1009.0))
    made._say(made._due(1010.5))
    made._say(made._due(1020.0))
    made._say(made._due(1040.0))
    assert said.lines == ["  all_hands[react] turn 2 of 3",
                          "  all_hands[react] turn 2/3 · running python3 deck.py status (10 s)",
                          "  all_hands[react] turn 2/3 · running python3 deck.py status (40 s)"]


def test_a_long_command_that_ended_unseen_is_still_said_and_a_short_one_is_not(tmp_path: Path) -> None:
    made, said = board(5, tmp_path)
    for number, (start, end) in enumerate([(100.0, 103.0), (200.0, 207.0)], 1):
        made.send({"item": "x[react]", "kind": "start", "id": number, "command": f"cmd{number}", "at": start})
        made.send({"item": "x[react]", "kind": "end", "id": number, "at": end})
    assert said.lines == ["  x[react] · ran cmd2 (7 s)"]


def test_a_workers_events_are_read_from_its_file_whole_lines_only(tmp_path: Path) -> None:
    made, said = board(5, tmp_path)
    sink = tmp_path / "gw0.jsonl"
    sink.write_text('{"item": "x[react]", "kind": "turn", "turn": 1, "turns": 2}\n{"item": "x[re')
    made._poll()
    assert said.lines == ["  x[react] turn 1 of 2"]
    with sink.open("a") as more:
        more.write('act]", "kind": "turn", "turn": 2, "turns": 2}\n')
    made._poll()
    assert said.lines == ["  x[react] turn 1 of 2", "  x[react] turn 2 of 2"]


def test_an_item_watch_sends_what_the_board_reads(tmp_path: Path) -> None:
    made, said = board(1, tmp_path)
    watch = ItemWatch("x[react]", made)
    watch.turn(1, 1)
    ended = watch.command("python3 skills/palette/scripts/deck.py find --root .", 0.0)  # started long ago
    ended()
    assert said.lines[0] == "  x[react] turn 1 of 1"
    assert re.fullmatch(r"  x\[react\] turn 1/1 · ran python3 deck\.py find --root \. \(\d+ s\)", said.lines[1])


def test_a_command_is_shown_on_one_short_line() -> None:
    assert shown("python3 /w/skills/palette/scripts/deck.py plan  --out plan.md") == \
        "python3 deck.py plan --out plan.md"
    assert shown("cat > notes.md <<'EOF'\nsecret-looking pasted material\nEOF\n") == "cat > notes.md <<EOF"
    long = shown("echo " + "a" * 500)
    assert len(long) == 100 and long.endswith("…")


def test_the_claude_hosts_bash_calls_are_watched_as_its_cli_streams_them(tmp_path: Path) -> None:
    heard: list[tuple[str, str]] = []

    def watch(command: str, at: float) -> Callable[[], None]:
        heard.append(("start", command))
        return lambda: heard.append(("end", command))

    call = {"type": "assistant", "message": {"content": [
        {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "deck.py plan --key sk-secret"}}]}}
    result = {"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}}
    unanswered = {"type": "assistant", "message": {"content": [
        {"type": "tool_use", "id": "t2", "name": "Bash", "input": {"command": "deck.py status"}}]}}
    # The CLI's stream, line by line as it prints it: a call, its result, a call left running, then its result.
    live = LiveCommands(CommandLog(tmp_path / "commands.jsonl", watch), ["sk-secret"])
    for event in (call, result, unanswered):
        live.heard(json.dumps(event).encode())
    assert not live.failed
    live.heard(json.dumps({"type": "result", "is_error": True}).encode())
    live.close()
    assert live.failed  # a result that is an error: the conversation's CLI is let exit
    assert heard == [("start", "deck.py plan --key [redacted]"), ("end", "deck.py plan --key [redacted]"),
                     ("start", "deck.py status"), ("end", "deck.py status")]
