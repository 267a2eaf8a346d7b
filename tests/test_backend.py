"""Any real skill, no plumbing: a deck.py written for the real Palette runs against the reference engine through
the palette.py it ships, and `--palette-check` asks the backend the skill will really use for a plan."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_palette.backend import REFERENCE_HOME, describe_backend, run_folder_problem, setting_problems
from pytest_palette.skill import PACKAGED_SKILLS

REPO = Path(__file__).resolve().parent.parent
FALLBACK = "    both_fixes = ("


def real_style_skill(folder: Path) -> Path:
    """The reference skill with its engine fallback cut out, as IBM's deck.py has none: PALETTE_URL, else
    PALETTE_HOME, else an error."""
    skill = folder / "palette"
    shutil.copytree(PACKAGED_SKILLS / "palette", skill, ignore=shutil.ignore_patterns("__pycache__"))
    script = skill / "scripts" / "deck.py"
    text = script.read_text(encoding="utf-8")
    start = text.index(FALLBACK)
    end = text.index("\n\n\n", start)
    script.write_text(text[:start] + '    raise DeckError("no Palette: PALETTE_HOME is not set", '
                      'fix="set PALETTE_HOME to a Palette checkout that holds palette.py")' + text[end:],
                      encoding="utf-8")
    return skill


def check(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "--palette-check", "-p", "no:cacheprovider", *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)


def test_the_engine_names_its_home_and_the_header_names_what_deck_py_will_use(tmp_path: Path) -> None:
    printed = subprocess.run([sys.executable, "-m", "pytest_palette.engine", "--home"], capture_output=True,
                             text=True, timeout=60, check=True).stdout.strip()
    assert Path(printed) == REFERENCE_HOME and (REFERENCE_HOME / "palette.py").is_file()
    assert describe_backend({}).startswith("reference engine")
    assert describe_backend({"PALETTE_HOME": printed}).startswith("reference engine through its palette.py")
    assert describe_backend({"PALETTE_HOME": str(tmp_path)}).endswith("(no palette.py there!)")
    both = {"PALETTE_HOME": printed, "PALETTE_URL": "http://palette.example"}
    assert describe_backend(both) == "Palette web server at http://palette.example (PALETTE_URL)"  # URL first


@pytest.mark.end_to_end
def test_a_skill_without_an_engine_fallback_is_ready_only_with_a_backend(tmp_path: Path) -> None:
    skill = real_style_skill(tmp_path)
    bare = {k: v for k, v in os.environ.items() if k not in ("PALETTE_HOME", "PALETTE_URL")}
    missing = check(f"--palette-skill={skill}", env=bare)
    assert missing.returncode == 1, missing.stdout + missing.stderr
    assert "backend: reference engine" in missing.stdout and "NOT ready" in missing.stdout
    assert "no Palette: PALETTE_HOME is not set — set PALETTE_HOME" in missing.stdout
    ready = check(f"--palette-skill={skill}", env={**bare, "PALETTE_HOME": str(REFERENCE_HOME)})
    assert ready.returncode == 0, ready.stdout + ready.stderr
    assert "reference engine through its palette.py" in ready.stdout and "ready (a plan came back in" in ready.stdout


@pytest.mark.end_to_end
def test_the_core_cases_pass_with_that_skill_and_palette_home_naming_the_shipped_entry_point(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    skill = real_style_skill(tmp_path)
    monkeypatch.delenv("PALETTE_URL", raising=False)
    monkeypatch.setenv("PALETTE_HOME", str(REFERENCE_HOME))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", str(REPO / "cases"), "-m", "core", f"--rootdir={REPO}",
         "-p", "no:cacheprovider", "-p", "no:randomly", "--palette-skill", str(skill),
         "--palette-run-dir", str(tmp_path / "runs")],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "5 passed" in done.stdout and "reference engine through its palette.py" in done.stdout


@pytest.mark.parametrize(("variable", "value", "said"), [
    ("PALETTE_ENGINE_LATENCY", "fast", "PALETTE_ENGINE_LATENCY='fast' is malformed: 'fast' is not a number of seconds"),
    ("PALETTE_ENGINE_LATENCY", "plan=2,bild=3", "'bild=3' is not stage=seconds"),
    ("PALETTE_URL", "palette.example:8080", "PALETTE_URL='palette.example:8080' is not an http:// or https://"),
    ("PALETTE_HOME", "/nonexistent/palette", "PALETTE_HOME='/nonexistent/palette' holds no palette.py"),
    ("PALETTE_PYTHON", "/nonexistent/python3", "PALETTE_PYTHON='/nonexistent/python3' is not an interpreter"),
])
@pytest.mark.end_to_end
def test_a_malformed_setting_stops_the_run_before_any_case_naming_it(tmp_path: Path, variable: str, value: str,
                                                                     said: str) -> None:
    assert any(said in problem for problem in setting_problems({variable: value}))
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-k", "plain_request",
                           f"--palette-run-dir={tmp_path / 'runs'}"], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env={**os.environ, variable: value}, check=False)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout[-2000:] + done.stderr[-2000:]
    assert "not ready to run:" in done.stderr and said in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # no run was started


def test_well_formed_settings_have_no_problem() -> None:
    good = {"PALETTE_ENGINE_LATENCY": "plan=2,edit=1,build=5", "PALETTE_HOME": str(REFERENCE_HOME),
            "PALETTE_PYTHON": sys.executable, "PALETTE_URL": "https://palette.example"}
    assert setting_problems(good) == [] and setting_problems({}) == []


def test_a_run_folder_without_room_or_that_cannot_be_written_is_named(tmp_path: Path) -> None:
    assert run_folder_problem(tmp_path / "runs") is None
    assert (run_folder_problem(tmp_path / "runs", need=10**18) or "").startswith(
        f"the run folder {tmp_path / 'runs'} has ")
    (tmp_path / "file").write_text("x")
    said = run_folder_problem(tmp_path / "file" / "runs")
    assert said is not None and said.startswith(f"the run folder {tmp_path / 'file' / 'runs'} cannot be written")
