"""The claude host: the real Claude Code CLI, the rehearsal model over loopback HTTP, the real skill.

The first half needs no binary: command lines, the CLI's environment, reading its output, the errors a
turn can end in. The second half runs the real CLI (the one bundled in claude-agent-sdk, else
`claude` on PATH) and is skipped, with the reason, when there is none — never passed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

import pytest

from pytest_palette.arena.command_log import read as read_commands
from pytest_palette.arena.command_log import skill_calls
from pytest_palette.arena.sandbox import Sandbox
from pytest_palette.arena.sandbox import problem as sandbox_problem
from pytest_palette.arena.workspace import Workspace
from pytest_palette.backend import agent_environment
from pytest_palette.hosts.base import HostError, HostSettings, OptionRefused
from pytest_palette.hosts.claude import (
    MAX_TURNS,
    REHEARSAL_CLI_MODEL,
    ClaudeHost,
    ClaudeSession,
    _stop,
    cli_environment,
    find_cli,
    install_skill,
    lock_files,
    redact,
    session_folder,
    turn_command,
)
from pytest_palette.hosts.claude_stream import CliOutput, failure, parse_stream, stopped
from pytest_palette.hosts.stops import TurnStopped
from pytest_palette.judge.evidence import deck_by, inspect_deck, newest_deck, read_folder, read_trace
from pytest_palette.layer.endpoint import FORWARDER_LOG, PLACEHOLDER_KEY, RELAY_PORT, KeyForwarder, credentials
from pytest_palette.layer.route import Route, route_of
from pytest_palette.models import parse_model
from pytest_palette.rehearsal.conversation import Conversation
from pytest_palette.rehearsal.policy import catalogue
from pytest_palette.run.conversation import open_sandbox
from pytest_palette.skill import PACKAGED_SKILLS, InstallError, drift, load_card, load_skill, skill_hash

REHEARSAL = route_of(parse_model("rehearsal"))
#: The conversations here run in the sandbox a run would give them, where this machine has one.
SANDBOX = "none" if sandbox_problem("bubblewrap") else "bubblewrap"
SONNET = route_of(parse_model("anthropic:claude-sonnet-4-5"))
SECRET = "sk-ant-api03-" + "S3CRET" * 8  # shaped like a key; never a real one
SID = "7f63eb8a-ae6b-4c58-a4b3-52f1c12541af"


# -- command lines ---------------------------------------------------------------------------------


def test_the_first_turn_names_a_new_session_and_later_turns_resume_it() -> None:
    first = turn_command(Path("/bin/claude"), "claude-sonnet-4-5", SID, first=True)
    later = turn_command(Path("/bin/claude"), "claude-sonnet-4-5", SID, first=False)
    assert first[:2] == ["/bin/claude", "-p"] and later[:2] == ["/bin/claude", "-p"]
    for argv in (first, later):
        assert argv[argv.index("--output-format") + 1] == "stream-json" and "--verbose" in argv
        assert argv[argv.index("--model") + 1] == "claude-sonnet-4-5"
        assert argv[argv.index("--permission-mode") + 1] == "bypassPermissions"
    assert first[first.index("--session-id") + 1] == SID and f"--resume={SID}" not in first
    assert f"--resume={SID}" in later and "--session-id" not in later
    # The message is not an argument at all (it goes on standard input): no size limit, never an option.
    assert first[-2:] == ["--session-id", SID] and later[-1] == f"--resume={SID}"


def test_every_turn_has_its_step_budget_and_the_option_sets_it() -> None:
    argv = turn_command(Path("/bin/claude"), "claude-sonnet-4-5", SID, first=False, max_turns=60)
    assert argv[argv.index("--max-turns") + 1] == "60"
    assert "--max-turns" not in turn_command(Path("/bin/claude"), "claude-sonnet-4-5", SID, first=False)
    claude = ClaudeHost()
    # The default is no term (every run's fingerprint holds every known host's terms): earlier runs keep theirs.
    assert claude.max_turns == MAX_TURNS and claude.terms() == {}
    claude.configure({"max-turns": 7})
    assert claude.terms() == {"max_turns": 7}
    assert claude.describe(REHEARSAL, HostSettings())["max_turns"] == "7 model calls a turn (the CLI's --max-turns)"
    with pytest.raises(OptionRefused, match=r"must be at least 1 \(got 0\)"):
        claude.configure({"max-turns": 0})
    claude.configure({})
    assert claude.max_turns == MAX_TURNS


def test_every_turn_makes_the_cli_ignore_what_the_agent_could_write() -> None:
    env = {"ANTHROPIC_BASE_URL": "http://127.0.0.1:4242", "ANTHROPIC_API_KEY": PLACEHOLDER_KEY,
           "CLAUDE_CODE_SHELL_PREFIX": "/run/item/claude/sandbox.sh", "CLAUDE_CONFIG_DIR": "/run/item/claude/config"}
    for first in (True, False):
        argv = turn_command(Path("/bin/claude"), "claude-sonnet-4-5", SID, first, env=env)
        assert argv[argv.index("--setting-sources") + 1] == "project"  # the skill; not user nor local settings
        assert "--strict-mcp-config" in argv and json.loads(argv[argv.index("--mcp-config") + 1]) == {
            "mcpServers": {}}
        pinned = json.loads(argv[argv.index("--settings") + 1])
        assert pinned["env"] == env and pinned["disableAllHooks"] is True
    # A real key never goes on a command line (any process may read it there).
    leaked = turn_command(Path("/bin/claude"), "m", SID, True, env={**env, "ANTHROPIC_API_KEY": SECRET})
    assert SECRET not in " ".join(leaked)


def test_the_files_the_cli_reads_are_the_harnesss_own(tmp_path: Path) -> None:
    work, config, home = tmp_path / "work", tmp_path / "config", tmp_path / "home"
    (work / ".claude").mkdir(parents=True)
    (tmp_path / "elsewhere.json").write_text('{"env": {}}')
    (work / ".claude" / "settings.json").symlink_to(tmp_path / "elsewhere.json")
    locked = lock_files(work, config, home)
    assert locked == [work / ".claude", config / "settings.json"]
    for path in (work / ".claude" / "settings.json", work / ".claude" / "settings.local.json",
                 config / "settings.json"):
        assert not path.is_symlink() and path.read_text() == "{}\n"
    assert (home / ".bashrc").read_text() == "" and (home / ".profile").read_text() == ""
    assert (tmp_path / "elsewhere.json").read_text() == '{"env": {}}'  # a link is replaced, never followed


# -- the key stays with the harness ----------------------------------------------------------------


class _Upstream(BaseHTTPRequestHandler):
    """A model endpoint that records what reached it and streams two events back."""

    seen: ClassVar[list[tuple[str, dict[str, str], bytes]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(b"event: one\ndata: {}\n\nevent: two\ndata: {}\n\n")

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.mark.end_to_end
def test_the_forwarder_adds_the_key_and_passes_only_the_messages_api() -> None:
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    gateway = f"http://127.0.0.1:{upstream.server_address[1]}/gateway"
    forwarder = KeyForwarder(gateway, {"x-api-key": SECRET}, loopback=True).start()
    try:
        assert forwarder.base_url.startswith("http://127.0.0.1:")
        request = urllib.request.Request(f"{forwarder.base_url}/v1/messages?beta=true", data=b'{"model": "m"}',
                                         headers={"x-api-key": forwarder.token, "anthropic-version": "2023-06-01"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert answer.read() == b"event: one\ndata: {}\n\nevent: two\ndata: {}\n\n"
        [(path, headers, body)] = _Upstream.seen
        assert path == "/gateway/v1/messages?beta=true" and body == b'{"model": "m"}'
        # The key added, the client's token never passed on.
        assert headers["x-api-key"] == SECRET and headers["anthropic-version"] == "2023-06-01"
        assert forwarder.token not in json.dumps(headers)
        with pytest.raises(urllib.error.HTTPError) as refused:  # a WebFetch of the forwarder gets nothing else
            urllib.request.urlopen(urllib.request.Request(f"{forwarder.base_url}/admin",
                                                          headers={"x-api-key": forwarder.token}), timeout=30)
        assert refused.value.code == 403 and len(_Upstream.seen) == 1
    finally:
        forwarder.stop()
        upstream.shutdown()
        upstream.server_close()


def test_the_forwarder_holds_a_key_or_a_gateways_token_and_headers() -> None:
    assert credentials({"ANTHROPIC_API_KEY": SECRET, "ANTHROPIC_AUTH_TOKEN": "t"}) == {"x-api-key": SECRET}
    gateway = {"ANTHROPIC_AUTH_TOKEN": "t", "ANTHROPIC_CUSTOM_HEADERS": "X-Gateway-Key: g1\nnot a header"}
    assert credentials(gateway) == {"X-Gateway-Key": "g1", "Authorization": "Bearer t"}
    with pytest.raises(ValueError, match="not an http"):
        KeyForwarder("file:///etc/passwd", {})


def test_a_command_cannot_see_the_clis_folders_nor_its_process(tmp_path: Path) -> None:
    if SANDBOX == "none":
        pytest.skip("no bubblewrap here")
    work, config = tmp_path / "work", tmp_path / "claude" / "config"
    work.mkdir()
    sandbox = Sandbox(work, {"PATH": os.environ["PATH"]}, "bubblewrap")
    sandbox.writable(config)
    (config / "secret.json").write_text("{}")
    wrapper = sandbox.script(tmp_path / "sandbox.sh", hidden=(config,))
    sandbox.readable(wrapper)
    # The client (the CLI's place) holds a key in its environment; its command looks for it through /proc.
    look = ("for p in /proc/[0-9]*; do grep -l CLIENT_KEY $p/environ 2>/dev/null; ls $p/root$PWD/.. 2>/dev/null; "
            f"done; ls {config} 2>&1; echo done")
    argv = sandbox.client(["/bin/sh", "-c", 'sleep 30 & "$0" "$1"; kill $!', str(wrapper), look], work)
    try:
        done = subprocess.run(argv, env={"PATH": os.environ["PATH"], "CLIENT_KEY": "k"}, cwd=work,
                              capture_output=True, text=True, timeout=60, check=False)
    finally:
        sandbox.close()
    assert done.stdout.rstrip().endswith("done"), done.stderr
    assert "/environ" not in done.stdout and "secret.json" not in done.stdout and "No such file" in done.stdout


# -- the CLI's environment -------------------------------------------------------------------------


def users_environment() -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": "/root", "PALETTE_TRACE": "/run/item/palette-calls.jsonl",
            "ANTHROPIC_API_KEY": SECRET, "ANTHROPIC_BASE_URL": "https://gateway.example",
            "ANTHROPIC_MODEL": "claude-opus-4", "CLAUDE_CODE_USE_BEDROCK": "1", "CLAUDECODE": "1",
            "CLAUDE_CONFIG_DIR": "/root/.claude", "NO_PROXY": "internal.example"}


def test_the_rehearsal_environment_routes_only_to_the_server_and_carries_no_secret(tmp_path: Path) -> None:
    env = cli_environment(users_environment(), tmp_path / "config", "http://127.0.0.1:4242", 300.0, as_root=True)
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:4242" and env["ANTHROPIC_API_KEY"] == PLACEHOLDER_KEY
    assert SECRET not in json.dumps(env)
    assert "ANTHROPIC_MODEL" not in env and "CLAUDE_CODE_USE_BEDROCK" not in env and "CLAUDECODE" not in env
    assert env["CLAUDE_CONFIG_DIR"] == str(tmp_path / "config")
    assert env["PALETTE_TRACE"] == "/run/item/palette-calls.jsonl"  # the conversation's, passed through
    assert env["NO_PROXY"].split(",")[:2] == ["127.0.0.1", "localhost"] and "internal.example" in env["NO_PROXY"]
    for name in ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "DISABLE_AUTOUPDATER", "DISABLE_TELEMETRY"):
        assert env[name] == "1"
    # deck.py holds for 90 s: the Bash tool's limit is the harness's command timeout, not the CLI's 2 min.
    assert env["BASH_DEFAULT_TIMEOUT_MS"] == env["BASH_MAX_TIMEOUT_MS"] == "300000"
    assert env["IS_SANDBOX"] == "1"


def test_the_cli_holds_neither_the_callers_key_nor_its_gateway_and_only_root_gets_is_sandbox(tmp_path: Path) -> None:
    # The model layer's forwarder holds them (layer/serving.py): the CLI is given its token and its URL alone.
    env = cli_environment(users_environment(), tmp_path, "http://127.0.0.1:8787", 120.0, as_root=False, key="token")
    assert (env["ANTHROPIC_API_KEY"], env["ANTHROPIC_BASE_URL"]) == ("token", "http://127.0.0.1:8787")
    assert SECRET not in json.dumps(env) and "gateway.example" not in json.dumps(env)
    assert "IS_SANDBOX" not in env and "CLAUDECODE" not in env
    assert env["BASH_MAX_TIMEOUT_MS"] == "120000"


def test_the_harness_environment_is_never_changed(tmp_path: Path) -> None:
    before = dict(os.environ)
    cli_environment(users_environment(), tmp_path, "http://127.0.0.1:1", 300.0)
    assert dict(os.environ) == before and "PALETTE_TRACE" not in os.environ


# -- reading the CLI's output (shapes as Claude Code 2.1.332 prints them) --------------------------


def init(skills: list[str], session: str = SID) -> str:
    return json.dumps({"type": "system", "subtype": "init", "session_id": session, "skills": skills,
                       "model": "claude-sonnet-4-5", "permissionMode": "bypassPermissions",
                       "tools": ["Bash", "Skill"], "apiKeySource": "ANTHROPIC_API_KEY"})


def result(**fields: Any) -> str:
    base = {"type": "result", "subtype": "success", "is_error": False, "result": "Here is the plan",
            "session_id": SID, "num_turns": 5, "total_cost_usd": 0.28, "permission_denials": [],
            "usage": {"input_tokens": 92983, "output_tokens": 323, "cache_read_input_tokens": 0,
                      "output_tokens_details": {"thinking_tokens": 0}, "service_tier": "standard"},
            "terminal_reason": "completed"}
    return json.dumps(base | fields)


TOOL_CALLS = [
    json.dumps({"type": "assistant", "message": {"content": [
        {"type": "tool_use", "id": "t1", "name": "Skill", "input": {"skill": "palette"}}]}}),
    json.dumps({"type": "user", "message": {"content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": "Launching skill: palette"}]}}),
    json.dumps({"type": "assistant", "message": {"content": [
        {"type": "tool_use", "id": "t2", "name": "Bash", "input": {"command": "python3 x/deck.py find --root ."}}]}}),
    json.dumps({"type": "user", "message": {"content": [
        {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": '{\n "found": []\n}'}]}]}}),
]


def test_the_stream_gives_skills_steps_and_the_result() -> None:
    out = parse_stream([init(["palette", "dataviz"]), "not json: a warning line", *TOOL_CALLS, result()])
    assert out.skills == ["palette", "dataviz"] and out.session_id == SID
    assert out.steps == ["→ Skill: palette", "← Launching skill: palette",
                         "→ Bash: python3 x/deck.py find --root .", '← { "found": [] }']
    assert out.result is not None and out.result["num_turns"] == 5
    assert failure(out, 0, "") is None


def session_for(tmp_path: Path, env: dict[str, str] | None = None) -> ClaudeSession:
    card = load_skill("palette")
    return ClaudeSession(Path("/bin/false"), tmp_path, card, env or {}, "claude-sonnet-4-5", tmp_path / "claude")


def checked(tmp_path: Path, lines: list[str], returncode: int = 0, stderr: str = "",
            env: dict[str, str] | None = None) -> None:
    session = session_for(tmp_path, env)
    session.session_id = SID
    session._check(parse_stream(lines), returncode, stderr)


def test_a_permission_denial_is_a_host_error_not_agent_behaviour(tmp_path: Path) -> None:
    denial = {"tool_name": "Bash", "tool_use_id": "t2", "tool_input": {"command": "python3 x/deck.py plan"}}
    with pytest.raises(HostError, match=r"denied 1 tool call.*setup problem.*Bash.*deck\.py plan"):
        checked(tmp_path, [init(["palette"]), result(permission_denials=[denial])])


def test_an_error_result_is_a_host_error_in_the_clis_words(tmp_path: Path) -> None:
    # What the result says of itself, in its own fields; not "success", which the CLI says of a run whose last API
    # call failed (its loop completed).
    api = result(is_error=True, result="API Error: 529 overloaded", api_error_status=529, api_error_type="overloaded",
                 terminal_reason="api_error")
    with pytest.raises(HostError) as caught:
        checked(tmp_path, [init(["palette"]), api], returncode=1)
    assert str(caught.value) == ('the CLI\'s result is an error (api_error_status 529 overloaded, terminal_reason '
                                 '"api_error"), exit 1: API Error: 529 overloaded')
    assert not isinstance(caught.value, TurnStopped)
    during = result(subtype="error_during_execution", is_error=True, result=None, errors=["tool crashed"])
    with pytest.raises(HostError, match=r'^the CLI\'s result is an error \(subtype "error_during_execution"\), '
                                        r"exit 1: tool crashed$"):
        checked(tmp_path, [init(["palette"]), during], returncode=1)
    with pytest.raises(HostError, match=r"^the CLI exited 1 after a result that is not an error: Here is the plan$"):
        checked(tmp_path, [init(["palette"]), result()], returncode=1)


# Results as CLI 2.1.332 ends a turn at a limit (seen against the rehearsal server).
MAX_TURNS_RESULT = {"subtype": "error_max_turns", "is_error": True, "terminal_reason": "max_turns", "num_turns": 6,
                    "stop_reason": "tool_use", "errors": ["Reached maximum number of turns (5)"]}
MAX_OUTPUT_RESULT = {"is_error": True, "terminal_reason": "api_error", "api_error": "max_output_tokens",
                     "stop_reason": "stop_sequence", "api_error_status": None,
                     "result": "API Error: Claude's response exceeded the 32000 output token maximum. To configure "
                               "this behavior, set the CLAUDE_CODE_MAX_OUTPUT_TOKENS environment variable."}
TOO_LONG_RESULT = {"is_error": True, "terminal_reason": "prompt_too_long", "api_error_status": 400,
                   "api_error_type": "invalid_request_error", "result": "Prompt is too long", "num_turns": 1}


@pytest.mark.parametrize(("fields", "refusal", "reason", "words"), [
    (MAX_TURNS_RESULT, None, "step_budget", "ended at the step budget (max-turns 5) before the agent answered"),
    (MAX_OUTPUT_RESULT, None, "output_limit", "ended at the model's output limit (the CLI's result: api_error "
                                              '"max_output_tokens", after it asked the model to go on): the agent\'s '
                                              "last answer was cut"),
    ({"stop_reason": "max_tokens"}, None, "output_limit",
     'ended at the model\'s output limit (the CLI\'s result: stop_reason "max_tokens"): the agent\'s last answer was '
     "cut"),
    ({"stop_reason": "refusal"}, None, "refused",
     'ended in a refusal (the CLI\'s result: stop_reason "refusal") before the agent answered'),
    # The CLI keeps none of the API's words; the forwarder passed them on.
    (TOO_LONG_RESULT, (400, b'{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too '
                            b'long: 23873 tokens > 500 maximum"}}'), "context_limit",
     "ended at the model's context limit (500 tokens; the request was 23,873) before the agent answered (API status "
     '400, terminal_reason "prompt_too_long")'),
    (TOO_LONG_RESULT, None, "context_limit", 'ended at the model\'s context limit (API status 400, terminal_reason '
                                             '"prompt_too_long": "Prompt is too long"; no sizes named) before the '
                                             "agent answered"),
], ids=["max_turns", "max_output_tokens", "max_tokens", "refusal", "too_long_with_sizes", "too_long"])
def test_the_clis_result_says_why_a_turn_ended_before_the_agent_answered(
        tmp_path: Path, fields: dict[str, Any], refusal: tuple[int, bytes] | None, reason: str, words: str) -> None:
    session = session_for(tmp_path)
    session.session_id, session.max_turns, session._refusal = SID, 5, refusal
    with pytest.raises(TurnStopped) as caught:
        session._check(parse_stream([init(["palette"]), result(**fields)]), 1, "")
    assert (caught.value.reason, str(caught.value)) == (reason, words)
    # The model's words never end a turn: an answer that says it ran out of steps is an answer.
    assert stopped(parse_stream([result(result="Sorry, I reached the maximum number of turns")]), 5) is None


def test_the_model_calls_of_a_turn_are_the_answers_the_cli_streamed() -> None:
    def answer(message_id: str, block: dict[str, Any], model: str = "claude-sonnet-4-5") -> str:
        return json.dumps({"type": "assistant", "message": {"id": message_id, "model": model, "content": [block]}})

    # One answer streamed as two lines (a block each) is one call; the CLI's own message (an API error) is none.
    out = parse_stream([init(["palette"]), answer("m1", {"type": "text", "text": "Let me look"}),
                        answer("m1", {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}),
                        answer("m2", {"type": "text", "text": "Done"}),
                        answer("e1", {"type": "text", "text": "API Error: 500"}, model="<synthetic>"),
                        result(num_turns=3)])
    assert out.answers == ["m1", "m2"]


def test_an_exit_without_a_result_reports_stderr_with_secrets_redacted(tmp_path: Path) -> None:
    stderr = f"Error: invalid x-api-key {SECRET}\n"
    with pytest.raises(HostError) as caught:
        checked(tmp_path, [], returncode=1, stderr=stderr, env={"ANTHROPIC_API_KEY": SECRET})
    assert "exited 1 without a result" in str(caught.value) and "invalid x-api-key" in str(caught.value)
    assert SECRET not in str(caught.value) and "[redacted]" in str(caught.value)


def test_a_skill_the_cli_did_not_discover_is_a_host_error_naming_its_folder(tmp_path: Path) -> None:
    with pytest.raises(HostError, match=r"did not discover the skill 'palette' installed in .*palette.*dataviz"):
        checked(tmp_path, [init(["dataviz"]), result()])


def test_a_different_session_means_lost_history(tmp_path: Path) -> None:
    with pytest.raises(HostError, match="history is lost"):
        checked(tmp_path, [init(["palette"], session=str(uuid.uuid4())), result()])


def test_the_cost_recorded_per_turn_is_that_turns_share_of_the_sessions_total(tmp_path: Path) -> None:
    # On --resume the CLI's total_cost_usd is the session's running total (seen: 0.286, 0.514, 0.825).
    session = session_for(tmp_path)
    assert [session._turn_cost(total) for total in (0.286038, 0.513687, 0.825417)] == [0.286038, 0.227649, 0.31173]
    assert session._turn_cost(None) is None


def test_turn_files_are_scrubbed_of_secrets(tmp_path: Path) -> None:
    session = session_for(tmp_path, {"ANTHROPIC_API_KEY": SECRET})
    written = tmp_path / "turn-01.stderr"
    written.write_text(f"request failed with key {SECRET}", encoding="utf-8")
    assert SECRET not in session._scrub(written) and SECRET not in written.read_text(encoding="utf-8")
    assert redact(f"a {SECRET} b", [SECRET, ""]) == "a [redacted] b"


def test_no_result_at_all_is_not_a_success() -> None:
    assert "without a result" in (failure(CliOutput(skills=["palette"]), 0, "") or "")


# -- models, credentials, availability -------------------------------------------------------------


def usage_problems(host: ClaudeHost, model: str | Route, env: dict[str, str]) -> list[str]:
    """What the host says stops it, leaving out a missing CLI (a skip, and not what these tests are about)."""
    spec = route_of(parse_model(model)) if isinstance(model, str) else model
    return [str(p) for p in host.check(spec, env) if not p.skip]


def test_only_models_claude_code_can_speak_to_are_supported() -> None:
    host = ClaudeHost()
    assert usage_problems(host, REHEARSAL, {}) == [] and usage_problems(host, SONNET, {"ANTHROPIC_API_KEY": "k"}) == []
    assert usage_problems(host, "rehearsal:builds_early", {}) == []
    [reason] = usage_problems(host, "watsonx:openai/gpt-oss-120b", {})
    assert "anthropic:<model id>" in reason and "rehearsal" in reason
    assert usage_problems(host, "openai:gpt-5", {}) != []


def test_a_real_model_without_a_key_is_named_before_any_case() -> None:
    host = ClaudeHost()
    [problem] = usage_problems(host, SONNET, {})
    assert "ANTHROPIC_API_KEY" in problem and "anthropic:claude-sonnet-4-5" in problem
    assert usage_problems(host, SONNET, {"ANTHROPIC_API_KEY": SECRET}) == []
    assert usage_problems(host, REHEARSAL, {}) == []


def test_no_binary_names_the_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("pytest_palette.hosts.claude.bundled_cli", lambda: None)
    monkeypatch.setenv("PATH", str(tmp_path))
    [problem] = ClaudeHost().check(REHEARSAL, {})
    reason = str(problem)
    assert problem.skip and "pip install claude-agent-sdk" in reason and "--palette-claude-cli" in reason
    [missing] = ClaudeHost(cli=str(tmp_path / "nowhere" / "claude")).check(REHEARSAL, {})
    assert missing.skip and str(missing).startswith("--palette-claude-cli ") and "no executable" in str(missing)
    assert ClaudeHost().describe(REHEARSAL, HostSettings())["client"] == "Claude Code (not installed)"


def test_the_host_imports_without_the_sdk(tmp_path: Path) -> None:
    # A finder that refuses claude_agent_sdk: the module and the host must not need it to load.
    code = ("import importlib.abc, sys\n"
            "class Block(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'claude_agent_sdk': raise ImportError('blocked')\n"
            "sys.meta_path.insert(0, Block())\n"
            "from pytest_palette.hosts.claude import ClaudeHost, bundled_cli\n"
            "print(ClaudeHost().name, 'claude_agent_sdk' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.split() == ["claude", "False"], done.stderr


def test_the_skill_is_installed_where_the_cli_looks_and_identical(tmp_path: Path) -> None:
    card = load_skill("palette")
    installed = install_skill(card, tmp_path)
    assert installed.directory == tmp_path / ".claude" / "skills" / "palette"
    assert skill_hash(installed.directory) == skill_hash(PACKAGED_SKILLS / "palette")
    assert drift(card.directory, installed.directory) == []
    # SKILL.md's relative command resolves from the working folder through the link.
    assert (tmp_path / "skills" / "palette" / "scripts" / "deck.py").is_file()
    assert (tmp_path / "skills").is_symlink()
    (installed.directory / "SKILL.md").write_text("edited", encoding="utf-8")
    (installed.directory / "extra.txt").write_text("x", encoding="utf-8")
    assert drift(card.directory, installed.directory) == [
        f"{installed.directory}/extra.txt is not in the skill under test",
        f"{installed.directory}/SKILL.md differs from {card.directory}/SKILL.md"]
    with pytest.raises(InstallError):  # an edited copy is never replaced: this run did not make it
        install_skill(card, tmp_path)
    assert (installed.directory / "SKILL.md").read_text(encoding="utf-8") == "edited"


def live_members(group: int) -> list[int]:
    """Processes of a process group that are still running (zombies waiting to be reaped left out)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def test_each_session_gets_a_new_folder_beside_work_and_nothing_is_deleted(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path / "item", PurePosixPath("item"))
    work = workspace.work
    first = session_folder(workspace)
    (first / "kept.txt").write_text("x", encoding="utf-8")
    assert first == tmp_path / "item" / "claude" and session_folder(workspace) == tmp_path / "item" / "claude-2"
    assert (first / "kept.txt").is_file() and not work.exists()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process groups from /proc")
def test_stopping_a_turn_stops_its_whole_process_group(monkeypatch: pytest.MonkeyPatch) -> None:
    # The child ignores TERM, as a stuck tool might: the group KILL still ends it.
    monkeypatch.setattr("pytest_palette.hosts.claude.KILL_GRACE", 0.5)
    process = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 60 & sleep 60"], start_new_session=True)
    deadline = time.monotonic() + 60  # however busy the machine, until the shell has started both
    while len(live_members(process.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(live_members(process.pid)) >= 2
    _stop(process)
    assert process.poll() is not None
    deadline = time.monotonic() + 60
    while live_members(process.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live_members(process.pid) == []


# -- end to end with the real CLI ------------------------------------------------------------------

CLI = find_cli()
needs_cli = pytest.mark.skipif(CLI is None, reason="no Claude Code CLI: pip install claude-agent-sdk "
                                                    "(it bundles the CLI) or put `claude` on PATH")


@pytest.fixture(scope="module")
def host() -> Iterator[ClaudeHost]:
    claude = ClaudeHost()
    yield claude
    claude.close()


class Item:
    """One item's folder as the runner makes it: work/ for the agent, the trace beside it."""

    def __init__(self, root: Path, host: ClaudeHost, model: str = "rehearsal",
                 base: dict[str, str] | None = None, timeout: float = 120.0, skill: bool = True) -> None:
        workspace = Workspace(root, PurePosixPath("item"))  # an item's folder: work/, the trace, turns
        self.root, self.work, self.trace = workspace.folder, workspace.work, workspace.trace
        self.env = agent_environment(self.trace, base)
        # A checkout run with PYTHONPATH (not the installed package) needs it in the sandbox too.
        settings = HostSettings(command_timeout=120, sandbox=SANDBOX,
                                sandbox_env=("PYTHONPATH",) if "PYTHONPATH" in os.environ else ())
        workspace.work.mkdir(parents=True, exist_ok=True)
        self.sandbox = open_sandbox(workspace, settings, base)
        self.sandbox.prepare()
        self.session = host.open(workspace, load_skill("palette") if skill else None, self.env,
                                 route_of(parse_model(model)), settings, self.sandbox)
        self.timeout = timeout

    def say(self, *messages: str) -> list[str]:
        return [self.session.send(message, self.timeout).answer for message in messages]

    def commands(self) -> list[str]:
        return [call["command"] for call in read_trace(self.trace)]


@pytest.mark.end_to_end
@needs_cli
def test_with_no_skill_the_cli_offers_only_its_own_and_the_agent_writes_a_deck_of_its_own(
        host: ClaudeHost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    policy = host.layer.rehearsal.server(REHEARSAL.model).policy
    seen: list[Conversation] = []
    decide = policy.next_action
    monkeypatch.setattr(policy, "next_action", lambda conversation: seen.append(conversation) or decide(conversation))
    item = Item(tmp_path, host, skill=False)
    outlined, done = item.say("Build a 2-slide deck on tides", "yes")
    assert "## Tides" in outlined and done.startswith("Your deck is ready:") and "(2 slides)" in done
    # Nothing installed: no .claude/skills, no skills link; the CLI lists only the skills it brings, none of
    # them for decks, and none is loaded.
    assert not (item.work / ".claude" / "skills").exists() and not (item.work / "skills").is_symlink()
    offered = {name for conversation in seen for name, _ in catalogue(conversation.system)}
    assert seen and "palette" not in offered
    assert not any(step.startswith("→ Skill") for turn in item.session.turns for step in turn.steps)
    on_disk = read_folder(item.work, item.trace, 0)
    assert on_disk.pptx is not None and on_disk.slides == 2 and not on_disk.has_plex and deck_by(on_disk) == "agent"
    assert item.commands() == []  # the skill's script never ran


@pytest.mark.end_to_end
@needs_cli
def test_a_three_slide_deck_plan_then_yes(host: ClaudeHost, tmp_path: Path) -> None:
    served_before = len(host.layer.rehearsal.server(REHEARSAL.model).served)
    item = Item(tmp_path, host)
    plan, done = item.say("Build a 3-slide deck on prompt caching", "yes")
    assert "Reply **yes**" in plan
    deck = newest_deck(item.work)
    assert deck is not None and str(deck) in done
    facts = inspect_deck(deck)
    assert facts.slides == 3 and facts.has_plex and facts.size >= 20_000
    # PALETTE_TRACE lived only in the CLI's environment: these lines were written by deck.py run by the
    # CLI's own Bash tool, in its process tree.
    assert "PALETTE_TRACE" not in os.environ
    assert item.commands() == ["find", "plan", "find", "start", "status"]
    # Our own record, from the CLI's stream: the same calls, timed by the CLI's stamps, within the turns.
    seen = skill_calls(read_commands(tmp_path / "commands.jsonl"))
    assert [call["command"] for call in seen] == item.commands()
    assert all(call["exit_code"] == 0 and call["seconds"] >= 0 for call in seen)
    assert json.loads(seen[1]["stdout"])["done"] is True  # the plan's answer, as the agent read it
    traced = read_trace(item.trace)
    assert all(abs(mine["at"] - theirs["at"]) < 5 for mine, theirs in zip(seen, traced, strict=True))
    served = host.layer.rehearsal.server(REHEARSAL.model).served[served_before:]
    assert len(served) >= 8 and {route for route, _ in served} == {"/v1/messages"}
    first, second = item.session.turns
    assert first.steps[0] == "→ Skill: palette" and any("deck.py plan" in s for s in first.steps)
    assert first.num_turns and second.num_turns
    # Tokens as the CLI counted them; no dollars: the CLI would price the rehearsal model as a Claude model.
    assert first.cost_usd is None and second.cost_usd is None
    assert first.usage["input_tokens"] > 0 and first.error is None
    kept = sorted(p.name for p in (tmp_path / "claude").iterdir())
    assert kept == ["config", "home", "sandbox.sh", "tmp", "turn-01.jsonl", "turn-01.prompt", "turn-01.stderr",
                    "turn-02.jsonl", "turn-02.prompt", "turn-02.stderr"]
    assert (tmp_path / "claude" / "turn-02.prompt").read_text() == "yes"  # what the CLI read on its stdin
    assert not any(p.name == "config" for p in item.work.iterdir())  # the CLI's config is not the agent's


@pytest.mark.end_to_end
@needs_cli
def test_an_edit_conversation_edits_and_never_replans(host: ClaudeHost, tmp_path: Path) -> None:
    item = Item(tmp_path, host)
    item.say("Build a deck on prompt caching", "make it 5 slides", "yes")
    commands = item.commands()
    assert "edit" in commands and "plan" not in commands[commands.index("edit"):]
    deck = newest_deck(item.work)
    assert deck is not None and inspect_deck(deck).slides == 5


@pytest.mark.end_to_end
@needs_cli
def test_a_decline_builds_no_deck(host: ClaudeHost, tmp_path: Path) -> None:
    item = Item(tmp_path, host)
    _, answer = item.say("Build a deck on prompt caching", "actually, hold off")
    assert "won't build" in answer
    assert newest_deck(item.work) is None and "start" not in item.commands()


@pytest.mark.end_to_end
@needs_cli
def test_a_real_models_key_stays_with_the_harness_and_reaches_the_model(host: ClaudeHost, tmp_path: Path) -> None:
    # anthropic:<model> through a gateway: the rehearsal server stands in for it on loopback.
    gateway = host.layer.rehearsal.server(REHEARSAL.model).base_url
    base = {**os.environ, "ANTHROPIC_API_KEY": SECRET, "ANTHROPIC_BASE_URL": gateway}
    item = Item(tmp_path, host, model="anthropic:claude-sonnet-4-5", base=base)
    [plan] = item.say("Build a 3-slide deck on prompt caching")
    assert "Reply **yes**" in plan  # the model answered, through the forwarder
    # The CLI holds the forwarder's token and talks to the harness's forwarder, which holds the key.
    assert item.session.forwarder is not None
    assert item.session.env["ANTHROPIC_API_KEY"] == item.session.forwarder.token
    assert item.session.env["ANTHROPIC_BASE_URL"] != gateway
    assert SECRET not in json.dumps(item.session.env)
    for path in tmp_path.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert SECRET.encode() not in path.read_bytes(), path


@pytest.mark.end_to_end
@needs_cli
def test_what_the_cli_reads_is_read_only_even_to_the_cli(host: ClaudeHost, tmp_path: Path) -> None:
    # The CLI's own Write tool is the agent's too: in the CLI's view, what configures it cannot be written.
    if SANDBOX == "none":
        pytest.skip("no bubblewrap here")
    item = Item(tmp_path, host)
    folder = item.session.folder
    tries = {"settings": folder / "config" / "settings.json", "project": item.work / ".claude" / "settings.json",
             "local": item.work / ".claude" / "settings.local.json", "bashrc": folder / "home" / ".bashrc",
             "new in .claude": item.work / ".claude" / "agents.json", "new in home": folder / "home" / ".zlogin",
             "config": folder / "config" / "scratch.json", "cache": folder / "home" / ".cache" / "x"}
    script = "; ".join(f"(echo '{{}}' > {path}) 2>/dev/null && echo wrote {name.replace(' ', '_')}"
                       for name, path in tries.items())
    done = subprocess.run(item.sandbox.client(["/bin/sh", "-c", script], item.work), cwd=item.work,
                          capture_output=True, text=True, timeout=60, check=False)
    item.sandbox.close()
    assert done.stdout.split() == ["wrote", "config", "wrote", "cache"]  # only what the CLI keeps for itself
    assert tries["settings"].read_text() == tries["project"].read_text() == "{}\n"


@needs_cli
def test_the_cli_reaches_its_model_and_nothing_else(host: ClaudeHost, tmp_path: Path) -> None:
    if SANDBOX == "none":
        pytest.skip("no bubblewrap here")
    listener = socket.create_server(("127.0.0.1", 0))  # a service of this machine's, not the model
    item = Item(tmp_path, host)
    session = item.session
    assert session.relay is not None and session.env["ANTHROPIC_BASE_URL"] == f"http://127.0.0.1:{RELAY_PORT}"
    # The model, through the relay: a call without the forwarder's token, and the CLI's own call with it.
    call = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 100,
                       "messages": [{"role": "user", "content": "hi"}]})
    probe = (f"import socket, urllib.request, urllib.error\n"
             f"def status(key):\n"
             f"    asked = urllib.request.Request('{session.env['ANTHROPIC_BASE_URL']}/v1/messages?beta=true', "
             f"{call.encode()!r}, {{'x-api-key': key, 'content-type': 'application/json', "
             f"'anthropic-version': '2023-06-01'}})\n"
             f"    try:\n        return urllib.request.urlopen(asked, timeout=30).status\n"
             f"    except urllib.error.HTTPError as error:\n        return error.code\n"
             f"print(status('sk-ant-guessed'), status({session.env['ANTHROPIC_API_KEY']!r}))\n"
             f"try:\n    socket.create_connection(('127.0.0.1', {listener.getsockname()[1]}), 5)\n"
             f"    print('reached')\nexcept OSError as error:\n    print('refused', error.errno)\n")
    # Exactly as a turn runs the CLI: the relay, then (here) a program in the CLI's place.
    argv = session.sandbox.client([*session.relay, sys.executable, "-c", probe], item.work, network=False)
    done = subprocess.run(argv, cwd=item.work, capture_output=True, text=True, timeout=60, check=False)
    item.sandbox.close()
    listener.close()
    session.close()
    assert done.stdout.split() == ["401", "200", "refused", "111"], done.stderr


@needs_cli
def test_a_cli_that_keeps_the_network_reaches_a_port_that_asks_for_its_token(host: ClaudeHost, tmp_path: Path) -> None:
    """With a Palette elsewhere, commands keep the network and so does the CLI: its forwarder listens on 127.0.0.1
    too, where any local user and the CLI's own commands can connect, and answers only the CLI's token, which
    neither holds: it is in the CLI's environment alone, never on its command line nor in its commands'."""
    item = Item(tmp_path, host, base={**os.environ, "PALETTE_URL": "http://127.0.0.1:9"})
    session, forwarder = item.session, item.session.forwarder
    try:
        assert forwarder is not None and session.relay is None and item.sandbox.network
        assert session.env["ANTHROPIC_BASE_URL"] == forwarder.base_url
        assert session.env["ANTHROPIC_API_KEY"] == forwarder.token
        asked = urllib.request.Request(f"{forwarder.base_url}/v1/messages?beta=true", data=b"{}", method="POST",
                                       headers={"x-api-key": PLACEHOLDER_KEY})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(asked, timeout=30)
        assert refused.value.code == 401
        argv = turn_command(session.cli, session.model_id, session.session_id, True, env=session.env)
        wrapper = (session.folder / "sandbox.sh").read_text(encoding="utf-8")
        assert forwarder.token not in " ".join(argv) and forwarder.token not in wrapper
    finally:
        session.close()
        item.sandbox.close()
    assert "refused 401 POST /v1/messages?beta=true: the request does not carry the forwarder's token" in (
        item.root / FORWARDER_LOG).read_text(encoding="utf-8")


@pytest.mark.end_to_end
@needs_cli
def test_a_skill_the_cli_cannot_find_fails_the_turn(host: ClaudeHost, tmp_path: Path) -> None:
    item = Item(tmp_path, host)
    (item.work / ".claude" / "skills" / "palette" / "SKILL.md").unlink()
    with pytest.raises(HostError, match=r"did not discover the skill 'palette' installed in .*\.claude/skills/palette"):
        item.say("Build a deck on prompt caching")


@pytest.mark.end_to_end
@needs_cli
def test_denied_tool_calls_are_a_host_error(tmp_path: Path) -> None:
    strict = ClaudeHost(permission_mode="default")
    try:
        item = Item(tmp_path, strict)
        with pytest.raises(HostError, match=r"denied \d+ tool call\(s\), a setup problem: Bash"):
            item.say("Build a deck on prompt caching")
        assert item.session.turns[0].error
    finally:
        strict.close()


@needs_cli
def test_a_turn_past_its_timeout_is_stopped(host: ClaudeHost, tmp_path: Path) -> None:
    item = Item(tmp_path, host, timeout=0.3)
    started = time.monotonic()
    with pytest.raises(TurnStopped, match=r"^turn 1 timed out after 0\.3 s \(the CLI was stopped\)$") as caught:
        item.say("Build a deck on prompt caching")
    assert caught.value.reason == "turn_timeout"
    assert time.monotonic() - started < 15
    assert item.session.turns[0].error and "timed out" in item.session.turns[0].error


@pytest.mark.end_to_end
@needs_cli
def test_a_timed_out_turn_keeps_the_steps_the_cli_streamed_before_it_was_stopped(host: ClaudeHost,
                                                                                  tmp_path: Path) -> None:
    item = Item(tmp_path, host, base={**os.environ, "PALETTE_ENGINE_LATENCY": "plan=30"}, timeout=6)
    with pytest.raises(HostError, match=r"timed out after 6 s") as caught:
        item.say("Build a 3-slide deck on prompt caching")
    turn = item.session.turns[0]
    assert caught.value.turn is turn and turn.error
    assert any(step.startswith("→ Bash:") and "deck.py plan" in step for step in turn.steps), turn.steps


@pytest.mark.end_to_end
@needs_cli
def test_preflight_and_describe_name_what_would_run(host: ClaudeHost) -> None:
    assert host.check(REHEARSAL, {}, load_card(PACKAGED_SKILLS / "palette")) == []
    described = host.describe(REHEARSAL, HostSettings())
    assert described["client"].startswith("Claude Code 2.") and described["cli_model"] == REHEARSAL_CLI_MODEL
    assert described["permission_mode"] == "bypassPermissions"
    # A base URL on loopback: offline, the CLI spends ~19 s reaching for api.anthropic.com before its init.
    problems = host.check(SONNET, {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}, load_card(PACKAGED_SKILLS / "palette"))
    assert len(problems) == 1 and "ANTHROPIC_API_KEY" in str(problems[0])


@pytest.mark.end_to_end
@needs_cli
def test_preflight_reports_a_skill_the_cli_does_not_discover(host: ClaudeHost, tmp_path: Path) -> None:
    # No frontmatter name/description: the CLI does not offer it as a skill.
    skill = tmp_path / "nameless"
    (skill / "scripts").mkdir(parents=True)
    (skill / "SKILL.md").write_text("just text, no frontmatter\n", encoding="utf-8")
    problems = host.check(REHEARSAL, {}, load_card(skill))
    assert problems and "does not discover the skill 'nameless'" in str(problems[-1])
