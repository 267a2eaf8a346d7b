"""The runs as inspect_ai eval logs (`palette-bench export inspect`), from the real offline runs of tests/sites.py:
one log per run and host, read back with inspect_ai's own reader — a sample per item run with the ledger's id,
score and tokens, the conversation with the agent's commands as tool calls — and shown by a real `inspect view`
in the system Chromium. No secret reaches a log, and no link of an item's folder is followed."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import msgspec
import pytest
from browser import Browser, require
from ports import free_port
from sites import OfflineRuns
from sweeps import Sweeps

from pytest_palette.arena import command_log
from pytest_palette.arena.workspace import Workspace
from pytest_palette.commands import main
from pytest_palette.results.checks import score_of
from pytest_palette.results.ledger import append, load
from pytest_palette.results.record import Record
from pytest_palette.run.conversation import Transcript

pytestmark = pytest.mark.end_to_end

#: How long `inspect view` may take to answer at all, with both cores busy: it ends a hang, nothing else.
VIEW_STARTS = 120.0


@dataclass(frozen=True)
class SampleSeen:
    """What inspect_ai's reader gives back of one sample (plain data: it is shared between xdist workers)."""

    id: str
    epoch: int
    score: float | None
    answer: str | None
    explanation: str | None
    checks: tuple[tuple[str, str, bool | None, object, object], ...]  # name, role, passed, expected, observed
    tokens: dict[str, tuple[int, int, int]]
    #: (role, text, the command lines of its tool calls), in order.
    messages: tuple[tuple[str, str, tuple[str, ...]], ...]
    error: str | None


@dataclass(frozen=True)
class LogSeen:
    task: str
    model: str
    run_id: str
    tags: tuple[str, ...]
    trusted: bool | None
    mean: float | None
    tokens: dict[str, tuple[int, int, int]]
    samples: tuple[SampleSeen, ...]


@dataclass(frozen=True)
class Exported:
    folder: Path
    printed: str
    logs: dict[str, LogSeen]  # by file name


def read_back(path: Path) -> LogSeen:
    """A log as inspect_ai reads it."""
    from inspect_ai.log import read_eval_log

    log = read_eval_log(str(path))
    samples = []
    for sample in log.samples or []:
        score = (sample.scores or {}).get("palette")
        samples.append(SampleSeen(
            id=str(sample.id), epoch=sample.epoch, score=score.as_float() if score else None,
            answer=score.answer if score else None, explanation=score.explanation if score else None,
            checks=tuple((c["name"], c["role"], c["passed"], c["expected"], c["observed"])
                         for c in ((score.metadata or {}).get("checks", []) if score else [])),
            tokens={m: (u.input_tokens, u.output_tokens, u.total_tokens) for m, u in sample.model_usage.items()},
            messages=tuple((m.role, m.text, tuple(str(c.arguments.get("cmd")) for c in getattr(m, "tool_calls", None)
                                                  or ())) for m in sample.messages),
            error=sample.error.message if sample.error else None))
    metrics = log.results.scores[0].metrics if log.results and log.results.scores else {}
    return LogSeen(task=log.eval.task, model=log.eval.model, run_id=log.eval.run_id, tags=tuple(log.eval.tags or ()),
                   trusted=log.eval.viewer.trust_content if log.eval.viewer else None,
                   mean=metrics["mean"].value if "mean" in metrics else None,
                   tokens={m: (u.input_tokens, u.output_tokens, u.total_tokens)
                           for m, u in log.stats.model_usage.items()}, samples=tuple(samples))


@pytest.fixture(scope="module")
def exported(sweeps: Sweeps, offline_runs: OfflineRuns) -> Exported:
    """The good and the bad run exported once per test session, and each log read back once."""

    def make(folder: Path) -> Exported:
        out = folder / "logs"
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            code = main(["export", "inspect", str(offline_runs.good), str(offline_runs.bad), "--out", str(out)])
        assert code == 0, printed.getvalue()
        return Exported(out, printed.getvalue(), {p.name: read_back(p) for p in sorted(out.glob("*.eval"))})

    return sweeps.shared("inspect-export", make)


def records_of(run: Path) -> list[Record]:
    return sorted(load(run).latest.values(), key=lambda r: (r.host, r.case, r.run_index))


def test_each_run_and_host_is_a_log_of_one_sample_per_item_run_with_the_ledgers_scores_and_tokens(
        exported: Exported, offline_runs: OfflineRuns) -> None:
    records = records_of(offline_runs.good) + records_of(offline_runs.bad)
    pairs = sorted({(r.run_id, r.host) for r in records})
    assert sorted(exported.logs) == sorted(f"{run}-{host}.eval" for run, host in pairs)
    assert len(pairs) == len(offline_runs.hosts) + 1  # three hosts of the good run, one of the bad
    for run, host in pairs:
        log = exported.logs[f"{run}-{host}.eval"]
        mine = [r for r in records if (r.run_id, r.host) == (run, host)]
        assert f"wrote {exported.folder / f'{run}-{host}.eval'}: {len(mine)} item run(s)" in exported.printed
        assert (log.task, log.run_id, log.tags, log.trusted) == ("palette", run, (host,), False)
        assert log.model == mine[0].terms.label
        # One sample per record, by id, with its repeat as the epoch, its score and its tokens.
        by_id = {s.id: s for s in log.samples}
        assert sorted(by_id) == sorted(f"{r.case}@{host}#{r.run_index}" for r in mine) and len(by_id) == len(mine)
        for record in mine:
            seen = by_id[f"{record.case}@{host}#{record.run_index}"]
            assert seen.epoch == record.run_index
            if record.outcome in ("error", "skipped"):
                assert seen.score is None and seen.error and seen.error.startswith(record.outcome), seen
                continue
            assert (seen.score, seen.answer, seen.error) == (score_of(record), record.outcome, None)
            usage = record.usage
            assert usage.input_tokens is not None and usage.output_tokens is not None  # counted on every host
            assert seen.tokens == {record.terms.label: (usage.input_tokens, usage.output_tokens,
                                                        usage.input_tokens + usage.output_tokens)}
        scores = [score_of(r) for r in mine if r.outcome in ("pass", "fail")]
        assert log.mean == pytest.approx(sum(s or 0 for s in scores) / len(scores))
        spent = [(r.usage.input_tokens or 0, r.usage.output_tokens or 0) for r in mine]
        tokens_in, tokens_out = sum(i for i, _ in spent), sum(o for _, o in spent)
        assert log.tokens == {mine[0].terms.label: (tokens_in, tokens_out, tokens_in + tokens_out)}


def test_a_failed_item_run_scores_what_the_ledger_says_with_each_check_and_the_judges_words(
        exported: Exported, offline_runs: OfflineRuns) -> None:
    log = exported.logs["bad-react.eval"]
    failed = {s.id.partition("@")[0]: s for s in log.samples if s.answer == "fail"}
    assert set(failed) == offline_runs.bad_fails
    for record in records_of(offline_runs.bad):
        if record.outcome != "fail":
            continue
        seen = failed[record.case]
        assert seen.explanation == "\n".join(record.failures) and seen.score == score_of(record)
        assert seen.score is not None and seen.score < 1
        assert record.judged is not None
        assert [c[:3] for c in seen.checks] == [(c.name, c.role, c.passed) for c in record.judged.checks]
        assert any(passed is False for _, _, passed, _, _ in seen.checks)
    assert log.mean is not None and 0 < log.mean < 1  # the bad agent passes some core cases


def test_a_sample_is_the_conversation_with_each_command_the_agent_ran_as_a_tool_call_in_its_turn(
        exported: Exported, offline_runs: OfflineRuns) -> None:
    for record in records_of(offline_runs.good):
        if record.outcome != "pass":
            continue
        workspace = Workspace.locate(offline_runs.good, record)
        case = workspace.case()
        assert case is not None
        seen = next(s for s in exported.logs[f"good-{record.host}.eval"].samples
                    if s.id == f"{record.case}@{record.host}#{record.run_index}")
        assert seen.messages[0][0] == "user" and seen.messages[0][1].startswith(case.request), seen.id
        # Every command of our record, each once and in order, as a call of the bash tool, and its output after it.
        called = [command for _, _, commands in seen.messages for command in commands]
        assert called == [run.command for run in command_log.read(workspace.commands)]
        assert any("deck.py" in command for command in called), seen.id
        for number, (_, _, commands) in enumerate(seen.messages):
            if commands:
                assert seen.messages[number + 1][0] == "tool"
        # The turns are the transcript's: its user's message opens each, in order, and each holds the commands the
        # harness counted in it as it ran.
        sent = [text for role, text, _ in seen.messages if role == "user"]
        assert sent == [case.opening, *case.replies]
        per_turn: list[int] = []
        for role, _, commands in seen.messages:
            per_turn += [0] if role == "user" else []
            per_turn[-1] += len(commands)
        assert per_turn == [turn.commands for turn in Transcript.saved(workspace).turns], seen.id


def test_no_secret_reaches_a_log_no_link_is_followed_and_an_error_is_the_samples(
        offline_runs: OfflineRuns, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    secret = "sk-ant-api03-" + "Z" * 40
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    monkeypatch.setenv("HOME", str(tmp_path))  # no credentials file of the developer's
    # A run from elsewhere, not scrubbed: a failure that quotes the key, an item whose command printed it, an error
    # that names it, and an item whose transcript is a link to a file outside it.
    run = tmp_path / "elsewhere"
    failing, passing = (next(r for r in records_of(offline_runs.bad) if r.outcome == outcome)
                        for outcome in ("fail", "pass"))
    for record in (failing, passing):
        source = Workspace.locate(offline_runs.bad, record)
        target = run / str(source.relative)
        shutil.copytree(source.folder / "input", target / "input")
        for name in ("turns.json", "commands.jsonl"):
            shutil.copy(source.folder / name, target / name)
    item = run / str(Workspace.locate(offline_runs.bad, failing).relative)
    late = max(r.started_at for r in command_log.read(item / "commands.jsonl")) + 0.001
    with (item / "commands.jsonl").open("a") as commands:
        commands.write(json.dumps({"command": "env", "started_at": late, "ended_at": late + 0.01, "exit_code": 0,
                                   "stdout": f"ANTHROPIC_API_KEY={secret}\n"}) + "\n")
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"turns": [{"sent": "read through a link", "answer": "LINK-FOLLOWED"}]}))
    linked = run / str(Workspace.locate(offline_runs.bad, passing).relative)
    (linked / "turns.json").unlink()
    (linked / "turns.json").symlink_to(outside)
    append(run / "results.jsonl", msgspec.structs.replace(failing, failures=(f"the key was {secret}",)))
    append(run / "results.jsonl", passing)
    errored = msgspec.structs.replace(passing, case="plain_request_err", outcome="error", judged=None,
                                      workspace=None, failures=(f"react: turn 1 failed: bad key {secret}",))
    append(run / "results.jsonl", errored)
    out = tmp_path / "logs"
    assert main(["export", "inspect", str(run), "--out", str(out)]) == 0
    [path] = out.glob("*.eval")
    with zipfile.ZipFile(path) as log:
        whole = b"".join(log.read(name) for name in log.namelist())
    assert secret.encode() not in whole and b"LINK-FOLLOWED" not in whole
    assert b"ANTHROPIC_API_KEY=[redacted]" in whole  # the command's output is there, scrubbed
    seen = {s.id: s for s in read_back(path).samples}
    assert seen[f"{failing.case}@react#1"].explanation == "the key was [redacted]"
    assert seen[f"{passing.case}@react#1"].messages == ()  # its transcript is a link: not read
    assert seen["plain_request_err@react#1"].error == "error: react: turn 1 failed: bad key [redacted]"
    assert seen["plain_request_err@react#1"].score is None
    capsys.readouterr()
    # Without the extra: one line that says what to install.
    monkeypatch.setitem(sys.modules, "inspect_ai.log", None)
    assert main(["export", "inspect", str(run), "--out", str(tmp_path / "again")]) == 2
    assert capsys.readouterr().err == ("palette-bench export: the inspect log needs inspect_ai: "
                                       "pip install 'pytest-palette[inspect]'\n")
    assert main(["export", "inspect", str(run), "--out", str(path)]) == 2
    assert "is a file; name a folder" in capsys.readouterr().err


def answering(url: str, view: subprocess.Popen[bytes], said: Path) -> None:
    """Wait until `url` answers, or fail when the viewer died (with what it said) or never answered."""
    deadline = time.monotonic() + VIEW_STARTS
    while time.monotonic() < deadline:
        if view.poll() is not None:
            pytest.fail(f"inspect view exited {view.returncode}: {said.read_text(errors='replace')[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    pytest.fail(f"inspect view did not answer {url} in {VIEW_STARTS:.0f} s")


def test_inspect_view_shows_the_three_hosts_and_a_samples_conversation_in_chromium(
        exported: Exported, offline_runs: OfflineRuns, tmp_path: Path) -> None:
    require()
    for host in offline_runs.hosts:
        offline_runs.skip_if_missing(host)
    port = free_port()
    said = tmp_path / "view.log"
    with said.open("wb") as output:
        view = subprocess.Popen([str(Path(sys.executable).with_name("inspect")), "view", "--log-dir",
                                 str(exported.folder), "--port", str(port), "--host", "127.0.0.1"],
                                stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        root = f"http://127.0.0.1:{port}/"
        answering(root, view, said)
        with Browser() as browser:
            page = browser.open(root)
            page.set_viewport_size({"width": 1400, "height": 1000})
            # The list of logs holds the four (its rows fill in one by one, and a row's tags may wait for another
            # look: each log is opened by its own address instead), and each host's log lists its samples.
            page.get_by_text(f"{len(exported.logs)} items", exact=True).wait_for()
            for host in offline_runs.hosts:
                page.goto(f"{root}#/tasks/good-{host}.eval")
                for case in offline_runs.cases:
                    page.get_by_text(f"{case}@{host}#1", exact=True).first.wait_for()
            # A sample of cuga's, as its link in the log's list of samples leads to it: its request, then its commands.
            record = next(r for r in records_of(offline_runs.good) if (r.host, r.case) == ("cuga", "pasted_notes"))
            asked = Workspace.locate(offline_runs.good, record).case()
            assert asked is not None
            page.goto(f"{root}#/tasks/good-cuga.eval/samples/sample/{quote(f'{record.case}@cuga#1', safe='')}/1/")
            page.get_by_text(f"{record.case}@cuga#1").first.wait_for()
            page.get_by_text(asked.request).first.wait_for()
            page.get_by_text("deck.py plan").first.wait_for()
            browser.screenshot(page, Path("/tmp/inspect-view.png"), full_page=False)
            text = page.inner_text("body")
            assert "bash" in text and "pass" in text
            # Nothing reached for the network (there is none: a request off this machine would have failed).
            assert [e for e in browser.errors(page) if e.startswith("requestfailed")] == []
    finally:
        os.killpg(view.pid, signal.SIGTERM)
        try:
            view.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(view.pid, signal.SIGKILL)
            view.wait()
