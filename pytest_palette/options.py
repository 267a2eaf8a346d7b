"""Command-line options and ini settings, resolved once into Settings kept in config.stash."""

from __future__ import annotations

import importlib.util
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from .cases import MAX_CONTEXT
from .hosts import builtin_classes
from .hosts.base import COMMAND_TIMEOUT, MODEL_RETRIES, OUTPUT_LIMIT, TURN_TIMEOUT, Host, HostSettings, OptionRefused
from .models import ModelSpec, ModelUnavailable, parse_model
from .rehearsal.injection import FaultSchedule
from .rehearsal.latency import ModelLatency
from .rehearsal.limits import ModelLimits
from .rehearsal.policy import RehearsalPolicy
from .results.ledger import run_ledgers
from .results.prices import PriceError, PriceTable, load_prices
from .results.record import NO_SKILL
from .run.credentials import Credentials, CredentialsError
from .run.credentials import load as load_credentials
from .site.folder import refusal as site_refusal
from .skill import PACKAGED_SKILLS

DEFAULT_BUILD_GRACE = 60.0
#: With -v, a command of the agent's running this long gets a line (`--palette-progress-after`).
PROGRESS_AFTER = 10.0
#: `--palette-output-limit` below this could not show one deck.py answer's state; Claude Code's own floor is 4,000.
MIN_OUTPUT_LIMIT = 1_000
#: The most retries of one model call (`--palette-model-retries`): with exponential backoff, more is a stuck item.
MAX_MODEL_RETRIES = 20
#: OpenTelemetry's own variables naming a collector (`--palette-otlp` when not given): the traces' URL as it is,
#: and a base URL the signal's path goes after, as the SDK reads them.
OTLP_TRACES_VARIABLE = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
OTLP_VARIABLE = "OTEL_EXPORTER_OTLP_ENDPOINT"
OTLP_TRACES_PATH = "v1/traces"
#: What `--palette-otlp` says to send no traces, whatever the environment names.
NO_OTLP = "none"


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("palette", "pytest-palette: benchmark agent hosts driving the Palette skill")
    group.addoption("--host", action="append", default=[], dest="palette_hosts", metavar="NAME",
                    help="agent host(s) to run every case on; repeat or comma-separate (default: react)")
    group.addoption("--model", default=None, dest="palette_model", metavar="MODEL",
                    help="model for every selected host: rehearsal (offline, the default), rehearsal:<name> (a "
                         "scripted agent: known-bad, hostile or a project's own), watsonx:<model_id>, "
                         "openai:<model> (any OpenAI-compatible server with --palette-base-url), or provider:model")
    group.addoption("--palette-grader", default=None, dest="palette_grader", metavar="MODEL",
                    help="the model that grades a case's rubric (expect.rubric), in any form --model takes; "
                         "default: the rehearsal grader with the rehearsal model, else none (docs/judge.md)")
    group.addoption("--palette-validity", default=None, dest="palette_validity", metavar="MODEL",
                    help="a model that reads each item's conversation and commands and answers whether the agent "
                         "stayed within the request (a gate); 'rehearsal' offline; off by default")
    group.addoption("--palette-base-url", default=None, dest="palette_base_url", metavar="URL",
                    help="the server an openai:<model> (react, cuga) or anthropic:<model> (claude) is reached at, "
                         "e.g. http://localhost:8000/v1 for vLLM or http://localhost:11434/v1 for Ollama; the key "
                         "comes from the environment (OPENAI_API_KEY / ANTHROPIC_API_KEY)")
    group.addoption("--palette-model-retries", type=int, default=None, dest="palette_model_retries", metavar="N",
                    help="retries of one model call after a transient error (429, 5xx, reset, timeout), with "
                         f"backoff, before the item ERRORs (default {MODEL_RETRIES}, at most {MAX_MODEL_RETRIES})")
    group.addoption("--palette-rehearsal-faults", default=None, dest="palette_rehearsal_faults", metavar="SPEC",
                    help="transient errors the rehearsal server injects, on every host's wire, e.g. 429:0.2,500:0.05,"
                         "seed=7: kind:rate pairs, kinds 429, 5xx codes, reset and slow; deterministic for a seed")
    group.addoption("--palette-rehearsal-latency", default=None, dest="palette_rehearsal_latency", metavar="SPEC",
                    help="the rehearsal model's time per call, on every host: SECONDS[,jitter=SECONDS][,seed=N], "
                         "e.g. 2,jitter=0.5 (a real model's latency, to measure the harness under it)")
    group.addoption("--palette-rehearsal-limits", default=None, dest="palette_rehearsal_limits", metavar="SPEC",
                    help="the rehearsal model's limits in tokens, on every host: output=N cuts an answer in words "
                         "as a provider does (finish_reason length, stop_reason max_tokens), context=N refuses a "
                         "longer request with the 400 real servers send; e.g. output=40 or context=8192")
    group.addoption("--palette-record", action="store_true", default=False, dest="palette_record",
                    help="save every model call of every item (the messages sent, the tools offered, the answer) "
                         "into the item's folder as cassette.jsonl; no key is written (react)")
    group.addoption("--palette-cases", action="append", default=[], dest="palette_cases", metavar="DIR",
                    help="folders whose *.yaml files are case files (default: ini palette_cases, else 'cases')")
    group.addoption("--palette-skill", default=None, dest="palette_skill", metavar="DIR",
                    help="the skill folder under test (default: the reference Palette skill in the package), or "
                         f"{NO_SKILL!r}: no skill installed on any host, the baseline a skill is measured against "
                         f"(a folder named {NO_SKILL} is ./{NO_SKILL})")
    group.addoption("--palette-html", default=None, dest="palette_html", metavar="DIR",
                    help="at the end, write the run as a static HTML site into DIR (as `palette-bench view`): the "
                         "matrix, a page per item with its slides, the conversation and the calls")
    group.addoption("--palette-run-dir", default=None, dest="palette_run_dir", metavar="DIR",
                    help="where each session's run folder is made (default: 'runs' under the rootdir)")
    group.addoption("--palette-turn-timeout", type=float, default=None, dest="palette_turn_timeout",
                    metavar="SECONDS", help=f"seconds one agent turn may take (default {TURN_TIMEOUT:g})")
    group.addoption("--palette-command-timeout", type=float, default=None, dest="palette_command_timeout",
                    metavar="SECONDS", help="seconds one shell command may take on hosts that let us set it "
                                            f"(default {COMMAND_TIMEOUT:g}; must outlast deck.py's 90 s holds)")
    group.addoption("--palette-output-limit", type=int, default=None, dest="palette_output_limit", metavar="CHARS",
                    help="characters of one command's output the agent reads back, on every host; past it a "
                         f"marker says what was cut (default {OUTPUT_LIMIT:,}, no tighter than any "
                         "host's own client; ini palette_output_limit)")
    group.addoption("--palette-build-grace", type=float, default=None, dest="palette_build_grace",
                    metavar="SECONDS", help="after the last turn, how long to wait for a build still running "
                                            f"before reading the deck (default {DEFAULT_BUILD_GRACE:g})")
    group.addoption("--palette-max-context", type=int, default=None, dest="palette_max_context", metavar="BYTES",
                    help=f"the most pasted material a case may carry (default {MAX_CONTEXT:,}); larger is an error "
                         "naming the case file and line")
    group.addoption("--palette-runs", type=int, default=None, dest="palette_runs", metavar="N",
                    help="run every (case, host) N times, each in its own workspace (ids case[host-2])")
    group.addoption("--palette-shard", default=None, dest="palette_shard", metavar="I/N",
                    help="run only shard I of N: an exact, balanced, round-robin partition of the items")
    group.addoption("--palette-run-id", default=None, dest="palette_run_id", metavar="ID",
                    help="name the run folder (default: a timestamp); shards that share it share one ledger")
    group.addoption("--palette-resume", default=None, dest="palette_resume", metavar="RUN_DIR",
                    help="run only the items whose record is missing or errored in RUN_DIR, appending to its ledger")
    group.addoption("--palette-collect", default=None, dest="palette_collect", metavar="RUN_DIR",
                    help="judge what a run folder holds instead of running conversations (e.g. after the "
                         "manual host's run sheet was followed by hand)")
    group.addoption("--palette-check", action="store_true", default=False, dest="palette_check",
                    help="verify every selected host (credentials, client, skill discoverable and identical to "
                         "the skill under test) and run no case")
    group.addoption("--palette-sandbox", default="bubblewrap", dest="palette_sandbox", metavar="KIND",
                    choices=("bubblewrap", "none"),
                    help="where the agent's commands run: bubblewrap (default: work/ only, no network, no "
                         "secrets, limits) or none (unconfined; every record and report says so)")
    group.addoption("--palette-prices", default=None, dest="palette_prices", metavar="FILE",
                    help="a YAML or JSON price table, USD per million tokens per model ({model: {input: USD, "
                         "output: USD}}): the cost of models whose client reports none")
    group.addoption("--palette-conversations", type=int, default=None, dest="palette_conversations", metavar="N",
                    help="hold up to N conversations at once in this process, ahead of their items (threads; "
                         "not with xdist's -n): a sweep against a real model waits on the model and the backend")
    group.addoption("--palette-max-cost", type=float, default=None, dest="palette_max_cost", metavar="USD",
                    help="stop starting items once this session has recorded that much cost (per ledger: xdist "
                         "workers share it, shards do not); the rest are recorded as skipped")
    group.addoption("--palette-sandbox-env", action="append", default=[], dest="palette_sandbox_env",
                    metavar="NAME", help="pass this variable to the agent's commands too (repeat or comma-separate): "
                                         "what a real Palette behind PALETTE_HOME needs, its key say")
    group.addoption("--palette-agent-profile", default=None, dest="palette_agent_profile", metavar="NAME",
                    help="a task family's agent profile, .claude/agents/NAME.md: its instructions go into the "
                         "agent's system prompt as each host takes one (task families only)")
    group.addoption("--palette-judge-profile", default=None, dest="palette_judge_profile", metavar="NAME",
                    help="the judge's profile of a task family, .claude/agents/NAME.md (default: judge.md where the "
                         "family has one): the judge gate of a task with judge.task.md, under --palette-validity")
    group.addoption("--palette-progress-after", type=float, default=None, dest="palette_progress_after",
                    metavar="SECONDS", help="with -v, a line for a command of the agent's still running after this "
                                            f"long, then every 30 s (default {PROGRESS_AFTER:g}; ini "
                                            "palette_progress_after)")
    group.addoption("--palette-otlp", default=None, dest="palette_otlp", metavar="ENDPOINT",
                    help="send each item's trace (the item, its turns, their model calls and the agent's commands) "
                         "to this OpenTelemetry collector over OTLP/HTTP as the item ends, e.g. "
                         f"http://localhost:4318 (default: ini palette_otlp, else ${OTLP_TRACES_VARIABLE} or "
                         f"${OTLP_VARIABLE}, else none); {NO_OTLP!r}: no traces whatever the environment says "
                         "(pytest-palette[otlp])")
    for host in builtin_classes():  # each host declares its own (`Host.options`)
        host.add_options(parser)
    parser.addini("palette_cases", "folders whose *.yaml files are case files", type="paths", default=[])
    parser.addini("palette_hosts", "default hosts, comma-separated", default="react")
    parser.addini("palette_model", "default model", default="rehearsal")
    parser.addini("palette_run_dir", "where run folders are made", default="runs")
    parser.addini("palette_turn_timeout", "seconds one agent turn may take", default=str(TURN_TIMEOUT))
    parser.addini("palette_output_limit", "characters of one command's output the agent reads back",
                  default=str(OUTPUT_LIMIT))
    parser.addini("palette_progress_after", "with -v, seconds a command runs before a line says so",
                  default=str(PROGRESS_AFTER))
    parser.addini("palette_otlp", "the OpenTelemetry collector each item's trace is sent to (as --palette-otlp)",
                  default="")


@dataclass(frozen=True)
class Settings:
    hosts: tuple[str, ...]
    model: ModelSpec
    case_dirs: tuple[Path, ...]
    #: The skill folder under test; None for no skill at all (`--palette-skill none`, the baseline).
    skill_dir: Path | None
    run_root: Path
    turn_timeout: float
    build_grace: float
    host: HostSettings
    #: A run folder to judge as it is, instead of running conversations.
    collect_dir: Path | None = None
    runs: int = 1
    #: (i, n): this session runs shard i of n, 1-based.
    shard: tuple[int, int] | None = None
    run_id: str | None = None
    resume_dir: Path | None = None
    max_context: int = MAX_CONTEXT
    #: The user's price table (--palette-prices), and the file it came from.
    prices: PriceTable | None = None
    prices_file: Path | None = None
    #: --palette-max-cost: USD this session may record before it stops starting items.
    max_cost: float | None = None
    #: Conversations held at once in this process (`--palette-conversations`); 1: each in its item's setup.
    conversations: int = 1
    #: Where the session writes its site at the end (`--palette-html`), None for none.
    html: Path | None = None
    #: With -v, seconds a command runs before a line says so (`--palette-progress-after`).
    progress_after: float = PROGRESS_AFTER
    #: The credentials file (~/.config/palette/env or $PALETTE_ENV), when there is one.
    credentials: Credentials | None = None
    #: --palette-grader and --palette-validity: the models that grade a rubric and the validity check.
    grader: ModelSpec | None = None
    validity: ModelSpec | None = None
    #: --palette-agent-profile: the name of a task family's agent profile (.claude/agents/<name>.md); None: none.
    agent_profile: str | None = None
    #: --palette-judge-profile: a task family's judge profile (.claude/agents/<name>.md); None: judge.md, or none.
    judge_profile: str | None = None
    #: The OTLP/HTTP URL each item's trace is sent to (`--palette-otlp`, else OpenTelemetry's variables; its
    #: signal path included), and the flag or variable that named it; None: no traces.
    otlp: str | None = None
    otlp_from: str = ""


def _agent_profile(config: pytest.Config, option: str) -> str | None:
    """A profile's name of a family's .claude/agents/ (`--palette-agent-profile`, `--palette-judge-profile`)."""
    name = config.getoption(option)
    if name is None:
        return None
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        flag = "--" + option.replace("_", "-")
        raise pytest.UsageError(f"{flag} {name!r}: name a profile of .claude/agents/ (NAME.md)")
    return str(name)


def _otlp(config: pytest.Config, environ: Mapping[str, str] = os.environ) -> tuple[str | None, str]:
    """Where each item's trace goes, and what named it: `--palette-otlp` (a collector's base URL, or its traces'
    URL), else $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, else $OTEL_EXPORTER_OTLP_ENDPOINT with the traces'
    path after it, as the SDK reads them. A value that is no http(s) URL is one line naming where it came from; the
    flag without the SDK installed is one too (a variable set for other programs is not: the run warns instead)."""
    given: str | None = config.getoption("palette_otlp")
    named = "--palette-otlp"
    if given is None and str(config.getini("palette_otlp")).strip():  # a project's own collector, in its ini
        given, named = str(config.getini("palette_otlp")), "ini palette_otlp"
    if given is not None and given.strip() == NO_OTLP:
        return None, named
    if given is not None:  # a base URL, or one that already ends in the traces' path
        url = given.strip().rstrip("/")
        source, whole = named, url.endswith(f"/{OTLP_TRACES_PATH}")
    elif environ.get(OTLP_TRACES_VARIABLE, "").strip():
        source, url, whole = f"${OTLP_TRACES_VARIABLE}", environ[OTLP_TRACES_VARIABLE].strip(), True
    elif environ.get(OTLP_VARIABLE, "").strip():
        source, url, whole = f"${OTLP_VARIABLE}", environ[OTLP_VARIABLE].strip(), False
    else:
        return None, ""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in url):
        raise pytest.UsageError(f"{source} {url!r}: not the http(s) URL of an OTLP/HTTP collector "
                                "(e.g. http://localhost:4318)")
    if given is not None and not otlp_installed():
        raise pytest.UsageError(f"{named}: the OpenTelemetry SDK and its OTLP/HTTP exporter are not installed: "
                                "pip install 'pytest-palette[otlp]'")
    return (url if whole else f"{url.rstrip('/')}/{OTLP_TRACES_PATH}"), source


def otlp_installed() -> bool:
    """Whether the OpenTelemetry SDK's OTLP/HTTP exporter can be imported here (the `otlp` extra), without importing
    it: a session that sends no traces never pays for it."""
    try:
        return importlib.util.find_spec("opentelemetry.exporter.otlp.proto.http") is not None
    except ModuleNotFoundError:  # not even its parent packages
        return False


def _number(config: pytest.Config, option: str, ini: str | None, default: float) -> float:
    given = config.getoption(option)
    if given is not None:
        value, source = float(given), f"--{option.replace('_', '-')}"
    elif ini is not None:
        raw = config.getini(ini)
        try:
            value, source = float(raw), f"ini {ini}"
        except ValueError:
            raise pytest.UsageError(f"ini {ini} = {raw!r} is not a number of seconds") from None
    else:
        value, source = default, "default"
    if value <= 0:
        raise pytest.UsageError(f"{source} must be more than 0 (got {value:g})")
    return value


def _output_limit(config: pytest.Config) -> int:
    """`--palette-output-limit`, else its ini twin, else the default; a bad value is one line naming its source."""
    given = config.getoption("palette_output_limit")
    raw, source = (given, "--palette-output-limit") if given is not None else \
        (config.getini("palette_output_limit"), "ini palette_output_limit")
    try:
        value = int(str(raw).replace("_", ""))
    except ValueError:
        raise pytest.UsageError(f"{source} = {raw!r} is not a number of characters") from None
    if value < MIN_OUTPUT_LIMIT:
        raise pytest.UsageError(f"{source} must be at least {MIN_OUTPUT_LIMIT:,} characters (got {value:,})")
    return value


def _spec(config: pytest.Config, option: str, parse: Callable[[str], object]) -> str | None:
    """An option holding a spec `parse` reads (checked here, kept as given), or a one-line usage error."""
    given = config.getoption(option)
    if given is not None:
        try:
            parse(given)
        except ValueError as error:
            raise pytest.UsageError(f"--{option.replace('_', '-')} {given!r}: {error}") from None
    return None if given is None else str(given)


def _at_least(config: pytest.Config, option: str, least: int, unit: str = "") -> int | None:
    """A whole-number option, None when not given; below `least` is a one-line usage error."""
    given: int | None = config.getoption(option)
    if given is not None and given < least:
        raise pytest.UsageError(f"--{option.replace('_', '-')} must be at least {least}{unit} (got {given})")
    return given


def _path(config: pytest.Config, option: str) -> Path | None:
    """A path option, resolved from where pytest was invoked; None when not given."""
    given = config.getoption(option)
    return (config.invocation_params.dir / given).resolve() if given else None


def _names(config: pytest.Config, option: str) -> list[str]:
    """A repeatable option whose values may each be comma-separated, as a list of names."""
    return [name.strip() for given in config.getoption(option) for name in given.split(",") if name.strip()]


def _hosts(config: pytest.Config) -> tuple[str, ...]:
    hosts = _names(config, "palette_hosts") or \
        [h.strip() for h in str(config.getini("palette_hosts")).split(",") if h.strip()]
    duplicates = {h for h in hosts if hosts.count(h) > 1}
    if duplicates:
        raise pytest.UsageError(f"--host names {', '.join(sorted(duplicates))} more than once")
    return tuple(hosts)


def _model(config: pytest.Config) -> ModelSpec:
    """`--model` as a spec; the scripted agents `rehearsal:<name>` selects are the hook's."""
    try:
        agents: dict[str, Callable[[], RehearsalPolicy]] = {}
        config.hook.pytest_palette_add_rehearsals(agents=agents, config=config)
        return parse_model(config.getoption("palette_model") or str(config.getini("palette_model")),
                           config.getoption("palette_base_url"), agents)
    except ModelUnavailable as error:
        raise pytest.UsageError(str(error)) from None


def _grader(config: pytest.Config, option: str) -> ModelSpec | None:
    """--palette-grader or --palette-validity as a spec (any provider form --model takes; `rehearsal` offline)."""
    given = config.getoption(option)
    if given is None:
        return None
    try:
        return parse_model(given, agents={})
    except ModelUnavailable as error:
        flag = "--" + option.replace("_", "-")
        raise pytest.UsageError(f"{flag} {given}: {str(error).split(': ', 1)[-1]}") from None


def _model_retries(config: pytest.Config) -> int:
    retries = config.getoption("palette_model_retries")
    if retries is not None and not 0 <= retries <= MAX_MODEL_RETRIES:
        raise pytest.UsageError(f"--palette-model-retries must be from 0 to {MAX_MODEL_RETRIES} (got {retries}): "
                                "each retry waits longer than the last")
    return MODEL_RETRIES if retries is None else int(retries)


def _case_dirs(config: pytest.Config) -> tuple[Path, ...]:
    root = config.rootpath
    case_dirs = [root / d for d in config.getoption("palette_cases")] or list(config.getini("palette_cases"))
    return tuple(Path(os.path.abspath(d)) for d in case_dirs or [root / "cases"])


def _skill_dir(config: pytest.Config) -> Path | None:
    """The skill under test: a folder with a SKILL.md, the packaged Palette skill, or None (`none`: the baseline)."""
    skill = config.getoption("palette_skill")
    if skill is not None and not skill.strip():  # an unset CI variable must not quietly mean the reference skill
        raise pytest.UsageError(f"--palette-skill is empty (an unset variable?): name a skill folder, or "
                                f"{NO_SKILL!r} for no skill; leave the option out for the reference skill")
    skill_dir = None if skill == NO_SKILL else Path(skill).resolve() if skill else PACKAGED_SKILLS / "palette"
    if skill_dir is not None and not (skill_dir / "SKILL.md").is_file():
        raise pytest.UsageError(f"--palette-skill {skill_dir}: no SKILL.md there (or {NO_SKILL!r} for no skill)")
    return skill_dir


def _shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    index, _, total = text.partition("/")
    try:
        i, n = int(index), int(total)
    except ValueError:
        raise pytest.UsageError(f"--palette-shard {text!r}: write it as I/N, e.g. 1/2") from None
    if not 1 <= i <= n:
        raise pytest.UsageError(f"--palette-shard {text!r}: I must be between 1 and N")
    return i, n


def _resume_dir(config: pytest.Config) -> Path | None:
    resume_dir = _path(config, "palette_resume")
    if resume_dir is not None and not run_ledgers(resume_dir):
        raise pytest.UsageError(f"--palette-resume {config.getoption('palette_resume')}: no results.jsonl in "
                                f"{resume_dir}")
    return resume_dir


def _run_id(config: pytest.Config, resume_dir: Path | None) -> str | None:
    """`--palette-run-id`, a plain folder name; a resumed run's is its folder's."""
    run_id: str | None = config.getoption("palette_run_id")
    if run_id is not None and (not run_id or "/" in run_id or run_id.startswith(".")):
        raise pytest.UsageError(f"--palette-run-id {run_id!r}: use a plain folder name")
    if resume_dir is not None and run_id is not None and run_id != resume_dir.name:
        raise pytest.UsageError("--palette-resume names the run folder; drop --palette-run-id")
    return resume_dir.name if resume_dir else run_id


def _run_root(config: pytest.Config, resume_dir: Path | None) -> Path:
    """Where run folders are made: a resumed run's parent, `--palette-run-dir`, else ini, under the rootdir."""
    if resume_dir is not None:
        return resume_dir.parent
    root = config.rootpath
    run_root = Path(config.getoption("palette_run_dir") or root / str(config.getini("palette_run_dir")))
    return run_root if run_root.is_absolute() else root / run_root


def _collect_dir(config: pytest.Config) -> Path | None:
    collect_dir = _path(config, "palette_collect")
    if collect_dir is not None and not collect_dir.is_dir():
        raise pytest.UsageError(f"--palette-collect {config.getoption('palette_collect')}: no run folder at "
                                f"{collect_dir}")
    return collect_dir


def _prices(prices_file: Path | None) -> PriceTable | None:
    try:
        return load_prices(prices_file) if prices_file is not None else None
    except PriceError as error:
        raise pytest.UsageError(f"--palette-prices {error}") from None


def _max_cost(config: pytest.Config) -> float | None:
    max_cost: float | None = config.getoption("palette_max_cost")
    if max_cost is not None and not (math.isfinite(max_cost) and max_cost > 0):
        raise pytest.UsageError(f"--palette-max-cost must be a number of USD more than 0 (got {max_cost:g})")
    return max_cost


def _sandbox_env(config: pytest.Config) -> tuple[str, ...]:
    names = _names(config, "palette_sandbox_env")
    for name in names:
        if not name.isidentifier():
            raise pytest.UsageError(f"--palette-sandbox-env {name!r} is not the name of an environment variable")
    return tuple(names)


def _conversations(config: pytest.Config) -> int:
    given = config.getoption("palette_conversations")
    if given is not None and given < 1:
        raise pytest.UsageError(f"--palette-conversations must be 1 or more (got {given})")
    conversations = int(given or 1)
    if conversations > 1 and config.getoption("numprocesses", None):
        raise pytest.UsageError("--palette-conversations and -n (xdist) both spread conversations: choose one "
                                "(--palette-conversations holds them in one process, which costs far less memory)")
    return conversations


def _credentials() -> Credentials | None:
    try:
        return load_credentials()
    except CredentialsError as error:
        raise pytest.UsageError(str(error)) from None


def _html(config: pytest.Config) -> Path | None:
    html = _path(config, "palette_html")
    refused = site_refusal(html) if html is not None else None
    if refused:
        raise pytest.UsageError(f"--palette-html {refused}")
    return html


def resolve(config: pytest.Config) -> Settings:
    """Every setting from the command line, else ini, else the default: each read by a small check of its own
    that names its source when it refuses a value, in the order the first refusal is told."""
    hosts, model, retries = _hosts(config), _model(config), _model_retries(config)
    faults = _spec(config, "palette_rehearsal_faults", FaultSchedule.parse)
    latency = _spec(config, "palette_rehearsal_latency", ModelLatency.parse)
    limits = _spec(config, "palette_rehearsal_limits", ModelLimits.parse)
    skill_dir = _skill_dir(config)
    runs = _at_least(config, "palette_runs", 1) or 1
    max_context = _at_least(config, "palette_max_context", 1, " byte") or MAX_CONTEXT
    shard = _shard(config.getoption("palette_shard"))
    resume_dir = _resume_dir(config)
    run_id = _run_id(config, resume_dir)
    collect_dir = _collect_dir(config)
    prices_file = _path(config, "palette_prices")
    prices, max_cost = _prices(prices_file), _max_cost(config)
    sandbox_env = _sandbox_env(config)
    conversations = _conversations(config)
    credentials = _credentials()
    otlp, otlp_from = _otlp(config)
    return Settings(
        hosts=hosts, model=model, case_dirs=_case_dirs(config), skill_dir=skill_dir, runs=runs,
        max_context=max_context, shard=shard, run_id=run_id, resume_dir=resume_dir, collect_dir=collect_dir,
        prices=prices, prices_file=prices_file, max_cost=max_cost, conversations=conversations,
        credentials=credentials, html=_html(config), run_root=_run_root(config, resume_dir),
        grader=_grader(config, "palette_grader"), validity=_grader(config, "palette_validity"),
        agent_profile=_agent_profile(config, "palette_agent_profile"),
        judge_profile=_agent_profile(config, "palette_judge_profile"), otlp=otlp, otlp_from=otlp_from,
        progress_after=_number(config, "palette_progress_after", "palette_progress_after", PROGRESS_AFTER),
        turn_timeout=_number(config, "palette_turn_timeout", "palette_turn_timeout", TURN_TIMEOUT),
        build_grace=_number(config, "palette_build_grace", None, DEFAULT_BUILD_GRACE),
        host=HostSettings(
            command_timeout=_number(config, "palette_command_timeout", None, COMMAND_TIMEOUT),
            sandbox=str(config.getoption("palette_sandbox") or "bubblewrap"),
            sandbox_env=sandbox_env,
            withheld=credentials.withheld(sandbox_env) if credentials is not None else (),
            model_retries=retries,
            output_limit=_output_limit(config),
            rehearsal_faults=faults,
            rehearsal_latency=latency,
            rehearsal_limits=limits,
            record=bool(config.getoption("palette_record")),
        ),
    )


def configure_hosts(config: pytest.Config, hosts: Mapping[str, Host], settings: Settings) -> None:
    """Every host takes its own options (a refused value is one line naming its flag); then what depends on which
    hosts run. Every host, not the selected only: each one's terms are in the run's fingerprint."""
    for host in hosts.values():
        host.cache = getattr(config, "cache", None)
        given = {option.name: config.getoption(option.dest(), None) for option in host.options}
        try:
            host.configure(given, skill=settings.skill_dir is not None)
        except OptionRefused as refused:
            raise pytest.UsageError(f"--palette-{refused.option} {refused}") from None
    unrecorded = sorted(name for name in settings.hosts if not hosts[name].records)
    if settings.host.record and unrecorded:
        recording = " or ".join(sorted(name for name, host in hosts.items() if host.records))
        plural = "s" if len(unrecorded) > 1 else ""
        raise pytest.UsageError(f"--palette-record: the {' and '.join(unrecorded)} host{plural} cannot record a "
                                f"cassette yet; record on {recording}")
    if settings.model.provider == "replay" and unrecorded:
        replaying = " or ".join(sorted(name for name, host in hosts.items() if host.records))
        raise pytest.UsageError(f"--model {settings.model.text}: the {' and '.join(unrecorded)} host"
                                f"{'s' if len(unrecorded) > 1 else ''} cannot replay a cassette yet; replay on "
                                f"{replaying}")
    faults = settings.host.rehearsal_faults
    if faults is not None and (settings.model.provider != "rehearsal" or
                               not any(hosts[name].serves_rehearsal for name in settings.hosts)):
        # Only a rehearsal server a host starts injects them; an in-process rehearsal model has no wire.
        served = " and ".join(sorted(name for name, host in hosts.items() if host.serves_rehearsal)) or "no"
        raise pytest.UsageError(f"--palette-rehearsal-faults applies to --model rehearsal on the {served} hosts "
                                "(for another, serve it: python -m pytest_palette.rehearsal.server --faults SPEC, "
                                "then --model openai:rehearsal --palette-base-url URL)")
