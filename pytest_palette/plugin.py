"""The pytest plugin: hooks and the `palette_host` fixture, each delegating to the module that does the work."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from . import hookspecs
from .hosts import builtin
from .hosts.base import Host
from .judge import PALETTE, PALETTE_RULES, PASSED, Verdict, explain
from .models import rehearsal_agents
from .options import add_options
from .rehearsal.policy import RehearsalPolicy
from .rehearsal.reference import Solutions, reference_agents
from .results import step_summary
from .results.table import TableReporter
from .rules import SkillRules
from .run import progress, signals, tracing
from .run import session as palette_session
from .run._private import configured, settle_rootdir
from .run.family_items import SOLUTIONS, collect_directory
from .run.items import CaseFile, CaseItem, converse_ahead, is_case_file, select, start_longest_first, timeouts
from .run.scrubbing import Scrubber
from .run.session import ORDER, SESSION


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, args: list[str]) -> None:
    """`--palette-skill DIR` reads as `--palette-skill=DIR`: pytest chose its rootdir before it knew our options."""
    settle_rootdir(early_config, args)


@pytest.hookimpl(tryfirst=True)
def pytest_palette_add_hosts(hosts: dict[str, Host], config: pytest.Config) -> None:
    """The built-in hosts (each reads its own options once added); tryfirst so that a project's hosts of the same
    name replace them."""
    hosts.update(builtin())


@pytest.hookimpl(tryfirst=True)
def pytest_palette_add_rules(rules: dict[str, SkillRules], config: pytest.Config) -> None:
    """Palette's rules, the first user of the hook; tryfirst so that a project may replace them."""
    rules[PALETTE] = PALETTE_RULES


@pytest.hookimpl(tryfirst=True)
def pytest_palette_add_rehearsals(agents: dict[str, Callable[[], RehearsalPolicy]], config: pytest.Config) -> None:
    """The package's scripted agents; tryfirst so that a project's agents of the same name replace them."""
    agents.update(rehearsal_agents())
    # The agents that prove a task family: each knows the solutions of the tasks this session collects.
    agents.update(reference_agents(config.stash.setdefault(SOLUTIONS, Solutions())))


def pytest_configure(config: pytest.Config) -> None:
    session = config.stash[SESSION] = palette_session.start(config)
    # Every report and warning, before junitxml, the terminal or the table reads it: the judge's words as a failed
    # item's crash line, and no secret anywhere (run/scrubbing.py).
    config.pluginmanager.register(Scrubber(lambda: session.secrets), "palette-scrubber")
    tracing.start(config)  # --palette-otlp: each item's trace, sent as it ends (run/tracing.py)
    if palette_session.measuring(config):  # -v lines only for a session of palette cases
        session.progress = progress.start(config, session.settings.progress_after, session.secrets)
        signals.install(config)  # SIGTERM and SIGHUP end the run as Ctrl-C does (run/signals.py)
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(TableReporter(session.settings.hosts), "palette-table")
        if (html := session.settings.html) is not None:
            from .site.reporter import SiteReporter  # Jinja2 and the site's modules, only for a session that asks

            config.pluginmanager.register(SiteReporter(session.run_dir, html, lambda: session.secrets), "palette-site")


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """$GITHUB_STEP_SUMMARY gets the matrix the table shows (on the controller: workers have no table)."""
    table = config.pluginmanager.get_plugin("palette-table")
    if isinstance(table, TableReporter):
        step_summary.append(table.ordered(), table.hosts, terminalreporter.write_line,
                            secrets=config.stash[SESSION].secrets)


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    """`--palette-conversations N`: start the items' conversations ahead of them; pytest's loop then runs the
    items, each collecting its own."""
    palette = session.config.stash[SESSION]
    if not (session.testsfailed or session.config.option.collectonly):
        palette.overlap = converse_ahead(session.items, palette)


def pytest_sessionfinish(session: pytest.Session) -> None:
    palette = session.config.stash.get(SESSION, None)
    if palette is not None and palette.overlap is not None:  # Ctrl-C, SIGTERM, -x: those not taken end here
        palette.overlap.close()
    # The last traces sent; the one warning, when the collector did not take them (xdist: the workers' too, told
    # to the controller as each ended, before this).
    tracing.finish(session.config)


def pytest_unconfigure(config: pytest.Config) -> None:
    tracing.finish(config)  # where its sessionfinish never ran: no provider of its left sending
    if SESSION in config.stash:
        config.stash[SESSION].close()


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """`--palette-check`: verify the selected hosts, print each problem with its fix, run no case."""
    if not config.getoption("palette_check"):
        return None
    with configured(config):
        return palette_session.check(config.stash[SESSION], config.get_terminal_writer().line)


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's `load` (what -n gives): palette items go to the workers one at a time (run/dispatch.py)."""
    if config.getvalue("dist") != "load":
        return None
    from .run.dispatch import LongestFirst, is_palette_item  # xdist's: only where xdist runs

    hosts = config.stash[SESSION].settings.hosts
    return LongestFirst(config, log, lambda nodeid: is_palette_item(nodeid, config.rootpath, hosts))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist: every worker takes the controller's run id, skill hash and fingerprint."""
    node.workerinput["palette_session"] = palette_session.for_workers(node.config.stash[SESSION])


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """xdist: a worker ended; why its collector failed, if it did, is the controller's one warning."""
    tracing.node_down(node.config, getattr(node, "workeroutput", None))


@pytest.hookimpl(tryfirst=True)
def pytest_collect_directory(path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """A task family's root is collected as its tasks (run/family_items.py)."""
    return collect_directory(path, parent)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> CaseFile | None:
    return CaseFile.from_parent(parent, path=file_path) if is_case_file(parent.config, file_path) else None


@pytest.fixture
def palette_host(request: pytest.FixtureRequest) -> Host:
    """The host this case item runs on. Override it in a conftest.py to wrap or replace a host."""
    if not isinstance(request.node, CaseItem):
        raise pytest.UsageError("palette_host is provided to palette case and task items only")
    return request.config.stash[SESSION].hosts[request.node.host_name]


def pytest_report_header(config: pytest.Config) -> list[str]:
    """What is about to be measured, when this session collects palette cases."""
    return palette_session.header(config.stash[SESSION], palette_session.arguments(config)) \
        if palette_session.measuring(config) else []


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """After -k/-m: keep this shard's items and the items a resumed run still lacks, the longest expected first where
    they run side by side; bound each with a timeout."""
    settings = config.stash[SESSION].settings
    keep = select(items, settings)
    if len(keep) != len(items):
        kept = set(map(id, keep))
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept])
        items[:] = keep
    config.stash[ORDER] = start_longest_first(items, config.stash[SESSION], config)
    # pytest-timeout bounds the whole item unless the user chose a timeout.
    if config.pluginmanager.hasplugin("timeout") and not (
            config.getoption("timeout", None) or float(config.getini("timeout") or 0)):
        timeouts(items, settings)


def pytest_report_collectionfinish(config: pytest.Config) -> list[str]:
    """-v: the order the items start in, under "collected N items"."""
    return config.stash.get(ORDER, []) if config.get_verbosity() > 0 else []


@pytest.hookimpl(tryfirst=True)
def pytest_assertrepr_compare(config: pytest.Config, op: str, left: object, right: object) -> list[str] | None:
    """`assert verdict == PASSED` in a user's own test explains a failed verdict like a case item does."""
    verdict = left if isinstance(left, Verdict) and right is PASSED else \
        right if isinstance(right, Verdict) and left is PASSED else None
    return ["the judge's verdict is not a pass", *explain(verdict)] if op == "==" and verdict else None
