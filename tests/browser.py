"""A headless system Chromium for the tests of the HTML site (`palette-bench view`): open a page from disk,
and read what a person opening it offline would notice — console and page errors, requests that failed,
images that did not load, links that lead nowhere.

Playwright's sync API drives the system Chromium (`executable_path`): no `playwright install`, no download.
Where playwright or Chromium is missing, `require()` skips with what to install — unless REQUIRE_BROWSER or
CI is set, where a missing browser fails instead, so a CI run cannot pass by skipping every site test.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

import needed

if TYPE_CHECKING:
    from playwright.sync_api import ConsoleMessage, Page

#: Where a system Chromium is looked for, first hit wins.
CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome")
#: Headless, as root (no sandbox), and quiet: nothing reaches for the network on its own.
ARGS = ("--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage")
#: Milliseconds; generous so a page still loads with both cores busy running agents.
TIMEOUT_MS = 60_000
#: Set (to anything but empty, 0 or false) where a missing browser must fail, not skip: `.ci/run` sets the first.
REQUIRE_VARIABLES = ("REQUIRE_BROWSER", "CI")

# Every <img>, scrolled into view one by one so a lazy one starts loading, awaited until it loaded or broke
# (bounded: one that never settles counts as not loaded); the src of each with no pixels comes back.
_UNLOADED_IMAGES = """async (timeout) => {
    const settled = (img) => new Promise((done) => {
        if (img.complete) { done(); return; }
        img.addEventListener("load", done, {once: true});
        img.addEventListener("error", done, {once: true});
    });
    const bound = new Promise((done) => setTimeout(done, timeout));
    for (const img of Array.from(document.images)) {
        img.scrollIntoView({block: "center"});
        await Promise.race([settled(img), bound]);
        // load fires before decoding; decode() waits for the pixels (and rejects for a broken image).
        if (img.complete && img.naturalWidth > 0) {
            await Promise.race([img.decode().catch(() => undefined), bound]);
        }
    }
    window.scrollTo(0, 0);
    return Array.from(document.images).filter((img) => img.naturalWidth === 0)
        .map((img) => img.src || img.outerHTML.slice(0, 200));
}"""


def chromium() -> str | None:
    """The path of a system Chromium, None if there is none."""
    for candidate in CANDIDATES:
        found = candidate if os.path.isabs(candidate) and os.access(candidate, os.X_OK) else shutil.which(candidate)
        if found:
            return found
    return None


def unavailable() -> str | None:
    """What is missing for a browser here, naming what to install; None when both are present."""
    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed: pip install playwright (in the dev extras; no `playwright install`)"
    if chromium() is None:
        return ("no system Chromium (/usr/bin/chromium, or chromium, chromium-browser, google-chrome on PATH): "
                "apt-get install chromium chromium-driver")
    return None


def required() -> bool:
    """Whether a missing browser must fail the tests that need one (CI) rather than skip them."""
    return needed.required(REQUIRE_VARIABLES)


def require() -> None:
    """Skip the calling test when no browser is here, or fail it where one is required (CI)."""
    needed.require(unavailable(), REQUIRE_VARIABLES, "browser")


class Browser:
    """One headless system Chromium, its own fresh profile, one page per `open()`.

    Use as a context manager or call `close()`. Each page's console errors, uncaught page errors and failed
    requests are collected from before it starts loading; `errors(page)` returns them.
    """

    def __init__(self, executable: str | None = None) -> None:
        from playwright.sync_api import sync_playwright

        executable = executable or chromium()
        if executable is None:
            raise RuntimeError(unavailable() or "no Chromium")
        self._playwright = sync_playwright().start()
        try:
            # A plain launch: Playwright gives it a fresh temporary profile and removes it on close.
            self._browser = self._playwright.chromium.launch(
                executable_path=executable, headless=True, args=list(ARGS), timeout=TIMEOUT_MS)
            self._context = self._browser.new_context()
        except BaseException:
            self._playwright.stop()
            raise
        self._context.set_default_timeout(TIMEOUT_MS)
        self._context.set_default_navigation_timeout(TIMEOUT_MS)
        self._errors: dict[Page, list[str]] = {}

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._context.close()
            self._browser.close()
        finally:
            self._playwright.stop()

    def open(self, path: Path | str) -> Page:
        """A new page showing the file at `path` (or a file:// URL), after its load event."""
        page = self._context.new_page()
        errors = self._errors[page] = []
        # Hooked before navigation, so nothing the page does while loading is missed.
        page.on("console", lambda message: errors.append(_console(message)) if message.type == "error" else None)
        page.on("pageerror", lambda error: errors.append(f"pageerror: {error}"))
        page.on("requestfailed", lambda request: errors.append(
            f"requestfailed: {request.url} ({request.failure or 'failed'})"))
        url = path if isinstance(path, str) and "://" in path else Path(path).resolve().as_uri()
        page.goto(url, wait_until="load")
        return page

    def errors(self, page: Page) -> list[str]:
        """The page's console errors (`console.error: …`), uncaught errors (`pageerror: …`) and failed requests
        (`requestfailed: <url> (<why>)`), in the order they happened; [] for a clean page."""
        return list(self._errors[page])

    def images_loaded(self, page: Page) -> list[str]:
        """The absolute src of every <img> with no pixels (naturalWidth 0), after scrolling each into view and
        waiting for it, lazy ones included: [] means every image loaded. Scrolls the page back to the top."""
        found: list[str] = page.evaluate(_UNLOADED_IMAGES, TIMEOUT_MS)
        return found

    def links(self, page: Page) -> list[str]:
        """Every a[href] on the page, resolved by the browser (absolute: file://…, https://…, mailto:…)."""
        found: list[str] = page.eval_on_selector_all("a[href]", "links => links.map((a) => a.href)")
        return found

    def screenshot(self, page: Page, path: Path, full_page: bool = True) -> Path:
        """A PNG of the page at `path` (its folder is created); the whole page unless `full_page` is False."""
        path.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(path), full_page=full_page, type="png")
        return path


def dead_links(pages_dir: Path, urls: Iterable[str], *, inside: bool = True) -> list[str]:
    """The links among `urls` that lead nowhere offline, each once, in order: a file:// link whose file or
    folder does not exist (or, with `inside`, lies outside `pages_dir`: the site must be self-contained), and
    every http(s):// link (no network). Fragment-only (`#…`) and mailto: links are never dead; a relative
    link is taken relative to `pages_dir`."""
    root = Path(pages_dir).resolve()
    dead: list[str] = []
    for url in urls:
        if url.startswith("#") or url.lower().startswith("mailto:"):
            continue
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme in ("http", "https"):
            bad = True
        elif scheme == "file":
            bad = _missing(Path(unquote(parts.path)), root, inside)
        elif scheme == "":
            bad = _missing(root / unquote(parts.path), root, inside) if parts.path else False
        else:
            bad = True  # javascript:, data:, ftp:… lead nowhere a reader can follow offline
        if bad and url not in dead:
            dead.append(url)
    return dead


def _missing(target: Path, root: Path, inside: bool) -> bool:
    target = target.resolve()
    return not target.exists() or (inside and not target.is_relative_to(root))


def _console(message: ConsoleMessage) -> str:
    where = message.location or {}
    # Playwright counts lines from 0; a reader opening the file counts from 1.
    at = f" (at {where['url']}:{int(where.get('lineNumber', -1)) + 1})" if where.get("url") else ""
    return f"console.error: {message.text}{at}"
