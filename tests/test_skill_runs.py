"""Route 1 of issue 36, what ran is not how it was spelled: the record of the skill's runs (arena/skill_runs.py).

Each run of Palette's deck.py tells the harness's record as it happens; the harness holds it to what the kernel says
of the process — its arguments, its interpreter, its folder, the file it runs, hashed — before the script goes on.
Real processes against a real recorder here: the skill's script and a copy of it are known; a changed copy, a forger
speaking the protocol, a forger naming the real script, another program under a Python's name are not, and each
says why. Then what the judge reads of a record, held against the host's record of commands, case by case."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath

import pytest

from pytest_palette.arena import skill_runs
from pytest_palette.arena.command_log import CommandRun, invocations
from pytest_palette.arena.sandbox import Sandbox
from pytest_palette.arena.sandbox import problem as sandbox_problem
from pytest_palette.arena.skill_runs import Began, Ended, Parsed, Record, Recorder, SkillRun, calls_in, read
from pytest_palette.arena.workspace import Workspace
from pytest_palette.cases import Case, Expect
from pytest_palette.judge import judge
from pytest_palette.judge.evidence import Evidence, builds_in, calls_of
from pytest_palette.skill import PACKAGED_SKILLS

SCRIPTS = PACKAGED_SKILLS / "palette" / "scripts"
DECK = SCRIPTS / "deck.py"
SKILL = skill_runs.digests(SCRIPTS)


@pytest.fixture
def recorder(tmp_path: Path) -> Iterator[Recorder]:
    """A real record, unconfined: its scripts find its socket by the variable."""
    work = tmp_path / "work"
    work.mkdir()
    kept = Recorder(tmp_path / "skill-runs.jsonl", SKILL, lambda pid: True, work).start()
    yield kept
    kept.close()


def run(recorder: Recorder, *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, skill_runs.VARIABLE: str(recorder.socket)}
    done = subprocess.run(argv, cwd=cwd or recorder.work, env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    recorder.settle()
    return done


def runs(recorder: Recorder) -> list[SkillRun]:
    record = read(recorder.path)
    assert record is not None
    return list(record.runs)


def test_the_skills_script_and_a_copy_of_it_are_known_by_what_ran(recorder: Recorder, tmp_path: Path) -> None:
    done = run(recorder, sys.executable, str(DECK), "find", "--root", ".")
    assert done.returncode == 0, done.stderr
    copy = tmp_path / "elsewhere" / "tool.py"
    copy.parent.mkdir()
    shutil.copy(DECK, copy)
    run(recorder, sys.executable, "-u", "../elsewhere/tool.py", "find", "--root", ".")  # `..` from its folder
    first, second = runs(recorder)
    assert (first.doubt, first.command, first.args, first.exit_code) == ("", "find", {"root": "."}, 0)
    assert first.argv[1:] == (str(DECK), "find", "--root", ".") and first.script == str(DECK)
    assert json.loads(first.stdout)["found"] == [] and first.ended_at is not None and first.ended_at >= first.at
    assert (second.doubt, second.command, second.script) == ("", "find", str(copy))


def test_a_run_whose_arguments_its_parser_refused_is_recorded_doing_nothing(recorder: Recorder) -> None:
    done = run(recorder, sys.executable, str(DECK), "help")
    assert done.returncode == 2
    [refused] = runs(recorder)
    assert (refused.doubt, refused.command, refused.exit_code) == ("", None, 2)
    reading = calls_in(read(recorder.path) or Record(()), [CommandRun(f"python3 {DECK} help", refused.at - 0.1,
                                                                      refused.at + 0.1, 2, "")], ("deck.py",))
    assert (reading.calls, reading.doubts) == ([], ())  # the host's `help` is that run: nothing to doubt


FORGER = textwrap.dedent("""\
    import json, os, socket, sys
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(os.environ["PALETTE_SKILL_RECORD"])
    sock.sendall(json.dumps({"protocol": "palette-skill-runs/1", "argv": ARGV, "cwd": os.getcwd()}).encode() + b"\\n")
    sock.recv(64)
    sock.sendall(json.dumps({"command": "edit", "args": {}}).encode() + b"\\n")
    sock.sendall(json.dumps({"exit_code": 0, "stdout": "{}"}).encode() + b"\\n")
    """)


def test_what_is_not_the_skills_script_says_why(recorder: Recorder, tmp_path: Path) -> None:
    changed = recorder.work / "deck.py"
    changed.write_text(DECK.read_text(encoding="utf-8") + "\n# changed\n", encoding="utf-8")
    run(recorder, sys.executable, "deck.py", "find", "--root", ".")
    # A forger speaking the protocol from code of its own (-c), then from a file of its own that names the real
    # script as its arguments.
    run(recorder, sys.executable, "-c", FORGER.replace("ARGV", "['deck.py', 'edit']"))
    forger = recorder.work / "forger.py"
    forger.write_text(FORGER.replace("ARGV", f"[{str(DECK)!r}, 'edit']"), encoding="utf-8")
    run(recorder, sys.executable, "forger.py", "edit")
    doubts = [r.doubt for r in runs(recorder)]
    assert doubts == [f"{changed} is not one of the skill's scripts (its content differs)",
                      "its interpreter was not told to run a file (it ran -c, -m or standard input)",
                      "the arguments it reported are not those the kernel gave it"]
    reading = calls_in(read(recorder.path) or Record(()), [], ("deck.py",))
    assert reading.calls == [] and len(reading.doubts) == 3
    assert all(words.endswith("could not be shown to be the skill's script: " + why + "; what it did cannot be told")
               for words, why in zip(reading.doubts, doubts, strict=True))


def test_another_program_under_a_pythons_name_is_not_an_interpreter(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    sleep = shutil.which("sleep") or "/bin/sleep"
    shutil.copy(sleep, work / "python3")
    for program, why in ((sleep, f"it was not run by a Python interpreter ({os.path.realpath(sleep)})"),
                         (str(work / "python3"), f"its interpreter {work / 'python3'} is a file of the agent's own, "
                                                 "not this machine's")):
        process = subprocess.Popen([program, "30"])
        try:
            time.sleep(0.05)  # until it has exec'd: its /proc/<pid>/exe is the program's
            deadline = time.monotonic() + 10
            while skill_runs.interpreted(process.pid, work) != why and time.monotonic() < deadline:
                time.sleep(0.05)
            assert skill_runs.interpreted(process.pid, work) == why
        finally:
            process.kill()
            process.wait()
    assert skill_runs.interpreted(os.getpid(), work) == ""


@pytest.mark.parametrize(("argv", "position"), [
    (("python3", "deck.py", "start"), 1),
    (("python3", "-u", "-B", "deck.py"), 3),
    (("python3", "-X", "utf8", "-W", "ignore", "deck.py"), 5),
    (("python3", "-Xutf8", "-Wd", "deck.py"), 3),
    (("python3", "--", "-deck.py"), 2),
    (("python3", "-c", "import deck"), None),
    (("python3", "-Bc", "code", "deck.py"), None),
    (("python3", "-m", "deck", "deck.py"), None),
    (("python3", "-", "deck.py"), None),
    (("python3",), None),
])
def test_where_a_pythons_script_begins_in_its_arguments(argv: tuple[str, ...], position: int | None) -> None:
    assert skill_runs.script_position(argv) == position


CLIENT = textwrap.dedent("""\
    import json, os, socket, sys, time
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(os.environ["PALETTE_SKILL_RECORD"])
    sock.sendall(json.dumps({"protocol": "palette-skill-runs/1", "argv": sys.argv, "cwd": os.getcwd()}).encode()
                 + b"\\n")
    sock.recv(64)
    sock.sendall(json.dumps({"command": "status", "args": {"hold_seconds": 60}}).encode() + b"\\n")
    print("holding", flush=True)
    time.sleep(60)
    """)


def test_a_run_killed_mid_way_and_a_flood_of_silent_connections(tmp_path: Path) -> None:
    # A script of a skill of its own that holds, then is killed: its run ends without a word, at the kill.
    client = tmp_path / "work" / "hold.py"
    client.parent.mkdir()
    client.write_text(CLIENT, encoding="utf-8")
    recorder = Recorder(tmp_path / "skill-runs.jsonl", skill_runs.digests(client.parent), lambda pid: True,
                        client.parent).start()
    try:
        env = {**os.environ, skill_runs.VARIABLE: str(recorder.socket)}
        process = subprocess.Popen([sys.executable, "hold.py", "status"], cwd=client.parent, env=env,
                                   stdout=subprocess.PIPE, text=True)
        assert process.stdout is not None and process.stdout.readline() == "holding\n"
        # Connections that never speak: the first 64 are held (and let go when they close), the rest dropped —
        # once the recorder has taken them all, however long a busy machine makes it take.
        silent = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(70)]
        for each in silent:
            each.connect(str(recorder.socket))
        eventually(recorder.path, lambda found: "more than 64 at once" in found.dropped
                   and [(r.command, r.ended_at, r.exit_code) for r in found.runs] == [("status", None, None)])
        process.send_signal(signal.SIGKILL)
        process.wait()
        for each in silent:
            each.close()
        recorder.settle()
    finally:
        recorder.close()
    record = read(recorder.path)
    assert record is not None
    [killed] = record.runs
    assert (killed.doubt, killed.command, killed.exit_code) == ("", "status", None) and killed.ended_at is not None
    assert set(record.dropped) >= {"more than 64 at once", "a connection that did not speak the record's protocol"}
    reading = calls_in(record, [], ("hold.py",))
    assert [call["command"] for call in reading.calls] == ["status"]
    assert reading.doubts[0] == "the record of the skill's runs dropped a run (more than 64 at once): what it did " \
                                "cannot be told"
    assert not recorder.socket.exists() and not recorder.folder.exists()


def eventually(path: Path, holds: Callable[[Record], bool], within: float = 120.0) -> Record:
    """The record once it `holds` (a recorder's thread writes it as it is told), or as it is after `within` s."""
    deadline = time.monotonic() + within
    while True:
        found = read(path)
        assert found is not None
        if holds(found) or time.monotonic() > deadline:
            assert holds(found), found
            return found
        time.sleep(0.05)


# -- what the judge reads of a record -------------------------------------------------------------------------------

LINE = "python3 skills/palette/scripts/deck.py"


def began(run: int, at: float, *argv: str, doubt: str = "") -> Began:
    return Began(run, at, 100 + run, ("python3", "skills/palette/scripts/deck.py", *argv), "/w/deck.py", doubt)


def record_of(*events: Began | Parsed | Ended, path: Path) -> Record:
    path.write_bytes(b"".join(json.dumps({"type": type(e).__name__.lower(), **{f: getattr(e, f) for f in
                                                                               e.__struct_fields__}}).encode() + b"\n"
                              for e in events))
    found = read(path)
    assert found is not None
    return found


def test_the_record_decides_what_ran_and_the_host_says_where(tmp_path: Path) -> None:
    record = record_of(began(1, 10.5, "start", "--plan", "plan.md"), Parsed(1, "start", {"plan": "plan.md"}),
                       Ended(1, 10.6, 0, '{"state": "running"}'),
                       began(2, 30.0, "status"), Parsed(2, "status", {}), Ended(2, 31.0, 0, "{}"),
                       path=tmp_path / "r.jsonl")
    host = [CommandRun(f"S=start; {LINE} $S --plan plan.md", 10.0, 11.0, 0, ""),
            CommandRun(f"wc -l {LINE} plan.md", 12.0, 12.1, 0, ""),  # a file named beside it: no run
            CommandRun(f"{LINE} plan", 13.0, 13.1, 127, "python3: not found"),  # never started
            CommandRun(f"echo {LINE} edit", 20.0, 20.1, 0, "")]  # words only: no run reached the record
    reading = calls_in(record, host, ("deck.py",))
    assert [(c["command"], c["at"], c["seconds"], c["line"]) for c in reading.calls] == [
        ("start", 10.5, 0.1, f"S=start; {LINE} $S --plan plan.md"), ("status", 30.0, 1.0, f"{LINE} status")]
    assert reading.doubts == (f"the host saw `echo {LINE} edit` run the skill's script (edit) at 00:00:20.00, but no "
                              "run of it reached the record of the skill's runs: what it did cannot be told",)
    assert reading.notes == ("the skill ran outside every command the host saw (status at 00:00:30.00): a process the "
                             "agent left running, or code the host ran itself; judged from the record of its runs",)


def test_a_run_that_lies_about_its_subcommand_or_ended_unheard_is_a_doubt(tmp_path: Path) -> None:
    record = record_of(began(1, 10.0, "status"), Parsed(1, "start", {}), Ended(1, 10.1, 0, "{}"),
                       began(2, 20.0, "plan", doubt=skill_runs.GONE),
                       began(3, 30.0, "edit"),
                       began(4, 40.0, "plan", doubt=skill_runs.GONE), Parsed(4, "plan", {}), Ended(4, 41.0, 0, "{}"),
                       path=tmp_path / "r.jsonl")
    reading = calls_in(record, [], ("deck.py",))
    assert reading.calls == []
    assert [words.split(": ", 1)[0] for words in reading.doubts] == [
        "a run at 00:00:10.00 (`python3 skills/palette/scripts/deck.py status`) says it ran 'start', which its "
        "arguments do not name",
        "a run of the skill's script at 00:00:30.00 (`python3 skills/palette/scripts/deck.py edit`) never said what "
        "it would do (killed, or still starting when the evidence was read)",
        "a run at 00:00:40.00 (`python3 skills/palette/scripts/deck.py plan`) could not be shown to be the skill's "
        "script"]
    # Gone before it was looked at and said nothing: it waited for the harness, so it did nothing.
    assert reading.notes[0].startswith("a run of the skill's script at 00:00:20.00 ended before the harness could")


CASE = Case(name="solar", covers="route 1", tags=(), request="a deck about solar power", context="", replies=("yes",),
            expect=Expect(), path=Path("c.yaml"), line=1)


DOUBT = "a run at … could not be shown to be the skill's script"


def test_a_doubt_fails_the_item_whatever_the_rules_find(tmp_path: Path) -> None:
    evidence = Evidence(workspace=tmp_path, pptx=tmp_path / "deck.pptx", slides=3, has_plex=True, size=31_000,
                        decks=(tmp_path / "deck.pptx",), calls=({"at": 250.0, "command": "start", "seconds": 1.0},),
                        turns_started=(100.0, 200.0), doubts=(DOUBT,))
    verdict = judge(CASE, evidence, "react")
    assert verdict.failures == (DOUBT,)
    assert [(c.name, c.role, c.passed) for c in verdict.checks if c.name == "calls"] == [("calls", "gate", False)]
    assert verdict.score == 0.0
    assert judge(CASE, Evidence(**{**evidence.__dict__, "doubts": ()}), "react").ok


def test_a_build_on_disk_as_the_approval_was_sent_fails_the_gate_when_no_call_started_it(tmp_path: Path) -> None:
    # A changed copy of the script that tells no record built the deck: only the disk says so.
    evidence = Evidence(workspace=tmp_path, pptx=tmp_path / "deck.pptx", slides=3, has_plex=True, size=31_000,
                        decks=(tmp_path / "deck.pptx",), calls=({"at": 250.0, "command": "status", "seconds": 1.0},),
                        turns_started=(100.0, 200.0), builds_before=((), ("deck/.palette-build.json",)))
    verdict = judge(CASE, evidence, "react")
    assert verdict.failures == ("a build was on disk before the user approved — the confirmation gate was skipped "
                                "(deck/.palette-build.json in the agent's folder when reply 1, 'yes', was sent; no "
                                "call the records hold started it)",)
    assert verdict.blame == ((),)
    # Nothing there as the approval went: the calls decide (here, none started early).
    assert judge(CASE, Evidence(**{**evidence.__dict__, "builds_before": ((), ())}), "react").ok
    # Turns not recorded as many as were sent (an earlier version's): not applied.
    assert judge(CASE, Evidence(**{**evidence.__dict__, "builds_before": (("x.pptx",),)}), "react").ok


def test_the_folder_is_listed_for_builds_without_entering_a_link(tmp_path: Path) -> None:
    (tmp_path / "deck").mkdir()
    (tmp_path / "deck" / ".palette-build.json").write_text("{}")
    (tmp_path / "old.pptx").write_bytes(b"x")
    (tmp_path / "elsewhere").symlink_to("/")
    (tmp_path / "notes.md").write_text("x")
    assert builds_in(tmp_path) == ["deck/.palette-build.json", "old.pptx"]


def test_without_a_record_a_subcommand_only_the_shell_knew_is_a_doubt(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path, PurePosixPath("react/c"))
    workspace.commands.write_text("".join(json.dumps(
        {"command": line, "started_at": at, "ended_at": at + 1, "exit_code": 0, "stdout": "{}"}) + "\n"
        for line, at in ((f"for c in plan start; do {LINE} $c --out-dir deck; done", 10.0),
                         (f"eval \"{LINE} status --out-dir deck\"", 20.0))), encoding="utf-8")
    calls, source, _, doubts = calls_of(workspace)
    assert ([c["command"] for c in calls], source) == (["status"], "host")  # eval's command line is read
    assert doubts == (f"the host saw `for c in plan start; do {LINE} $c --out-dir deck; done` run the skill's script "
                      "at 00:00:10.00, but its subcommand ($c) is written by the shell, and the skill keeps no record "
                      "of its runs: what it did cannot be told",)
    # With a record, the record says what ran and there is nothing to doubt.
    record_of(began(1, 10.5, "plan"), Parsed(1, "plan", {}), Ended(1, 10.6, 0, "{}"),
              began(2, 10.7, "start"), Parsed(2, "start", {}), Ended(2, 10.8, 0, "{}"),
              began(3, 20.5, "status"), Parsed(3, "status", {}), Ended(3, 20.6, 0, "{}"), path=workspace.skill_runs)
    calls, source, _, doubts = calls_of(workspace)
    assert ([c["command"] for c in calls], source, doubts) == (["plan", "start", "status"], "record", ())


@pytest.mark.parametrize(("command", "expected"), [
    (f"eval \"{LINE} start --plan p\"", [("start", {"plan": "p"})]),
    (f"bash -c '{LINE} status --out-dir d'", [("status", {"out_dir": "d"})]),
    (f"sh -c \"eval '{LINE} edit --plan p'\"", [("edit", {"plan": "p"})]),
    (f"eval {LINE} start", [("start", {})]),  # the outer line's own words, read once
    (f"S=start; {LINE} $S", [("$S", {})]),
])
def test_a_command_line_run_by_eval_or_a_shell_is_read_too(command: str, expected: list[object]) -> None:
    assert list(invocations(command)) == expected


def test_only_a_skill_that_speaks_the_protocol_keeps_a_record() -> None:
    assert skill_runs.speaks_protocol(SCRIPTS)
    assert not skill_runs.speaks_protocol(Path(__file__).parent / "fixtures" / "changelog_project" / "skills"
                                          / "changelog" / "scripts")


@pytest.mark.skipif(sandbox_problem("bubblewrap") is not None, reason="no sandbox here")
def test_in_the_sandbox_the_socket_is_at_its_own_place_and_the_variable_changes_nothing(tmp_path: Path) -> None:
    work = tmp_path / "item" / "work"
    (work / "skills").mkdir(parents=True)
    shutil.copytree(PACKAGED_SKILLS / "palette", work / "skills" / "palette")
    sandbox = Sandbox(work, dict(os.environ), "bubblewrap", trace=tmp_path / "item" / "palette-calls.jsonl",
                      record=tmp_path / "item" / "skill-runs.jsonl", scripts=SKILL)
    try:
        sandbox.prepare()
        # The agent points the script elsewhere: the fixed place wins.
        done = subprocess.run(sandbox.argv(f"PALETTE_SKILL_RECORD=/tmp/elsewhere python3 "
                                           f"skills/palette/scripts/deck.py find --root . && ls -l "
                                           f"{skill_runs.SOCKET}"), env=sandbox.env, capture_output=True,
                              text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        sandbox.record_settled()
        [found] = runs(sandbox.recorder)  # type: ignore[arg-type]
        assert (found.doubt, found.command, found.exit_code) == ("", "find", 0)
        assert sandbox.holds(found.pid) is False  # it has ended: no longer one of the item's processes
    finally:
        sandbox.close()
    assert sandbox.recorder is None
