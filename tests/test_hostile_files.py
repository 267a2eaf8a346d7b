"""Issue 21 routes 1, 2 and 7 end to end: an agent that leaves links where the harness copies from, and a run
folder crafted to make `palette-bench view` write outside its --out; issue 36 route 2: sparse, foreign and oversized
previews beside the deck. One session on the three hosts, asserted on many times."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import markupsafe
import pytest
from sweeps import Sweeps, inner_cache
from test_sandbox import FAKE_KEYS, needs_bubblewrap

from pytest_palette.arena import untrusted
from pytest_palette.commands import main
from pytest_palette.rehearsal.hostile import HOSTILE_FILLERS, HOSTILE_LINKS, HOSTILE_LINKS_MARKER

SECRET = "root-only-contents-9a7c"
CASES = f"""
- name: attacked
  covers: an agent that leaves links where the harness copies from is judged, and nothing is followed
  request: Build a 3-slide deck on prompt caching for our engineering all-hands. {HOSTILE_LINKS_MARKER}
  replies: ["yes"]
  expect: {{slides: 3}}
- name: next_item
  covers: the item after the attack runs normally
  request: Build a 3-slide deck on prompt caching for our engineering all-hands.
  replies: ["yes"]
  expect: {{slides: 3}}
"""


@dataclass
class Session:
    folder: Path
    run: Path
    secret: Path
    stdout: str
    records: dict[str, dict[str, object]]


def _leaks(path: Path) -> list[str]:
    """What of the fake keys or the root-only file's contents a file holds."""
    data = path.read_bytes().decode(errors="replace")
    return [value for value in (*FAKE_KEYS.values(), SECRET) if value in data]


#: react runs each command itself, cuga through its run_command, claude through its CLI's shell prefix.
HOSTS = ("react", "cuga", "claude")


def _session(folder: Path) -> Session:
    """The session, in a process of its own, as a user runs it: its environment is what /proc/self/environ would
    give away. The root-only file sits outside the session's folder."""
    secret = folder / "caller" / "root-only.txt"
    secret.parent.mkdir()
    secret.write_text(SECRET, encoding="utf-8")
    secret.chmod(0o600)
    folder = folder / "hostile-files"
    folder.mkdir()
    (folder / "cases.yaml").write_text(CASES, encoding="utf-8")
    (folder / "pytest.ini").write_text("[pytest]\npalette_cases = cases.yaml\n", encoding="utf-8")
    passed = "HOSTILE_SECRET_FILE" + (",PYTHONPATH" if os.environ.get("PYTHONPATH") else "")
    env = {**os.environ, **FAKE_KEYS, "HOSTILE_SECRET_FILE": str(secret)}
    done = subprocess.run([sys.executable, "-m", "pytest", *inner_cache(), f"--host={','.join(HOSTS)}",
                           "--model=rehearsal:hostile_links", f"--palette-sandbox-env={passed}"],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=900)
    [run] = (folder / "runs").iterdir()
    records = {f'{r["case"]}[{r["host"]}]': r for r in map(json.loads, (run / "results.jsonl").open())}
    return Session(folder, run, secret, done.stdout + done.stderr, records)


@pytest.fixture(scope="module")
def session(sweeps: Sweeps) -> Session:
    """One session of the two cases on the three hosts, fake keys in its environment; only `attacked` plants
    links. Once per test session, whichever worker asks first."""
    if needs_bubblewrap.args[0]:
        pytest.skip(needs_bubblewrap.kwargs["reason"])
    return sweeps.shared("hostile-files", _session)


@pytest.mark.end_to_end
@pytest.mark.parametrize("host", HOSTS)
def test_the_attacked_item_is_judged_with_a_note_for_each_link_and_the_next_passes(session: Session,
                                                                                  host: str) -> None:
    assert session.records[f"attacked[{host}]"]["outcome"] == "pass", session.stdout
    assert session.records[f"next_item[{host}]"]["outcome"] == "pass", session.stdout
    assert f"{2 * len(HOSTS)} passed" in session.stdout
    notes = session.records[f"attacked[{host}]"]["judged"]["notes"]  # type: ignore[index]
    for expected in ("slide-7.png beside the deck is a link (to /proc/self/environ), not copied",
                     f"slide-8.png beside the deck is a link (to {session.secret}), not copied",
                     "slide-9.png beside the deck is a link (to /dev/zero), not copied",
                     "slide-10.png beside the deck is a FIFO, not a regular file, not copied",
                     "plan-environ.md is a link (to /proc/self/environ), not copied as the plan",
                     f"plan-secret.md is a link (to {session.secret}), not copied as the plan",
                     *FILLERS_LEFT_OUT):
        # cuga's agent works in a folder of its thread's below work/: the note names the path from work/
        assert any(note == expected or note.endswith(f"/{expected}") for note in notes), (expected, notes)
    assert not session.records[f"next_item[{host}]"]["judged"]["notes"]  # type: ignore[index]
    ran = [json.loads(line)["command"] for line in (session.run / host / "attacked" / "commands.jsonl").open()]
    assert set(HOSTILE_LINKS + HOSTILE_FILLERS) <= set(ran)  # the agent did plant them all


#: What the judge's notes say of HOSTILE_FILLERS: 1.6 GiB of sparse previews and three that are no slide's.
FILLERS_LEFT_OUT = (
    "101 files beside the deck (slide-11.png, slide-12.png, slide-13.png and 98 more) each is larger than "
    f"{untrusted.PREVIEW_BYTES >> 20} MiB: not copied",
    "slide-111.png beside the deck is not a PNG image, not copied",
    "slide-112.png beside the deck is a picture of 60000 x 40000 pixels, larger than a slide's preview (at most "
    f"{untrusted.PREVIEW_SIDE} a side), not copied")


@pytest.mark.parametrize("host", HOSTS)
def test_output_holds_the_deck_its_previews_and_plan_and_no_link(session: Session, host: str) -> None:
    output = session.run / host / "attacked" / "output"
    assert sorted(p.name for p in output.iterdir()) == ["attacked.pptx", "plan.md", "slide-1.png", "slide-2.png",
                                                        "slide-3.png"]
    links = [p for p in session.run.rglob("*") if p.is_symlink() and "work" not in p.relative_to(session.run).parts]
    assert links == []  # the agent's own links stay in its work/, and only there
    # The 1.6 GiB of sparse files beside the deck cost the run's disk no more than the item's bound (in fact a deck).
    assert sum(p.stat().st_size for p in output.iterdir()) <= untrusted.ITEM_COPY_BYTES
    assert sum(p.stat().st_blocks * 512 for p in output.rglob("*")) < 2**20
    beside = next((session.run / host / "attacked" / "work").rglob("slide-110.png"))
    assert beside.stat().st_size == 16 * 2**20  # the agent's files are left where they are, as they are


def _filler(path: Path) -> bool:
    """Whether `path` is a file HOSTILE_FILLERS left in work/ (slide-11.png and on: holes, and what its script
    wrote): read whole, they would cost seconds of zeros."""
    found = re.fullmatch(r"slide-(\d+)\.png", path.name)
    return found is not None and int(found[1]) > 10 and "work" in path.parts


def test_no_file_of_the_run_holds_a_key_or_the_root_only_file(session: Session) -> None:
    leaked = {str(p): _leaks(p) for p in session.run.rglob("*") if p.is_file() and not p.is_symlink()
              and not _filler(p)}
    assert not {path: found for path, found in leaked.items() if found}
    assert not any(value in session.stdout for value in (*FAKE_KEYS.values(), SECRET))


@pytest.fixture(scope="module")
def site(session: Session, sweeps: Sweeps) -> Path:
    """The site of the session's run, built once per test session beside it (the run is only read)."""

    def build(folder: Path) -> Path:
        out = folder / "site"
        assert main(["view", str(session.run), "--out", str(out)]) == 0
        return out

    return sweeps.shared("hostile-files-site", build)


def test_the_site_holds_no_link_no_key_and_no_root_only_file(site: Path, session: Session) -> None:
    files = list(site.rglob("*"))
    assert files and not [p for p in files if p.is_symlink()]
    assert not {str(p): _leaks(p) for p in files if p.is_file() and _leaks(p)}
    for host in HOSTS:
        page = (site / "items" / session.run.name / host / "attacked.html").read_text()
        assert "slide-8.png beside the deck is a link" in page  # the judge's notes say what was refused
        for left_out in FILLERS_LEFT_OUT:
            assert str(markupsafe.escape(left_out)) in page, (host, left_out)


def test_a_crafted_run_folder_is_refused_and_view_writes_nothing_outside_out(
        session: Session, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "a" / "runs" / session.run.name
    shutil.copytree(session.run, run, symlinks=True, ignore=shutil.ignore_patterns("work"))
    kept = (run / "results.jsonl").read_text().splitlines()
    good, crafted = json.loads(kept[0]), len(kept) + 1  # the line of the first crafted record
    with (run / "results.jsonl").open("a") as ledger:
        for case, host in (("next_item", "../../x"), ("../y", "react")):
            ledger.write(json.dumps({**good, "case": case, "host": host, "workspace": None}) + "\n")
    preview = run / "react" / "next_item" / "output" / "slide-1.png"
    preview.unlink()
    preview.symlink_to(session.secret)
    for name in ("palette-calls.jsonl", "commands.jsonl", "turns.json", "output/plan.md", "input/case.json"):
        (run / "react" / "next_item" / name).unlink()
        (run / "react" / "next_item" / name).symlink_to(session.secret)
    before = {p for p in tmp_path.rglob("*")}
    out = tmp_path / "a" / "b" / "site"
    with pytest.warns(UserWarning) as caught:
        assert main(["view", str(run), "--out", str(out)]) == 0
    said = [str(warning.message) for warning in caught]
    ledger = run / "results.jsonl"
    assert f"{ledger}:{crafted}: left out of the site: a record for 'next_item' on '../../x': its host " \
           "'../../x' is not a host name" in said
    assert f"{ledger}:{crafted + 1}: left out of the site: a record for '../y' on 'react': its case '../y' is " \
           "not a case name" in said
    written = {p for p in tmp_path.rglob("*")} - before
    assert written and all(p == out or out in p.parents or p in out.parents for p in written)  # only in --out
    files = list(out.rglob("*"))
    assert not [p for p in files if p.is_symlink()]
    assert not {str(p): _leaks(p) for p in files if p.is_file() and _leaks(p)}
    page = (out / "items" / run.name / "react" / "next_item.html").read_text()
    assert f"output/slide-1.png is a link (to {session.secret}): not shown" in page
    assert f"output/plan.md is a link (to {session.secret}): not shown" in page
    # show and rejudge name the crafted records and go on with the rest.
    assert main(["show", str(run / "results.jsonl")]) == 0
    shown = capsys.readouterr().out
    assert "skipped:" in shown and "is not a host name" in shown and "attacked[react]" in shown
    assert "Unconfined" not in shown  # each host's commands ran in the sandbox
    assert main(["rejudge", str(run)]) == 0
    rejudged = capsys.readouterr().out
    assert "not re-judged: next_item[react]: pass, nothing on disk to judge" in rejudged  # its case.json: a link
    assert "not re-judged: a record for 'next_item' on '../../x': its host" in rejudged
    # Every item but react's next_item (its case.json is now a link): the attacked ones' work/ was not copied.
    assert rejudged.splitlines()[-1].startswith(f"{2 * len(HOSTS) - 1} verdict(s) re-judged"), rejudged
