"""Conversations started ahead of their items, several at a time in one process (`--palette-conversations N`).

A real model keeps a conversation waiting most of its time — on the model, on the backend — so a sweep is
latency-bound, and an xdist worker per conversation pays a whole interpreter (imports, a model client, a few
hundred MB) to wait. Here one process has up to N conversations at once, each in a thread of its own, and each
item's judging (its graders' too) follows its conversation in that thread: the items still report one by one in
the session's order (the longest expected first: run/schedule.py), but an item's setup only takes what its thread
did, and no item's judging waits for another's. Threads suffice: a conversation's work is in its subprocesses (the
agent's commands, deck.py, the engine) and in waiting, and the GIL is free while it waits.

A host whose client keeps process-wide state (`Host.concurrent` False; no built-in host since CUGA runs in a
worker of its own) has its conversations one at a time, still ahead of its items. The threads are daemons: a
session that ends early (Ctrl-C, SIGTERM, SIGHUP, -x) closes every conversation still running — its host session,
its sandbox and every process in it — and does not wait for a turn to time out.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field

from ..hosts.base import HostSession


@dataclass
class Ahead:
    """One conversation started ahead of its item: its result, and what to close if the session ends first."""

    future: Future[object] = field(default_factory=Future)
    session: HostSession | None = None
    closers: list[Callable[[], object]] = field(default_factory=list)


class Overlap:
    """Runs the conversations of items ahead of them, at most `limit` at once (one at a time per serial host)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._slots = threading.BoundedSemaphore(limit)
        self._serial: dict[str, threading.Lock] = {}
        self._ahead: dict[str, Ahead] = {}
        self._all: list[Ahead] = []
        self._closed = threading.Event()
        self._lock = threading.Lock()

    def start(self, jobs: Iterable[tuple[str, str | None, Callable[[Ahead], object]]]) -> None:
        """Start `(key, serial group or None, converse)` jobs in order; `converse(ahead)` returns the result an
        item takes with `take(key)`, and registers what must be closed should the session end first."""
        # Each job keeps an Ahead of its own: an item may take (and forget) its key before the job starts.
        started = [(key, self._ahead.setdefault(key, Ahead()), group, converse)
                   for key, group, converse in jobs]
        self._all = [ahead for _, ahead, _, _ in started]
        threading.Thread(target=self._feed, args=(started,), name="palette-overlap", daemon=True).start()

    def _feed(self, jobs: list[tuple[str, Ahead, str | None, Callable[[Ahead], object]]]) -> None:
        # Started in the session's order, so the item pytest runs next is never the one still waiting to start.
        for key, ahead, group, converse in jobs:
            self._slots.acquire()
            if self._closed.is_set():
                self._slots.release()
                ahead.future.cancel()
                continue
            serial = self._serial.setdefault(group, threading.Lock()) if group else None
            threading.Thread(target=self._run, args=(ahead, converse, serial), daemon=True,
                             name=f"palette-conversation-{key}").start()

    def _run(self, ahead: Ahead, converse: Callable[[Ahead], object],
             serial: threading.Lock | None) -> None:
        try:
            if serial is not None:
                serial.acquire()
            try:
                if not ahead.future.set_running_or_notify_cancel():
                    return
                if self._closed.is_set():
                    ahead.future.set_exception(RuntimeError("the session ended before this conversation"))
                    return
                try:
                    ahead.future.set_result(converse(ahead))
                except BaseException as error:  # handed to the item, which reports it as its own
                    ahead.future.set_exception(error)
            finally:
                if serial is not None:
                    serial.release()
        finally:
            self._slots.release()

    def __contains__(self, key: str) -> bool:
        """Whether a conversation was started ahead for `key` and is not yet taken."""
        return key in self._ahead

    def take(self, key: str) -> object:
        """The result of the conversation started for `key` (waits for it); raises what it raised."""
        return self._ahead.pop(key).future.result()

    def close(self) -> None:
        """The session ends: start nothing more, and close every conversation still running — its host session
        (no further command runs) and what it registered (its sandbox: every process in it stops)."""
        self._closed.set()
        closing = []
        for ahead in self._all:  # those an item is waiting to take too
            ahead.future.cancel()
            if ahead.future.running():
                # Side by side: each takes a second or two (its processes stopped, its user's looked for), and
                # Ctrl-C with many conversations in flight must not wait for them one after another.
                closing.append(threading.Thread(target=_close, args=(ahead,), name="palette-close"))
                closing[-1].start()
        for thread in closing:
            thread.join()


def _close(ahead: Ahead) -> None:
    """Close one conversation still running: its host session (no further command runs), then what it registered."""
    if ahead.session is not None:
        ahead.session.close()
    for close in ahead.closers:
        close()
