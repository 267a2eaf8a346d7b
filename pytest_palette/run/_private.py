"""The one place that touches pytest's private API, so a pytest upgrade has one file to check.

Case items are not functions, so pytest does not fill fixtures for them. This follows pytest's own
DoctestItem: compute the fixture closure once at construction, then fill it at setup. And
`--palette-check` runs pytest's configure step without a test session, as `--version` would.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from _pytest._code.code import TerminalRepr
from _pytest.fixtures import TopRequest

__all__ = ["TerminalRepr", "configured", "fill_fixtures", "init_fixtures"]


def init_fixtures(item: pytest.Item, *names: str) -> None:
    """Make `item` request `names` (and whatever they depend on), as a test function would."""
    item.add_marker(pytest.mark.usefixtures(*names))
    manager = item.session._fixturemanager
    info = manager.getfixtureinfo(node=item, func=None, cls=None)
    item._fixtureinfo = info  # type: ignore[attr-defined]
    item.fixturenames = info.names_closure  # type: ignore[attr-defined]
    item.funcargs = {}  # type: ignore[attr-defined]
    item._request = TopRequest(item, _ispytest=True)  # type: ignore[arg-type, attr-defined]


def fill_fixtures(item: pytest.Item) -> dict[str, Any]:
    """Run the fixtures' setup; their teardown is registered with pytest's setup state as usual."""
    item._request._fillfixtures()  # type: ignore[attr-defined]
    return item.funcargs  # type: ignore[attr-defined, no-any-return]


@contextlib.contextmanager
def configured(config: pytest.Config) -> Iterator[None]:
    """The config configured (every plugin's pytest_configure run) and unconfigured after, with no session."""
    config._do_configure()
    try:
        yield
    finally:
        config._ensure_unconfigure()
