"""Running tests as an unprivileged user, from a run as root (CI runs as root; most people do not).

`Unprivileged.ensure()` makes a system user once (`useradd --system`, reused by every later run, never
deleted: nothing is deleted that a run did not create) and `run_pytest()` runs pytest as that user
(`setpriv --reuid --regid --init-groups`), with a HOME of its own and a working folder it owns, removed
afterwards.

The user cannot run this venv's interpreter: a venv's `python` links to the Python it was made from, which a
version manager keeps under the caller's home (/root/.pyenv here, 0700). So the user gets a venv of its own,
made in the working folder from a Python it can run (a system one of the same minor version: the same ABI),
whose one `.pth` file
adds this venv's site-packages (`site.addsitedir`, so their own `.pth` files — the editable install — run)
and this checkout. Nothing of the machine changes beyond the user, and /root's permissions stay as they are.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import shutil
import site
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
USER = "palette-unprivileged"
_VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"
#: Where the user's Python may come from, first that it can run: the interpreter this venv was made from (a
#: CI's setup-python one is readable by all), else a system one of the same minor version (the same ABI).
PYTHONS = (str(Path(sys.executable).resolve()), f"/usr/bin/python{_VERSION}", f"/usr/local/bin/python{_VERSION}")
#: The caller's variables the inner run keeps; the rest (keys, the caller's HOME and TMPDIR) stay out.
#: Shared places a run must leave nothing of the user's in.
SHARED = (Path("/tmp"), Path("/dev/shm"), Path("/var/tmp"))
KEPT = ("LANG", "LC_ALL", "TZ", "TERM", "NO_COLOR", "CI", "GITHUB_ACTIONS")


def problem() -> str | None:
    """Why this machine cannot run tests as another user (a skip reason), or None when it can."""
    if os.geteuid() != 0:
        return "not root: this run already is the unprivileged run"
    for tool in ("useradd", "setpriv"):
        if shutil.which(tool) is None:
            return f"{tool} is not on PATH: cannot make or become an unprivileged user"
    return None


@dataclass(frozen=True)
class Unprivileged:
    """The unprivileged user (made once per machine) tests run as."""

    name: str
    uid: int
    gid: int
    home: Path

    @classmethod
    def ensure(cls, name: str = USER) -> Unprivileged:
        """The user `name`, made if it does not exist yet (as root): a system user, its own group and home."""
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            done = subprocess.run(["useradd", "--system", "--user-group", "--create-home", "--shell",
                                   "/usr/sbin/nologin", "--comment", "pytest-palette's unprivileged test user",
                                   name], capture_output=True, text=True, check=False)
            # 9: made meanwhile by another run (an xdist worker), which is as good.
            if done.returncode not in (0, 9):
                raise RuntimeError(f"useradd {name} failed: {done.stderr.strip()}") from None
            entry = pwd.getpwnam(name)
        home = Path(entry.pw_dir)
        if not home.is_dir():  # a system user made without a home elsewhere
            home.mkdir(mode=0o750, parents=True)
            os.chown(home, entry.pw_uid, entry.pw_gid)
        return cls(name, entry.pw_uid, entry.pw_gid, home)

    def problem(self) -> str | None:
        """Why this user cannot run this checkout's tests (a skip reason), or None: no Python it can run, or a
        checkout or venv in a folder it cannot enter."""
        python = self.python()
        if python is None:
            return f"{self.name} can run none of {', '.join(dict.fromkeys(PYTHONS))}"
        for folder in [str(REPO), *_site_packages()]:
            if self.run([python, "-c", "import os, sys; os.listdir(sys.argv[1])", folder], cwd=Path("/")).returncode:
                return f"{self.name} cannot read {folder}: a checkout or venv under a private home"
        return None

    def python(self) -> str | None:
        """The first of PYTHONS this user can run (a version manager's, under /root, it cannot), or None."""
        for candidate in dict.fromkeys(PYTHONS):
            if os.access(candidate, os.X_OK) and self.run([candidate, "-c", f"import sys; assert sys.version_info[:2] "
                                                          f"== {sys.version_info[:2]}"], cwd=Path("/")).returncode == 0:
                return candidate
        return None

    @contextlib.contextmanager
    def workspace(self) -> Iterator[Path]:
        """A folder in the user's home that it owns, with a venv it can run (bin/python): removed afterwards."""
        folder = Path(tempfile.mkdtemp(prefix="run-", dir=self.home))
        try:
            os.chown(folder, self.uid, self.gid)
            python = self.python()
            if python is None:
                raise RuntimeError(f"{self.name} can run none of {', '.join(PYTHONS)}")
            self.run([python, "-m", "venv", "--without-pip", str(folder / "venv")], cwd=folder, check=True)
            purelib = self.run([str(folder / "venv" / "bin" / "python"), "-c",
                                "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               cwd=folder, check=True).stdout.strip()
            lines = [f"import site; site.addsitedir({path!r})" for path in _site_packages()] + [str(REPO)]
            (Path(purelib) / "palette-harness.pth").write_text("\n".join(lines) + "\n", encoding="utf-8")
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def environment(self, folder: Path) -> dict[str, str]:
        """What the user's processes start with: its HOME, its venv first on PATH, no variable of the caller's
        but the locale and CI's own flags."""
        path = [str(folder / "venv" / "bin"), "/usr/local/bin", "/usr/bin", "/bin",
                # Last: this venv's tools (uv), which the venv of its own does not have.
                str(Path(sys.executable).parent)]
        # Bytecode goes to a cache in the folder: the user cannot write beside root's sources, and without a cache
        # every session it starts would rewrite the asserts of all the plugins' modules again.
        return {"HOME": str(self.home), "USER": self.name, "LOGNAME": self.name, "PATH": os.pathsep.join(path),
                "PYTHONPYCACHEPREFIX": str(folder / "pycache"),
                **{name: os.environ[name] for name in KEPT if name in os.environ}}

    def run(self, argv: Sequence[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 120,
            check: bool = False) -> subprocess.CompletedProcess[str]:
        """`argv` as the user (its groups, no capability), in `cwd`."""
        # Through env: setpriv execs while it still holds root's capabilities, so it would start a program in a
        # folder the user cannot enter (/root/.pyenv) that none of the user's own processes could start again.
        switch = ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--init-groups", "--", "env", "--"]
        done = subprocess.run([*switch, *argv], cwd=cwd, env=env if env is not None else self.environment(cwd),
                              capture_output=True, text=True, timeout=timeout, check=False)
        if check and done.returncode:
            raise RuntimeError(f"{' '.join(argv)} as {self.name} failed ({done.returncode}): "
                               f"{(done.stderr or done.stdout).strip()[-2000:]}")
        return done

    def run_pytest(self, args: Sequence[str], timeout: float = 1800) -> Finished:
        """pytest with `args` as the user, from this checkout's root, in a workspace of its own: its temporary
        folders and runs are there (--basetemp, --palette-run-dir), so nothing is left in /tmp. One run as the
        user at a time (a lock in its home): what is left afterwards is then this run's."""
        with self._alone():
            before = self._in_shared_folders()
            with self.workspace() as folder:
                argv = [str(folder / "venv" / "bin" / "python"), "-m", "pytest", "-p", "no:cacheprovider",
                        f"--rootdir={REPO}", f"--basetemp={folder / 'tmp'}",
                        f"--palette-run-dir={folder / 'runs'}", *args]
                done = self.run(argv, cwd=REPO, env=self.environment(folder), timeout=timeout)
            running = [f"{process.pid}: {' '.join(process.info['cmdline'] or [])}"
                       for process in psutil.process_iter(["uids", "cmdline"])
                       if process.info["uids"] and process.info["uids"].real == self.uid]
            return Finished(done, running, sorted(self._in_shared_folders() - before))

    @contextlib.contextmanager
    def _alone(self) -> Iterator[None]:
        with open(self.home / ".palette-tests.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when closed, or by the kernel if this process dies
            yield

    def _in_shared_folders(self) -> set[str]:
        return {entry.path for folder in SHARED if folder.is_dir() for entry in os.scandir(folder)
                if entry.stat(follow_symlinks=False).st_uid == self.uid}


@dataclass(frozen=True)
class Finished:
    """A run as the user, and what it left: the user's processes still running, its files in shared folders."""

    done: subprocess.CompletedProcess[str]
    running: list[str]
    left: list[str]


def _site_packages() -> list[str]:
    """This venv's site-packages (not the base Python's, which the user cannot read)."""
    base = Path(sys.base_prefix).resolve()
    return [path for path in site.getsitepackages() if not Path(path).resolve().is_relative_to(base)]
