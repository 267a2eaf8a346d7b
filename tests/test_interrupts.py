"""Ctrl-C mid-turn ends the session on every host with nothing it started left running: the host's client,
the agent's shell, deck.py's hold, the engine drafting in a session of its own, the rehearsal server. SIGTERM (a CI
cancel, `timeout`) and SIGHUP (a closing terminal) end it the same way."""

from __future__ import annotations

import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from interrupting import END_BOUND, HANGUP, KILL_TERM, TIMEOUT, Interrupted, interrupt, sandbox_env
from sweeps import inner_cache

from pytest_palette.hosts import claude, cuga
from pytest_palette.results.ledger import load

pytestmark = pytest.mark.end_to_end


def _ended_as_ctrl_c(tmp_path: Path, ended: Interrupted, items: int) -> None:
    """The session ended INTERRUPTED having stopped everything it started before it exited (nothing was left to end
    on its own), each item's evidence as far as it got, and a ledger that reads with no verdict in it. The engine
    was stopped while drafting: no plan was ever written (a session that merely waited for it would have one)."""
    assert ended.seconds is not None, f"the session had not ended long after the signal:\n{ended.output[-8000:]}"
    assert ended.exit_code == pytest.ExitCode.INTERRUPTED, ended.output[-3000:]
    assert ended.at_exit == [], f"still running, and not killed, when the session exited: {ended.at_exit}"
    assert ended.left == [], f"still running after the session ended: {ended.left}"
    folders = list(tmp_path.glob("runs/*/*/slow_plan*"))
    assert len(folders) == items
    assert all((item / "turns.json").is_file() and not list(item.rglob("plan.md")) for item in folders)
    (run,) = tmp_path.glob("runs/*")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no torn or foreign line
        reading = load(run)
    assert [record for record in reading.latest.values() if record.judged is not None] == []


@pytest.mark.parametrize(("host", "conversations"), [("react", 1), ("cuga", 3), ("claude", 1)])
def test_ctrl_c_mid_turn_ends_the_session_and_leaves_no_process(tmp_path: Path, host: str,
                                                               conversations: int) -> None:
    # cuga with 3 in flight: 3 workers, each in its own sandbox, each mid-turn (each worker costs seconds of CPU to
    # start: more would prove nothing more).
    ended = interrupt(tmp_path, host, conversations)
    if ended.skipped:
        pytest.skip(f"the {host} host's client is not installed here")
    _ended_as_ctrl_c(tmp_path, ended, conversations)
    assert f"palette: SIGINT (Ctrl-C): the run was stopped; {conversations} of {conversations} item" in ended.output


# -- SIGTERM and SIGHUP end the run as Ctrl-C does (pytest_palette/run/signals.py) --------------------------------


def _sweep_hosts() -> list[str]:
    """react, cuga and claude: a host whose client is not installed here is left out, as its items would be
    skipped (their engines would never draft)."""
    return ["react", *(["cuga"] if cuga.installed_problem() is None else []),
            *(["claude"] if claude.find_cli() is not None else [])]


def test_sigterm_from_timeout_ends_a_three_host_sweep_and_leaves_no_process(tmp_path: Path) -> None:
    # The real coreutils timeout wraps the session and relays SIGTERM as it does on expiry: to pytest, then to its
    # whole process group. One session, its three items held at once (--palette-conversations 3), each mid-turn.
    if shutil.which("timeout") is None:
        pytest.skip("no GNU timeout here")
    hosts = _sweep_hosts()
    ended = interrupt(tmp_path, ",".join(hosts), stop=TIMEOUT)
    _ended_as_ctrl_c(tmp_path, ended, len(hosts))
    (run,) = tmp_path.glob("runs/*")
    items, them = ("items", "them") if len(hosts) > 1 else ("item", "it")
    assert (f"palette: SIGTERM: the run was stopped; {len(hosts)} of {len(hosts)} {items} unfinished: "
            f"--palette-resume {run} runs {them} again") in ended.output
    assert "KeyboardInterrupt: SIGTERM" in ended.output  # pytest's own line, as for Ctrl-C


def test_a_closed_terminal_ends_the_run_as_ctrl_c_does(tmp_path: Path) -> None:
    # The session's controlling terminal (a pty) closes: the kernel sends SIGHUP, and every write to it fails from
    # then on (pytest's report of the stop too, which must not turn the stop into a crash).
    ended = interrupt(tmp_path, "react", stop=HANGUP)
    _ended_as_ctrl_c(tmp_path, ended, 1)


def test_sigterm_to_pytest_alone_stops_its_xdist_workers_and_resume_runs_the_items_again(tmp_path: Path) -> None:
    # `kill -TERM <pid>` reaches the xdist controller alone, which runs no item: its workers, each mid-turn, stop too.
    ended = interrupt(tmp_path, "react", 2, stop=KILL_TERM, workers=2)
    _ended_as_ctrl_c(tmp_path, ended, 2)
    (run,) = tmp_path.glob("runs/*")
    assert f"palette: SIGTERM: the run was stopped; 2 of 2 items unfinished: --palette-resume {run}" in ended.output
    # The backend no longer slow, the resumed run has both items, each once, each with its verdict.
    resumed = subprocess.run(
        [sys.executable, "-m", "pytest", "cases", "--host", "react", *inner_cache(), "-p", "no:randomly",
         "--palette-resume", str(run), *sandbox_env()],
        cwd=tmp_path, capture_output=True, text=True, timeout=END_BOUND * 5, check=False)
    assert resumed.returncode == pytest.ExitCode.OK, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    reading = load(run)
    assert reading.records == 2 and {r.case: r.outcome for r in reading.latest.values()} == {
        "slow_plan_1": "pass", "slow_plan_2": "pass"}
