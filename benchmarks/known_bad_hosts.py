"""Do the known-bad agents fail the same cases on every host? (issue 4; run by hand, minutes per host)

For each known-bad rehearsal agent, runs all shipped cases on each host given, and checks that the set of
failed cases is exactly the documented one (tests/known_bad_cases.py, derived from the cases) — the
same set the react host is held to by tests/test_benchmark_suite.py. Errors (host failures) are counted
apart and make the script fail too: a host error is not a verdict.

    python benchmarks/known_bad_hosts.py --host cuga --host claude [--flaw replans ...] [--skill DIR]

`--flaw good` runs the good rehearsal model, which must fail nothing. `--flaw loops` runs the looping agent, which
must fail nothing and end as an ERROR naming the step budget on exactly the cases whose deck gets built
(tests/known_bad_cases.py, `expected_errors`), under each host's step budget lowered by `--budget` (react's
recursion limit, claude's max-turns, CUGA's steps) so that it ends in seconds. `--skill DIR` runs another copy of the
skill (one whose tracer is switched off is judged from the hosts' own call record).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from known_bad_cases import expected_errors, expected_failures  # noqa: E402

from pytest_palette.cases import load_cases  # noqa: E402

#: Each host's step budget option, lowered for the looping agent.
BUDGETS = {"react": "--palette-recursion-limit", "claude": "--palette-max-turns", "cuga": "--palette-cuga-max-steps",
           "codex": "--palette-codex-max-steps"}


def run(host: str, flaw: str, folder: Path, skill: str | None,
        extra: tuple[str, ...] = ()) -> tuple[set[str], dict[str, str], float]:
    junit = folder / f"{host}-{flaw}.xml"
    env = dict(os.environ)
    started = time.perf_counter()
    model = "rehearsal" if flaw == "good" else f"rehearsal:{flaw}"
    subprocess.run([sys.executable, "-m", "pytest", str(REPO / "cases"), f"--rootdir={REPO}", "-p", "no:cacheprovider",
                    f"--host={host}", f"--model={model}", "-n", "2", "-q",
                    f"--palette-run-dir={folder / 'runs'}", f"--junitxml={junit}",
                    *([f"--palette-skill={skill}"] if skill else []), *extra],
                   cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
    failed, errored = set(), {}
    for testcase in ET.parse(junit).getroot().iter("testcase"):
        case = str(testcase.get("name")).split("[")[0]
        if testcase.find("failure") is not None:
            failed.add(case)
        error = testcase.find("error")
        if error is not None:
            errored[case] = str(error.get("message") or "")
    return failed, errored, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", action="append", default=[])
    parser.add_argument("--flaw", action="append", default=[])
    parser.add_argument("--skill", help="the skill folder to run instead of the reference one")
    parser.add_argument("--budget", type=int, default=20, help="each host's step budget for the looping agent")
    args = parser.parse_args()
    cases = [case for path in sorted((REPO / "cases").glob("*.yaml")) for case in load_cases(path)]
    expected = {"good": (frozenset[str](), ""), **expected_failures(cases), **expected_errors(cases)}
    erring = expected_errors(cases)
    ok = True
    with tempfile.TemporaryDirectory() as scratch:
        for host in args.host or ["cuga", "claude"]:
            for flaw in args.flaw or sorted(expected):
                if flaw in erring:  # errs, never fails: the ERRORs must name its stop, on exactly its cases
                    errs, phrase = erring[flaw]
                    failed, errored, seconds = run(host, flaw, Path(scratch), args.skill,
                                                   (f"{BUDGETS[host]}={args.budget}",) if host in BUDGETS else ())
                    named = {case for case, said in errored.items() if phrase in said}
                    same = not failed and named == set(errored) == errs
                    ok = ok and same
                    detail = "" if same else (f"  failed {sorted(failed)} missed {sorted(errs - named)} other "
                                              f"errors {sorted(set(errored) - named)}")
                    print(f"{host:<7} {flaw:<16} errs {len(named):>2}/{len(cases)} at the step budget (documented "
                          f"{len(errs):>2}) {'same' if same else 'DIFFERENT'}  {seconds:5.0f}s{detail}", flush=True)
                    continue
                failed, errored, seconds = run(host, flaw, Path(scratch), args.skill)
                want = set(expected[flaw][0])
                same = failed == want and not errored
                ok = ok and same
                detail = "" if same else (f"  unexpected {sorted(failed - want)} missed {sorted(want - failed)}"
                                          f" errored {sorted(errored)}")
                print(f"{host:<7} {flaw:<16} fails {len(failed):>2}/{len(cases)} (documented {len(want):>2}) "
                      f"{'same' if same else 'DIFFERENT'}  {seconds:5.0f}s{detail}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
