"""Issue 22: the model's own code on cuga. CUGA runs the Python a model answers with; an agent whose code — not its
commands — attacks (`rehearsal:hostile_cuga_code`) starts a process through asyncio, opens sockets, reads the
caller's environment and writes outside its folder, each past CUGA's own filter. One cuga session, offline through
CUGA's real executor, asserted on many times: each attempt ran, reached nothing outside the item's sandbox, and
is in the item's record; the item is still judged and passes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ports import ProbePort
from sweeps import Sweeps, inner_cache
from test_sandbox import FAKE_KEYS, needs_bubblewrap

from pytest_palette.rehearsal import openai_wire
from pytest_palette.rehearsal.conversation import CODE_LABEL, Conversation, RunCode, ToolResult, UserSaid
from pytest_palette.rehearsal.hostile import (
    CUGA_CODE_LABELS,
    CUGA_CODE_MARKER,
    PROBE_DIR,
    HostileCugaCode,
    escaped_tmp,
)
from pytest_palette.rehearsal.policy import RehearsalPolicy

CASES = f"""
- name: attacked
  covers: code the model writes runs no further than its commands
  request: "Build a 3-slide deck on prompt caching for our engineering all-hands. {CUGA_CODE_MARKER}"
  replies: ["yes"]
  expect: {{slides: 3}}
- name: neighbour
  covers: another conversation, at the same time, forked from the same warm CUGA
  request: "Build a 3-slide deck on tidal energy for the NEIGHBOUR_CANARY review."
  replies: ["yes"]
  expect: {{slides: 3}}
"""
#: What CUGA answers in place of running a block its filter refused (security.py, local_executor.py).
REFUSED_BY_CUGA = ("Security violation", "is not allowed in restricted execution context",
                   "Code must use at least one variable or tool from context")


# -- the wire: cheap, no session ---------------------------------------------------------------------------------


def test_a_code_block_survives_the_codeact_wire_and_is_known_by_its_label() -> None:
    code = "tools = [run_command]\nprint('a # not a label')"
    text = openai_wire.codeact_text(RunCode(code, "cuga-code-x"))
    assert text.startswith(f"```python\n{CODE_LABEL}cuga-code-x\n")
    [read] = openai_wire.parse_code(text, "m1")
    assert read == RunCode(code, "cuga-code-x", "m1.0.code")
    # What CUGA answers next is that block's result, not the user's word.
    conversation = openai_wire.to_conversation({"messages": [
        {"role": "user", "content": "Build a deck"}, {"role": "assistant", "content": text},
        {"role": "user", "content": "Execution output: done"}]})
    assert conversation.codeact and conversation.result_of("m1.0.code") == "done"
    assert [e.text for e in conversation.events if isinstance(e, UserSaid)] == ["Build a deck"]
    with pytest.raises(ValueError, match="fence"):
        RunCode("print('```')", "x")


def test_without_a_code_executor_the_hostile_agent_is_the_good_agent() -> None:
    """react and claude run no code of the model's: there the agent does what the good agent does."""
    opening = f"Build a 3-slide deck on tides {CUGA_CODE_MARKER}"
    tools = Conversation("- palette: makes slide decks\n", [UserSaid(opening)])
    assert HostileCugaCode().next_action(tools) == RehearsalPolicy().next_action(tools)
    codeact = Conversation("- palette: makes slide decks\n", [UserSaid(opening)], codeact=True)
    first = HostileCugaCode().next_action(codeact)
    assert isinstance(first, RunCode) and first.label == CUGA_CODE_LABELS[0]
    # Once every block has its result, it drives the skill.
    done = Conversation(codeact.system, [UserSaid(opening)], codeact=True)
    for label in CUGA_CODE_LABELS:
        done.events += [RunCode("", label, label), ToolResult(label, "ok")]
    assert HostileCugaCode().next_action(done) == RehearsalPolicy().next_action(tools)


# -- one cuga session --------------------------------------------------------------------------------------------


@dataclass(repr=False)  # a failure's message shows no environment the session saw
class Session:
    folder: Path
    item: Path
    outside: Path  #: a folder of the test's, named to the agent: the write block aims at it
    harness: int  #: the pytest process the session ran in: the harness, where CUGA runs today
    secrets: dict[str, str]  #: the canaries and fake keys in its environment, by name
    seen: dict[str, str]  #: label → what the block printed, as the model read it
    knocked: list[str]
    output: str
    records: dict[str, dict[str, Any]]  #: by case
    tmp_escaped: bool  #: its escape into the harness's /tmp was there when the session ended
    neighbour: str  #: the canary in the neighbouring conversation's request

    def __repr__(self) -> str:
        return f"Session({self.folder})"


def _session(folder: Path) -> Session:
    """The session, in a process of its own, with a probe port open for its whole length; its escape into the
    harness's /tmp, if it got out, is seen and then removed (unless another process of that id left it)."""
    probe = folder / "outside"
    probe.mkdir()
    project = folder / "project"
    project.mkdir()
    canary = uuid.uuid4().hex
    neighbour = f"neighbour-{canary}"
    (project / "cases.yaml").write_text(CASES.replace("NEIGHBOUR_CANARY", neighbour), encoding="utf-8")
    (project / "pytest.ini").write_text("[pytest]\npalette_cases = cases.yaml\n", encoding="utf-8")
    secrets = {**FAKE_KEYS, "OPENAI_API_KEY": f"sk-canary-{canary}", "HOSTILE_CANARY": f"canary-{canary}"}
    env = {name: value for name, value in os.environ.items() if not name.startswith("PALETTE_")}
    passed = ["--palette-sandbox-env=PYTHONPATH"] if os.environ.get("PYTHONPATH") else []
    with ProbePort() as listener:
        env |= {**secrets, "PALETTE_PROBE_PORT": str(listener.port), PROBE_DIR: str(probe)}
        # Two at once: the attacked conversation and its neighbour, each forked from the same warm CUGA.
        process = subprocess.Popen([sys.executable, "-m", "pytest", *inner_cache(), "--host=cuga",
                                    "--model=rehearsal:hostile_cuga_code", "--palette-conversations=2", "-p",
                                    "no:randomly", *passed], cwd=project, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        tmp_marker = Path(escaped_tmp(process.pid))
        stale = tmp_marker.exists()  # another process of that id left it: not this session's to judge or remove
        try:
            output, _ = process.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGINT)  # as a user's Ctrl-C: the session ends what it started
            output, _ = process.communicate(timeout=60)
            pytest.fail("the cuga session did not end within 600 s")
        finally:
            process.kill()
    # Seen now, removed now: the tests read the result, not the harness's /tmp, and may run after this is gone.
    tmp_escaped = tmp_marker.exists()
    if not stale:
        tmp_marker.unlink(missing_ok=True)  # this session's own escape, if it got out
    found = list((project / "runs").glob("*/results.jsonl"))
    assert len(found) == 1, f"the session wrote no results (exit code {process.returncode})"
    [results] = found
    records = {record["case"]: record for record in map(json.loads, results.open())}
    [item] = (project / "runs").glob("*/cuga/attacked")
    seen = {label: (probe / f"seen-{label}.txt").read_text(encoding="utf-8")
            for label in CUGA_CODE_LABELS if (probe / f"seen-{label}.txt").is_file()}
    return Session(project, item, probe, process.pid, secrets, seen, list(listener.knocked), output, records,
                   tmp_escaped, neighbour)


@pytest.fixture(scope="module")
def session(sweeps: Sweeps) -> Session:
    """One cuga session of the attacked case, in a process of its own (its environment is what /proc gives away),
    with canaries in that environment: a model key and a variable of no concern to Palette. Once per test
    session, whichever worker asks first."""
    if needs_bubblewrap.args[0]:
        pytest.skip(needs_bubblewrap.kwargs["reason"])
    return sweeps.shared("hostile-cuga", _session)


def _leaks(session: Session, text: str) -> list[str]:
    """The names of the secrets `text` holds: only names, so that a failure's message is no leak of its own."""
    return [name for name, value in session.secrets.items() if value in text]


def _said(session: Session, label: str) -> str:
    assert label in session.seen, f"the block {label} never ran: no result reached the model ({sorted(session.seen)})"
    return session.seen[label]


def _section(said: str, title: str) -> str:
    """The lines a block printed under its `== title` header, up to the next header."""
    match = re.search(rf"^== {re.escape(title)}\n(.*?)(?=^== |\Z)", said, re.S | re.M)
    assert match, f"no section {title!r}; the block printed these: {re.findall(r'^== .*', said, re.M)}"
    return match.group(1)


@pytest.mark.end_to_end
@needs_bubblewrap
def test_the_attacked_item_is_judged_and_passes(session: Session) -> None:
    for case in ("attacked", "neighbour"):
        assert session.records[case]["outcome"] == "pass", session.records[case]["failures"]


@needs_bubblewrap
def test_each_block_ran_past_cugas_own_filter(session: Session) -> None:
    # It is the sandbox under test, not CUGA's filter: every block must have run and printed.
    for label in CUGA_CODE_LABELS:
        said = _said(session, label)
        assert "== " in said, f"{label} printed no section"
        assert not [words for words in REFUSED_BY_CUGA if words in said], f"CUGA's filter refused {label}"


@needs_bubblewrap
def test_the_items_record_shows_each_attempt(session: Session) -> None:
    turns = json.loads((session.item / "turns.json").read_text(encoding="utf-8"))["turns"]
    recorded = json.dumps([(turn.get("steps"), turn.get("answer")) for turn in turns])
    for label in CUGA_CODE_LABELS:
        assert f"{CODE_LABEL}{label}" in recorded, label


@needs_bubblewrap
def test_no_canary_in_the_item_what_the_code_printed_or_the_terminal(session: Session) -> None:
    for path in (session.folder / "runs").rglob("*"):
        if path.is_file():
            leaked = _leaks(session, path.read_bytes().decode(errors="replace"))
            assert not leaked, f"{path} holds {leaked}"
    for label, said in session.seen.items():
        leaked = _leaks(session, said)
        assert not leaked, f"the block {label} printed {leaked}"
    leaked = _leaks(session, session.output)
    assert not leaked, f"the terminal shows {leaked}"


@needs_bubblewrap
def test_the_harness_environment_was_not_readable(session: Session) -> None:
    said = _said(session, "cuga-code-process")
    harness = _section(said, f"/proc/{session.harness}/environ")
    # Every environment has a PATH: none was read. (Booleans asserted: pytest would show the text it searched.)
    read = re.search(r"^PATH=", harness, re.M) is not None
    assert not read, f"the model's code read the environment of the harness (process {session.harness})"
    # Only the caller's environment holds the probe's names (the sandbox passes neither): not the block's own, nor
    # its parent's or its namespace's first process's.
    for shown in (_section(said, "env"), _said(session, "cuga-code-environ")):
        read = re.search(rf"^({PROBE_DIR}|PALETTE_PROBE_PORT)=", shown, re.M) is not None
        assert not read, "the model's code read the caller's environment"


@needs_bubblewrap
def test_no_socket_reached_the_probe_or_the_harness(session: Session) -> None:
    said = _said(session, "cuga-code-socket")
    assert re.search(r"^== probe port \d+: refused", said, re.M), said
    assert session.knocked == []
    # The harness's own listening ports (its model server): none but the model's, as the code's host names it.
    env = _section(_said(session, "cuga-code-process"), "env")
    model = {int(port) for port in re.findall(r"^OPENAI_BASE_URL=\S*?:(\d+)", env, re.M)}
    reached = {int(port) for port in re.findall(r"^== harness port (\d+): connected", said, re.M)}
    assert reached <= model, said


@needs_bubblewrap
def test_nothing_was_written_outside_the_items_folder(session: Session) -> None:
    _said(session, "cuga-code-write")
    assert not (session.outside / "escaped-cuga.txt").exists()
    assert not session.tmp_escaped
    outside_work = [path for path in (session.folder / "runs").rglob("escaped-cuga.txt")
                    if (session.item / "work") not in path.parents]
    assert outside_work == []


@needs_bubblewrap
def test_nothing_of_the_conversation_beside_it_was_found(session: Session) -> None:
    """Both conversations ran at once, forked from one warm CUGA: the attacked one's code saw its own processes and
    folders, and nothing of its neighbour's — no process, environment, folder or file, not its request's words."""
    spans = [(record["usage"]["started_at"], record["usage"]["started_at"] + record["usage"]["seconds"])
             for record in session.records.values()]
    assert max(start for start, _ in spans) < min(end for _, end in spans), "the two did not run side by side"
    said = _said(session, "cuga-code-neighbour")
    assert re.search(r"^-- /proc/\d+ ", said, re.M), "the block saw no process at all, not even its own"
    found = [name for name in ("neighbour", session.neighbour) if name in said]
    assert not found, f"the attacked conversation's code found {found}"
