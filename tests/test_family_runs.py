"""Task families run as pytest items on react, cuga and claude (run/family_items.py), proved as Harbor and SWE-bench
prove their tasks: the oracle (each task's solution/solve.sh through the host's own client) scores 1.0 everywhere,
nop scores 0 through a gate, a partial agent strictly between with the failing hidden test's own words. One real
session per agent over both example families, shared by every test here (tests/sweeps.py); a third family made
here holds a preflight and an invariants script that fail, run in nop's session. What each test expects is read
from the families on disk (their checks, their test titles), not written down again."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sweeps import REPO, Sweep, Sweeps, run_session

from pytest_palette.arena import sandbox
from pytest_palette.commands import main
from pytest_palette.families.identity import revision, skill_set_hash, skills_hash
from pytest_palette.families.layout import Family
from pytest_palette.results.ledger import read
from pytest_palette.results.record import GATE, Record

pytestmark = [pytest.mark.end_to_end,
              pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")]

HOSTS = ("react", "cuga", "claude")
EXAMPLES = (REPO / "examples" / "todo-family", REPO / "examples" / "invoice-family")
#: The tasks of both examples, read from disk.
TASKS = {task.id: task for root in EXAMPLES for task in Family.load(root).tasks()}


@pytest.fixture(autouse=True)
def _bubblewrap() -> None:
    problem = sandbox.problem("bubblewrap")
    if problem:
        pytest.skip(problem)


@dataclass(frozen=True)
class FamilyRun:
    """One agent's session over the families: its sweep and its records by item name."""

    sweep: Sweep
    records: dict[str, Record]

    def of(self, task: str) -> Iterator[tuple[str, Record]]:
        """Each host's record of `task`, every host present."""
        for host in HOSTS:
            name = f"{task}[{host}]"
            assert name in self.records, f"no record of {name}: {sorted(self.records)}\n{self.sweep.stdout[-2000:]}"
            yield host, self.records[name]


def broken_family(folder: Path) -> Path:
    """A family of two tasks whose graders fail: one's preflight exits 1, the other's invariants script exits 1."""
    root = folder / "broken-family"
    for task, hook, script in (("preflight-fails", "preflight.sh", "echo 'no service for you' >&2\nexit 1\n"),
                               ("invariants-fail", "invariants.sh", "echo 'the probe broke' >&2\nexit 1\n")):
        (root / "tasks" / task / "hooks").mkdir(parents=True)
        (root / "tasks" / task / "agent.task.md").write_text(f"Write notes.md for {task}.\n")
        (root / "tasks" / task / "hooks" / hook).write_text("#!/bin/sh\n" + script)
    return root


def family_run(sweeps: Sweeps, agent: str, *extra: str) -> FamilyRun:
    def make(folder: Path) -> Sweep:
        families = [str(root) for root in EXAMPLES]
        if agent == "nop":
            families.append(str(broken_family(folder)))
        return run_session(folder, [*families, f"--host={','.join(HOSTS)}", f"--model=rehearsal:{agent}",
                                    f"--palette-run-id={agent}", f"--rootdir={REPO}", *extra])

    sweep = sweeps.shared(f"families-{agent}", make)
    ledger = sweep.runs / agent / "results.jsonl"
    assert ledger.is_file(), sweep.stdout[-3000:] + sweep.stderr[-3000:]
    return FamilyRun(sweep, {f"{r.case}[{r.host}]": r for r in read(ledger)})


@pytest.fixture(scope="module")
def oracle(sweeps: Sweeps) -> FamilyRun:
    return family_run(sweeps, "oracle")


@pytest.fixture(scope="module")
def nop(sweeps: Sweeps) -> FamilyRun:
    return family_run(sweeps, "nop")


@pytest.fixture(scope="module")
def partial(sweeps: Sweeps) -> FamilyRun:
    return family_run(sweeps, "partial")


def test_the_oracle_scores_one_on_every_task_on_every_host(oracle: FamilyRun) -> None:
    for task_id, task in TASKS.items():
        root = task.family.root
        for host, record in oracle.of(task_id):
            assert record.outcome == "pass", (host, record.failures)
            assert record.judged is not None and record.judged.score == 1.0
            assert oracle.sweep.items[f"{task_id}[{host}]"].outcome == "pass"  # JUnit says what the ledger says
            # Every check of both producers, in the record with its producer; the identity of what ran.
            family = record.family
            assert family is not None and family.task == task_id and family.family == root.name
            names = [check.name for check in record.judged.checks]
            assert {check.name for check in task.checks} <= set(names)
            assert len(family.sources) == len(names) and set(family.sources) == {"invariants", "tests"}
            assert record.terms.skill_hash == skill_set_hash(root)
            assert family.skills_hash == skills_hash(root) and family.revision == revision(root)
            assert family.graders == "bubblewrap" and record.usage.turns == 1
    # The agent's folder holds what the task gives it and nothing of the graders' own.
    work = oracle.sweep.runs / "oracle" / "react" / "open-todos" / "work"
    assert (work / "specs" / "api.md").is_file() and (work / "README.md").is_file() and (work / ".env").is_file()
    assert not any(path.name in ("hooks", "tests", "solution", "invariants.sh", "preflight.sh", "solve.sh")
                   for path in work.rglob("*"))
    assert not (work / "test").exists()  # the hidden checks were staged for the grading only


def test_nop_scores_zero_through_a_gate_on_every_task(nop: FamilyRun) -> None:
    for task_id in TASKS:
        for host, record in nop.of(task_id):
            assert record.outcome == "fail" and record.judged is not None and record.judged.score == 0.0, host
            gates = [check for check in record.judged.checks if check.role == GATE]
            assert gates and any(check.passed is False for check in gates), (host, gates)
            said = nop.sweep.items[f"{task_id}[{host}]"]
            assert said.outcome == "fail"


def test_a_partial_solution_scores_between_with_the_failing_tests_own_words(partial: FamilyRun) -> None:
    for task_id, task in TASKS.items():
        # The titles each hidden check file gives its tests (node:test's `test("…")`, pytest's `def test_…`).
        titles = {check.name: re.findall(r'test\("([^"]+)"|def (test_\w+)', check.source.read_text())
                  for check in task.checks}
        for host, record in partial.of(task_id):
            assert record.outcome == "fail" and record.judged is not None
            assert record.judged.score is not None and 0 < record.judged.score < 1, (host, record.judged.score)
            failing = [check for check, source in zip(record.judged.checks, record.family.sources, strict=True)
                       if source == "tests" and check.passed is False]
            assert failing, (host, record.judged.checks)
            for check in failing:
                own = [title for pair in titles[check.name] for title in pair if title]
                assert own and any(title in check.words for title in own), (host, check.name, check.words[:500])
                assert check.words in " ".join(record.failures)  # the failure line carries the words


def test_the_agents_file_at_a_hidden_checks_path_is_backed_up_and_put_back(partial: FamilyRun) -> None:
    script = TASKS["open-todos"].folder / "solution" / "partial.sh"
    wrote = re.search(r"printf '%s\\n' (.*) > (test/summary\.test\.js)", script.read_text())
    assert wrote is not None
    for host, record in partial.of("open-todos"):
        assert record.family is not None and record.family.backed_up == ("test/summary.test.js",), host
    work = partial.sweep.runs / "partial" / "react" / "open-todos" / "work"
    assert (work / "test" / "summary.test.js").read_text() == "// the agent's own notes on summary\n"
    assert sorted(p.name for p in (work / "test").iterdir()) == ["summary.test.js"]  # nothing staged is left


def test_grade_on_a_saved_folder_gives_the_checks_and_score_of_the_run(
        partial: FamilyRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for task_id, task in TASKS.items():
        record = partial.records[f"{task_id}[react]"]
        saved = shutil.copytree(partial.sweep.runs / "partial" / record.workspace / "work", tmp_path / task_id,
                                symlinks=True)
        status = main(["grade", str(task.family.root), "--task", task_id, "--run-dir", str(saved), "--json"])
        graded = json.loads(capsys.readouterr().out)
        assert status == 1 and graded["verdict"] == "fail"
        assert graded["score"] == record.judged.score
        assert [(c["name"], c["pass"], c["weight"]) for c in graded["checks"]] == \
            [(c.name, c.passed, c.weight) for c in record.judged.checks]


def test_a_failing_preflight_or_invariants_script_is_an_error_of_the_run(nop: FamilyRun) -> None:
    for host in HOSTS:
        record = nop.records[f"preflight-fails[{host}]"]
        assert record.outcome == "error" and record.judged is None
        assert "preflight failed" in record.failures[0] and "preflight.sh exited 1" in record.failures[0]
        assert "no service for you" in record.failures[0]
        # Nothing was spent: no agent ran, no turn, no token.
        assert record.usage.turns is None and record.usage.input_tokens is None
        assert not (nop.sweep.runs / "nop" / record.workspace / "turns.json").exists()
        assert nop.sweep.items[f"preflight-fails[{host}]"].outcome == "error"
        record = nop.records[f"invariants-fail[{host}]"]
        assert record.outcome == "error" and "invariants.sh exited 1" in record.failures[0], record.failures
        assert "the probe broke" in record.failures[0]
        assert nop.sweep.items[f"invariants-fail[{host}]"].outcome == "error"


def test_a_family_is_collected_as_items_by_task_host_and_run(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess(*map(str, EXAMPLES), "--host=react,claude", "--palette-runs=2", "--co",
                                          "-q", "-k", "open or invoice", f"--rootdir={REPO}")
    listed = [line.split("::")[-1] for line in result.outlines if "::" in line]
    assert listed == [f"{task}[{host}-{run}]" for task in ("open-todos", "invoice-total")
                      for host in ("react", "claude") for run in (1, 2)]
    result = pytester.runpytest_inprocess(*map(str, EXAMPLES), "--host=react", "--co", "-q", "-m", "family",
                                          "-k", "todos", f"--rootdir={REPO}")
    assert [line.split("::")[-1] for line in result.outlines if "::" in line] == ["open-todos[react]"]


@pytest.mark.parametrize("breaks, said", [
    (lambda task: (task / "agent.task.md").unlink(), "agent.task.md: missing"),
    (lambda task: (task / "tests" / "dangling.test.js").symlink_to("nowhere.js"), "dangling.test.js"),
    (lambda task: shutil.rmtree(task / "tests" / "test") or (task / "tests" / "notes.txt").write_text("x"),
     "no check file"),
])
def test_a_broken_family_is_one_line_naming_the_file_before_any_agent_runs(
        pytester: pytest.Pytester, breaks: object, said: str) -> None:
    family = pytester.path / "todo-family"
    shutil.copytree(EXAMPLES[0], family, symlinks=True)
    task = family / "tasks" / "open-todos"
    breaks(task)  # type: ignore[operator]
    result = pytester.runpytest_inprocess(str(family), "--host=react", "--model=rehearsal:oracle",
                                          f"--palette-run-dir={pytester.path / 'runs'}")
    errors = [line for line in result.outlines if said in line]
    assert result.ret != 0 and errors, result.outlines
    assert str(task) in errors[0] and "Traceback" not in "\n".join(result.outlines)
    assert not any("SIGINT" in line for line in result.outlines)  # pytest's own stop is no Ctrl-C
    assert not (pytester.path / "runs").exists() or not any((pytester.path / "runs").rglob("turns.json"))


def test_the_oracle_skips_a_task_without_a_solution_with_the_reason(pytester: pytest.Pytester) -> None:
    family = pytester.path / "invoice-family"
    shutil.copytree(EXAMPLES[1], family, symlinks=True)
    shutil.rmtree(family / "tasks" / "invoice-total" / "solution")
    result = pytester.runpytest_inprocess(str(family), "--host=react", "--model=rehearsal:oracle", "-rs",
                                          f"--palette-run-dir={pytester.path / 'runs'}")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*oracle: the task has no solution/solve.sh*"])


def test_the_task_prompt_carries_the_supervisors_context() -> None:
    from pytest_palette.run.family_items import task_case

    task = TASKS["invoice-total"]
    assert task.supervisor is not None
    opening = task_case(task).opening
    assert opening.startswith(task.prompt.strip()) and task.supervisor.strip() in opening




def test_a_grader_that_changes_the_agents_folder_makes_the_item_an_error(pytester: pytest.Pytester) -> None:
    """Unconfined, a grader can write what the agent left: the folder is evidence, so the item says so."""
    root = pytester.path / "meddling-family"
    task = root / "tasks" / "meddles"
    (task / "hooks").mkdir(parents=True)
    (root / "workdir").mkdir()
    (root / "workdir" / "README.md").write_text("# notes\n")
    (task / "agent.task.md").write_text("Write notes.\n")
    (task / "hooks" / "invariants.sh").write_text(
        "#!/bin/sh\necho 'graded' >> \"$AGENT_CWD/README.md\"\n"
        "echo '{\"test\": \"ok\", \"pass\": true}' >&\"$RESULTS_FD\"\n")
    result = pytester.runpytest_inprocess(str(root), "--host=react", "--model=rehearsal:nop",
                                          "--palette-sandbox=none", f"--palette-run-dir={pytester.path / 'runs'}")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*the graders left the agent's folder changed: README.md changed*"])
