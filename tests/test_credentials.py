"""Credentials from one file (issue 21): ~/.config/palette/env or $PALETTE_ENV, parsed and never run, refused when
others can read it, the environment winning over it; its names are named, its values never shown, and the agent's
commands get none of it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pytest_palette.arena.sandbox import Sandbox, allowed_environment, problem
from pytest_palette.hosts.claude import ClaudeSession
from pytest_palette.run.credentials import Credentials, CredentialsError, describe, load, location, parse

FILE_KEY = "fake-file-key-5b6d3ae8"
FAKE_FLAG = "fake-no-color-secret-4ed0"


def written(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "env"
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return path


def test_key_value_lines_are_parsed_and_nothing_is_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    text = ("# the seed benchmark's file\n\n"
            "RITS_API_KEY=plain-value\n"
            "export WATSONX_URL='https://us-south.ml.cloud.ibm.com'  # region\n"
            'WATSONX_PROJECT_ID="with \\"quotes\\" and # hash"\n'
            "  SPACED = value # a comment\n"
            f"SHELL_LIKE=$(touch {marker})\n"
            "CHANNELS=channels:read\n"
            "RITS_API_KEY=later-wins\n")
    assert parse(text, Path("env")) == {
        "RITS_API_KEY": "later-wins", "WATSONX_URL": "https://us-south.ml.cloud.ibm.com",
        "WATSONX_PROJECT_ID": 'with "quotes" and # hash', "SPACED": "value",
        "SHELL_LIKE": f"$(touch {marker})", "CHANNELS": "channels:read"}
    assert not marker.exists()


@pytest.mark.parametrize(("line", "said"), [
    ("sk-secret-without-a-name", "env:3: not a KEY=value line"),
    ("1BAD=sk-secret", "env:3: not a KEY=value line"),
    ("KEY='sk-secret", "env:3: the value's ' is never closed"),
    ('KEY="sk-secret" trailing', "env:3: text after the value's closing \""),
])
def test_a_bad_line_is_one_line_naming_the_file_and_line_never_its_value(line: str, said: str) -> None:
    with pytest.raises(CredentialsError) as raised:
        parse(f"# comment\nGOOD=1\n{line}\n", Path("env"))
    assert said in str(raised.value) and "sk-secret" not in str(raised.value) and "\n" not in str(raised.value)


def test_the_file_is_found_where_the_seed_keeps_it_or_where_palette_env_says(tmp_path: Path) -> None:
    assert location({"HOME": "/home/u"}) == (Path("/home/u/.config/palette/env"), False)
    assert location({"HOME": "/home/u", "XDG_CONFIG_HOME": "/cfg"}) == (Path("/cfg/palette/env"), False)
    assert location({"PALETTE_ENV": "/x/env", "HOME": "/home/u"}) == (Path("/x/env"), True)
    assert load({"HOME": str(tmp_path)}) is None  # none there, none named: nothing to read
    with pytest.raises(CredentialsError, match=r"no such credentials file \(named by PALETTE_ENV\)"):
        load({"PALETTE_ENV": str(tmp_path / "missing")})
    (tmp_path / ".config" / "palette").mkdir(parents=True)
    written(tmp_path / ".config" / "palette", f"WATSONX_APIKEY={FILE_KEY}\n")
    found = load({"HOME": str(tmp_path)})
    assert found is not None and found.names == ("WATSONX_APIKEY",) and FILE_KEY not in repr(found)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_a_file_others_can_read_is_refused_with_the_fix(tmp_path: Path, mode: int) -> None:
    path = written(tmp_path, f"WATSONX_APIKEY={FILE_KEY}\n", mode)
    with pytest.raises(CredentialsError) as raised:
        load({"PALETTE_ENV": str(path)})
    said = str(raised.value)
    assert said.startswith(f"{path}: group or others can read") and f"chmod 600 {path}" in said
    assert FILE_KEY not in said


def test_the_environment_wins_and_the_header_names_only_names(tmp_path: Path) -> None:
    credentials = Credentials(tmp_path / "env", (("WATSONX_APIKEY", FILE_KEY), ("RITS_API_KEY", "file-rits"),
                                                 ("PALETTE_HOME", "/opt/palette"), ("EMPTY_IN_ENV", "filled")))
    environ = {"RITS_API_KEY": "shell-rits", "EMPTY_IN_ENV": ""}
    supplied = credentials.apply(environ)
    assert supplied == ("WATSONX_APIKEY", "PALETTE_HOME", "EMPTY_IN_ENV")
    assert environ == {"RITS_API_KEY": "shell-rits", "WATSONX_APIKEY": FILE_KEY, "PALETTE_HOME": "/opt/palette",
                       "EMPTY_IN_ENV": "filled"}
    line = describe(credentials, supplied)
    assert line.startswith(f"palette: credentials from {tmp_path / 'env'}: supplied WATSONX_APIKEY, PALETTE_HOME")
    assert "RITS_API_KEY set already: the environment wins" in line
    assert not any(value in line for value in (FILE_KEY, "file-rits", "shell-rits", "/opt/palette", "filled"))
    # The backend's PALETTE_* settings reach deck.py in the sandbox; every other name stays out of it.
    assert credentials.withheld() == ("WATSONX_APIKEY", "RITS_API_KEY", "EMPTY_IN_ENV", "PALETTE_ENV")
    assert credentials.withheld(passed=("RITS_API_KEY",)) == ("WATSONX_APIKEY", "EMPTY_IN_ENV", "PALETTE_ENV")


def test_the_sandbox_withholds_the_files_names_and_the_claude_host_redacts_their_values(tmp_path: Path) -> None:
    env = {"NO_COLOR": FAKE_FLAG, "WATSONX_APIKEY": FILE_KEY, "PALETTE_HOME": "/opt/palette", "PATH": "/usr/bin"}
    kept = allowed_environment(env, tmp_path, withheld=("NO_COLOR", "WATSONX_APIKEY"))
    assert "NO_COLOR" not in kept and "WATSONX_APIKEY" not in kept and kept["PALETTE_HOME"] == "/opt/palette"
    assert allowed_environment(env, tmp_path, passed=("NO_COLOR",), withheld=("NO_COLOR",))["NO_COLOR"] == FAKE_FLAG
    sandbox = Sandbox(tmp_path, env, "none", withheld=("NO_COLOR", "WATSONX_APIKEY"))
    assert "NO_COLOR" not in sandbox.env and set(sandbox.secrets) == {FAKE_FLAG, FILE_KEY}
    session = ClaudeSession(Path("claude"), tmp_path, None, env, "claude-sonnet-4-5", tmp_path, sandbox=sandbox)
    assert set(session._secrets) >= {FAKE_FLAG, FILE_KEY}


def test_a_readable_file_stops_the_session_before_anything_runs(pytester: pytest.Pytester,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    path = written(pytester.path, f"WATSONX_APIKEY={FILE_KEY}\n", 0o644)
    monkeypatch.setenv("PALETTE_ENV", str(path))
    pytester.makefile(".yaml", cases="- name: a\n  covers: x\n  request: Build a deck\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "cases.yaml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {path}: group or others can read*chmod 600 {path}"])
    assert FILE_KEY not in result.stdout.str() + result.stderr.str()


@pytest.mark.end_to_end
@pytest.mark.skipif(problem("bubblewrap") is not None, reason="bubblewrap cannot run here")
def test_the_files_values_reach_the_session_but_not_the_agents_commands_or_the_run(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("WATSONX_APIKEY", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)
    path = written(tmp_path, f"export WATSONX_APIKEY={FILE_KEY}\nNO_COLOR='{FAKE_FLAG}'\n")
    monkeypatch.setenv("PALETTE_ENV", str(path))
    pytester.makefile(".yaml", cases="- name: plain_request\n  covers: x\n  request: Build a 3-slide deck on tides\n")
    pytester.makeini("[pytest]\npalette_cases = .\n")
    # What the model clients are built from: the session's own environment, once the cases are collected.
    pytester.makeconftest("import os\n\ndef pytest_collection_finish(session):\n"
                          "    open('seen.json', 'w').write(__import__('json').dumps("
                          "[os.environ.get('WATSONX_APIKEY'), os.environ.get('NO_COLOR')]))\n")
    args = ["--palette-sandbox-env=PYTHONPATH"] if os.environ.get("PYTHONPATH") else []
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--host=react", "--model=rehearsal:dumps_env",
                                           *args)
    assert json.loads((pytester.path / "seen.json").read_text()) == [FILE_KEY, FAKE_FLAG]
    result.stdout.fnmatch_lines([f"palette: credentials from {path}: supplied WATSONX_APIKEY, NO_COLOR; *"])
    [record] = [json.loads(line) for line in next((pytester.path / "runs").glob("*/results.jsonl")).open()]
    assert record["outcome"] == "pass", record["failures"]
    [item] = (pytester.path / "runs").glob("*/react/plain_request")
    ran = {run["command"]: run["stdout"] for run in map(json.loads, (item / "commands.jsonl").open())}
    assert "PATH=" in ran["env"] and "WATSONX_APIKEY" not in ran["env"] and "NO_COLOR" not in ran["env"]
    assert "PALETTE_ENV" not in ran["env"]
    for found in (pytester.path / "runs").rglob("*"):
        if found.is_file():
            text = found.read_bytes().decode(errors="replace")
            assert FILE_KEY not in text and FAKE_FLAG not in text, found
    assert FILE_KEY not in result.stdout.str() + result.stderr.str()
    assert FAKE_FLAG not in result.stdout.str() + result.stderr.str()


def test_an_in_process_session_leaves_the_environment_as_it_found_it(pytester: pytest.Pytester,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WATSONX_APIKEY", raising=False)
    monkeypatch.setenv("RITS_API_KEY", "from-the-shell")
    path = written(pytester.path, f"WATSONX_APIKEY={FILE_KEY}\nRITS_API_KEY=from-the-file\n")
    monkeypatch.setenv("PALETTE_ENV", str(path))
    pytester.makefile(".yaml", cases="- name: a\n  covers: x\n  request: Build a deck\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "cases.yaml", "--co")
    result.stdout.fnmatch_lines([f"palette: credentials from {path}: supplied WATSONX_APIKEY "
                                 "(RITS_API_KEY set already: the environment wins)*"])
    assert "WATSONX_APIKEY" not in os.environ and os.environ["RITS_API_KEY"] == "from-the-shell"
