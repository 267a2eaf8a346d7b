"""The fork server (arena/forkserver.py): a child forked from a warm process into an item's sandbox is confined as a
command of that item is — the same user id, limits, capabilities, namespaces and view — sees nothing of another item
beside it, and runs nothing when it cannot take the holder's confinement. One server, two items, compared against a
command run in each."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_sandbox import needs_bubblewrap

from pytest_palette.arena.forkserver import ENTER_FAILED, Forked, ForkFailed, ForkServer
from pytest_palette.arena.sandbox import Limits, Sandbox
from pytest_palette.backend import agent_environment

#: What a process says of itself, as a command or as a forked child (standard library only).
FACTS = """
import json, os, sys
def facts():
    status = {k: v.strip() for k, _, v in (line.partition(":") for line in open("/proc/self/status"))}
    limits = [line.split()[-3:] for line in open("/proc/self/limits").read().splitlines()[1:]]
    return {"ids": [os.getresuid(), os.getresgid()],
            "caps": {k: status[k] for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs",
                                             "Seccomp")},
            "limits": limits, "root": sorted(os.listdir("/")), "work": sorted(os.listdir(os.getcwd())),
            "ns": {name: os.readlink(f"/proc/self/ns/{name}") for name in ("user", "pid")},
            "environ": open("/proc/self/environ", "rb").read().decode(errors="replace")}
"""
PROGRAM = FACTS + """
WARMED = []
def warm():
    WARMED.append(os.getpid())  # what a child inherits: the warm process's state, not a conversation's
def main():
    start = json.loads(sys.stdin.readline())
    os.chdir(start["cwd"])
    print(json.dumps({**facts(), "warmed": bool(WARMED)}), flush=True)
    return 0
"""


@dataclass
class Item:
    work: Path
    sandbox: Sandbox


@pytest.fixture
def items(tmp_path: Path) -> Iterator[list[Item]]:
    made = []
    for name in ("first", "second"):
        folder = tmp_path / "run" / "cuga" / name
        (folder / "work").mkdir(parents=True)
        (folder / "work" / f"{name}.txt").write_text(name)
        sandbox = Sandbox(folder / "work", agent_environment(folder / "palette-calls.jsonl"), "bubblewrap",
                          trace=folder / "palette-calls.jsonl", limits=Limits(processes=40))
        sandbox.prepare()
        made.append(Item(folder / "work", sandbox))
    yield made
    for item in made:
        item.sandbox.close()


def _run(forked: Forked, work: Path) -> dict[str, object]:
    forked.stdin.write(json.dumps({"cwd": str(work)}).encode() + b"\n")
    forked.stdin.flush()
    said = forked.stdout.readline()
    assert said, forked.stderr.read().decode(errors="replace")
    assert forked.wait(30) == 0
    return dict(json.loads(said))


@needs_bubblewrap
def test_a_forked_child_is_confined_as_a_command_of_its_item_and_sees_nothing_of_the_other(
        tmp_path: Path, items: list[Item]) -> None:
    program = tmp_path / "program.py"
    program.write_text(PROGRAM, encoding="utf-8")
    server = ForkServer(program, {"PATH": os.defpath}, tmp_path)
    try:
        children = []
        for item in items:
            forked = server.enter(lambda argv, item=item: item.sandbox.program(argv, item.work, network=False),
                                  item.work, item.sandbox.env, time.monotonic() + 60)
            children.append((item, forked))
        # Both run at once: each answers only once both are in their sandboxes.
        seen = [_run(forked, item.work) for item, forked in children]
        for (item, forked), child in zip(children, seen, strict=True):
            forked.release()
            code = shlex.quote(FACTS + "print(json.dumps(facts()))")
            command = subprocess.run(item.sandbox.argv(f"{sys.executable} -c {code}"), capture_output=True, text=True,
                                     check=True, cwd=item.work)
            alike = json.loads(command.stdout)
            # The same user and group ids, capabilities, no-new-privileges, limits, user and pid namespaces and view
            # as a command of its item.
            for fact in ("ids", "caps", "limits", "root", "work", "ns"):
                assert child[fact] == alike[fact], fact
            assert child["caps"]["CapEff"] == "0000000000000000" and child["caps"]["NoNewPrivs"] == "1"
            assert child["warmed"] and child["work"] == [f"{item.work.parent.name}.txt"]
            # Its environment as /proc shows it is the warm process's, not its item's (the holder's has the trace).
            assert child["environ"] == f"PATH={os.defpath}\0"
        first, second = seen
        assert first["ns"] != second["ns"]
    finally:
        server.close()


@needs_bubblewrap
def test_a_child_that_cannot_take_the_holders_confinement_runs_nothing_and_says_why(tmp_path: Path) -> None:
    program = tmp_path / "program.py"
    program.write_text(PROGRAM, encoding="utf-8")
    server = ForkServer(program, {"PATH": os.defpath}, tmp_path)
    gone = subprocess.Popen(["true"])
    gone.wait()
    try:
        forked = server.spawn(gone.pid, time.monotonic() + 60)
        assert forked.wait(30) == ENTER_FAILED
        assert b"could not enter its sandbox" in forked.stderr.read()
    finally:
        server.close()
    broken = tmp_path / "broken.py"
    broken.write_text("def warm():\n    raise ImportError('no module named cuga')\n", encoding="utf-8")
    server = ForkServer(broken, {"PATH": os.defpath}, tmp_path)
    try:
        with pytest.raises(ForkFailed, match="ImportError: no module named cuga"):
            server.spawn(os.getpid(), time.monotonic() + 60)
    finally:
        server.close()


@needs_bubblewrap
def test_a_warm_process_is_shared_by_the_sessions_that_connect_to_it_for_its_own_program_only(
        tmp_path: Path, items: list[Item]) -> None:
    """Another session of the user connects to the socket and gets children of the same warm process (the test
    suite's sessions share one warm CUGA so); one that asks for another program's warm process is told no."""
    program = tmp_path / "program.py"
    program.write_text(PROGRAM, encoding="utf-8")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(str(tmp_path / "warm.sock"))
    listener.listen(8)
    owner = ForkServer(program, {"PATH": os.defpath}, tmp_path, tag="facts", listener=listener).start()
    sharing = ForkServer(program, {}, Path("/"), tag="facts", address=str(tmp_path / "warm.sock"))
    other = ForkServer(program, {}, Path("/"), tag="another", address=str(tmp_path / "warm.sock"))
    try:
        item = items[0]
        forked = sharing.enter(lambda argv: item.sandbox.program(argv, item.work, network=False), item.work,
                               item.sandbox.env, time.monotonic() + 60)
        child = _run(forked, item.work)
        forked.release()
        assert child["warmed"] and child["work"] == ["first.txt"] and sharing._process is None
        assert not other.usable(time.monotonic() + 60) and "warmed 'facts', not 'another'" in str(other._failed)
    finally:
        for server in (other, sharing, owner):
            server.close()
        listener.close()
