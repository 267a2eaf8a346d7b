"""Faults of the backend, the machine and the harness: each ends its item as an ERROR naming the cause in one
line — never a FAIL of the skill, never a traceback — and the run goes on to the next item."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from sweeps import inner_cache

from pytest_palette.arena import leftovers
from pytest_palette.arena.command_log import CommandLog, CommandRun
from pytest_palette.commands import main as palette_bench
from pytest_palette.results.ledger import load
from pytest_palette.run import faults

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
"""


def a_backend(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    """A Palette checkout whose palette.py does `body`: deck.py runs it for every stage (PALETTE_HOME)."""
    home = pytester.mkdir("palette-home")
    (home / "palette.py").write_text(textwrap.dedent(body))
    monkeypatch.setenv("PALETTE_HOME", str(home))


def errors_of(pytester: pytest.Pytester) -> dict[str, tuple[str, tuple[str, ...]]]:
    [run] = (pytester.path / "runs").iterdir()
    return {key[1]: (record.outcome, record.failures) for key, record in load(run).latest.items()}


@pytest.mark.end_to_end
def test_a_backend_that_exits_1_is_an_error_naming_it_and_the_run_goes_on(
        pytester: pytest.Pytester, cases: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a_backend(pytester, monkeypatch, "import sys\nsys.exit(1)\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    # three_slides needed a plan: ERROR. held_off needed a plan too (to decline it): ERROR, not a pass on luck.
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*the backend's plan stage failed with exit code 1 (its log is empty)",
                                 "*(an error of the run, not a verdict on the skill)"])
    assert "Traceback" not in result.stdout.str() and "no .pptx" not in result.stdout.str()
    cause = "react: the backend's plan stage failed with exit code 1 (its log is empty)"
    assert errors_of(pytester) == {"three_slides": ("error", (cause,)), "held_off": ("error", (cause,))}


@pytest.mark.end_to_end
def test_a_full_disk_under_the_backend_is_an_error_of_the_machine(
        pytester: pytest.Pytester, cases: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # /dev/full answers every write with ENOSPC: the kernel's own "no space left", without filling a disk.
    a_backend(pytester, monkeypatch, """
        with open("/dev/full", "w") as disk:
            disk.write("the plan")
            disk.flush()
    """)
    result = pytester.runpytest("-p", "no:cacheprovider", "-k", "three_slides")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*the backend's plan stage failed on this machine: "
                                 "OSError: [[]Errno 28[]] No space left on device"])


@pytest.mark.end_to_end
def test_a_backend_that_refuses_the_agents_input_is_judged_as_usual(
        pytester: pytest.Pytester, cases: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # One `error:` line and no traceback: the backend refused what it was asked. That is the agent's doing
    # (here every request is refused, so the deck is missing): a verdict, not an error of the run.
    a_backend(pytester, monkeypatch, """
        import sys
        sys.stderr.write("error: empty request and no material: nothing to plan\\n")
        sys.exit(1)
    """)
    result = pytester.runpytest("-p", "no:cacheprovider", "-k", "three_slides")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*no .pptx was produced*"])


def test_a_crashed_backend_is_told_from_a_refusal_by_its_traceback() -> None:
    def answer(code: int | None, *log: str) -> dict[str, object]:
        said = {"state": "error", "done": False, "exit_code": code, "log_tail": list(log)}
        return {"command": "start", "stdout": json.dumps(said)}

    crash = answer(1, "Traceback (most recent call last):", '  File "x.py"', "KeyError: 'slides'",
                   "error: reference engine failed: KeyError: 'slides'")
    assert faults.backend_fault(crash) == ("the backend's build stage failed with exit code 1: error: reference "
                                           "engine failed: KeyError: 'slides'")
    assert faults.backend_fault(answer(1, "error: no plan at plan.md")) is None
    # A deep stack's tail has lost the traceback's first line: its frames still say it crashed.
    deep = answer(1, '  File "/x/layout.py", line 88, in place', "    height = box - gaps",
                  "ValueError: value must be an integral number of EMU", "error: reference engine failed: ValueError")
    assert faults.backend_fault(deep) == ("the backend's build stage failed with exit code 1: error: reference "
                                          "engine failed: ValueError")
    assert faults.backend_fault(answer(1, 'the file "notes.md", line 3 is empty', "error: nothing to plan")) is None
    assert faults.backend_fault(answer(None)) == ("the backend's build stage stopped without recording an exit "
                                                  "code (killed?) (its log is empty)")
    assert faults.backend_fault(answer(137, "rendering slide 2")) == ("the backend's build stage failed with "
                                                                      "exit code 137: rendering slide 2")
    # An answer that is not the skill's error shape is no fault: a running build, a plan, foreign text.
    assert faults.backend_fault({"command": "status", "stdout": '{"state": "running"}'}) is None
    assert faults.backend_fault({"command": "plan", "stdout": "not json"}) is None


@pytest.mark.parametrize(("stderr", "said"), [
    ("bash: line 1: /usr/bin/python3: Argument list too long\n",
     "bash: line 1: /usr/bin/python3: Argument list too long"),
    ("cat: write error: No space left on device\n", "cat: write error: No space left on device"),
    ("OSError: [Errno 30] Read-only file system: '/runs/r/plan.md'\n",
     "OSError: [Errno 30] Read-only file system: '/runs/r/plan.md'"),
    ("touch: cannot touch 'aaaa': File name too long\n", "touch: cannot touch 'aaaa': File name too long"),
])
def test_the_machine_at_a_limit_is_read_from_what_a_command_printed_on_stderr(stderr: str, said: str) -> None:
    run = CommandRun("x", 1.0, 2.0, 1, "", stderr)
    assert faults.first_fault([], [run]) == f"a command the agent ran met a limit of this machine: {said}"


def test_a_full_disk_while_the_machine_has_room_is_a_bound_of_the_sandbox_noted_not_an_error() -> None:
    # The sandbox bounds /tmp, /dev/shm and one file: an agent that fills them met its own bound, and printing
    # the words cannot turn its FAIL into an ERROR while the machine's disk has room.
    full = CommandRun("fill /tmp", 1.0, 2.0, 1, "", "/tmp/fill stopped at 256 MiB: No space left on device\n")
    big = CommandRun("fill big.bin", 2.0, 3.0, 1, "", "big.bin stopped at 256 MiB: File too large\n")
    forks = CommandRun("fork loop", 3.0, 4.0, 0, "", "fork refused after 507 children: Resource temporarily "
                                                       "unavailable\n")
    # A host that keeps standard error apart: what a command printed as its output is not read.
    quoted = CommandRun("cat notes.md", 4.0, 5.0, 0, "## No space left on device\nFile too large", "cat: done\n")
    merged = CommandRun("fill /tmp", 1.0, 2.0, 0, "/tmp/fill stopped at 9 MiB: No space left on device", "")
    assert faults.first_fault([], [full], room=False) == ("a command the agent ran met a limit of this machine: "
                                                    "/tmp/fill stopped at 256 MiB: No space left on device")
    assert faults.first_fault([], [full, big, forks], room=True) is None
    notes = faults.bounds_met([full, big, forks, quoted], room=True)
    assert [note.split(" (")[1].split(")")[0] for note in notes] == [
        "No space left on device: its /tmp, /dev/shm or one file; the machine had room", "File too large",
        "fork refused after 507 children: Resource temporarily unavailable"]
    assert notes[0].endswith(": fill /tmp") and faults.bounds_met([quoted], room=True) == ()
    assert len(faults.bounds_met([merged], room=True)) == 1  # a host that gives both as one (claude's Bash tool)
    assert faults.bounds_met([full], room=False) == ()  # then it is the machine's: an ERROR, above
    assert faults.has_room(Path("/"), need=0) and not faults.has_room(Path("/"), need=2**62)
    assert not faults.has_room(Path("/no/such/folder"))


def test_the_same_words_in_a_commands_output_or_mid_line_are_no_fault() -> None:
    # A deck about disks may quote the message; only a program's own standard error line counts.
    quoted = CommandRun("cat notes.md", 1.0, 2.0, 0, "## No space left on device\nwhat to do", "")
    mid_line = CommandRun("x", 1.0, 2.0, 0, "", "warning: 'No space left on device' is a heading here, fine\n")
    assert faults.first_fault([], [quoted, mid_line]) is None


@pytest.mark.end_to_end
def test_the_harness_unable_to_write_is_an_error_naming_the_file(pytester: pytest.Pytester, cases: Path) -> None:
    # The run folder goes read-only under the harness mid-run (root ignores permissions, so the write itself
    # is made to fail as the kernel would fail it).
    pytester.makeconftest("""
        import errno, os
        from pytest_palette.run import conversation

        def read_only(self, workspace):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(workspace.turns))

        conversation.Transcript.save = read_only
    """)
    # In a process of its own: the conftest changes a module of ours, which would outlive an in-process run.
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*the harness could not write */turns.json: Read-only file system",
                                 "*(an error of the run, not a verdict on the skill)"])
    assert "Traceback" not in result.stdout.str()
    # Said once per item: not under the OSError it replaces, nor twice in the short summary.
    assert "During handling of the above exception" not in result.stdout.str()
    assert len([line for line in result.stdout.lines if line.startswith("ERROR ")]) == 2


#: 400 KB: over Linux's limit of 128 KiB for one argument (`claude -p <prompt>`, `sh -c <command>`).
MATERIAL = "\n".join(f"- finding {i}: latency rose {i % 17} ms in region {i % 5}" for i in range(9000))


def a_long_paste(pytester: pytest.Pytester, host: str) -> pytest.RunResult:
    assert len(MATERIAL.encode()) > 3 * 128 * 1024
    pytester.mkdir("cases")
    (pytester.path / "cases" / "big.yaml").write_text(json.dumps([{
        "name": "big_paste", "covers": "a long paste reaches the skill", "request": "Build a deck from these notes",
        "context": MATERIAL, "replies": ["actually, hold off for now"], "expect": {"deck": False}}]))
    # In a process of its own: CUGA's numpy cannot be imported twice in one process.
    result = pytester.runpytest_subprocess(*inner_cache(), "--host", host, "--palette-max-context",
                                           "1000000")
    if "skipped" in result.parseoutcomes():
        pytest.skip(f"the {host} host's client is not installed here")
    return result


@pytest.mark.end_to_end
@pytest.mark.parametrize("host", ["react", "cuga"])
def test_a_paste_longer_than_one_argument_reaches_the_skill_whole(pytester: pytest.Pytester, host: str) -> None:
    a_long_paste(pytester, host).assert_outcomes(passed=1)
    [item] = (pytester.path / "runs").glob(f"*/{host}/big_paste")
    # The rehearsal model wrote it to a file with a here-document (a command far over one argument, which the
    # host ran from a script file) and planned from that file: the skill read every byte of the paste.
    [pasted] = item.rglob("pasted-material.md")
    assert pasted.read_text() == MATERIAL + "\n"
    [plan] = [call for call in map(json.loads, (item / "palette-calls.jsonl").read_text().splitlines())
              if call["command"] == "plan"]
    assert plan["args"]["source"] == ["pasted-material.md"] and plan["exit_code"] == 0
    assert "finding 8999" in (pasted.parent / "plan.md").read_text()


@pytest.mark.end_to_end
def test_on_claude_the_paste_reaches_the_agent_and_the_clis_own_limit_is_an_error(pytester: pytest.Pytester) -> None:
    result = a_long_paste(pytester, "claude")
    # The CLI read the whole message on its standard input; its Bash tool then cannot start a 400 KB command
    # (E2BIG), and the conversation, twice 400 KB, is past the model's context window, where the CLI (auto-compact
    # off) sends nothing more: the host's limit, an error of the run — not a pass because no deck was built, as
    # the case's "hold off" would have it.
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*ended at the model's context limit: the CLI would not send the "
                                 'conversation (terminal_reason "blocking_limit", "Prompt is too long"): with this '
                                 "turn's message of 416,623 characters it is past the model's context window*"])
    [item] = (pytester.path / "runs").glob("*/claude/big_paste")
    assert (item / "claude" / "turn-01.prompt").read_text() == f"Build a deck from these notes\n\n{MATERIAL}"


BACKGROUND_HOST = """
import subprocess
from pytest_palette.hosts.base import Host, HostSession, TurnRecord

class Leaves(HostSession):
    def __init__(self, work, env):
        self.work, self.env = work, env
    def send(self, message, timeout):
        # An agent that puts a server in the background, in a session of its own, and says nothing of it.
        subprocess.Popen(["sleep", "600"], cwd=self.work, env=dict(self.env), start_new_session=True)
        return TurnRecord(sent=message, answer="I will not build anything.")

class LeavingHost(Host):
    name = "leaving"
    def open(self, workspace, skill, env, route, settings, sandbox):
        return Leaves(workspace.work, env)

def pytest_palette_add_hosts(hosts, config):
    hosts["leaving"] = LeavingHost()
"""


def test_what_an_agent_leaves_running_is_stopped_when_its_item_ends_even_on_a_pass(
        pytester: pytest.Pytester, cases: Path) -> None:
    pytester.makeconftest(BACKGROUND_HOST)
    result = pytester.runpytest(*inner_cache(), "--host", "leaving", "-k", "held_off")
    result.assert_outcomes(passed=1)
    [item] = (pytester.path / "runs").glob("*/leaving/held_off")
    assert leftovers.processes_of(item / "palette-calls.jsonl") == []


DYING_ENDPOINT = """
import threading, time
import pytest
from pytest_palette.run.session import SESSION

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if not item.name.startswith("three_slides"):
        return
    session = item.config.stash[SESSION]
    endpoint = session.hosts[item.host_name]
    server = endpoint.layer.rehearsal.server(session.settings.model)

    def die_after_the_first_answer():
        while not server.served:
            time.sleep(0.05)
        # The serving loop stops; its socket stays open, so every later call is accepted and never answered.
        server._server.shutdown()

    threading.Thread(target=die_after_the_first_answer, daemon=True).start()
"""


@pytest.mark.end_to_end
def test_a_dead_model_endpoint_is_named_and_replaced_before_the_next_item(pytester: pytest.Pytester,
                                                                          cases: Path) -> None:
    # The claude host; cuga's shares the endpoint (the same check ran by hand there). The dead server is found
    # when its turn times out: 60 s is that bound, ten times what a live turn of the next item takes on a busy
    # machine (the whole of the dying item's wait is this test's cost).
    host = "claude"
    pytester.makeconftest(DYING_ENDPOINT)
    result = pytester.runpytest_subprocess(*inner_cache(), "-p", "no:randomly", "--host", host,
                                           "--palette-turn-timeout", "60")
    if "skipped" in result.parseoutcomes():
        pytest.skip(f"the {host} host's client is not installed here")
    # The item it died under is an ERROR that names it; the next item gets a new server and is judged.
    result.assert_outcomes(errors=1, passed=1)
    result.stdout.re_match_lines([rf".*host {host} failed: turn 1 failed: the model endpoint at "
                                  r"127\.0\.0\.1:\d+ stopped answering \(.*timed out.*\)"])


@pytest.mark.end_to_end
def test_rejudge_turns_a_verdict_over_a_fault_into_an_error(pytester: pytest.Pytester, cases: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    pytester.runpytest("-p", "no:cacheprovider", "-k", "held_off").assert_outcomes(passed=1)
    [run] = (pytester.path / "runs").iterdir()
    # As a run of a judge that did not know faults left it: a pass, over a command that hit a full disk.
    CommandLog(run / "react" / "held_off" / "commands.jsonl").add(
        "cp notes.md backup.md", 1.0, 2.0, 1, "", "cp: error writing 'backup.md': No space left on device\n")
    assert palette_bench(["rejudge", str(run)]) == 0
    out = capsys.readouterr().out
    assert "held_off[react]: pass → error" in out and out.splitlines()[-1].endswith("1 changed")
    assert "a command the agent ran met a limit of this machine: cp: error writing 'backup.md': No space left on " \
           "device" in out


@pytest.mark.end_to_end
def test_a_bug_of_the_harness_is_an_error_that_still_leaves_its_record(pytester: pytest.Pytester,
                                                                       cases: Path) -> None:
    pytester.makeconftest("""
        from pytest_palette.judge import evidence

        def broken(*args, **kwargs):
            raise RuntimeError("the evidence reader broke")

        evidence.read = broken
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "held_off")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*RuntimeError: the evidence reader broke"])  # the traceback is ours to read
    assert errors_of(pytester) == {
        "held_off": ("error", ("react: the harness failed: RuntimeError: the evidence reader broke",))}
