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
- limits per process (address space, CPU time) and on the number of processes — as root, commands run as a
  user id of their own per item (`setpriv`), which is what makes the process limit hold and lets every
  process the agent started, detached or not, be found and stopped when the item ends. Not as root, a user
  namespace (`bwrap --unshare-user`) plays that part and leftovers are found by their trace path.

bubblewrap builds the namespaces; we only choose what to bind. `--palette-sandbox none` runs commands with the
allow-listed environment but otherwise unconfined, and every record, table and report then says
"unconfined". No pid namespace: deck.py detaches its builds to outlive the command that started them (not the
item), which a pid namespace per command would kill.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import pwd
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil

from ..backend import REFERENCE_HOME
from . import leftovers

BUBBLEWRAP = "bubblewrap"
UNCONFINED = "unconfined"
#: `--palette-sandbox` values → what records say.
MODES = {"bubblewrap": BUBBLEWRAP, "none": UNCONFINED}
INSTALL_HINT = ("install bubblewrap (Debian: apt-get install bubblewrap; `make setup` does) "
                "or pass --palette-sandbox none")

#: Names a command's environment keeps, beside LC_* and PALETTE_*; everything else (keys, tokens, the
#: caller's HOME) stays out. VIRTUAL_ENV and the UV_/XDG_ cache folders are CUGA's shell settings.
ALLOWED = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR", "VIRTUAL_ENV", "UV_NO_CONFIG",
                     "UV_PYTHON_DOWNLOADS", "UV_CACHE_DIR", "XDG_CACHE_HOME", "NO_COLOR", "PYTHONIOENCODING"})
ALLOWED_PREFIXES = ("LC_", "PALETTE_")
#: Top-level system folders a command may read (those that exist here).
SYSTEM = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt")
#: Where the per-item user ids are handed out (as root): one lock file per id, held while the item runs.
ID_LOCKS = Path("/tmp/palette-sandbox-ids")
FIRST_ID, IDS = 420_000, 10_000


@dataclass(frozen=True)
class Limits:
    """Per item: processes; per process: address space and CPU seconds. Generous for a deck, tight for a
    fork bomb or a runaway loop."""

    processes: int = 512
    memory_bytes: int = 8 * 2**30
    cpu_seconds: int = 3600
    #: Each of a command's /tmp and /dev/shm: a tmpfs (memory the address-space limit does not count), so
    #: bounded; bubblewrap's default is half the machine's memory.
    tmp_bytes: int = 512 * 2**20


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
    probe = [found, *_namespaces(network=False), *_binds(_system(), [], []), "--", "/bin/true"]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bubblewrap could not start a sandbox here ({error}): {INSTALL_HINT}"
    if done.returncode:
        said = " ".join(done.stderr.split())[:200] or f"exit {done.returncode}"
        return f"bubblewrap could not start a sandbox here ({said}): {INSTALL_HINT}"
    return None


class Sandbox:
    """One item's sandbox: how each command the agent runs is started, with which environment, and how
    everything it started is stopped when the item ends."""

    def __init__(self, work: Path, env: Mapping[str, str], mode: str = "bubblewrap", trace: Path | None = None,
                 limits: Limits = Limits(), passed: Iterable[str] = (), withheld: Iterable[str] = ()) -> None:
        self.work, self.trace, self.limits = work, trace, limits
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
        """Before the first command: the folders commands write are the item's user's."""
        for path in self._writable:
            self.own(path)

    # -- commands --------------------------------------------------------------------------------------

    def argv(self, command: str, cwd: Path | None = None, *, shell: str = "/bin/sh",
             extra: Iterable[Path] = ()) -> list[str]:
        """The argv that runs `command` with `shell -c` inside this sandbox (in `cwd`, default work/), with
        `extra` files readable for this command only (a long command's script)."""
        if not self.confined:
            return [shell, "-c", command]
        return [*self.wrap(cwd or self.work, network=self.network, uid=self.uid, extra=extra), shell, "-c",
                command]

    def wrap(self, cwd: Path | None, *, network: bool, uid: int | None, limits: bool = True,
             extra: Iterable[Path] = (), hidden: Iterable[Path] = ()) -> list[str]:
        """The bubblewrap prefix (and the switch to `uid`, and the limits) before a program's own argv. With no
        `uid` (not root, or nested in a client's sandbox) a user namespace of its own makes the namespaces.
        `hidden` paths (and what is under them) are left out of the view."""
        gone = tuple(hidden)

        def shown(paths: Iterable[Path]) -> list[Path]:
            return [p for p in paths if p.exists() and not any(p == h or h in p.parents for h in gone)]

        prefix = [self._bwrap, *_namespaces(network)]
        if uid is None:
            prefix.append("--unshare-user")
        prefix += _binds(_system() + shown([*self._readable, *extra]), shown(self._writable), shown(self._protected),
                         self.limits.tmp_bytes)
        prefix += [*(["--chdir", str(cwd)] if cwd else []), "--"]
        if uid is not None:
            prefix += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                       "--inh-caps=-all", "--bounding-set=-all", "--"]
        # A client (the claude CLI) gets no limits: it reserves more address space than fits a command, and its
        # commands' sandbox (`script`) limits them in a user namespace of their own.
        if limits:
            prefix += ["prlimit", f"--nproc={self.limits.processes}", f"--as={self.limits.memory_bytes}",
                       f"--cpu={self.limits.cpu_seconds}", "--"]
        return prefix

    def script(self, path: Path, shell: str = "/bin/bash", hidden: Iterable[Path] = ()) -> Path:
        """A program that runs its one argument (a command line) inside this sandbox with the allow-listed
        environment — for a client that runs commands itself and takes a wrapper for them (the Claude CLI's
        CLAUDE_CODE_SHELL_PREFIX). Run from inside `client()`, so it nests: a user namespace of its own, as
        the client is no longer root there (and below the client's, so a command cannot read the client's
        /proc/<pid>/environ or root). `hidden`: the client's own folders, which its commands must not see."""
        env = " ".join(shlex.quote(f"{name}={value}") for name, value in sorted(self.env.items()))
        if self.confined:
            # No --chdir: the client runs each command in its own current directory. No uid: the client's
            # sandbox already switched to the item's.
            run = shlex.join(self.wrap(None, network=self.network, uid=None, hidden=hidden))
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
        """Stop every process the agent started that still runs: by the item's user id (which no command can
        shed), and by the trace path in their environment (the only mark unconfined)."""
        stopped = leftovers.stop(self.trace, grace) if self.trace is not None else []
        if self.uid is not None:
            stopped += _kill_user(self.uid)
        return stopped

    def close(self) -> None:
        """Stop what is left and give the user id back."""
        try:
            self.stop()
        finally:
            if self._lock is not None:
                os.close(self._lock)
                self._lock = None

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
            if _kill_user(uid) or _of_user(uid, zombies=True):  # left by a crashed holder: let them go first
                os.close(descriptor)
                continue
            self._lock = descriptor
            return uid
        raise RuntimeError(f"every sandbox user id in {ID_LOCKS} is taken")


def backend_needs_network(env: Mapping[str, str]) -> bool:
    """Whether deck.py's backend is reached over the network, so commands keep it: a Palette web server
    (PALETTE_URL), or a Palette checkout (PALETTE_HOME) other than the reference engine's — a real Palette calls
    its own model. The reference engine runs on this machine and needs none."""
    if env.get("PALETTE_URL", "").strip():
        return True
    home = env.get("PALETTE_HOME", "").strip()
    return bool(home) and Path(home).expanduser().resolve() != REFERENCE_HOME.resolve()


def _namespaces(network: bool) -> list[str]:
    # No --die-with-parent and no pid namespace: detached builds must outlive the command (not the item).
    flags = ["--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not network:
        flags.append("--unshare-net")
    return flags


def _binds(readable: Iterable[Path], writable: Iterable[Path], protected: Iterable[Path],
           tmp_bytes: int = Limits.tmp_bytes) -> list[str]:
    size = ["--size", str(tmp_bytes), "--perms", "1777"]  # as /tmp is, for whichever user id the command runs as
    args = ["--proc", "/proc", "--dev", "/dev", *size, "--tmpfs", "/dev/shm", *size, "--tmpfs", "/tmp"]
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
    keep, homes = [Path(path).resolve() for path in keep_out], _homes()

    def allowed(folder: Path) -> bool:
        try:
            path = folder.resolve()
        except (OSError, RuntimeError):  # a loop of links
            return False
        if _under_system(path) or any(path == home or path in home.parents for home in homes):
            return False  # the system is bound already; a home (or "/") would show the caller's keys
        return not any(path == kept or path in kept.parents or kept in path.parents for kept in keep)

    chosen: list[Path] = []
    seen: set[Path] = set()

    def add(folder: Path) -> None:
        if folder in seen:
            return
        seen.add(folder)
        prefix = folder.name == "shims" or (folder.name == "bin" and any(
            (folder.parent / mark).exists() for mark in _PREFIX_MARKS))
        for candidate in (folder.parent, folder) if prefix else (folder,):
            if allowed(candidate):
                chosen.append(candidate)
                return

    for entry in dict.fromkeys(search_path.split(os.pathsep)):
        folder = Path(os.path.normpath(entry)) if os.path.isabs(entry) else None
        if folder is None or not folder.is_dir() or not allowed(folder):
            continue  # a relative entry (".") names the agent's own folder, which it has already
        add(folder)
        for command in _commands(folder):
            for hop in _leads_through(command):
                add(hop.parent)
    # In PATH's order, one bind per tree: a folder inside another chosen one is already there.
    unique = list(dict.fromkeys(chosen))
    return [path for path in unique if not any(other in path.parents for other in unique)]


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


def _under_system(path: Path) -> bool:
    return any(path == system or system in path.parents for system in map(Path, SYSTEM))


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
