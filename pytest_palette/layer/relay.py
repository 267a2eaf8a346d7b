"""Runs a program with one TCP port on its loopback relayed to a Unix socket: the Claude CLI's way to its model.

    python relay.py <socket> <port> -- <program> [args...]

The CLI runs in a network namespace of its own (no network at all); its model endpoint, the harness's forwarder,
listens on a Unix socket bound into its sandbox, and this relays 127.0.0.1:<port> there. So the CLI — and anything
it runs that escapes its tools, or its WebFetch — reaches the model and nothing else. Standard library only: it
runs with the harness's interpreter inside the sandbox, where this package may not be importable.

One thread and one event loop carry every connection and wait for the program: a connection needs no thread of
its own, so an agent that spends its user's processes (a fork loop, up to the item's limit) cannot leave a model
call hanging half-relayed — the relay once could not start a connection's thread and the client waited for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

#: How long a connection waits for the model's endpoint to take it.
CONNECT_SECONDS = 30.0


async def _pump(source: socket.socket, target: socket.socket) -> None:
    """Copy `source` to `target` until `source` ends, then half-close `target`: one direction's end is not the
    other's. Once `target` takes no more (a refusal answered before its body was read), what `source` still sends is
    read and dropped — left unread, it would make the close a reset that cuts off the answer still on its way. The
    loop's socket calls, not its streams: a stream whose write fails closes its reading half too, and the answer
    still to be read is lost."""
    loop = asyncio.get_running_loop()
    taking = True
    with contextlib.suppress(OSError):
        while data := await loop.sock_recv(source, 65536):
            if taking:
                try:
                    await loop.sock_sendall(target, data)
                except OSError:
                    taking = False
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)


async def _reach(upstream: socket.socket, path: str) -> bool:
    """Connect `upstream` to `path`, waiting while its backlog is full. Not the loop's sock_connect: a Unix
    socket's full backlog answers EAGAIN, which that takes for a connection under way (it is not one)."""
    deadline = time.monotonic() + CONNECT_SECONDS
    while True:
        try:
            upstream.connect(path)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.01)
        except OSError:
            return False


async def _connect(client: socket.socket, path: str) -> None:
    with client, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as upstream:
        client.setblocking(False)
        upstream.setblocking(False)
        if not await _reach(upstream, path):
            return
        await asyncio.gather(_pump(client, upstream), _pump(upstream, client))


async def _accept(listener: socket.socket, path: str) -> None:
    """Take each connection as it comes, each relayed by a task of its own."""
    loop = asyncio.get_running_loop()
    listener.setblocking(False)
    connections: set[asyncio.Task[None]] = set()  # held: the loop keeps only weak references to its tasks
    while True:
        try:
            client, _ = await loop.sock_accept(listener)
        except OSError:  # out of descriptors for now: a connection ending frees one
            await asyncio.sleep(0.1)
            continue
        task = asyncio.ensure_future(_connect(client, path))
        connections.add(task)
        task.add_done_callback(connections.discard)


def serve(listener: socket.socket, path: str) -> None:
    """Relay `listener`'s connections to `path` until the process ends (this thread's own event loop)."""
    asyncio.run(_accept(listener, path))


async def _ended(child: subprocess.Popen[bytes]) -> int:
    """The program's exit status, waited for on the loop (its pidfd), not in a thread."""
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[None] = loop.create_future()
    pidfd = os.pidfd_open(child.pid)
    def readable() -> None:
        if not ended.done():
            ended.set_result(None)

    loop.add_reader(pidfd, readable)
    try:
        await ended
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)
    return child.wait()


async def _main(path: str, port: int, program: list[str]) -> int:
    accepting = asyncio.ensure_future(_accept(socket.create_server(("127.0.0.1", port)), path))
    child = subprocess.Popen(program)
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(number, child.send_signal, number)
    try:
        return await _ended(child)
    finally:
        accepting.cancel()


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: relay.py <socket> <port> -- <program> [args...]", file=sys.stderr)
        return 2
    return asyncio.run(_main(argv[0], int(argv[1]), argv[3:]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
