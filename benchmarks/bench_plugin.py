"""The plugin's own costs, on this machine (issue targets in brackets):

1. all the shipped cases on the react host with the rehearsal model, `-n 2`        [≤ 60 s wall]
2. the harness's overhead per item: item time minus the host's turns (workspace,
   inputs, evidence, judge, outputs, report), median over the items               [≤ 100 ms]
3. collecting 5,000 generated cases                                               [≤ 5 s]

    python benchmarks/bench_plugin.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def pytest_run(*args: str, cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=1800)
    return time.perf_counter() - started, done


def full_suite(folder: Path) -> tuple[float, list[float]]:
    junit = folder / "junit.xml"
    wall, done = pytest_run(str(REPO / "cases"), f"--rootdir={REPO}", "-n", "2", "-q",
                            f"--palette-run-dir={folder / 'runs'}", f"--junitxml={junit}", cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"the suite did not pass:\n{done.stdout[-3000:]}")
    overheads = []
    for testcase in ET.parse(junit).getroot().iter("testcase"):
        props = {p.get("name"): p.get("value") for p in testcase.iter("property")}
        overheads.append(float(testcase.get("time", 0)) - float(props["seconds"] or 0))
    return wall, overheads


def collection(folder: Path, count: int = 5000) -> float:
    cases = folder / "cases"
    cases.mkdir(parents=True)
    for chunk in range(count // 100):
        lines = []
        for n in range(100):
            lines += [f"- name: case_{chunk}_{n}", "  covers: collection speed", "  tags: [generated]",
                      f"  request: Build a {n % 12 + 1}-slide deck on topic {chunk}-{n}",
                      '  replies: ["make it shorter", "yes"]', "  expect:", f"    slides: {n % 12 + 1}"]
        (cases / f"generated_{chunk:02d}.yaml").write_text("\n".join(lines) + "\n")
    (folder / "pytest.ini").write_text("[pytest]\ntestpaths = cases\n")
    wall, done = pytest_run("--co", "-q", cwd=folder)
    if f"{count} tests collected" not in done.stdout:
        raise SystemExit(f"expected {count} items:\n{done.stdout[-2000:]}")
    return wall


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        wall, overheads = full_suite(folder)
        collect = collection(folder / "collect")
    median = statistics.median(overheads) * 1000
    print(f"{len(overheads)} cases, react, rehearsal, -n 2: {wall:.1f} s wall (target ≤ 60 s)")
    print(f"harness overhead per item: median {median:.0f} ms, max {max(overheads) * 1000:.0f} ms "
          "(target median ≤ 100 ms)")
    print(f"collecting 5,000 generated cases: {collect:.2f} s (target ≤ 5 s)")
    return 0 if wall <= 60 and median <= 100 and collect <= 5 else 1


if __name__ == "__main__":
    sys.exit(main())
