"""Task families on disk, without running a grader: the layout found and validated (one line naming the file for each
problem), the agent's folder staged in the seed's order, the `.env` files resolved and kept secret, the identity
hashes, the invariants' rows as checks, the `assert` command, and a hidden suite staged and restored byte for byte
(docs/families.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_palette.families import assertion, hidden_tests, identity
from pytest_palette.families.environment import load as load_environment
from pytest_palette.families.errors import FamilyError
from pytest_palette.families.hidden_tests import Staging, check_name, collect
from pytest_palette.families.layout import Family
from pytest_palette.families.rows import rows
from pytest_palette.families.staging import stage
from pytest_palette.results.checks import score
from pytest_palette.results.record import GATE, SCORED

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "todo-family"


def make_family(root: Path, files: dict[str, str]) -> Path:
    """A family from {relative path: text}; a text starting with "-> " is a link to what follows."""
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if text.startswith("-> "):
            path.symlink_to(text[3:])
        else:
            path.write_text(text, encoding="utf-8")
    return root


def snapshot(folder: Path) -> dict[str, tuple[str, object]]:
    """Every path below `folder`: a file's bytes, mode and mtime; a link's target; a folder's mode."""
    found: dict[str, tuple[str, object]] = {}
    for place, folders, files in os.walk(folder, followlinks=False):
        for name in folders + files:
            path = Path(place, name)
            status = path.lstat()
            relative = str(path.relative_to(folder))
            if path.is_symlink():
                found[relative] = ("link", os.readlink(path))
            elif path.is_dir():
                found[relative] = ("folder", status.st_mode)
            else:
                found[relative] = ("file", (path.read_bytes(), status.st_mode, status.st_mtime_ns))
    return found


# -- the layout ----------------------------------------------------------------------------------------


def test_the_example_family_loads_with_its_checks_support_and_solution() -> None:
    family = Family.load(EXAMPLE / "tasks" / "open-todos")  # found from inside it too
    assert family.root == EXAMPLE and family.task_ids() == ["open-todos"]
    task = family.task("open-todos")
    assert [(c.name, c.gate, c.runner, str(c.path)) for c in task.checks] == [
        ("baseline", True, "node", "test/baseline.gate.test.js"),
        ("no-dependencies", False, "node", "test/no-dependencies.test.js"),
        ("open-todos", False, "node", "test/open-todos.test.js"),
        ("summary", False, "node", "test/summary.test.js")]
    # The link in tests/ is staged as the family's file it names.
    assert {str(s.path): s.source for s in task.support} == {
        "test/helpers.js": EXAMPLE / "tasks/open-todos/tests/test/helpers.js",
        "test/todos.json": EXAMPLE / "hooks/todos.json"}
    assert task.solution == EXAMPLE / "tasks/open-todos/solution/solve.sh"
    assert task.hook("preflight.sh") == EXAMPLE / "hooks/preflight.sh"  # the family's
    assert task.hook("invariants.sh") == EXAMPLE / "tasks/open-todos/hooks/invariants.sh"  # the task's own
    assert task.prompt.startswith("Write `src/todos.js`")


@pytest.mark.parametrize(("name", "expected"), [
    ("get-todos.test.js", ("get-todos", False, "js")),
    ("baseline.gate.test.js", ("baseline", True, "js")),
    ("test_totals.py", ("totals", False, "python")),
    ("test_gate_imports.py", ("imports", True, "python")),
    ("helpers.js", None), (".test.js", None), ("conftest.py", None), ("test_.py", None),
])
def test_check_names_and_roles_come_from_the_file_name(name: str, expected: object) -> None:
    assert check_name(name) == expected


INVALID = [
    ("missing prompt", {"tasks/a/tests/a.test.js": ""}, "tasks/a/agent.task.md: missing"),
    ("no check files", {"tasks/a/agent.task.md": "x", "tasks/a/tests/helpers.js": ""},
     "tasks/a/tests: no check files"),
    ("dangling link", {"tasks/a/agent.task.md": "x", "tasks/a/tests/a.test.js": "",
                       "tasks/a/tests/b.test.js": "-> nowhere.js"}, "tasks/a/tests/b.test.js: a dangling link"),
    ("link out of the family", {"tasks/a/agent.task.md": "x", "tasks/a/tests/a.test.js": "",
                                "tasks/a/tests/data.json": "-> /etc/hostname"},
     "tasks/a/tests/data.json: a link that leaves the family"),
    ("duplicate names", {"tasks/a/agent.task.md": "x", "tasks/a/tests/one/a.test.js": "",
                         "tasks/a/tests/two/a.gate.test.js": ""}, "tasks/a/tests/two/a.gate.test.js: check name 'a'"),
    ("both runners", {"tasks/a/agent.task.md": "x",
                      "tasks/a/tests/a.test.js": "import {test} from 'bun:test';\nrequire('node:test');\n"},
     "tasks/a/tests/a.test.js: imports both node:test and bun:test"),
]


@pytest.mark.parametrize(("files", "said"), [case[1:] for case in INVALID], ids=[case[0] for case in INVALID])
def test_an_invalid_task_is_one_line_naming_the_file(tmp_path: Path, files: dict[str, str], said: str) -> None:
    family = Family.load(make_family(tmp_path / "family", files))
    with pytest.raises(FamilyError) as raised:
        family.tasks()
    message = str(raised.value)
    assert "\n" not in message and message.startswith(str(tmp_path / "family" / said.split(":")[0])), message
    assert said in message


def test_a_family_setting_is_checked_and_names_the_runner_of_checks_that_import_neither(tmp_path: Path) -> None:
    files = {"tasks/a/agent.task.md": "x", "tasks/a/tests/plain.test.js": "console.log(1)\n",
             "tasks/a/tests/n.test.js": "const test = require('node:test');\n",
             "tasks/a/tests/b.test.js": "import { test } from \"bun:test\";\n"}
    root = make_family(tmp_path / "family", files)
    assert {c.name: c.runner for c in Family.load(root).task("a").checks} == {"plain": "bun", "n": "node", "b": "bun"}
    (root / "family.yml").write_text("test_runner: node\n")
    assert {c.name: c.runner for c in Family.load(root).task("a").checks} == {"plain": "node", "n": "node",
                                                                              "b": "bun"}
    (root / "family.yml").write_text("test_runner: deno\n")
    with pytest.raises(FamilyError, match=r"family.yml: test_runner 'deno': choose node or bun$"):
        Family.load(root)
    with pytest.raises(FamilyError, match=r"not a task family"):
        Family.load(tmp_path)


# -- the agent's folder and its environment ------------------------------------------------------------


def test_the_agents_folder_is_laid_in_the_seeds_order_and_never_holds_what_grades_it(tmp_path: Path) -> None:
    root = make_family(tmp_path / "family", {
        "workdir/README.md": "family readme", "workdir/shared.txt": "family", "specs/a.md": "family spec",
        "specs/b.md": "family b", "tasks/t/agent.task.md": "do it", "tasks/t/workdir/shared.txt": "task",
        "tasks/t/specs/b.md": "task b", "tasks/t/hooks/invariants.sh": "exit 0",
        "tasks/t/tests/x.test.js": "", "tasks/t/solution/solve.sh": "true", "hooks/preflight.sh": "exit 0",
        ".env": "NAME=family\nSHARED=from-family\n", ".env.local": "API_TOKEN=family-secret-value\n",
        "tasks/t/.env": "SHARED=from-task\nTASK_ONLY=yes\n", "tasks/t/.env.local": "API_TOKEN=task-secret-value\n"})
    task = Family.load(root).task("t")
    work = tmp_path / "work"
    env = stage(task, work, {"NAME": "from-the-process"})
    assert {path: kind for path, (kind, _) in snapshot(work).items()} == {
        "README.md": "file", "shared.txt": "file", "specs": "folder", "specs/a.md": "file", "specs/b.md": "file",
        ".env": "file", ".env.local": "file"}
    assert (work / "shared.txt").read_text() == "task" and (work / "specs/b.md").read_text() == "task b"
    assert (work / "specs/a.md").read_text() == "family spec"
    # The process's environment wins; the family's files are read before the task's: the first value stands.
    assert env.values == {"NAME": "from-the-process", "SHARED": "from-family", "TASK_ONLY": "yes",
                          "API_TOKEN": "family-secret-value"}
    assert (work / ".env").read_text() == "NAME=from-the-process\nSHARED=from-family\nTASK_ONLY=yes\n"
    assert (work / ".env.local").read_text() == "API_TOKEN=family-secret-value\n"
    # Every value loaded is a secret, whatever its name.
    secrets = env.secrets({})
    assert secrets.scrub("from-family and family-secret-value") == "[redacted] and [redacted]"


def test_in_one_folder_the_local_file_is_read_first(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("TOKEN=committed-default\nPLAIN='a value # kept'\n")
    (tmp_path / ".env.local").write_text('export TOKEN="the-local-one"  \n# a comment\n')
    env = load_environment([tmp_path], {})
    assert env.values == {"TOKEN": "the-local-one", "PLAIN": "a value # kept"}
    assert env.files == {".env.local": ("TOKEN",), ".env": ("TOKEN", "PLAIN")}


def test_an_env_file_line_that_is_not_one_is_named(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("GOOD=1\nthis is not one\n")
    with pytest.raises(FamilyError, match=r"\.env:2: not a NAME=value line$"):
        load_environment([tmp_path], {})


# -- what identifies a run -----------------------------------------------------------------------------


def test_the_skill_set_hash_is_the_lockfiles_lf_normalised_and_the_claude_tree_has_its_own(tmp_path: Path) -> None:
    root = make_family(tmp_path / "family", {"apm.lock.yaml": "a: 1\nb: 2\n", ".claude/skills/s/SKILL.md": "one"})
    lf = identity.skill_set_hash(root)
    (root / "apm.lock.yaml").write_bytes(b"a: 1\r\nb: 2\r\n")
    assert identity.skill_set_hash(root) == lf
    assert lf == "sha256:" + subprocess.run(["sha256sum"], input=b"a: 1\nb: 2\n", capture_output=True,
                                            check=True).stdout.split()[0].decode()
    before = identity.skills_hash(root)
    (root / ".claude/skills/s/SKILL.md").write_text("two")  # an edited .claude/ with a stale lockfile
    assert identity.skills_hash(root) != before and identity.skill_set_hash(root) == lf
    assert identity.skill_set_hash(tmp_path) == "" and identity.skills_hash(tmp_path) == ""
    # Outside git, the revision is the tree hash of the family's files.
    assert identity.revision(root) == identity.tree_hash(root)
    assert identity.revision(EXAMPLE).startswith("git:")


def test_skill_packs_apm_yml_names_that_are_not_staged_are_named(tmp_path: Path) -> None:
    root = make_family(tmp_path / "family", {
        "apm.yml": "name: f\ndependencies:\n  apm:\n    - acme/skills/testing#v1\n    - acme/review\n"
                   "    - acme/coder@2\n", ".claude/skills/testing/SKILL.md": "x", ".claude/agents/coder.md": "x"})
    assert identity.unstaged_packs(root) == ["acme/review"]
    (root / "apm.yml").write_text("dependencies:\n  apm: acme/review\n")
    with pytest.raises(FamilyError, match=r"apm.yml: dependencies.apm is not a list of packs"):
        identity.unstaged_packs(root)
    assert identity.unstaged_packs(EXAMPLE) == []


# -- the invariants' rows ------------------------------------------------------------------------------


def test_rows_are_gates_scored_checks_and_diagnostics_and_a_malformed_one_fails_in_its_place() -> None:
    found = rows("\n".join([
        '{"test": "present", "pass": true, "gate": true}',
        '{"test": "routes", "pass": false, "message": "no GET /todos"}',
        '{"test": "heavy", "pass": true, "weight": 3}',
        '{"test": "note", "weight": 0}',
        'not json at all',
        '{"test": "both", "pass": true, "gate": true, "weight": 2}',
        '',
        '{"test": "no-pass"}',
    ]))
    shown = [(r.check.name, r.check.role, r.check.weight, r.check.passed, r.malformed) for r in found]
    assert shown == [("present", GATE, 1.0, True, False), ("routes", SCORED, 1.0, False, False),
                     ("heavy", SCORED, 3.0, True, False), ("note", SCORED, 0.0, None, False),
                     ("invariants.sh row 5", SCORED, 1.0, False, True), ("both", SCORED, 1.0, False, True),
                     ("no-pass", SCORED, 1.0, False, True)]
    assert found[1].check.words == "no GET /todos"
    assert found[4].check.words == "malformed: not a JSON row: not json at all"
    assert "is both a gate and weighted" in found[5].check.words
    # The score counts a malformed row as a failing scored check of weight 1: (3) / (1 + 3 + 1 + 1 + 1).
    assert score(r.check for r in found) == round(3 / 7, 4)


def test_the_assert_command_writes_the_seeds_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "api.js").write_text("app.get('/todos')\nconst PORT = 1\n")

    def row(*args: str, name: str = "assert") -> object:
        assert assertion.main([name, *args]) == 0
        return json.loads(capsys.readouterr().out)

    api = str(tmp_path / "api.js")
    assert row("present", "--gate", "--exists", api) == {"test": "present", "pass": True, "gate": True}
    assert row("route", "--grep", r"get\('/todos", api) == {"test": "route", "pass": True}
    assert row("no-debug", "--not", "--weight", "2", "--grep", "debugger", api) == \
        {"test": "no-debug", "pass": True, "weight": 2}
    assert row("readme", "--exists", str(tmp_path / "README.md")) == \
        {"test": "readme", "pass": False, "message": f"{tmp_path}/README.md does not exist"}
    assert row("assert", "port", "--message", "say PORT", "--grep", "PORT", api, name="gemba-trace") == \
        {"test": "port", "pass": True, "message": "say PORT"}
    assert assertion.main(["assert", "--gate"]) == 2
    assert "a check name comes first" in capsys.readouterr().err


# -- the hidden suite staged and taken away ------------------------------------------------------------


def test_staging_backs_up_what_the_agent_left_and_restores_the_folder_byte_for_byte(tmp_path: Path) -> None:
    family = make_family(tmp_path / "family", {
        "tasks/t/agent.task.md": "x", "tasks/t/tests/test/a.test.js": "hidden a",
        "tasks/t/tests/test/helpers.js": "hidden helpers", "tasks/t/tests/lib/deep/b.test.js": "hidden b",
        "tasks/t/tests/c.test.js": "hidden c", "data.json": "[1]",
        "tasks/t/tests/test/data.json": "-> ../../../../data.json"})
    task = Family.load(family).task("t")
    work = tmp_path / "work"
    (work / "test").mkdir(parents=True)
    (work / "test" / "a.test.js").write_text("the agent's own a")  # overwritten by the hidden one
    os.utime(work / "test" / "a.test.js", ns=(1, 1_000_000_000))
    (work / "elsewhere").mkdir()
    (work / "lib").symlink_to("elsewhere")  # a link where a staged folder goes: never written through
    (work / "c.test.js").mkdir()  # a folder where a staged file goes
    (work / "c.test.js" / "inside").write_text("kept")
    before = snapshot(work)
    files = [(c.path, c.source) for c in task.checks] + [(s.path, s.source) for s in task.support]
    backups = tmp_path / "backups"
    backups.mkdir()
    with Staging(work, files, backups) as staged:
        assert (work / "test/a.test.js").read_text() == "hidden a"
        assert (work / "lib/deep/b.test.js").read_text() == "hidden b" and not (work / "lib").is_symlink()
        assert (work / "test/data.json").read_text() == "[1]" and not (work / "test/data.json").is_symlink()
        assert list((work / "elsewhere").iterdir()) == []
        (work / "made-by-a-check.log").write_text("noise")  # what a check leaves is taken away too
        (work / "test" / "cache").mkdir()
        assert sorted(map(str, staged.backed_up)) == ["c.test.js", "lib", "test/a.test.js"]
    assert snapshot(work) == before


def test_a_missing_runner_is_named_and_a_check_runs_under_its_own(tmp_path: Path) -> None:
    family = make_family(tmp_path / "family", {"tasks/t/agent.task.md": "x",
                                                "tasks/t/tests/b.test.js": "import { test } from 'bun:test';\n",
                                                "tasks/t/tests/test_py.py": "def test_x(): pass\n"})
    checks, _ = collect(family / "tasks/t/tests", family)
    by_name = {c.name: c for c in checks}
    assert hidden_tests.argv(by_name["b"], "/x/bun") == ["/x/bun", "test", "./b.test.js"]
    assert hidden_tests.argv(by_name["py"], "/x/python")[:3] == ["/x/python", "-m", "pytest"]
    said = hidden_tests.missing_runner(by_name["b"])
    assert said.startswith(f"{family}/tasks/t/tests/b.test.js: written for bun:test") and "bun is not installed" in said
    assert shutil.which("node") is None or hidden_tests.runner_program("node") is not None


def test_grade_prints_each_check_with_its_source_role_and_words_then_the_verdict() -> None:
    from pytest_palette.commands.grade import lines
    from pytest_palette.families.grading import Grade, Graded
    from pytest_palette.results.record import Check

    def check(name: str, role: str, weight: float, passed: bool | None, words: str = "") -> Check:
        return Check(name=name, role=role, weight=weight, passed=passed,  # type: ignore[arg-type]
                     credit=1.0 if passed else 0.0, words=words)

    graded = Grade("t", (Graded("invariants", check("present", GATE, 1, True)),
                         Graded("invariants", check("both", SCORED, 2, False, "malformed: …"), malformed=True),
                         Graded("invariants", check("note", SCORED, 0, None)),
                         Graded("tests", check("sum", SCORED, 1, False, "\n".join(f"line {n}" for n in range(20))))),
                   backed_up=("test/sum.test.js",), sandbox="bubblewrap")
    assert graded.verdict == "fail" and graded.score == 0.0 and graded.malformed == 1
    assert lines(graded) == [
        "✓ present (invariants, gate)", "✗ both (invariants, weight 2, malformed)", "    malformed: …",
        "· note (invariants, diagnostic)", "✗ sum (tests, weight 1)", *(f"    line {n}" for n in range(12)),
        "    … (8 more lines: --json has them all)", "backed up and restored: test/sum.test.js",
        "t: fail · score 0 · graders bubblewrap"]
    errored = Grade("t", preflight_error="hooks/preflight.sh exited 1: down", sandbox="unconfined")
    assert errored.verdict == "error" and errored.score is None
    assert lines(errored)[-2:] == ["preflight error: hooks/preflight.sh exited 1: down",
                                   "t: error · score — · graders unconfined"]


def test_a_checks_words_keep_its_own_frames_and_drop_the_runtimes() -> None:
    said = hidden_tests.words("✖ summary counts (2ms)\n  AssertionError: Expected values\n"
                 "      at TestContext.<anonymous> (/work/test/summary.test.js:8:10)\n"
                 "      at process.processTicksAndRejections (node:internal/process/task_queues:95:5)\n"
                 "      at async Test.run (node:internal/test_runner/test:797:9)\n  }")
    assert said == ("✖ summary counts (2ms)\n  AssertionError: Expected values\n"
                    "      at TestContext.<anonymous> (/work/test/summary.test.js:8:10)\n  }")
