"""The cuga host: IBM's CUGA SDK, the rehearsal model over loopback HTTP, the real skill.

The first half needs no cuga: model mapping, credentials, why the host is unavailable, installing the
skill and the drift check, the process state an item borrows, and the rehearsal wire read against
requests real CUGA sent (recorded in tests/fixtures). The second half runs the real CugaAgent and is
skipped, with the reason, when the SDK cannot be imported here — never passed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from pytest_palette.arena.command_log import read as read_commands
from pytest_palette.arena.command_log import skill_calls
from pytest_palette.arena.sandbox import problem as sandbox_problem
from pytest_palette.arena.workspace import Workspace
from pytest_palette.backend import agent_environment
from pytest_palette.hosts import cuga as cuga_module
from pytest_palette.hosts import cuga_setup
from pytest_palette.hosts.base import HostError, HostSettings
from pytest_palette.hosts.cuga import (
    RUN_COMMAND_CEILING,
    CugaHost,
    CugaSession,
    agent_path,
    answer_text,
    block_timeout,
    code_steps,
    find_uv,
    import_problem,
    installed_problem,
)
from pytest_palette.hosts.cuga_setup import (
    INSTALL_HINT,
    CugaModel,
    Probe,
    credentials_needed,
    cuga_model,
    unsupported_reason,
)
from pytest_palette.hosts.stops import TurnStopped
from pytest_palette.judge.evidence import any_deck, deck_by, inspect_deck, newest_deck, read_folder, read_trace
from pytest_palette.layer.route import Route, route_of
from pytest_palette.models import parse_model
from pytest_palette.rehearsal import openai_wire
from pytest_palette.rehearsal.conversation import Conversation, ToolResult, UserSaid
from pytest_palette.rehearsal.policy import RehearsalPolicy, catalogue
from pytest_palette.run.conversation import open_sandbox
from pytest_palette.skill import PACKAGED_SKILLS, InstallError, SkillCard, drift, install, load_card, load_skill

REHEARSAL = route_of(parse_model("rehearsal"))
#: The conversations here run in the sandbox a run would give them, where this machine has one.
SANDBOX = "none" if sandbox_problem("bubblewrap") else "bubblewrap"
SECRET = "sk-" + "S3CRET" * 8  # shaped like a key; never a real one
FIXTURE = Path(__file__).parent / "fixtures" / "cuga-0.4.3-codeact.json"
URL = "http://127.0.0.1:9/v1"


# -- models ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["rehearsal", "rehearsal:builds_early", "openai:gpt-4o", "watsonx:openai/gpt-oss-120b",
                                  "rits:openai/gpt-oss-120b"])
def test_the_models_cuga_settings_can_express_are_supported(text: str) -> None:
    assert unsupported_reason(route_of(parse_model(text))) is None


def test_a_provider_cuga_is_not_mapped_for_is_unsupported_with_the_list() -> None:
    reason = "\n".join(map(str, CugaHost().check(route_of(parse_model("anthropic:claude-sonnet-4-5")), {})))
    assert "'anthropic'" in reason and "openai, rehearsal, rits, watsonx" in reason


def test_the_rehearsal_model_is_cugas_openai_client_pointed_at_the_endpoint() -> None:
    mapped = cuga_model(REHEARSAL, {}, url=URL)
    assert mapped == CugaModel("settings.openai.toml",
                               {"OPENAI_BASE_URL": URL, "OPENAI_API_KEY": "dummy", "MODEL_NAME": "rehearsal"})
    flawed = cuga_model(route_of(parse_model("rehearsal:builds_early")), {}, url=URL)
    assert flawed.env["MODEL_NAME"] == "rehearsal:builds_early"


def test_real_models_go_through_cugas_own_settings_files() -> None:
    assert cuga_model(route_of(parse_model("watsonx:openai/gpt-oss-120b")), {}) == CugaModel(
        "settings.watsonx.toml", {"MODEL_NAME": "openai/gpt-oss-120b"})
    assert cuga_model(route_of(parse_model("rits:openai/gpt-oss-120b")), {}) == CugaModel(
        "settings.rits.toml", {"MODEL_NAME": "openai/gpt-oss-120b"})
    plain = cuga_model(route_of(parse_model("openai:gpt-4o")), {})
    assert plain == CugaModel("settings.openai.toml", {"MODEL_NAME": "gpt-4o"})
    compatible = cuga_model(route_of(parse_model("openai:my-model")), {"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"})
    assert compatible.env == {"MODEL_NAME": "my-model", "OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"}


def test_an_unmapped_model_cannot_be_opened() -> None:
    with pytest.raises(HostError, match="anthropic"):
        cuga_model(route_of(parse_model("anthropic:claude-sonnet-4-5")), {})


def usage_problems(model: str | Route, env: dict[str, str]) -> list[str]:
    """What the host says stops it, leaving out a client that is not installed (a skip, not a usage error)."""
    with pytest.MonkeyPatch.context() as patch:  # as if installed: these tests are about models and credentials
        patch.setattr(cuga_module, "installed_problem", lambda: None)
        patch.setattr(cuga_setup, "probe", lambda *args, **kwargs: Probe())
        route = route_of(parse_model(model)) if isinstance(model, str) else model
        return [str(p) for p in CugaHost().check(route, env)]


def test_missing_credentials_are_named_before_any_case_and_values_never_shown() -> None:
    assert usage_problems(REHEARSAL, {}) == []
    [openai] = usage_problems("openai:gpt-4o", {})
    assert "OPENAI_API_KEY" in openai and "OPENAI_BASE_URL" in openai
    [rits] = usage_problems("rits:openai/gpt-oss-120b", {"OPENAI_API_KEY": SECRET})
    assert "RITS_API_KEY" in rits and SECRET not in rits
    [watsonx] = usage_problems("watsonx:openai/gpt-oss-120b", {"WATSONX_APIKEY": SECRET})
    assert "WATSONX_URL" in watsonx and "WATSONX_PROJECT_ID or WATSONX_SPACE_ID" in watsonx
    assert SECRET not in watsonx and "WATSONX_APIKEY" not in watsonx
    assert credentials_needed(route_of(parse_model("rits:m")), {"RITS_API_KEY": SECRET, "RITS_BASE_URL": "u"}) == []


def test_a_rits_model_other_than_cugas_default_needs_its_own_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cuga_setup, "rits_default_model", lambda: "google/gemma-4-31B-it")
    [problem] = credentials_needed(route_of(parse_model("rits:openai/gpt-oss-120b")), {"RITS_API_KEY": SECRET})
    assert "RITS_BASE_URL" in problem and "google/gemma-4-31B-it" in problem and SECRET not in problem
    assert credentials_needed(route_of(parse_model("rits:google/gemma-4-31B-it")), {"RITS_API_KEY": SECRET}) == []


# -- availability ----------------------------------------------------------------------------------


def _executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_without_uv_the_host_is_unavailable_and_says_how_to_fix_it(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "venv" / "bin" / "python"))
    [problem] = CugaHost().check(REHEARSAL, {})
    assert problem.skip and "uv" in str(problem) and "pip install uv" in str(problem)


def test_uv_beside_an_unactivated_interpreter_is_found_and_put_on_the_agents_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uv = _executable(tmp_path / "venv" / "bin" / "uv")
    monkeypatch.setattr(sys, "executable", str(tmp_path / "venv" / "bin" / "python"))
    assert find_uv({"PATH": str(tmp_path / "empty")}) == uv
    empty = tmp_path / "empty"
    assert agent_path(f"{empty}:/bin", uv) == f"{empty}:/bin:{uv.parent}"
    assert agent_path(f"{uv.parent}:/bin", uv) == f"{uv.parent}:/bin"  # already there: unchanged


def test_without_the_sdk_the_reason_names_the_lean_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    reason = import_problem() or ""
    assert "not installed" in reason and "--no-deps cuga==" in reason and "requirements-cuga.txt" in reason


def test_an_sdk_that_fails_to_import_is_unavailable_with_the_error(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    python = _executable(tmp_path / "python", "#!/bin/sh\necho 'Traceback (most recent call last):' >&2\n"
                                              "echo \"ModuleNotFoundError: No module named 'jinja2'\" >&2\nexit 1\n")
    reason = import_problem(str(python)) or ""
    assert "No module named 'jinja2'" in reason and INSTALL_HINT in reason


@pytest.mark.end_to_end
def test_the_host_never_imports_cuga_into_the_harness() -> None:
    """CUGA is asked in a probe of its own (3,000 modules, 3.5 CPU-s): a session describing it imports none."""
    code = ("import sys, pytest_palette.hosts.cuga as m\nfrom pytest_palette.models import parse_model\n"
            "from pytest_palette.layer.route import route_of\n"
            "from pytest_palette.hosts.base import HostSettings\n"
            "facts = m.CugaHost().describe(route_of(parse_model('rehearsal')), HostSettings())\n"
            "print(facts.get('cuga_model'), any(n == 'cuga' or n.startswith('cuga.') for n in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    expected = "None False" if _REASON else "openai/rehearsal (settings.openai.toml) False"
    assert done.stdout.strip().splitlines()[-1] == expected


@pytest.mark.end_to_end
def test_the_plugin_registers_the_cuga_host() -> None:
    done = subprocess.run([sys.executable, "-m", "pytest", "--host=cuga", "--co", "-q", "-p", "no:cacheprovider",
                           "-m", "core"], cwd=Path(__file__).parent.parent, capture_output=True, text=True,
                          timeout=120)
    assert "no such host" not in done.stdout + done.stderr
    assert "plain_request[cuga]" in done.stdout


# -- budgets and the report ------------------------------------------------------------------------


def test_a_code_block_may_run_as_long_as_run_command_and_no_longer() -> None:
    assert block_timeout(HostSettings()) == RUN_COMMAND_CEILING == 120
    assert block_timeout(HostSettings(command_timeout=60)) == 60


def test_describe_reports_the_budgets_even_without_cuga(monkeypatch: pytest.MonkeyPatch) -> None:
    host = CugaHost()
    monkeypatch.setattr(cuga_module, "installed_problem", lambda: "not installed")
    facts = host.describe(REHEARSAL, HostSettings())
    assert facts["model"] == REHEARSAL.model.label and facts["sandbox_execution_timeout"] == "120 s"
    assert facts["skill_loading"].startswith("lazy")
    # The header says where the model's key is: with the harness, or (a client that exchanges it) in the sandbox.
    assert facts["model_key"].startswith("held by the harness")
    assert facts["worker"].startswith("a process of its own per conversation, in the item's sandbox")
    for provider in ("watsonx:openai/gpt-oss-120b", "rits:openai/gpt-oss-120b"):
        assert host.describe(route_of(parse_model(provider)), HostSettings())["model_key"].startswith("in the sandbox")
    assert host.describe(route_of(parse_model("openai:gpt-4o")), HostSettings())["model_key"].startswith("held by")


def test_a_turns_steps_are_the_tool_calls_in_the_models_code() -> None:
    assert code_steps('```python\nr = await load_skill("palette")\nprint(r)\n```') == ["→ load_skill: palette"]
    run = "```python\nprint(await run_command('python3 skills/palette/scripts/deck.py find --root .'))\n```"
    assert code_steps(run) == ["→ run_command: python3 skills/palette/scripts/deck.py find --root ."]
    assert code_steps("```python\nx = 1 + 1\nprint(x)\n```") == ["→ code: x = 1 + 1"]
    assert code_steps("Here is the plan. Reply **yes** to build it.") == []


def test_an_answer_is_read_whole_or_streamed_and_nothing_else_is_an_answer() -> None:
    whole = json.dumps({"choices": [{"message": {"content": "```python\nprint(1)\n```"}}]}).encode()
    assert answer_text(whole) == "```python\nprint(1)\n```"
    streamed = b"".join(b"data: " + json.dumps({"choices": [{"delta": {"content": part}}]}).encode() + b"\n\n"
                        for part in ("Here is ", "the plan")) + b"data: [DONE]\n\n"
    assert answer_text(streamed) == "Here is the plan"
    assert answer_text(b"not json") == answer_text(b'{"error": "429"}') == answer_text(b"[1, 2]") == ""


# -- the worker's channel: a stand-in worker, so no CUGA is needed ---------------------------------------------

#: A worker that says what the test's body makes it say; `say` writes one message, `hear` reads one.
STAND_IN = """import json, os, sys, urllib.request
def say(kind, **fields):
    sys.stdout.write(json.dumps({"kind": kind, **fields}) + "\\n"); sys.stdout.flush()
def hear():
    return json.loads(sys.stdin.readline())
def warm():
    pass
def main():
    start = hear()
    if "env" in start:  # forked from the warm process, as the real worker is: its environment and folder
        os.environ.clear(); os.environ.update(start["env"]); os.chdir(start["cwd"])
BODY
    return 0
if __name__ == "__main__":
    sys.exit(main())
"""


def stand_in(body: str) -> str:
    """A worker that does `body` once it has its start (a program the fork server can warm, or run by path)."""
    return STAND_IN.replace("BODY", textwrap.indent(body, "    "))


def _stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str,
              env: dict[str, str] | None = None) -> tuple[CugaHost, Workspace, Any]:
    script = tmp_path / "stand_in.py"
    system = json.loads(FIXTURE.read_text(encoding="utf-8"))["system"]  # the script alone is readable in the sandbox
    script.write_text(stand_in(body.replace("SYSTEM", repr(system))), encoding="utf-8")
    monkeypatch.setattr(cuga_module, "WORKER", script)
    host = CugaHost()
    workspace = Workspace(tmp_path, PurePosixPath("item"))
    workspace.work.mkdir()
    settings = HostSettings(sandbox=SANDBOX)
    sandbox = open_sandbox(workspace, settings)
    sandbox.prepare()
    return host, workspace, lambda: host.open(workspace, None, {**agent_environment(workspace.trace), **(env or {})},
                                              REHEARSAL, settings, sandbox)


@pytest.mark.parametrize(("body", "said"), [
    ("print('hello')", "it sent a line that is not JSON"),
    ("say('run', id='one')", "it sent what it may not"),
    ("sys.stderr.write('CUGA would not import\\n'); sys.exit(3)",
     "it ended (exit code 3); the last of its log: CUGA would not import"),
    ("say('failed', error='ImportError: no module named cuga')", "CUGA could not start in its worker: ImportError"),
])
@pytest.mark.end_to_end
def test_a_worker_that_does_not_start_is_a_host_error_naming_what_it_did(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, said: str) -> None:
    host, workspace, open_session = _stand_in(tmp_path, monkeypatch, body)
    try:
        with pytest.raises(HostError) as failed:
            open_session()
        assert said in str(failed.value)
        assert (workspace.folder / "cuga.log").is_file()
    finally:
        host.close()


@pytest.mark.end_to_end
def test_a_worker_line_over_the_bound_ends_the_conversation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cuga_module, "MAX_MESSAGE", 1000)
    host, _, open_session = _stand_in(tmp_path, monkeypatch, "say('ready', skills=['x' * 2000])")
    try:
        with pytest.raises(HostError, match="it sent a message over"):
            open_session()
    finally:
        host.close()


CHANNEL_TURN = """say("ready", skills=[])
turn = hear()
root = os.path.join(os.getcwd(), "cuga_workspace", "t")
os.makedirs(root)
say("run", id=1, command="echo outside > escaped.txt", cwd=root + "/../../../..", env={}, timeout=10)
say("run", id=2, command="echo $HOME; echo inside > made.txt", cwd=root, env={}, timeout=10)
say("run", id=3, command="echo $UV_NO_CONFIG $HOSTILE_SECRET", cwd=root, env={"UV_NO_CONFIG": "1",
    "HOSTILE_SECRET": "from the worker"}, timeout=10)
ran = sorted((hear() for _ in range(3)), key=lambda message: message["id"])
system = SYSTEM  # what real CUGA said: it offers the skill
request = {"model": "rehearsal", "stream": False, "messages": [{"role": "system", "content": system},
                                                              {"role": "user", "content": turn["message"]}]}
asked = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", json.dumps(request).encode(),
                               {"Content-Type": "application/json",
                                "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
model = json.loads(urllib.request.urlopen(asked, timeout=30).read())
say("done", answer=json.dumps({"ran": ran, "model": model["choices"][0]["message"]["content"],
                               "env": dict(os.environ)}), usage={"input_tokens": 7})
hear()
"""


@pytest.mark.end_to_end
def test_the_harness_runs_the_workers_commands_reads_its_model_and_gives_it_no_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = {"OPENAI_API_KEY": SECRET, "HOSTILE_SECRET": SECRET}
    host, workspace, open_session = _stand_in(tmp_path, monkeypatch, CHANNEL_TURN, env=secret)
    try:
        session = open_session()
        steps: list[str] = []
        session.on_step = steps.append
        turn = session.send("Make a 3-slide deck about tides", 60)
        session.close()
    finally:
        host.close()
    said = json.loads(turn.answer)
    refused, inside, variables = said["ran"]
    # A folder outside work/ is refused before anything runs; inside it, each command runs in the sandbox.
    assert refused["code"] is None and "not inside the item's work folder" in refused["stderr"]
    assert not (workspace.folder.parent / "escaped.txt").exists()
    assert inside["code"] == 0 and inside["stdout"].strip().endswith("cuga_workspace/t")
    assert (workspace.work / "cuga_workspace" / "t" / "made.txt").read_text() == "inside\n"
    # A command gets the worker's allow-listed variables (CUGA's own), never one off the list.
    assert variables["stdout"].split() == ["1"]
    # The two run at once, so the log holds them in the order they ended: compare without order.
    commands = sorted(run.command for run in read_commands(workspace.command_log().path))
    assert commands == ["echo $HOME; echo inside > made.txt", "echo $UV_NO_CONFIG $HOSTILE_SECRET"]
    # The model is reached through the harness's forwarder, whose record of its answer makes the turn's steps.
    assert "load_skill" in said["model"] or "run_command" in said["model"]
    assert turn.steps and turn.steps == steps and turn.steps[0] in code_steps(said["model"])
    assert turn.usage == {"input_tokens": 7} and turn.retries == 0
    # Why it ended and how many model answers the harness's forwarder heard: its own record, not the worker's word.
    assert turn.stop == "answered" and turn.model_calls == 1
    # No key in the worker: the forwarder holds it (the rehearsal model needs none), and nothing of the caller's;
    # its client holds the forwarder's token.
    assert SECRET not in turn.answer and said["env"]["OPENAI_API_KEY"].startswith("palette-forwarder-")
    assert said["env"]["PALETTE_TRACE"] == str(workspace.trace)


def test_a_provider_whose_client_holds_its_key_gets_it_in_the_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "stand_in.py"
    script.write_text(stand_in("say('ready', skills=[])\nhear()\nsay('done', answer=json.dumps(dict(os.environ)))\n"
                               "hear()\n"), encoding="utf-8")
    monkeypatch.setattr(cuga_module, "WORKER", script)
    workspace = Workspace(tmp_path, PurePosixPath("item"))
    workspace.work.mkdir()
    settings = HostSettings(sandbox=SANDBOX)
    sandbox = open_sandbox(workspace, settings)
    sandbox.prepare()
    env = {**agent_environment(workspace.trace), "WATSONX_APIKEY": SECRET, "WATSONX_PROJECT_ID": "p",
           "OPENAI_API_KEY": SECRET}
    watsonx = route_of(parse_model("watsonx:openai/gpt-oss-120b"))
    session = CugaHost().open(workspace, None, env, watsonx, settings, sandbox)
    try:
        seen = json.loads(session.send("hello", 30).answer)
    finally:
        session.close()
        sandbox.close()
    # watsonx's client exchanges its key itself: the worker holds it (and no other provider's); the header says so
    # (test_describe_reports_the_budgets_even_without_cuga).
    assert seen["WATSONX_APIKEY"] == SECRET and seen["WATSONX_PROJECT_ID"] == "p" and "OPENAI_API_KEY" not in seen


@pytest.mark.end_to_end
def test_a_worker_that_never_answers_is_stopped_at_the_turns_timeout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cuga_module, "TURN_GRACE", 0.5)
    host, _, open_session = _stand_in(tmp_path, monkeypatch, "say('ready', skills=[])\nhear()\nimport time\n"
                                                             "time.sleep(600)\n")
    try:
        session = open_session()
        with pytest.raises(TurnStopped, match=r"timed out after 1 s \(the worker did not end it\)") as stopped:
            session.send("hello", 1)
        assert stopped.value.reason == "turn_timeout" and session.turns[-1].model_calls == 0
        assert session._process is not None and session._process.poll() is not None
        with pytest.raises(HostError, match="cannot continue"):
            session.send("yes", 1)
        session.close()
    finally:
        host.close()


# -- the skill, installed where CUGA looks ---------------------------------------------------------


def test_the_skill_is_installed_fresh_and_byte_identical(tmp_path: Path) -> None:
    card = load_skill("palette")
    installed = install(card, tmp_path / ".cuga").directory
    assert installed == tmp_path / ".cuga" / "skills" / "palette" and drift(card.directory, installed) == []
    assert install(card, tmp_path / ".cuga").directory == installed  # identical: used as it is
    (installed / "stray.md").write_text("left by an earlier run")
    with pytest.raises(InstallError):  # never deleted: the item's folder is new, so this is not ours
        install(card, tmp_path / ".cuga")
    assert (installed / "stray.md").exists()


def test_drift_names_changed_missing_and_extra_files(tmp_path: Path) -> None:
    card = load_skill("palette")
    installed = install(card, tmp_path / ".cuga").directory
    (installed / "SKILL.md").write_text("edited")
    (installed / "scripts" / "deck.py").unlink()
    (installed / "notes.md").write_text("extra")
    found = "\n".join(drift(card.directory, installed))
    assert "SKILL.md differs" in found and "deck.py is missing" in found and "notes.md is not in the skill" in found
    assert drift(card.directory, tmp_path / "nowhere") == [f"{tmp_path / 'nowhere'} does not exist"]


# -- the rehearsal wire, read against what real CUGA sent ------------------------------------------


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(FIXTURE.read_text(encoding="utf-8"))
    return data


def _request(recorded: dict[str, Any], name: str) -> dict[str, Any]:
    messages = [{"role": "system", "content": recorded["system"]}, *recorded["requests"][name]]
    return {**recorded["params"], "messages": messages}


def test_real_cuga_appends_its_variables_to_the_users_words_and_the_wire_removes_them(
        recorded: dict[str, Any]) -> None:
    request = _request(recorded, "edit_reply")
    last = request["messages"][-1]["content"]
    assert last.startswith("make it 5 slides\n\n## Available Variables\n\n")  # the shape CUGA 0.4.3 sends
    said = [e for e in openai_wire.to_conversation(request).events if isinstance(e, UserSaid)]
    assert said[-1].text == "make it 5 slides"
    content = openai_wire.complete(RehearsalPolicy(), request)["choices"][0]["message"]["content"]
    assert "deck.py find --root ." in content and "```python" in content


def test_real_cugas_execution_output_is_read_without_its_variables(recorded: dict[str, Any]) -> None:
    request = _request(recorded, "build_status")
    assert request["messages"][-1]["content"].startswith("Execution output:\n{")
    assert "## Available Variables" in request["messages"][-1]["content"]
    results = [e for e in openai_wire.to_conversation(request).events if isinstance(e, ToolResult)]
    status = json.loads(results[-1].text)
    assert status["done"] is True and "Available Variables" not in results[-1].text
    answer = openai_wire.complete(RehearsalPolicy(), request)["choices"][0]["message"]["content"]
    assert "```" not in answer and status["pptx"] in answer and "5 slides" in answer


def test_real_cugas_skills_block_offers_the_skill(recorded: dict[str, Any]) -> None:
    listing = openai_wire.skills_listing(recorded["system"])
    assert listing.startswith("- palette: REQUIRED for every request that produces slides")
    assert recorded["params"] == {"model": "rehearsal", "stream": False, "max_completion_tokens": 16000,
                                  "temperature": 0.1}


def test_a_message_without_variables_is_unchanged() -> None:
    assert openai_wire.without_variables("yes\n\n## Notes\nkeep") == "yes\n\n## Notes\nkeep"


# -- end to end: the real CugaAgent ----------------------------------------------------------------

_REASON = installed_problem()  # not the import probe: a second of CPU per worker at collection
needs_cuga = pytest.mark.skipif(_REASON is not None, reason=f"cuga host unavailable: {_REASON}")


@pytest.fixture(scope="module")
def host() -> Iterator[CugaHost]:
    running = CugaHost()
    yield running
    running.close()


def _open(host: CugaHost, tmp_path: Path, skill: SkillCard | None = None) -> tuple[CugaSession, Path]:
    workspace = Workspace(tmp_path, PurePosixPath("item"))  # an item's folder: work/, the trace, cuga.log
    workspace.work.mkdir()
    settings = HostSettings(sandbox=SANDBOX)
    sandbox = open_sandbox(workspace, settings)
    sandbox.prepare()
    session = host.open(workspace, skill or load_skill("palette"), agent_environment(workspace.trace), REHEARSAL,
                        settings, sandbox)
    return session, workspace.trace


def _recording(host: CugaHost, monkeypatch: pytest.MonkeyPatch) -> list[Conversation]:
    """Every conversation the rehearsal model is asked about from now on, as it read it."""
    policy = host.layer.rehearsal.server(REHEARSAL.model).policy
    seen: list[Conversation] = []
    decide = policy.next_action
    monkeypatch.setattr(policy, "next_action", lambda conversation: seen.append(conversation) or decide(conversation))
    return seen


def _talk(session: CugaSession, *messages: str) -> list[str]:
    try:
        return [session.send(message, 120).answer for message in messages]
    finally:
        session.close()


@pytest.mark.end_to_end
@needs_cuga
def test_with_no_skill_cuga_offers_none_and_its_agent_writes_a_deck_of_its_own(
        host: CugaHost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _recording(host, monkeypatch)
    workspace = Workspace(tmp_path, PurePosixPath("item"))
    workspace.work.mkdir()
    settings = HostSettings(sandbox=SANDBOX)
    sandbox = open_sandbox(workspace, settings)
    sandbox.prepare()
    session = host.open(workspace, None, agent_environment(workspace.trace), REHEARSAL, settings, sandbox)
    outlined, done = _talk(session, "Build a 2-slide deck on tides", "yes")
    sandbox.close()
    assert "## Tides" in outlined and done.startswith("Your deck is ready:") and "(2 slides)" in done
    # Nothing installed, nothing offered: no skills folder, no <available_skills> block, no load_skill call.
    assert not (workspace.work / ".cuga" / "skills").exists()
    assert seen and not any("<available_skills>" in c.system or catalogue(c.system) for c in seen)
    assert not any("load_skill" in step for turn in session.turns for step in turn.steps)
    on_disk = read_folder(workspace.work, workspace.trace, 0)
    assert on_disk.pptx is not None and on_disk.slides == 2 and not on_disk.has_plex and deck_by(on_disk) == "agent"


@pytest.mark.end_to_end
@needs_cuga
def test_a_three_slide_deck_is_planned_approved_and_built_by_cugas_run_command(host: CugaHost,
                                                                                tmp_path: Path) -> None:
    # Loading CUGA sets what it reads at import (CUGA_DBS_DIR, ENV_FILE, …) for the life of the process;
    # everything an item sets on top of that is its own and goes when the item does.
    host.describe(REHEARSAL, HostSettings())
    before_env, before_cwd = dict(os.environ), os.getcwd()
    session, trace = _open(host, tmp_path)
    served_before = len(host.layer.rehearsal.server(REHEARSAL.model).served)
    answers = _talk(session, "Make a 3-slide deck about our Q3 results for the leadership team", "yes")
    assert "Reply **yes**" in answers[0] and answers[1].startswith("Your deck is ready:")
    assert session.turns[0].steps[0] == "→ load_skill: palette"
    assert any(step.startswith("→ run_command: python3 skills/palette/scripts/deck.py plan ")
               for step in session.turns[0].steps)
    assert session.turns[1].steps[-1] == "→ run_command: python3 skills/palette/scripts/deck.py status --out-dir ./deck"
    assert dict(os.environ) == before_env and os.getcwd() == before_cwd and "PALETTE_TRACE" not in os.environ
    # Where CUGA ran the commands: its own per-thread folder, with the skill it discovered copied in.
    workspace = session.workspace
    assert workspace.parent.name == "cuga_workspace" and (workspace / "skills" / "palette" / "SKILL.md").is_file()
    deck = newest_deck(tmp_path / "work")
    assert deck == workspace / "deck" / "deck.pptx" and inspect_deck(deck).slides == 3
    calls = read_trace(trace)
    commands = [call["command"] for call in calls]
    assert commands[0] == "find" and "plan" in commands and commands[-2:] == ["start", "status"]
    assert json.loads(calls[0]["stdout"])["root"] == str(workspace)
    # The harness ran no deck.py itself: each call followed a model request CUGA sent to the endpoint.
    served = host.layer.rehearsal.server(REHEARSAL.model).served[served_before:]
    assert len(served) > len(calls) and {route for route, _ in served} == {"/v1/chat/completions"}
    assert (tmp_path / "cuga.log").is_file()
    # Our own record of what CUGA's run_command ran: the same calls, each with its times, exit code and output.
    seen = skill_calls(read_commands(tmp_path / "commands.jsonl"))
    assert [call["command"] for call in seen] == commands
    assert all(call["exit_code"] == 0 and call["seconds"] >= 0 for call in seen)
    assert [json.loads(call["stdout"]).get("done") for call in seen][-1] is True
    assert [call["at"] for call in seen] == sorted(call["at"] for call in seen)


@pytest.mark.end_to_end
@needs_cuga
def test_an_edit_conversation_edits_and_never_replans(host: CugaHost, tmp_path: Path) -> None:
    session, trace = _open(host, tmp_path)
    _talk(session, "Make a 3-slide deck about our Q3 results for the leadership team", "make it 5 slides", "yes")
    commands = [call["command"] for call in read_trace(trace)]
    assert "edit" in commands and "plan" not in commands[commands.index("edit"):]
    [edit] = [call for call in read_trace(trace) if call["command"] == "edit"]
    assert edit["args"]["instruction"] == "make it 5 slides"
    deck = newest_deck(tmp_path / "work")
    assert deck is not None and inspect_deck(deck).slides == 5


@pytest.mark.end_to_end
@needs_cuga
def test_a_decline_leaves_no_deck(host: CugaHost, tmp_path: Path) -> None:
    session, trace = _open(host, tmp_path)
    _talk(session, "Make a 3-slide deck about our Q3 results for the leadership team", "actually, hold off")
    commands = [call["command"] for call in read_trace(trace)]
    assert "plan" in commands and "start" not in commands
    assert any_deck(tmp_path / "work") == []


@pytest.mark.end_to_end
@needs_cuga
def test_a_skill_cuga_cannot_discover_stops_the_item_naming_the_folder(host: CugaHost, tmp_path: Path) -> None:
    broken = tmp_path / "broken" / "palette"
    (broken / "scripts").mkdir(parents=True)
    (broken / "SKILL.md").write_text("---\nname: palette\n---\n\n# No description, so CUGA skips it\n")
    (tmp_path / "run").mkdir()
    with pytest.raises(HostError, match=r"discover_skills does not find 'palette' in .*\.cuga/skills"):
        _open(host, tmp_path / "run", load_card(broken))


@pytest.mark.end_to_end
@needs_cuga
def test_a_turn_past_its_timeout_is_a_host_error_and_ends_the_conversation(host: CugaHost, tmp_path: Path) -> None:
    session, _ = _open(host, tmp_path)
    try:
        with pytest.raises(TurnStopped, match=r"timed out after 0\.01 s") as stopped:
            session.send("Make a 3-slide deck about tides", 0.01)
        assert stopped.value.reason == "turn_timeout"
        assert session.turns[-1].error and "timed out" in session.turns[-1].error
        with pytest.raises(HostError, match="cannot continue"):
            session.send("yes", 120)
    finally:
        session.close()


@pytest.mark.end_to_end
@needs_cuga
def test_preflight_and_describe_read_cugas_own_discovery_and_settings(host: CugaHost) -> None:
    assert host.check(REHEARSAL, {}, load_card(PACKAGED_SKILLS / "palette")) == []
    facts = host.describe(REHEARSAL, HostSettings())
    assert facts["model"] == REHEARSAL.model.label
    assert facts["cuga_model"] == "openai/rehearsal (settings.openai.toml)"
    assert facts["sandbox_execution_timeout"] == "120 s" and facts["cuga_max_steps"].isdigit()


@pytest.mark.end_to_end
@needs_cuga
def test_preflight_reports_a_skill_cuga_would_not_discover(host: CugaHost, tmp_path: Path) -> None:
    (tmp_path / "palette").mkdir()
    (tmp_path / "palette" / "SKILL.md").write_text("---\nname: palette\n---\n\nbody\n")
    [problem] = host.check(REHEARSAL, {}, load_card(tmp_path / "palette"))
    assert "discover_skills does not find 'palette'" in str(problem)


@pytest.mark.end_to_end
@needs_cuga
def test_each_models_file_is_read_by_a_probe_of_its_own(host: CugaHost) -> None:
    assert host.describe(REHEARSAL, HostSettings())["cuga_model"] == "openai/rehearsal (settings.openai.toml)"
    # CUGA reads its models file once per process: a second file is a second probe, not a stale answer.
    watsonx = host.describe(route_of(parse_model("watsonx:openai/gpt-oss-120b")), HostSettings())
    assert watsonx["cuga_model"] == "watsonx/openai/gpt-oss-120b (settings.watsonx.toml)"


class DictCache:
    """pytest's Cache as far as the host uses it: JSON values by key."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def get(self, key: str, default: Any) -> Any:
        try:
            return json.loads(self.values[key])
        except (KeyError, ValueError):
            return default

    def set(self, key: str, value: Any) -> None:
        self.values[key] = json.dumps(value)


def test_a_probe_is_kept_per_interpreter_models_file_and_skill_and_a_problem_is_asked_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, str | None]] = []
    answers = {"settings.openai.toml": cuga_setup.Probe(skills=("palette",), model="openai/rehearsal",
                                                         max_steps="30"),
               "settings.broken.toml": cuga_setup.Probe("the CUGA SDK cannot be imported (boom)")}

    def probe(settings_file: str, variables: Any, skills: Path | None = None) -> cuga_setup.Probe:
        asked.append((settings_file, variables.get("MODEL_NAME")))
        return answers[settings_file]

    monkeypatch.setattr(cuga_setup, "probe", probe)
    cache: Any = DictCache()
    model = {"MODEL_NAME": "rehearsal", "OPENAI_API_KEY": "sk-the-key"}
    first = cuga_setup.cached_probe(cache, "settings.openai.toml", model, Path("x"), "skill-a")
    again = cuga_setup.cached_probe(cache, "settings.openai.toml", {**model, "OPENAI_API_KEY": "another"},
                                     Path("y"), "skill-a")
    assert first == again == answers["settings.openai.toml"] and len(asked) == 1
    # Another skill, another model or no cache at all is a probe of its own.
    cuga_setup.cached_probe(cache, "settings.openai.toml", model, Path("x"), "skill-b")
    cuga_setup.cached_probe(cache, "settings.openai.toml", {"MODEL_NAME": "gpt"}, Path("x"), "skill-a")
    cuga_setup.cached_probe(None, "settings.openai.toml", model, Path("x"), "skill-a")
    assert asked[1:] == [("settings.openai.toml", "rehearsal"), ("settings.openai.toml", "gpt"),
                         ("settings.openai.toml", "rehearsal")]
    # A problem is never kept: the next session asks again, and sees its fix.
    for _ in range(2):
        assert cuga_setup.cached_probe(cache, "settings.broken.toml", model).problem
    assert len(asked) == 6 and len(cache.values) == 3
    # No key is written, and an entry that is not a probe's answer is asked again.
    assert not any("sk-the-key" in key + value for key, value in cache.values.items())
    for torn in ('{"skills": 3}', '{"model": "m"}', "[1]"):
        for key in cache.values:
            cache.values[key] = torn
        cuga_setup.cached_probe(cache, "settings.openai.toml", model, Path("x"), "skill-a")
    assert len(asked) == 9


FENCED = """Release notes, as our engineers wrote them

## What changed
- The client retries with `backoff()` now:

```python
for attempt in range(3):
    print(f'''try {attempt}''')  # "quotes" and \\ backslashes
```

## What is next
- [[3 slides]] for the review; naïve café numbers: 4.2 → 5.1
"""


@pytest.mark.end_to_end
@needs_cuga
def test_pasted_material_with_code_fences_reaches_the_plan_whole(host: CugaHost, tmp_path: Path) -> None:
    session, trace = _open(host, tmp_path)
    try:
        answers = _talk(session, f"Turn these notes into a deck\n\n{FENCED}", "yes")
    finally:
        session.close()
    assert "Reply **yes**" in answers[0] and answers[1].startswith("Your deck is ready:")
    [plan] = [call for call in read_trace(trace) if call["command"] == "plan"]
    assert plan["args"]["context"] == FENCED.strip() and plan["args"]["request"] == "Turn these notes into a deck"
    deck = newest_deck(tmp_path / "work")
    assert deck is not None and inspect_deck(deck).has_plex
