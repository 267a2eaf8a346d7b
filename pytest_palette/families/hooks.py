"""Where a task's graders run: its hooks (`preflight.sh`, `invariants.sh`) and its hidden checks, confined as a
grader should be (docs/families.md, "Hooks", "Where graders run").

Outside the agent's sandbox, but in one of their own (arena/sandbox.py, `--palette-sandbox bubblewrap`): one
keeper per grading, whose user and pid namespaces every grader joins, so that

- a grader sees the system read-only, the family read-only, the agent's folder read-write (as its own user id when
  the harness is root: the agent's files stay read-only to it) and a home of its own; not the caller's home, not
  /tmp, not the run folder, not another item;
- its environment is an allow-list (PATH, locale …), the hook variables (`$AGENT_CWD`, `$PORT`, `$TASK_ID`,
  `$TASK_DIR`, `$HOOKS_DIR`, `$FAMILY_DIR`) and the values of the family's `.env` files: no key of the caller's;
- it shares the machine's network, so that `$PORT`, a free port of this machine, is one address for the service a
  preflight starts, the invariants' probes and the hidden checks alike;
- it is bounded as an agent's command is (processes, memory, CPU, file size);
- nothing it started outlives the grading: at the end every process left in its pid namespace gets SIGTERM, a grace
  period, then SIGKILL (the keeper's end, with which the kernel ends the namespace).

Unconfined (`none`), each grader is a process group of its own, and its group gets the same TERM, grace, KILL.

Each hook runs as its interpreter says (`#!`), or with /bin/sh. `invariants.sh` gets `$RESULTS_FD=3`: a file, read
once the script has ended (so a process it left in the background cannot hold the grading open). The hooks' PATH
starts with a folder holding `assert` and `gemba-trace` (assertion.py).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import psutil

from ..arena import leftovers
from ..arena import sandbox as arena
from . import assertion
from .hidden_tests import Ran
from .layout import Task

#: How long a hook may run, and the grace between SIGTERM and SIGKILL at the end of a grading.
HOOK_SECONDS = 120.0
GRACE_SECONDS = 2.0
#: How long a SIGKILLed process may take to end (none may ignore it; only a wait in the kernel delays it).
KILL_SECONDS = 10.0
#: The end of a grader's output kept (its words), and of the rows read from `$RESULTS_FD`.
OUTPUT_BYTES = 64 * 1024
ROWS_BYTES = 1024 * 1024
#: A JavaScript runtime reserves far more address space than it uses (V8's and JavaScriptCore's cages): the limit
#: that bounds an agent's command would refuse it. Memory is bounded by the processes' count and CPU instead.
LIMITS = arena.Limits(memory_bytes=2**44)
#: The variables every hook gets (docs/families.md); `$HOOKS_DIR` is the folder of the hook that runs.
VARIABLES = ("AGENT_CWD", "PORT", "TASK_ID", "TASK_DIR", "HOOKS_DIR", "FAMILY_DIR")
#: Names every grader's environment keeps beside the sandbox's allow-list: no colours in its words, no bytecode
#: written into the agent's folder, no pytest plugin loaded because it is installed (a Python check that needs one
#: names it: `pytest_plugins`) — this machine's plugins are not the family's, and each costs a second to load.
QUIET = {"NO_COLOR": "1", "FORCE_COLOR": "0", "PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def free_port() -> int:
    """A TCP port free on this machine's loopback now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class HookRun:
    """What one hook did: its exit status (None when it ran out of time), its output's end, and its rows."""

    script: Path
    code: int | None
    output: str
    rows: str = ""

    @property
    def failed(self) -> bool:
        return self.code != 0

    def fault(self) -> str:
        """The grader's fault, in one line naming the script."""
        said = " ".join(self.output.split())
        said = said if len(said) <= 300 else "…" + said[-299:]
        status = f"did not finish in {HOOK_SECONDS:.0f} s" if self.code is None else f"exited {self.code}"
        return f"{self.script} {status}" + (f": {said}" if said else "")


class Graders:
    """One grading's confined place: the hooks and hidden checks of `task` over the agent's `folder`."""

    def __init__(self, task: Task, folder: Path, values: Mapping[str, str] = {}, *, mode: str = "bubblewrap",
                 port: int | None = None, environ: Mapping[str, str] | None = None) -> None:
        environ = os.environ if environ is None else environ
        self.task, self.folder = task, folder.resolve()
        self.port = free_port() if port is None else port
        self.scratch = Path(tempfile.mkdtemp(prefix="palette-grader-"))
        self.backups = _backups(self.folder, self.scratch)
        self._logs = self.scratch / "logs"  # each grader's output, and the invariants' rows
        tools = self.scratch / "bin"
        for made in (self._logs, tools):
            made.mkdir()
        self._shims(tools)
        self.variables = {"AGENT_CWD": str(self.folder), "PORT": str(self.port), "TASK_ID": task.id,
                          "TASK_DIR": str(task.folder.resolve()), "HOOKS_DIR": str(task.folder.resolve() / "hooks"),
                          "FAMILY_DIR": str(task.family.root.resolve())}
        given = {**{name: value for name, value in environ.items()}, **values, **self.variables, **QUIET,
                 "PATH": os.pathsep.join(filter(None, (str(tools), environ.get("PATH", os.defpath))))}
        self.sandbox = arena.Sandbox(self.scratch / "home", given, mode=mode, limits=LIMITS,
                                     passed=[*values, *self.variables, *QUIET])
        self.sandbox.network = True  # $PORT is the machine's: one address for the service, the probes, the checks
        self._owner: tuple[int, int] | None = None
        if self.sandbox.confined:
            self.sandbox.readable(task.family.root.resolve(), tools)
            status = os.stat(self.folder)
            self._owner = (status.st_uid, status.st_gid)
            self.sandbox.writable(self.folder, self._logs)
        self._groups: list[int] = []
        self._count = 0

    @property
    def kind(self) -> str:
        """"bubblewrap" or "unconfined": where the graders ran, for the record."""
        return self.sandbox.kind

    def readable(self, *paths: Path) -> None:
        """Let graders read these too (a runner installed outside the system: bun in the venv)."""
        self.sandbox.readable(*paths)

    def _shims(self, tools: Path) -> None:
        for name in ("assert", "gemba-trace"):
            shim = tools / name
            shim.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -I -S "
                            f"{shlex.quote(str(Path(assertion.__file__).resolve()))} {name} \"$@\"\n",
                            encoding="utf-8")
            shim.chmod(0o755)

    # -- running --------------------------------------------------------------------------------------

    def run(self, argv: list[str], timeout: float, *, results: bool = False,
            extra: Mapping[str, str] = {}) -> tuple[Ran, str]:
        """Run `argv` from the agent's folder, confined; its exit status and output's end, and with `results` what
        it wrote to `$RESULTS_FD` (fd 3)."""
        self._count += 1
        output_path = self._logs / f"{self._count}.out"
        rows_path = self._logs / f"{self._count}.rows"
        env = {**self.sandbox.env, **extra}
        command = f"exec {shlex.join(argv)}"
        if results:
            # A file of the graders' own, opened as fd 3 inside the sandbox: read once the hook has ended, so a
            # process it left in the background cannot hold the grading open.
            rows_path.touch()
            if self.sandbox.uid is not None:
                os.chown(rows_path, self.sandbox.uid, self.sandbox.uid)
            env["RESULTS_FD"] = "3"
            command = f"exec 3>>{shlex.quote(str(rows_path))}; {command}"
        full = self.sandbox.argv(command, self.folder)
        with open(output_path, "w+b") as output:
            process = subprocess.Popen(full, cwd=self.folder, env=env, stdin=subprocess.DEVNULL, stdout=output,
                                       stderr=subprocess.STDOUT, start_new_session=True)
            self._groups.append(process.pid)
            try:
                code: int | None = process.wait(timeout)
            except subprocess.TimeoutExpired:
                _kill_tree(process.pid)
                process.wait()
                code = None
        said = _tail(output_path, OUTPUT_BYTES)
        wrote = _head(rows_path, ROWS_BYTES) if results else ""
        return Ran(code, said), wrote

    def hook(self, name: str, *, results: bool = False) -> HookRun | None:
        """Run the task's (else the family's) `hooks/<name>`; None when there is none."""
        script = self.task.hook(name)
        if script is None:
            return None
        ran, rows = self.run([*_interpreter(script), str(script.resolve())], HOOK_SECONDS, results=results,
                             extra={"HOOKS_DIR": str(script.parent.resolve())})
        return HookRun(script, ran.code, ran.output, rows)

    def execute(self, argv: list[str], cwd: Path, timeout: float) -> Ran:
        """A hidden check's run (hidden_tests.Execute): from the agent's folder, confined."""
        return self.run(argv, timeout)[0]

    # -- the end --------------------------------------------------------------------------------------

    def release_folder(self) -> None:
        """Give the agent's folder back to its owner between preflight and the grading (an agent works in it)."""
        if self._owner is not None:
            os.chown(self.folder, *self._owner)

    def take_folder(self) -> None:
        """The agent's folder the graders' again, after an agent had it (as its own user id, since preflight); its
        owner now is the one given back at the end."""
        if self.sandbox.confined and self.sandbox.uid is not None:
            status = os.stat(self.folder)
            self._owner = (status.st_uid, status.st_gid)
            self.sandbox.own(self.folder)

    def close(self, grace: float = GRACE_SECONDS) -> list[int]:
        """End everything the graders started (TERM, `grace`, KILL), give the agent's folder its owner back and
        remove the scratch folder. Returns the ids of the processes that were still running."""
        try:
            if self.sandbox.confined:
                left = [pid for pid in self.sandbox.processes() if pid != _keeper_pid(self.sandbox)]
                _terminate(left, grace)
                self.sandbox.close()  # the keeper's end: the kernel ends whatever is left in its namespace
            else:
                left = [pid for group in self._groups for pid in _group(group)]
                for group in self._groups:
                    with contextlib.suppress(OSError):
                        os.killpg(group, signal.SIGTERM)
                _wait_gone(left, grace)
                for group in self._groups:
                    with contextlib.suppress(OSError):
                        os.killpg(group, signal.SIGKILL)
                # A killed process ends only once it is next scheduled: on a busy machine it is still there a
                # moment after the signal. Closed means gone (as the confined side's keeper waits for its own).
                _wait_gone([pid for group in self._groups for pid in _group(group)], KILL_SECONDS)
                self.sandbox.close()
            return left
        finally:
            if self._owner is not None:
                with contextlib.suppress(OSError):
                    os.chown(self.folder, *self._owner)
            shutil.rmtree(self.scratch, ignore_errors=True)
            shutil.rmtree(self.backups, ignore_errors=True)

    def __enter__(self) -> Graders:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()


def _backups(folder: Path, scratch: Path) -> Path:
    """Where what the agent left at a staged path is moved aside: beside its folder, on its file system, so that a
    move is a rename (the very file, never a copy that reads a FIFO the agent left); in the scratch folder where
    the folder's parent cannot be written. Never inside the graders' view."""
    try:
        return Path(tempfile.mkdtemp(prefix=f".{folder.name}.palette-backups-", dir=folder.parent))
    except OSError:
        made = scratch / "backups"
        made.mkdir()
        return made


def _interpreter(script: Path) -> list[str]:
    """How a hook is run: by the interpreter its `#!` line names, else /bin/sh (no execute bit needed)."""
    with script.open("rb") as opened:
        first = opened.readline(256)
    if first.startswith(b"#!"):
        named = shlex.split(first[2:].decode("utf-8", "replace").strip())
        if named:
            return named
    return ["/bin/sh"]


def _keeper_pid(sandbox: arena.Sandbox) -> int | None:
    keeper = getattr(sandbox, "_keeper", None)
    return getattr(keeper, "pid", None)


def _group(group: int) -> list[int]:
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(process.pid) == group:
                found.append(process.pid)
    return found


def _terminate(pids: list[int], grace: float) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    _wait_gone(pids, grace)


def _wait_gone(pids: list[int], grace: float) -> None:
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            with contextlib.suppress(psutil.Error):
                if leftovers.running(psutil.Process(pid)):
                    alive.append(pid)
        if not alive:
            return
        time.sleep(0.05)


def _kill_tree(pid: int) -> None:
    with contextlib.suppress(psutil.Error):
        parent = psutil.Process(pid)
        for child in parent.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child.kill()
        parent.kill()
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)


def _tail(path: Path, limit: int) -> str:
    with path.open("rb") as opened:
        opened.seek(0, os.SEEK_END)
        size = opened.tell()
        opened.seek(max(0, size - limit))
        return opened.read(limit).decode("utf-8", "replace")


def _head(path: Path, limit: int) -> str:
    with path.open("rb") as opened:
        return opened.read(limit).decode("utf-8", "replace")
