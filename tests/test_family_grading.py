"""A family's task graded for real: the example family's preflight service, invariants and hidden `node --test`
checks over the reference solution's folder (1.0), an untouched one (0, through a gate) and a partial one (between,
with the failing check's own words) through `palette-bench grade`; graders' faults as errors naming the grader; bad
rows counted as failing checks; a hidden file the agent overwrote restored byte for byte; each check under its own
runner (docs/families.md). Each grade is a few real processes in the graders' own sandbox."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import psutil
import pytest
from test_families import EXAMPLE, make_family, snapshot

from pytest_palette.arena import sandbox
from pytest_palette.commands import main
from pytest_palette.families import hidden_tests
from pytest_palette.families.grading import grade
from pytest_palette.families.layout import Family, Task
from pytest_palette.families.staging import stage

pytestmark = [pytest.mark.end_to_end,
              pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")]
MODE = "bubblewrap"


@pytest.fixture(autouse=True)
def _bubblewrap() -> None:
    problem = sandbox.problem(MODE)
    if problem:
        pytest.skip(problem)


def example() -> Task:
    return Family.load(EXAMPLE).task("open-todos")


def staged(tmp_path: Path, task: Task, solved: bool = False) -> Path:
    work = tmp_path / "work"
    stage(task, work, {})
    if solved:
        assert task.solution is not None
        subprocess.run(["sh", str(task.solution)], cwd=work, check=True)
    return work


def services() -> list[int]:
    """The example's todo services still running (anyone's, on this machine)."""
    wanted = str(EXAMPLE / "hooks" / "service.js")
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if wanted in (process.info["cmdline"] or []):
            found.append(process.pid)
    return found


def test_the_reference_solution_scores_1_and_nothing_outlives_the_grading(tmp_path: Path) -> None:
    task = example()
    work = staged(tmp_path, task, solved=True)
    before = snapshot(work)
    graded = grade(task, work, mode=MODE)
    assert graded.verdict == "pass" and graded.score == 1.0, graded.to_data()
    assert [(g.source, g.check.name, g.check.passed) for g in graded.checks] == [
        ("invariants", "module-present", True), ("invariants", "sends-client-header", True),
        ("invariants", "documented", True), ("invariants", "service-up", True),  # preflight's service answered
        ("tests", "baseline", True), ("tests", "no-dependencies", True), ("tests", "open-todos", True),
        ("tests", "summary", True)]
    assert graded.sandbox == "bubblewrap" and graded.identity["skill_set_hash"].startswith("sha256:")
    assert snapshot(work) == before  # the hidden files staged and taken away, the owner given back
    assert os.stat(work).st_uid == os.getuid()
    assert services() == []


def test_an_untouched_folder_scores_0_through_a_gate(tmp_path: Path) -> None:
    task = example()
    graded = grade(task, staged(tmp_path, task), mode=MODE)
    failed = {g.check.name: g.check.role for g in graded.checks if g.check.passed is False}
    assert graded.verdict == "fail" and graded.score == 0.0
    assert failed["module-present"] == "gate" and failed["baseline"] == "gate"
    assert not [g.check.name for g in graded.checks if "did not finish" in g.check.words]


PARTIAL = """\
"use strict";
// Reads the first page only, and counts what it read.
async function page(baseUrl) {
  const response = await fetch(`${baseUrl}/v1/todos`, { headers: { "X-Todo-Client": "partial" } });
  return (await response.json()).items;
}
exports.openTodos = async (baseUrl) => (await page(baseUrl)).filter((t) => !t.done).map((t) => t.title);
exports.summary = async (baseUrl) => {
  const todos = await page(baseUrl);
  return { open: todos.filter((t) => !t.done).length, done: todos.filter((t) => t.done).length };
};
"""


def test_a_partial_agent_scores_between_with_the_failing_checks_own_words_and_its_own_test_file_restored(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    task = example()
    work = staged(tmp_path, task)
    (work / "src").mkdir()
    (work / "src" / "todos.js").write_text(PARTIAL)
    (work / "test").mkdir()
    # The agent wrote a test of its own where a hidden one goes (one that would pass): it is backed up, the hidden
    # one runs, and the agent's comes back.
    (work / "test" / "summary.test.js").write_text("require('node:test')('mine', () => {});\n")
    before = snapshot(work)
    code = main(["grade", str(EXAMPLE), "--task", "open-todos", "--run-dir", str(work), "--json"])
    graded = json.loads(capsys.readouterr().out)
    assert code == 1 and graded["verdict"] == "fail" and 0 < graded["score"] < 1
    assert graded["score"] == 0.5  # the header and no dependencies held; the pages were not read
    checks = {check["name"]: check for check in graded["checks"]}
    assert not checks["open-todos"]["pass"] and not checks["summary"]["pass"]
    # The failing check's own words: node's report of the assertion, with what was expected.
    assert "Name the client" in checks["open-todos"]["words"] and "deepStrictEqual" in checks["open-todos"]["words"]
    assert not [name for name, check in checks.items() if "did not finish" in check["words"]]
    assert graded["backed_up"] == ["test/summary.test.js"]
    assert snapshot(work) == before


def hooks_family(tmp_path: Path, invariants: str, **more: str) -> Task:
    root = make_family(tmp_path / "family", {
        "tasks/t/agent.task.md": "x", "tasks/t/hooks/invariants.sh": invariants,
        ".env": f"OUTSIDE={tmp_path / 'outside.txt'}\n", "tasks/t/.env.local": "API_TOKEN=a-very-secret-token-value\n",
        **more})
    (tmp_path / "outside.txt").write_text("not for graders")
    return Family.load(root).task("t")


ROWS = """\
#!/bin/sh
emit() { printf '%s\\n' "$1" >&"$RESULTS_FD"; }
assert present --gate --exists "$AGENT_CWD/work.txt" >&"$RESULTS_FD"
emit 'this is not a row'
emit '{"test": "both", "pass": true, "gate": true, "weight": 2}'
said="$TASK_ID $(basename "$HOOKS_DIR") $API_TOKEN"
emit "{\\"test\\": \\"told\\", \\"pass\\": true, \\"weight\\": 0, \\"message\\": \\"$said\\"}"
if [ -e "$OUTSIDE" ]; then seen=true; else seen=false; fi
emit "{\\"test\\": \\"confined\\", \\"pass\\": $( [ "$seen" = false ] && echo true || echo false )}"
echo "left by a grader" > "$AGENT_CWD/invariants.log"
echo "exiting $CODE" >&2
exit $CODE
"""


@pytest.mark.parametrize("code", [0, 1])
def test_bad_rows_fail_in_place_and_a_failing_invariants_script_is_an_error_naming_it(tmp_path: Path,
                                                                                      code: int) -> None:
    task = hooks_family(tmp_path, ROWS.replace("$CODE", str(code)))
    work = tmp_path / "work"
    work.mkdir()
    (work / "work.txt").write_text("done")
    graded = grade(task, work, mode=MODE)
    shown = [(g.check.name, g.check.role, g.check.weight, g.check.passed, g.malformed) for g in graded.checks]
    assert shown == [("present", "gate", 1.0, True, False), ("invariants.sh row 2", "scored", 1.0, False, True),
                     ("both", "scored", 1.0, False, True), ("told", "scored", 0.0, True, False),
                     ("confined", "scored", 1.0, True, False)]  # the caller's files are not the graders'
    assert graded.checks[3].check.words == "t hooks [redacted]"  # the .env.local value is a secret
    assert sorted(p.name for p in work.iterdir()) == ["work.txt"]  # what the graders left is gone
    assert "is both a gate and weighted" in graded.checks[2].check.words
    if code == 0:
        assert graded.verdict == "fail" and graded.malformed == 2 and graded.score == round(1 / 3, 4)
    else:
        assert graded.verdict == "error" and graded.score is None
        assert graded.errors == (f"{task.folder / 'hooks/invariants.sh'} exited 1: exiting 1",)


def test_a_failing_preflight_is_an_error_and_nothing_else_runs(tmp_path: Path) -> None:
    preflight = "touch \"$AGENT_CWD/started\"\necho the database is down >&2\nexit 1\n"
    task = hooks_family(tmp_path, "echo '{\"test\": \"ran\", \"pass\": true}' >&3\n",
                        **{"hooks/preflight.sh": preflight})
    work = tmp_path / "work"
    work.mkdir()
    graded = grade(task, work, mode=MODE)
    assert graded.verdict == "error" and graded.checks == () and list(work.iterdir()) == []
    assert graded.preflight_error == f"{task.family.root / 'hooks/preflight.sh'} exited 1: the database is down"


def test_python_checks_run_with_pytest_and_a_gate_is_named_test_gate(tmp_path: Path) -> None:
    root = make_family(tmp_path / "family", {
        "tasks/t/agent.task.md": "x",
        "tasks/t/tests/test_gate_imports.py": "def test_imports():\n    import totals\n",
        "tasks/t/tests/test_sum.py": "import totals\n\ndef test_sum():\n    assert totals.total([1, 2]) == 4\n"})
    work = tmp_path / "work"
    work.mkdir()
    (work / "totals.py").write_text("def total(values):\n    return sum(values)\n")
    # An agent's conftest.py that would pass every test: staged over with an empty one, and put back.
    (work / "conftest.py").write_text("import totals\ntotals.total = lambda values: 4\n")
    before = snapshot(work)
    graded = grade(Family.load(root).task("t"), work, mode=MODE)
    assert snapshot(work) == before
    assert [(g.check.name, g.check.role, g.check.passed) for g in graded.checks] == [
        ("imports", "gate", True), ("sum", "scored", False)]
    assert "assert 3 == 4" in graded.checks[1].check.words and graded.score == 0.0


RUNNERS = {
    "tasks/t/agent.task.md": "x",
    # Each passes only under its own runner.
    "tasks/t/tests/under-node.test.js": "const test = require('node:test');\nconst assert = require('node:assert');\n"
                                        "test('node', () => assert.equal(typeof Bun, 'undefined'));\n",
    "tasks/t/tests/under-bun.test.js": "import { test, expect } from 'bun:test';\n"
                                       "test('bun', () => expect(typeof Bun).toBe('object'));\n",
    "tasks/t/tests/either.test.js": "test('plain', () => {\n"
                                    "  if (typeof Bun === 'undefined') throw new Error('not bun');\n});\n",
}


def test_each_check_runs_under_its_own_runner(tmp_path: Path) -> None:
    if hidden_tests.runner_program("bun") is None:
        if os.environ.get("REQUIRE_BUN"):
            pytest.fail("bun is not installed: `make setup` installs it")
        pytest.skip("bun is not installed (`make setup` installs it)")
    work = tmp_path / "work"
    work.mkdir()
    graded = grade(Family.load(make_family(tmp_path / "family", RUNNERS)).task("t"), work, mode=MODE)
    assert graded.verdict == "pass", graded.to_data()


def test_a_check_whose_runner_is_missing_is_an_error_naming_it_and_nothing_runs_under_another(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = hidden_tests.runner_program
    monkeypatch.setattr(hidden_tests, "runner_program", lambda runner: None if runner == "bun" else real(runner))
    work = tmp_path / "work"
    work.mkdir()
    graded = grade(Family.load(make_family(tmp_path / "family", RUNNERS)).task("t"), work, mode=MODE)
    assert graded.verdict == "error" and graded.checks == ()
    assert len(graded.errors) == 2 and all("bun is not installed here" in error for error in graded.errors)


def test_grade_says_what_is_wrong_with_its_input_in_one_line(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["grade", str(EXAMPLE), "--task", "nope", "--run-dir", str(tmp_path)]) == 2
    assert main(["grade", str(EXAMPLE), "--run-dir", str(tmp_path / "absent")]) == 2
    said = capsys.readouterr().out.splitlines()
    assert said == [f"error: {EXAMPLE}/tasks/nope: no such task (the family's tasks: open-todos)",
                    f"error: {tmp_path}/absent: not a folder (--run-dir is the agent's folder to grade)"]


@pytest.mark.parametrize("mode", ["bubblewrap", "none"])
def test_what_preflight_started_is_ended_with_the_grading_confined_or_not(tmp_path: Path, mode: str) -> None:
    marker = f"{os.getpid()}{len(mode)}7"  # a sleep of its own, to be found by its argument
    task = hooks_family(tmp_path, "echo '{\"test\": \"ran\", \"pass\": true}' >&3\n",
                        **{"hooks/preflight.sh": f"sleep {marker} &\nsh -c 'trap \"\" TERM; sleep {marker}' &\n"})
    work = tmp_path / "work"
    work.mkdir()
    graded = grade(task, work, mode=mode)
    assert graded.verdict == "pass" and graded.sandbox == ("bubblewrap" if mode == "bubblewrap" else "unconfined")
    left = [p.pid for p in psutil.process_iter(["cmdline"]) if marker in (p.info["cmdline"] or [])]
    assert left == []  # the one that ignores SIGTERM too: SIGKILL after the grace period
