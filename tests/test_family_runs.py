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

import msgspec
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


#: A secret of the machine's own `.env.local`, in partial's copy of the todo family: rendered into the agent's folder
#: as the agent needs it, and in no file of the run or its site once the item is over.
LOCAL_SECRET = "local-token-5f1e0c9a7b"


def with_local_secret(folder: Path) -> Path:
    root = shutil.copytree(EXAMPLES[0], folder / EXAMPLES[0].name, symlinks=True)
    (root / ".env.local").write_text(f"TODO_TOKEN={LOCAL_SECRET}\n")
    return root


def family_run(sweeps: Sweeps, agent: str, *extra: str) -> FamilyRun:
    def make(folder: Path) -> Sweep:
        families = [str(root) for root in EXAMPLES]
        if agent == "nop":
            families.append(str(broken_family(folder)))
        if agent == "partial":
            families[0] = str(with_local_secret(folder))
        return run_session(folder, [*families, f"--host={','.join(HOSTS)}", f"--model=rehearsal:{agent}",
                                    f"--palette-run-id={agent}", f"--rootdir={REPO}", *extra])

    sweep = sweeps.shared(f"families-{agent}", make)
    ledger = sweep.runs / agent / "results.jsonl"
    assert ledger.is_file(), sweep.stdout[-3000:] + sweep.stderr[-3000:]
    return FamilyRun(sweep, {f"{r.case}[{r.host}]": r for r in read(ledger)})


#: The todo family's agent profile the oracle's session names (`--palette-agent-profile`), and a line of it.
PROFILE, PROFILE_LINE = "careful", "You are a careful engineer."


@pytest.fixture(scope="module")
def oracle(sweeps: Sweeps) -> FamilyRun:
    # Every model call recorded (--palette-record): the profile is then seen where each host's model reads it.
    # The judge gate of open-todos (its judge.task.md) graded by the rehearsal judge: --palette-validity.
    return family_run(sweeps, "oracle", f"--palette-agent-profile={PROFILE}", "--palette-record",
                      "--palette-validity=rehearsal")


@pytest.fixture(scope="module")
def nop(sweeps: Sweeps) -> FamilyRun:
    return family_run(sweeps, "nop", "--palette-record")


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
            assert len(family.sources) == len(names)
            assert set(family.sources) == {"invariants", "tests", *(["judge"] if task.judge else [])}
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


def test_no_value_of_the_familys_env_files_stays_in_the_run_or_its_site(partial: FamilyRun, tmp_path: Path) -> None:
    for host, record in partial.of("open-todos"):
        assert record.family is not None, host
        assert any(path.endswith("/.env.local") for path in record.family.redacted), host
        assert not record.family.unredacted
    assert main(["view", str(partial.sweep.runs / "partial"), "--out", str(tmp_path / "site")]) == 0
    looked = 0
    # The run, its JUnit report and its site (the sweep's folder holds the family's copy too, the secret's home).
    files = [*partial.sweep.runs.rglob("*"), partial.sweep.folder / "junit.xml", *(tmp_path / "site").rglob("*")]
    for path in files:
        if path.is_file() and not path.is_symlink():
            looked += 1
            assert LOCAL_SECRET.encode() not in path.read_bytes(), path
    assert looked > 50 and LOCAL_SECRET not in partial.sweep.stdout + partial.sweep.stderr
    # The agent had it: the rendered file held it until the item was over (the redaction names the file).
    env_local = partial.sweep.runs / "partial" / "react" / "open-todos" / "work" / ".env.local"
    assert env_local.read_text() == "TODO_TOKEN=[redacted]\n"


def snooped(run: Path, host: str) -> str:
    [found] = (run / host / "open-todos" / "work").rglob("snooped.txt")  # cuga's agent works in a folder of its own
    return found.read_text()


def test_a_hostile_agent_finds_no_hook_test_or_solution_on_any_host(sweeps: Sweeps, pytester: pytest.Pytester) -> None:
    """`rehearsal:snoops` knows where the task's hooks/, tests/ and solution/ are, lists and reads them there, and
    looks for a family's files by name everywhere it can read: in the sandbox, nothing."""
    sweep = sweeps.shared("families-snoops", lambda folder: run_session(
        folder, [str(EXAMPLES[0]), f"--host={','.join(HOSTS)}", "--model=rehearsal:snoops",
                 "--palette-run-id=snoops", f"--rootdir={REPO}", "--palette-validity=rehearsal"]))
    records = {r.host: r for r in read(sweep.runs / "snoops" / "results.jsonl")}
    for host in HOSTS:
        assert sweep.items[f"open-todos[{host}]"].outcome == "fail"  # it did the task no good, and was graded
        assert snooped(sweep.runs / "snoops", host) == "", host
        # The judge gate saw it reach for the graders: a failure, in its words, naming the command.
        [judge] = [check for check in records[host].judged.checks if check.name == "judge"]
        assert judge.role == GATE and judge.passed is False, (host, judge.words)
        assert judge.words.startswith("failure: 1 command(s) reached for how the task is graded"), judge.words
        assert "rehearsal judge" in judge.words and records[host].family.sources[-1] == "judge"
    # The same agent unconfined finds them all: what it looks for is there to find.
    pytester.runpytest_inprocess(str(EXAMPLES[0]), "--host=react", "--model=rehearsal:snoops",
                                 "--palette-sandbox=none", "--palette-run-id=loose",
                                 f"--palette-run-dir={pytester.path / 'runs'}")
    found = snooped(pytester.path / "runs" / "loose", "react")
    solution = (TASKS["open-todos"].folder / "solution" / "solve.sh").read_text()
    assert solution in found and "invariants.sh" in found and "summary.test.js" in found


def test_report_gives_each_task_the_seeds_numbers_checked_by_hand(
        oracle: FamilyRun, partial: FamilyRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One task run three times — the oracle's pass and partial's fail twice, as one run of one host — reported."""
    passed, failed = oracle.records["open-todos[react]"], partial.records["open-todos[react]"]
    s = failed.judged.score
    assert passed.judged.score == 1.0 and s is not None and 0 < s < 1
    mixed = [msgspec.structs.replace(record, run_id="mixed", run_index=index, terms=passed.terms)
             for index, record in enumerate((passed, failed, failed), 1)]
    (tmp_path / "mixed").mkdir()
    (tmp_path / "mixed" / "results.jsonl").write_bytes(b"".join(r.to_json() + b"\n" for r in mixed))
    assert main(["report", str(tmp_path / "mixed"), "--json", str(tmp_path / "report.json")]) == 0
    markdown = capsys.readouterr().out
    [task] = json.loads((tmp_path / "report.json").read_text())["tasks"]
    # By hand: n = 3 runs, c = 1 passed. pass@k = 1 − C(n−c, k)/C(n, k): 1 − 2/3, 1 − 1/3, 1. The score is the
    # mean; score@k the expected best of k runs drawn from {1, s, s}: the mean, then (1 + 1 + s)/3 over the three
    # pairs, then 1.
    assert (task["task"], task["host"], task["passes"], task["n"]) == ("open-todos", "react", 1, 3)
    assert task["pass_at_k"] == pytest.approx({"1": 1 / 3, "2": 2 / 3, "3": 1.0})
    assert task["score"] == pytest.approx((1 + 2 * s) / 3)
    assert task["score_at_k"] == pytest.approx({"1": (1 + 2 * s) / 3, "2": (2 + s) / 3, "3": 1.0})
    held = {check["name"]: (check["held"], check["judged"]) for check in task["checks"]}
    assert held["summary"] == (1, 3) and held["baseline"] == (3, 3)
    assert f"| todo-family/open-todos | react | 1/3 | 33.3% | 66.7% | 100.0% | {(1 + 2 * s) / 3:.2f} |" in markdown
    assert "summary counts the open and the done todos" in markdown  # the failing test's own words


def test_an_agent_profile_goes_into_the_system_prompt_on_every_host(oracle: FamilyRun, nop: FamilyRun) -> None:
    """`--palette-agent-profile careful`: `.claude/agents/careful.md`'s instructions, as each host takes a system
    prompt (react's own, CUGA's special instructions, the claude CLI's --append-system-prompt), reach the model."""
    assert PROFILE_LINE in (EXAMPLES[0] / ".claude" / "agents" / f"{PROFILE}.md").read_text()
    for run, profiled in ((oracle, True), (nop, False)):
        for host, record in run.of("open-todos"):
            calls = (run.sweep.runs / record.run_id / record.workspace / "cassette.jsonl").read_text()
            assert calls and (PROFILE_LINE in calls) is profiled, (host, profiled)


def test_a_profile_the_family_has_not_is_one_line_and_a_case_file_refuses_one(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess(str(EXAMPLES[0]), "--host=react", "--palette-agent-profile=hasty", "--co")
    result.stdout.fnmatch_lines(["*.claude/agents/hasty.md: no such agent profile (--palette-agent-profile hasty; "
                                 "the family has careful, judge)*"])
    assert result.ret != 0
    (pytester.path / "cases.yaml").write_text("- name: hello\n  request: Say hello.\n  expect: {skill: false}\n")
    result = pytester.runpytest_inprocess(str(pytester.path / "cases.yaml"), "--palette-agent-profile=careful",
                                          "--co")
    result.stdout.fnmatch_lines(["*cases.yaml: --palette-agent-profile names a task family's agent profile; a "
                                 "case file has none*"])


def test_the_judge_gate_passes_the_oracle_and_leaves_its_score(oracle: FamilyRun) -> None:
    """A task with judge.task.md gets the judge gate under --palette-validity; one without gets none. A success
    never changes the mechanical score."""
    for task_id, task in TASKS.items():
        for host, record in oracle.of(task_id):
            judged = [check for check in record.judged.checks if check.name == "judge"]
            if task.judge is None:
                assert not judged, host
                continue
            [judge] = judged
            assert judge.role == GATE and judge.passed is True and judge.words.startswith("success"), host
            assert record.judged.score == 1.0 and record.outcome == "pass"


def test_one_skill_set_hash_over_two_claude_trees_is_named_in_report_and_compare(
        oracle: FamilyRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The seed's caveat closed: an edited .claude/ under a stale apm.lock.yaml keeps the skill-set hash, and the
    hash of the staged tree says the skills changed."""
    record = oracle.records["open-todos[react]"]
    assert record.family is not None
    edited = msgspec.structs.replace(record.family, skills_hash="sha256:" + "e" * 64)
    for run_id, family in (("before", record.family), ("after", edited)):
        (tmp_path / run_id).mkdir()
        (tmp_path / run_id / "results.jsonl").write_bytes(
            msgspec.structs.replace(record, run_id=run_id, family=family).to_json() + b"\n")
    assert main(["report", str(tmp_path / "before")]) == 0
    assert "stale lockfile" not in capsys.readouterr().out  # one tree: nothing to say
    assert main(["report", str(tmp_path / "before"), str(tmp_path / "after")]) == 0
    said = capsys.readouterr().out
    assert "**A stale lockfile.** todo-family: the skill-set hash sha256:" in said
    assert "covers 2 different .claude/ trees" in said and "in after" in said and "in before" in said
    assert main(["compare", str(tmp_path / "before"), str(tmp_path / "after")]) in (0, 1)
    said = capsys.readouterr().out
    assert "a stale lockfile: todo-family" in said and "same skill hash" not in said


def test_every_skill_of_a_family_is_offered_on_every_host(oracle: FamilyRun) -> None:
    """The invoice family's two skills, each where its host offers skills: react's system prompt, CUGA's skills
    folder (its discover_skills found both, or the item would be an ERROR), the CLI's project skills (its init
    listed both, ditto) — each one's description reaches the model."""
    from pytest_palette.run.family_items import family_skills

    cards = family_skills(EXAMPLES[1])
    assert len(cards) == 2
    for host, record in oracle.of("invoice-total"):
        calls = (oracle.sweep.runs / record.run_id / record.workspace / "cassette.jsonl").read_text()
        for card in cards:
            assert card.description[:60] in calls, (host, card.name)
