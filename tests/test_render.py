"""Slide images for the site: a deck's own previews, LibreOffice's rendering made once, or its text."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import threading
import zipfile
from pathlib import Path
from typing import Any

import psutil
import pytest
from PIL import Image
from pptx import Presentation

from pytest_palette.arena.leftovers import running
from pytest_palette.engine.build import build_deck
from pytest_palette.engine.plan_format import serialize_plan
from pytest_palette.engine.planner import build_plan
from pytest_palette.site import render
from pytest_palette.site.render import Rendering, renderer, slides_of

RENDER_TIMEOUT = 300.0  # s: a real render takes seconds; this only bounds a hung LibreOffice on a slow runner
needs_renderer = pytest.mark.skipif(
    (shutil.which("soffice") or shutil.which("libreoffice")) is None or shutil.which("pdftoppm") is None,
    reason="LibreOffice or pdftoppm is not installed (Debian: apt-get install libreoffice-impress-nogui "
           "poppler-utils; CI installs both)")


def _build(root: Path, name: str, request: str) -> tuple[Path, list[str]]:
    """A reference-engine deck (with its previews) and its slide titles as deck.json records them."""
    plan = root / f"{name}.md"
    plan.write_text(serialize_plan(build_plan(request)), encoding="utf-8")
    out = root / name
    build_deck(plan, out, None, 0.0, lambda line: None)
    described = json.loads((out / "deck.json").read_text(encoding="utf-8"))
    return out / "deck.pptx", [slide["title"] for slide in described["slides"]]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, list[str]]]:
    root = tmp_path_factory.mktemp("built")
    return {"four": _build(root, "four", "a 4-slide deck on tea"),
            "three": _build(root, "three", "a 3-slide deck on coffee")}


def _bare(deck: Path, folder: Path) -> Path:
    """Only the .pptx, in a folder of its own: a deck with no previews, as a real Palette leaves it."""
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(deck, folder / "talk.pptx"))


def _listing(folder: Path) -> dict[str, tuple[int, int, int]]:
    return {path.name: (path.stat().st_ino, path.stat().st_mtime_ns, path.stat().st_size)
            for path in folder.iterdir()}


def _running_under(folder: Path) -> list[str]:
    """Command lines of live processes that name `folder` (LibreOffice's profile and outdir are under it)."""
    found = []
    for process in psutil.process_iter():
        try:
            line = " ".join(process.cmdline())
        except psutil.Error:
            continue
        if str(folder) in line and running(process):
            found.append(line)
    return found


def _fake_tools(folder: Path, soffice: str) -> Path:
    """A bin folder holding a fake soffice (a shell script) and a pdftoppm that fails if ever reached."""
    folder.mkdir()
    for name, body in (("soffice", soffice), ("pdftoppm", "exit 3\n")):
        path = folder / name
        path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return folder


@pytest.mark.end_to_end
@needs_renderer
def test_libreoffice_renders_each_slide_once(built: dict[str, tuple[Path, list[str]]], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    source, titles = built["four"]
    deck, cache = _bare(source, tmp_path / "run"), tmp_path / "cache"
    before = _listing(deck.parent)

    first = slides_of(deck, cache, timeout=RENDER_TIMEOUT)

    assert first.kind == "libreoffice", first.note
    assert first.note.startswith("slide images rendered by LibreOffice ") and "\n" not in first.note
    assert len(first.images) == len(titles) == 4
    folder = cache / hashlib.sha256(deck.read_bytes()).hexdigest()
    assert first.images == tuple(folder / f"slide-{n}.png" for n in range(1, 5))
    for path in first.images:
        with Image.open(path) as image:
            assert image.format == "PNG"
            assert image.width > 0 and image.height > 0
    assert [text.title for text in first.texts] == titles
    assert _listing(deck.parent) == before  # nothing written beside the deck
    assert sorted(path.name for path in cache.iterdir()) == [folder.name]  # no temporary folder left
    assert not _running_under(cache)

    # The second call is served from the cache: running any program now fails the test.
    def no_program(*args: Any, **kwargs: Any) -> int:
        raise AssertionError(f"a program ran for a cached deck: {args[0]}")

    monkeypatch.setattr(render, "_run", no_program)
    cached = _listing(folder)
    again = slides_of(deck, cache, timeout=RENDER_TIMEOUT)
    assert again == first
    assert _listing(folder) == cached  # same files, same inodes, untouched


@pytest.mark.end_to_end
@needs_renderer
def test_the_cache_is_keyed_by_the_bytes_not_the_path(built: dict[str, tuple[Path, list[str]]],
                                                      tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source, _ = built["three"]
    cache = tmp_path / "cache"
    first = slides_of(_bare(source, tmp_path / "a"), cache, timeout=RENDER_TIMEOUT)
    assert first.kind == "libreoffice", first.note
    monkeypatch.setattr(render, "_run", lambda *args, **kwargs: pytest.fail("rendered the same bytes twice"))
    elsewhere = slides_of(_bare(source, tmp_path / "b"), cache, timeout=RENDER_TIMEOUT)
    assert elsewhere.images == first.images


@pytest.mark.end_to_end
@needs_renderer
def test_a_hidden_slide_is_rendered_too(built: dict[str, tuple[Path, list[str]]], tmp_path: Path) -> None:
    """python-pptx counts hidden slides, so the images must too, or they would not match the texts."""
    deck = _bare(built["three"][0], tmp_path / "run")
    presentation = Presentation(str(deck))
    presentation.slides[1]._element.set("show", "0")
    presentation.save(str(deck))
    result = slides_of(deck, tmp_path / "cache", timeout=RENDER_TIMEOUT)
    assert result.kind == "libreoffice", result.note
    assert len(result.images) == len(result.texts) == 3


@pytest.mark.end_to_end
@needs_renderer
def test_renders_at_once_do_not_collide(built: dict[str, tuple[Path, list[str]]], tmp_path: Path) -> None:
    """Three LibreOffices at once, two of them on the same bytes: each has its own profile; one rendering
    of the shared deck lands in the cache and both calls get it."""
    decks = [_bare(built["four"][0], tmp_path / "a"), _bare(built["three"][0], tmp_path / "b"),
             _bare(built["four"][0], tmp_path / "c")]
    cache = tmp_path / "cache"
    results: dict[int, Rendering] = {}

    def one(i: int) -> None:
        results[i] = slides_of(decks[i], cache, timeout=RENDER_TIMEOUT)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [results[i].kind for i in range(3)] == ["libreoffice"] * 3, [results[i].note for i in range(3)]
    assert [len(results[i].images) for i in range(3)] == [4, 3, 4]
    assert results[0].images == results[2].images
    assert all(path.is_file() for i in range(3) for path in results[i].images)
    assert len(list(cache.iterdir())) == 2
    assert not _running_under(cache)


def test_text_only_without_libreoffice(built: dict[str, tuple[Path, list[str]]], tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    source, titles = built["four"]
    deck, cache = _bare(source, tmp_path / "run"), tmp_path / "cache"
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))

    result = slides_of(deck, cache)

    assert result.kind == "text" and result.images == ()
    assert result.note == "no renderer installed (LibreOffice): slide titles and text only"
    assert [text.title for text in result.texts] == titles
    assert all(text.body for text in result.texts)  # the bullets, not just the titles
    assert renderer() is None
    assert not cache.exists()


def test_libreoffice_without_pdftoppm_is_named(built: dict[str, tuple[Path, list[str]]], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    tools = _fake_tools(tmp_path / "bin", "exit 0\n")
    (tools / "pdftoppm").unlink()
    monkeypatch.setenv("PATH", str(tools))
    result = slides_of(_bare(built["three"][0], tmp_path / "run"), tmp_path / "cache")
    assert result.kind == "text" and "pdftoppm" in result.note and "poppler-utils" in result.note
    assert [text.title for text in result.texts] == built["three"][1]


def test_the_decks_own_previews_are_returned_as_they_are(built: dict[str, tuple[Path, list[str]]],
                                                         tmp_path: Path) -> None:
    deck, titles = built["four"]
    before = {path: path.read_bytes() for path in deck.parent.glob("slide-*.png")}

    result = slides_of(deck, tmp_path / "cache")

    assert result.kind == "previews" and result.note == "the deck's own previews"
    assert result.images == tuple(deck.parent / f"slide-{n}.png" for n in range(1, 5))
    assert {path: path.read_bytes() for path in result.images} == before
    assert [text.title for text in result.texts] == titles
    assert not (tmp_path / "cache").exists()


def _not_a_zip(path: Path) -> None:
    path.write_bytes(b"this is not a presentation\n")


def _zip_of_nothing(path: Path) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("readme.txt", "a zip, but no presentation in it")


def _truncated(path: Path) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("[Content_Types].xml", "<Types")
    path.write_bytes(path.read_bytes()[:40])


@pytest.mark.parametrize("make", [_not_a_zip, _zip_of_nothing, _truncated], ids=["text", "zip", "torn"])
def test_a_broken_deck_gives_a_one_line_note(make: Any, tmp_path: Path) -> None:
    deck = tmp_path / "run" / "broken deck.pptx"
    deck.parent.mkdir()
    make(deck)
    result = slides_of(deck, tmp_path / "cache")
    assert result == Rendering("text", (), (), result.note)
    assert result.note.startswith(f"{deck}: not a deck python-pptx can open (")
    assert "\n" not in result.note and "Traceback" not in result.note


def test_a_missing_deck_is_named(tmp_path: Path) -> None:
    result = slides_of(tmp_path / "gone.pptx", tmp_path / "cache")
    assert result.kind == "text" and result.note.startswith(f"{tmp_path / 'gone.pptx'}: cannot read it (")


@pytest.mark.end_to_end
def test_a_hung_renderer_is_killed_with_its_whole_tree(built: dict[str, tuple[Path, list[str]]], tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake soffice that starts a child, and a grandchild in a session of its own, then hangs: all go."""
    pids = tmp_path / "pids"
    tools = _fake_tools(tmp_path / "bin", f"""[ "$1" = --version ] && {{ echo "LibreOffice 0.0.0.1"; exit 0; }}
echo $$ >> '{pids}'
sleep 600 &
echo $! >> '{pids}'
( setsid sleep 600 & echo $! >> '{pids}'; wait ) &
exec sleep 600
""")
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ.get('PATH', '')}")
    cache = tmp_path / "cache"

    # The 5 s is the time the script has to start its three processes, not a measure of anything.
    result = slides_of(_bare(built["three"][0], tmp_path / "run"), cache, timeout=5.0)

    assert result.kind == "text" and result.images == ()
    assert "LibreOffice did not finish rendering" in result.note and "the 5 s timeout" in result.note
    assert [text.title for text in result.texts] == built["three"][1]
    recorded = [int(line) for line in pids.read_text(encoding="utf-8").split()]
    assert len(recorded) == 3
    alive = []
    for pid in recorded:
        try:
            process = psutil.Process(pid)
        except psutil.NoSuchProcess:
            continue
        if running(process):
            alive.append(pid)
    assert alive == []
    assert list(cache.iterdir()) == []  # the temporary folder is gone, nothing cached


@needs_renderer
def test_a_real_libreoffice_out_of_time_leaves_nothing_running(built: dict[str, tuple[Path, list[str]]],
                                                               tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    result = slides_of(_bare(built["four"][0], tmp_path / "run"), cache, timeout=0.001)
    assert result.kind == "text" and "the 0.001 s timeout" in result.note
    assert [text.title for text in result.texts] == built["four"][1]
    assert not _running_under(cache)
    assert list(cache.iterdir()) == []


@pytest.mark.end_to_end
@needs_renderer
def test_renderer_names_libreoffice_and_its_version() -> None:
    name = renderer()
    assert name is not None and name.startswith("LibreOffice ")
    assert all(part.isdigit() for part in name.split(" ", 1)[1].split("."))
