"""Write the site: a folder of static pages that opens from file:// with no server and no network.

    DIR/index.html                      the matrix, with each run's scores, pass@k, metrics and caveats above it
    DIR/items/<run>/<host>/<case>.html  one page per item
    DIR/compare/<a>--<b>.html           two runs, or two hosts of one run
    DIR/media/…                         the decks' previews (hard links where the disk allows, else copies)
    DIR/thumbs/…                        one small image per matrix cell, made once
    DIR/assets/                         the stylesheet and the script

Pages are Jinja2 templates (site/templates) over the same numbers as `palette-bench report`. A folder is only
ever written into when it is empty or holds a site written here before (it then carries `.palette-site`):
nothing else in it is touched, and the runs themselves are only read.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import time
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
import markupsafe

from ..arena import untrusted
from ..arena.workspace import UnsafeRecord, Workspace
from ..results.compare import SAME_SKILL
from ..results.ledger import find, load
from ..results.marks import LOOKS, mean_text
from ..results.model import ReportError
from ..results.prices import money
from ..results.record import Record
from ..results.redaction import Secrets
from . import charts, comparison, item, matrix, render
from .folder import MARKER, refusal

#: The width of a matrix thumbnail, in pixels: small enough that a page of a hundred cells loads at once.
THUMB_WIDTH = 240


class SiteError(Exception):
    """A site that cannot be written: the message names the path, in one line."""


@dataclass(frozen=True)
class Written:
    folder: Path
    items: int
    pages: int
    comparisons: list[str]
    seconds: float
    #: What the pages say they do not show of the run folders (a link, not a regular file, over its bound, not a
    #: slide's picture): (the item's page, the line).
    left_out: tuple[tuple[str, str], ...] = ()

    @property
    def index(self) -> Path:
        return self.folder / "index.html"


def write(paths: Sequence[Path], out: Path, *, label: str = "", secrets: Secrets | None = None) -> Written:
    """The site over the runs at or under `paths`, written into `out`, each page scrubbed of `secrets` (the
    session's or the command's; the environment's when not given: results/redaction.py)."""
    started = time.perf_counter()
    runs = _runs(paths)
    _claim(out)
    items: matrix.Items = {}
    names = _names([run.folder for run in runs])
    for run in runs:
        for record in run.records:
            found = item.read(run.folder, record)
            found.page = f"items/{names[run.folder]}/{found.workspace.relative}.html"
            items[(str(run.folder), record.case, record.host, record.run_index)] = found
    media = _Media(out)
    for found in items.values():
        media.slides(found, names[found.run_folder])
    grid = matrix.build(runs, items)
    for row in grid.rows:
        for cell in row.cells:
            first = next((i for i in cell.items if i.slides and i.slides[0].image), None)
            image = first.slides[0].image if first is not None else None
            if first is not None and image is not None:
                cell.thumb = media.thumb(out / image, first, names[first.run_folder])
    views = _comparisons(runs, items, names)
    pages = _Pages(out, secrets if secrets is not None else Secrets.of(os.environ))
    pages.static()
    pages.write("index.html", "matrix.html", matrix=grid, comparisons=views, title=label or _title(runs),
                histograms={column.key: charts.column_histogram(column) for column in grid.columns},
                trends=charts.trends(runs))
    for found in items.values():
        repeats = matrix.cell_items(items, found.run_folder, found.record.case, found.record.host)
        pages.write(found.page, "item.html", item=found, repeats=repeats if len(repeats) > 1 else [],
                    plan=item.plan_text(found),
                    title=found.label)
    for view in views:
        pages.write(view.page, "compare.html", view=view, title=view.title)
    (out / MARKER).write_text("written by palette-bench view; the folder may be written again by it\n",
                              encoding="utf-8")
    left_out = tuple((found.page, line) for found in items.values() for line in found.refused)
    return Written(out, len(items), pages.count, [v.page for v in views], time.perf_counter() - started, left_out)


def _runs(paths: Sequence[Path]) -> list[matrix.RunView]:
    """Each run at or under the paths, in the order given, and within a folder of runs in the order they started
    (a run's name need not sort by time: `--palette-run-id`), so the first run compared is the earliest."""
    runs: list[matrix.RunView] = []
    seen: set[Path] = set()
    for path in paths:
        runs += charts.in_start_order(_runs_under(path, seen))
    if not runs:
        raise SiteError(f"{', '.join(map(str, paths))}: no ledger holds a record — nothing to show")
    return runs


def _runs_under(path: Path, seen: set[Path]) -> list[matrix.RunView]:
    """The runs at or under one path not seen yet, each with its sound records."""
    if not path.exists():
        raise SiteError(f"{path}: no such file or folder")
    folders = list(dict.fromkeys(ledger.parent for ledger in find(path).ledgers))
    if not folders:
        raise SiteError(f"{path}: no results.jsonl at or under it — nothing was recorded there")
    runs: list[matrix.RunView] = []
    for folder in folders:
        if folder.resolve() in seen:
            continue
        seen.add(folder.resolve())
        records = sorted(_sound(folder, load(folder).latest.values()), key=lambda r: (r.case, r.host, r.run_index))
        if not records:
            warnings.warn(f"{folder}: its ledger holds no record; left out of the site", stacklevel=2)
            continue
        runs.append(matrix.run_view(folder, records))
    return runs


def _sound(folder: Path, records: Iterable[Record]) -> list[Record]:
    """The records whose names and folder are an item folder of the run: a run folder may come from anywhere,
    and a host of `../x` would put pages outside the site. Each other is named, with its ledger line, and left
    out."""
    kept = []
    for record in records:
        try:
            Workspace.locate(folder, record)
        except UnsafeRecord as refused:
            warnings.warn(f"{_line_of(folder, record)}: left out of the site: {refused}", stacklevel=3)
            continue
        kept.append(record)
    return kept


def _line_of(folder: Path, record: Record) -> str:
    """`ledger:line` of the record (looked up only for a record refused), else the run folder."""
    for ledger in find(folder).ledgers:
        if ledger.parent != folder:
            continue
        with open(ledger, "rb") as handle:
            for number, line in enumerate(handle, 1):
                try:
                    data = json.loads(line)
                except ValueError:
                    continue
                if isinstance(data, dict) and (data.get("case"), data.get("host"), data.get("run_index")) == \
                        (record.case, record.host, record.run_index):
                    return f"{ledger}:{number}"
    return str(folder)


def _claim(out: Path) -> None:
    refused = refusal(out)
    if refused:
        raise SiteError(refused)
    out.mkdir(parents=True, exist_ok=True)


def _names(folders: list[Path]) -> dict[Path, str]:
    """A short, unique name per run folder for the site's paths: its own name, numbered when two share one."""
    names: dict[Path, str] = {}
    for folder in folders:
        name = re.sub(r"[^A-Za-z0-9._-]", "_", folder.name) or "run"
        candidate, k = name, 2
        while candidate in names.values():
            candidate, k = f"{name}-{k}", k + 1
        names[folder] = candidate
    return names


def _title(runs: list[matrix.RunView]) -> str:
    return "Palette benchmark — " + ", ".join(run.run_id for run in runs)


def _comparisons(runs: list[matrix.RunView], items: matrix.Items, names: dict[Path, str]
                 ) -> list[comparison.ComparisonView]:
    """The first run against each later one; within each run, every pair of its hosts."""
    views = []
    first = runs[0]
    # A side that is not one measurement (a run of two task families: two skill sets) is compared with nothing:
    # its run's page shows its groups side by side, never pooled.
    for other in runs[1:]:
        page = f"compare/{names[first.folder]}--{names[other.folder]}.html"
        with contextlib.suppress(ReportError):
            views.append(comparison.between_runs(first, other, items, page))
    for run in runs:
        hosts = sorted({r.host for r in run.records})
        for a, b in itertools.combinations(hosts, 2):
            page = f"compare/{names[run.folder]}--{a}--{b}.html"
            with contextlib.suppress(ReportError):
                views.append(comparison.between_hosts(run, a, b, items, page))
    return views


class _Media:
    """The images of the site: previews linked (or copied) as they are, thumbnails and renders made once."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.cache = out / ".cache" / "render"

    def slides(self, found: item.Item, run_name: str) -> None:
        """The item's slides, each under its own number: the deck's previews, a tile saying why for each one left
        out; with no preview to show, the deck rendered here."""
        folder = Path("media", run_name, str(found.workspace.relative))
        sources = found.previews
        rendering = None
        if sources:
            found.slides_note = "the deck's own previews, made when it was built"
        elif found.deck is not None:
            rendering = render.slides_of(found.deck, self.cache)
            sources = dict(enumerate(rendering.images, 1))
            found.slides_note = rendering.note
            if not sources:
                found.slides = [item.SlideView(n, None, text.title, list(text.body))
                                for n, text in enumerate(rendering.texts, 1)]
                return
        else:
            found.slides_note = "no deck was built" if found.outcome in ("pass", "fail") else ""
            return
        titles = [text.title for text in rendering.texts] if rendering is not None else []
        left_out = found.left_out if rendering is None else {}
        for n in sorted(sources.keys() | left_out.keys()):
            if n in left_out:
                found.slides.append(item.SlideView(n, None, "not shown", [left_out[n]]))
                continue
            target = folder / f"slide-{n}.png"
            title = titles[n - 1] if n <= len(titles) else f"slide {n}"
            try:
                _link(sources[n], _inside(self.out, target), found.workspace.folder)
            except untrusted.Refused as refused:
                why = f"{refused.path} {refused.why}: not shown"
                found.refused.append(why)
                found.slides.append(item.SlideView(n, None, "not shown", [why]))
                continue
            found.slides.append(item.SlideView(n, target.as_posix(), title, []))

    def thumb(self, image: Path, found: item.Item, run_name: str) -> str | None:
        """A small copy of `image` for the matrix, made once: kept while it is newer than its image."""
        target = Path("thumbs", run_name, f"{found.workspace.relative}.png")
        path = self.out / target
        try:
            if path.is_file() and path.stat().st_mtime >= image.stat().st_mtime:
                return target.as_posix()
            from PIL import Image  # the deck engine's own dependency

            with Image.open(image) as picture:
                factor = max(1, picture.width // THUMB_WIDTH)
                small = picture.reduce(factor) if factor > 1 else picture.copy()
            path.parent.mkdir(parents=True, exist_ok=True)
            small.save(path)
        except OSError as error:
            warnings.warn(f"{image}: no thumbnail ({error})", stacklevel=2)
            return None
        return target.as_posix()


def _link(source: Path, target: Path, item_folder: Path) -> None:
    """`target` as a hard link to `source` (a copy across disks). An old file there is unlinked first, never
    written through: it may be a link to a run's own file. A source in the item's folder (a run folder may come
    from anywhere) is linked only as a regular file of that folder within its bound, and a PNG of a slide's size
    (untrusted.Refused)."""
    if target.is_symlink() or target.exists():
        try:
            if not target.is_symlink() and target.samefile(source):
                return
        except OSError:
            pass
        target.unlink()
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.is_relative_to(item_folder):
        untrusted.link_or_copy(item_folder, source, target, untrusted.PREVIEW_BYTES, untrusted.preview_problem)
        return
    try:  # our own rendering, in the site's cache
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _inside(out: Path, page: Path | str) -> Path:
    """`out / page`, which must stay inside `out` (the names in it come from run folders)."""
    path = out / page
    if not path.resolve().is_relative_to(out.resolve()):
        raise SiteError(f"{path}: outside {out}, not written")
    return path


class _Pages:
    def __init__(self, out: Path, secrets: Secrets) -> None:
        self.out = out
        self.secrets = secrets
        self.count = 0
        self.environment = jinja2.Environment(
            loader=jinja2.PackageLoader("pytest_palette", "site/templates"),
            autoescape=jinja2.select_autoescape(["html"]), undefined=jinja2.StrictUndefined,
            trim_blocks=True, lstrip_blocks=True)
        self.environment.filters.update(url=_url, seconds=_seconds, money=_money, strong=_strong, lines=_lines,
                                        mean=mean_text)
        self.environment.globals.update(LOOKS=LOOKS, SAME_SKILL=SAME_SKILL)

    def static(self) -> None:
        folder = Path(__file__).parent / "static"
        for source in folder.iterdir():
            target = self.out / "assets" / source.name
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists():
                target.unlink()
            shutil.copyfile(source, target)

    def write(self, page: str, template: str, **values: Any) -> None:
        root = "../" * page.count("/")
        text = self.secrets.scrub(self.environment.get_template(template).render(root=root, page=page, **values))
        path = _inside(self.out, page)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        self.count += 1


def _url(path: str) -> str:
    return quote(path, safe="/#")


def _seconds(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.1f} s" if value < 60 else f"{value / 60:.1f} min"


def _money(value: float | None) -> str:
    return "—" if value is None else money(value)


def _strong(text: str) -> markupsafe.Markup:
    """The report's **bold** in its caveats, as <strong>, the rest escaped."""
    escaped = str(markupsafe.escape(text))
    return markupsafe.Markup(re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", escaped))


def _lines(text: str) -> int:
    return text.count("\n") + 1
