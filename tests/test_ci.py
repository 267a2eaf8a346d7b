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
    def open(self, workspace, skill, env, model, settings, sandbox):
        return Crashes()

def pytest_palette_add_hosts(hosts, config):
    hosts["crashing"] = CrashingHost()
"""

FAILED_WORDS = ("asked for 4 slides, got 3; the user asked for a change but edit-plan was never called "
                "(calls: find, plan, find, start, status)")


@pytest.fixture
def cases(pytester: pytest.Pytester) -> Path:
    pytester.mkdir("cases")
    path = pytester.path / "cases" / "cases.yaml"
    path.write_text(CASES)
    return path


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
