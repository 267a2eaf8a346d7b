"""Hooks pytest-palette calls, for projects and plugins that add hosts, or benchmark a skill of their own."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable

    from .hosts.base import Host
    from .rehearsal.policy import RehearsalPolicy
    from .rules import SkillRules


@pytest.hookspec
def pytest_palette_add_hosts(hosts: dict[str, Host], config: pytest.Config) -> None:
    """Add hosts to, or replace hosts in, ``hosts`` (name → Host), e.g. from a conftest.py:

    .. code-block:: python

        def pytest_palette_add_hosts(hosts, config):
            hosts["mine"] = MyHost()

    The plugin's own hosts are added first, so a project's entry replaces one of the same name.
    """


@pytest.hookspec
def pytest_palette_add_rules(rules: dict[str, SkillRules], config: pytest.Config) -> None:
    """Add the judge rules of a skill (skill name, as its SKILL.md says → SkillRules), e.g. from a conftest.py:

    .. code-block:: python

        def pytest_palette_add_rules(rules, config):
            rules["changelog"] = SkillRules(judge=changelog_rules, expect=check_changelog_expect)

    The session judges every case with the rules of the skill under test; a case gives that skill's own
    expectations under its name (``expect: {changelog: {…}}``). Palette's rules are added first, as "palette".
    """


@pytest.hookspec
def pytest_palette_add_rehearsals(agents: dict[str, Callable[[], RehearsalPolicy]], config: pytest.Config) -> None:
    """Add scripted agents that ``--model rehearsal:<name>`` selects, or replace the good one ("rehearsal"):
    a project that benchmarks its own skill offline gives the agent that drives it, and its known-bad agents.

    The package's agents are added first, so a project's entry replaces one of the same name. An agent says what
    it is, and reports name it so: a known-bad one sets ``known_bad = True`` on its class ("rehearsal:<name>
    (known-bad scripted agent, not a language model)"); any other is a good one, "rehearsal:<name> (scripted
    stand-in, not a language model)".
    """
