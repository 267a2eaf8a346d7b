"""No value of a secret in any message (issue 36, part 4): a case file's paths are named as written, never expanded,
no pasted file may hold a secret, and every line that leaves a run is scrubbed of the session's secrets — the
ledger, JUnit, the terminal, the step summary, the site and every `palette-bench` command's output."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from ledger_records import as_record, record

from pytest_palette.arena.sandbox import Sandbox
from pytest_palette.cases import CaseFileError, load_cases
from pytest_palette.commands import main
from pytest_palette.hosts.base import secret_values
from pytest_palette.models import PROVIDER_KEYS
from pytest_palette.results import step_summary
from pytest_palette.results.ledger import append
from pytest_palette.results.record import from_json
from pytest_palette.results.redaction import MIN_LENGTH, REDACTED, Secrets, is_secret
from pytest_palette.run.credentials import Credentials
from pytest_palette.run.progress import Board
from pytest_palette.run.scrubbing import scrub
from pytest_palette.site.build import write as write_site

#: Fake values, each long enough to be a secret, with nothing else in the run that could hold them.
KEY = "sk-ant-fake-key-36c0ffee"
TOKEN = "ghp_fakeToken36deadbeef"
FILE_KEY = "fake-rits-key-36abcdef"
#: A credentials file's variable whose name says nothing: a secret because the file holds it.
FILE_VALUE = "fake-file-value-36feed01"
#: JSON and HTML write these characters otherwise: a secret is found in each form.
ODD = 'fake"odd\\value<&>36'
VALUES = (KEY, TOKEN, FILE_KEY, FILE_VALUE)


def credentials(path: Path) -> Credentials:
    return Credentials(path, (("RITS_API_KEY", FILE_KEY), ("CORP_SERVICE", FILE_VALUE),
                              ("PALETTE_BENCH_INPUTS", "/home/me/palette-benchmark-inputs")))


# ------------------------------------------------------------------------------------------------ the rule


def test_which_variables_hold_secrets_is_one_rule_by_name() -> None:
    provider_keys = {name for names in PROVIDER_KEYS.values() for name in names}
    for name in (*provider_keys, "ANTHROPIC_AUTH_TOKEN", "WATSONX_APIKEY", "RITS_API_KEY", "GITHUB_TOKEN",
                 "GH_TOKEN", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "PGPASSWORD", "db_password",
                 "CLIENT_SECRET", "GOOGLE_APPLICATION_CREDENTIALS", "ANTHROPIC_CUSTOM_HEADERS"):
        assert is_secret(name), name
    for name in ("PATH", "HOME", "WATSONX_URL", "WATSONX_PROJECT_ID", "PALETTE_HOME", "PALETTE_BENCH_INPUTS",
                 "KEYBOARD", "TOKENIZERS_PARALLELISM"):
        assert not is_secret(name), name


def test_the_secrets_of_a_session_its_environment_and_its_credentials_file(tmp_path: Path) -> None:
    environ = {"ANTHROPIC_API_KEY": KEY, "GITHUB_TOKEN": TOKEN, "OPENAI_API_KEY": "none", "HOME": "/home/someone",
               "ANTHROPIC_CUSTOM_HEADERS": "X-Gateway-Key: gateway-key-36a1\nX-Team: ops", "PALETTE_API_KEY": ODD}
    secrets = Secrets.of(environ, credentials(tmp_path / "env").secrets())
    assert secrets.variables == ["ANTHROPIC_API_KEY", "ANTHROPIC_CUSTOM_HEADERS", "CORP_SERVICE", "GITHUB_TOKEN",
                                 "PALETTE_API_KEY", "RITS_API_KEY"]
    plain = "none /home/someone /home/me/palette-benchmark-inputs"
    said = f"{KEY} {TOKEN} {FILE_KEY} {FILE_VALUE} gateway-key-36a1 {plain}"
    assert secrets.scrub(said) == " ".join([REDACTED] * 5 + [plain])
    # Under MIN_LENGTH a value is a placeholder: taking out every "none" would garble, and tell, more than it hides.
    assert len("none") < MIN_LENGTH and secrets.found("OPENAI_API_KEY=none") is None
    assert secrets.found(f"at /nonexistent/{KEY}/notes.md") == "ANTHROPIC_API_KEY"
    # Found as written, as JSON writes it and as HTML does, and never shown by the object itself.
    assert secrets.scrub(json.dumps({"k": ODD})) == json.dumps({"k": REDACTED})
    as_html = "fake&quot;odd\\value&lt;&amp;&gt;36"
    assert secrets.scrub(f"<td>{as_html}</td>") == f"<td>{REDACTED}</td>"
    assert KEY not in repr(secrets) and FILE_VALUE not in repr(secrets)
    # A secret that holds another goes out whole.
    both = Secrets.of({"A_TOKEN": "abcdefgh", "B_TOKEN": "abcdefgh-and-more"})
    assert both.scrub("x abcdefgh-and-more y abcdefgh") == f"x {REDACTED} y {REDACTED}"
    assert Secrets().scrub(KEY) == KEY and Secrets.of({}).found(KEY) is None


def test_the_hosts_redact_by_the_same_rule(tmp_path: Path) -> None:
    env = {"WATSONX_APIKEY": KEY, "GITHUB_TOKEN": TOKEN, "HOME": "/root", "CORP_SERVICE": FILE_VALUE}
    sandbox = Sandbox(tmp_path, env, "none", withheld=("CORP_SERVICE",))  # a credentials file's, withheld
    assert sorted(secret_values(env, sandbox)) == sorted([KEY, TOKEN, FILE_VALUE])


def test_json_stays_json_whatever_a_secrets_characters() -> None:
    secrets = Secrets.of({"ODD_TOKEN": ODD})
    line = json.dumps({"failures": [f"no file at /x/{ODD}/y", "fine"], ODD: 1}).encode()
    scrubbed = secrets.scrub_json(line)
    assert json.loads(scrubbed) == {"failures": [f"no file at /x/{REDACTED}/y", "fine"], REDACTED: 1}
    clean = b'{"a": "nothing to take out"}'
    assert secrets.scrub_json(clean) is clean


# ------------------------------------------------------------------------------------------ the first wall


def problem_of(tmp_path: Path, where: str, env: dict[str, str]) -> str:
    path = tmp_path / "cases" / "c.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(f"- name: a\n  covers: x\n  request: r\n  context_file: {where!r}\n", encoding="utf-8")
    [case] = load_cases(path, env=env)
    assert case.problem is not None and case.context == ""
    return case.problem


def documents_error(tmp_path: Path, pattern: str, env: dict[str, str]) -> str:
    path = tmp_path / "cases" / "d.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(f"- documents: {pattern!r}\n  covers: x\n  request: Turn this into a deck\n", encoding="utf-8")
    with pytest.raises(CaseFileError) as raised:
        load_cases(path, env=env)
    return str(raised.value)


def test_every_refusal_names_a_case_files_path_as_written_never_its_expansion(tmp_path: Path) -> None:
    # A folder named after a key: every path into it expands to the key.
    folder = tmp_path / KEY
    folder.mkdir()
    os.mkfifo(folder / "pipe.md")
    (folder / "environ.md").symlink_to("/proc/self/environ")
    (folder / "big.md").write_bytes(b"x" * 2_000_000)
    (folder / "latin.md").write_bytes(b"caf\xe9\n")
    (folder / "sub").mkdir()
    env = {"ANTHROPIC_API_KEY": KEY, "HERE": str(folder)}
    for written, said in [
            ("/nonexistent/${ANTHROPIC_API_KEY}/notes.md", "no file at /nonexistent/${ANTHROPIC_API_KEY}/notes.md"),
            ("${HERE}/pipe.md", "${HERE}/pipe.md is a FIFO: a case file reads regular files only"),
            ("${HERE}/environ.md", "${HERE}/environ.md is under /proc: a case file reads regular files only"),
            ("${HERE}/sub", "${HERE}/sub is a folder: a case file reads regular files only"),
            ("${HERE}/big.md", "${HERE}/big.md is 2,000,000 bytes, more than the 1,000,000 allowed"),
            ("${HERE}/latin.md", "${HERE}/latin.md is not UTF-8 text")]:
        problem = problem_of(tmp_path, written, env)
        assert said in problem and KEY not in problem, problem
    # A corpus glob: the folder as written, the file by its name; matching nothing names the glob alone.
    said = documents_error(tmp_path, "${HERE}/pipe*", env)
    assert "the document 'pipe.md': ${HERE}/pipe.md is a FIFO" in said and KEY not in said, said
    said = documents_error(tmp_path, "${HERE}/environ*", env)
    assert "${HERE}/environ.md is under /proc" in said and KEY not in said, said
    path = tmp_path / "cases" / "none.yaml"
    path.write_text('- documents: "/nonexistent/${ANTHROPIC_API_KEY}/*.md"\n  covers: x\n  request: r\n')
    [placeholder] = load_cases(path, env=env)
    assert placeholder.problem is not None and KEY not in placeholder.problem
    assert placeholder.problem.endswith("documents '/nonexistent/${ANTHROPIC_API_KEY}/*.md' matched no file")


def test_no_pasted_file_may_hold_a_secret(tmp_path: Path) -> None:
    env_file = tmp_path / "env"
    env_file.write_text(f"RITS_API_KEY={FILE_KEY}\nCORP_SERVICE={FILE_VALUE}\n")
    secrets = Secrets.of({}, credentials(env_file).secrets())
    path = tmp_path / "cases" / "c.yaml"
    path.parent.mkdir()
    path.write_text(f"- name: a\n  covers: x\n  request: r\n  context_file: '{env_file}'\n"
                    f"- name: b\n  covers: x\n  request: r\n  context_file: '${{PALETTE_ENV}}'\n")
    first, second = load_cases(path, env={"PALETTE_ENV": str(env_file)}, secrets=secrets)
    assert first.problem is not None and second.problem is not None and first.context == second.context == ""
    assert first.problem.endswith(f"{env_file} holds the value of $RITS_API_KEY: pasted material never carries a "
                                  "secret")
    assert "${PALETTE_ENV} holds the value of $RITS_API_KEY" in second.problem
    # A corpus document too, and a document whose very name is a key's value.
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "notes.md").write_text(f"# Notes\n- {FILE_KEY}\n")
    said = documents_error(tmp_path, str(tmp_path / "corpus" / "*.md"), {"RITS_API_KEY": FILE_KEY})
    assert "the document 'notes.md'" in said and "holds the value of $RITS_API_KEY" in said
    (tmp_path / "corpus" / "notes.md").unlink()
    (tmp_path / "corpus" / f"{FILE_KEY}.md").write_text("# Fine\n- a point\n")
    said = documents_error(tmp_path, str(tmp_path / "corpus" / "*.md"), {"RITS_API_KEY": FILE_KEY})
    assert "a document's file name holds the value of $RITS_API_KEY: rename it" in said and FILE_KEY not in said


# ----------------------------------------------------------------------------------------- the second wall


def test_the_ledger_holds_no_secret_and_still_a_record(tmp_path: Path) -> None:
    secrets = Secrets.of({"ANTHROPIC_API_KEY": KEY, "ODD_TOKEN": ODD})
    failed = as_record(record(outcome="fail", failures=[f"no file at /x/{KEY}/notes.md", f"quoted {ODD}"]))
    line = append(tmp_path / "results.jsonl", failed, secrets)
    assert line == (tmp_path / "results.jsonl").read_bytes().rstrip(b"\n")
    assert KEY.encode() not in line and b"odd" not in line
    assert from_json(line).failures == (f"no file at /x/{REDACTED}/notes.md", f"quoted {REDACTED}")


def test_a_reports_text_crash_line_output_and_properties_are_scrubbed() -> None:
    secrets = Secrets.of({"GITHUB_TOKEN": TOKEN})
    try:
        raise RuntimeError(f"the harness failed with {TOKEN}")
    except RuntimeError as error:
        traceback = pytest.ExceptionInfo.from_exception(error).getrepr()
    reports = [pytest.TestReport("t", ("t.py", 1, "t"), {}, outcome, longrepr, "call",
                                 sections=[("Captured stdout call", f"printed {TOKEN}")],
                                 user_properties=[("failures", f'["{TOKEN}"]'), ("seconds", 1.5)])
               for outcome, longrepr in (("failed", traceback), ("failed", f"said {TOKEN}"),
                                         ("skipped", ("t.py", 1, f"Skipped: {TOKEN}")))]
    kept = pytest.TestReport("t", ("t.py", 1, "t"), {}, "failed", "nothing secret", "call")
    for report in [*reports, kept]:
        scrub(report, secrets)
    for report in reports:
        assert TOKEN not in str(report.longrepr) and REDACTED in str(report.longrepr)
        assert report.sections == [("Captured stdout call", f"printed {REDACTED}")]
        assert report.user_properties == [("failures", f'["{REDACTED}"]'), ("seconds", 1.5)]
    assert reports[0].longrepr.reprcrash.message == f"RuntimeError: the harness failed with {REDACTED}"
    assert kept.longrepr == "nothing secret"


def test_the_step_summary_and_the_progress_lines_hold_no_secret(tmp_path: Path) -> None:
    secrets = Secrets.of({"GITHUB_TOKEN": TOKEN})
    failed = as_record(record(outcome="fail", failures=[f"the deck lacks {TOKEN}"]))
    summary = tmp_path / "summary.md"
    step_summary.append([failed], ["react"], print, {"GITHUB_STEP_SUMMARY": str(summary)}, secrets)
    assert f"the deck lacks {REDACTED}" in summary.read_text() and TOKEN not in summary.read_text()
    said: list[str] = []
    board = Board(5, tmp_path, secrets)
    board._write = said.append  # what pytest_sessionstart sets to the terminal's
    board.send({"item": "x[react]", "kind": "start", "id": 1, "command": f"curl -H 'x: {TOKEN}' h", "at": 100.0})
    board.send({"item": "x[react]", "kind": "end", "id": 1, "at": 107.0})
    assert said == [f"  x[react] · ran curl -H 'x: {REDACTED}' h (7 s)"]


def test_every_command_and_every_file_it_writes_holds_no_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A ledger written before the wall (or elsewhere) holds a key: reading it, no command says it."""
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    run = tmp_path / "runs" / "20261130-120000"
    failed = as_record(record(outcome="fail", failures=[f"the deck lacks {TOKEN}"]))
    append(run / "results.jsonl", failed, Secrets())  # as an old ledger holds it
    assert TOKEN in (run / "results.jsonl").read_text()
    for argv in (["report", str(run), "--out", str(tmp_path / "out" / "report.md"), "--json",
                  str(tmp_path / "out" / "report.json")], ["report", str(run)], ["show", str(run)],
                 ["view", str(run), "--out", str(tmp_path / "out" / "site")]):
        main(argv)
    printed = capsys.readouterr()
    assert "the deck lacks" in printed.out and TOKEN not in printed.out + printed.err
    files = [path for path in (tmp_path / "out").rglob("*") if path.is_file()]
    assert {path.name for path in files} >= {"report.md", "report.json", "index.html"}
    for path in files:
        assert TOKEN.encode() not in path.read_bytes(), path
    json.loads((tmp_path / "out" / "report.json").read_text())
    page = next(path for path in files if path.suffix == ".html" and "items" in path.parts).read_text()
    assert f"the deck lacks {REDACTED}" in page
    assert write_site([run], tmp_path / "mine", secrets=Secrets()).pages  # the site's seam takes what it is given


# -------------------------------------------------------------------------------------------------- a run

LEAKY_CASES = """
- name: plain_request
  covers: a case that runs beside the ones that cannot
  request: Build a 3-slide deck on tides
- name: key_in_a_path
  covers: a provider's key named in a path
  request: Turn this into a deck
  context_file: /nonexistent/${ANTHROPIC_API_KEY}/notes.md
- name: file_key_in_a_path
  covers: a key of the credentials file named in a path
  request: Turn this into a deck
  context_file: /nonexistent/${CORP_SERVICE}/notes.md
- name: credentials_file_pasted
  covers: the credentials file as pasted material
  request: Turn this into a deck
  context_file: ${PALETTE_ENV}
- documents: "/nonexistent/${GITHUB_TOKEN}/*.md"
  covers: a token named in a corpus glob
  request: Turn this into a deck
"""

#: A collection error: the glob matches the credentials file, which holds secrets.
LEAKY_CORPUS = """
- documents: "${PALETTE_ENV}"
  covers: the credentials file as a corpus
  request: Turn this into a deck
"""

#: A test of the same session that says every secret it can: in its failure, its output and a warning.
NOISY_TEST = """
import os
import warnings

def test_says_every_secret():
    said = " ".join(os.environ[name] for name in ("ANTHROPIC_API_KEY", "GITHUB_TOKEN", "RITS_API_KEY", "CORP_SERVICE"))
    print("printed:", said)
    warnings.warn(UserWarning("warned: " + said))
    assert not said, "failed: " + said
"""


@pytest.mark.end_to_end
def test_a_case_file_naming_secrets_leaves_no_value_in_any_file_junit_or_the_terminal(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    for name in ("RITS_API_KEY", "CORP_SERVICE"):
        monkeypatch.delenv(name, raising=False)
    env_file = pytester.path / "palette.env"
    env_file.write_text(f"RITS_API_KEY={FILE_KEY}\nCORP_SERVICE='{FILE_VALUE}'\n")
    env_file.chmod(0o600)
    monkeypatch.setenv("PALETTE_ENV", str(env_file))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path / "step-summary.md"))
    cases = pytester.mkdir("cases")
    (cases / "leaky.yaml").write_text(textwrap.dedent(LEAKY_CASES))
    (cases / "corpus.yaml").write_text(textwrap.dedent(LEAKY_CORPUS))
    pytester.makepyfile(test_noisy=NOISY_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "-v", "-rA", "--host=react",
                                "--continue-on-collection-errors", "--junitxml=junit.xml", "-o", "junit_logging=all",
                                "--palette-html=site")
    terminal = result.stdout.str() + result.stderr.str()
    result.assert_outcomes(passed=1, failed=1, errors=5, warnings=1)
    # The first wall: each path named as written.
    for said in ("context_file '/nonexistent/${ANTHROPIC_API_KEY}/notes.md': no file at "
                 "/nonexistent/${ANTHROPIC_API_KEY}/notes.md",
                 "context_file '/nonexistent/${CORP_SERVICE}/notes.md': no file at "
                 "/nonexistent/${CORP_SERVICE}/notes.md",
                 "context_file '${PALETTE_ENV}': ${PALETTE_ENV} holds the value of $",
                 "documents '/nonexistent/${GITHUB_TOKEN}/*.md' matched no file",
                 "the document 'palette.env': ${PALETTE_ENV} holds the value of $"):
        assert said in terminal, said
    # The second wall: what the noisy test said, taken out of its failure, output and warning.
    for said in (f"failed: {REDACTED} {REDACTED} {REDACTED} {REDACTED}", f"printed: {REDACTED} {REDACTED}",
                 f"warned: {REDACTED} {REDACTED}"):
        assert said in terminal, said
    junit = (pytester.path / "junit.xml").read_text()
    assert f"failed: {REDACTED}" in junit and f"printed: {REDACTED}" in junit and "${ANTHROPIC_API_KEY}" in junit
    [ledger] = (pytester.path / "runs").glob("*/results.jsonl")
    outcomes = {rec["case"]: rec["outcome"] for rec in map(json.loads, ledger.open())}
    assert outcomes == {"plain_request": "pass", "key_in_a_path": "error", "file_key_in_a_path": "error",
                        "credentials_file_pasted": "error", "leaky_documents_line17": "error"}
    assert (pytester.path / "site" / "index.html").is_file() and (pytester.path / "step-summary.md").is_file()
    for value in VALUES:
        assert value not in terminal, value
    for path in pytester.path.rglob("*"):
        if path.is_file() and path != env_file:
            data = path.read_bytes()
            for value in VALUES:
                assert value.encode() not in data, (value, path)


def test_more_secrets_are_found_whatever_their_names_and_the_old_ones_stay() -> None:
    base = Secrets.of({"API_KEY": "sk-base-secret-value-123"})
    more = base.more([("TODO_CLIENT", "family-local-value-456")])
    said = "sk-base-secret-value-123 and family-local-value-456"
    assert base.scrub(said) == "[redacted] and family-local-value-456"  # the session's own are not changed
    assert more.scrub(said) == "[redacted] and [redacted]" and more.variables == ["API_KEY", "TODO_CLIENT"]
    assert more.more([("TODO_CLIENT", "family-local-value-456")]) is more  # nothing new: the same secrets
