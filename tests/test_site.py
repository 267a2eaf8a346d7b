"""The static site (`palette-bench view`, `--palette-html`) over real offline runs, read as files: what each page
must say, that the runs are only read, that images are the previews as they are, and the one-line refusals; and
the scores (cells, hosts, charts, an item's checks, the paired score test) over hand-made runs with partial
scores. The same site in a real browser is tests/test_site_browser.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import markupsafe
import msgspec
import pytest
from sites import REPO, SKILL_A, SKILL_B, OfflineRuns, ScoredSite, failing, make_scored_site, rescored
from sweeps import Sweeps

from pytest_palette.arena import code_log
from pytest_palette.arena.workspace import Workspace
from pytest_palette.commands import main
from pytest_palette.judge import verdict as verdict_module
from pytest_palette.judge.palette import CallFacts
from pytest_palette.results.checks import said, values_of
from pytest_palette.results.ledger import append, load
from pytest_palette.results.record import Record
from pytest_palette.results.stats import signed_rank_test
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


def test_a_cuga_items_page_shows_the_code_its_model_gave_cuga_in_each_turn(site: Path,
                                                                            offline_runs: OfflineRuns) -> None:
    offline_runs.skip_if_missing("cuga")
    records = [r for r in load(offline_runs.good).latest.values() if r.host in ("cuga", "react")]
    for record in records:
        workspace = Workspace.locate(offline_runs.good, record)
        text = page(site, "good", str(workspace.relative))
        blocks = code_log.read(workspace.own(code_log.CODE_NAME))
        if record.host == "react":  # its model acts through tools: no code, and no table of it
            assert not blocks and "code the model gave its client" not in text
            continue
        assert blocks and blocks[0].code == 'r = await load_skill("palette")\nprint(r)', record.case
        # Each block in full, in its turn's part of the conversation (the turns in order, as the page shows them).
        parts = text.split('<div class="turn">')[1:]
        for block in blocks:
            assert f'<pre class="command">{markupsafe.escape(block.code)}</pre>' in parts[block.turn - 1], block


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
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert 'class="histogram"' in index and 'class="trend"' not in index  # one run: no score over time


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


def test_previews_left_out_are_said_and_the_rest_keep_their_slides_numbers(
        offline_runs: OfflineRuns, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # One item of a copy of the run: its first preview a link to a file of the caller's, its second not a picture.
    run = tmp_path / "good"
    shutil.copytree(offline_runs.good, run, symlinks=True, ignore=shutil.ignore_patterns("work"))
    record = next(r for r in load(run).latest.values() if r.outcome == "pass" and r.host == "react"
                  and r.judged is not None and r.judged.slides >= 3)
    lines = (run / "results.jsonl").read_text(encoding="utf-8").splitlines()
    (run / "results.jsonl").write_text("".join(f"{line}\n" for line in lines if f'"case":"{record.case}"' in line
                                               and '"host":"react"' in line), encoding="utf-8")
    assert len(load(run).latest) == 1
    workspace = Workspace.locate(run, record)
    secret = tmp_path / "secret.png"
    shutil.copyfile(workspace.output / "slide-1.png", secret)
    (workspace.output / "slide-1.png").unlink()
    (workspace.output / "slide-1.png").symlink_to(secret)
    (workspace.output / "slide-2.png").write_text("not a picture", encoding="utf-8")
    assert main(["view", str(run), "--out", str(tmp_path / "site")]) == 0
    said = capsys.readouterr().out
    item_page = f"items/good/{workspace.relative}.html"
    assert f"left out: output/slide-1.png is a link (to {secret}): not shown ({item_page})" in said
    assert f"left out: output/slide-2.png is not a PNG image: not shown ({item_page})" in said
    text = (tmp_path / "site" / item_page).read_text(encoding="utf-8")
    assert "<strong>1. not shown</strong>" in text and "<strong>2. not shown</strong>" in text
    shown = [int(n) for n in re.findall(r'alt="slide (\d+)"', text)]
    assert shown and shown == list(range(3, record.judged.slides + 1))  # type: ignore[union-attr]
    media = tmp_path / "site" / "media" / "good" / workspace.relative
    assert sorted(p.name for p in media.iterdir()) == sorted(f"slide-{n}.png" for n in shown)
    for n in shown:
        assert (media / f"slide-{n}.png").samefile(workspace.output / f"slide-{n}.png")  # slide n is slide n


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


# -- scores: the cells, the hosts' means, the charts, the checks ---------------------------------------------------


def scored_site(sweeps: Sweeps, offline_runs: OfflineRuns) -> ScoredSite:
    """The site of three hand-made runs with scores strictly between 0 and 1 over the good run's folders
    (tests/sites.py, SCORED_RUNS), built once per test session for this module and tests/test_site_browser.py."""
    return sweeps.shared("scored-site", lambda folder: make_scored_site(offline_runs, folder))


@pytest.fixture(scope="module")
def scored(sweeps: Sweeps, offline_runs: OfflineRuns) -> ScoredSite:
    return scored_site(sweeps, offline_runs)


def known_score(record: Record) -> float | None:
    """A judged run's score as its ledger line says it: its own; a pass kept no checks, 1; a fail that kept none
    (and failed no gate: none does here), unknown."""
    if record.judged is None or record.outcome not in ("pass", "fail"):
        return None
    if record.judged.score is not None:
        return record.judged.score
    return 1.0 if record.outcome == "pass" else None


def scored_runs(runs: Path) -> dict[str, list[Record]]:
    """Each run under `runs` by its id, with its records."""
    found: dict[str, list[Record]] = {}
    for record in load(runs).latest.values():
        found.setdefault(record.run_id, []).append(record)
    return found


def host_mean(records: list[Record], host: str) -> float:
    """The host's mean score over its cases (one run each here), the unknown left out."""
    scores = [s for r in records if r.host == host and (s := known_score(r)) is not None]
    return sum(scores) / len(scores)


def text_of(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def test_each_cell_shows_its_runs_score_where_it_is_below_one(scored: ScoredSite) -> None:
    index = (scored.site / "index.html").read_text(encoding="utf-8")
    partial = 0
    for run_id, records in scored_runs(scored.runs).items():
        for record in records:
            if record.outcome not in ("pass", "fail"):
                continue
            score = known_score(record)
            word = "pass" if record.outcome == "pass" else "FAIL"
            expected = word + (f" {score:.2f}" if score is not None and score < 1 else "")
            partial += score is not None and 0 < score < 1
            shown = re.search(rf'href="items/{run_id}/{record.host}/{record.case}\.html">[^§]*?'
                              r'<span class="count">([^<]*)</span>', index)
            assert shown and shown.group(1) == expected, (run_id, record.host, record.case)
    assert partial >= 5  # the fixture's point: scores strictly between 0 and 1


def test_each_hosts_header_shows_its_mean_score_with_its_interval_and_score_at_k(scored: ScoredSite) -> None:
    index = (scored.site / "index.html").read_text(encoding="utf-8")
    start = index.index('<table class="matrix"')
    head = index[start:index.index("</thead>", start)]
    headers = {}
    for host, cell in re.findall(r'<th data-host="([^"]+)">(.*?)</th>', head, re.DOTALL):
        run_id = re.search(r'<span class="muted small">([^<]+?) · ', cell)
        assert run_id
        headers[(run_id.group(1), host)] = text_of(cell)
    runs = scored_runs(scored.runs)
    assert len(headers) == sum(len({r.host for r in records}) for records in runs.values())
    for run_id, records in runs.items():
        for host in {r.host for r in records if r.outcome in ("pass", "fail")}:
            mean = host_mean(records, host)
            judged = [r for r in records if r.host == host and r.outcome in ("pass", "fail")]
            passed = sum(r.outcome == "pass" for r in judged) / len(judged)
            unknown = sum(known_score(r) is None for r in judged)
            said = headers[(run_id, host)]
            assert re.search(rf"mean score {mean:.2f} \(\d\.\d\d–\d\.\d\d\)", said), said  # 95% interval
            # One run per cell: score@1 is the mean score, pass@1 the share of cases passed.
            assert f"pass@1 {passed:.1%} · score@1 {mean:.2f}" in said, said
            assert (f"{unknown} run(s) unscored" in said) == bool(unknown), said


def histograms(index: str) -> dict[tuple[str, str], tuple[list[int], str]]:
    """Each score histogram of the matrix page by (run, host): its bars' counts, and its caption."""
    found = {}
    for svg, caption in re.findall(r'(<svg class="histogram".*?</svg>)\s*<figcaption>(.*?)</figcaption>', index,
                                   re.DOTALL):
        title = re.search(r"<title [^>]*>Scores of (.+?)&#39;s judged runs in (.+?): ", svg)
        assert title, svg[:300]
        counts = [int(n) for n in re.findall(r'<rect class="bar [^"]*" data-bin="[^"]*" data-count="(\d+)"', svg)]
        found[(title.group(2), title.group(1))] = (counts, text_of(caption))
    return found


def test_the_score_histograms_count_each_hosts_runs_in_ten_bins(scored: ScoredSite) -> None:
    shown = histograms((scored.site / "index.html").read_text(encoding="utf-8"))
    runs = scored_runs(scored.runs)
    assert len(shown) == sum(len({r.host for r in records}) for records in runs.values())
    for run_id, records in runs.items():
        for host in {r.host for r in records}:
            scores = [Fraction(str(s)) for r in records if r.host == host and (s := known_score(r)) is not None]
            # [k/10, (k+1)/10), the last bin holding 1 too: counted exactly, as decimals.
            expected = [sum(Fraction(k, 10) <= s < Fraction(k + 1, 10) or (k == 9 and s == 1) for s in scores)
                        for k in range(10)]
            counts, caption = shown[(run_id, host)]
            assert counts == expected, (run_id, host)
            unknown = sum(1 for r in records if r.host == host and r.outcome == "fail" and known_score(r) is None)
            assert (f"{unknown} with no known score" in caption) == bool(unknown), caption


def test_the_score_over_time_has_a_point_per_run_in_start_order_and_a_line_per_skill(scored: ScoredSite) -> None:
    index = (scored.site / "index.html").read_text(encoding="utf-8")
    runs = scored_runs(scored.runs)
    started = sorted(runs, key=lambda run_id: min(r.usage.started_at for r in runs[run_id]))
    assert started != sorted(runs)  # the folders' names sort otherwise: the order is the runs' start
    charts = re.findall(r'<svg class="trend".*?</svg>\s*<figcaption><strong>([^<]+)</strong>', index, re.DOTALL)
    svgs = re.findall(r'<svg class="trend".*?</svg>', index, re.DOTALL)
    hosts = sorted({r.host for records in runs.values() for r in records})
    assert charts == hosts
    for host, svg in zip(charts, svgs, strict=True):
        points = re.findall(r'<circle class="point s-(\d)" data-run="([^"]+)" data-skill="([^"]+)" '
                            r'data-score="([^"]+)"', svg)
        assert [run_id for _, run_id, _, _ in points] == started, host  # one point per run, by start
        for colour, run_id, skill, score in points:
            assert skill == runs[run_id][0].terms.skill_hash
            assert float(score) == pytest.approx(host_mean(runs[run_id], host), abs=5e-5)
            assert colour == str(sorted({SKILL_A, SKILL_B}).index(skill))  # a colour per skill, on every host
        assert svg.count("<polyline") == 2  # skill A's two runs, and skill B's one
        labels = re.findall(r'<text class="axis run"[^>]*>([^<]+)</text>', svg)
        assert labels == started
    # The runs of a folder of runs are compared in that order too: the earliest against each later one.
    compared = re.findall(r'href="compare/([\w.-]+)--([\w.-]+)\.html"', index)
    assert [(a, b) for a, b in compared if a in runs and b in runs] == [(started[0], later) for later in started[1:]]


def test_a_replay_of_a_run_is_a_line_of_its_own_in_the_score_over_time(offline_runs: OfflineRuns,
                                                                       tmp_path: Path) -> None:
    # The same skill replayed from the recording (docs/runs.md, "Replay"): it measured the harness, not the model.
    def replayed(record: Record) -> Record:
        return msgspec.structs.replace(record, terms=msgspec.structs.replace(
            record.terms, provider="replay", model="replay:runs/good", label="replay of rehearsal from good"))

    pairs = {(r.host, r.case): replayed for r in load(offline_runs.good).latest.values()}
    replay = rescored(offline_runs.good, tmp_path / "replay", "replay", later=3600.0, changes=pairs,
                      hosts={"react"})
    write([offline_runs.good, replay], tmp_path / "site")
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    hosts = re.findall(r'<svg class="trend".*?</svg>\s*<figcaption><strong>([^<]+)</strong>', index, re.DOTALL)
    react = dict(zip(hosts, re.findall(r'<svg class="trend".*?</svg>', index, re.DOTALL), strict=True))["react"]
    skill = next(iter(load(offline_runs.good).latest.values())).terms.skill_hash
    assert re.findall(r'data-run="([^"]+)" data-skill="([^"]+)"', react) == \
        [("good", skill), ("replay", f"{skill} (replayed)")]
    assert react.count("<polyline") == 2


def item_checks(text: str) -> list[tuple[str, str, str, str]]:
    """The checks table of an item page: (check, role, state, the row's text) per row."""
    return [(name, role, state, text_of(row)) for name, role, state, row in re.findall(
        r'<tr class="k-\w+" data-check="([^"]+)" data-role="(\w+)" data-state="(\w+)">(.*?)</tr>', text, re.DOTALL)]


def test_a_failed_items_page_lists_its_checks_and_which_one_failed(site: Path, offline_runs: OfflineRuns) -> None:
    failed = [r for r in load(offline_runs.bad).latest.values() if r.outcome == "fail"]
    assert failed
    for record in failed:
        assert record.judged is not None and record.judged.checks
        text = page(site, "bad", str(Workspace.locate(offline_runs.bad, record).relative))
        rows = item_checks(text)
        assert [(name, role, state) for name, role, state, _ in rows] == \
            [(c.name, c.role, "held" if c.passed else "failed") for c in record.judged.checks]
        # never_edits builds before the approval: the confirmation gate failed, and so the score is 0.
        gate = next(row for row in rows if row[0] == "confirmation")
        assert gate[1:3] == ("gate", "failed") and "FAILED" in gate[3]
        for check, (_, _, _, row_text) in zip(record.judged.checks, rows, strict=True):
            assert text_of(str(markupsafe.escape(check.words))) in row_text if check.words else row_text.endswith("—")
        assert f"Score <strong>{record.judged.score:.2f}</strong>" in text


def test_the_site_reads_the_whole_verdict_from_the_record_and_never_calls_the_judge(
        offline_runs: OfflineRuns, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every verdict goes through these two, whoever imported `judge`: building the site must reach neither.
    def judged_again(*_: object, **__: object) -> None:
        raise AssertionError("the site called the judge")

    monkeypatch.setattr(CallFacts, "of", judged_again)
    monkeypatch.setattr(verdict_module, "assessed", judged_again)
    write([offline_runs.bad], tmp_path / "site")
    failed = [r for r in load(offline_runs.bad).latest.values() if r.outcome == "fail"]
    assert failed
    for record in failed:
        judged = record.judged
        assert judged is not None and len(judged.blame) == len(record.failures)
        text = (tmp_path / "site" / "items" / "bad" / f"{Workspace.locate(offline_runs.bad, record).relative}.html"
                ).read_text(encoding="utf-8")
        cells = re.findall(r'data-check="([^"]+)".*?<td class="expected">(.*?)</td>\s*<td class="observed">(.*?)</td>',
                           text, re.DOTALL)
        assert [(name, markupsafe.Markup(e).unescape(), markupsafe.Markup(o).unescape()) for name, e, o in cells] == \
            [(c.name, *map(said, values_of(c, judged))) for c in judged.checks]
        # never_edits builds before the approval: what the gate expected, and what the judge found instead.
        assert ("confirmation", "no build before the approval", "a build before the approval") in \
            [(name, markupsafe.Markup(e).unescape(), markupsafe.Markup(o).unescape()) for name, e, o in cells]
        assert 'class="tlrow blamed"' in text  # the record's blame, shown on the timeline


def test_an_items_page_shows_a_share_an_ungraded_check_and_a_score_from_before_checks(scored: ScoredSite) -> None:
    def item(run_id: str, host: str, case: str) -> str:
        return (scored.site / "items" / run_id / host / f"{case}.html").read_text(encoding="utf-8")

    shared = dict((name, said) for name, _, _, said in item_checks(item("rehearsal-a", "react", "pasted_notes")))
    assert "FAILED 0.75 (share carried 60%)" in shared["content"]
    assert "held 1.00" in shared["polls"]
    unknown = item("rehearsal-c", "react", "approve_casually")
    assert not item_checks(unknown) and "Score <strong>unknown</strong>: this record was written before checks" \
        in unknown
    derived = item("rehearsal-c", "react", "conditional_yes")
    assert not item_checks(derived) and "Score <strong>1.00</strong>, derived" in derived
    # A check whose grader failed is an error of the check, not a 0 for the skill: the run still passed, scoring 1.
    ungraded = item("rehearsal-b", "react", "approve_casually")
    rows = {name: (role, state, said) for name, role, state, said in item_checks(ungraded)}
    assert rows["rubric"][:2] == ("scored", "error") and "error: could not be graded" in rows["rubric"][2]
    assert "Score <strong>1.00</strong>" in ungraded


def test_the_comparison_shows_the_paired_score_test_beside_the_outcome_test(site: Path,
                                                                           offline_runs: OfflineRuns) -> None:
    text = (site / "compare" / "good--bad.html").read_text(encoding="utf-8")
    assert 'id="outcome-tests"' in text
    before = {r.case: known_score(r) for r in load(offline_runs.good).latest.values() if r.host == "react"}
    after = {r.case: known_score(r) for r in load(offline_runs.bad).latest.values() if r.host == "react"}
    differences = [a - b for case, b in before.items() if b is not None and (a := after.get(case)) is not None]
    test = signed_rank_test(differences)
    row = re.search(r'<tr data-host="react">(.*?)</tr>', text[text.index('id="score-tests"'):], re.DOTALL)
    assert row
    cells = re.findall(r"<td>(.*?)</td>", row.group(1))
    means = [sum(s for s in side.values() if s is not None) / len(side) for side in (before, after)]
    assert [cell.partition(" (")[0] for cell in cells[1:3]] == [f"{mean:.2f}" for mean in means]  # then the interval
    higher, lower = sum(d > 0 for d in differences), sum(d < 0 for d in differences)
    assert cells[:1] + cells[3:] == ["react", str(higher), str(lower), str(differences.count(0)), f"{test.w_plus:g}",
                                     f"{test.p:.4g}", "exact", test.verdict]
    assert lower == len(offline_runs.bad_fails)  # each case the bad agent failed scored lower


def test_two_runs_on_a_host_each_are_compared_host_against_host(offline_runs: OfflineRuns, tmp_path: Path) -> None:
    offline_runs.skip_if_missing("cuga")
    # One CI job per host: the bad run on react, and the good run's cuga items as a run of their own.
    cuga = rescored(offline_runs.good, tmp_path / "cuga-job", "cuga-job", hosts={"cuga"})
    written = write([offline_runs.bad, cuga], tmp_path / "site")
    assert written.comparisons == ["compare/bad--cuga-job.html"]
    text = (tmp_path / "site" / written.comparisons[0]).read_text(encoding="utf-8")
    assert "<h1>react (bad) against cuga (cuga-job): host against host</h1>" in text
    assert "→" not in text[:text.index("<h2>")]  # not a before and an after
    assert "<th>Mean score on react (bad)</th><th>Mean score on cuga (cuga-job)</th>" in text
    assert '<tr data-host="react vs cuga">' in text
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "react (bad) against cuga (cuga-job): host against host</a>" in index


def test_what_a_record_says_is_escaped_in_the_tables_and_the_charts(offline_runs: OfflineRuns,
                                                                    tmp_path: Path) -> None:
    # A run folder may come from anywhere: its run id, skill hash and the judge's words reach the charts' SVG too.
    hostile = "<script>alert(1)</script>"
    first = rescored(offline_runs.bad, tmp_path / "runs" / "one", f"one{hostile}", f"s{hostile}")
    second = rescored(offline_runs.bad, tmp_path / "runs" / "two", "two", "b" * 12, 60.0,
                      {("react", "plain_request"): failing("polls", words=f"polls {hostile}")})
    write([first, second], tmp_path / "site")
    pages = list((tmp_path / "site").rglob("*.html"))
    assert pages and not any("<script>alert" in p.read_text(encoding="utf-8") for p in pages)
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert 'class="trend"' in index and f'data-skill="s{markupsafe.escape(hostile)}"' in index
    assert f'data-run="one{markupsafe.escape(hostile)}"' in index
    item = (tmp_path / "site" / "items" / "two" / "react" / "plain_request.html").read_text(encoding="utf-8")
    assert f"polls {markupsafe.escape(hostile)}" in item
