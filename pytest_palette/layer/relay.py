"""Runs a program with one TCP port on its loopback relayed to a Unix socket: the Claude CLI's way to its model.

    python relay.py <socket> <port> -- <program> [args...]

The CLI runs in a network namespace of its own (no network at all); its model endpoint, the harness's forwarder,
listens on a Unix socket bound into its sandbox, and this relays 127.0.0.1:<port> there. So the CLI — and anything
it runs that escapes its tools, or its WebFetch — reaches the model and nothing else. Standard library only: it
runs with the harness's interpreter inside the sandbox, where this package may not be importable.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading


def _pump(source: socket.socket, target: socket.socket) -> None:
    """Copy `source` to `target` until `source` ends, then half-close `target`: one direction's end is not the
    other's. Once `target` takes no more (a refusal answered before its body was read), what `source` still sends is
    read and dropped — left unread, it would make the close a reset that cuts off the answer still on its way."""
    taking = True
    try:
        while data := source.recv(65536):
            if taking:
                try:
                    target.sendall(data)
                except OSError:
                    taking = False
    except OSError:
        pass
    try:
        target.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _connect(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def _serve(listener: socket.socket, path: str) -> None:
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_connect, args=(client, path), daemon=True).start()


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: relay.py <socket> <port> -- <program> [args...]", file=sys.stderr)
        return 2
    path, port, program = argv[0], int(argv[1]), argv[3:]
    listener = socket.create_server(("127.0.0.1", port))
    threading.Thread(target=_serve, args=(listener, path), daemon=True).start()
    child = subprocess.Popen(program)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda number, _frame: child.send_signal(number))
    return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
