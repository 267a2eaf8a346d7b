"""The site's costs, on this machine (issue targets in brackets):

1. writing the site of 1,000 items — 3 hosts × 33 cases × 10 runs                    [≤ 10 s]
2. its matrix page interactive in headless Chromium: from navigation to the filters'
   script having run (the page sets data-ready)                                        [≤ 1 s]

The 1,000 items are real: the 33 shipped cases are run once on react with the rehearsal model, and their
folders are laid out 30 times over (hard links, with each record's host, run index and folder rewritten) as
one run of 3 hosts × 10 runs. The site reads them exactly as it reads a real run of that size.

    python benchmarks/bench_site.py [--items-from RUN]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from pytest_palette.arena.workspace import Workspace  # noqa: E402
from pytest_palette.results.ledger import append, load  # noqa: E402
from pytest_palette.site.build import write  # noqa: E402

HOSTS, RUNS = ("react", "cuga", "claude"), 10


def real_run(folder: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pytest", str(REPO / "cases"), "-p", "no:cacheprovider", "-q", "-n", "2",
                    f"--rootdir={REPO}", f"--palette-run-dir={folder}", "--palette-run-id=once", "--host=react"],
                   cwd=REPO, check=False, capture_output=True, timeout=1800)
    return folder / "once"


def thousand(source: Path, target: Path) -> int:
    """One run of HOSTS × cases × RUNS items, each a hard-linked copy of a real item's folder."""
    records = list(load(source).latest.values())
    target.mkdir()
    count = 0
    for host in HOSTS:
        for record in records:
            for k in range(1, RUNS + 1):
                relative = f"{host}/{record.case}-{k}"
                (target / host).mkdir(exist_ok=True)
                subprocess.run(["cp", "-al", str(Workspace.locate(source, record).folder), str(target / relative)],
                               check=True)
                append(target / "results.jsonl", msgspec.structs.replace(
                    record, run_id="thousand", host=host, run_index=k, workspace=relative))
                count += 1
    return count


def interactive(index: Path, tries: int = 5) -> list[float]:
    from browser import Browser

    seconds = []
    with Browser() as browser:
        for _ in range(tries):
            page = browser.open(index)
            ready = page.evaluate("""() => new Promise(done => {
                const at = () => document.documentElement.getAttribute('data-ready') ?
                    done(performance.now()) : setTimeout(at, 5);
                at(); })""")
            seconds.append(ready / 1000)
            page.close()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items-from", type=Path, help="a run of the 33 cases to lay out (default: run them now)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        source = args.items_from or real_run(folder / "runs")
        items = thousand(source, folder / "thousand")
        for attempt in (1, 2):
            out = folder / f"site-{attempt}"
            started = time.perf_counter()
            written = write([folder / "thousand"], out)
            took = time.perf_counter() - started
            size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file() and p.stat().st_nlink == 1)
            print(f"site of {written.items} items ({items} laid out), {written.pages} pages: written in {took:.1f} s "
                  f"[≤ 10 s]; {size / 1e6:.0f} MB of its own (previews are hard links) — attempt {attempt}")
        again = time.perf_counter()
        write([folder / "thousand"], folder / "site-1")
        print(f"written again over itself (thumbnails kept): {time.perf_counter() - again:.1f} s")
        ready = interactive(folder / "site-1" / "index.html")
        print(f"matrix interactive in Chromium: median {statistics.median(ready):.2f} s, worst {max(ready):.2f} s "
              f"of {len(ready)} loads [≤ 1 s]")
        os.sync()


if __name__ == "__main__":
    main()
