"""The sandbox every command of an agent runs in: bubblewrap, one item's view of the machine, no secrets.

What a command sees (`--palette-sandbox bubblewrap`, the default):
- the item's `work/` read-write, the skill installed there read-only, the skill's trace file (deck.py
  appends to it) and nothing else of the run folder — not `input/` with the scripted replies, not
  `case.json` with the expected answers, not other items, not the ledger;
- the system (/usr, /etc …) and the Python this benchmark runs on read-only; the caller's home, /tmp and
  every other folder absent (an empty /tmp of its own);
- no network: a loopback of its own, so not even the model's port on this machine's loopback;
- an environment from an allow-list (PATH, locale, HOME = work/, the PALETTE_* the skill reads): a model key
  stays with the client that calls the model;
- only the item's own processes in /proc (not the harness's environment, not the claude CLI's);
- bounds on everything it can fill (`Limits`): processes, address space, CPU, /tmp and /dev/shm, any one file
  (the trace too), and work/ as a whole.

One set of namespaces per item: when the item opens, a "keeper" starts — `bwrap --unshare-user --unshare-pid`
around a sleeper — and every command of the item joins its user and pid namespaces (`--userns`/`--pidns`)
with a mount namespace of its own. deck.py's detached builds outlive the command that started them (a later
command collects them) and live until the keeper ends; ending the keeper ends every process of the item, as
the pid namespace dies with its init. The process limit counts per user namespace (Linux >= 5.14), so a fork
loop in one item leaves the items held beside it, and the harness, their share. As root the keeper starts as a
user id of the item's own (`setpriv`): nothing inside maps to root, and every process is found by its id.

bubblewrap builds the namespaces; we only choose what to bind. `--palette-sandbox none` runs commands with the
allow-listed environment but otherwise unconfined, and every record, table and report then says
"unconfined".
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import itertools
import json
import os
import pwd
import secrets
import select
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil

from ..backend import REFERENCE_HOME
from . import leftovers, skill_runs

BUBBLEWRAP = "bubblewrap"
UNCONFINED = "unconfined"
#: `--palette-sandbox` values → what records say.
MODES = {"bubblewrap": BUBBLEWRAP, "none": UNCONFINED}
INSTALL_HINT = ("install bubblewrap (Debian: apt-get install bubblewrap; `make setup` does) "
                "or pass --palette-sandbox none")

#: The Palette settings the skill's backend reads (deck.py, the reference engine, a checkout's palette.py); any
#: other PALETTE_* of the caller's stays out unless named with --palette-sandbox-env.
BACKEND_VARIABLES = frozenset({"PALETTE_TRACE", "PALETTE_HOME", "PALETTE_URL", "PALETTE_PYTHON",
                               "PALETTE_ENGINE_LATENCY"})
#: Names a command's environment keeps, beside LC_*; everything else (keys, tokens, the caller's HOME) stays
#: out. VIRTUAL_ENV and the UV_/XDG_ cache folders are CUGA's shell settings.
ALLOWED = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR", "VIRTUAL_ENV", "UV_NO_CONFIG",
                     "UV_PYTHON_DOWNLOADS", "UV_CACHE_DIR", "XDG_CACHE_HOME", "NO_COLOR",
                     "PYTHONIOENCODING"}) | BACKEND_VARIABLES
ALLOWED_PREFIXES = ("LC_",)
#: Top-level system folders a command may read (those that exist here).
SYSTEM = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt")
#: Where the per-item user ids are handed out (as root): one lock file per id, held while the item runs.
ID_LOCKS = Path("/tmp/palette-sandbox-ids")
FIRST_ID, IDS = 420_000, 10_000
#: A command's exit status when its item's sandbox has ended (the keeper is gone): not a verdict on the skill.
ENDED = 125
#: The keeper: the init of the item's pid namespace (reaping what is left to it, as an init must), until the
#: harness's end of its input closes — also when pytest is killed unannounced. Then the kernel kills the rest.
KEEPER = ("python3", "-c", "import os, signal, sys\n"
          "def reap(*_):\n"
          "    try:\n"
          "        while os.waitpid(-1, os.WNOHANG)[0] > 0:\n"
          "            pass\n"
          "    except ChildProcessError:\n"
          "        pass\n"
          "signal.signal(signal.SIGCHLD, reap)\n"
          "sys.stdin.buffer.read()\n")
#: Where the kernel says whether unprivileged user namespaces are allowed (Debian, Ubuntu's AppArmor, all).
SYSCTL = Path("/proc/sys")


@dataclass(frozen=True)
class Limits:
    """What an item's agent can fill. Generous for a deck, tight for a fork bomb, a runaway loop or a disk
    filler."""

    #: processes of the item at once (its user namespace's RLIMIT_NPROC)
    processes: int = 512
    #: address space of each process (RLIMIT_AS)
    memory_bytes: int = 8 * 2**30
    #: CPU seconds of each process (RLIMIT_CPU)
    cpu_seconds: int = 3600
    #: each command's /tmp, a tmpfs: memory the address-space limit does not count
    tmp_bytes: int = 256 * 2**20
    #: each command's /dev/shm, a tmpfs too
    shm_bytes: int = 64 * 2**20
    #: any one file a command writes, the trace included (RLIMIT_FSIZE)
    file_bytes: int = 256 * 2**20
    #: work/ as a whole, measured after each command: over it, the item's processes are stopped
    work_bytes: int = 2 * 2**30


def allowed_environment(env: Mapping[str, str], home: Path, passed: Iterable[str] = (),
                        withheld: Iterable[str] = ()) -> dict[str, str]:
    """The environment a command gets: the allow-listed part of `env` (and the `passed` names the user chose,
    `--palette-sandbox-env`) but the `withheld` names (the credentials file's), HOME in the agent's folder."""
    chosen, refused = set(passed), set(withheld) - set(passed)
    kept = {name: value for name, value in env.items() if name not in refused
            and (name in ALLOWED or name in chosen or name.startswith(ALLOWED_PREFIXES))}
    kept["HOME"] = str(home)
    kept.setdefault("PATH", os.defpath)
    return kept


def problem(mode: str) -> str | None:
    """Why `--palette-sandbox <mode>` cannot run here, in one line naming the fix; None when it can."""
    if mode not in MODES:
        return f"--palette-sandbox {mode!r}: choose one of {', '.join(MODES)}"
    if MODES[mode] == UNCONFINED:
        return None
    found = shutil.which("bwrap")
    if found is None:
        return f"the agent's sandbox needs bubblewrap (bwrap), which is not on PATH: {INSTALL_HINT}"
    # What an item's keeper does, as a user without privileges (as root too: the keeper runs as the item's id).
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"] if os.geteuid() == 0 else []
    probe = [*nobody, found, "--unshare-user", "--unshare-pid", *_namespaces(network=False),
             *_binds(_system(), [], [], Limits()), "--", "/bin/true"]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=30, check=False, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bubblewrap could not start a sandbox here ({error}): {INSTALL_HINT}"
    if done.returncode:
        said = " ".join(done.stderr.split())[:200] or f"exit {done.returncode}"
        return userns_policy() or f"bubblewrap could not start a sandbox here ({said}): {INSTALL_HINT}"
    return None


def userns_policy(sysctl: Path = SYSCTL) -> str | None:
    """The distribution's policy that refuses unprivileged user namespaces, in one line naming the fix; None
    when none does."""
    def value(name: str) -> str:
        try:
            return (sysctl / name).read_text(encoding="utf-8").strip()
        except OSError:
            return ""

    lead = "the agent's sandbox needs unprivileged user namespaces, which"
    if value("kernel/unprivileged_userns_clone") == "0":
        return (f"{lead} this kernel refuses (kernel.unprivileged_userns_clone=0): run "
                "`sysctl -w kernel.unprivileged_userns_clone=1` (as root), or pass --palette-sandbox none")
    if value("kernel/apparmor_restrict_unprivileged_userns") == "1":
        return (f"{lead} Ubuntu's AppArmor refuses (kernel.apparmor_restrict_unprivileged_userns=1): run "
                "`sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` (as root) or give bwrap an AppArmor "
                "profile that allows userns, or pass --palette-sandbox none")
    if value("user/max_user_namespaces") == "0":
        return (f"{lead} this machine allows none of (user.max_user_namespaces=0): run "
                "`sysctl -w user.max_user_namespaces=10000` (as root), or pass --palette-sandbox none")
    return None


class Sandbox:
    """One item's sandbox: how each command the agent runs is started, with which environment, and how
    everything it started is stopped when the item ends."""

    def __init__(self, work: Path, env: Mapping[str, str], mode: str = "bubblewrap", trace: Path | None = None,
                 limits: Limits = Limits(), passed: Iterable[str] = (), withheld: Iterable[str] = (),
                 record: Path | None = None, scripts: frozenset[str] = frozenset()) -> None:
        """`record`, when given, is where the record of the skill's runs is kept (`skill_runs`): its socket is bound
        into every command's view, and a run is the skill's when its file hashes to one of `scripts`."""
        self.work, self.trace, self.limits = work, trace, limits
        self._record_at, self._scripts = record, scripts
        self.recorder: skill_runs.Recorder | None = None
        self.kind = MODES[mode]
        self.withheld = tuple(sorted(set(withheld) - set(passed)))
        self.env = allowed_environment(env, work, passed, withheld)
        #: The values of the withheld names (the credentials file's): hosts redact them wherever they redact.
        self.secrets = sorted({env[name] for name in withheld if len(env.get(name, "")) >= 4}, key=len, reverse=True)
        self._readable: list[Path] = list(dict.fromkeys(
            _interpreter_folders() + _backend_folders(env)
            + path_folders(self.env.get("PATH", ""), keep_out=[work.parent] + ([trace.parent] if trace else []))))
        self._writable: list[Path] = [work] + ([trace] if trace is not None else [])
        self._protected: list[Path] = []
        self._bwrap = shutil.which("bwrap") or "bwrap"
        self._lock: int | None = None
        self._keeper: _Keeper | None = None
        self.uid: int | None = None
        self.network = backend_needs_network(env)
        if self.confined and os.geteuid() == 0:
            self.uid = self._claim_id()

    @property
    def confined(self) -> bool:
        return self.kind == BUBBLEWRAP

    # -- the view --------------------------------------------------------------------------------------

    def readable(self, *paths: Path) -> None:
        """Let commands read these (a client's own files)."""
        self._readable += [path for path in paths if path not in self._readable]

    def writable(self, *paths: Path) -> None:
        """Let commands write these (created and handed to the item's user id when they are folders)."""
        for path in paths:
            if path not in self._writable:
                self._writable.append(path)
            self.own(path)

    def protect(self, path: Path) -> None:
        """Make `path` (inside work/: the installed skill) read-only to commands."""
        if path not in self._protected:
            self._protected.append(path)

    def own(self, path: Path) -> None:
        """Make `path` (a folder; the trace, a file) and hand it to the item's user id, so commands can write it
        (as root; elsewhere they run as the caller, who owns it)."""
        if not path.exists():
            if path == self.trace:
                path.touch()
            else:
                path.mkdir(parents=True, exist_ok=True)
        if self.uid is not None:
            os.chown(path, self.uid, self.uid)

    def prepare(self) -> None:
        """Before the first command: the folders commands write are the item's user's, and the item's keeper
        (its user and pid namespaces) runs."""
        for path in self._writable:
            self.own(path)
        if self.confined and (self._keeper is None or not self._keeper.alive()):
            self._keeper = _Keeper.start(self._as_item() + [self._bwrap], self.limits)
        if self._record_at is not None and self.recorder is None:
            self.recorder = skill_runs.Recorder(self._record_at, self._scripts, self.holds, self.work).start()
            if not self.confined:  # no place of its own to bind it: the scripts are told where it is
                self.env[skill_runs.VARIABLE] = str(self.recorder.socket)

    def holds(self, pid: int) -> bool:
        """Whether process `pid` is one of this item's: in its keeper's pid namespace, or (as root) of its user id;
        not as root, in a user namespace below the harness's (a claude command's runs below the client's own)."""
        if not self.confined:
            return True
        try:
            if self._keeper is not None and os.readlink(f"/proc/{pid}/ns/pid") == self._keeper.pidns:
                return True
            if self.uid is not None:
                return psutil.Process(pid).uids().real == self.uid
            return os.readlink(f"/proc/{pid}/ns/user") != os.readlink("/proc/self/ns/user")
        except (OSError, psutil.Error):
            return False

    def record_settled(self) -> None:
        """Every run of the skill's script that has ended is in its record (its last words may be on their way)."""
        if self.recorder is not None:
            self.recorder.settle()

    # -- commands --------------------------------------------------------------------------------------

    def argv(self, command: str, cwd: Path | None = None, *, shell: str = "/bin/sh",
             extra: Iterable[Path] = ()) -> list[str]:
        """The argv that runs `command` with `shell -c` inside this sandbox (in `cwd`, default work/), with
        `extra` files readable for this command only (a long command's script)."""
        if not self.confined:
            return [shell, "-c", command]
        if self._keeper is None:
            self.prepare()
        return [*self.wrap(cwd or self.work, network=self.network, uid=self.uid, extra=extra), shell, "-c",
                command]

    def _socket_bind(self, nested: bool) -> tuple[str, str] | None:
        """The record's socket, as (where it is, where a command finds it); from inside a client's own sandbox
        (`nested`), it is already where commands find it."""
        if self.recorder is None:
            return None
        target = str(skill_runs.SOCKET)
        return (target if nested else str(self.recorder.socket)), target

    def wrap(self, cwd: Path | None, *, network: bool, uid: int | None, limits: bool = True,
             extra: Iterable[Path] = (), join: bool = True, hidden: Iterable[Path] = (),
             nested: bool = False) -> list[str]:
        """The prefix before a program's own argv: a shell that joins the item's keeper (as `uid`), bubblewrap
        with this item's view, the limits, and after the program a look at work/'s size. With `limits` False
        (a client: the claude CLI) no keeper and no limits: a sandbox of its own, with `uid`, or a user
        namespace of its own. With `join` False, a command gets a user namespace of its own too. `hidden` paths
        (and what is under them) are left out of the view."""
        gone = tuple(hidden)

        def shown(paths: Iterable[Path]) -> list[Path]:
            return [p for p in paths if os.path.exists(p) and not any(p == h or h in p.parents for h in gone)]

        # A client whose commands join the keeper (as root) keeps the machine's /proc, unchanged: the kernel lets
        # a command mount a /proc of the keeper's pid namespace only where a whole /proc is already visible.
        view = _binds(_system() + shown([*self._readable, *extra]), shown(self._writable), shown(self._protected),
                      self.limits, proc=limits or uid is None, socket=self._socket_bind(nested))
        chdir = ["--chdir", str(cwd)] if cwd else []
        if not limits:
            # A client (the claude CLI) gets no limits: it reserves more address space than fits a command, and
            # its commands' sandbox (`script`) limits them. It stays outside the keeper: no command sees it.
            switch = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                      "--bounding-set=-all", "--"] if uid is not None else []
            return [self._bwrap, *_namespaces(network), *([] if uid is not None else ["--unshare-user"]), *view,
                    *chdir, "--", *switch]
        bounds = ["prlimit", f"--nproc={self.limits.processes}", f"--as={self.limits.memory_bytes}",
                  f"--cpu={self.limits.cpu_seconds}", f"--fsize={self.limits.file_bytes}", "--"]
        if self._keeper is None or not join:  # nested where the keeper cannot be joined
            return [self._bwrap, *_namespaces(network), "--unshare-user", *view, *chdir, "--", *bounds]
        if uid is not None:
            # As root: bwrap joins the keeper's pid namespace only (root cannot join a user namespace that maps
            # no root), binds what only root can reach, and the command then runs as the item's user id.
            switch = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                      "--bounding-set=-all", "--"]
            return ["/bin/sh", "-c", self._keeper.joining(self.work, self.limits, userns=False), "palette-sandbox",
                    self._bwrap, "--pidns", "4", *_namespaces(network), *view, *chdir, "--", *switch, *bounds]
        return ["/bin/sh", "-c", self._keeper.joining(self.work, self.limits, userns=True), "palette-sandbox",
                self._bwrap, "--userns", "3", "--pidns", "4", *_namespaces(network), *view, *chdir, "--", *bounds]

    def program(self, argv: list[str], cwd: Path | None = None, *, network: bool | None = None) -> list[str]:
        """`argv` (a program of the agent's own: a host's worker that runs the model's code) confined as a
        command is — joining the item's keeper, under its limits, as its user id — but for the network, which
        defaults to the commands' and may be taken away (a worker that reaches its model through a socket)."""
        if not self.confined:
            return argv
        if self._keeper is None:
            self.prepare()
        return [*self.wrap(cwd or self.work, network=self.network if network is None else network, uid=self.uid),
                *argv]

    def script(self, path: Path, shell: str = "/bin/bash", hidden: Iterable[Path] = ()) -> Path:
        """A program that runs its one argument (a command line) inside this sandbox with the allow-listed
        environment — for a client that runs commands itself and takes a wrapper for them (the Claude CLI's
        CLAUDE_CODE_SHELL_PREFIX). Run from inside `client()`: as root the client runs as the item's user id
        outside the keeper, and the script joins it (a command cannot see the client's process, its
        /proc/<pid>/environ or root); not as root the client's own user namespace cannot, and each command gets a
        user namespace of its own, below the client's. `hidden`: the client's own folders, which its commands
        must not see."""
        env = " ".join(shlex.quote(f"{name}={value}") for name, value in sorted(self.env.items()))
        if self.confined:
            if self._keeper is None:
                self.prepare()
            # No --chdir: the client runs each command in its own current directory. No uid: the client's
            # sandbox already switched to the item's.
            run = shlex.join(self.wrap(None, network=self.network, uid=None, join=self.uid is not None,
                                       hidden=hidden, nested=True))
            body = f'exec env -i {env} {run} {shell} -c "$1"'
        else:
            body = f'exec env -i {env} {shell} -c "$1"'
        path.write_text(f"#!/bin/sh\n# The sandbox of every command this item's agent runs (pytest-palette).\n"
                        f"{body}\n", encoding="utf-8")
        path.chmod(0o755)
        return path

    def client(self, argv: list[str], cwd: Path, network: bool = True) -> list[str]:
        """`argv` (a host's client that runs the agent's tools itself: the Claude CLI) inside this sandbox's
        view of the files, with the network it needs to reach its model — or none, when it reaches its model
        another way (a socket bound in); its commands go through `script()`, which takes the network away."""
        if not self.confined:
            return argv
        return [*self.wrap(cwd, network=network, uid=self.uid, limits=False), *argv]

    # -- the end ---------------------------------------------------------------------------------------

    def stop(self, grace: float = 2.0) -> list[int]:
        """Stop every process the agent started that still runs: the keeper, and with it the item's pid
        namespace; by the item's user id (as root); by the trace path in their environment (unconfined, and
        a client's commands not as root)."""
        stopped = self._keeper.stop() if self._keeper is not None else []
        stopped += leftovers.stop(self.trace, grace) if self.trace is not None else []
        if self.uid is not None:
            stopped += _kill_user(self.uid)
        self.record_settled()  # the runs just stopped are written down as ended
        return stopped

    def processes(self) -> list[int]:
        """The item's processes running now: those in its keeper's pid namespace, and (as root) of its user id."""
        found = self._keeper.members() if self._keeper is not None else []
        if self.uid is not None:
            found += [process.pid for process in _of_user(self.uid) if process.pid not in found]
        return found

    def close(self) -> None:
        """Stop what is left and give the user id back."""
        try:
            self.stop()
        finally:
            if self.recorder is not None:
                self.recorder.close()
                self.recorder = None
            if self._lock is not None:
                os.close(self._lock)
                self._lock = None

    def _as_item(self) -> list[str]:
        """The switch to the item's user id (as root), so the keeper's namespaces are that id's."""
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups", "--"] \
            if self.uid is not None else []

    def _claim_id(self) -> int:
        """A user id no other running item holds (a lock file per id: the kernel drops a dead holder's lock)."""
        ID_LOCKS.mkdir(mode=0o755, exist_ok=True)
        start = secrets.randbelow(IDS)  # not the id just given back: its killed processes may not be reaped yet
        for offset in range(IDS):
            uid = FIRST_ID + (start + offset) % IDS
            descriptor = os.open(ID_LOCKS / f"{uid}.lock", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(descriptor)
                continue
            # Left by a crashed holder, running or not yet reaped: let them go first. One look at every process
            # when there are none (each look reads the status of every process on the machine).
            if _of_user(uid, zombies=True):
                _kill_user(uid)
                os.close(descriptor)
                continue
            self._lock = descriptor
            return uid
        raise RuntimeError(f"every sandbox user id in {ID_LOCKS} is taken")


class KeeperFailed(RuntimeError):
    """The item's keeper could not start: bubblewrap refused (one line, from bwrap)."""


@dataclass
class _Keeper:
    """The init of one item's user and pid namespaces (KEEPER): every command joins them, and killing it ends
    every process of the item."""

    process: subprocess.Popen[bytes]
    pid: int  #: the namespaces' init, as this machine numbers it
    pidns: str  #: its pid namespace ("pid:[inode]"): a command joins it only while it is the same

    @classmethod
    def start(cls, bwrap: list[str], limits: Limits) -> _Keeper:
        reading, writing = os.pipe()
        # Only the system, and no /proc or /dev of its own: then bwrap makes one user namespace, not a second
        # nested in it, and the one a command joins stays the one the pid namespace belongs to.
        system = [arg for path in _system() for arg in (["--symlink", os.readlink(path), str(path)]
                  if path.is_symlink() else ["--ro-bind", str(path), str(path)])]
        # It reads a pipe only this process writes: should pytest die unannounced (SIGKILL), the pipe closes, the
        # keeper ends, and the item's processes with it. bwrap's own init would wait for them instead.
        argv = [*bwrap, "--unshare-user", "--unshare-pid", "--as-pid-1", *_namespaces(network=False), *system,
                "--info-fd", str(writing), "--", *KEEPER]
        try:
            # An environment of its own: the item's commands can read the keeper's, as it runs as their user.
            process = subprocess.Popen(argv, pass_fds=[writing], stdin=subprocess.PIPE, env={"PATH": os.defpath},
                                       cwd="/", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                       start_new_session=True)
        finally:
            os.close(writing)
        with os.fdopen(reading, "rb") as info:
            said = b""
            # bwrap writes {"child-pid": N} once the namespaces exist, then closes its end.
            while select.select([info], [], [], 30)[0]:
                chunk = os.read(info.fileno(), 4096)
                if not chunk:
                    break
                said += chunk
        try:
            pid = int(json.loads(said)["child-pid"])
            pidns = os.readlink(f"/proc/{pid}/ns/pid")
        except (ValueError, KeyError, OSError):
            process.kill()
            _, err = process.communicate()
            raise KeeperFailed("bubblewrap could not start the item's sandbox: "
                               + (" ".join(err.decode(errors="replace").split())[:200] or "no answer")) from None
        return cls(process, pid, pidns)

    def alive(self) -> bool:
        try:
            return os.readlink(f"/proc/{self.pid}/ns/pid") == self.pidns
        except OSError:
            return False

    def joining(self, work: Path, limits: Limits, *, userns: bool) -> str:
        """The shell that opens the keeper's pid namespace as fd 4 (and with `userns` its user namespace as fd 3)
        for bwrap, runs its arguments, and then measures work/: over `limits.work_bytes`, it says so and ends
        the item's processes."""
        ns = f"/proc/{self.pid}/ns"
        ended = f"echo 'palette: the sandbox of this item has ended: its processes were stopped' >&2; exit {ENDED}"
        bound_kib = limits.work_bytes // 1024
        over = (f"palette: work/ holds $used KiB (its files' sizes or the blocks they take, whichever is more), "
                f"over the bound of this item ({bound_kib} KiB): its processes were stopped")
        opened = f"3<{ns}/user 4<{ns}/pid" if userns else f"4<{ns}/pid"
        return (f'{{ command exec {opened}; }} 2>/dev/null || {{ {ended}; }}\n'
                # the pid may have been reused since the keeper ended: join only its own namespaces
                f'[ "$(readlink /proc/self/fd/4)" = {shlex.quote(self.pidns)} ] || {{ {ended}; }}\n'
                '"$@"; code=$?\n'
                # Blocks (%b, of 512 bytes) and sizes (%s) in one walk: a sparse file has a size and no blocks,
                # a preallocated one blocks and no size. Each name of a hard-linked file counts. awk compares (its
                # numbers are doubles; the shell's test would refuse one past 64 bits) and prints only when over.
                f'used=$(find {shlex.quote(str(work))} -xdev -printf "%b %s\\n" 2>/dev/null | '
                f'awk -v bound={bound_kib} \'{{b += $1; s += $2}} '
                'END {u = (b * 512 > s ? b * 512 : s) / 1024; if (u > bound) printf "%.0f", u}\')\n'
                f'if [ -n "$used" ]; then\n'
                f'  echo "{over}" >&2; kill -KILL {self.pid} 2>/dev/null; exit {ENDED}\nfi\n'
                'exit $code')

    def stop(self) -> list[int]:
        """Kill the namespaces' init: the kernel then kills every process in them. Returns their ids."""
        members = self.members()
        if members:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            # bwrap's outer half leaves once its child, the init, is reaped: after every process in it is gone.
            self.process.wait(10)
        for pipe in (self.process.stdin, self.process.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        return members

    def members(self) -> list[int]:
        """The processes in the keeper's pid namespace, by this machine's ids."""
        found = []
        for pid in psutil.pids():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/ns/pid") == self.pidns:
                    found.append(pid)
        return found


def backend_needs_network(env: Mapping[str, str]) -> bool:
    """Whether deck.py's backend is reached over the network, so commands keep it: a Palette web server
    (PALETTE_URL), or a Palette checkout (PALETTE_HOME) other than the reference engine's — a real Palette calls
    its own model. The reference engine runs on this machine and needs none."""
    if env.get("PALETTE_URL", "").strip():
        return True
    home = env.get("PALETTE_HOME", "").strip()
    return bool(home) and Path(home).expanduser().resolve() != REFERENCE_HOME.resolve()


def _namespaces(network: bool) -> list[str]:
    # No --die-with-parent: detached builds must outlive the command (not the item: the keeper's pid namespace).
    flags = ["--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not network:
        flags.append("--unshare-net")
    return flags


def _binds(readable: Iterable[Path], writable: Iterable[Path], protected: Iterable[Path],
           limits: Limits, proc: bool = True, socket: tuple[str, str] | None = None) -> list[str]:
    # /proc of the pid namespace the command is in (the item's); /tmp and /dev/shm tmpfs of a bounded size
    # (bwrap's /dev would hold a /dev/shm as large as half the machine's memory).
    args = [*(["--proc", "/proc"] if proc else ["--bind", "/proc", "/proc"]), "--dev", "/dev",
            "--perms", "1777", "--size", str(limits.shm_bytes), "--tmpfs", "/dev/shm",
            "--perms", "1777", "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp"]
    made: set[Path] = {Path("/"), Path("/tmp")}

    def parents(path: Path) -> list[str]:
        # bubblewrap makes a bind's missing parents 0700, which the item's user could not pass through.
        dirs = []
        for parent in reversed(path.parents):
            if parent not in made:
                made.add(parent)
                dirs += ["--perms", "0755", "--dir", str(parent)]
        return dirs

    for path in readable:
        top = str(path)
        if path.is_symlink() and path.parent == Path("/"):  # /bin → usr/bin on a merged /usr
            args += ["--symlink", os.readlink(path), top]
        else:
            args += [*parents(path), "--ro-bind", top, top]
        made.add(path)
    for path in writable:
        args += [*parents(path), "--bind", str(path), str(path)]
        made.add(path)
    for path in protected:
        args += ["--ro-bind", str(path), str(path)]
    if socket is not None:  # the record of the skill's runs, at a place of its own no command can move
        args += [*parents(Path(socket[1])), "--bind", *socket]
    # The sandbox's own root (the folders made above) read-only too: a write beside work/ fails, rather than
    # landing in a throwaway folder that looks like the run's.
    return [*args, "--remount-ro", "/"]


def _system() -> list[Path]:
    return [Path(folder) for folder in SYSTEM if os.path.lexists(folder)]


def _interpreter_folders() -> list[Path]:
    """This Python, its venv and this package: deck.py starts the reference engine with PALETTE_PYTHON."""
    package = Path(__file__).resolve().parent.parent
    found = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), Path(sys.executable).resolve().parent,
             package}
    # Packages outside the prefix too (a user's ~/.local site-packages, a venv's added by a .pth): without them
    # the engine cannot import python-pptx. Only site folders: sys.path also holds the caller's cwd.
    found |= {Path(entry).resolve() for entry in sys.path
              if Path(entry).name in ("site-packages", "dist-packages") and Path(entry).is_dir()}
    return sorted(path for path in found if not str(path).startswith(tuple(SYSTEM))
                  and not any(path != other and path.is_relative_to(other) for other in found))


def _backend_folders(env: Mapping[str, str]) -> list[Path]:
    """A Palette checkout deck.py runs (PALETTE_HOME), and the interpreter it is told to use."""
    found = []
    home = env.get("PALETTE_HOME", "").strip()
    if home:
        found.append(Path(home).expanduser().resolve())
    python = env.get("PALETTE_PYTHON", "").strip()
    if python and Path(python).is_absolute():
        found.append(Path(python).resolve().parent.parent)
    return [path for path in found if not str(path).startswith(tuple(SYSTEM))]


#: What makes a `bin` folder's parent a prefix its commands need (a venv, an interpreter's or a version manager's
#: installation), rather than a folder of other things (~/.cargo keeps its registry token beside `bin`).
_PREFIX_MARKS = ("pyvenv.cfg", "lib", "libexec")
#: Where every program keeps its data, below a home (XDG's defaults): never bound whole, nor a folder above one.
_STORES = (".local/share", ".local/state", ".config", ".cache")
#: Links followed from a command to what it runs, and files looked at per PATH folder: bounds, not expectations.
_HOPS, _COMMANDS = 16, 4096


def path_folders(search_path: str, keep_out: Iterable[Path] = ()) -> list[Path]:
    """The folders outside the system ones that the commands on `search_path` (the caller's PATH) need, to be
    bound read-only so that every name PATH resolves outside the sandbox resolves, and starts, inside it too:
    each PATH folder, or the prefix it is the `bin` of (a venv, an installation with `lib`) or the `shims` of (a
    version manager's root, whose shims run its own scripts and the interpreter it picks); and the same for each
    link, or `#!` interpreter, that a command there leads through (a venv's python → the interpreter it was made
    from). Never a home, nor the folders where every program keeps its data (~/.local/share, ~/.config …), nor a
    folder above one, nor one holding, above or inside a `keep_out` folder (the item's run folder): `~/bin` or
    `~/.local/bin` is bound alone, not the home; a folder that cannot be is left out."""
    keep, homes = [str(Path(path).resolve()) for path in keep_out], [str(home) for home in _homes()]

    def allowed(folder: Path) -> bool:
        try:
            path = str(folder.resolve())
        except (OSError, RuntimeError):  # a loop of links
            return False
        if _under_system(path) or any(_inside(home, path) for home in homes):
            return False  # the system is bound already; a home (or "/") would show the caller's keys
        return not any(_inside(kept, path) or _inside(path, kept) for kept in keep)

    chosen: list[Path] = []
    seen: set[Path] = set()

    def add(folder: Path) -> None:
        if folder in seen:
            return
        seen.add(folder)
        # os.path.exists, not Path.exists: a folder this user cannot enter (/root/.pyenv as another user) is
        # no prefix of its, where Path.exists raises PermissionError on Python < 3.12.
        prefix = folder.name == "shims" or (folder.name == "bin" and any(
            os.path.exists(folder.parent / mark) for mark in _PREFIX_MARKS))
        for candidate in (folder.parent, folder) if prefix else (folder,):
            if allowed(candidate):
                chosen.append(candidate)
                return

    signature = _signature(search_path)
    with _SCANNING:
        scanned = _scan(search_path, signature)
    for folder, leads in scanned:
        if allowed(folder):
            add(folder)
            for lead in leads:
                add(lead)
    # In PATH's order, one bind per tree: a folder inside another chosen one is already there.
    unique = list(dict.fromkeys(chosen))
    return [path for path in unique if not any(other in path.parents for other in unique)]


def _signature(search_path: str) -> tuple[int, ...]:
    """What changes when a command is added to, removed from or replaced in a PATH folder: their times."""
    times = []
    for entry in search_path.split(os.pathsep):
        try:
            times.append(os.stat(entry).st_mtime_ns)
        except OSError:
            times.append(0)
    return tuple(times)


#: One scan at a time: the items a session starts together all miss the cache at once, and each would read every
#: command on PATH (36 conversations at once spent 4.8 CPU-s of the harness's GIL on it, 5 s of each one's start).
_SCANNING = threading.Lock()


@functools.lru_cache(maxsize=8)
def _scan(search_path: str, signature: tuple[int, ...]) -> tuple[tuple[Path, tuple[Path, ...]], ...]:
    """Each absolute folder on `search_path`, with the folders its commands lead through (links, `#!`
    interpreters): read once per PATH and `signature` (`_signature`), not per item — a PATH of a venv and a
    version manager holds thousands of commands."""
    scanned = []
    for entry in dict.fromkeys(search_path.split(os.pathsep)):
        folder = Path(os.path.normpath(entry)) if os.path.isabs(entry) else None
        if folder is None or not os.path.isdir(folder):
            continue  # a relative entry (".") names the agent's own folder, which it has already
        leads = dict.fromkeys(hop.parent for command in _commands(folder) for hop in _leads_through(command))
        scanned.append((folder, tuple(leads)))
    return tuple(scanned)


def _commands(folder: Path) -> list[Path]:
    try:
        with os.scandir(folder) as entries:
            return [Path(entry.path) for entry in itertools.islice(entries, _COMMANDS)]
    except OSError:
        return []


def _leads_through(command: Path) -> list[Path]:
    """The paths `command` leads through when run: each link on the way, and the `#!` interpreter the last
    names (absolute, not /usr/bin/env's search) and its own links."""
    hops: list[Path] = []
    current = command
    for _ in range(_HOPS):
        try:
            if current.is_symlink():
                current = Path(os.path.normpath(current.parent / os.readlink(current)))
            elif current.is_file():  # not a FIFO: its read would never end
                with current.open("rb") as opened:
                    first = opened.readline(256)
                named = first[2:].split() if first.startswith(b"#!") else []
                if not named or not named[0].startswith(b"/"):
                    break
                current = Path(os.fsdecode(named[0]))
            else:
                break
        except OSError:
            break
        if current in hops:
            break
        hops.append(current)
        if _under_system(current):  # what a system program (/usr/bin/env, /bin/sh) needs is the system's
            break
    return hops


def _homes() -> list[Path]:
    """Every home on this machine (and the caller's HOME), and the stores of program data in it (XDG's): never
    bound whole, nor a folder above one."""
    found = {Path(os.environ.get("HOME") or "/")}
    with contextlib.suppress(OSError, KeyError, RuntimeError):
        found.add(Path.home())
    with contextlib.suppress(OSError, KeyError):
        found.update(Path(user.pw_dir) for user in pwd.getpwall() if user.pw_dir)
    found.update(Path(os.environ[name]) for name in ("XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME",
                                                     "XDG_CACHE_HOME") if os.path.isabs(os.environ.get(name, "")))
    homes = [path for path in found if str(path) not in ("", "/")]
    return [path.resolve() for home in homes for path in (home, *(home / store for store in _STORES))]


def _under_system(path: Path | str) -> bool:
    return any(_inside(str(path), system) for system in SYSTEM)


def _inside(path: str, folder: str) -> bool:
    """`path` is `folder` or below it, both resolved: by text, as this runs for every command on PATH, per item."""
    return folder == "/" or path == folder or path.startswith(folder + "/")


def _of_user(uid: int, *, zombies: bool = False) -> list[psutil.Process]:
    """The processes whose real user is `uid`: running ones, or with `zombies` also those not yet reaped (they
    still count against the user's process limit)."""
    return [process for process in psutil.process_iter(["uids"])
            if process.info["uids"] and process.info["uids"].real == uid and (zombies or leftovers.running(process))]


def _kill_user(uid: int, rounds: int = 50) -> list[int]:
    """KILL every process of `uid` until none is left (a fork bomb forks between two looks)."""
    killed: list[int] = []
    for _ in range(rounds):
        alive = _of_user(uid)
        if not alive:
            break
        for process in alive:
            with contextlib.suppress(psutil.Error):
                process.send_signal(signal.SIGKILL)
            if process.pid not in killed:
                killed.append(process.pid)
        time.sleep(0.02)
    return killed
