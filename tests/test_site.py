"""The static site (`palette-bench view`, `--palette-html`) over real offline runs, read as files: what each page
must say, that the runs are only read, that images are the previews as they are, and the one-line refusals. The
same site in a real browser is tests/test_site_browser.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import markupsafe
import msgspec
import pytest
from sites import REPO, OfflineRuns
from sweeps import Sweeps

from pytest_palette.arena.workspace import Workspace
from pytest_palette.commands import main
from pytest_palette.results.ledger import append, load
from pytest_palette.site import render
from pytest_palette.site.build import SiteError, write
from pytest_palette.site.folder import MARKER

#: Whole sessions on several hosts: the suite's 600 s hang guard (make test) is too tight for them when the
#: machine is oversubscribed; this one still ends a hang.
pytestmark = pytest.mark.timeout(1800)


def snapshot(folder: Path) -> dict[str, tuple[int, float]]:
    """Every file under `folder` with its size and modification time: what "only read" must leave as it was."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime) for p in folder.rglob("*") if p.is_file()}


def page(site: Path, run: str, workspace: str) -> str:
    return (site / "items" / run / f"{workspace}.html").read_text(encoding="utf-8")


def built_site(sweeps: Sweeps, offline_runs: OfflineRuns) -> Path:
    """The site of the good and the bad run, built once per test session for this module and
    tests/test_site_browser.py alike: its tests read it, never write it."""

    def build(folder: Path) -> Path:
        write([offline_runs.good, offline_runs.bad], folder / "site")
        return folder / "site"

    return sweeps.shared("site", build)


@pytest.fixture(scope="module")
def site(sweeps: Sweeps, offline_runs: OfflineRuns) -> Path:
    return built_site(sweeps, offline_runs)


@pytest.mark.end_to_end
def test_every_item_has_a_page_and_the_matrix_links_each_cell(site: Path, offline_runs: OfflineRuns) -> None:
    index = (site / "index.html").read_text(encoding="utf-8")
    for run in (offline_runs.good, offline_runs.bad):
        for record in load(run).latest.values():
            workspace = Workspace.locate(run, record)
            assert (site / "items" / run.name / f"{workspace.relative}.html").is_file(), record.case
            assert f'items/{run.name}/{workspace.relative}.html"' in index or record.outcome == "skipped"
    assert (site / MARKER).is_file() and (site / "assets" / "site.css").is_file()


def test_a_failed_items_page_shows_the_judges_words_and_the_command_behind_them(site: Path,
                                                                                 offline_runs: OfflineRuns) -> None:
    failed = [r for r in load(offline_runs.bad).latest.values() if r.outcome == "fail"]
    assert {r.case for r in failed} == offline_runs.bad_fails
    for record in failed:
        text = page(site, "bad", str(Workspace.locate(offline_runs.bad, record).relative))
        for words in record.failures:
            assert str(markupsafe.escape(words)) in text
        # never_edits builds the plan it was asked to change: the culprit is that build, shown with its command.
        culprit = re.search(r'class="culprit">the call: <a href="#call-(\d+)">#\d+ <code>(\w+)</code>.*?'
                            r'<pre class="command">([^<]*)</pre>', text, re.DOTALL)
        assert culprit, record.case
        assert culprit.group(2) == "start" and "deck.py start" in culprit.group(3)
        assert f'<div class="tlrow blamed" id="call-{culprit.group(1)}">' in text  # marked on the timeline


def test_the_comparison_lists_exactly_the_bad_agents_cases_as_regressions(site: Path,
                                                                          offline_runs: OfflineRuns) -> None:
    text = (site / "compare" / "good--bad.html").read_text(encoding="utf-8")
    regressions = set(re.findall(r'data-flag="regression" data-case="([^"]+)"', text))
    assert regressions == offline_runs.bad_fails
    # Regressions come first.
    flags = re.findall(r'data-flag="([^"]*)"', text)
    assert flags[:len(regressions)] == ["regression"] * len(regressions)


def test_two_hosts_of_one_run_are_compared_too(site: Path) -> None:
    pages = sorted(p.name for p in (site / "compare").iterdir())
    assert pages == ["good--bad.html", "good--claude--cuga.html", "good--claude--react.html", "good--cuga--react.html"]


@pytest.mark.end_to_end
def test_the_runs_are_only_read_and_the_previews_are_shown_as_they_are(offline_runs: OfflineRuns,
                                                                       tmp_path: Path) -> None:
    before = snapshot(offline_runs.good)
    write([offline_runs.good], tmp_path / "site")
    write([offline_runs.good], tmp_path / "site")  # again, over the first: nothing is written through a link
    assert snapshot(offline_runs.good) == before
    record = next(r for r in load(offline_runs.good).latest.values() if r.outcome == "pass")
    relative = Workspace.locate(offline_runs.good, record).relative
    preview = offline_runs.good / relative / "output" / "slide-1.png"
    shown = tmp_path / "site" / "media" / "good" / relative / "slide-1.png"
    assert shown.read_bytes() == preview.read_bytes()  # not re-encoded


def test_thumbnails_are_made_once(offline_runs: OfflineRuns, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write([offline_runs.good], tmp_path / "site")
    thumbs = {p: p.stat().st_mtime_ns for p in (tmp_path / "site" / "thumbs").rglob("*.png")}
    assert len(thumbs) == len(offline_runs.cases) * len(offline_runs.hosts) - \
        len(offline_runs.cases) * len(offline_runs.missing)
    monkeypatch.chdir(offline_runs.good.parent)  # again, with the run named as a person types it: relative
    assert main(["view", offline_runs.good.name, "--out", str(tmp_path / "site")]) == 0
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "site" / "thumbs").rglob("*.png")} == thumbs


@pytest.mark.end_to_end
@pytest.mark.parametrize("renderer", ["libreoffice", "text"])
def test_a_deck_without_previews_is_rendered_or_shown_as_its_text(offline_runs: OfflineRuns, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  renderer: str) -> None:
    # A copy of the run whose decks have no previews, like a real Palette's.
    run = tmp_path / "good"
    shutil.copytree(offline_runs.good, run, symlinks=True)
    record = next(r for r in load(run).latest.values() if r.outcome == "pass" and r.host == "react")
    output = Workspace.locate(run, record).output
    for preview in output.glob("slide-*.png"):
        preview.unlink()
    if renderer == "libreoffice" and render.renderer() is None:
        pytest.skip(f"no renderer here: {render.INSTALL_HINT}")
    if renderer == "text":
        monkeypatch.setenv("PATH", str(Path(sys.executable).parent))  # no soffice on it
    write([run], tmp_path / "site")
    text = page(tmp_path / "site", "good", str(Workspace.locate(run, record).relative))
    slides = record.judged.slides if record.judged else 0
    assert slides > 0
    if renderer == "libreoffice":
        assert "rendered by LibreOffice" in text
        assert len(list((tmp_path / "site" / "media" / "good" / "react" / record.case).glob("slide-*.png"))) == slides
    else:
        assert "slide titles and text only" in text
        assert text.count('class="slide text"') == slides


def test_a_folder_of_other_files_is_refused_in_one_line(offline_runs: OfflineRuns, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "mine.txt").write_text("keep me\n")
    with pytest.raises(SiteError, match=f"^{re.escape(str(tmp_path))}: not empty"):
        write([offline_runs.good], tmp_path)
    assert main(["view", str(offline_runs.good), "--out", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "not empty" in error
    assert (tmp_path / "mine.txt").read_text() == "keep me\n" and sorted(os.listdir(tmp_path)) == ["mine.txt"]


def test_a_folder_with_no_ledger_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["view", str(tmp_path), "--out", str(tmp_path / "site")]) == 2
    assert capsys.readouterr().err == f"palette-bench view: {tmp_path}: no results.jsonl at or under it — nothing " \
                                      "was recorded there\n"
    assert not (tmp_path / "site").exists()


@pytest.mark.end_to_end
def test_palette_html_writes_the_sessions_site_and_refuses_a_folder_it_may_not_write(tmp_path: Path) -> None:
    def pytest_run(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pytest", str(REPO / "cases"), "-p", "no:cacheprovider",
                               f"--rootdir={REPO}", f"--palette-run-dir={tmp_path / 'runs'}", "-k", "plain_request",
                               "--host=react", *extra], cwd=REPO, capture_output=True, text=True, timeout=600)

    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.md").write_text("mine\n")
    refused = pytest_run(f"--palette-html={busy}")
    assert refused.returncode == 4 and f"--palette-html {busy}: not empty" in refused.stderr
    assert not (tmp_path / "runs").exists()  # refused before any case ran
    done = pytest_run(f"--palette-html={tmp_path / 'site'}")
    assert done.returncode == 0, done.stdout[-2000:]
    assert f"site of 1 item(s) written to {(tmp_path / 'site' / 'index.html').as_uri()}" in done.stdout
    assert (tmp_path / "site" / "items").is_dir()


def test_repeats_of_a_cell_are_shown_side_by_side_and_counted_in_the_matrix(offline_runs: OfflineRuns,
                                                                             tmp_path: Path) -> None:
    # A second run of one cell, as --palette-runs leaves it: its own folder and its own record.
    run = tmp_path / "good"
    shutil.copytree(offline_runs.good, run, symlinks=True)
    record = next(r for r in load(run).latest.values() if r.outcome == "pass" and r.host == "react")
    first = Workspace.locate(run, record)
    shutil.copytree(first.folder, first.folder.with_name(f"{record.case}-2"), symlinks=True)
    append(run / "results.jsonl", msgspec.structs.replace(record, run_index=2,
                                                          workspace=f"react/{record.case}-2"))
    write([run], tmp_path / "site")
    text = page(tmp_path / "site", "good", f"react/{record.case}-2")
    assert "Repeats of this cell" in text and text.count('<div class="repeat') == 2
    assert text.count('<div class="repeat current">') == 1
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert re.search(r'data-host="react" data-outcome="pass">\s*<a href="items/good/react/' + record.case
                     + r'\.html">.*?<span class="count">2/2</span>', index, re.DOTALL)
