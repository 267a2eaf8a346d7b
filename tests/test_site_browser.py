"""The site in a real browser (headless system Chromium), over real offline runs on react, cuga and claude and a
run of a known-bad agent: every image loads, every link leads to a page of the site, the console stays quiet,
a failed item shows the judge's words beside the command, the comparison lists exactly the bad agent's cases as
regressions, the filters work, and the score charts are drawn (over hand-made runs with partial scores).
Screenshots of the matrix, an item page and a comparison are kept in test-artifacts/ to be looked at."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from browser import Browser, dead_links
from sites import REPO, OfflineRuns
from sweeps import Sweeps
from test_site import built_site, scored_site

from pytest_palette.arena.workspace import Workspace
from pytest_palette.results.ledger import load

#: Whole sessions on several hosts: the suite's 600 s hang guard (make test) is too tight for them when the
#: machine is oversubscribed; this one still ends a hang.
pytestmark = [pytest.mark.timeout(1800), pytest.mark.end_to_end]

#: Screenshots of this session, beside earlier ones (never over them).
ARTIFACTS = REPO / "test-artifacts" / f"site-{time.strftime('%Y%m%d-%H%M%S')}"


@pytest.fixture(scope="module")
def site(sweeps: Sweeps, offline_runs: OfflineRuns) -> Path:
    """The one site test_site.py reads too, built once per test session."""
    return built_site(sweeps, offline_runs)


def item_page(site: Path, runs: OfflineRuns, run: Path, host: str, outcome: str) -> Path:
    record = next(r for r in load(run).latest.values() if r.host == host and r.outcome == outcome)
    return site / "items" / run.name / f"{Workspace.locate(run, record).relative}.html"


def check_page(browser: Browser, site: Path, path: Path) -> list[str]:
    """Opened as a person would: what did not load, what leads nowhere, what the console said."""
    page = browser.open(path)
    try:
        problems = [f"image not loaded: {src}" for src in browser.images_loaded(page)]
        problems += [f"dead link: {url}" for url in dead_links(site, browser.links(page))]
        problems += browser.errors(page)
        return problems
    finally:
        page.close()


def test_the_matrix_and_three_item_pages_load_whole_in_chromium(browser: Browser, site: Path,
                                                               offline_runs: OfflineRuns) -> None:
    for host in ("cuga", "claude"):
        offline_runs.skip_if_missing(host)
    pages = [site / "index.html",
             item_page(site, offline_runs, offline_runs.bad, "react", "fail"),
             item_page(site, offline_runs, offline_runs.good, "cuga", "pass"),
             item_page(site, offline_runs, offline_runs.good, "claude", "pass"),
             site / "compare" / "good--bad.html"]
    for path in pages:
        assert check_page(browser, site, path) == [], path
    # The matrix's images are its thumbnails, one per cell that has a deck (all of them here).
    page = browser.open(site / "index.html")
    try:
        assert page.locator("img.thumb").count() == len(offline_runs.cases) * (len(offline_runs.hosts) + 1)
    finally:
        page.close()


def test_every_link_of_every_page_leads_to_a_file_of_the_site(site: Path) -> None:
    # The browser checks five pages above; every page's links are checked here, as files.
    pages = list(site.rglob("*.html"))
    assert len(pages) > 20
    for path in pages:
        text = path.read_text(encoding="utf-8")
        for target in re.findall(r'(?:href|src)="([^"#]+)', text):
            assert not re.match(r"[a-z]+:", target), f"{path}: {target} leaves the site"
            assert (path.parent / target).resolve().is_file(), f"{path}: {target} does not exist"
            assert (path.parent / target).resolve().is_relative_to(site.resolve())


def test_a_failed_item_shows_the_judges_words_beside_the_command(browser: Browser, site: Path,
                                                                  offline_runs: OfflineRuns) -> None:
    failed = [r for r in load(offline_runs.bad).latest.values() if r.outcome == "fail"]
    assert {r.case for r in failed} == offline_runs.bad_fails
    record = failed[0]
    page = browser.open(site / "items" / "bad" / f"{Workspace.locate(offline_runs.bad, record).relative}.html")
    try:
        shown = page.locator("section.failures").inner_text()
        for words in record.failures:
            assert words in shown
        culprit = page.locator(".culprit pre.command").first.inner_text()
        assert "deck.py start" in culprit  # never_edits built the plan it was asked to change
        # The call is marked on the timeline, and the failure's link leads to it.
        target = page.locator(".culprit a").first.get_attribute("href")
        assert target and page.locator(f"{target}.blamed").count() == 1
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        browser.screenshot(page, ARTIFACTS / "item-failed.png")
    finally:
        page.close()


def test_the_comparison_lists_exactly_the_known_bad_agents_cases_as_regressions(browser: Browser, site: Path,
                                                                                offline_runs: OfflineRuns) -> None:
    page = browser.open(site / "compare" / "good--bad.html")
    try:
        rows = page.locator("tr[data-flag=regression]")
        assert {rows.nth(i).get_attribute("data-case") for i in range(rows.count())} == offline_runs.bad_fails
        first = page.locator("#changes tbody tr").first.get_attribute("data-flag")
        assert first == "regression"  # regressions first
        # Both decks side by side: a strip of slides on each side of a regression.
        assert rows.first.locator("a.strip").count() == 2
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        browser.screenshot(page, ARTIFACTS / "compare.png")
    finally:
        page.close()


def test_the_matrix_filters_by_host_and_outcome(browser: Browser, site: Path, offline_runs: OfflineRuns) -> None:
    page = browser.open(site / "index.html")
    try:
        page.wait_for_selector("html[data-ready]")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        browser.screenshot(page, ARTIFACTS / "matrix.png")
        rows = page.locator("#matrix tbody tr")
        assert rows.count() == len(offline_runs.cases)
        for outcome in ("pass", "mixed", "error", "skipped"):
            page.locator(f"input[name=outcome][value={outcome}]").uncheck()
        visible = {rows.nth(i).locator("th.case").inner_text().split("\n")[0] for i in range(rows.count())
                   if rows.nth(i).is_visible()}
        assert visible == offline_runs.bad_fails  # only the rows with a FAIL: the bad run's
        page.locator("input[name=host][value=react]").uncheck()
        assert not any(rows.nth(i).is_visible() for i in range(rows.count()))  # only react failed
        assert page.locator("#matrix thead th[data-host=react]").first.is_hidden()
    finally:
        page.close()


def test_the_score_charts_are_drawn_in_chromium(browser: Browser, sweeps: Sweeps, offline_runs: OfflineRuns,
                                               tmp_path: Path) -> None:
    # Three hand-made runs over the good run's folders, with scores strictly between 0 and 1 (tests/sites.py).
    scored = scored_site(sweeps, offline_runs)
    runs = {r.run_id for r in load(scored.runs).latest.values()}
    hosts = {r.host for r in load(scored.runs).latest.values()}
    page = browser.open(scored.site / "index.html")
    try:
        page.wait_for_selector("html[data-ready]")
        assert browser.errors(page) == []
        histograms = page.locator("svg.histogram")
        assert histograms.count() == len(runs) * len(hosts)  # one per host of each run
        for i in range(histograms.count()):
            box = histograms.nth(i).bounding_box()
            assert histograms.nth(i).is_visible() and box and box["width"] > 0 and box["height"] > 0
        # A bar that counts runs is drawn: a partial score's bin has height on screen, an empty bin none.
        bars = page.locator("svg.histogram rect.bar")
        for i in range(bars.count()):
            bar = bars.nth(i)
            height = (bar.bounding_box() or {"height": 0.0})["height"]
            assert (height > 0) == (bar.get_attribute("data-count") != "0")
        assert page.locator("svg.histogram rect.bar.b-mid:not([data-count='0'])").count() > 0
        trends = page.locator("svg.trend")
        assert trends.count() == len(hosts)
        trend = trends.first
        box = trend.bounding_box()
        assert trend.is_visible() and box and box["width"] > 0 and box["height"] > 0
        assert trend.locator("circle.point").count() == len(runs)
        # The matrix page with its charts, kept beside the test's own files: <tmp_path>/matrix-scores.png
        # (pytest's basetemp, e.g. /tmp/pytest-of-<user>/pytest-<n>/popen-gw<k>/test_the_score_charts_are_dr0/).
        shot = browser.screenshot(page, tmp_path / "matrix-scores.png")
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        page.close()
