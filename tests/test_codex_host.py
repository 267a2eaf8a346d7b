"""The codex host (hosts/codex.py): the real Codex CLI, `codex exec --json` a turn, on the model layer's Responses
endpoint. One sweep of the core cases is shared by every test here; the CLI's events are read from a recorded turn."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

import pytest
from sweeps import REPO, Sweep, Sweeps

from pytest_palette.hosts.codex import (
    KEY_VARIABLE,
    CodexHost,
    codex_config,
    command_of,
    exec_spans,
    find_codex,
    offered_skills,
    parse_events,
)
from pytest_palette.layer.route import route_of
from pytest_palette.models import parse_model
from pytest_palette.results.ledger import load
from pytest_palette.skill import PACKAGED_SKILLS, skill_hash

FIXTURE = Path(__file__).parent / "fixtures" / "codex-0.171.0-turn.jsonl"
#: A caller's key in the sweep's environment: the rehearsal agent needs none, and no file of the run may hold it.
SECRET = "sk-codex-test-5e1f0a9c"
CORE = {"plain_request", "approve_casually", "pasted_notes", "edit_slide_count", "conditional_yes"}


def needs_codex() -> None:
    if find_codex() is None:
        (pytest.fail if os.environ.get("REQUIRE_CODEX") else pytest.skip)("the Codex CLI is not installed: make codex")


@pytest.fixture
def core(sweeps: Sweeps) -> Sweep:
    """The core cases on codex with the good rehearsal agent, and a known-bad one on two cases: one session each,
    shared by every test here."""
    needs_codex()
    return sweeps.run("-m", "core", "--host=codex", "--model=rehearsal", env={"OPENAI_API_KEY": SECRET})


def test_the_events_of_a_turn_are_its_thread_commands_answer_and_usage() -> None:
    out = parse_events(FIXTURE.read_text(encoding="utf-8").splitlines())
    assert out.thread_id == "01a24c90-4f2e-7a22-8494-d415351e9f46" and out.completed and out.failed is None
    assert out.messages[-1].startswith("Palette did not finish") and len(out.messages) == 1
    assert out.usage == {"input_tokens": 26345, "cached_input_tokens": 0, "cache_write_input_tokens": 0,
                         "output_tokens": 280, "reasoning_output_tokens": 0}
    assert [step.partition(" (exit")[0] for step in out.steps[:2]] == [
        "ran: cat /item/work/.agents/skills/palette/SKILL.md",
        "ran: python3 /item/work/.agents/skills/palette/scripts/deck.py find --root ."]
    failed = parse_events(['{"type": "thread.started", "thread_id": "t"}',
                           '{"type": "turn.failed", "error": {"message": "stream disconnected before completion"}}'])
    assert (failed.completed, failed.failed) == (False, "stream disconnected before completion")
    # A command is what the agent ran, unwrapped from the shell Codex reports it in; anything else as reported.
    assert command_of("/usr/bin/bash -c 'ls -la ./deck'") == "ls -la ./deck"
    assert command_of('/bin/bash -lc "echo \'hi\'"') == "echo 'hi'"
    assert command_of("python3 x.py") == "python3 x.py"


def test_the_cli_is_pointed_at_the_layer_and_holds_no_key() -> None:
    options = codex_config("http://127.0.0.1:8787", 3)
    given = dict(option.split("=", 1) for option in options[1::2])
    assert given["model_providers.palette.base_url"] == '"http://127.0.0.1:8787"'
    assert given["model_providers.palette.wire_api"] == '"responses"'
    assert given["model_providers.palette.env_key"] == f'"{KEY_VARIABLE}"' and "KEY" in KEY_VARIABLE
    assert given["sandbox_mode"] == '"danger-full-access"' and given["allow_login_shell"] == "false"
    assert options[0::2] == ["-c"] * len(given)


def test_a_model_off_the_responses_wire_or_a_missing_cli_is_named(tmp_path: Path) -> None:
    host = CodexHost()
    [problem] = host.check(route_of(parse_model("anthropic:claude-sonnet-4-5")), {})
    assert "Responses API" in str(problem) and not problem.skip
    host.configure({"codex-cli": str(tmp_path / "nowhere" / "codex")})
    [missing] = host.check(route_of(parse_model("rehearsal")), {})
    assert missing.skip and "--palette-codex-cli" in str(missing) and "no executable there" in str(missing)
    problems = host.check(route_of(parse_model("openai:gpt-5")), {})
    assert any("needs OPENAI_API_KEY" in str(p) for p in problems)


@pytest.mark.end_to_end
def test_the_core_cases_pass_on_codex_through_its_real_cli(core: Sweep) -> None:
    assert core.by_case("codex") == {case: [] for case in CORE}, core.stdout[-3000:]
    records = list(load(core.runs).latest.values())
    assert {r.case for r in records} == CORE and {r.host for r in records} == {"codex"}
    [run] = core.runs.iterdir()
    for record in records:
        item = run / "codex" / record.case
        turns = json.loads((item / "turns.json").read_text(encoding="utf-8"))["turns"]
        # Each turn answered, with the usage Codex reported; a conversation of more turns resumed one thread.
        assert [turn["stop"] for turn in turns] == ["answered"] * len(turns), record.case
        assert all(turn["usage"]["input_tokens"] > 0 for turn in turns), record.case
        # The skill where Codex finds a project's, unchanged; the CLI's home beside work/, never in it.
        assert skill_hash(item / "work" / ".agents" / "skills" / "palette") == skill_hash(PACKAGED_SKILLS / "palette")
        assert any((item / "codex" / "home" / "sessions").rglob("*.jsonl")) and not (item / "work" / ".codex").exists()
        # Our record of its commands: each deck.py command it ran, unwrapped, with its exit code.
        ran = [json.loads(line) for line in (item / "commands.jsonl").read_text(encoding="utf-8").splitlines()]
        plans = [r for r in ran if "deck.py plan" in r["command"]]
        assert plans and all(r["exit_code"] == 0 and r["started_at"] <= r["ended_at"] for r in plans), ran
        assert not any(r["command"].startswith(("/bin/bash", "/usr/bin/bash")) for r in ran)
        # Each run of the skill within the command the host saw run it: none outside, none unaccounted for.
        assert record.judged is not None and not any("outside every command" in n for n in record.judged.notes)
    assert "codex: 5 passed, 0 failed, 0 errored" in core.stdout


@pytest.mark.end_to_end
def test_no_secret_of_the_callers_reaches_a_file_of_the_codex_run(core: Sweep) -> None:
    looked = 0
    for path in [*core.runs.rglob("*"), core.folder / "junit.xml"]:
        if path.is_file() and not path.is_symlink():
            looked += 1
            assert SECRET.encode() not in path.read_bytes(), path
    assert looked > 50 and SECRET not in core.stdout + core.stderr


@pytest.mark.end_to_end
def test_a_known_bad_agent_fails_on_codex_as_on_every_host(sweeps: Sweeps) -> None:
    needs_codex()
    flawed = sweeps.session([str(REPO / "cases"), f"--rootdir={REPO}", "--host=codex", "--model=rehearsal:builds_early",
                             "-k", "plain_request or slide_fonts_question"])
    results = flawed.by_case("codex")
    assert results["slide_fonts_question"] == []  # a near miss: it answers in words, as the good agent does
    assert any("the confirmation gate was skipped" in said for said in results["plain_request"]), results


@pytest.mark.end_to_end
def test_a_turn_that_never_answers_ends_at_the_step_budget_as_an_error(sweeps: Sweeps) -> None:
    needs_codex()
    looped = sweeps.session([str(REPO / "cases"), f"--rootdir={REPO}", "--host=codex", "--model=rehearsal:loops",
                             "--palette-codex-max-steps=8", "-k", "plain_request"])
    [result] = looped.items.values()
    assert result.outcome == "error" and "ended at the step budget (8 model calls a turn" in result.said[0], result
    [record] = load(looped.runs).latest.values()
    assert record.judged is None and record.usage.stops[-1] == "step_budget", record.usage


def test_the_skills_codex_offered_are_read_from_its_log_of_the_thread_as_the_agents_files(tmp_path: Path) -> None:
    listing = ("<skills_instructions>\n### Skill roots\n- `r0` = `/h/skills/.system`\n- `r1` = `/w/.agents/skills`\n"
               "### Available skills\n- imagegen: images (file: r0/imagegen/SKILL.md)\n"
               "- palette: decks (file: r1/palette/SKILL.md)\n</skills_instructions>")
    line = json.dumps({"type": "response_item", "payload": {"type": "message", "role": "developer",
                                                            "content": [{"type": "input_text", "text": listing}]}})
    folder = tmp_path / "sessions" / "2026" / "12" / "06"
    folder.mkdir(parents=True)
    log = folder / "rollout-2026-12-06T18-20-54-t1.jsonl"
    log.write_text('{"type": "session_meta"}\n' + line + "\n", encoding="utf-8")
    assert offered_skills(tmp_path, "t1") == {"imagegen": "/h/skills/.system/imagegen/SKILL.md",
                                              "palette": "/w/.agents/skills/palette/SKILL.md"}
    assert offered_skills(tmp_path, "another") is None
    # The log is in a folder the agent's commands may write: a link there is not followed.
    outside = tmp_path / "outside.jsonl"
    log.rename(outside)
    log.symlink_to(outside)
    assert offered_skills(tmp_path, "t1") is None


def test_each_command_is_timed_by_codexs_own_log_from_the_end_of_the_one_before(tmp_path: Path) -> None:
    def entry(at: str, kind: str, call: str) -> str:
        payload = {"type": kind, "call_id": call, **({"name": "exec_command"} if kind == "function_call" else {})}
        return json.dumps({"timestamp": f"2026-12-06T18:20:{at}Z", "type": "response_item", "payload": payload})

    folder = tmp_path / "sessions" / "2026"
    folder.mkdir(parents=True)
    (folder / "rollout-x-t1.jsonl").write_text("\n".join([
        entry("50.000", "function_call", "old"), entry("50.100", "function_call_output", "old"),  # an earlier turn
        entry("54.270", "function_call", "a"), entry("54.332", "function_call_output", "a"),
        entry("54.365", "function_call", "b"), "not json", entry("54.579", "function_call_output", "b")]) + "\n",
        encoding="utf-8")
    since = datetime(2026, 12, 6, 18, 20, 54, tzinfo=timezone.utc).timestamp()
    spans = exec_spans(tmp_path, "t1", since)
    assert [(round(a - since, 3), round(b - since, 3)) for a, b in spans] == [(0.0, 0.332), (0.332, 0.579)]
    assert exec_spans(tmp_path, "t2", since) == []
