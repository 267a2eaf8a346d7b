"""Shared fixtures: every test starts from an environment with no Palette settings of the developer's; the site's
tests get a browser (tests/browser.py) and real offline runs (tests/sites.py)."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

# langgraph and the react host (below), imported once for the test process, before any pytester snapshot of
# sys.modules: an in-process session (`pytester.runpytest`) drops what it imported when it ends, and a module
# half imported before it (a test importing langchain_core.messages alone) left the next react session with
# messages of two copies of a class ("turn 2 failed: ValueError: Got unsupported message type"). Each in-process
# react session also no longer imports them again.
import langgraph.checkpoint.memory
import langgraph.prebuilt  # noqa: F401
import pytest
from browser import Browser, require
from sites import OfflineRuns, make_offline_runs
from sweeps import CACHE_VARIABLE, Sweeps
from unprivileged import Unprivileged
from unprivileged import problem as unprivileged_problem

import pytest_palette.hosts.react  # noqa: F401  (see langgraph above)
from pytest_palette.hosts.cuga import SHARED_WARM, warm_server
from pytest_palette.hosts.cuga_setup import SETTINGS_FILES

# tests/fixtures/ holds data and a whole project (changelog_project/, with a conftest.py of its own): the tests that
# use them run them, pytest does not collect them.
collect_ignore = ["fixtures"]

# A developer's real Palette, a leaked trace path or a latency setting would change what these tests
# measure; each test that needs one sets it itself.
_PALETTE_VARIABLES = ("PALETTE_HOME", "PALETTE_URL", "PALETTE_TRACE", "PALETTE_ENGINE_LATENCY", "PALETTE_PYTHON",
                      "PALETTE_ENV",
                      # A developer's collector would get every session's traces (--palette-otlp reads these).
                      "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


#: Fixtures that run something whole — a pytest session, a browser, a run shared by the module or the session, a
#: user of its own: a test that asks for one is end to end whatever it asserts (`make quick` leaves it out).
WHOLE = frozenset({"pytester", "sweeps", "offline_runs", "browser", "unprivileged", "site", "session", "sweep",
                   "published_run", "project_runs", "three_hosts", "run", "listener"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if WHOLE & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.end_to_end)


@pytest.fixture(autouse=True)
def _clean_palette_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _PALETTE_VARIABLES:
        monkeypatch.delenv(name, raising=False)


#: Plugins the sessions these tests start leave out. Installed beside the project (langchain brings langsmith's; the
#: suite's own hypothesis and anyio), they have no part in what is tested, yet load in every session: half of a
#: session's start (measured: 2.0 → 1.0 CPU-s), over some two hundred sessions. platformdirs' (inspect_ai brings it)
#: cost 80 ms more.
UNRELATED_PLUGINS = ("-p", "no:langsmith_plugin", "-p", "no:hypothesispytest", "-p", "no:anyio",
                     "-p", "no:platformdirs")


def pytest_configure(config: pytest.Config) -> None:
    """The sessions this process starts get UNRELATED_PLUGINS through PYTEST_ADDOPTS: set once this process has
    read it, and not on xdist's controller, whose workers (running test_wires' hypothesis tests) would read it."""
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        os.environ["PYTEST_ADDOPTS"] = " ".join(filter(None, (os.environ.get("PYTEST_ADDOPTS"), *UNRELATED_PLUGINS)))


def common_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test session's temporary folder: under xdist each worker has its own inside it, and this is their parent."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session", autouse=True)
def inner_cache_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One pytest cache for every session the tests start (`sweeps.inner_cache()`), in the test session's common
    folder: what a host learned of this machine in one (the cuga host's probe) the next reuses. (Not through
    `sweeps`: a test asking for that fixture is an end-to-end one, out of the quick tier.)"""
    folder = common_folder(tmp_path_factory) / "inner-cache"
    os.environ[CACHE_VARIABLE] = str(folder)
    return folder


@pytest.fixture(scope="session", autouse=True)
def shared_warm_cuga() -> Iterator[None]:
    """One warm CUGA for every session this process starts (hosts/cuga.py, SHARED_WARM), started when the first one
    connects: CUGA's imports (5 CPU-s) are paid once per xdist worker that runs cuga, not once per session. Its socket
    is in a folder of this user's alone; each session's conversations are still forked into their own sandboxes."""
    folder = Path(tempfile.mkdtemp(prefix="palette-tests-warm-"))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(str(folder / "cuga.sock"))
    listener.listen(64)
    server, server_folder = warm_server(SETTINGS_FILES["openai"], os.environ, listener=listener)
    closing = threading.Event()

    def start_when_asked() -> None:
        with contextlib.suppress(OSError, ValueError):
            select.select([listener], [], [])
            if not closing.is_set():
                server.start()

    threading.Thread(target=start_when_asked, name="tests-warm-cuga", daemon=True).start()
    os.environ[SHARED_WARM] = str(folder / "cuga.sock")
    try:
        yield
    finally:
        os.environ.pop(SHARED_WARM, None)
        closing.set()
        server.close()
        listener.close()
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(server_folder, ignore_errors=True)


@pytest.fixture
def pytester(pytester: pytest.Pytester) -> pytest.Pytester:
    """pytest's own, plus: its sessions leave out UNRELATED_PLUGINS and, with PYTHONPATH set (a git worktree beside
    the venv's checkout), pass it to the agent's sandbox, which keeps no PYTHONPATH — else deck.py's engine would
    import the venv's copy, or none. pytester clears PYTEST_ADDOPTS; this sets it again for its sessions only."""
    sandbox_env = ("--palette-sandbox-env=PYTHONPATH",) if os.environ.get("PYTHONPATH") else ()
    pytester._monkeypatch.setenv("PYTEST_ADDOPTS", " ".join([*UNRELATED_PLUGINS, *sandbox_env]))
    return pytester


@pytest.fixture
def cases(pytester: pytest.Pytester, request: pytest.FixtureRequest) -> Path:
    """The calling module's `CASES` (a YAML list of cases) as `cases/cases.yaml` in the test's pytester folder."""
    path = pytester.mkdir("cases") / "cases.yaml"
    path.write_text(request.module.CASES)
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless system Chromium per test module; skipped, or failed in CI, without one. Not per session:
    Playwright's sync API keeps an asyncio loop running in this thread while it is open, and every later test
    that runs a loop of its own (the cuga host's) would fail with "another loop is running"."""
    require()
    with Browser() as opened:
        yield opened


@pytest.fixture(scope="session")
def sweeps(tmp_path_factory: pytest.TempPathFactory) -> Sweeps:
    """Real runs of cases, each once per test session across the xdist workers (tests/sweeps.py)."""
    return Sweeps(common_folder(tmp_path_factory))


@pytest.fixture(scope="session")
def offline_runs(sweeps: Sweeps) -> OfflineRuns:
    """A good and a bad real offline run of the core cases, once per test session: tests/sites.py."""
    return make_offline_runs(sweeps)


@pytest.fixture(scope="session")
def unprivileged() -> Unprivileged:
    """The unprivileged user tests run as (tests/unprivileged.py), made once per machine; skipped when this run is
    not root (it then already is the unprivileged run) or the machine cannot make or become one."""
    reason = unprivileged_problem()
    if reason is not None:
        pytest.skip(reason)
    user = Unprivileged.ensure()
    reason = user.problem()
    if reason is not None:
        pytest.skip(reason)
    return user
