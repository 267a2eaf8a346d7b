"""The hostile-agent suite as an unprivileged user (issue 21, route 10): most people run the benchmark as
themselves, not as root, and CI runs as root. So, as root, this runs every hostile test — every module
tests/test_hostile_*.py and the hostile test of tests/test_sandbox.py — again, as a user of its own
(tests/unprivileged.py), in one pytest subprocess, and asserts they pass there too. Not as root it skips: the
plain run already is the unprivileged one."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import psutil
import pytest
from unprivileged import REPO, Unprivileged

from pytest_palette.arena import leftovers
from pytest_palette.arena.sandbox import Sandbox, problem
from pytest_palette.backend import agent_environment

#: What the hostile tests are named by: their modules, and in tests/test_sandbox.py the test's own name.
HOSTILE_MODULES = "tests/test_hostile_*.py"
HOSTILE_KEYWORD = "hostile"


#: Sessions not run again as the user, by module and host, because what they show does not differ there: a cuga
#: conversation's worker joins the item's keeper as a command does (its user namespace and pid namespace, not as
#: root), which react's sessions of the same modules show as the user; and the record of the skill's runs sees a run
#: as the item's by the keeper's pid namespace on react and cuga alike (tests/test_hostile_calls.py), where claude's
#: commands, below the CLI's own user namespace, are the case that differs. cuga's own routes — its model's code
#: (test_hostile_cuga), its forwarder (test_hostile_forwarder), its links (test_hostile_files) — run again.
ALIKE_UNPRIVILEGED = (("test_hostile_calls", "react"), ("test_hostile_calls", "cuga"), ("test_hostile_limits", "cuga"),
                      ("test_sandbox", "cuga"))


def hostile_selection() -> list[str]:
    """The hostile tests, found by pattern, so that modules added later are run too."""
    modules = sorted(str(path.relative_to(REPO)) for path in REPO.glob(HOSTILE_MODULES))
    alike = " or ".join(f"({module} and {host})" for module, host in ALIKE_UNPRIVILEGED)
    return [*modules, "tests/test_sandbox.py", "-k", f"{HOSTILE_KEYWORD} and not ({alike})"]


def outcomes(output: str) -> dict[str, int]:
    """pytest's final line (`3 passed, 14 deselected in 58.3s`) as {outcome: count}."""
    last = next((line for line in reversed(output.splitlines()) if re.search(r" in [\d.]+s", line)), "")
    return {word.rstrip("s") if word in ("errors", "warnings") else word: int(count)
            for count, word in re.findall(r"(\d+) (\w+)", last)}


# The whole hostile suite on every host, once: longer than `make test`'s --timeout 600 per test.
@pytest.mark.end_to_end
@pytest.mark.timeout(1800)
def test_the_hostile_suite_passes_as_an_unprivileged_user(unprivileged: Unprivileged) -> None:
    assert unprivileged.uid != 0 and os.geteuid() == 0
    # Another session's on this machine, cut off by a timeout, are not this one's to judge.
    earlier = {path.name for path in unprivileged.home.iterdir() if path.name.startswith("run-")}
    selection = hostile_selection()
    # One inner run of the whole suite, in a process of its own: minutes, with every host.
    finished = unprivileged.run_pytest([*selection, "-p", "no:randomly", "-q", "-rfEs", "--timeout=900"],
                                       timeout=1700)
    done = finished.done
    said = f"{' '.join(selection)} as {unprivileged.name}:\n{done.stdout[-6000:]}\n{done.stderr[-2000:]}"
    counted, code = outcomes(done.stdout), done.returncode
    assert code == 0, said
    # Passed, and nothing skipped: a host its user could not start would otherwise pass as nothing.
    assert counted.get("passed", 0) >= 3 and not {"failed", "error", "skipped", "xfailed"} & set(counted), said
    # Nothing of the user's is left running, nor in the machine's shared folders.
    assert finished.running == [] and finished.left == []
    assert [path.name for path in unprivileged.home.iterdir() if path.name.startswith("run-")
            and path.name not in earlier] == []


def test_the_selection_finds_every_hostile_module() -> None:
    found = hostile_selection()
    assert found[-3:-1] == ["tests/test_sandbox.py", "-k"] and found[-1].startswith(f"{HOSTILE_KEYWORD} and not (")
    assert all(Path(REPO, module).is_file() and Path(module).name.startswith("test_hostile_")
               for module in found[:-3])
    assert outcomes("==== 3 passed, 14 deselected, 2 warnings in 58.32s ====") == {
        "passed": 3, "deselected": 14, "warning": 2}
    assert outcomes("1 failed, 1 error in 3.1s") == {"failed": 1, "error": 1}


@pytest.mark.skipif(problem("bubblewrap") is not None, reason=f"no sandbox here: {problem('bubblewrap')}")
def test_a_process_that_cleared_its_environment_is_found_by_the_trace_in_its_sandbox(tmp_path: Path) -> None:
    """What finds it not as root, where no user id of the item's marks it: its sandbox has the trace mounted."""
    trace = tmp_path / "palette-calls.jsonl"
    sandbox = Sandbox(tmp_path / "work", agent_environment(trace), "bubblewrap", trace=trace)
    sandbox.prepare()
    try:
        subprocess.run(sandbox.argv("env -i /bin/sh -c 'sleep 300 >/dev/null 2>&1 &'"), env=sandbox.env,
                       check=True, timeout=60)
        found = leftovers.processes_of(trace)
        assert found and not any("PALETTE_TRACE" in psutil.Process(pid).environ() for pid in found)
    finally:
        sandbox.close()
    assert leftovers.processes_of(trace) == []
