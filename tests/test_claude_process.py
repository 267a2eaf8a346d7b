"""One Claude Code CLI process per conversation (hosts/claude_process.py), against a stand-in CLI: a small script
that reads the user's lines as the real one does with `--input-format stream-json` and answers each with an init
line and a result. No real CLI: what is tested is the harness's side of the pipes (tests/test_claude_host.py runs
the real one)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from pytest_palette.hosts.base import HostError
from pytest_palette.hosts.claude import ClaudeSession
from pytest_palette.hosts.claude_process import CliProcess, TimedOut, user_line
from pytest_palette.skill import load_skill

#: Answers each user line with the CLI's shapes: its pid in the answer, a line on stderr per turn. A message "hang"
#: is never answered, "die" ends it without a result, "fail" is answered with an error result.
STAND_IN = r'''
import json, os, sys
argv = sys.argv[1:]
session = argv[argv.index("--session-id") + 1] if "--session-id" in argv else argv[-1].split("=", 1)[1]
for number, line in enumerate(sys.stdin, 1):
    said = json.loads(line)["message"]["content"]
    if said == "hang":
        sys.stdin.read()
    if said == "die":
        sys.exit(3)
    print(f"turn {number}", file=sys.stderr, flush=True)
    print(json.dumps({"type": "system", "subtype": "init", "skills": ["palette"], "session_id": session}))
    print(json.dumps({"type": "assistant", "message": {"id": f"m{number}", "model": "claude-sonnet-4-5",
                      "content": [{"type": "text", "text": said}]}}))
    failed = said == "fail"
    print(json.dumps({"type": "result", "subtype": "success", "is_error": failed, "num_turns": 2,
                      "session_id": session, "result": "an error" if failed else f"{os.getpid()} {said}",
                      "usage": {"input_tokens": 10 * number, "output_tokens": number},
                      "total_cost_usd": 0.5 * number}), flush=True)
sys.exit(1 if failed else 0)
'''


@pytest.fixture
def stand_in(tmp_path: Path) -> Path:
    path = tmp_path / "claude"
    path.write_text(f"#!{sys.executable}\n{STAND_IN}", encoding="utf-8")
    path.chmod(0o755)
    return path


def session_of(tmp_path: Path, cli: Path) -> ClaudeSession:
    work = tmp_path / "work"
    work.mkdir()
    return ClaudeSession(cli, work, load_skill("palette"), {"PATH": "/usr/bin:/bin"}, "claude-sonnet-4-5",
                         tmp_path / "item" / "claude")


def test_one_cli_carries_every_turn_and_each_turn_keeps_its_own_record(tmp_path: Path, stand_in: Path) -> None:
    session = session_of(tmp_path, stand_in)
    try:
        first, second = session.send("Build a deck", 60), session.send("yes", 60)
    finally:
        session.close()
    pid, said = first.answer.split(" ", 1)
    assert said == "Build a deck"
    assert second.answer == f"{pid} yes"  # the same process answered both
    # Each turn's own usage (not the session's), and its share of the session's running cost.
    assert (first.usage, second.usage) == ({"input_tokens": 10, "output_tokens": 1},
                                           {"input_tokens": 20, "output_tokens": 2})
    assert (first.model_calls, second.model_calls) == (1, 1)
    folder = tmp_path / "item" / "claude"
    assert (folder / "turn-02.jsonl").read_text().count('"type": "result"') == 1
    assert (folder / "turn-01.stderr").read_text() == "turn 1\n"
    assert (folder / "turn-02.stderr").read_text() == "turn 2\n"
    assert (folder / "turn-02.prompt").read_text() == "yes"


def test_an_error_result_ends_the_cli_and_its_exit_status_is_in_the_words(tmp_path: Path, stand_in: Path) -> None:
    session = session_of(tmp_path, stand_in)
    try:
        with pytest.raises(HostError, match=r"^the CLI's result is an error, exit 1: an error$"):
            session.send("fail", 60)
        assert session._process is None
    finally:
        session.close()


def test_a_cli_gone_mid_turn_is_an_error_naming_its_exit(tmp_path: Path, stand_in: Path) -> None:
    session = session_of(tmp_path, stand_in)
    try:
        with pytest.raises(HostError, match=r"^the CLI exited 3 without a result"):
            session.send("die", 60)
    finally:
        session.close()


def test_a_turn_out_of_time_stops_the_cli(tmp_path: Path, stand_in: Path) -> None:
    cli = CliProcess([str(stand_in), "--session-id", "s"], tmp_path, {"PATH": "/usr/bin:/bin"})
    out, err = io.BytesIO(), io.BytesIO()
    assert cli.turn(user_line("hello", "s"), out, err, 60)
    with pytest.raises(TimedOut):
        cli.turn(user_line("hang", "s"), out, err, 0.2)
    cli.stop(5)
    assert cli.process.poll() is not None and not cli.running()
    assert json.loads(out.getvalue().splitlines()[-1])["type"] == "result"


def test_a_message_larger_than_a_pipe_holds_reaches_the_cli_whole(tmp_path: Path, stand_in: Path) -> None:
    paste = "notes " * 100_000  # 600 KB: written as the CLI reads it, never blocking the harness
    cli = CliProcess([str(stand_in), "--session-id", "s"], tmp_path, {"PATH": "/usr/bin:/bin"})
    out, err = io.BytesIO(), io.BytesIO()
    try:
        assert cli.turn(user_line(paste, "s"), out, err, 120)
    finally:
        assert cli.end(err) == 0
    result = json.loads(out.getvalue().splitlines()[-1])
    assert result["result"].endswith(paste)
