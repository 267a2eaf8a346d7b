"""SIGTERM and SIGHUP end a run as Ctrl-C does.

A CI cancel, a job scheduler and `timeout` send SIGTERM; a closing terminal sends SIGHUP. Python's default for both
ends the process where it stands: no `finally` runs, so an item's sandbox, its host's client (a CLI or a worker in a
session of its own) and the conversations held ahead outlive the run. Here both raise KeyboardInterrupt in the main
thread instead, where Ctrl-C raises it, so they take Ctrl-C's path: the conversation under way closes, pytest's
interrupted session tears the item down (its sandbox stops) and ends (the conversations held ahead close), the
ledger keeps what finished, and pytest exits INTERRUPTED. The terminal says which signal it was, and what
`--palette-resume` would run again.

Under xdist the controller runs no item: on a signal it passes it on to its workers (`kill -TERM` may have reached it
alone) and waits for them to end their sessions before xdist takes them down, which kills a worker still busy
after ten seconds — mid-cleanup, under load.
"""

from __future__ import annotations

import os
import signal
import stat
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest

from ..results.ledger import read
from .items import CaseItem
from .session import SESSION

#: The signals that end a run as Ctrl-C does (SIGINT is Python's own KeyboardInterrupt already).
STOPPING = (signal.SIGTERM, signal.SIGHUP)
#: How long an xdist controller waits for its workers to end their sessions after passing a signal on: a bound on a
#: worker that hangs, far above a worker's own stop (its conversations close side by side, KILL after 2 s).
WORKERS_BOUND = 120.0

Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


class Stops:
    """The signal handlers of one session (a pytest plugin), from its configure to its unconfigure."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        #: The signal that stopped the run, once one has.
        self.received: int | None = None
        #: How the run was interrupted, as the terminal's line names it (a signal here, or Ctrl-C).
        self.interrupted: str | None = None
        self._previous: dict[int, Handler] = {}
        #: The terminal the session writes to (its device), if any.
        self._terminal: int | None = None
        self._ending = False
        self._session: pytest.Session | None = None
        #: xdist's workers (their WorkerController), on the controller.
        self._workers: list[Any] = []

    def install(self) -> None:
        # Only the main thread may set a handler (a session started in another thread keeps Python's defaults). A
        # signal already ignored stays ignored: under nohup a closing terminal must not stop the run.
        if threading.current_thread() is not threading.main_thread():
            return
        self._terminal = terminal()
        for signum in STOPPING:
            if signal.getsignal(signum) is signal.SIG_DFL:
                self._previous[signum] = signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        __tracebackhide__ = True  # the terminal names where the run was when stopped, as for Ctrl-C
        if signum == signal.SIGHUP and self._terminal is not None:
            detach(self._terminal)
        if self.received is not None or self._ending:
            # A second one (`timeout` sends it to pytest, then to pytest's whole group), or one while the session
            # ends anyway: the stop under way is not cut short.
            return
        self.received = signum
        raise KeyboardInterrupt(signal.Signals(signum).name)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodeready(self, node: Any) -> None:
        self._workers.append(node)

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        # Not pytest.exit(), and not pytest's own stop after a collection error (Session.Interrupted is one too).
        if isinstance(excinfo.value, KeyboardInterrupt) and not isinstance(excinfo.value, pytest.Session.Interrupted):
            self.interrupted = signal.Signals(self.received).name if self.received else "SIGINT (Ctrl-C)"

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Before xdist takes its workers down (its hook comes after this one): a stopped controller's workers stop
        too, and end their sessions."""
        self._ending = True
        self._session = session
        if self.received is not None and self._workers:
            stop_workers(self._workers, self.received)

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.interrupted is not None and self._session is not None and not hasattr(self.config, "workerinput"):
            terminalreporter.write_line(self.summary(self._session), yellow=True, bold=True)

    def summary(self, session: pytest.Session) -> str:
        """One line: which signal stopped the run, how many of its items have no verdict, how to run them again."""
        palette = self.config.stash[SESSION]
        # An xdist controller collects nothing: its count is the workers'.
        total = sum(isinstance(item, CaseItem) for item in session.items) if session.items else \
            session.testscollected
        # This session's records: a resumed run's ledger holds the earlier sessions' too.
        judged: set[tuple[str, str, int]] = set()
        try:
            for record in read(palette.ledger):
                if record.run_id == palette.run_id and record.usage.started_at >= palette.began \
                        and record.judged is not None:
                    judged.add((record.case, record.host, record.run_index))
        except OSError:  # no ledger yet: nothing finished
            pass
        left = max(total - len(judged), 0)
        said = f"palette: {self.interrupted}: the run was stopped"
        if not total:
            return f"{said} before any item ran"
        if not left:
            return f"{said}; every item had finished"
        return (f"{said}; {left} of {total} item{'s' if total != 1 else ''} unfinished: --palette-resume "
                f"{palette.run_dir} runs {'them' if left != 1 else 'it'} again")

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self) -> None:
        """Python's defaults again, after every other plugin's unconfigure (the session's hosts close there)."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()


def install(config: pytest.Config) -> Stops:
    """SIGTERM and SIGHUP stop this session as Ctrl-C would, until it is unconfigured."""
    stops = Stops(config)
    config.pluginmanager.register(stops, "palette-signals")
    stops.install()
    return stops


def stop_workers(workers: list[Any], signum: int) -> None:
    """Pass the signal on to each xdist worker (it ignores a second one), then wait, bounded, until each has ended
    its session: its channel closes when its pytest is done, unconfigure included.

    xdist's WorkerController keeps the channel (`channel`) and the execnet gateway, which knows the worker's pid
    (`_cache_rinfo`, cached when xdist set the worker up; asking again would be a remote call to a busy worker): the
    only ways to reach a worker while the controller's loop is gone."""
    for worker in workers:
        try:
            os.kill(worker.gateway._cache_rinfo.pid, signum)
        except (AttributeError, OSError):  # gone already, or an xdist without them: its teardown still ends it
            continue
    deadline = time.monotonic() + WORKERS_BOUND
    while time.monotonic() < deadline:
        try:
            if all(worker.channel.isclosed() for worker in workers):
                return
        except AttributeError:
            return
        time.sleep(0.1)


def terminal() -> int | None:
    """The device of the terminal the session's standard streams are on, or None."""
    for fd in (1, 2, 0):
        try:
            if os.isatty(fd):
                return os.fstat(fd).st_rdev
        except OSError:
            continue
    return None


def detach(device: int) -> None:
    """A hung-up terminal (closed, its session sent SIGHUP) fails every write with EIO: pytest's report of the stop,
    and a write on the way, would raise instead of ending the run as Ctrl-C does. Every descriptor on it (the
    standard streams, and the copies pytest's capture keeps to restore them) then writes nowhere. A terminal still
    there (SIGHUP sent by `kill`) keeps its output."""
    try:
        descriptors = [int(name) for name in os.listdir("/dev/fd")]
    except OSError:
        descriptors = [0, 1, 2]
    nowhere = os.open(os.devnull, os.O_RDWR)
    try:
        for fd in descriptors:
            try:
                found = os.fstat(fd)
                if stat.S_ISCHR(found.st_mode) and found.st_rdev == device and fd != nowhere and not os.isatty(fd):
                    os.dup2(nowhere, fd)
            except OSError:  # the listing's own descriptor, closed by now
                continue
    finally:
        os.close(nowhere)
