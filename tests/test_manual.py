"""The manual host: prepare folders and a run sheet for a person, then judge what they left on disk."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

CASES = """
- name: three_slides
  covers: a plain yes builds what was asked
  request: Build a 3-slide deck on prompt caching
  expect: {slides: 3}
- name: held_off
  covers: no deck without approval
  request: Build a 3-slide deck on tides
  replies: ["not now"]
  expect: {deck: false}
- name: never_held
  covers: a prepared conversation nobody held
  request: Build a 2-slide deck on kites
"""

DECK = "python3 .claude/skills/palette/scripts/deck.py"


@pytest.mark.end_to_end
def test_prepare_writes_folders_and_a_run_sheet_then_collect_judges_the_disk(pytester: pytest.Pytester) -> None:
    pytester.mkdir("cases")
    (pytester.path / "cases" / "c.yaml").write_text(CASES)
    prepared = pytester.runpytest("--host=manual", "-p", "no:cacheprovider", "-rs")
    prepared.assert_outcomes(skipped=3)
    prepared.stdout.fnmatch_lines(["*prepared for a person to run: follow */manual/RUN_SHEET.md*"])
    [run] = (pytester.path / "runs").iterdir()
    sheet = (run / "manual" / "RUN_SHEET.md").read_text()
    folder = run / "manual" / "three_slides"
    assert f"cd {folder / 'work'} && source ../env.sh" in sheet
    assert "paste ▸ Build a 3-slide deck on prompt caching\nthen  ▸ yes" in sheet
    assert sheet.count("# Run sheet") == 1 and sheet.count("## ") == 3
    assert (folder / "utterance.txt").read_text() == "Build a 3-slide deck on prompt caching\n"
    assert f"export PALETTE_TRACE={folder / 'palette-calls.jsonl'}" in (folder / "env.sh").read_text()
    assert (folder / "work" / ".claude" / "skills" / "palette" / "SKILL.md").is_file()

    # A person holds the first conversation by hand, in a shell that sourced env.sh.
    env = {k: v for k, v in os.environ.items() if k != "PALETTE_TRACE"}
    script = (f"source ../env.sh && {DECK} find --root . && "
              f"{DECK} plan --request 'Build a 3-slide deck on prompt caching' --out plan.md && "
              f"{DECK} start --plan plan.md --out-dir ./deck && {DECK} status --out-dir ./deck")
    subprocess.run(["bash", "-c", script], cwd=folder / "work", env=env, check=True, capture_output=True,
                   timeout=120)

    collected = pytester.runpytest("--host=manual", f"--palette-collect={run}", "-p", "no:cacheprovider")
    collected.assert_outcomes(passed=2, failed=1)
    collected.stdout.fnmatch_lines(["three_slides*pass*3sl*", "held_off*pass*", "never_held*FAIL*",
                                    "*↳ no .pptx was produced*"])
    assert (folder / "output" / "three_slides.pptx").is_file()


def test_collecting_a_case_that_was_never_prepared_is_an_error(pytester: pytest.Pytester) -> None:
    pytester.mkdir("cases")
    (pytester.path / "cases" / "c.yaml").write_text(CASES)
    empty = pytester.mkdir("empty_run")
    result = pytester.runpytest("--host=manual", f"--palette-collect={empty}", "-p", "no:cacheprovider",
                                "-k", "three_slides")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*no prepared folder for three_slides at *empty_run/manual/three_slides*"])


def test_a_missing_collect_folder_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--palette-collect=nowhere")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--palette-collect nowhere: no run folder at *nowhere"])


def test_the_manual_host_never_pretends_to_drive_an_agent(tmp_path: Path) -> None:
    from pytest_palette.arena.sandbox import Sandbox
    from pytest_palette.arena.workspace import Workspace
    from pytest_palette.hosts.base import HostError, HostSettings
    from pytest_palette.hosts.manual import ManualHost
    from pytest_palette.layer.route import route_of
    from pytest_palette.models import parse_model
    from pytest_palette.skill import load_skill

    workspace = Workspace.of(tmp_path, "manual", "three_slides", 1, repeated=False)
    workspace.prepare(load_cases_from_text(tmp_path)[0])
    with pytest.raises(HostError, match="driven by a person"):
        ManualHost().open(workspace, load_skill("palette"), {}, route_of(parse_model("rehearsal")), HostSettings(),
                          Sandbox(workspace.work, {}, "none"))
    # …and leaves no conversation behind: the folder is prepared, the person holds it.
    assert (workspace.work / ".claude" / "skills" / "palette" / "SKILL.md").is_file()
    assert not workspace.turns.exists() and not workspace.trace.exists()


def load_cases_from_text(folder: Path) -> list[Any]:
    from pytest_palette.cases import load_cases

    path = folder / "c.yaml"
    path.write_text(CASES)
    return load_cases(path)
