#!/usr/bin/env python3
"""Palette skill command script: plan -> confirm -> [edit -> confirm]* -> build.

Subcommands: plan, plan-status, edit, start, status, find. Each prints exactly
one JSON object on stdout. Slow work runs detached; completion is read from
exit files on disk, never from a process handle, so any later call (or a
different process) can collect it.

Backends, in order: a real Palette checkout ($PALETTE_HOME/palette.py), else
the reference engine shipped with pytest-palette (`-m pytest_palette.engine`,
run by $PALETTE_PYTHON or this interpreter). Standard library only.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import socket
import sys
import time
from pathlib import Path

# Every command an agent runs starts this script afresh: modules only some commands need are imported where they
# are used (subprocess, shutil, importlib.util), and typing only for the type checker.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, NoReturn, Optional, Tuple

MIN_PPTX_BYTES = 20_000
LOG_TAIL_LINES = 15
ARG_CLIP = 600
STDOUT_CLIP = 4000

# The harness that benchmarks this skill (pytest-palette) keeps its own record of every run of this script, one the
# agent that runs it can neither edit nor delete: it listens on this socket inside the agent's sandbox, or where
# PALETTE_SKILL_RECORD says (unconfined). Protocol palette-skill-runs/1, JSON lines: {argv, cwd} when the run
# begins, then — once the harness has nodded (it looked at this process) — {command, args} when the arguments are
# parsed (or {exit_code, stdout} when they are refused), then {exit_code, stdout} when it ends. With no harness,
# or one that does not answer, the script runs as ever.
RECORD_SOCKET = "/run/palette/skill-runs.sock"
RECORD_PROTOCOL = "palette-skill-runs/1"
RECORD_NOD_SECONDS = 60.0
RECORD_STDOUT = 1_000_000

BUILD_STATE = ".palette-build.json"
BUILD_EXIT = ".palette-exit"
BUILD_LOG = "build.log"

# Poll fast at first so a short job is noticed at once, then back off; the
# ceiling keeps completion noticed well within a second.
POLL_FIRST = 0.05
POLL_MAX = 0.1
LIVENESS_EVERY = 2.0

# Directories `find` never descends into: large, and never hold our state.
SKIP_DIRS = {".git", "node_modules", ".venv", "venv", "__pycache__", "site-packages", ".tox"}

Json = dict  # Dict[str, Any]: a JSON object


class DeckError(Exception):
    """A failure the caller can act on: printed as {"ok": false, "error", "fix"}."""

    def __init__(self, message: str, fix: str = "", code: int = 1, extra: Optional[Json] = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix
        self.code = code
        self.extra = extra or {}

    def payload(self) -> Json:
        out: Json = {"ok": False, "error": self.message}
        if self.fix:
            out["fix"] = self.fix
        out.update(self.extra)
        return out


class Interrupted(BaseException):
    """Raised from a signal handler so a killed hold still answers and traces."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class Result:
    """What a subcommand answers: one JSON object, an exit code, and its layout."""

    def __init__(self, payload: Json, code: int = 0, pretty: bool = True) -> None:
        self.payload = payload
        self.code = code
        self.pretty = pretty


# --------------------------------------------------------------------------- helpers


def script_cmd() -> str:
    """How to call this script again, for `next` hints (path as it was typed)."""
    return "python3 " + shlex.quote(sys.argv[0] or "skills/palette/scripts/deck.py")


def abspath(p: str) -> Path:
    # No symlink resolution: the agent should recognise the paths we echo back.
    return Path(os.path.abspath(os.path.expanduser(p)))


def sidecar(target: Path, suffix: str) -> Path:
    """`.<basename>.<suffix>` beside target, so two plans in one dir never clash."""
    return target.parent / f".{target.name}.{suffix}"


def read_json(path: Path) -> Optional[Json]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_json(path: Path, data: Json) -> None:
    # Write then rename, so a concurrent reader never sees half a file.
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_exit(path: Path) -> Optional[int]:
    """The exit code the shell wrapper recorded, or None while the job runs."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    try:
        return int(text)
    except ValueError:
        return -1  # present but unreadable: the job has ended, outcome unknown


def job_state(exit_file: Path, pid: Any) -> Tuple[bool, Optional[int]]:
    """(still running, exit code) of a detached job. The exit file is read again once the job is known gone:
    it may have ended between the two looks, and then its code is there (else it was killed)."""
    code = read_exit(exit_file)
    if code is not None:
        return False, code
    if alive(pid) is not False:
        return True, None
    return False, read_exit(exit_file)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> List[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


def last_log_line(path: Path) -> str:
    for line in reversed(log_tail(path, 40)):
        if line.strip():
            return line.strip()[:200]
    return ""


def mtime(path: Path) -> Optional[float]:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def alive(pid: Any) -> Optional[bool]:
    """True/False when known; None when it cannot be told. None is never 'dead'.

    Only ProcessLookupError proves death: sandboxes (e.g. Seatbelt) answer
    PermissionError for live processes, and treating that as dead once made
    agents abandon running builds.
    """
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError and anything else: unknown
        return None
    import subprocess

    try:
        # -ww and no COLUMNS: ps otherwise cuts args at the terminal width,
        # which can hide "palette" behind a long interpreter path.
        env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
        proc = subprocess.run(
            ["ps", "-ww", "-p", str(pid), "-o", "stat=,args="],
            capture_output=True, text=True, timeout=5, stdin=subprocess.DEVNULL, env=env,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    stat, _, args = proc.stdout.strip().partition(" ")
    if stat.startswith("Z"):
        return False  # a zombie has ended; only its parent has not reaped it yet
    if args.strip().startswith("[") or not args.strip():
        # A process in the middle of exec shows no command line ("[sh]"): that is not evidence of death.
        return None
    # A recycled pid names some other program.
    return "palette" in args


def hold(ended: Callable[[], bool], pid: Any, seconds: Optional[float]) -> None:
    """Wait until `ended()` or the process is known dead or `seconds` pass (None: no limit)."""
    deadline = None if seconds is None else time.monotonic() + seconds
    interval = POLL_FIRST
    next_liveness = time.monotonic()  # check at once: collecting a dead job should not wait
    while not ended():
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            return
        if now >= next_liveness:
            if alive(pid) is False and not ended():
                return
            next_liveness = now + LIVENESS_EVERY
        nap = interval if deadline is None else min(interval, deadline - now)
        time.sleep(max(nap, 0.0))
        interval = min(interval * 1.5, POLL_MAX)


def common_prefix(strings: List[str]) -> str:
    """The longest string all of ``strings`` start with, compared character by character.

    What ``os.path.commonprefix`` computes, without borrowing a path function
    for plain text (here: runs of indentation, which have no path components).
    """
    if not strings:
        return ""
    first, last = min(strings), max(strings)
    for index, char in enumerate(first):
        if char != last[index]:
            return first[:index]
    return first


def unindent(text: str) -> str:
    """Undo the indent an agent adds when it embeds text as a literal in code.

    Narrow on purpose: only when the first line is flush and every other
    non-blank line shares a common indent. Anything else is left untouched.
    """
    lines = text.split("\n")
    if len(lines) < 2 or lines[0][:1] in (" ", "\t"):
        return text
    rest = [ln for ln in lines[1:] if ln.strip()]
    if not rest:
        return text
    indent = common_prefix([ln[: len(ln) - len(ln.lstrip(" \t"))] for ln in rest])
    if not indent:
        return text
    fixed = [lines[0]] + [ln[len(indent):] if ln.startswith(indent) else ln.strip() for ln in lines[1:]]
    return "\n".join(fixed)


def looks_pasted(request: str) -> bool:
    # The line rule comes first: a 310-character, 18-line document once slipped
    # past a length-only rule.
    newlines = request.count("\n")
    return newlines >= 8 or (len(request) > 400 and newlines >= 3)


def verify(out_dir: Path) -> Json:
    pptx = out_dir / "deck.pptx"
    size = pptx.stat().st_size if pptx.is_file() else 0
    return {
        "pptx": str(pptx) if pptx.is_file() else None,
        "pptx_bytes": size,
        "slide_previews": len(list(out_dir.glob("*.png"))) if out_dir.is_dir() else 0,
        "verified": size >= MIN_PPTX_BYTES,
    }


# --------------------------------------------------------------------------- backends


def parse_dotenv(path: Path) -> Dict[str, str]:
    """A small .env reader: KEY=VALUE, optional `export `, quotes, `~/`, # comments."""
    values: Dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return values
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            continue
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        elif " #" in value:
            value = value.split(" #", 1)[0].rstrip()
        if value.startswith("~/"):
            value = os.path.expanduser(value)
        values[key] = value
    return values


class Backend:
    """How to run one backend subcommand (build-plan, edit-plan, build-deck)."""

    def __init__(self, name: str, prefix: List[str], cwd: str, env: Dict[str, str]) -> None:
        self.name = name
        self.prefix = prefix
        self.cwd = cwd
        self.env = env

    def argv(self, sub: str, rest: List[str]) -> List[str]:
        return self.prefix + [sub] + rest


def env_set(name: str) -> str:
    return os.environ.get(name, "").strip()


def resolve_backend() -> Backend:
    if env_set("PALETTE_URL"):
        raise DeckError(
            f"PALETTE_URL is set ({env_set('PALETTE_URL')}), "
            "but remote mode is not supported by this deck.py",
            fix="unset PALETTE_URL; set PALETTE_HOME to a local Palette checkout, "
            "or leave both unset to use the pytest-palette reference engine",
        )
    home_raw = env_set("PALETTE_HOME")
    if home_raw:
        home = abspath(home_raw)
        entry = home / "palette.py"
        if not entry.is_file():
            raise DeckError(
                f"PALETTE_HOME={home_raw} has no palette.py (looked for {entry})",
                fix="set PALETTE_HOME to the Palette checkout that holds palette.py, "
                "or unset it to use the pytest-palette reference engine",
            )
        venv_py = home / ".venv" / "bin" / "python"
        py = str(venv_py) if venv_py.exists() else sys.executable
        env = parse_dotenv(home / ".env")
        env.update(os.environ)  # variables already set win over .env
        return Backend("palette", [py, "-u", str(entry)], str(home), env)
    both_fixes = (
        "set PALETTE_HOME to a Palette checkout that holds palette.py, or set PALETTE_PYTHON "
        "to a Python interpreter that has pytest-palette installed"
    )
    py_raw = env_set("PALETTE_PYTHON")
    if py_raw:
        import shutil

        found = shutil.which(os.path.expanduser(py_raw))
        if found is None:
            raise DeckError(f"PALETTE_PYTHON={py_raw} is not an executable interpreter", fix=both_fixes)
        py = found
    else:
        import importlib.util

        if importlib.util.find_spec("pytest_palette") is None:
            raise DeckError(
                "no Palette backend: PALETTE_HOME is unset and this interpreter "
                f"({sys.executable}) cannot import pytest_palette, the reference engine",
                fix=both_fixes,
            )
        py = sys.executable
    return Backend("reference", [py, "-u", "-m", "pytest_palette.engine"], os.getcwd(), dict(os.environ))


def detach(argv: List[str], backend: Backend, log: Path, exit_file: Path) -> int:
    """Start argv in its own session; the shell wrapper records its exit code.

    The exit code goes to a temp file renamed into place, so a reader never
    sees an empty exit file. stdin/stdout/stderr are redirected and fds closed,
    so a caller that captures our output is not held open by the job.
    """
    tmp_exit = exit_file.with_name(exit_file.name + ".tmp")
    for stale in (exit_file, tmp_exit):  # a stale exit file would read as "finished"
        try:
            stale.unlink()
        except FileNotFoundError:
            pass
    script = "{cmd}; echo $? > {tmp} && mv -f {tmp} {final}".format(
        cmd=shlex.join(argv), tmp=shlex.quote(str(tmp_exit)), final=shlex.quote(str(exit_file))
    )
    import subprocess

    with open(log, "wb") as logf, open(os.devnull, "rb") as devnull:
        proc = subprocess.Popen(
            ["/bin/sh", "-c", script],
            cwd=backend.cwd, env=backend.env, stdin=devnull, stdout=logf, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True,
        )
    return proc.pid


# --------------------------------------------------------------------------- plans


def plan_target(typed: str) -> Path:
    out = abspath(typed)
    if out.is_dir():
        raise DeckError(f"--out {typed} is a directory", fix="pass --out a file path, e.g. --out plan.md")
    return out


def plan_paths(out: Path) -> Tuple[Path, Path, Path]:
    return sidecar(out, "plan.json"), sidecar(out, "plan.exit"), sidecar(out, "plan.log")


def plan_running(out: Path) -> bool:
    state_file, exit_file, _ = plan_paths(out)
    state = read_json(state_file)
    if state is None or exit_file.exists():
        return False
    return alive(state.get("pid")) is not False


def plan_answer(out: Path, typed_out: str, state: Json) -> Result:
    """The plan-status answer for a sidecar, with no waiting."""
    state_file, exit_file, log = plan_paths(out)
    started = float(state.get("started_at") or 0)
    stage = str(state.get("stage") or "build-plan")
    running, code = job_state(exit_file, state.get("pid"))
    elapsed = int(max(0.0, time.time() - started))
    if running:
        state["state"] = "running"
        payload: Json = {
            "state": "running",
            "done": False,
            "elapsed_seconds": elapsed,
            "note": f"still drafting after {elapsed}s of a typical 40-180s call; {stage} is running, "
            "do NOT run plan or edit again. Collect this one with plan-status",
            "next": f"{script_cmd()} plan-status --out {shlex.quote(typed_out)}",
        }
        write_json(state_file, state)
        return Result(payload)
    text = ""
    try:
        text = out.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        pass
    written = mtime(out)
    # A plan from before this job started is not this job's output.
    fresh = written is not None and written >= started - 2
    if code == 0 and text.strip() and fresh:
        state["state"] = "done"
        write_json(state_file, state)
        took = int(max(0.0, (written or started) - started))
        return Result(
            {"state": "done", "done": True, "plan": str(out), "elapsed_seconds": took, "text": text}
        )
    state["state"] = "error"
    write_json(state_file, state)
    if code is None:
        hint = (f"{stage} stopped without recording an exit code (killed?); "
                "relay log_tail and ask before retrying")
    elif code != 0:
        hint = f"{stage} failed with exit code {code}; relay log_tail to the user and ask before retrying"
    else:
        hint = f"{stage} exited 0 but wrote no plan to {out}; relay log_tail and ask before retrying"
    return Result(
        {
            "state": "error", "done": False, "exit_code": code, "elapsed_seconds": elapsed,
            "log_tail": log_tail(log), "hint": hint,
        },
        code=1,
    )


def collect_plan(out: Path, typed_out: str, hold_seconds: Optional[float]) -> Result:
    state_file, exit_file, _ = plan_paths(out)
    state = read_json(state_file)
    if state is None:
        return plan_none(out, typed_out)
    hold(exit_file.exists, state.get("pid"), hold_seconds)
    state = read_json(state_file) or state
    return plan_answer(out, typed_out, state)


def plans_under(root: Path) -> List[Path]:
    """Plan files under root that have a plan sidecar (drafting or drafted)."""
    found: List[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            if name.startswith(".") and name.endswith(".plan.json") and len(name) > len("..plan.json"):
                found.append(Path(dirpath) / name[1: -len(".plan.json")])
    return found


def plan_none(out: Path, typed_out: str) -> Result:
    cwd = Path.cwd()
    here = []
    for p in plans_under(cwd):
        try:
            here.append(str(p.relative_to(cwd)))
        except ValueError:
            here.append(str(p))
    if here:
        nxt = f"{script_cmd()} plan-status --out {shlex.quote(here[0])}"
        note = f"nothing was drafted at {out}; plans that do exist here are listed in plans_here"
    else:
        nxt = f"{script_cmd()} plan --request \"<the user's request, verbatim>\" --out plan.md"
        note = f"nothing was drafted at {out}, and no plan exists under {cwd}; draft one with plan"
    return Result(
        {
            "state": "none", "done": False, "asked_about": typed_out, "note": note,
            "plans_here": here, "next": nxt,
        }
    )


def launch_plan(stage: str, argv_rest: List[str], out: Path, typed_out: str,
                hold_seconds: Optional[float], wait: bool) -> Result:
    """Detach build-plan/edit-plan for `out`, unless one is already writing it."""
    state_file, exit_file, log = plan_paths(out)
    if plan_running(out):
        # A second writer once turned a 3-slide request into a 4-slide deck.
        result = collect_plan(out, typed_out, None if wait else hold_seconds)
        if result.payload.get("state") != "running":
            result.payload["note"] = (
                f"a {stage} was not started: one was already running for {out}; this is its result"
            )
        return result
    backend = resolve_backend()
    pid = detach(backend.argv(stage, argv_rest), backend, log, exit_file)
    state: Json = {
        "state": "running", "stage": stage, "pid": pid, "plan": str(out),
        "started_at": int(time.time()), "backend": backend.name,
    }
    write_json(state_file, state)
    t0 = time.monotonic()
    hold(exit_file.exists, pid, None if wait else hold_seconds)
    if exit_file.exists() or alive(pid) is False:
        result = plan_answer(out, typed_out, read_json(state_file) or state)
        if wait and result.code != 0:
            result.payload.update({"ok": False, "error": last_log_line(log) or f"{stage} failed"})
        return result
    payload = dict(state)
    payload.update(
        {
            "done": False,
            "elapsed_seconds": int(time.monotonic() - t0),
            "note": f"{stage} is still running — do NOT run plan or edit again (that starts a second "
            "writer). Collect this one with plan-status",
            "next": f"{script_cmd()} plan-status --out {shlex.quote(typed_out)}",
        }
    )
    return Result(payload)


# --------------------------------------------------------------------------- subcommands


def cmd_plan(args: argparse.Namespace) -> Result:
    request = unindent(args.request)
    context = unindent(args.context) if args.context is not None else None
    sources = list(args.source or [])
    if looks_pasted(request) and not (context and context.strip()) and not sources:
        raise DeckError(
            f"--request is {len(request)} characters over {request.count(chr(10)) + 1} lines with no "
            "--context or --source; it looks like pasted material, which must not go in --request",
            fix="put only the user's own request in --request and the pasted material, verbatim, in "
            "--context \"<the material>\" (or save it to a file and pass --source <path>)",
            code=2,
        )
    out = plan_target(args.out)
    rest = [request, "--out", str(out)]
    if context is not None:
        rest += ["--context", context]
    for src in sources:
        path = abspath(src)
        if not path.is_file():
            raise DeckError(f"no source file at {path}", fix="pass --source the path of an existing file")
        rest += ["--source", str(path)]
    out.parent.mkdir(parents=True, exist_ok=True)
    return launch_plan("build-plan", rest, out, args.out, args.hold_seconds, args.wait)


def cmd_edit(args: argparse.Namespace) -> Result:
    plan = abspath(args.plan)
    if not plan.is_file():
        raise DeckError(
            f"no plan at {plan}",
            fix="pass --plan the plan file that plan wrote (see find --root .), or draft one with plan",
        )
    typed_out = args.out if args.out is not None else args.plan
    out = plan_target(typed_out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rest = [unindent(args.instruction), "--plan", str(plan), "--out", str(out)]
    return launch_plan("edit-plan", rest, out, typed_out, args.hold_seconds, args.wait)


def cmd_plan_status(args: argparse.Namespace) -> Result:
    return collect_plan(abspath(args.out), args.out, args.hold_seconds)


def build_running(out_dir: Path) -> Optional[Json]:
    state = read_json(out_dir / BUILD_STATE)
    if state is None or (out_dir / BUILD_EXIT).exists() or alive(state.get("pid")) is False:
        return None
    return state


def cmd_start(args: argparse.Namespace) -> Result:
    plan = abspath(args.plan)
    if not plan.is_file():
        raise DeckError(
            f"no plan at {plan}",
            fix="pass --plan the plan file the user approved (see find --root .); draft one with plan first",
        )
    out_dir = abspath(args.out_dir)
    status_next = f"{script_cmd()} status --out-dir {shlex.quote(args.out_dir)}"
    running = build_running(out_dir)
    if running is not None:
        payload = dict(running)
        payload.update({"note": "already building; poll with status", "next": status_next})
        return Result(payload, pretty=False)
    backend = resolve_backend()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DeckError(f"cannot create {out_dir}: {exc}", fix="pass an --out-dir you can write to") from exc
    rest = ["--plan", str(plan), "--out-dir", str(out_dir), "--json"]
    if args.palette_family:
        rest += ["--palette-family", args.palette_family]
    log = out_dir / BUILD_LOG
    pid = detach(backend.argv("build-deck", rest), backend, log, out_dir / BUILD_EXIT)
    state: Json = {
        "state": "running", "pid": pid, "plan": str(plan), "out_dir": str(out_dir), "log": str(log),
        "started_at": int(time.time()), "backend": backend.name,
    }
    write_json(out_dir / BUILD_STATE, state)
    payload = dict(state)
    payload.update(
        {
            "note": "building — takes 3-10 minutes; poll with `deck.py status` (it holds)",
            "next": status_next,
        }
    )
    return Result(payload, pretty=False)


def build_answer(out_dir: Path, state: Json, typed_dir: str) -> Result:
    """The status answer for a build, with no waiting. Rewrites the state file."""
    started = float(state.get("started_at") or 0)
    elapsed = int(max(0.0, time.time() - started))
    running, code = job_state(out_dir / BUILD_EXIT, state.get("pid"))
    log = out_dir / BUILD_LOG
    # Decide whether the build has ENDED before looking at deck.pptx: build-deck
    # re-renders the same file while it repairs geometry, so a complete-looking
    # deck exists minutes before the build is over.
    if running:
        state["state"] = "running"
        write_json(out_dir / BUILD_STATE, state)
        payload: Json = {
            "state": "running", "done": False, "elapsed_seconds": elapsed,
            "note": f"still rendering after {elapsed}s of a typical 180-600s build; do not start again",
            "next": f"{script_cmd()} status --out-dir {shlex.quote(typed_dir)}",
        }
        progress = last_log_line(log)
        if progress:
            payload["progress"] = progress
        return Result(payload)
    check = verify(out_dir)
    pptx_time = mtime(out_dir / "deck.pptx")
    fresh = pptx_time is not None and pptx_time >= started - 2  # not a deck left by an earlier build
    if code == 0 and check["verified"] and fresh:
        state["state"] = "done"
        write_json(out_dir / BUILD_STATE, state)
        took = int(max(0.0, (pptx_time or started) - started))
        payload = {"state": "done", "done": True}
        payload.update(check)
        payload["elapsed_seconds"] = took
        return Result(payload)
    state["state"] = "error"
    write_json(out_dir / BUILD_STATE, state)
    if code is None:
        hint = "the build process stopped without recording an exit code (killed?)"
    elif code != 0:
        hint = f"build-deck failed with exit code {code}"
    elif not check["verified"]:
        hint = f"build-deck ended but deck.pptx is missing or under {MIN_PPTX_BYTES} bytes"
    else:
        hint = "build-deck ended but deck.pptx is older than this build (a leftover from an earlier one)"
    payload = {"state": "error", "done": False, "elapsed_seconds": elapsed, "exit_code": code}
    payload.update(check)
    payload.update({"log_tail": log_tail(log), "hint": hint + "; relay log_tail to the user and ask before "
                    "building again"})
    return Result(payload, code=1)


def cmd_status(args: argparse.Namespace) -> Result:
    out_dir = abspath(args.out_dir)
    state_file = out_dir / BUILD_STATE
    state = read_json(state_file)
    if state is None:
        return Result(
            {
                "state": "none", "done": False, "out_dir": str(out_dir),
                "note": "no build has been started in this directory",
                "next": f"{script_cmd()} start --plan plan.md --out-dir {shlex.quote(args.out_dir)}",
            }
        )
    exit_file = out_dir / BUILD_EXIT
    hold(exit_file.exists, state.get("pid"), args.hold_seconds)
    return build_answer(out_dir, read_json(state_file) or state, args.out_dir)


def find_build(out_dir: Path) -> Json:
    """A build directory's state for `find`, read-only (no state rewrite, no hold)."""
    entry: Json = {"kind": "build", "dir": str(out_dir)}
    state = read_json(out_dir / BUILD_STATE)
    if state is None:
        entry["state"] = "none"
        return entry
    started = float(state.get("started_at") or 0)
    running, code = job_state(out_dir / BUILD_EXIT, state.get("pid"))
    if running:
        entry.update({"state": "running", "elapsed_seconds": int(max(0.0, time.time() - started))})
        return entry
    check = verify(out_dir)
    pptx_time = mtime(out_dir / "deck.pptx")
    if code == 0 and check["verified"] and pptx_time is not None and pptx_time >= started - 2:
        entry.update({"state": "done", "pptx": check["pptx"], "pptx_bytes": check["pptx_bytes"],
                      "slide_previews": check["slide_previews"]})
    else:
        log = out_dir / BUILD_LOG
        entry.update({"state": "error", "exit_code": code, "log": str(log), "log_tail": log_tail(log)})
    return entry


def find_plan(plan: Path) -> Json:
    state_file, exit_file, _ = plan_paths(plan)
    state = read_json(state_file) or {}
    started = float(state.get("started_at") or 0)
    running, code = job_state(exit_file, state.get("pid"))
    written = plan.is_file() and plan.stat().st_size > 0
    if running:
        status = "running"
    elif code == 0 and written and (mtime(plan) or 0) >= started - 2:
        status = "done"
    else:
        status = "error"
    return {"kind": "plan", "path": str(plan), "written": written, "state": status}


def cmd_find(args: argparse.Namespace) -> Result:
    root = abspath(args.root)
    if not root.is_dir():
        raise DeckError(f"no directory at {root}", fix="pass --root an existing directory, e.g. --root .")
    found: List[Json] = [find_plan(p) for p in plans_under(root)]
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        if BUILD_STATE in filenames:
            found.append(find_build(Path(dirpath)))
    decks = sum(1 for e in found if e["kind"] == "build" and e["state"] == "done")
    note = f"{decks} finished deck(s)" if decks else "no finished deck under this root"
    return Result({"root": str(root), "found": found, "note": note})


# --------------------------------------------------------------------------- cli


def seconds_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if value < 0 or value != value:
        raise argparse.ArgumentTypeError(f"must be 0 or more: {text!r}")
    return int(value) if value.is_integer() else value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="deck.py", description=__doc__.split("\n")[0])
    subs = parser.add_subparsers(dest="command", required=True)

    p = subs.add_parser("plan", help="draft a plan (holds until drafted, up to --hold-seconds)")
    p.add_argument("--request", required=True, help="the user's request, verbatim")
    p.add_argument("--context", help="pasted material, verbatim")
    p.add_argument("--source", action="append", help="a file with material (repeatable)")
    p.add_argument("--out", required=True, help="where the plan is written, e.g. plan.md")
    p.add_argument("--wait", action="store_true", help="hold with no time limit (not for agents)")
    p.add_argument("--hold-seconds", type=seconds_arg, default=90)
    p.set_defaults(func=cmd_plan)

    p = subs.add_parser("plan-status", help="collect a plan or edit (holds up to --hold-seconds)")
    p.add_argument("--out", required=True)
    p.add_argument("--hold-seconds", type=seconds_arg, default=60)
    p.set_defaults(func=cmd_plan_status)

    p = subs.add_parser("edit", help="revise a plan (holds until revised, up to --hold-seconds)")
    p.add_argument("--instruction", required=True, help="the user's words, verbatim")
    p.add_argument("--plan", required=True)
    p.add_argument("--out", help="default: overwrite --plan")
    p.add_argument("--wait", action="store_true", help="hold with no time limit (not for agents)")
    p.add_argument("--hold-seconds", type=seconds_arg, default=90)
    p.set_defaults(func=cmd_edit)

    p = subs.add_parser("start", help="start rendering an approved plan (returns at once)")
    p.add_argument("--plan", required=True)
    p.add_argument("--out-dir", required=True)
    p.add_argument("--palette-family", help="a style family; only if the user asks for one")
    p.set_defaults(func=cmd_start)

    p = subs.add_parser("status", help="collect a build (holds up to --hold-seconds)")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--hold-seconds", type=seconds_arg, default=60)
    p.set_defaults(func=cmd_status)

    p = subs.add_parser("find", help="list plans and builds under a directory")
    p.add_argument("--root", default=".")
    p.set_defaults(func=cmd_find)
    return parser


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… [+{len(text) - limit} chars]"


def render(payload: Json, pretty: bool) -> str:
    indent = 2 if pretty else None
    text = json.dumps(payload, indent=indent, ensure_ascii=False)
    try:
        text.encode(sys.stdout.encoding or "utf-8")
    except (UnicodeEncodeError, LookupError):
        text = json.dumps(payload, indent=indent)  # an ASCII-only terminal still gets valid JSON
    return text + "\n"


def write_trace(
    started: float, args: argparse.Namespace, code: int, stdout: str, error: Optional[str]
) -> None:
    """Append one JSON line for this call to $PALETTE_TRACE. Never breaks the command."""
    target = os.environ.get("PALETTE_TRACE", "").strip()
    if not target:
        return
    fields: Json = {}
    for key, value in vars(args).items():
        if key in ("func", "command") or value is None:
            continue
        fields[key] = clip(value, ARG_CLIP) if isinstance(value, str) else value
    line: Json = {
        "at": round(started, 3),
        "command": args.command,
        "args": fields,
        "seconds": round(time.time() - started, 2),
        "exit_code": code,
        "stdout": clip(stdout, STDOUT_CLIP),
    }
    if error is not None:
        line["error"] = error
    try:
        path = Path(os.path.expanduser(target))
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    except (OSError, ValueError):
        pass


class Record:
    """This run, told to the harness's record as it happens (see RECORD_SOCKET). Never breaks the command."""

    def __init__(self) -> None:
        self.sock: Optional[socket.socket] = None
        path = RECORD_SOCKET if os.path.exists(RECORD_SOCKET) else env_set("PALETTE_SKILL_RECORD")
        if not path:
            return
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(RECORD_NOD_SECONDS)
            sock.connect(path)
            self.sock = sock
            self.say({"protocol": RECORD_PROTOCOL, "argv": sys.argv, "cwd": os.getcwd()})
            # The nod: the harness has read this process's arguments and script while it waits, before any work.
            sock.recv(64)
        except OSError:
            pass

    def say(self, message: Json) -> None:
        if self.sock is None:
            return
        try:
            self.sock.sendall(json.dumps(message, ensure_ascii=False, default=str).encode("utf-8") + b"\n")
        except OSError:
            self.close()

    def parsed(self, args: argparse.Namespace) -> None:
        self.say({"command": args.command,
                  "args": {k: v for k, v in vars(args).items() if k not in ("func", "command") and v is not None}})

    def ended(self, code: Any, stdout: str) -> None:
        code = code if isinstance(code, int) else 1 if code else 0  # SystemExit's code may be None or a message
        self.say({"exit_code": code, "stdout": clip(stdout, RECORD_STDOUT)})
        self.close()

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None


def _on_signal(signum: int, _frame: Any) -> NoReturn:
    raise Interrupted(signum)


def main(argv: Optional[List[str]] = None) -> int:
    record = Record()
    try:
        args = build_parser().parse_args(argv)  # usage errors exit 2 here, before any trace
    except SystemExit as refused:
        record.ended(refused.code, "")
        raise
    record.parsed(args)
    started = time.time()
    # A host that kills a long hold still gets an answer and a trace line.
    signal.signal(signal.SIGTERM, _on_signal)
    error: Optional[str] = None
    result: Result
    try:
        result = args.func(args)
    except DeckError as exc:
        error = exc.message
        result = Result(exc.payload(), code=exc.code, pretty=False)
    except (Interrupted, KeyboardInterrupt) as exc:
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        error = f"interrupted by signal {int(signum)}"
        result = Result(
            {"ok": False, "error": error,
             "fix": "this call was cut short, not the job: run plan-status or status again to collect it"},
            code=128 + int(signum), pretty=False,
        )
    except Exception as exc:  # a bug here must still answer in JSON and leave a trace
        error = f"internal error: {type(exc).__name__}: {exc}"
        result = Result({"ok": False, "error": error}, code=1, pretty=False)
    text = render(result.payload, result.pretty)
    write_trace(started, args, result.code, text, error)
    record.ended(result.code, text)
    sys.stdout.write(text)
    sys.stdout.flush()
    return result.code


if __name__ == "__main__":
    sys.exit(main())
