"""The reference engine's command line: the contract deck.py relies on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from pytest_palette.engine.cli import main
from pytest_palette.engine.errors import EngineError
from pytest_palette.engine.latency import ENV_VAR, parse_latency


def engine(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "pytest_palette.engine", *args], capture_output=True, text=True,
                          env=full_env, cwd=cwd, timeout=60)


def last_error(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    return lines[-1] if lines else ""


@pytest.mark.end_to_end
def test_plan_edit_build_round_trip(tmp_path: Path) -> None:
    plan = tmp_path / "plan.md"
    result = engine("build-plan", "a 4-slide deck on prompt caching", "--out", str(plan))
    assert result.returncode == 0, result.stderr
    assert plan.read_text(encoding="utf-8").count("\n## ") == 4
    result = engine("edit-plan", "make it 3 slides and more casual", "--plan", str(plan), "--out", str(plan))
    assert result.returncode == 0, result.stderr
    text = plan.read_text(encoding="utf-8")
    assert text.count("\n## ") == 3 and "- Tone: casual" in text and "Revisions:" in text
    result = engine("build-deck", "--plan", str(plan), "--out-dir", str(tmp_path / "deck"), "--json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)  # exactly one JSON object: progress went to stderr
    assert info["slides"] == 3 and info["bytes"] >= 20_000
    assert Path(info["deck"]) == (tmp_path / "deck" / "deck.pptx").resolve()
    assert sorted(p.name for p in (tmp_path / "deck").iterdir()) == [
        "deck.json", "deck.pptx", "slide-1.png", "slide-2.png", "slide-3.png"]


def test_build_plan_with_source_and_progress_on_stdout(tmp_path: Path) -> None:
    source = tmp_path / "notes.txt"
    source.write_text("# Launch\n\n## Results\n- Activation 64%\n\n## Next\n- Ship Q3\n", encoding="utf-8")
    result = engine("build-plan", "deck from my notes", "--source", str(source), "--out", str(tmp_path / "p.md"),
                    "--context", "## Extra\n- 17 customers")
    assert result.returncode == 0, result.stderr
    assert "reference engine" in result.stdout
    text = (tmp_path / "p.md").read_text(encoding="utf-8")
    assert "Activation 64%" in text and "17 customers" in text and text.count("\n## ") == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["build-deck", "--plan", "{tmp}/missing.md", "--out-dir", "{tmp}/d"], "error: no plan at"),
        (["edit-plan", "more casual", "--plan", "{tmp}/missing.md", "--out", "{tmp}/p.md"], "error: no plan at"),
        (["build-deck", "--plan", "{tmp}/empty.md", "--out-dir", "{tmp}/d"], "error: the plan at"),
        (["build-deck", "--plan", "{tmp}/empty.md", "--out-dir", "{tmp}/d", "--palette-family", "neon"],
         "error: unknown palette family 'neon'; the reference engine knows: ibm_watsonx,"),
        (["build-plan", "x", "--out", "{tmp}/p.md", "--source", "{tmp}/a.pdf"], "error: --source"),
        (["build-plan", "x"], "error: the following arguments are required: --out"),
        (["launch"], "error: argument command: invalid choice"),
    ],
)
def test_failures_exit_1_with_one_error_line(tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "empty.md").write_text("# Nothing here\n", encoding="utf-8")
    (tmp_path / "a.pdf").write_bytes(b"%PDF")
    result = engine(*[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert result.returncode == 1 and last_error(result).startswith(message), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1  # one line, no traceback


def test_failure_messages_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty.md").write_text("# Nothing here\n", encoding="utf-8")
    assert main(["build-deck", "--plan", str(tmp_path / "empty.md"), "--out-dir", str(tmp_path / "d")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: the plan at {tmp_path / 'empty.md'} is empty: it has no '## ' sections, "
                   "so there are no slides"]
    assert main(["build-deck", "--plan", str(tmp_path / "empty.md"), "--out-dir", str(tmp_path / "d"),
                 "--palette-family", "neon"]) == 1
    assert "ibm_carbon_dark" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()


def test_help_names_the_reference_engine() -> None:
    result = engine("--help")
    assert result.returncode == 0 and "reference engine" in result.stdout and "not the real" in result.stdout


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, {"plan": 0.0, "edit": 0.0, "build": 0.0}),
        ("", {"plan": 0.0, "edit": 0.0, "build": 0.0}),
        ("2.5", {"plan": 2.5, "edit": 2.5, "build": 2.5}),
        ("plan=2,edit=1,build=5", {"plan": 2.0, "edit": 1.0, "build": 5.0}),
        ("build=0.5", {"plan": 0.0, "edit": 0.0, "build": 0.5}),
        (" Plan = 1 , ", {"plan": 1.0, "edit": 0.0, "build": 0.0}),
    ],
)
def test_latency_parsing(raw: str | None, expected: dict[str, float]) -> None:
    assert parse_latency(raw) == expected


@pytest.mark.parametrize("raw", ["abc", "-1", "nan", "inf", "plan=x", "deck=3", "plan:2", "plan=1,build"])
def test_malformed_latency_is_rejected(raw: str) -> None:
    with pytest.raises(EngineError, match=rf"{ENV_VAR}=.*malformed"):
        parse_latency(raw)


def test_malformed_latency_fails_the_command(tmp_path: Path) -> None:
    result = engine("build-plan", "x", "--out", str(tmp_path / "p.md"), env={ENV_VAR: "plan=soon"})
    assert result.returncode == 1
    assert last_error(result) == (f"error: {ENV_VAR}='plan=soon' is malformed: 'soon' is not a number of "
                                  "seconds >= 0 (expected e.g. 2.5 or plan=2,edit=1,build=5)")
    assert not (tmp_path / "p.md").exists()


@pytest.mark.end_to_end
def test_latency_delays_only_its_stage(tmp_path: Path) -> None:
    plan = tmp_path / "p.md"
    started = time.monotonic()
    result = engine("build-plan", "2 slides on tea", "--out", str(plan), env={ENV_VAR: "plan=0.8"})
    assert result.returncode == 0 and time.monotonic() - started >= 0.8
    assert "simulated latency: 0.8s" in result.stdout
    result = engine("edit-plan", "more casual", "--plan", str(plan), "--out", str(plan), env={ENV_VAR: "plan=0.8"})
    assert result.returncode == 0 and "simulated latency" not in result.stdout


def test_deck_is_replaced_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = tmp_path / "p.md"
    out = tmp_path / "deck"
    assert main(["build-plan", "3 slides on tea", "--out", str(plan)]) == 0
    assert main(["build-deck", "--plan", str(plan), "--out-dir", str(out)]) == 0
    old = (out / "deck.pptx").read_bytes()
    assert main(["edit-plan", "make it 2 slides", "--plan", str(plan), "--out", str(plan)]) == 0
    seen: list[tuple[str, str]] = []
    real_replace = os.replace

    def checking_replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        src_path, dst_path = Path(src), Path(dst)
        seen.append((src_path.name, dst_path.name))
        assert src_path.parent == dst_path.parent  # same filesystem: rename is atomic
        assert not src_path.name.endswith(".png")  # deck.py counts *.png as previews
        if dst_path.name == "deck.pptx":
            assert dst_path.read_bytes() == old  # readers still see the previous, whole deck
            with zipfile.ZipFile(src_path) as archive:
                assert archive.testzip() is None
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", checking_replace)  # build.py renames through os.replace
    assert main(["build-deck", "--plan", str(plan), "--out-dir", str(out)]) == 0
    assert seen[-1][1] == "deck.pptx"  # published last, after deck.json and the previews
    assert {dst for _, dst in seen} == {"deck.pptx", "deck.json", "slide-1.png", "slide-2.png"}
    assert sorted(p.name for p in out.iterdir()) == ["deck.json", "deck.pptx", "slide-1.png", "slide-2.png"]
