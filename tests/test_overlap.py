"""Conversations started ahead of their items (--palette-conversations) and the rehearsal model's latency."""

from __future__ import annotations

import json
import threading
from concurrent.futures import CancelledError
from pathlib import Path

import pytest
from sweeps import inner_cache

from pytest_palette.hosts.base import HostSession, TurnRecord
from pytest_palette.rehearsal.latency import ModelLatency
from pytest_palette.run.overlap import Ahead, Overlap

#: The shipped interaction cases, the core five among them (`-m core`).
CORE = str(Path(__file__).resolve().parent.parent / "cases" / "interaction.yaml")


def test_a_latency_spec_reads_seconds_jitter_and_seed() -> None:
    latency = ModelLatency.parse("2,jitter=0.5,seed=3")
    delays = [latency.delay(n) for n in range(200)]
    assert all(1.5 <= d <= 2.5 for d in delays) and len(set(delays)) > 100  # spread over the interval
    assert delays == [ModelLatency.parse("2,jitter=0.5,seed=3").delay(n) for n in range(200)]  # deterministic
    assert delays != [ModelLatency.parse("2,jitter=0.5,seed=4").delay(n) for n in range(200)]
    assert ModelLatency.parse("0.2").delay(7) == 0.2 and str(ModelLatency.parse("2,jitter=0.5")) == "2 s a call ± 0.5 s"


@pytest.mark.parametrize(("spec", "said"), [
    ("", "expected seconds per call"), ("fast", "seconds 'fast' is not a number"), ("-1", "is not a number"),
    ("2,jitter=3", "jitter 3 is larger than the latency 2"), ("2,wobble=1", "'wobble=1' is not jitter="),
])
def test_a_bad_latency_spec_says_what_is_wrong(spec: str, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        ModelLatency.parse(spec)


class _Waits(HostSession):
    def __init__(self) -> None:
        self.closed = threading.Event()

    def send(self, message: str, timeout: float) -> TurnRecord:
        raise NotImplementedError

    def close(self) -> None:
        self.closed.set()


def test_closing_ends_what_is_running_and_starts_nothing_more() -> None:
    overlap = Overlap(2)
    sessions = [_Waits() for _ in range(4)]
    started: list[int] = []
    stopped: list[int] = []

    def job(number: int):  # type: ignore[no-untyped-def]
        def converse(ahead: Ahead) -> object:
            ahead.session = sessions[number]
            ahead.closers.append(lambda: stopped.append(number))
            started.append(number)
            sessions[number].closed.wait(60)  # a turn that only ends when its session is closed
            return number
        return converse

    overlap.start([(f"item{n}", None, job(n)) for n in range(4)])
    while len(started) < 2:  # two in flight, the limit
        threading.Event().wait(0.01)
    overlap.close()
    assert sorted(started) == [0, 1] and sorted(stopped) == [0, 1]
    assert all(sessions[n].closed.is_set() for n in (0, 1)) and not sessions[2].closed.is_set()
    assert overlap.take("item0") == 0
    with pytest.raises((CancelledError, RuntimeError)):  # never started: cancelled, or told the session ended
        overlap.take("item3")


def test_a_serial_hosts_conversations_never_overlap() -> None:
    overlap = Overlap(4)
    inside = threading.Semaphore(1)
    clashes: list[str] = []

    def converse(ahead: Ahead) -> object:
        if not inside.acquire(blocking=False):
            clashes.append("two at once")
            return None
        threading.Event().wait(0.05)
        inside.release()
        return "done"

    overlap.start([(f"item{n}", "cuga", converse) for n in range(4)])
    assert [overlap.take(f"item{n}") for n in range(4)] == ["done"] * 4 and clashes == []


def _here(pytester: pytest.Pytester) -> list[str]:
    """The shipped cases run from the test's own folder, their runs written there too."""
    return [*inner_cache(), "--rootdir", str(pytester.path), "--palette-run-dir",
            str(pytester.path / "runs")]


def _windows(run: Path) -> list[tuple[float, float]]:
    records = [json.loads(line) for line in (run / "results.jsonl").open()]
    return [(r["usage"]["started_at"], r["usage"]["started_at"] + r["usage"]["seconds"]) for r in records]


def _most_at_once(windows: list[tuple[float, float]]) -> int:
    return max(sum(start <= at < end for start, end in windows) for at, _ in windows)


# Where each item is judged: the thread's name, a line per item.
JUDGED_WHERE = """
import threading
from pathlib import Path

import pytest_palette.run.items as items

judge_folder = items.judge_folder

def where(*args, **kwargs):
    with Path("judged-in.txt").open("a") as said:
        said.write(threading.current_thread().name + "\\n")
    return judge_folder(*args, **kwargs)

items.judge_folder = where
"""


@pytest.mark.end_to_end
def test_conversations_run_together_and_every_item_is_still_judged(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(judged_where=JUDGED_WHERE)  # a plugin: the cases are not below this folder's conftest
    result = pytester.runpytest_subprocess(CORE, *_here(pytester), "-m", "core", "--palette-conversations", "5",
                                           "--palette-rehearsal-latency", "0.2", "-p", "judged_where")
    result.assert_outcomes(passed=5)
    [run] = (pytester.path / "runs").glob("*")
    # All five start at once and each waits on the model several times: they run together.
    assert _most_at_once(_windows(run)) > 1
    # Each is judged in its conversation's thread, not one after another in pytest's.
    judged = (pytester.path / "judged-in.txt").read_text().split()
    assert len(judged) == 5 and all(name.startswith("palette-conversation-") for name in judged), judged
    # The next session of these cases starts them longest first, from this run's times (-v says so).
    again = pytester.runpytest_inprocess(CORE, *_here(pytester), "-m", "core", "--palette-conversations", "5",
                                         "--collect-only", "-v")
    records = [json.loads(line) for line in (run / "results.jsonl").open()]
    took = {r["case"]: r["usage"]["seconds"] for r in records}
    said = [line.split(". ", 1)[1] for line in again.outlines if line.startswith("    ") and ". " in line]
    assert "palette: 5 items start longest first (5 by history):" in again.outlines, again.outlines
    assert [line.split("::")[1].split("[")[0] for line in said] == sorted(took, key=lambda c: -took[c])


@pytest.mark.end_to_end
def test_cuga_has_its_conversations_side_by_side_each_in_its_own_worker(pytester: pytest.Pytester) -> None:
    # Three of the core cases, three workers (each costs seconds of CPU to start): all three side by side.
    result = pytester.runpytest_subprocess(CORE, *_here(pytester), "-m", "core", "-k", "not edit and not conditional",
                                           "--host", "cuga", "--palette-conversations", "3")
    outcomes = result.parseoutcomes()
    if outcomes.get("skipped"):
        pytest.skip("the cuga host is not installed here")
    result.assert_outcomes(passed=3)
    [run] = (pytester.path / "runs").glob("*")
    assert _most_at_once(_windows(run)) == 3


SERIAL_HOST = """
from pytest_palette.hosts.react import ReactHost

class SerialHost(ReactHost):
    name = "serial"
    concurrent = False  # a client whose state is its process's

def pytest_palette_add_hosts(hosts, config):
    hosts["serial"] = SerialHost()
"""


@pytest.mark.end_to_end
def test_a_host_with_process_wide_state_has_one_conversation_at_a_time(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SERIAL_HOST)
    cases = pytester.path / "interaction.yaml"  # beside the conftest.py that adds the host
    cases.write_text(Path(CORE).read_text(encoding="utf-8"), encoding="utf-8")
    result = pytester.runpytest_subprocess(str(cases), *_here(pytester), "-m", "core", "--host", "serial",
                                           "--palette-conversations", "5", "--palette-rehearsal-latency", "0.2")
    result.assert_outcomes(passed=5)
    [run] = (pytester.path / "runs").glob("*")
    assert _most_at_once(_windows(run)) == 1


@pytest.mark.parametrize(("given", "said"), [
    (["--palette-conversations", "0"], "--palette-conversations must be 1 or more (got 0)"),
    (["--palette-conversations", "4", "-n", "2"], "--palette-conversations and -n (xdist) both spread*"),
    (["--palette-rehearsal-latency", "2,jitter=5"], "--palette-rehearsal-latency '2,jitter=5': jitter 5 is*"),
])
@pytest.mark.end_to_end
def test_bad_concurrency_settings_are_one_line_usage_errors(pytester: pytest.Pytester, given: list[str],
                                                            said: str) -> None:
    result = pytester.runpytest_subprocess(CORE, *_here(pytester), *given)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{said}"])
    assert "Traceback" not in result.stderr.str()


def test_an_item_waiting_for_a_conversation_not_yet_started_is_released_when_the_session_ends() -> None:
    """An item collects its key (and forgets it) before its job has a slot; the session then ends (Ctrl-C, -x):
    the wait ends in a cancellation, and the feeder still finds the job it must not start."""
    overlap = Overlap(1)
    release, ran = threading.Event(), []

    def first(ahead: Ahead) -> object:
        release.wait(60)
        return "first"

    overlap.start([("first", None, first), ("second", None, lambda ahead: ran.append("second"))])
    outcome: list[object] = []

    def take() -> None:
        try:
            outcome.append(overlap.take("second"))
        except CancelledError as error:
            outcome.append(error)

    waiting = threading.Thread(target=take)
    waiting.start()
    overlap.close()
    release.set()
    waiting.join(60)  # a hang guard, not a measure: it returns at once once the wait is cancelled
    assert not waiting.is_alive() and len(outcome) == 1 and isinstance(outcome[0], CancelledError)
    assert ran == []
