"""The pytest plugin: hooks only; each delegates to the module that holds the work."""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path
from typing import Any

import pytest

from . import hookspecs, stash
from .backend import describe_backend
from .collect import CaseFile, CaseItem
from .hosts.base import Host
from .judge import PASSED, Verdict, explain
from .ledger import LEDGER_NAME, read_records
from .options import Settings, add_options, resolve
from .records import fingerprint
from .skill import skill_hash
from .summary import Cell, cell_from_properties, render


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


@pytest.hookimpl(tryfirst=True)
def pytest_palette_add_hosts(hosts: dict[str, Host], config: pytest.Config) -> None:
    """The built-in hosts; tryfirst so that a project's hosts of the same name replace them."""
    from .hosts.claude import ClaudeHost
    from .hosts.cuga import CugaHost
    from .hosts.react import ReactHost
    from .manual import ManualHost

    hosts["react"] = ReactHost()
    hosts["manual"] = ManualHost()
    hosts["claude"] = ClaudeHost(cli=config.getoption("palette_claude_cli", None))
    hosts["cuga"] = CugaHost()


def pytest_configure(config: pytest.Config) -> None:
    settings = resolve(config)
    config.stash[stash.SETTINGS] = settings
    hosts: dict[str, Host] = {}
    config.hook.pytest_palette_add_hosts(hosts=hosts, config=config)
    config.stash[stash.HOSTS] = hosts
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(SummaryReporter(config), "palette-summary")
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    # One run id for the whole session: chosen by the controller, handed to xdist workers.
    config.stash[stash.RUN_ID] = (workerinput or {}).get("palette_run_id") or settings.run_id or (
        time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2))
    if workerinput is None:
        refuse_foreign_ledger(settings, settings.run_root / config.stash[stash.RUN_ID] / LEDGER_NAME)
    unknown = [name for name in settings.hosts if name not in hosts]
    if unknown:
        raise pytest.UsageError(f"--host {', '.join(unknown)}: no such host; known: {', '.join(sorted(hosts))}")
    for name in settings.hosts:
        reason = hosts[name].unsupported(settings.model)
        if reason:
            raise pytest.UsageError(f"--host {name} cannot run --model {settings.model.text}: {reason}")
    if workerinput is None and not config.option.collectonly and not config.getoption("palette_check"):
        problems = [f"{name}: {p}" for name in settings.hosts for p in hosts[name].problems(settings.model, os.environ)]
        if problems:
            raise pytest.UsageError("not ready to run:\n  " + "\n  ".join(problems))


def refuse_foreign_ledger(settings: Settings, ledger: Path) -> None:
    """Appending to a ledger written under other terms would mix two measurements in one run."""
    if not ledger.is_file():
        return
    mine = fingerprint(settings, skill_hash(settings.skill_dir))
    theirs = {record["fingerprint"] for record in read_records(ledger)}
    if theirs - {mine}:
        raise pytest.UsageError(
            f"{ledger} was written under another configuration (fingerprint {', '.join(sorted(theirs))}; "
            f"this session's is {mine}): model, skill, budgets or plugin version differ. Start a new run instead.")


def pytest_unconfigure(config: pytest.Config) -> None:
    for host in config.stash.get(stash.HOSTS, {}).values():
        host.close()


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """`--palette-check`: verify the selected hosts, print each problem with its fix, run no case."""
    if not config.getoption("palette_check"):
        return None
    config._do_configure()
    try:
        return preflight(config)
    finally:
        config._ensure_unconfigure()


def preflight(config: pytest.Config) -> int:
    settings = config.stash[stash.SETTINGS]
    hosts = config.stash[stash.HOSTS]
    writer = config.get_terminal_writer()
    ready = True
    writer.line(f"palette check: model {settings.model.label} · skill {settings.skill_dir} "
                f"({skill_hash(settings.skill_dir)}) · {describe_backend()}")
    for name in settings.hosts:
        problems = hosts[name].preflight(settings.model, settings.skill_dir, os.environ)
        ready = ready and not problems
        writer.line(f"{name}: {'ready' if not problems else 'NOT ready'}", green=not problems, red=bool(problems))
        for problem in problems:
            writer.line(f"  ✗ {problem}")
    return 0 if ready else 1


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist: every worker writes into the controller's run folder."""
    node.workerinput["palette_run_id"] = node.config.stash[stash.RUN_ID]


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> CaseFile | None:
    if file_path.suffix not in (".yaml", ".yml"):
        return None
    settings = parent.config.stash[stash.SETTINGS]
    named = {(parent.config.invocation_params.dir / arg.split("::")[0]).resolve() for arg in parent.config.args}
    if file_path in named or any(file_path.is_relative_to(d) for d in settings.case_dirs):
        return CaseFile.from_parent(parent, path=file_path)
    return None


@pytest.fixture
def palette_host(request: pytest.FixtureRequest) -> Host:
    """The host this case item runs on. Override it in a conftest.py to wrap or replace a host."""
    name = request.node.stash.get(stash.HOST_NAME, None)
    if name is None:
        raise pytest.UsageError("palette_host is provided to palette case items only")
    return request.config.stash[stash.HOSTS][name]


def _measuring(config: pytest.Config) -> bool:
    """Whether this session collects palette cases: an argument is, holds or lies in a case folder, or is YAML."""
    settings = config.stash[stash.SETTINGS]
    for arg in config.args:
        path = (config.invocation_params.dir / arg.split("::")[0]).resolve()
        if path.suffix in (".yaml", ".yml") or any(
                path.is_relative_to(d) or d.is_relative_to(path) for d in settings.case_dirs):
            return True
    return False


def pytest_report_header(config: pytest.Config) -> list[str]:
    """What is about to be measured: hosts, model, skill (with its hash), Palette backend, run folder."""
    if not _measuring(config):
        return []
    settings = config.stash[stash.SETTINGS]
    hosts = config.stash[stash.HOSTS]
    return [
        f"palette: hosts {', '.join(settings.hosts)} · model {settings.model.label}",
        f"palette: skill {settings.skill_dir} ({skill_hash(settings.skill_dir)}) · {describe_backend()}",
        f"palette: run folder {settings.run_root / config.stash[stash.RUN_ID]}",
        *(f"palette: {name}: " + ", ".join(f"{k} {v}" for k, v in hosts[name].describe(
            settings.model, settings.host).items() if k != "model") for name in settings.hosts),
    ]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """After -k/-m: keep this shard's items and the items a resumed run still lacks; bound each with a timeout."""
    settings = config.stash[stash.SETTINGS]
    keep = select(items, settings)
    if len(keep) != len(items):
        kept = set(map(id, keep))
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept])
        items[:] = keep
    # pytest-timeout bounds the whole item unless the user chose a timeout: every turn plus the build grace.
    chosen = config.getoption("timeout", None) or float(config.getini("timeout") or 0) if \
        config.pluginmanager.hasplugin("timeout") else True
    if not chosen:
        for item in items:
            if isinstance(item, CaseItem):
                turns = 1 + len(item.case.replies)
                item.add_marker(pytest.mark.timeout(settings.turn_timeout * turns + settings.build_grace + 60))


def select(items: list[pytest.Item], settings: Settings) -> list[pytest.Item]:
    """The items this session runs: a resumed run's missing or errored ones, then this shard's share.

    Sharding is round-robin over the selection in collection order, so the runs of one slow case spread
    across shards and every item lands in exactly one shard.
    """
    cases = [item for item in items if isinstance(item, CaseItem)]
    if settings.resume_dir is not None:
        done = finished_items(settings.resume_dir / LEDGER_NAME)
        cases = [i for i in cases if (i.case.name, i.host_name, i.run_index) not in done]
    if settings.shard is not None:
        index, total = settings.shard
        cases = cases[index - 1::total]
    chosen = set(map(id, cases))
    return [item for item in items if not isinstance(item, CaseItem) or id(item) in chosen]


def finished_items(ledger: Path) -> set[tuple[str, str, int]]:
    """(case, host, run) whose latest record is a verdict; missing, errored and skipped ones run again."""
    latest: dict[tuple[str, str, int], str] = {}
    for record in read_records(ledger):
        latest[(record["case"], record["host"], record["run_index"])] = record["outcome"]
    return {key for key, outcome in latest.items() if outcome in ("pass", "fail")}


class SummaryReporter:
    """Collects one cell per palette item from reports on the controller and prints the table.

    It reads report properties only: xdist replays workers' reports here, so no worker output is needed.
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.cells: list[Cell] = []
        # Reports arrive in completion order under xdist; rows follow the case files instead.
        self.order: dict[tuple[str, str], tuple[str, int, str]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        outcome = None
        if report.when == "setup" and report.failed:
            outcome = "ERROR"
        elif report.when == "setup" and report.skipped:
            outcome = "skip"
        elif report.when == "call":
            outcome = "pass" if report.passed else "FAIL"
        cell = cell_from_properties(report.user_properties, outcome) if outcome else None
        if cell is not None:
            self.cells.append(cell)
            self.order[(cell.case, cell.host)] = (report.location[0], report.location[1] or 0, cell.case)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.cells:
            return
        terminalreporter.write_sep("=", "palette summary")
        cells = sorted(self.cells, key=lambda c: self.order[(c.case, c.host)])
        for line in render(cells, self.config.stash[stash.SETTINGS].hosts):
            terminalreporter.write_line(line)


@pytest.hookimpl(tryfirst=True)
def pytest_assertrepr_compare(config: pytest.Config, op: str, left: object, right: object) -> list[str] | None:
    """`assert verdict == PASSED` in a user's own test explains a failed verdict like a case item does."""
    if op == "==" and isinstance(left, Verdict) and right is PASSED:
        return ["the judge's verdict is not a pass", *explain(left)]
    if op == "==" and isinstance(right, Verdict) and left is PASSED:
        return ["the judge's verdict is not a pass", *explain(right)]
    return None
