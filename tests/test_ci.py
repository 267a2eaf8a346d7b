"""What CI reads of a session: the JUnit failure message and the GitHub step summary."""

from __future__ import annotations

import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

# One case the rehearsal agent passes, one it fails twice over (4 slides and an edit expected; 3 asked for and
# built, no change asked).
CASES = """
- name: three_slides
  covers: a plain yes builds what was asked
  request: Build a 3-slide deck on prompt caching
  expect:
    slides: 3
- name: wrong_count
  covers: the judge compares the slide count exactly
  tags: [edit]
  request: Build a 3-slide deck on prompt caching
  expect:
    slides: 4
"""

CRASHING_HOST = """
from pytest_palette.hosts.base import Host, HostError, HostSession

class Crashes(HostSession):
    def send(self, message, timeout):
        raise HostError("the client crashed")

class CrashingHost(Host):
    name = "crashing"
    def open(self, workspace, skill, env, route, settings, sandbox):
        return Crashes()

def pytest_palette_add_hosts(hosts, config):
    hosts["crashing"] = CrashingHost()
"""

FAILED_WORDS = ("asked for 4 slides, got 3; the user asked for a change but edit-plan was never called "
                "(calls: find, plan, find, start, status)")


def _testcases(path: Path) -> dict[str, ET.Element]:
    return {str(case.get("name")): case for case in ET.parse(path).getroot().iter("testcase")}


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_the_junit_failure_message_is_the_judges_words(pytester: pytest.Pytester, cases: Path,
                                                        xdist: list[str]) -> None:
    pytester.makeconftest(CRASHING_HOST)
    result = pytester.runpytest_subprocess("--host", "react,crashing", "-k", "wrong_count", "--junitxml=out.xml",
                                           "-p", "no:cacheprovider", "-ra", *xdist)
    result.assert_outcomes(failed=1, errors=1)
    testcases = _testcases(pytester.path / "out.xml")
    [failure] = testcases["wrong_count[react]"].iter("failure")
    assert failure.get("message") == FAILED_WORDS
    assert "palette case wrong_count[react] failed:" in (failure.text or "")  # the whole report stays the text
    [error] = testcases["wrong_count[crashing]"].iter("error")
    assert error.get("message") == 'failed on setup with "crashing: turn 1 failed: the client crashed"'
    # The short summary reads the same words.
    result.stdout.fnmatch_lines([f"FAILED cases/cases.yaml::wrong_count[[]react[]] - {FAILED_WORDS[:30]}*"])


def test_a_users_own_failing_test_keeps_pytests_message(pytester: pytest.Pytester, cases: Path) -> None:
    pytester.makepyfile(test_mine=textwrap.dedent("""
        def test_mine(record_property):
            record_property("palette.record", "not a record")
            assert 1 == 2
    """))
    result = pytester.runpytest("test_mine.py", "--junitxml=out.xml", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    [failure] = _testcases(pytester.path / "out.xml")["test_mine"].iter("failure")
    assert (failure.get("message") or "").startswith("assert 1 == 2")


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_the_step_summary_gets_the_matrix_appended(pytester: pytest.Pytester, cases: Path,
                                                   monkeypatch: pytest.MonkeyPatch, xdist: list[str]) -> None:
    summary = pytester.path / "summary.md"
    summary.write_text("an earlier step's summary\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    pytester.makeconftest(CRASHING_HOST)
    result = pytester.runpytest_subprocess("--host", "react,crashing", "-p", "no:cacheprovider", *xdist)
    result.assert_outcomes(passed=1, failed=1, errors=2)
    text = summary.read_text()
    assert text.startswith("an earlier step's summary\n### pytest-palette: run ")
    assert text.count("### pytest-palette") == 1  # once, by the controller: never by a worker
    lines = text.splitlines()
    assert "| case | react | crashing |" in lines
    # One formatter for every cell (results/marks.py): an errored run reads as the site and the report print it.
    assert "| three_slides | pass | ERROR ×1 |" in lines and "| wrong_count | FAIL 0.33 | ERROR ×1 |" in lines
    assert any(line.startswith("- react: 1 passed, 1 failed, 0 errored · model rehearsal") and
               line.endswith("· commands bubblewrap") for line in lines), lines
    assert "- crashing: 0 passed, 0 failed, 2 errored · model rehearsal (scripted stand-in, not a language " \
           "model) · commands bubblewrap" in lines
    assert f"- `wrong_count[react]` FAIL: {FAILED_WORDS}" in lines
    assert "- `three_slides[crashing]` ERROR: crashing: turn 1 failed: the client crashed" in lines


def test_repeats_show_passes_of_n_in_the_step_summary(pytester: pytest.Pytester, cases: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = pytester.runpytest("--palette-runs", "2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=2)
    lines = summary.read_text().splitlines()
    assert "| three_slides | 2/2 |" in lines and "| wrong_count | 0/2 0.33 |" in lines
    assert f"- `wrong_count[react-2]` FAIL: {FAILED_WORDS}" in lines


def test_an_unwritable_step_summary_is_a_warning_naming_the_variable(pytester: pytest.Pytester, cases: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path))  # a folder: no file can be appended there
    result = pytester.runpytest("-k", "three_slides", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["palette: could not append the matrix to $GITHUB_STEP_SUMMARY (*): Is a directory"])
