"""arena/untrusted.py and its readers: what an agent left, or a saved run holds, is read only as a regular file
inside its folder, no link followed, each kind bounded; every other thing is refused with a note."""

from __future__ import annotations

import json
import os
import socket
import struct
import tracemalloc
import zlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pytest
from PIL import Image
from pptx import Presentation

from pytest_palette.arena import untrusted
from pytest_palette.arena.untrusted import Refused, copy, listing, read_bytes, read_head
from pytest_palette.arena.workspace import UnsafeRecord, Workspace, record_refusal
from pytest_palette.cases import Case, Expect
from pytest_palette.commands import main
from pytest_palette.judge.evidence import MIN_PPTX_BYTES, inspect_deck, newest_deck, read_folder, save_outputs, trace_of
from pytest_palette.results.record import from_json
from pytest_palette.run.session import run_copies

SECRET = "root-only-secret-4f1e"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file of the caller's outside the folder, readable by its owner only (as root: by root only)."""
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text(SECRET, encoding="utf-8")
    secret.chmod(0o600)
    return secret


@pytest.fixture
def work(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    (folder / "deck").mkdir(parents=True)
    return folder


def _hostile_names(work: Path, outside: Path) -> dict[str, str]:
    """Every kind of thing an agent can leave in place of a file, beside the deck: name → what the refusal says."""
    deck = work / "deck"
    (deck / "slide-1.png").symlink_to("/proc/self/environ")
    (deck / "slide-2.png").symlink_to(outside)
    (deck / "slide-3.png").symlink_to("/dev/zero")
    os.mkfifo(deck / "slide-4.png")
    return {"slide-1.png": "is a link (to /proc/self/environ)", "slide-2.png": f"is a link (to {outside})",
            "slide-3.png": "is a link (to /dev/zero)", "slide-4.png": "is a FIFO, not a regular file"}


def test_each_kind_of_thing_in_place_of_a_file_is_refused_and_a_good_file_read(work: Path, outside: Path) -> None:
    refusals = _hostile_names(work, outside)
    (work / "deck" / "slide-5.png").write_bytes(b"\x89PNG good")
    for name, why in refusals.items():
        with pytest.raises(Refused) as refused:
            read_bytes(work, Path("deck", name), untrusted.PREVIEW_BYTES)  # a FIFO must not hang here either
        assert refused.value.why == why and refused.value.path == PurePosixPath("deck", name)
        assert str(refused.value).startswith(f"deck/{name} ")
    assert read_bytes(work, work / "deck" / "slide-5.png", 100) == b"\x89PNG good"  # absolute inside: fine too
    found = listing(work, Path("deck"), lambda name: name.startswith("slide-"))
    assert [entry.path for entry in found.files] == [work / "deck" / "slide-5.png"]
    assert sorted((str(r.path), r.why) for r in found.refused) == sorted((f"deck/{n}", w) for n, w in refusals.items())


def test_a_socket_a_folder_and_paths_that_climb_out_are_refused(work: Path, outside: Path) -> None:
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(work / "sock.png"))
    try:
        with pytest.raises(Refused, match="socket"):
            read_bytes(work, Path("sock.png"), 10)
    finally:
        listener.close()
    with pytest.raises(Refused, match="is a folder"):
        read_bytes(work, Path("deck"), 10)
    for path in (Path("../outside/secret.txt"), outside, Path("deck/../../outside/secret.txt")):
        with pytest.raises(Refused, match=r"not .*inside"):
            read_bytes(work, path, 100)
    with pytest.raises(FileNotFoundError):
        read_bytes(work, Path("deck/missing.png"), 10)


def test_a_link_in_a_parent_folder_is_refused_and_never_walked_into(work: Path, outside: Path) -> None:
    (outside.parent / "deck.pptx").write_bytes(b"x" * (MIN_PPTX_BYTES + 1))
    (work / "linked").symlink_to(outside.parent)
    with pytest.raises(Refused) as refused:
        read_bytes(work, Path("linked", "secret.txt"), 100)
    assert refused.value.why == f"is a link (to {outside.parent})" and refused.value.path == PurePosixPath("linked")
    notes: list[str] = []
    assert newest_deck(work, notes) is None  # the deck.pptx behind the link is not found
    assert listing(work, Path("linked"), lambda name: True).files == []


def test_an_oversized_file_is_refused_and_a_copy_leaves_nothing(work: Path, tmp_path: Path) -> None:
    big = work / "deck" / "slide-1.png"
    big.write_bytes(b"\0" * 2048)
    with pytest.raises(Refused, match="larger than"):
        read_bytes(work, Path("deck/slide-1.png"), 1024)
    with pytest.raises(Refused, match="larger than"):
        copy(work, Path("deck/slide-1.png"), tmp_path / "copy.png", 1024)
    assert not (tmp_path / "copy.png").exists()
    assert read_head(work, Path("deck/slide-1.png"), 1024) == (b"\0" * 1024, True)
    copy(work, Path("deck/slide-1.png"), tmp_path / "copy.png", 4096)
    assert (tmp_path / "copy.png").read_bytes() == b"\0" * 2048
    with pytest.raises(FileExistsError):  # never written through whatever is already there
        copy(work, Path("deck/slide-1.png"), tmp_path / "copy.png", 4096)


def test_a_site_links_the_very_file_it_checked(work: Path, tmp_path: Path, outside: Path) -> None:
    (work / "deck" / "slide-1.png").write_bytes(b"\x89PNG good")
    untrusted.link_or_copy(work, Path("deck/slide-1.png"), tmp_path / "linked.png", 100)
    assert (tmp_path / "linked.png").samefile(work / "deck" / "slide-1.png")  # a hard link, on one disk
    (work / "deck" / "slide-2.png").symlink_to(outside)
    with pytest.raises(Refused, match="is a link"):
        untrusted.link_or_copy(work, Path("deck/slide-2.png"), tmp_path / "never.png", 100)
    assert not (tmp_path / "never.png").exists()


def test_a_200_mb_sparse_trace_is_read_up_to_its_bound_in_bounded_memory(tmp_path: Path) -> None:
    trace = tmp_path / "palette-calls.jsonl"
    with trace.open("wb") as handle:
        handle.write(b'{"command": "plan"}\n{"command": "start"}\n')
        handle.truncate(200 * 1024 * 1024)  # a hole: costs no disk
    tracemalloc.start()
    try:
        calls, notes = trace_of(trace)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [call["command"] for call in calls] == ["plan", "start"]
    assert notes == (f"the skill's trace is larger than {untrusted.TRACE_BYTES >> 20} MiB: only its first 41 bytes "
                     "were read",)
    assert peak < 4 * untrusted.TRACE_BYTES  # the head and its decoding, never the 200 MB


def test_a_trace_that_is_a_link_is_not_read(tmp_path: Path, outside: Path) -> None:
    (tmp_path / "palette-calls.jsonl").symlink_to(outside)
    assert trace_of(tmp_path / "palette-calls.jsonl") == (
        [], (f"the skill's trace palette-calls.jsonl is a link (to {outside}): not read",))
    assert trace_of(tmp_path / "missing.jsonl") == ([], ())


def _deck(path: Path) -> Path:
    presentation = Presentation()
    for number in range(2):
        presentation.slides.add_slide(presentation.slide_layouts[1]).shapes.title.text = f"Slide {number + 1}"
    presentation.save(str(path))
    assert path.stat().st_size >= MIN_PPTX_BYTES
    return path


def test_saving_outputs_copies_regular_files_only_and_notes_each_refusal(work: Path, outside: Path,
                                                                        tmp_path: Path) -> None:
    deck = _deck(work / "deck" / "deck.pptx")
    refusals = _hostile_names(work, outside)
    _png(work / "deck" / "slide-5.png")
    (work / "plan.md").symlink_to("/proc/self/environ")
    (work / "deck" / "deck-link.pptx").symlink_to(outside)
    on_disk = read_folder(work, tmp_path / "palette-calls.jsonl", grace=0)
    assert on_disk.pptx == deck and on_disk.slides == 2
    assert work / "deck" / "deck-link.pptx" in on_disk.decks  # a case that forbids a deck still sees it
    output = tmp_path / "output"
    saved = save_outputs(Case(name="solar", covers="c", tags=(), request="r", context="", replies=(),
                                 expect=Expect(), path=Path("cases.yaml"), line=1), on_disk, output)
    assert sorted(p.name for p in output.iterdir()) == ["slide-5.png", "solar.pptx"]
    assert not any(p.is_symlink() for p in output.iterdir())
    for name, why in refusals.items():
        assert f"{name} beside the deck {why}, not copied" in saved.call_notes
    assert "plan.md is a link (to /proc/self/environ), not copied as the plan" in saved.call_notes
    for path in output.iterdir():
        assert SECRET.encode() not in path.read_bytes() and b"PATH=" not in path.read_bytes()


def _sparse(path: Path, size: int) -> Path:
    """A file of `size` bytes that takes no disk: a hole (os.truncate), as an agent makes in no time."""
    path.touch()
    os.truncate(path, size)
    return path


def _png(path: Path, width: int = 1280, height: int = 720, size: int = 0) -> Path:
    """A real PNG (Pillow's), or with `size` one grown to that many bytes by a hole after its end (no disk)."""
    Image.new("RGB", (width, height), "white").save(path)
    if size:
        os.truncate(path, size)
    return path


def _png_header(width: int, height: int, crc: int | None = None) -> bytes:
    """A PNG's signature and IHDR chunk saying `width` x `height` (with its own CRC unless `crc` is given)."""
    body = b"IHDR" + struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + body + struct.pack(">I", zlib.crc32(body) if crc is None
                                                                           else crc)


def test_a_preview_is_a_png_of_a_slides_size(tmp_path: Path) -> None:
    def problem(data: bytes) -> str | None:
        return untrusted.preview_problem(data[:untrusted.PNG_HEAD])

    assert problem(_png(tmp_path / "rendered.png").read_bytes()) is None  # as the reference renderer draws one
    assert problem(_png_header(untrusted.PREVIEW_SIDE, 1)) is None
    assert problem(b"\0" * 4096) == "is not a PNG image"
    assert problem(b"GIF89a" + b"\0" * 40) == "is not a PNG image"
    assert problem(b"\x89PNG good") == "is not a PNG image"
    assert problem(_png_header(1280, 720, crc=0)) == "is not a PNG image (its header is not one)"
    assert problem(_png_header(1280, 720)[:30]) == "is not a PNG image (its header is not one)"
    assert problem(_png_header(100_000, 720)) == (f"is a picture of 100000 x 720 pixels, larger than a slide's "
                                                  f"preview (at most {untrusted.PREVIEW_SIDE} a side)")
    assert problem(_png_header(0, 720)) == "is not a PNG image (its header says it has no pixels)"


def test_what_copies_write_is_bounded_by_the_bytes_read_per_item_and_per_run(work: Path, tmp_path: Path) -> None:
    mib = 2**20
    for name in ("a.bin", "b.bin", "c.bin"):
        _sparse(work / name, 2 * mib)  # sparse: 2 MiB to read, no block written
    run = untrusted.Budget(5 * mib, "the run's copies")
    first = untrusted.Budget(3 * mib, "the item's copies", within=run)
    assert copy(work, Path("a.bin"), tmp_path / "a.bin", 4 * mib, first) == 2 * mib
    with pytest.raises(Refused) as refused:
        copy(work, Path("b.bin"), tmp_path / "b.bin", 4 * mib, first)
    assert refused.value.why == "would take the item's copies past 3 MiB"
    assert not (tmp_path / "b.bin").exists() and (first.written, run.written) == (2 * mib, 2 * mib)
    second = untrusted.Budget(4 * mib, "the item's copies", within=run)  # a later item: its own 4, the run's last 3
    assert copy(work, Path("b.bin"), tmp_path / "b2.bin", 4 * mib, second) == 2 * mib
    with pytest.raises(Refused, match=r"^c\.bin would take the run's copies past 5 MiB$"):
        copy(work, Path("c.bin"), tmp_path / "c.bin", 4 * mib, second)
    assert (second.left, run.left) == (mib, mib)
    assert sum(p.stat().st_size for p in tmp_path.glob("*.bin")) == run.written == 4 * mib

    # A file that grows while it is copied (an agent's process still writing) is charged what was written of it.
    grown = untrusted.Budget(3 * mib, "the item's copies")
    _sparse(work / "d.bin", mib)

    def grow(head: bytes) -> None:
        os.truncate(work / "d.bin", 8 * mib)  # after the size was read, before the copy

    with pytest.raises(Refused, match=r"^d\.bin would take the item's copies past 3 MiB$"):
        copy(work, Path("d.bin"), tmp_path / "d.bin", 4 * mib, grown, check=grow)
    assert not (tmp_path / "d.bin").exists() and grown.written == 3 * mib and grown.left == 0


def test_each_xdist_worker_holds_an_even_share_of_the_runs_copies() -> None:
    alone, third = run_copies(1), run_copies(3)
    assert (alone.total, alone.why(alone.total + 1)) == (untrusted.RUN_COPY_BYTES, "would take the run's copies past "
                                                          f"{untrusted.RUN_COPY_BYTES >> 20:,} MiB")
    assert third.total * 3 <= untrusted.RUN_COPY_BYTES < (third.total + 1) * 3
    assert third.why(third.total + 1).startswith("would take this worker's share of the run's copies (1 of 3) past ")


def test_saving_outputs_leaves_out_sparse_foreign_and_oversized_previews_and_says_so(work: Path,
                                                                                     tmp_path: Path) -> None:
    _deck(work / "deck" / "deck.pptx")
    deck = work / "deck"
    for number in (1, 2):
        _png(deck / f"slide-{number}.png")
    for number in range(3, 193):  # the route: sparse 16 MiB files, 3 GiB of zeros and no block written
        _sparse(deck / f"slide-{number}.png", 16 * 2**20)
    for number in range(193, 198):
        _sparse(deck / f"slide-{number}.png", 2**20)
    (deck / "slide-198.png").write_bytes(_png_header(60_000, 40_000) + bytes(100))
    _png(deck / "slide-199.png", size=5 * 2**20)  # a real PNG of a slide's size within the bound: copied
    _png(deck / "slide-200.png")
    for number in range(201, 211):
        _sparse(deck / f"slide-{number}.png", 16 * 2**20)
    case = Case(name="solar", covers="c", tags=(), request="r", context="", replies=(), expect=Expect(),
                path=Path("cases.yaml"), line=1)
    output = tmp_path / "output"
    saved = save_outputs(case, read_folder(work, tmp_path / "palette-calls.jsonl", grace=0), output)
    assert sorted(p.name for p in output.iterdir()) == ["slide-1.png", "slide-199.png", "slide-2.png", "slide-200.png",
                                                        "solar.pptx"]
    assert sum(p.stat().st_size for p in output.iterdir()) < 6 * 2**20
    assert list(saved.call_notes) == [
        "190 files beside the deck (slide-3.png, slide-4.png, slide-5.png and 187 more) each is larger than "
        f"{untrusted.PREVIEW_BYTES >> 20} MiB: not copied",
        "5 files beside the deck (slide-193.png, slide-194.png, slide-195.png and 2 more) each is not a PNG image: "
        "not copied",
        "slide-198.png beside the deck is a picture of 60000 x 40000 pixels, larger than a slide's preview (at most "
        f"{untrusted.PREVIEW_SIDE} a side), not copied",
        "10 files beside the deck (slide-201.png, slide-202.png, slide-203.png and 7 more) each is past the first "
        f"{untrusted.PREVIEWS} previews: not copied"]

    # Real previews padded to their bound, past what is left of the run's copies: only what fits is written.
    for number in range(3, 211):
        (work / "deck" / f"slide-{number}.png").unlink(missing_ok=True)
    padded = 3 * 2**20
    for number in range(3, 8):
        _png(work / "deck" / f"slide-{number}.png", size=padded)
    deck = (work / "deck" / "deck.pptx").stat().st_size
    previews = sum((work / "deck" / f"slide-{n}.png").stat().st_size for n in (1, 2))
    run = untrusted.Budget(deck + previews + 2 * padded + 1000, "the run's copies")
    again = save_outputs(case, read_folder(work, tmp_path / "palette-calls.jsonl", grace=0), tmp_path / "again", run)
    assert sorted(p.name for p in (tmp_path / "again").iterdir()) == [
        "slide-1.png", "slide-2.png", "slide-3.png", "slide-4.png", "solar.pptx"]
    assert sum(p.stat().st_size for p in (tmp_path / "again").iterdir()) == run.written <= run.total
    assert list(again.call_notes) == [f"3 files beside the deck (slide-5.png, slide-6.png, slide-7.png) each would "
                                      f"take the run's copies past {run.total:,} bytes: not copied"]


def test_a_deck_that_is_a_link_is_never_read(work: Path, tmp_path: Path) -> None:
    real = _deck(tmp_path / "real.pptx")
    (work / "deck" / "deck.pptx").symlink_to(real)
    notes: list[str] = []
    assert newest_deck(work, notes) is None
    assert notes == [f"deck/deck.pptx is a link (to {real}), not read as the deck"]
    assert inspect_deck(work / "deck" / "deck.pptx").slides == 0


# -- a saved run's records --------------------------------------------------------------------------

def _record(**fields: object) -> object:
    base = {"schema": 1, "run_id": "r", "case": "three_slides", "host": "react", "model": "m",
            "provider": "rehearsal", "run_index": 1, "outcome": "pass", "failures": [], "slides": 3,
            "has_plex": True, "deck": True, "polls": 1, "calls": [], "context_expected": False,
            "context_reached": False, "edit_expected": False, "edit_called": False, "replanned_after_edit": False,
            "seconds": 1.0, "turns": 1, "tokens": None, "cost_usd": None, "skill_hash": "a", "case_hash": "c",
            "tags": [], "plugin_version": "0", "started_at": 1.0, "ended_at": 2.0, "fingerprint": "f",
            "scaffold": {}}
    return from_json(json.dumps({**base, **fields}))


@pytest.mark.parametrize(("fields", "why"), [
    ({"host": "../../x"}, "its host '../../x' is not a host name"),
    ({"case": "../y"}, "its case '../y' is not a case name"),
    ({"host": "a/b"}, "its host 'a/b' is not a host name"),
])
def test_a_record_whose_names_step_outside_its_run_is_refused(tmp_path: Path, fields: dict[str, str],
                                                              why: str) -> None:
    record = _record(**fields)
    assert record_refusal(record) == why  # type: ignore[arg-type]
    with pytest.raises(UnsafeRecord, match=why.replace("(", r"\(")):
        Workspace.locate(tmp_path, record)  # type: ignore[arg-type]


def test_a_linked_host_folder_of_a_saved_run_is_refused(tmp_path: Path, outside: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "react").symlink_to(outside.parent)
    with pytest.raises(UnsafeRecord, match="a link or a file"):
        Workspace.locate(tmp_path / "run", _record())  # type: ignore[arg-type]


@pytest.fixture
def saved_run(tmp_path: Path) -> Iterator[Path]:
    run = tmp_path / "run"
    (run / "react" / "three_slides" / "output").mkdir(parents=True)
    (run / "results.jsonl").write_text(json.dumps(json.loads(_record().to_json())) + "\n",  # type: ignore[attr-defined]
                                       encoding="utf-8")
    yield run


@pytest.mark.parametrize("command", ["show", "rejudge"])
def test_show_and_rejudge_take_the_ledger_for_its_run_folder(saved_run: Path, command: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, str(saved_run / "results.jsonl")]) == 0
    said = capsys.readouterr().out
    assert "error" not in said
    assert ("three_slides[react]" in said) if command == "show" else ("not re-judged: three_slides[react]" in said)
