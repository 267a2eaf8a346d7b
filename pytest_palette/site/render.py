"""Images of a deck's slides for a page, made once: its own previews, else LibreOffice's rendering, else its text.

A run's decks usually come with slide-N.png previews (the reference engine draws them). A real Palette's deck,
or one written by hand, has none: LibreOffice (headless) turns the .pptx into a PDF and pdftoppm (Debian's
poppler-utils, whose library LibreOffice already pulls in) turns each page into a PNG. Where neither is
installed, or rendering fails or takes too long, the page gets each slide's title and text instead, read with
python-pptx, and a note saying so.

Renderings are cached under `cache/<sha256 of the deck's bytes>/` (slide-N.png and rendering.json), so a deck is
rendered once whatever folder it sits in. Nothing is ever written beside the deck: the run folder is evidence.

Each LibreOffice runs with a private profile and HOME in a temporary folder (two renders at once never share
one), in a session of its own; when it outlives its time, or once it is done, every process of that session
and every descendant of it is killed (oosplash forks soffice.bin).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import psutil
from pptx import Presentation
from pptx.enum.shapes import MSO_SHAPE_TYPE, PP_PLACEHOLDER

from ..arena import untrusted
from ..arena.leftovers import running

Kind = Literal["previews", "libreoffice", "text"]

WIDTH = 1280  # px: the reference engine's previews are 1280×720
PREVIEWS_NOTE = "the deck's own previews"
TEXT_ONLY = "slide titles and text only"
INSTALL_HINT = "Debian: apt-get install libreoffice-impress-nogui poppler-utils"
MANIFEST = "rendering.json"
#: Hidden slides are slides too: python-pptx counts them, so the PDF must have a page for each.
PDF_FILTER = 'pdf:impress_pdf_Export:{"ExportHiddenSlides":{"type":"boolean","value":"true"}}'
VERSION_TIMEOUT = 30.0  # s: `soffice --version` answers in well under a second
KILL_GRACE = 5.0  # s: how long a SIGKILLed tree may take to be gone
#: What LibreOffice keeps of our environment (HOME and TMPDIR are its own): no keys or tokens of the caller.
_KEPT = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "FONTCONFIG_FILE", "FONTCONFIG_PATH"})
_PAGE = re.compile(r"^page-(\d+)\.png$")
_NOT_SHOWN = frozenset({PP_PLACEHOLDER.FOOTER, PP_PLACEHOLDER.SLIDE_NUMBER, PP_PLACEHOLDER.DATE})
_TITLES = frozenset({PP_PLACEHOLDER.TITLE, PP_PLACEHOLDER.CENTER_TITLE})


@dataclass(frozen=True)
class SlideText:
    """One slide's words: its title ("" when it has none) and the lines of everything else, top to bottom."""

    title: str
    body: tuple[str, ...]


@dataclass(frozen=True)
class Rendering:
    """What a page shows of a deck: PNGs in slide order (none for "text"), each slide's text, and why."""

    kind: Kind
    images: tuple[Path, ...]
    texts: tuple[SlideText, ...]
    note: str


@dataclass(frozen=True)
class _Tools:
    soffice: str
    pdftoppm: str


class _TimedOut(Exception):
    """A program (named in args[0]) that outlived the rendering's time; its tree is killed."""


class _Failed(Exception):
    pass


def slides_of(deck: Path, cache: Path, *, timeout: float = 120.0) -> Rendering:
    """Images of `deck`'s slides: its previews beside it, a cached or new LibreOffice rendering, or its text.

    Never raises for a bad deck or a failed render: the note says what happened, in one line. `timeout` bounds
    the rendering (LibreOffice and pdftoppm together).
    """
    try:  # a run folder may come from anywhere: a link is not followed, and the deck is bounded
        data = untrusted.read_bytes(deck.parent, Path(deck.name), untrusted.DECK_BYTES)
    except untrusted.Refused as refused:
        return Rendering("text", (), (), _one_line(f"{deck.parent / refused.path}: {refused.why}, not read"))
    except OSError as error:
        return Rendering("text", (), (), _one_line(f"{deck}: cannot read it ({type(error).__name__}: {error})"))
    try:
        texts = _texts(data)
    except Exception as error:  # python-pptx raises zip, XML, key and value errors alike on a broken file
        return Rendering("text", (), (), _one_line(f"{deck}: not a deck python-pptx can open "
                                                   f"({type(error).__name__}: {error})"))
    if not texts:
        return Rendering("text", (), (), f"{deck}: the deck has no slides")
    previews = tuple(deck.parent / f"slide-{n}.png" for n in range(1, len(texts) + 1))
    if all(untrusted.is_regular(path) for path in previews):
        return Rendering("previews", previews, texts, PREVIEWS_NOTE)
    folder = cache / hashlib.sha256(data).hexdigest()
    cached = _cached(folder, len(texts))
    if cached is not None:
        return Rendering("libreoffice", cached[0], texts, cached[1])
    tools = _tools()
    if isinstance(tools, str):
        return Rendering("text", (), texts, f"{tools}: {TEXT_ONLY}")
    try:
        images, note = _render(data, folder, len(texts), tools, timeout)
    except _TimedOut as error:
        return Rendering("text", (), texts, _one_line(f"{error.args[0]} did not finish rendering {deck} within "
                                                      f"the {timeout:g} s timeout and was stopped: {TEXT_ONLY}"))
    except (_Failed, OSError, subprocess.SubprocessError) as error:
        return Rendering("text", (), texts, _one_line(f"could not render {deck}: {error}: {TEXT_ONLY}"))
    return Rendering("libreoffice", images, texts, note)


def renderer() -> str | None:
    """The renderer available here, e.g. "LibreOffice 7.4.7.2", or None (LibreOffice or pdftoppm missing)."""
    tools = _tools()
    if isinstance(tools, str):
        return None
    with tempfile.TemporaryDirectory(prefix="palette-render-") as work:
        return _version(tools.soffice, _environment(Path(work)), Path(work), VERSION_TIMEOUT)


# -- the text, read with python-pptx ---------------------------------------------------------------


def _texts(data: bytes) -> tuple[SlideText, ...]:
    return tuple(_slide_text(slide) for slide in Presentation(io.BytesIO(data)).slides)


def _slide_text(slide: Any) -> SlideText:
    """The title placeholder's text, else the topmost text's first line (the reference engine uses text boxes)."""
    title = ""
    blocks: list[tuple[int, int, list[str]]] = []
    for shape in slide.shapes:
        lines = _lines(shape)
        if not lines:
            continue
        kind = shape.placeholder_format.type if shape.is_placeholder else None
        if kind in _TITLES and not title:
            title = " ".join(lines)
        elif kind not in _NOT_SHOWN:
            blocks.append((shape.top or 0, shape.left or 0, lines))
    blocks.sort(key=lambda block: (block[0], block[1]))
    body = [line for _, _, lines in blocks for line in lines]
    if not title and body:
        title = body.pop(0)
    return SlideText(title, tuple(body))


def _lines(shape: Any) -> list[str]:
    if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
        return [line for child in shape.shapes for line in _lines(child)]
    if getattr(shape, "has_text_frame", False) and shape.has_text_frame:
        return [text for paragraph in shape.text_frame.paragraphs if (text := _one_line(paragraph.text))]
    if getattr(shape, "has_table", False) and shape.has_table:
        rows = (" | ".join(_one_line(cell.text) for cell in row.cells) for row in shape.table.rows)
        return [row for row in rows if row.strip(" |")]
    return []


def _one_line(text: str) -> str:
    return " ".join(text.split())


# -- the cache -------------------------------------------------------------------------------------


def _cached(folder: Path, count: int) -> tuple[tuple[Path, ...], str] | None:
    """A finished rendering of `count` slides in `folder` (its images and note), or None."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    images = tuple(folder / f"slide-{n}.png" for n in range(1, count + 1))
    if not isinstance(manifest, dict) or manifest.get("slides") != count or not isinstance(manifest.get("note"), str):
        return None
    if not all(path.is_file() for path in images):
        return None
    return images, manifest["note"]


def _tools() -> _Tools | str:
    """Both programs a rendering needs, or what is missing (the start of a note)."""
    soffice = shutil.which("soffice") or shutil.which("libreoffice")
    if soffice is None:
        return "no renderer installed (LibreOffice)"
    pdftoppm = shutil.which("pdftoppm")
    if pdftoppm is None:
        return "no renderer installed (pdftoppm, from poppler-utils, to turn LibreOffice's PDF into images)"
    return _Tools(soffice, pdftoppm)


# -- rendering -------------------------------------------------------------------------------------


def _render(data: bytes, folder: Path, count: int, tools: _Tools, timeout: float) -> tuple[tuple[Path, ...], str]:
    """Render into a private folder beside `folder`, then rename it into place (a reader never sees half)."""
    deadline = time.monotonic() + timeout
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".render-", dir=folder.parent, ignore_cleanup_errors=True) as name:
        work = Path(name).resolve()
        source, pdf_dir, pages = work / "deck.pptx", work / "pdf", work / "pages"
        pdf_dir.mkdir()
        pages.mkdir()
        source.write_bytes(data)  # a copy: LibreOffice may leave a lock file beside what it opens
        environment = _environment(work)
        profile = work / "profile"
        code = _run([tools.soffice, f"-env:UserInstallation={profile.as_uri()}", "--headless", "--invisible",
                     "--norestore", "--nolockcheck", "--nologo", "--nodefault", "--convert-to", PDF_FILTER,
                     "--outdir", str(pdf_dir), str(source)],
                    environment, work, work / "soffice.log", deadline, "LibreOffice")
        pdf = pdf_dir / "deck.pdf"
        if code != 0 or not pdf.is_file():
            raise _Failed(f"LibreOffice made no PDF (exit {code}{_last_line(work / 'soffice.log')})")
        code = _run([tools.pdftoppm, "-png", "-scale-to-x", str(WIDTH), "-scale-to-y", "-1", str(pdf),
                     str(pages / "page")], environment, work, work / "pdftoppm.log", deadline, "pdftoppm")
        if code != 0:
            raise _Failed(f"pdftoppm failed (exit {code}{_last_line(work / 'pdftoppm.log')})")
        numbered = sorted((int(match.group(1)), path) for path in pages.iterdir()
                          if (match := _PAGE.match(path.name)))
        if [number for number, _ in numbered] != list(range(1, count + 1)):
            raise _Failed(f"LibreOffice rendered {len(numbered)} page(s) for {count} slide(s)")
        for number, path in numbered:  # pdftoppm pads its numbers to the page count's width
            path.rename(pages / f"slide-{number}.png")
        left = max(0.0, min(VERSION_TIMEOUT, deadline - time.monotonic()))
        version = _version(tools.soffice, environment, work, left)
        note = f"slide images rendered by {version} from the .pptx"
        (pages / MANIFEST).write_text(json.dumps({"kind": "libreoffice", "note": note, "slides": count}) + "\n",
                                      encoding="utf-8")
        _move_into_place(pages, folder, work, count)
    found = _cached(folder, count)
    if found is None:
        raise _Failed(f"the rendering did not land in {folder}")
    return found


def _move_into_place(pages: Path, folder: Path, work: Path, count: int) -> None:
    """Rename `pages` to `folder`; a finished one there already (a render at the same time) is kept instead."""
    try:
        pages.rename(folder)
        return
    except OSError:
        if _cached(folder, count) is not None:
            return
    folder.rename(work / "stale")  # an unfinished rendering of ours: it goes with the temporary folder
    pages.rename(folder)


def _environment(work: Path) -> dict[str, str]:
    home, temp = work / "home", work / "tmp"
    home.mkdir(exist_ok=True)
    temp.mkdir(exist_ok=True)
    kept = {name: value for name, value in os.environ.items() if name in _KEPT or name.startswith("LC_")}
    return {**kept, "HOME": str(home), "TMPDIR": str(temp)}


def _version(soffice: str, environment: dict[str, str], work: Path, seconds: float) -> str:
    """ "LibreOffice 7.4.7.2" from `soffice --version`, or just "LibreOffice" when it does not say."""
    log = work / "version.log"
    try:
        _run([soffice, "--version"], environment, work, log, time.monotonic() + seconds, "LibreOffice")
        words = log.read_text(encoding="utf-8", errors="replace").split()
    except (_TimedOut, OSError, subprocess.SubprocessError):
        return "LibreOffice"
    for i, word in enumerate(words[:-1]):
        if word == "LibreOffice" and re.fullmatch(r"\d+(\.\d+)+", words[i + 1]):
            return f"LibreOffice {words[i + 1]}"
    return "LibreOffice"


def _last_line(log: Path) -> str:
    try:
        lines = [line for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return f": {lines[-1].strip()}" if lines else ""


# -- processes -------------------------------------------------------------------------------------


def _run(argv: list[str], environment: dict[str, str], cwd: Path, log: Path, deadline: float, name: str) -> int:
    """Run `argv` in a session of its own until `deadline`; its exit code. The whole tree is killed after,
    whether it finished, timed out (_TimedOut) or we were interrupted."""
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                   env=environment, cwd=cwd, start_new_session=True)
    try:
        return process.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise _TimedOut(name) from None
    finally:
        _kill_tree(process)


def _kill_tree(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the session `process` leads and its descendants until none runs (or KILL_GRACE passes).

    The session catches what was re-parented to init; the descendants, what started a session of its own.
    Its profile is private and thrown away, so there is nothing for a gentler TERM to save.
    """
    try:
        tree = psutil.Process(process.pid).children(recursive=True)
    except psutil.Error:  # already reaped
        tree = []
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.kill()
    process.wait()
    deadline = time.monotonic() + KILL_GRACE
    while True:
        alive = [member for member in [*tree, *_session(process.pid)] if running(member)]
        if not alive or time.monotonic() >= deadline:
            return
        for member in alive:
            with contextlib.suppress(psutil.Error):
                member.kill()
        time.sleep(0.05)


def _session(leader: int) -> list[psutil.Process]:
    """The processes still in the session `leader` started."""
    members = []
    for process in psutil.process_iter():
        try:
            if os.getsid(process.pid) == leader:
                members.append(process)
        except OSError:  # gone, or not ours to ask
            continue
    return members
