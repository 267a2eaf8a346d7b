"""Hooks pytest-palette calls, for projects and plugins that add hosts."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .hosts.base import Host


@pytest.hookspec
def pytest_palette_add_hosts(hosts: dict[str, Host], config: pytest.Config) -> None:
    """Add hosts to, or replace hosts in, ``hosts`` (name → Host), e.g. from a conftest.py:

    .. code-block:: python

        def pytest_palette_add_hosts(hosts, config):
            hosts["mine"] = MyHost()

    The plugin's own hosts are added first, so a project's entry replaces one of the same name.
    """
