"""SIGTERM and SIGHUP become Ctrl-C's KeyboardInterrupt once, leave an ignored signal ignored, and a hung-up
terminal stops failing writes (pytest_palette/run/signals.py). Whole sessions stopped by them: test_interrupts.py."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from pytest_palette.run.signals import Stops, detach


@pytest.fixture
def defaults() -> Iterator[None]:
    """SIGTERM and SIGHUP at their defaults, as a terminal's session has them, and as they were after."""
    before = {signum: signal.signal(signum, signal.SIG_DFL) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


@pytest.mark.usefixtures("defaults")
def test_the_first_signal_stops_the_run_and_a_second_does_not_cut_its_stop_short(request: pytest.FixtureRequest
                                                                                 ) -> None:
    stops = Stops(request.config)
    stops.install()
    # Never raise a signal whose handler is not ours: the default would end this test process.
    assert signal.getsignal(signal.SIGTERM) == stops._handle
    with pytest.raises(KeyboardInterrupt, match=r"^SIGTERM$"):
        signal.raise_signal(signal.SIGTERM)
    assert stops.received == signal.SIGTERM
    signal.raise_signal(signal.SIGTERM)  # `timeout` sends it again, to the whole group: ignored while stopping
    signal.raise_signal(signal.SIGHUP)
    stops.pytest_unconfigure()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL and signal.getsignal(signal.SIGHUP) is signal.SIG_DFL


@pytest.mark.usefixtures("defaults")
def test_an_ignored_sighup_stays_ignored_as_under_nohup(request: pytest.FixtureRequest) -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    stops = Stops(request.config)
    stops.install()
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) == stops._handle
    stops.pytest_unconfigure()
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN


@pytest.mark.usefixtures("defaults")
def test_a_signal_as_the_session_ends_lets_it_end(request: pytest.FixtureRequest) -> None:
    stops = Stops(request.config)
    stops.install()
    assert signal.getsignal(signal.SIGHUP) == stops._handle
    stops._ending = True  # pytest_sessionfinish has begun: what the session closes is not interrupted
    signal.raise_signal(signal.SIGHUP)
    assert stops.received is None
    stops.pytest_unconfigure()


def test_a_hung_up_terminal_writes_nowhere_and_a_live_one_keeps_its_output() -> None:
    terminal, tty = os.openpty()
    copy = os.dup(tty)  # as pytest's capture keeps one of the terminal, to put it back
    try:
        device = os.fstat(tty).st_rdev
        detach(device)  # `kill -HUP` with the terminal still there
        assert os.isatty(tty) and os.isatty(copy)
        os.close(terminal)  # the terminal closes: the kernel hangs it up
        terminal = -1
        with pytest.raises(OSError):
            os.write(tty, b"x")
        detach(device)
        assert os.write(tty, b"the stop's report\n") == 18 and os.write(copy, b"x") == 1
    finally:
        for fd in (terminal, tty, copy):
            if fd >= 0:
                os.close(fd)
