"""The agent's sandbox: what a command sees, reaches and leaves behind, and what its environment holds."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from ports import ProbePort
from sweeps import inner_cache

from pytest_palette.arena import leftovers
from pytest_palette.arena.sandbox import (
    ENDED,
    KeeperFailed,
    Limits,
    Sandbox,
    allowed_environment,
    problem,
    userns_policy,
)
from pytest_palette.backend import agent_environment
from pytest_palette.hosts.codex import find_codex
from pytest_palette.hosts.shell import Shell
from pytest_palette.rehearsal.hostile import HOSTILE_FINALE, HOSTILE_PROBES

#: What a caller may have in its environment; none of it may reach a command, a file of the run, or a report.
FAKE_KEYS = {"WATSONX_APIKEY": "fake-watsonx-key-0d9f", "ANTHROPIC_API_KEY": "sk-ant-fake-key-71c2",
             "GITHUB_TOKEN": "ghp_fake-token-3e4a", "OPENAI_API_KEY": "sk-fake-openai-key-55b0"}

needs_bubblewrap = pytest.mark.skipif(problem("bubblewrap") is not None,
                                      reason=f"no sandbox here: {problem('bubblewrap')}")


@pytest.fixture
def item(tmp_path: Path) -> Path:
    """An item's folder as a run lays it out: the question beside work/, where the agent works."""
    folder = tmp_path / "run" / "react" / "case"
    (folder / "input").mkdir(parents=True)
    (folder / "input" / "replies.txt").write_text("the scripted user's next reply\n")
    (folder / "work").mkdir()
    return folder


@pytest.fixture
def sandbox(item: Path) -> Iterator[Sandbox]:
    env = {**agent_environment(item / "palette-calls.jsonl"), **FAKE_KEYS}
    confined = Sandbox(item / "work", env, "bubblewrap", trace=item / "palette-calls.jsonl",
                       limits=Limits(processes=40))
    confined.prepare()
    yield confined
    confined.close()


def test_the_environment_of_a_command_is_an_allow_list(tmp_path: Path) -> None:
    env = allowed_environment({"PATH": "/usr/bin", "LANG": "C.UTF-8", "LC_ALL": "C", "PALETTE_TRACE": "/t",
                               "HOME": "/root", "PYTHONPATH": "/src", **FAKE_KEYS}, tmp_path)
    assert env == {"PATH": "/usr/bin", "LANG": "C.UTF-8", "LC_ALL": "C", "PALETTE_TRACE": "/t",
                   "HOME": str(tmp_path)}


def test_a_variable_the_user_names_is_passed_and_no_other(tmp_path: Path) -> None:
    # Of the caller's PALETTE_* only those the backend reads pass on their own; any other must be named.
    env = allowed_environment({"PALETTE_HOME": "/p", "PALETTE_API_KEY": "x", "PALETTE_PROBE": "y",
                               "REAL_PALETTE_KEY": "k", **FAKE_KEYS}, tmp_path, passed=["REAL_PALETTE_KEY",
                                                                                        "PALETTE_PROBE"])
    assert env == {"PALETTE_HOME": "/p", "PALETTE_PROBE": "y", "REAL_PALETTE_KEY": "k", "HOME": str(tmp_path),
                   "PATH": os.defpath}


def test_only_a_backend_elsewhere_keeps_the_network(tmp_path: Path) -> None:
    from pytest_palette.arena.sandbox import backend_needs_network
    from pytest_palette.backend import REFERENCE_HOME

    assert not backend_needs_network({}) and not backend_needs_network({"PALETTE_HOME": str(REFERENCE_HOME)})
    assert backend_needs_network({"PALETTE_URL": "http://palette.example"})
    assert backend_needs_network({"PALETTE_HOME": str(tmp_path)})  # a real Palette calls its own model


def test_unconfined_commands_still_get_only_the_allow_list(tmp_path: Path) -> None:
    shell = Shell(tmp_path, {**os.environ, **FAKE_KEYS}, sandbox=Sandbox(tmp_path, {**os.environ, **FAKE_KEYS},
                                                                          "none"))
    said = shell.run("env")
    assert "PATH=" in said and not any(value in said for value in FAKE_KEYS.values())
    assert shell.sandbox.kind == "unconfined" and shell.sandbox.argv("true") == ["/bin/sh", "-c", "true"]


def test_a_missing_bubblewrap_is_named_with_its_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nowhere to find bwrap
    said = problem("bubblewrap")
    assert said is not None and "bubblewrap" in said and "--palette-sandbox none" in said
    assert problem("none") is None
    assert "--palette-sandbox 'chroot'" in str(problem("chroot"))


def test_a_policy_refusing_user_namespaces_is_named_with_its_fix(tmp_path: Path) -> None:
    (tmp_path / "kernel").mkdir()
    (tmp_path / "user").mkdir()
    assert userns_policy(tmp_path) is None  # nothing refuses them
    for name, value in (("kernel/apparmor_restrict_unprivileged_userns", "1"),
                        ("kernel/unprivileged_userns_clone", "0")):
        (tmp_path / name).write_text(f"{value}\n")
        said = userns_policy(tmp_path)
        assert said is not None and f"{name.replace('/', '.')}={value}" in said
        assert f"sysctl -w {name.replace('/', '.')}=" in said and "--palette-sandbox none" in said


@needs_bubblewrap
def test_a_command_sees_its_folder_and_the_system_and_nothing_else_of_the_run(sandbox: Sandbox, item: Path) -> None:
    shell = Shell(item / "work", {}, sandbox=sandbox)
    assert shell.run("echo made > plan.md && cat plan.md") == "made"
    for reading in ("cat ../input/replies.txt", f"cat {item / 'input' / 'replies.txt'}", "ls -a /root/.ssh"):
        said = shell.run(reading)
        assert "scripted user" not in said and "No such file" in said
    for outside in ("../escaped.txt", "/tmp/palette-escaped.txt", "/etc/palette-escaped"):
        shell.run(f"echo x > {outside}")
    assert not (item / "escaped.txt").exists() and not Path("/tmp/palette-escaped.txt").exists()
    assert not Path("/etc/palette-escaped").exists()
    assert "pptx" in shell.run('"$PALETTE_PYTHON" -c "import pptx; print(pptx.__name__)"')  # the engine can run


@needs_bubblewrap
def test_the_installed_skill_is_read_only(sandbox: Sandbox, item: Path) -> None:
    skill = item / "work" / "skills" / "palette"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("the skill\n")
    sandbox.protect(item / "work" / "skills")
    said = Shell(item / "work", {}, sandbox=sandbox).run("echo changed > skills/palette/SKILL.md")
    assert "Read-only file system" in said and (skill / "SKILL.md").read_text() == "the skill\n"


@needs_bubblewrap
def test_a_command_cannot_reach_a_port_on_this_machine(sandbox: Sandbox, item: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0.5)
        port = listener.getsockname()[1]
        said = Shell(item / "work", {}, sandbox=sandbox).run(
            f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 5); print(\"in\")'")
        assert "ConnectionRefusedError" in said and "\nin" not in said
        with pytest.raises(socket.timeout):
            listener.accept()  # nothing ever knocked


@needs_bubblewrap
def test_no_process_a_command_starts_holds_a_key(sandbox: Sandbox, item: Path) -> None:
    shell = Shell(item / "work", {}, sandbox=sandbox)
    shell.run("nohup sleep 300 >/dev/null 2>&1 &")
    [sleeper] = _sleeping(sandbox, 1)
    environ = Path(f"/proc/{sleeper.pid}/environ").read_bytes().decode(errors="replace")
    assert "PALETTE_TRACE=" in environ and not any(value in environ for value in FAKE_KEYS.values())
    assert not any(value in shell.run("env") for value in FAKE_KEYS.values())


@needs_bubblewrap
def test_everything_a_command_started_is_stopped_with_its_item_even_without_its_environment(
        sandbox: Sandbox, item: Path) -> None:
    shell = Shell(item / "work", {}, sandbox=sandbox)
    shell.run("nohup sleep 300 >/dev/null 2>&1 &")
    shell.run("env -i /bin/sh -c 'sleep 301 >/dev/null 2>&1 &'")  # sheds PALETTE_TRACE: found by its user
    sleeping = _sleeping(sandbox, 2)
    assert {p.pid for p in sleeping} <= set(sandbox.stop())
    assert _running(sandbox) == []


@needs_bubblewrap
def test_a_fork_bomb_stops_at_the_item_process_limit(sandbox: Sandbox, item: Path) -> None:
    shell = Shell(item / "work", {}, sandbox=sandbox)
    said = shell.run(HOSTILE_FINALE[-1])
    refused = int(said.split("fork refused after ")[1].split()[0])
    assert refused < sandbox.limits.processes  # 40 in this test's sandbox
    sandbox.stop()
    assert _running(sandbox) == []


@needs_bubblewrap
def test_a_fork_loop_in_one_item_leaves_the_item_beside_it_its_processes(sandbox: Sandbox, tmp_path: Path) -> None:
    # Held at the same time: the loop's children still sleep while the other item's command forks.
    Shell(sandbox.work, {}, sandbox=sandbox).run(HOSTILE_FINALE[-1])
    other = Sandbox(tmp_path / "other", {"PATH": os.defpath}, limits=Limits(processes=40))
    other.prepare()
    try:
        forking = "for n in 1 2 3 4 5; do sleep 0 & done; wait; echo forked"
        assert Shell(tmp_path / "other", {}, sandbox=other).run(forking) == "forked"
    finally:
        other.close()
    assert len(_running(sandbox)) > 30  # the loop's children were there all along


@needs_bubblewrap
def test_a_keeper_that_cannot_start_is_one_line(item: Path) -> None:
    broken = Sandbox(item / "work", {"PATH": os.defpath})
    broken._bwrap = "/bin/false"  # bubblewrap refusing, as a policy or a broken install would
    try:
        with pytest.raises(KeeperFailed, match=r"^bubblewrap could not start the item's sandbox: [^\n]+$"):
            broken.prepare()
    finally:
        broken.close()


@needs_bubblewrap
def test_work_over_its_bound_stops_the_item_and_says_why(item: Path) -> None:
    bounded = Sandbox(item / "work", {"PATH": os.defpath}, limits=Limits(work_bytes=2**20))
    bounded.prepare()
    try:
        shell = Shell(item / "work", {}, sandbox=bounded)
        shell.run("nohup sleep 300 >/dev/null 2>&1 &")
        ran = shell.execute("head -c 3000000 /dev/zero > big.bin")
        assert ran.code == ENDED and "over the bound of this item (1024 KiB)" in ran.stderr
        for _ in range(1000):  # the kernel ends the namespace's processes after the command returned
            if not _running(bounded):
                break
            threading.Event().wait(0.01)
        assert _running(bounded) == []  # the sleep went with the item's namespaces
        assert "the sandbox of this item has ended" in shell.run("echo again")
    finally:
        bounded.close()


@needs_bubblewrap
@pytest.mark.parametrize("fill", ["truncate -s 3M filler.bin", "touch filler.bin && fallocate -n -l 3M filler.bin"],
                         ids=["sparse: a size and no blocks", "preallocated: blocks and no size"])
def test_work_is_bounded_by_its_files_sizes_and_by_their_blocks(item: Path, fill: str) -> None:
    bounded = Sandbox(item / "work", {"PATH": os.defpath}, limits=Limits(work_bytes=2**20))
    bounded.prepare()
    try:
        shell = Shell(item / "work", {}, sandbox=bounded)
        within = shell.execute("truncate -s 900K under.bin && fallocate -n -l 100K under.bin")
        assert within.code == 0 and "over the bound" not in within.stderr
        ran = shell.execute(fill)
        assert ran.code == ENDED and "over the bound of this item (1024 KiB)" in ran.stderr, ran
        made = (item / "work" / "filler.bin").stat()
        written = made.st_blocks * 512
        assert (made.st_size, written < 2**20) == (3 * 2**20, True) or (made.st_size, written >= 3 * 2**20) == (0, True)
    finally:
        bounded.close()


@needs_bubblewrap
def test_a_long_command_runs_from_its_script_inside_the_sandbox(sandbox: Sandbox, item: Path) -> None:
    body = "x" * 100_000
    said = Shell(item / "work", {}, sandbox=sandbox).run(f"cat > big.txt <<'END'\n{body}\nEND\nwc -c < big.txt")
    assert said.strip() == "100001"


def _sleeping(sandbox: Sandbox, count: int) -> list[psutil.Process]:
    """The `sleep`s of the item once there are `count` of them: a background command is forked before it is
    exec'd, so just after its shell returned it may still be a shell or nohup."""
    for _ in range(2000):
        found = []
        for pid in _running(sandbox):
            with contextlib.suppress(psutil.Error):
                process = psutil.Process(pid)
                if process.name() == "sleep":
                    found.append(process)
        if len(found) >= count:
            return found
        threading.Event().wait(0.01)
    raise AssertionError(f"{count} sleep(s) of the item never appeared")


def _running(sandbox: Sandbox) -> list[int]:
    """The item's processes that are not zombies."""
    alive = []
    for pid in sandbox.processes():
        with contextlib.suppress(psutil.Error):
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
    return alive


# -- the hostile agent on every host ---------------------------------------------------------------

CASE = """
- name: plain_request
  covers: an agent that attacks its harness is contained, and its conversation still judged
  request: Build a 3-slide deck on prompt caching for our engineering all-hands.
  replies: ["yes"]
  expect: {slides: 3}
"""


@pytest.fixture
def probe_port() -> Iterator[tuple[int, list[str]]]:
    """A loopback port that is not the model's, listening: it records whoever connects."""
    with ProbePort() as probe:
        yield probe.port, probe.knocked


@pytest.mark.end_to_end
@needs_bubblewrap
@pytest.mark.parametrize("host", ["react", "cuga", "claude", "codex"])
def test_a_hostile_agent_is_contained_on_every_host_and_still_judged(
        pytester: pytest.Pytester, host: str, probe_port: tuple[int, list[str]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    if host == "codex" and find_codex() is None:
        (pytest.fail if os.environ.get("REQUIRE_CODEX") else pytest.skip)("the Codex CLI is not installed: make codex")
    port, knocked = probe_port
    for name, value in {**FAKE_KEYS, "PALETTE_PROBE_PORT": str(port)}.items():
        monkeypatch.setenv(name, value)
    pytester.makefile(".yaml", cases=CASE)
    pytester.makeini("[pytest]\npalette_cases = .\n")
    # A process of its own: CUGA (numpy) must not be imported twice into one interpreter.
    # The probe's port reaches the agent only because it is named: no other PALETTE_* of the caller's does.
    passed = ["--palette-sandbox-env=PALETTE_PROBE_PORT"] + \
        (["--palette-sandbox-env=PYTHONPATH"] if os.environ.get("PYTHONPATH") else [])
    result = pytester.runpytest_subprocess(*inner_cache(), f"--host={host}", "--model=rehearsal:hostile",
                                           *passed)
    [record] = [json.loads(line) for line in next((pytester.path / "runs").glob("*/results.jsonl")).open()]
    assert record["outcome"] in ("pass", "fail"), record["failures"]  # judged, not an error of the run
    assert record["terms"]["sandbox"] == "bubblewrap"
    [item] = (pytester.path / "runs").glob(f"*/{host}/plain_request")
    ran = {run["command"]: run for run in map(json.loads, (item / "commands.jsonl").open())}
    assert set(HOSTILE_PROBES) <= set(ran) and set(HOSTILE_FINALE) <= set(ran), "the agent tried everything"
    shown = {command: run["stdout"] + run["stderr"] for command, run in ran.items()}
    assert "scripted" not in shown[HOSTILE_PROBES[0]] and '"expect"' not in shown[HOSTILE_PROBES[1]]
    assert ".ssh" not in shown[HOSTILE_PROBES[2]] and "No such file" in shown[HOSTILE_PROBES[3]]
    assert "connected to the probe port" not in shown[HOSTILE_PROBES[5]] and knocked == []
    assert "PALETTE_TRACE=" in shown[HOSTILE_PROBES[6]]
    assert int(shown[HOSTILE_FINALE[-1]].split("fork refused after ")[1].split()[0]) < Limits().processes
    assert not (item / "escaped.txt").exists() and not Path("/tmp/palette-escaped.txt").exists()
    assert not Path("/palette-escaped.txt").exists()
    # Nothing of the agent is left running (its `sleep 900`s among them), and no file of the run holds a key. Its
    # own processes only: this test's other hosts may be running theirs beside it (xdist).
    assert leftovers.processes_of(item / "palette-calls.jsonl") == []
    for path in (pytester.path / "runs").rglob("*"):
        if path.is_file():
            text = path.read_bytes().decode(errors="replace")
            assert not any(value in text for value in FAKE_KEYS.values()), path
    assert not any(value in result.stdout.str() + result.stderr.str() for value in FAKE_KEYS.values())
    assert "commands bubblewrap" in result.stdout.str()


@pytest.mark.end_to_end
@needs_bubblewrap
def test_unconfined_runs_say_so_in_the_record_the_table_the_report_and_show(pytester: pytest.Pytester,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    pytester.makefile(".yaml", cases=CASE)
    pytester.makeini("[pytest]\npalette_cases = .\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--palette-sandbox", "none")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["react: 1 passed* · commands unconfined"])
    [run] = (pytester.path / "runs").glob("*")
    [record] = [json.loads(line) for line in (run / "results.jsonl").open()]
    assert record["terms"]["sandbox"] == "unconfined"
    from pytest_palette.commands import main

    assert main(["report", str(run), "--out", str(pytester.path / "report.md")]) == 0
    assert "Unconfined: the agent's commands on react ran without the sandbox" in \
        (pytester.path / "report.md").read_text()
    capsys.readouterr()
    assert main(["show", str(run)]) == 0
    assert capsys.readouterr().out.splitlines()[2].startswith(
        "Unconfined: the agent's commands on react ran without the sandbox (--palette-sandbox none")


@pytest.mark.end_to_end
def test_a_run_without_bubblewrap_refuses_in_one_line(pytester: pytest.Pytester, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makefile(".yaml", cases=CASE)
    pytester.makeini("[pytest]\npalette_cases = .\n")
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("python3", "sh", "uv"):  # what a run needs, and no bwrap
        found = shutil.which(tool)
        if found:
            (bare / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(bare))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*the agent's sandbox needs bubblewrap (bwrap), which is not on PATH: *"
                                 "--palette-sandbox none*"])
    assert "Traceback" not in result.stderr.str()
    checked = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--palette-check")
    assert checked.ret == 1
    checked.stdout.fnmatch_lines(["agent's commands: bubblewrap: NOT ready",
                                  "  ✗ the agent's sandbox needs bubblewrap*"])


def test_items_starting_together_read_path_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from pytest_palette.arena import sandbox

    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "tool").write_text("#!/bin/sh\n")
    callers, arrived, lock = 4, threading.Event(), threading.Lock()
    signature, commands, seen = sandbox._signature, sandbox._commands, []

    def arriving(search_path: str) -> tuple[int, ...]:
        with lock:
            seen.append(search_path)
            if len(seen) == callers:
                arrived.set()
        return signature(search_path)

    scans = []

    def reading(path: Path) -> list[Path]:
        scans.append(path)
        arrived.wait(30)  # every caller has come for the same PATH while the first reads it
        return commands(path)

    monkeypatch.setattr(sandbox, "_signature", arriving)
    monkeypatch.setattr(sandbox, "_commands", reading)
    found: list[list[Path]] = []
    threads = [threading.Thread(target=lambda: found.append(sandbox.path_folders(str(folder))))
               for _ in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert found == [[folder]] * callers and scans == [folder]


def test_claiming_a_free_user_id_looks_at_the_processes_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_palette.arena import sandbox

    looks = []
    monkeypatch.setattr(sandbox, "_of_user", lambda uid, zombies=False: looks.append(uid) or [])
    claimer = Sandbox.__new__(Sandbox)
    claimer._lock = None
    uid = claimer._claim_id()
    try:
        assert looks == [uid]
    finally:
        assert claimer._lock is not None
        os.close(claimer._lock)
