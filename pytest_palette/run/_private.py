"""The one place that touches pytest's private API, so a pytest upgrade has one file to check.

Case items are not functions, so pytest does not fill fixtures for them. This follows pytest's own
DoctestItem: compute the fixture closure once at construction, then fill it at setup. `--palette-check` runs
pytest's configure step without a test session, as `--version` would. And pytest finds its rootdir and ini file
before any plugin has added its options, so `--palette-skill DIR` (a space, not `=`) looks to it like a test
path named DIR: `settle_rootdir` finds them again once every option is known.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from _pytest._code.code import ExceptionRepr, ReprFileLocation, TerminalRepr
from _pytest._io import TerminalWriter
from _pytest.config.findpaths import determine_setup
from _pytest.fixtures import TopRequest

__all__ = ["ExceptionRepr", "ReprFileLocation", "TerminalRepr", "TerminalWriter", "configured", "fill_fixtures", 
           "init_fixtures", "settle_rootdir"]


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


def settle_rootdir(config: pytest.Config, args: list[str]) -> None:
    """Find the rootdir and ini file again from the command line as it reads with every option known, and take
    them (with their addopts and confcutdir) when they differ from what pytest found without ours."""
    known = config.known_args_namespace
    rootpath, inipath, inicfg, ignored = determine_setup(
        inifile=known.inifilename, override_ini=known.override_ini, args=known.file_or_dir,
        rootdir_cmd_arg=known.rootdir or None, invocation_dir=config.invocation_params.dir)
    if (rootpath, inipath) == (config.rootpath, config.inipath):
        return
    defaulted_confcutdir = known.confcutdir == str(config.inipath.parent if config.inipath else config.rootpath)
    config._rootpath, config._inipath, config._inicfg = rootpath, inipath, inicfg
    config._ignored_config_files = ignored
    config._inicache.clear()
    config._parser.extra_info.update(rootdir=str(rootpath), inifile=str(inipath))
    if defaulted_confcutdir:
        known.confcutdir = str(inipath.parent if inipath else rootpath)
    args[:0] = config.getini("addopts")  # the right ini's addopts, which pytest never saw
