"""The site tests' own tools, proven: the browser helper (tests/browser.py) finds exactly what is wrong with a
small hand-written site, and the offline runs (tests/sites.py) are real runs with the derived verdicts."""

from __future__ import annotations

from pathlib import Path

import browser as helper
import pytest
from browser import Browser, dead_links
from PIL import Image
from sites import OfflineRuns
from sweeps import Sweeps

from pytest_palette.results.ledger import load

#: Whole sessions on several hosts: the suite's 600 s hang guard (make test) is too tight for them when the
#: machine is oversubscribed; this one still ends a hang.
pytestmark = pytest.mark.timeout(1800)

GOOD = """<!doctype html><html><head><meta charset="utf-8"><title>good</title></head><body id="top">
<img src="pic.png" alt="a picture"> <a href="other.html">the other page</a> <a href="#top">top</a>
<a href="mailto:someone@example.com">mail</a>
<div style="height: 12000px"></div>
<img src="far%20away.png" loading="lazy" alt="far below the fold">
</body></html>"""

BAD = """<!doctype html><html><head><meta charset="utf-8"><title>bad</title></head><body>
<img src="pic.png" alt="fine"> <img src="missing.png" alt="broken">
<a href="index.html">back</a> <a href="gone.html">gone</a> <a href="https://example.com/">online only</a>
<script>console.error("the matrix has no rows"); throw new Error("thrown while loading");</script>
</body></html>"""


@pytest.fixture
def site(tmp_path: Path) -> Path:
    folder = tmp_path / "site"
    folder.mkdir()
    Image.new("RGB", (40, 30), "red").save(folder / "pic.png")
    Image.new("RGB", (50, 20), "blue").save(folder / "far away.png")
    (folder / "index.html").write_text(GOOD, encoding="utf-8")
    (folder / "other.html").write_text(BAD, encoding="utf-8")
    return folder


@pytest.mark.end_to_end
def test_a_good_page_has_no_errors_no_missing_image_and_no_dead_link(browser: Browser, site: Path) -> None:
    page = browser.open(site / "index.html")
    # The lazy image has not loaded yet (it is far below the fold): a check that only looked would call it broken.
    far = "document.querySelector('img[loading=lazy]').naturalWidth"
    assert page.evaluate(far) == 0
    assert browser.images_loaded(page) == []
    assert page.evaluate(far) == 50
    links = browser.links(page)
    assert (site / "other.html").as_uri() in links and "mailto:someone@example.com" in links
    assert dead_links(site, links) == []
    assert browser.errors(page) == []


def test_a_bad_page_shows_exactly_its_broken_image_dead_links_and_errors(browser: Browser, site: Path) -> None:
    page = browser.open(site / "other.html")
    missing = (site / "missing.png").as_uri()
    assert browser.images_loaded(page) == [missing]
    assert dead_links(site, browser.links(page)) == [(site / "gone.html").as_uri(), "https://example.com/"]
    errors = browser.errors(page)
    # The broken image's request fails (Chromium also logs that failure on the console); nothing else may.
    about_image = [error for error in errors if missing in error]
    assert any(error.startswith("requestfailed: ") for error in about_image), errors
    assert [error for error in errors if error not in about_image] == [
        f"console.error: the matrix has no rows (at {(site / 'other.html').as_uri()}:4)",
        "pageerror: thrown while loading"]


def test_dead_links_ignores_fragments_and_mail_and_keeps_the_site_self_contained(site: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.html"
    outside.write_text("<p>beside the site</p>", encoding="utf-8")
    urls = ["#top", "mailto:a@b.c", "index.html", "pic.png#x", "nowhere.html", outside.as_uri(), "http://x.org/",
            "nowhere.html"]
    assert dead_links(site, urls) == ["nowhere.html", outside.as_uri(), "http://x.org/"]
    assert dead_links(site, urls, inside=False) == ["nowhere.html", "http://x.org/"]


@pytest.mark.end_to_end
def test_a_screenshot_is_a_png_of_the_whole_page(browser: Browser, site: Path, tmp_path: Path) -> None:
    page = browser.open(site / "index.html")
    shot = browser.screenshot(page, tmp_path / "shots" / "index.png")
    with Image.open(shot) as image:
        assert image.format == "PNG" and image.width > 0
        assert image.height > 12000  # the whole page, not the viewport
    assert browser.screenshot(page, tmp_path / "top.png", full_page=False).stat().st_size > 0


@pytest.mark.parametrize(("setting", "outcome"), [
    ({}, pytest.skip.Exception), ({"CI": "false"}, pytest.skip.Exception),
    ({"REQUIRE_BROWSER": "1"}, pytest.fail.Exception), ({"CI": "true"}, pytest.fail.Exception)])
def test_without_chromium_a_test_is_skipped_naming_the_fix_but_fails_in_ci(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, setting: dict[str, str], outcome: type[BaseException]) -> None:
    for name in helper.REQUIRE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in setting.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(helper, "CANDIDATES", (str(tmp_path / "no-chromium"), "no-such-chromium"))
    assert helper.chromium() is None
    with pytest.raises(outcome, match="apt-get install chromium"):
        helper.require()


@pytest.mark.end_to_end
@pytest.mark.slow
def test_the_offline_runs_are_real_and_the_bad_one_fails_exactly_its_derived_cases(
        offline_runs: OfflineRuns, sweeps: Sweeps) -> None:
    base = sweeps.root
    assert offline_runs.good.is_relative_to(base) and offline_runs.bad.is_relative_to(base)
    assert (offline_runs.good / "results.jsonl").is_file() and (offline_runs.bad / "results.jsonl").is_file()
    cases = set(offline_runs.cases)
    assert len(cases) == 5
    # Some but not all: the pages must show both a pass and a fail of the same run.
    assert offline_runs.bad_fails and offline_runs.bad_fails < cases

    bad = list(load(offline_runs.bad).latest.values())
    assert {r.case for r in bad} == cases and {r.host for r in bad} == {"react"}
    assert {r.case for r in bad if r.outcome == "fail"} == offline_runs.bad_fails
    assert {r.outcome for r in bad if r.case not in offline_runs.bad_fails} == {"pass"}
    assert {r.terms.model for r in bad} == {offline_runs.bad_model}

    good = list(load(offline_runs.good).latest.values())
    assert {(r.case, r.host) for r in good} == {(case, host) for case in cases for host in offline_runs.hosts}
    for record in good:
        expected = "skipped" if record.host in offline_runs.missing else "pass"
        assert record.outcome == expected, (record.case, record.host, record.failures)
    assert (offline_runs.good / "react" / "plain_request" / "output").is_dir()
