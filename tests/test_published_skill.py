"""IBM's published skill in the sandbox, on a machine whose `python` comes from a version manager's shims (issue 21,
route 8).

Its SKILL.md runs `python skills/palette/scripts/deck.py …` (ours says `python3`) and its deck.py has no engine of
its own: PALETTE_HOME names the reference engine's palette.py. Run as the README says — the venv's pytest, the venv
not activated — on a PATH where `python` is only a shim in a manager's root, every shipped case passes sandboxed,
as it does unconfined. With that root hidden from the sandbox, an item whose skill never started is an ERROR that
names `python`, not a FAIL blamed on the skill.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from sweeps import Sweeps
from test_backend import real_style_skill
from test_benchmark_suite import ALL, DECK

from pytest_palette.arena import sandbox
from pytest_palette.arena.command_log import NOT_FOUND, CommandRun, read, skill_calls
from pytest_palette.backend import REFERENCE_HOME
from pytest_palette.run import faults

pytest_plugins = ["pytester"]
#: A whole session of 52 items: more than the suite's 600 s hang guard allows when the machine is busy.
pytestmark = [pytest.mark.timeout(1800),
              pytest.mark.skipif(sandbox.problem("bubblewrap") is not None,
                                 reason=f"no sandbox here: {sandbox.problem('bubblewrap')}")]

REPO = Path(__file__).resolve().parent.parent
SYSTEM_BIN = ("/usr/local/bin", "/usr/bin", "/bin")


def published_skill(folder: Path) -> Path:
    """IBM's skill as published: no engine fallback in deck.py, and `python`, not `python3`, in SKILL.md."""
    skill = real_style_skill(folder)
    card = skill / "SKILL.md"
    text = card.read_text(encoding="utf-8")
    assert "python3 skills/palette/scripts/deck.py" in text
    card.write_text(text.replace("python3 skills/", "python skills/"), encoding="utf-8")
    return skill


def skip_if_system_python() -> None:
    if any(os.path.lexists(f"{folder}/python") for folder in SYSTEM_BIN):
        pytest.skip("this machine has a `python` of its own in a system folder")


def shims_path(folder: Path) -> tuple[str, Path]:
    """A PATH as pyenv makes one, and the manager's root: `python` is only `<root>/shims/python`, a script that
    hands over to the manager's own script in its root, which runs the version its `version` file names from
    `<root>/versions/` — here the venv this harness runs from, the one with python-pptx."""
    skip_if_system_python()
    root = folder / "manager"
    (root / "versions").mkdir(parents=True)
    (root / "versions" / "harness").symlink_to(sys.prefix)
    (root / "version").write_text("harness\n", encoding="utf-8")
    manager, shim = root / "libexec" / "manager", root / "shims" / "python"
    for script, body in ((manager, 'program=$1; shift\nversion=$(cat "$MANAGER_ROOT/version")\n'
                                   'exec "$MANAGER_ROOT/versions/$version/bin/$program" "$@"\n'),
                         (shim, f'export MANAGER_ROOT={shlex.quote(str(root))}\n'
                                'exec "$MANAGER_ROOT/libexec/manager" python "$@"\n')):
        script.parent.mkdir()
        script.write_text(f"#!/bin/sh\nset -e\n{body}", encoding="utf-8")
        script.chmod(0o755)
    path = os.pathsep.join([str(shim.parent), *SYSTEM_BIN])
    assert shutil.which("python", path=path) == str(shim)
    return path, root


def sandbox_env_args() -> list[str]:
    # The sandbox keeps no PYTHONPATH: a test run from a git worktree passes it on, or deck.py's engine would import
    # the copy of the package the venv points at (tests/test_benchmark_suite.py's run_suite does the same).
    return ["--palette-sandbox-env=PYTHONPATH"] if os.environ.get("PYTHONPATH") else []


@pytest.fixture(scope="module")
def published_run(sweeps: Sweeps) -> tuple[Path, dict[str, tuple[str, str]], str]:
    """The 52 shipped cases on react with IBM's skill, sandboxed, run as the README says: the run folder, each
    case's outcome and text (JUnit), and the terminal output. Once per test session, whichever worker asks first."""
    skip_if_system_python()  # shims_path's own skip, said here: a skip inside the shared run would be kept as a failure
    return sweeps.shared("published", _published_run)


def _published_run(folder: Path) -> tuple[Path, dict[str, tuple[str, str]], str]:
    path, _ = shims_path(folder)
    env = {name: value for name, value in os.environ.items() if name != "VIRTUAL_ENV"}  # the venv not activated
    env.update(PATH=path, PALETTE_HOME=str(REFERENCE_HOME))
    junit = folder / "junit.xml"
    done = subprocess.run(
        [str(Path(sys.executable).parent / "pytest"), str(REPO / "cases"), "--host=react", "-p", "no:cacheprovider",
         "-p", "no:randomly", f"--rootdir={REPO}", f"--palette-run-dir={folder / 'runs'}",
         f"--palette-skill={published_skill(folder)}", f"--junitxml={junit}", *sandbox_env_args()],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1500, check=False)
    assert junit.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    outcomes = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        bad = next((case.find(kind) for kind in ("error", "failure") if case.find(kind) is not None), None)
        outcomes[str(case.get("name")).split("[")[0]] = (
            "pass" if bad is None else bad.tag, "" if bad is None else str(bad.get("message")) + (bad.text or ""))
    return folder / "runs", outcomes, done.stdout


@pytest.mark.end_to_end
@pytest.mark.slow
def test_ibms_published_skill_passes_every_shipped_case_sandboxed_with_python_from_shims(
        published_run: tuple[Path, dict[str, tuple[str, str]], str]) -> None:
    runs, outcomes, stdout = published_run
    assert set(outcomes) == ALL and len(ALL) == 52
    assert {case: said for case, said in outcomes.items() if said[0] != "pass"} == {}
    assert "commands bubblewrap" in stdout and "reference engine through its palette.py" in stdout
    # The rehearsal agent ran the skill as its SKILL.md says — `python`, which only the shims folder has — and each
    # deck case's calls started (none could not).
    ran = [run for log in runs.glob("*/react/*/commands.jsonl") for run in read(log)]
    deck_calls = [run for run in ran if "deck.py" in run.command]
    assert deck_calls and all(run.command.startswith("python skills/palette/scripts/deck.py ") for run in deck_calls)
    assert all(run.exit_code is not None and run.exit_code != NOT_FOUND for run in deck_calls)
    assert {deck.parent.parent.name for deck in runs.glob("*/react/*/output/*.pptx")} == DECK


def test_the_sandbox_binds_the_managers_root_read_only_and_not_the_home(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    path, root = shims_path(tmp_path)
    work = tmp_path / "runs" / "r" / "react" / "case" / "work"
    work.mkdir(parents=True)
    # The shims' root (its script, its version file, its versions), and nothing of the system.
    assert sandbox.path_folders(path, keep_out=[work.parent]) == [root]
    home = tmp_path / "home"
    for folder in ("bin", ".ssh", ".local/bin", ".local/lib", ".cargo/bin"):
        (home / folder).mkdir(parents=True)
    (home / ".cargo" / "credentials.toml").write_text("token = 'fake'\n", encoding="utf-8")
    monkeypatch.setenv("HOME", str(home))
    # A home's own bins alone: not the home, not ~/.local (every program's data), not a bin's parent that is no
    # prefix of its commands (~/.cargo keeps a registry token beside its bin).
    bins = [home / "bin", home / ".local/bin", home / ".cargo/bin"]
    assert sandbox.path_folders(":".join(map(str, [*bins, home]))) == bins
    assert sandbox.path_folders(f"{tmp_path / 'runs'}:{work}", keep_out=[work.parent]) == []  # nor the run folder
    boxed = sandbox.Sandbox(work, {"PATH": f"{path}:{home / 'bin'}"})
    try:
        shown = subprocess.run(
            boxed.argv("python -c 'import os, sys; print(os.path.realpath(sys.prefix))'; "
                       f"touch {shlex.quote(str(root / 'x'))} || echo read-only; ls -a {shlex.quote(str(home))}",
                       work),
            env=boxed.env, capture_output=True, text=True, timeout=120, check=False)
    finally:
        boxed.close()
    assert shown.stdout.splitlines()[:2] == [os.path.realpath(sys.prefix), "read-only"], shown.stdout + shown.stderr
    assert not (root / "x").exists()
    assert ".ssh" not in shown.stdout and "bin" in shown.stdout  # the home's bin, not the home


@pytest.mark.end_to_end
def test_with_the_shims_folder_hidden_an_item_is_an_error_naming_python_not_a_fail(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, _ = shims_path(tmp_path)
    monkeypatch.setattr(sandbox, "path_folders", lambda *args, **kwargs: [])  # the sandbox before issue 21
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    monkeypatch.setenv("PATH", path)
    monkeypatch.setenv("PALETTE_HOME", str(REFERENCE_HOME))
    result = pytester.runpytest_inprocess(
        str(REPO / "cases"), "--host=react", "-k", "plain_request or slide_fonts_question", "-p", "no:cacheprovider",
        "-p", "no:randomly", f"--palette-run-dir={tmp_path / 'runs'}",
        f"--palette-skill={published_skill(tmp_path)}", *sandbox_env_args())
    result.assert_outcomes(errors=1, passed=1)  # the near miss needs no skill and passes
    text = result.stdout.str()
    assert "ERROR" in text and "plain_request" in text and "no .pptx was produced" not in text
    said = "the skill's script could not start: no `python` in the agent's shell (/bin/sh: "
    assert said in text
    assert "python: not found, exit 127)" in text or "python: command not found, exit 127)" in text  # dash, bash
    [log] = (tmp_path / "runs").glob("*/react/plain_request/commands.jsonl")
    assert {run.exit_code for run in read(log)} == {NOT_FOUND}  # recorded, not null


def _run(command: str, at: float, code: int, stderr: str) -> CommandRun:
    return CommandRun(command, at, at + 0.1, code, "", stderr)


PLAN = "python skills/palette/scripts/deck.py plan --request r --out plan.md"


@pytest.mark.parametrize(("runs", "said"), [
    ([_run(PLAN, 1.0, 127, "/bin/sh: 1: python: not found\n")], "no `python` in the agent's shell (/bin/sh: 1: "),
    ([_run(f"cd . && {PLAN}", 1.0, 127, "bash: line 1: python: command not found")], "no `python`"),
    ([_run("skills/palette/scripts/deck.py find", 1.0, 127, "/usr/bin/env: 'python3': No such file or directory")],
     "no `python3` in the agent's shell (/usr/bin/env: 'python3'"),
    # One call that started (python3 after python): the agent's to judge.
    ([_run(PLAN, 1.0, 127, "/bin/sh: 1: python: not found"), _run(PLAN.replace("python", "python3"), 2.0, 0, "")],
     None),
    # A name the call does not hold (a program deck.py starts) is not the call's interpreter.
    ([_run(PLAN, 1.0, 127, "/bin/sh: 1: helper: not found")], None),
])
def test_a_skill_whose_script_never_started_is_a_fault_naming_the_missing_command(
        runs: list[CommandRun], said: str | None) -> None:
    calls = skill_calls(runs)
    fault = faults.first_fault(calls, runs)
    if said is None:
        assert fault is None
    else:
        assert fault is not None and fault.startswith("the skill's script could not start: ") and said in fault
