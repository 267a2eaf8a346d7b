"""Our own call record: what each host saw its agent run, read back as the skill's calls when the skill
writes no trace, and compared with the trace when it writes one."""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath

import pytest

from pytest_palette.arena.command_log import (
    NOT_FOUND,
    CommandLog,
    CommandRun,
    in_turns,
    invocations,
    not_found,
    read,
    skill_calls,
)
from pytest_palette.arena.workspace import Workspace
from pytest_palette.cases import Case, Expect
from pytest_palette.hosts.claude_stream import parse_stream
from pytest_palette.hosts.shell import run_shell
from pytest_palette.judge import explain, judge
from pytest_palette.judge.evidence import Evidence, calls_of, choose_calls
from pytest_palette.skill import PACKAGED_SKILLS, load_card

DECK = "python3 skills/palette/scripts/deck.py"
CHANGELOG = "python3 skills/changelog/scripts/changelog.py"


@pytest.mark.parametrize(("command", "expected"), [
    (f"{DECK} plan --request 'a deck on caching' --out plan.md",
     [("plan", {"request": "a deck on caching", "out": "plan.md"})]),
    (f"{DECK} status --out-dir ./deck --hold-seconds 0", [("status", {"out_dir": "./deck", "hold_seconds": 0.0})]),
    (f"{DECK} plan-status --out=plan.md --hold-seconds=45",
     [("plan-status", {"out": "plan.md", "hold_seconds": 45.0})]),
    (f"{DECK} plan --request r --context \"$(cat notes.md)\" --wait", [("plan", {"request": "r",
                                                                                "context": "$(cat notes.md)",
                                                                                "wait": True})]),
    # Two calls on one line, an environment prefix, an absolute path, a redirection.
    (f"cd work && PALETTE_X=1 python3 /abs/skills/palette/scripts/deck.py start --plan plan.md --out-dir deck "
     f"&& {DECK} status --out-dir deck 2>&1",
     [("start", {"plan": "plan.md", "out_dir": "deck"}), ("status", {"out_dir": "deck"})]),
    (f"{DECK} find --root .; ls deck", [("find", {"root": "."})]),
    ("python3 other.py plan --request x", []),  # not the skill's script
    (f"{DECK} --help", []),  # no subcommand
    (f"{DECK} plan --request 'unbalanced", []),  # not a command line this record can read
])
def test_invocations_read_the_skills_calls_out_of_a_command_line(command: str,
                                                                 expected: list[tuple[str, dict[str, object]]]) -> None:
    assert list(invocations(command)) == expected


def test_a_log_reads_back_in_start_order_and_skips_a_torn_line(tmp_path: Path) -> None:
    log = CommandLog(tmp_path / "commands.jsonl")
    log.add(f"{DECK} status --out-dir deck", 20.0, 21.5, 0, '{"done": true}')
    log.add(f"{DECK} plan --request r", 10.0, 11.0, 1, "", "boom")
    with log.path.open("a") as torn:
        torn.write('{"command": "half')
    runs = read(log.path)
    assert [run.started_at for run in runs] == [10.0, 20.0]
    assert runs[0] == CommandRun(f"{DECK} plan --request r", 10.0, 11.0, 1, "", "boom")
    calls = skill_calls(runs)
    assert [(c["command"], c["at"], c["seconds"], c["exit_code"], c["from"]) for c in calls] == [
        ("plan", 10.0, 1.0, 1, "host"), ("status", 20.0, 1.5, 0, "host")]
    assert read(tmp_path / "none.jsonl") == []


def test_each_command_falls_in_the_turn_whose_window_holds_its_start() -> None:
    runs = [CommandRun(f"c{at}", at, at + 0.5, 0, "") for at in (5.0, 10.0, 12.0, 20.0, 31.0)]

    def named(placed: list[list[CommandRun]]) -> list[list[str]]:
        return [[run.command for run in turn] for turn in placed]

    # From its message up to the next's; the last turn's runs to the end; before the first, in none.
    assert named(in_turns(runs, [10.0, 20.0, 30.0])) == [["c10.0", "c12.0"], ["c20.0"], ["c31.0"]]
    # A turn whose time was not kept holds none, and the one before it runs on to the next known.
    assert named(in_turns(runs, [10.0, None, 30.0])) == [["c10.0", "c12.0", "c20.0"], [], ["c31.0"]]
    assert named(in_turns(runs, [10.0, 20.0, None])) == [["c10.0", "c12.0"], ["c20.0", "c31.0"], []]
    # No time kept at all: every command once, in the last turn.
    assert named(in_turns(runs, [None, None])) == [[], [run.command for run in runs]]
    assert in_turns(runs, []) == []


def test_the_shell_records_each_command_with_its_exit_code_output_and_times(tmp_path: Path) -> None:
    log = CommandLog(tmp_path / "commands.jsonl")
    shown = run_shell("echo out; echo err >&2; exit 3", tmp_path, {"PATH": "/usr/bin:/bin"}, log=log)
    assert "[exit code 3]" in shown
    (run,) = read(log.path)
    assert (run.command, run.exit_code, run.stdout, run.stderr) == ("echo out; echo err >&2; exit 3", 3, "out\n",
                                                                      "err\n")
    assert run.ended_at >= run.started_at > 0
    run_shell("sleep 5", tmp_path, {"PATH": "/usr/bin:/bin"}, timeout=0.2, log=log)
    stopped = read(log.path)[-1]
    assert stopped.command == "sleep 5" and stopped.exit_code is None  # stopped by the time limit: unknown


def test_a_command_its_shell_cannot_find_is_recorded_with_exit_127_and_the_shells_words(tmp_path: Path) -> None:
    log = CommandLog(tmp_path / "commands.jsonl")
    run_shell("no-such-interpreter deck.py find", tmp_path, {"PATH": "/usr/bin:/bin"}, log=log)
    (run,) = read(log.path)
    assert run.exit_code == NOT_FOUND and not_found(run.stderr)[0][0] == "no-such-interpreter"


def _event(kind: str, at: str, *blocks: dict[str, object], result: object = None) -> str:
    event: dict[str, object] = {"type": kind, "timestamp": at, "message": {"content": list(blocks)}}
    if result is not None:
        event["tool_use_result"] = result
    return json.dumps(event)


def test_the_claude_stream_gives_each_bash_command_its_times_output_and_exit_code() -> None:
    lines = [
        json.dumps({"type": "system", "subtype": "init", "skills": ["palette"], "session_id": "s"}),
        _event("assistant", "2026-12-01T10:00:00.000Z",
               {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": f"{DECK} plan --request r"}}),
        _event("assistant", "2026-12-01T10:00:00.500Z",
               {"type": "tool_use", "id": "t0", "name": "Skill", "input": {"skill": "palette"}}),
        _event("user", "2026-12-01T10:00:02.250Z",
               {"type": "tool_result", "tool_use_id": "t1", "content": '{"done": true}', "is_error": False},
               result={"stdout": '{"done": true}', "stderr": "", "interrupted": False}),
        _event("assistant", "2026-12-01T10:00:03.000Z",
               {"type": "tool_use", "id": "t2", "name": "Bash", "input": {"command": "false"}}),
        _event("user", "2026-12-01T10:00:03.100Z",
               {"type": "tool_result", "tool_use_id": "t2", "content": "Exit code 1", "is_error": True}),
        _event("assistant", "2026-12-01T10:00:03.500Z",
               {"type": "tool_use", "id": "t4", "name": "Bash", "input": {"command": f"python {DECK[8:]} find"}}),
        _event("user", "2026-12-01T10:00:03.600Z",  # the shell's words only: still the 127 it exited with
               {"type": "tool_result", "tool_use_id": "t4", "content": "/bin/sh: 1: python: not found",
                "is_error": True}),
        _event("assistant", "2026-12-01T10:00:04.000Z",  # never answered: not a command that ended
               {"type": "tool_use", "id": "t3", "name": "Bash", "input": {"command": "sleep 100"}}),
    ]
    runs = parse_stream(lines).commands
    assert [(r.command, r.exit_code, r.stdout) for r in runs] == [(f"{DECK} plan --request r", 0, '{"done": true}'),
                                                                  ("false", 1, "Exit code 1"),
                                                                  (f"python {DECK[8:]} find", NOT_FOUND,
                                                                   "/bin/sh: 1: python: not found")]
    assert runs[0].ended_at - runs[0].started_at == pytest.approx(2.25)


TRACED = [{"at": 10.5, "command": "plan", "args": {"request": "r", "out": "plan.md"}, "seconds": 0.5, "stdout": "{}"},
          {"at": 20.5, "command": "start", "args": {"plan": "plan.md", "out_dir": "deck"}, "seconds": 0.5,
           "stdout": "{}"},
          {"at": 30.5, "command": "status", "args": {"out_dir": "deck"}, "seconds": 0.5, "stdout": "{}"}]
SEEN = skill_calls([CommandRun(f"{DECK} plan --request r --out plan.md", 10.0, 11.0, 0, "{}"),
                    CommandRun(f"{DECK} start --plan plan.md --out-dir deck", 20.0, 21.0, 0, "{}"),
                    CommandRun(f"{DECK} status --out-dir deck", 30.0, 31.0, 0, "{}")])


def test_the_skills_trace_is_judged_when_it_has_calls_and_agrees_quietly() -> None:
    calls, source, notes = choose_calls(TRACED, SEEN, recorded=True)
    assert (calls, source, notes) == (TRACED, "trace", ())


def test_a_disagreement_between_the_trace_and_the_record_is_named() -> None:
    calls, source, notes = choose_calls(TRACED, SEEN[:1], recorded=True)
    # The host's record decides which calls ran: the trace's start and status, which no command ran, are not judged.
    assert ([c["command"] for c in calls], source) == (["plan"], "trace")
    assert notes == ("the skill's trace has calls the host never saw run: start at 00:00:20.50, status at "
                     "00:00:30.50; they are not judged (a call the host's record cannot read, such as one from a "
                     "script of the agent's, is not judged either)",)
    # A host that keeps no record (a conversation held by hand) has nothing to disagree with.
    assert choose_calls(TRACED, [], recorded=False) == (TRACED, "trace", ())


def test_our_record_is_judged_when_the_skill_wrote_no_trace() -> None:
    seen = [{"command": "plan", "from": "host"}]
    calls, source, notes = choose_calls([], seen, recorded=True)
    assert (calls, source) == (seen, "host")
    assert notes == ("judged from the host's record of the commands the agent ran: the skill wrote no trace",)
    assert choose_calls([], [], recorded=True) == ([], "", ())


def test_a_verdict_carries_where_its_calls_came_from_and_the_notes(tmp_path: Path) -> None:
    case = Case(name="c", covers="x", tags=(), request="r", context="", replies=("yes",), expect=Expect(),
                path=Path("c.yaml"), line=1)
    evidence = Evidence(workspace=tmp_path, pptx=None, slides=0, has_plex=False, size=0, decks=(),
                        calls=tuple(TRACED), calls_from="host", call_notes=("judged from the host's record",))
    verdict = judge(case, evidence, "react")
    assert verdict.calls_from == "host" and verdict.notes == ("judged from the host's record",)
    assert "  note: judged from the host's record" in explain(verdict)


def test_another_skills_calls_are_the_runs_of_its_own_scripts(tmp_path: Path) -> None:
    assert load_card(PACKAGED_SKILLS / "palette").script_names == ("deck.py",)
    skill = tmp_path / "changelog"
    (skill / "scripts" / "__pycache__").mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: changelog\n---\n", encoding="utf-8")
    (skill / "scripts" / "changelog.py").write_text("", encoding="utf-8")
    scripts = load_card(skill).script_names
    assert scripts == ("changelog.py",)
    line = f"{CHANGELOG} write --plan plan.md --out CHANGELOG.md && {DECK} find --root ."
    assert list(invocations(line, scripts)) == [("write", {"plan": "plan.md", "out": "CHANGELOG.md"})]
    assert list(invocations(line)) == [("find", {"root": "."})]  # the reference skill's, by default
    (skill / "scripts" / "changelog.py").unlink()
    (skill / "scripts" / "__pycache__").rmdir()
    (skill / "scripts").rmdir()
    assert load_card(skill).script_names == ()  # a skill of prose only: no command is a call of it


def test_the_trace_of_another_skill_agrees_with_the_record_of_its_scripts(tmp_path: Path) -> None:
    # Its trace and our record of its commands hold the same calls: no disagreement is noted, as long as the
    # record is read for the skill's own scripts (with deck.py's, the host would seem to have seen none).
    workspace = Workspace(tmp_path, PurePosixPath("react/c"))
    workspace.trace.write_text(json.dumps({"at": 10.0, "command": "plan", "args": {}}) + "\n"
                               + json.dumps({"at": 20.0, "command": "write", "args": {}}) + "\n", encoding="utf-8")
    log = CommandLog(workspace.commands)
    log.add(f"{CHANGELOG} plan --request r --out plan.md", 10.0, 10.1, 0, "{}")
    log.add(f"{CHANGELOG} write --plan plan.md --out CHANGELOG.md", 20.0, 20.1, 0, "{}")
    calls, source, notes, doubts = calls_of(workspace, scripts=("changelog.py",))
    assert ([c["command"] for c in calls], source, notes, doubts) == (["plan", "write"], "trace", (), ())
    _, _, notes, _ = calls_of(workspace)
    assert notes and "the host never saw run: plan at 00:00:10.00, write at 00:00:20.00" in notes[0]
    workspace.trace.unlink()  # no trace: judged from the record of its scripts
    calls, source, _, _ = calls_of(workspace, scripts=("changelog.py",))
    assert ([c["command"] for c in calls], source) == (["plan", "write"], "host")
