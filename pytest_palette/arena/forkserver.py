"""A warm process that forks conversations into their items' sandboxes: a start without the imports.

    python forkserver.py <control-fd> <program.py> [<tag> [<listening-fd>]]

A host's worker that must import a large agent (CUGA: about 5 CPU-s of imports, most of it pydantic building
the classes of openai's and mcp's types) pays that once per process it starts. Here it is paid once: this process
loads `program.py`, calls its `warm()` (the imports, with no conversation's data), and then, for each conversation,
forks a child that enters the item's sandbox and runs the program's `main()` with the conversation's channel on its
standard input and output.

How a child enters the sandbox (what `flatpak enter` does, by hand): the harness starts the item's sandbox as it
starts any command of the item — the same bubblewrap argv, keeper, view, limits and user id — around a *holder*,
a shell that says it is ready and then waits. The child joins the holder's namespaces (user, mount, network, ipc,
uts, cgroup, and the pid namespace for the process it forks next), takes the holder's user id, its limits, no
capabilities and no new privileges, and checks that it holds no more than the holder does before it runs anything
of the program. So the conversation is confined exactly as a command of its item is; everything it inherits from
this process is the program's imports and this process's own environment, never another conversation's: this
process is told only each holder's pid, and the environment, folder and words of a conversation reach the child
on its own channel, after the fork.

The control channel (a SOCK_SEQPACKET pair): the harness sends `{"id": n, "holder": pid}` with three descriptors
(the child's stdin, stdout and stderr); this process answers `{"id": n, "pid": p}` (p: the child it forked, the
leader of a process group of its own) or `{"id": n, "error": words}`, and `{"ended": n, "code": c}` once that
child ended. It says `{"ready": true}` once warm, or `{"failed": words}`. Standard library only: this runs with the
harness's interpreter, by path.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import json
import os
import resource
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import IO, Any

if __name__ == "__main__":
    # Run by path, this file's folder leads sys.path: its neighbours (sandbox.py, replay.py …) would shadow the
    # program's own imports.
    sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

#: The holder: it says it is ready once its sandbox is made, then waits for its input to close.
HOLDER = ("/bin/sh", "-c", "echo; exec cat")
#: The namespaces a child joins, in this order (the user namespace first: it grants the right to join the rest).
NAMESPACES = ("user", "mnt", "net", "ipc", "uts", "cgroup", "pid")
#: A child's exit status when it could not enter the sandbox (it says why on its stderr).
ENTER_FAILED = 126
#: The largest control message (a request, an answer).
MESSAGE = 4096

_PR_SET_DUMPABLE, _PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT = 4, 24, 38, 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAPABILITY_VERSION_3 = 0x20080522
_CAP_FIELDS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")


class EnterFailed(RuntimeError):
    """The child could not take the holder's confinement: it runs nothing."""


# -- entering a sandbox: the child's side -------------------------------------------------------------------------


def _status(pid: int | str) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines()
    return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}


def _started(pid: int) -> str:
    # The 22nd field of stat, after the command's name (which may hold spaces and parentheses).
    return Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rpartition(")")[2].split()[19]


#: /proc/<pid>/limits' names: read there, as prlimit(2) on another process takes CAP_SYS_RESOURCE.
LIMITS = {"Max cpu time": resource.RLIMIT_CPU, "Max file size": resource.RLIMIT_FSIZE,
          "Max data size": resource.RLIMIT_DATA, "Max stack size": resource.RLIMIT_STACK,
          "Max core file size": resource.RLIMIT_CORE, "Max resident set": resource.RLIMIT_RSS,
          "Max processes": resource.RLIMIT_NPROC, "Max open files": resource.RLIMIT_NOFILE,
          "Max locked memory": resource.RLIMIT_MEMLOCK, "Max address space": resource.RLIMIT_AS,
          "Max file locks": 10,  # RLIMIT_LOCKS, which the resource module lacks
          "Max pending signals": resource.RLIMIT_SIGPENDING,
          "Max msgqueue size": resource.RLIMIT_MSGQUEUE, "Max nice priority": resource.RLIMIT_NICE,
          "Max realtime priority": resource.RLIMIT_RTPRIO, "Max realtime timeout": resource.RLIMIT_RTTIME}


def _limits(pid: int | str) -> dict[int, tuple[int, int]]:
    found: dict[int, tuple[int, int]] = {}
    for line in Path(f"/proc/{pid}/limits").read_text(encoding="utf-8").splitlines()[1:]:
        for name, number in LIMITS.items():
            if line.startswith(name + " "):
                soft, hard = line[len(name):].split()[:2]
                found[number] = tuple(resource.RLIM_INFINITY if value == "unlimited" else int(value)
                                      for value in (soft, hard))  # type: ignore[assignment]
    if len(found) != len(LIMITS):
        raise EnterFailed(f"/proc/{pid}/limits names {len(found)} of the {len(LIMITS)} limits it should")
    return found


def _lowest(one: int, other: int) -> int:
    return other if one == resource.RLIM_INFINITY else one if other == resource.RLIM_INFINITY else min(one, other)


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise EnterFailed(f"{what}: {os.strerror(error)}")


def _drop_bounding_set(libc: ctypes.CDLL) -> None:
    """No capability can ever be gained again (done while CAP_SETPCAP is still held)."""
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text(encoding="utf-8"))
    for capability in range(last + 1):
        _check(libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0), f"dropping capability {capability}")


def _drop_capabilities(libc: ctypes.CDLL) -> None:
    """No capability left in the ambient, inheritable, permitted and effective sets."""
    _check(libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clearing the ambient capabilities")
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    _check(libc.capset(header, data), "dropping the capabilities")


def enter(holder: int) -> None:
    """Make this process (single-threaded, just forked) a process of the sandbox `holder` runs in. Returns in a new
    child inside the holder's pid namespace; this process waits for it and exits with its status."""
    libc = _libc()
    status, started = _status(holder), _started(holder)
    uid, gid = int(status["Uid"].split()[0]), int(status["Gid"].split()[0])
    limits = _limits(holder)
    if status.get("Seccomp", "0") != "0":
        raise EnterFailed("the holder runs under a seccomp filter, which a joining process cannot take")
    opened: list[tuple[str, int]] = []
    try:
        for name in NAMESPACES:
            theirs = os.readlink(f"/proc/{holder}/ns/{name}")
            if theirs != os.readlink(f"/proc/self/ns/{name}"):
                opened.append((name, os.open(f"/proc/{holder}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC)))
        # Opened by pid: the holder must still be the process whose limits and ids were read.
        if _started(holder) != started:
            raise EnterFailed("the holder ended before its sandbox could be joined")
        for name, descriptor in opened:
            _check(libc.setns(descriptor, 0), f"joining the holder's {name} namespace")
    finally:
        for _, descriptor in opened:
            os.close(descriptor)
    child = os.fork()  # the first process this one makes in the holder's pid namespace
    if child:
        _wait_and_exit(child)
    try:
        for number, (soft, hard) in limits.items():
            # Lowered only (raising a hard limit takes CAP_SYS_RESOURCE, which the harness may lack).
            bound = _lowest(hard, resource.getrlimit(number)[1])
            resource.setrlimit(number, (_lowest(soft, bound), bound))
        _drop_bounding_set(libc)
        if os.getgid() != gid:  # as root: the item's own group and user ids
            os.setgroups([])
            os.setresgid(gid, gid, gid)
        if os.getuid() != uid:
            os.setresuid(uid, uid, uid)
        _drop_capabilities(libc)  # joining a user namespace gave every capability in it
        _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "setting no new privileges")
        # A change of user id leaves a process undumpable (its /proc files root's); the holder's, after its exec,
        # are its own.
        _check(libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0), "setting dumpable")
    except OSError as error:
        raise EnterFailed(f"taking the holder's user id and limits: {error}") from None
    _verify(status, limits, uid, gid)


def _verify(holder: Mapping[str, str], holder_limits: Mapping[int, tuple[int, int]], uid: int, gid: int) -> None:
    """Fail closed: this process holds no capability, id or privilege the holder does not."""
    mine = _status("self")
    for number, (soft, hard) in _limits("self").items():
        theirs = holder_limits[number]
        if any(t != resource.RLIM_INFINITY and (o == resource.RLIM_INFINITY or o > t)
               for o, t in ((soft, theirs[0]), (hard, theirs[1]))):
            raise EnterFailed(f"limit {number} ({soft}, {hard}) above the holder's {theirs}")
    for field in _CAP_FIELDS:
        extra = int(mine.get(field, "0"), 16) & ~int(holder.get(field, "0"), 16)
        if extra:
            raise EnterFailed(f"{field} {extra:#x} more than the holder's")
    if int(mine.get("NoNewPrivs", "0")) < int(holder.get("NoNewPrivs", "0")):
        raise EnterFailed("the holder has no new privileges and this process would")
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        raise EnterFailed(f"user {os.getresuid()} group {os.getresgid()}, not the holder's {uid}:{gid}")


def _wait_and_exit(child: int) -> None:
    """The process between this server and a conversation: outside its pid namespace, it only waits for it."""
    with contextlib.suppress(Exception):
        libc = _libc()
        _drop_bounding_set(libc)
        _drop_capabilities(libc)
    while True:
        try:
            _, status = os.waitpid(child, 0)
        except InterruptedError:
            continue
        except ChildProcessError:
            os._exit(1)
        os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


# -- the server ---------------------------------------------------------------------------------------------------


def _load(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("palette_forked_program", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _forked(control: socket.socket, wake: int, fds: list[int], holder: int, run: Callable[[], int]) -> None:
    """In the child: its descriptors, its sandbox, its program; never returns."""
    code = ENTER_FAILED
    try:
        control.close()
        os.close(wake)
        signal.set_wakeup_fd(-1)
        for number in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
            signal.signal(number, signal.SIG_DFL)
        os.setsid()
        for target, descriptor in enumerate(fds):
            os.dup2(descriptor, target)
        os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        try:
            enter(holder)
        except (EnterFailed, OSError) as error:
            os.write(2, f"palette: the conversation could not enter its sandbox: {error}\n".encode())
            os._exit(ENTER_FAILED)
        import random

        random.seed()  # not the sequence every child of this process would share
        code = run()
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException as error:  # the program's own failure: its words on its stderr
        with contextlib.suppress(Exception):
            os.write(2, f"palette: the forked program raised {type(error).__name__}: {error}\n".encode())
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def serve(control_fd: int, program_path: str, tag: str = "", listen_fd: int | None = None) -> int:
    """Warm `program_path`, then fork for each request on the owner's control channel (`control_fd`) and, with
    `listen_fd`, on each connection accepted there (other sessions of the same user sharing this warm process). Ends
    when the owner's channel closes."""
    owner = socket.socket(fileno=control_fd)
    listener = socket.socket(fileno=listen_fd) if listen_fd is not None else None

    def say(channel: socket.socket, message: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):
            channel.send(json.dumps(message).encode("utf-8"))

    try:
        program = _load(program_path)
        program.warm()
    except BaseException as error:
        say(owner, {"failed": f"{type(error).__name__}: {error}"[:2000]})
        return 1
    import gc

    gc.collect()
    gc.freeze()  # the warm objects stay out of each child's collections: fewer pages copied
    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    ready = {"ready": True, "tag": tag}
    say(owner, ready)
    channels = {owner.fileno(): owner}
    children: dict[int, tuple[socket.socket, int]] = {}
    while True:
        watched = [*channels, wake_read, *([listener.fileno()] if listener is not None else [])]
        readable, _, _ = select.select(watched, [], [])
        if wake_read in readable:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_read, 4096)
        _reap(children, say)
        if listener is not None and listener.fileno() in readable:
            with contextlib.suppress(OSError):
                accepted, _ = listener.accept()
                channels[accepted.fileno()] = accepted
                say(accepted, ready)
        for number in [number for number in readable if number in channels]:
            channel = channels[number]
            try:
                data, fds, _, _ = socket.recv_fds(channel, MESSAGE, 3)
            except OSError:
                data, fds = b"", []
            if not data:  # a session is gone: its conversations end with their items' keepers
                if channel is owner:
                    return 0
                del channels[number]
                channel.close()
                continue
            _fork(channel, data, fds, children, say, lambda: (wake_write, program.main))


def _fork(channel: socket.socket, data: bytes, fds: list[int], children: dict[int, tuple[socket.socket, int]],
          say: Callable[[socket.socket, dict[str, Any]], None],
          child: Callable[[], tuple[int, Callable[[], int]]]) -> None:
    """One request: a child forked for it, and its pid said; or why not."""
    try:
        try:
            request = json.loads(data)
            ident, holder = int(request["id"]), int(request["holder"])
            if len(fds) != 3:
                raise ValueError(f"{len(fds)} descriptors, not 3")
        except (ValueError, KeyError, TypeError) as error:
            say(channel, {"id": None, "error": f"a request it cannot read: {error}"})
            return
        try:
            pid = os.fork()
        except OSError as error:
            say(channel, {"id": ident, "error": f"fork: {error}"})
            return
        if pid == 0:
            wake, run = child()
            _forked(channel, wake, fds, holder, run)
        children[pid] = (channel, ident)
        say(channel, {"id": ident, "pid": pid})
    finally:
        for descriptor in fds:
            os.close(descriptor)


def _reap(children: dict[int, tuple[socket.socket, int]],
          say: Callable[[socket.socket, dict[str, Any]], None]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid in children:
            channel, ident = children.pop(pid)
            say(channel, {"ended": ident, "code": os.waitstatus_to_exitcode(status)})


# -- the harness's side -------------------------------------------------------------------------------------------


class ForkFailed(RuntimeError):
    """The server could not warm up, or could not fork a child (its words)."""


class Forked:
    """A child of the server, as the harness holds it: its pipes, and its end as the server saw it."""

    def __init__(self, pid: int, stdin: IO[bytes], stdout: IO[bytes], stderr: IO[bytes],
                 holder: subprocess.Popen[bytes] | None = None) -> None:
        self.pid, self.stdin, self.stdout, self.stderr = pid, stdin, stdout, stderr
        #: The process that holds the sandbox the child entered (its stderr is the child's).
        self.holder = holder
        self.returncode: int | None = None
        self._ended = threading.Event()

    def release(self) -> None:
        """Let the holder end (its sandbox's keeper, which the harness stops, holds what is left)."""
        if self.holder is not None:
            _release(self.holder)

    def _end(self, code: int) -> None:
        self.returncode = code
        self._ended.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired("forked conversation", timeout or 0)
        assert self.returncode is not None
        return self.returncode


class ForkServer:
    """One warm process of `program` (its `warm()` run once), forking children into items' sandboxes: started here
    (and, with `listener`, shared with other sessions of this user that connect to it), or, with `address`, one
    already running that another session shares. `tag` names what it warmed: a shared one that says another tag is
    not used."""

    def __init__(self, program: Path, env: Mapping[str, str], cwd: Path, python: str = sys.executable, *,
                 tag: str = "", listener: socket.socket | None = None, address: str | None = None) -> None:
        self.program, self.env, self.cwd, self.python = program, dict(env), cwd, python
        self.tag, self.listener, self.address = tag, listener, address
        self._started = False
        self._process: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None
        self._lock = threading.Lock()
        self._sending = threading.Lock()
        self._ready = threading.Event()
        self._failed: str | None = None
        self._waiting: dict[int, tuple[threading.Event, list[dict[str, Any]]]] = {}
        self._children: dict[int, Forked] = {}
        self._count = 0
        self._tail: list[str] = []

    def start(self) -> ForkServer:
        with self._lock:
            if self._started:
                return self
            self._started = True
            if self.address is not None:
                ours = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                try:
                    ours.connect(self.address)
                except OSError as error:
                    ours.close()
                    self._failed = f"no shared warm process at {self.address}: {error}"
                    return self
            else:
                ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                shared = [self.listener.fileno()] if self.listener is not None else []
                try:
                    self._process = subprocess.Popen(
                        [self.python, str(Path(__file__).resolve()), str(theirs.fileno()), str(self.program),
                         self.tag, *map(str, shared)],
                        pass_fds=[theirs.fileno(), *shared], env=self.env, cwd=self.cwd, stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
                finally:
                    theirs.close()
                threading.Thread(target=self._keep_tail, name="palette-forkserver-log", daemon=True).start()
            self._control = ours
            threading.Thread(target=self._read, name="palette-forkserver", daemon=True).start()
        return self

    def usable(self, deadline: float) -> bool:
        """Whether it is (or becomes by `deadline`) warm, for this tag."""
        self.start()
        while not self._ready.wait(min(0.5, max(deadline - time.monotonic(), 0.0))):
            if self._failed is not None or time.monotonic() >= deadline:
                return False
        return True

    def enter(self, confined: Callable[[list[str]], list[str]], cwd: Path, env: Mapping[str, str],
              deadline: float) -> Forked:
        """A child run in a sandbox of its own: `confined(argv)` is the argv that runs `argv` in it (as a command of
        the item is run), which starts a holder there for the child to join. ForkFailed when the sandbox or the
        child cannot start by `deadline` (time.monotonic)."""
        err_read, err_write = os.pipe()
        try:
            holder = subprocess.Popen(confined(list(HOLDER)), cwd=cwd, env=dict(env), stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=err_write, start_new_session=True)
        except OSError as error:
            os.close(err_read)
            os.close(err_write)
            raise ForkFailed(f"its sandbox could not start: {error}") from None
        forked = None
        try:
            assert holder.stdout is not None
            ready = select.select([holder.stdout], [], [], max(deadline - time.monotonic(), 0.0))[0]
            if not ready or not holder.stdout.readline():
                raise ForkFailed("its sandbox did not start" + _available(err_read))
            holder.stdout.close()
            forked = self.spawn(leaf(holder.pid), deadline, stderr=err_write)
            forked.stderr = os.fdopen(err_read, "rb")
            forked.holder = holder
            return forked
        except BaseException:
            if forked is None:
                os.close(err_read)
            _release(holder)
            raise
        finally:
            os.close(err_write)

    def spawn(self, holder: int, deadline: float, stderr: int | None = None) -> Forked:
        """A child run in the sandbox `holder` runs in (its stderr `stderr`, else a pipe of its own); ForkFailed
        when the server is not (or cannot be) warm by `deadline` (time.monotonic), or cannot fork."""
        if not self.usable(deadline):
            raise ForkFailed(self._failed or "it was not warm in time" + self._tail_words())
        pipes = [os.pipe() for _ in range(2 if stderr is not None else 3)]
        theirs = [pipes[0][0], pipes[1][1], pipes[2][1] if stderr is None else os.dup(stderr)]
        ours = [pipes[0][1], pipes[1][0], *([pipes[2][0]] if stderr is None else [])]
        event, answer = threading.Event(), list[dict[str, Any]]()
        with self._lock:
            self._count += 1
            ident = self._count
            self._waiting[ident] = (event, answer)
        try:
            assert self._control is not None
            with self._sending:
                socket.send_fds(self._control, [json.dumps({"id": ident, "holder": holder}).encode()], theirs)
        except OSError as error:
            for descriptor in ours:
                os.close(descriptor)
            raise ForkFailed(f"it is gone ({error})" + self._tail_words()) from None
        finally:
            for descriptor in theirs:
                os.close(descriptor)
        if not event.wait(max(deadline - time.monotonic(), 1.0)) or "pid" not in answer[0]:
            for descriptor in ours:
                os.close(descriptor)
            said = answer[0].get("error") if answer else None
            raise ForkFailed(said or "it did not answer" + self._tail_words())
        forked = Forked(int(answer[0]["pid"]), os.fdopen(ours[0], "wb"), os.fdopen(ours[1], "rb"),
                        os.fdopen(ours[2], "rb") if len(ours) > 2 else None)  # type: ignore[arg-type]
        with self._lock:
            self._children[ident] = forked
            ended = self._waiting.pop(ident, (None, []))[1][1:]
        for message in ended:  # it ended before it was handed over
            forked._end(int(message["code"]))
        return forked

    def _read(self) -> None:
        assert self._control is not None
        while True:
            try:
                data = self._control.recv(MESSAGE)
            except OSError:
                data = b""
            if not data:
                break
            try:
                message = json.loads(data)
            except ValueError:
                continue
            if "ready" in message:
                if message.get("tag", "") == self.tag:
                    self._ready.set()
                else:
                    self._failed = f"it warmed {message.get('tag')!r}, not {self.tag!r}"
            elif "failed" in message:
                self._failed = str(message["failed"])
            elif "ended" in message:
                with self._lock:
                    forked = self._children.pop(int(message["ended"]), None)
                    waiting = self._waiting.get(int(message["ended"]))
                if forked is not None:
                    forked._end(int(message["code"]))
                elif waiting is not None:
                    waiting[1].append(message)
            elif message.get("id") is not None:
                with self._lock:
                    waiting = self._waiting.get(int(message["id"]))
                if waiting is not None:
                    waiting[1].insert(0, message)
                    waiting[0].set()
        # The server ended: every child it had is reported gone (the item's keeper stops what is left of it).
        if self._failed is None:
            self._failed = "it ended" + self._tail_words()
        with self._lock:
            children, self._children = self._children, {}
            pending = [event for event, _ in self._waiting.values()]
        for forked in children.values():
            forked._end(-1)
        for event in pending:
            event.set()

    def _keep_tail(self) -> None:
        assert self._process is not None and self._process.stderr is not None
        for line in self._process.stderr:
            self._tail = [*self._tail[-11:], line[:300].decode("utf-8", "replace").strip()]

    def _tail_words(self) -> str:
        tail = " | ".join(line for line in self._tail if line)[-600:]
        return f"; the last of its log: {tail}" if tail else ""

    def close(self) -> None:
        """Stop the server (its children end with their items' keepers, which the harness stops)."""
        process, control = self._process, self._control
        if control is not None:
            with contextlib.suppress(OSError):
                control.shutdown(socket.SHUT_RDWR)
            control.close()
        if process is not None:
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _release(holder: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(OSError, ValueError):
        if holder.stdin is not None:
            holder.stdin.close()
    try:
        holder.wait(5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()


def leaf(pid: int) -> int:
    """The last process of the chain `pid` started (the holder, past its sandbox's wrappers)."""
    while True:
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text(encoding="utf-8").split()
        except OSError:
            return pid
        if not children:
            return pid
        pid = int(children[-1])


def _available(descriptor: int) -> str:
    """What a pipe holds now, as the end of an error's words."""
    said = b""
    while select.select([descriptor], [], [], 0)[0] and len(said) < 4096:
        chunk = os.read(descriptor, 4096)
        if not chunk:
            break
        said += chunk
    words = " ".join(said.decode("utf-8", "replace").split())[-400:]
    return f": {words}" if words else ""


def main(argv: list[str]) -> int:
    if not 2 <= len(argv) <= 4:
        print("usage: forkserver.py <control-fd> <program.py> [<tag> [<listening-fd>]]", file=sys.stderr)
        return 2
    return serve(int(argv[0]), argv[1], argv[2] if len(argv) > 2 else "", int(argv[3]) if len(argv) > 3 else None)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
