"""What a pytest session decides once: the settings, the hosts, the run id, the skill and its hash, the
fingerprint of the terms, which hosts cannot run here — computed on the controller and handed to xdist
workers, never recomputed per item."""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import secrets
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .. import __version__
from ..arena import sandbox, skill_runs, untrusted
from ..arena.workspace import Workspace
from ..backend import describe_backend, round_trip
from ..cases import EXPECT_KEYS, ExpectCheck, known_checks
from ..families.layout import is_family
from ..hosts.base import OUTPUT_LIMIT, Host
from ..judge import PALETTE, PALETTE_RULES
from ..layer.route import route_of
from ..options import Settings, configure_hosts, resolve
from ..results.ledger import find, ledger_name, load, read
from ..results.prices import Price, money, price_of
from ..results.record import NO_SKILL, RecordError, Role, Terms, from_json
from ..results.redaction import Secrets
from ..rules import RulesMissing, SkillRules, rules_for
from ..skill import SkillCard, load_card, skill_hash
from . import credentials, schedule
from .grading import Graders, graders_for
from .overlap import Overlap
from .progress import Board, Sink
from .readiness import readiness

SESSION = pytest.StashKey["Session"]()
#: case name → where it was first defined, to refuse a duplicate in another file.
CASE_NAMES = pytest.StashKey[dict[str, str]]()
#: The order the items start in, in words (run/schedule.py), shown with -v.
ORDER = pytest.StashKey[list[str]]()


@dataclass
class Session:
    settings: Settings
    hosts: dict[str, Host]
    run_id: str
    #: The skill under test; None when no skill is installed anywhere (`--palette-skill none`), whose records
    #: carry the skill hash NO_SKILL.
    skill: SkillCard | None
    skill_hash: str
    fingerprint: str
    #: host → why its items are skipped here (its client is not installed on this machine).
    unavailable: dict[str, str] = field(default_factory=dict)
    _terms: dict[str, Terms] = field(default_factory=dict)
    #: The descriptor holding the run's lock (`claim`), on the process that runs the session.
    lock: int | None = None
    #: When the session began, on the controller: the records this session wrote began after it.
    began: float = field(default_factory=time.time)
    #: The cost this session's records hold, as far as the ledger has been read (`spent`).
    _spent: float = 0.0
    _read_to: int = 0
    #: The conversations held ahead of their items (--palette-conversations), once the run loop starts.
    overlap: Overlap | None = None
    #: Where this process's items report their turns and commands, with -v (`progress`).
    progress: Sink | None = None
    #: The rules that judge the skill under test, and every skill's registered (`pytest_palette_add_rules`).
    rules: SkillRules = PALETTE_RULES
    rule_sets: dict[str, SkillRules] = field(default_factory=dict)
    #: The names the credentials file set in os.environ (the environment lacked them), unset again at the end.
    supplied: tuple[str, ...] = ()
    #: What the harness may still write copying the items' outputs in this process (docs/sandbox.md, "Limits"):
    #: the run's bound, or an xdist worker's even share of it.
    copies: untrusted.Budget = field(default_factory=lambda: run_copies(1))
    #: The run folder's times of each case and host under this model (run/schedule.py): read once, on the controller;
    #: an xdist worker gets the controller's, so every worker orders its items alike whatever is written meanwhile.
    _history: dict[schedule.Key, list[float]] | None = None

    def history(self) -> dict[schedule.Key, list[float]]:
        if self._history is None:
            self._history = schedule.history(self.settings.run_root, self.settings.model.text, skip=self.run_id)
        return self._history

    @functools.cached_property
    def skill_scripts(self) -> frozenset[str] | None:
        """The hashes of the skill's scripts when they tell the record of their runs (`arena/skill_runs.py`): the
        record is then kept of every item, and the judge reads its calls there. None for a skill that does not."""
        if self.skill is None or not skill_runs.speaks_protocol(self.skill.scripts):
            return None
        return skill_runs.digests(self.skill.scripts)
    #: What every line leaving the run is scrubbed of (results/redaction.py): compiled once, when the session starts.
    secrets: Secrets = field(default_factory=Secrets)

    def add_secrets(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Take these (name, value) pairs for secrets too, whatever their names: a task family's `.env` values."""
        self.secrets = self.secrets.more(pairs)

    @property
    def judged_as(self) -> str:
        """The skill whose rules judge this session's items: the skill under test's, Palette's for no skill."""
        return self.skill.name if self.skill is not None else PALETTE

    @property
    def namespaces(self) -> dict[str, ExpectCheck | None]:
        """The skills whose own keys a case may give under `expect:`, each with the check of its value."""
        return {name: rules.expect for name, rules in self.rule_sets.items() if name != PALETTE}

    @property
    def checks(self) -> dict[str, Role]:
        """The checks a case may weigh under `expect: {checks: …}`: every registered skill's, and the common ones."""
        return known_checks(*(rules.checks for rules in self.rule_sets.values()))

    @property
    def run_dir(self) -> Path:
        """The run folder this session writes into (or, with --palette-collect, judges)."""
        return self.settings.collect_dir or self.settings.run_root / self.run_id

    @property
    def ledger(self) -> Path:
        return self.run_dir / ledger_name(self.settings.shard)

    def workspace(self, host: str, case: str, run_index: int) -> Workspace:
        """The item's folder: as it was left when judging a saved run (--palette-collect), else a new one."""
        found = Workspace.of(self.run_dir, host, case, run_index, self.settings.runs > 1)
        return found if self.settings.collect_dir is not None else found.fresh()

    def close(self) -> None:
        """The session's end: every conversation still held closed, every host released, the run's lock let
        go (a session held in-process, as a pytester run, must not keep it)."""
        if self.overlap is not None:
            self.overlap.close()
        for host in self.hosts.values():
            host.close()
        if self.lock is not None:
            os.close(self.lock)
            self.lock = None
        self.supplied = unsupply(self.settings, self.supplied)

    @property
    def price(self) -> Price | None:
        """The user's price for the model under test, when their table names it."""
        return price_of(self.settings.prices, self.settings.model)

    @functools.cached_property
    def graders(self) -> Graders:
        """Who grades a rubric and the validity check (docs/judge.md, "Checks graded by a model")."""
        settings = self.settings
        return graders_for(settings.grader, settings.validity, settings.model,
                           lambda spec: price_of(settings.prices, spec))

    def spent(self) -> float:
        """USD recorded by this session's items so far: read from the ledger, which every xdist worker of the
        session appends to (a shard has a ledger of its own, so the sum is per shard). Read on from where the
        last look stopped; only whole lines, so a record being written is counted at the next look."""
        try:
            with self.ledger.open("rb") as ledger:
                ledger.seek(self._read_to)
                block = ledger.read()
        except FileNotFoundError:
            return self._spent
        whole = block[:block.rfind(b"\n") + 1]
        self._read_to += len(whole)
        for line in whole.splitlines():
            try:
                record = from_json(line)
            except RecordError:
                continue  # not a record: the report warns about it, this sum has nothing to add
            # The graders' cost counts as the agent's does (kept apart in the record, summed here).
            cost = (record.usage.cost_usd or 0.0) + (record.usage.grader_cost_usd or 0.0)
            # A resumed run's ledger holds the earlier sessions' records too: they spent before this one began.
            if cost and record.run_id == self.run_id and record.usage.started_at >= self.began:
                self._spent += cost
        return self._spent

    def over_budget(self) -> str | None:
        """Why no further item may start (--palette-max-cost reached), or None."""
        limit = self.settings.max_cost
        if limit is None:
            return None
        spent = self.spent()
        return f"the run reached --palette-max-cost {money(limit)} after {money(spent)}" if spent >= limit else None

    def terms(self, host: str) -> Terms:
        """What every result of `host` in this session depends on, asked of the host once."""
        if host not in self._terms:
            settings = self.settings
            described = self.hosts[host].describe(route_of(settings.model), settings.host)
            if self.skill is None:  # whatever the host would do with a skill, it was given none
                described["skill_loading"] = f"none (--palette-skill {NO_SKILL}: no skill installed)"
            self._terms[host] = Terms(
                model=settings.model.text, label=described.get("model", settings.model.label),
                provider=settings.model.provider, skill_hash=self.skill_hash, fingerprint=self.fingerprint,
                plugin_version=__version__,
                scaffold=tuple((k, str(v)) for k, v in described.items() if k != "model"),
                sandbox=self.hosts[host].sandbox_kind(settings.host))
        return self._terms[host]


def start(config: pytest.Config) -> Session:
    """The session's values: chosen here on the controller, received from it on an xdist worker."""
    settings = resolve(config)
    # Before the hosts are checked and cases collected: a key or a corpus folder may come from the file.
    supplied = settings.credentials.apply(os.environ) if settings.credentials is not None else ()
    try:
        session = _start(config, settings)
    except BaseException:
        unsupply(settings, supplied)  # the session never was: the process's environment is as it found it
        raise
    session.supplied = supplied
    session.secrets = credentials.secrets_of(os.environ, settings.credentials)
    return session


def unsupply(settings: Settings, supplied: tuple[str, ...]) -> tuple[str, ...]:
    """Take the credentials file's values out of os.environ again (a pytester session shares the process)."""
    given = dict(settings.credentials.values) if settings.credentials is not None else {}
    for name in supplied:
        if os.environ.get(name) == given.get(name):
            del os.environ[name]
    return ()


def _start(config: pytest.Config, settings: Settings) -> Session:
    hosts: dict[str, Host] = {}
    config.hook.pytest_palette_add_hosts(hosts=hosts, config=config)
    unknown = [name for name in settings.hosts if name not in hosts]
    if unknown:
        raise pytest.UsageError(f"--host {', '.join(unknown)}: no such host; known: {', '.join(sorted(hosts))}")
    configure_hosts(config, hosts, settings)
    skill = load_card(settings.skill_dir) if settings.skill_dir is not None else None
    # No skill (the baseline) is judged by Palette's rules: the lift is measured by one judge.
    judged_as = skill.name if skill is not None else PALETTE
    rule_sets, rules = skill_rules(config, judged_as, settings.skill_dir or Path(NO_SKILL))
    given: dict[str, Any] | None = getattr(config, "workerinput", {}).get("palette_session")
    if given is not None:
        return Session(settings, hosts, given["run_id"], skill, given["skill_hash"], given["fingerprint"],
                       dict(given["unavailable"]), began=float(given["began"]), rules=rules, rule_sets=rule_sets,
                       copies=run_copies(int(getattr(config, "workerinput", {}).get("workercount", 1))),
                       _history={(case, host, model): list(times) for case, host, model, times in given["history"]})
    digest = skill_hash(settings.skill_dir) if settings.skill_dir is not None else NO_SKILL
    run_id = settings.run_id or time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)
    host_terms: dict[str, object] = {}
    for name in sorted(hosts):  # a term two hosts name (a subclass's) is the first's
        for term, value in hosts[name].terms().items():
            host_terms.setdefault(term, value)
    session = Session(settings, hosts, run_id, skill, digest, fingerprint(settings, digest, judged_as, host_terms),
                      rules=rules, rule_sets=rule_sets)
    # A session of no palette cases (`pytest tests`) makes no run folder: nothing would ever be written in it.
    if not config.option.collectonly and not config.getoption("palette_check") and \
            collects_cases(config, settings.case_dirs):
        ready = readiness({name: hosts[name] for name in settings.hosts}, settings.model, settings.host,
                          settings.run_root if settings.collect_dir is None else None)
        session.unavailable.update(ready.unavailable())
        problems = ready.blocking()
        if problems:
            raise pytest.UsageError("not ready to run:\n  " + "\n  ".join(problems))
        if settings.collect_dir is None:
            refuse_existing_run(session)
            refuse_foreign_ledger(session)
            claim(session)
    return session


def run_copies(workers: int) -> untrusted.Budget:
    """The run's bound on what the harness copies from its items, for one of its `workers` processes: each holds
    an even share, so together they stay within it."""
    if workers <= 1:
        return untrusted.Budget(untrusted.RUN_COPY_BYTES, "the run's copies")
    return untrusted.Budget(untrusted.RUN_COPY_BYTES // workers, f"this worker's share of the run's copies "
                            f"(1 of {workers})")


def skill_rules(config: pytest.Config, skill: str, where: Path) -> tuple[dict[str, SkillRules], SkillRules]:
    """Every skill's registered rules, and those of the skill under test; a usage error when it has none."""
    rule_sets: dict[str, SkillRules] = {}
    config.hook.pytest_palette_add_rules(rules=rule_sets, config=config)
    clash = sorted(set(rule_sets) & set(EXPECT_KEYS))
    if clash:
        raise pytest.UsageError(f"pytest_palette_add_rules: a skill named {', '.join(map(repr, clash))} would take "
                                "a key of Palette's own under expect: (deck, slides, …); rename the skill")
    try:
        return rule_sets, rules_for(skill, rule_sets)
    except RulesMissing as error:
        raise pytest.UsageError(f"--palette-skill {where}: {error}") from None


def refuse_existing_run(session: Session) -> None:
    """An earlier run is never written into by accident: its folder is continued only with --palette-resume,
    or by another shard of it (each shard has a ledger of its own)."""
    settings, run = session.settings, session.run_dir
    if settings.resume_dir is not None or not run.exists():
        return
    if settings.shard is not None and not session.ledger.exists():
        return
    raise pytest.UsageError(
        f"--palette-run-id {session.run_id}: {run} already holds a run"
        f"{' (this shard has run in it)' if settings.shard else ''}; nothing in it was touched. Continue it with "
        f"--palette-resume {run}, or choose another --palette-run-id")


def claim(session: Session) -> None:
    """Hold the run's ledger for this session: a second session writing the same ledger at the same time (the
    same run id and shard, or two resumes) stops here with a clear error instead of sharing workspaces."""
    session.run_dir.mkdir(parents=True, exist_ok=True)
    lock = os.open(session.run_dir / f".{session.ledger.name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock)
        raise pytest.UsageError(f"{session.run_dir}: another pytest session is writing this run's ledger "
                                f"({session.ledger.name}) right now; wait for it to end") from None
    session.lock = lock  # released when the process ends


def for_workers(session: Session) -> dict[str, Any]:
    """What an xdist worker receives instead of choosing again: plain values only."""
    return {"run_id": session.run_id, "skill_hash": session.skill_hash, "fingerprint": session.fingerprint,
            "unavailable": dict(session.unavailable), "began": session.began,
            "progress": str(session.progress.folder) if isinstance(session.progress, Board) else None,
            "history": [[*key, times] for key, times in session.history().items()]}


def fingerprint(settings: Settings, skill_hash: str, skill: str = PALETTE,
                host_terms: Mapping[str, object] | None = None) -> str:
    """The configuration a result depends on: two runs with one fingerprint asked under the same terms.
    `host_terms`: those of the hosts' own options (react's recursion limit and eager loading), of every host
    the session knows, selected or not, as when they were shared settings: earlier runs keep their fingerprints."""
    terms: dict[str, object] = {
        "model": settings.model.text, "skill_hash": skill_hash, "backend": describe_backend(),
        "plugin": __version__, "turn_timeout": settings.turn_timeout, "build_grace": settings.build_grace,
        "command_timeout": settings.host.command_timeout, "sandbox": settings.host.sandbox,
        "sandbox_env": sorted(settings.host.sandbox_env), **(host_terms or {}),
    }
    if settings.model.base_url:  # only when given, so the fingerprints of earlier runs still match
        terms["base_url"] = settings.model.base_url
    if settings.host.output_limit != OUTPUT_LIMIT:  # likewise: what the agent reads of a command is a term
        terms["output_limit"] = settings.host.output_limit
    if settings.host.rehearsal_limits:  # the rehearsal model's limits end turns: a term, only when given
        terms["rehearsal_limits"] = settings.host.rehearsal_limits
    if skill != PALETTE:  # another skill's rules judge it (and, as above, Palette's runs keep their fingerprints)
        terms["rules"] = skill
    if settings.grader is not None:  # a rubric's grade depends on its grader; likewise only when given
        terms["grader"] = settings.grader.text
    if settings.validity is not None:
        terms["validity"] = settings.validity.text
    return hashlib.sha256(json.dumps(terms, sort_keys=True).encode()).hexdigest()[:16]


def refuse_foreign_ledger(session: Session) -> None:
    """Appending to a run written under other terms would mix two measurements in one run."""
    ledgers = find(session.run_dir).ledgers if session.run_dir.is_dir() else []
    theirs = {record.terms.fingerprint for ledger in ledgers for record in read(ledger)}
    if theirs - {session.fingerprint}:
        raise pytest.UsageError(
            f"{session.run_dir} was written under another configuration (fingerprint {', '.join(sorted(theirs))}; "
            f"this session's is {session.fingerprint}): model, skill, budgets or plugin version differ. "
            "Start a new run instead.")


def finished(run: Path) -> set[tuple[str, str, int]]:
    """(case, host, run) of a run whose latest record is a verdict; missing, errored and skipped ones run again."""
    return {(r.case, r.host, r.run_index) for r in load(run).latest.values() if r.judged is not None}


def check(session: Session, emit: Any) -> int:
    """`--palette-check`: every selected host's problems, each with its fix; 0 when all are ready. A host's
    problem may quote its client's words: each line is scrubbed of the session's secrets."""
    settings = session.settings

    def write(text: str, **markup: bool) -> None:
        emit(session.secrets.scrub(text), **markup)

    write(f"palette check: model {settings.model.label} · {skill_words(session)}")
    if settings.credentials is not None:
        write(credentials.describe(settings.credentials, session.supplied).removeprefix("palette: "))
    # "Ready" means what a case needs: well-formed settings, a run folder with room, and a plan back from the
    # backend the skill will actually use.
    asked = readiness({name: session.hosts[name] for name in settings.hosts}, settings.model, settings.host,
                      settings.run_root, session.skill)
    found = [*asked.settings, *filter(None, [asked.run_folder])]
    write(f"settings and run folder: {'ready' if not found else 'NOT ready'}", green=not found, red=bool(found))
    for said_wrong in found:
        write(f"  ✗ {said_wrong}")
    confinement = asked.confinement
    kind = sandbox.MODES.get(settings.host.sandbox, settings.host.sandbox)
    write(f"agent's commands: {kind}: {'ready' if not confinement else 'NOT ready'}", green=not confinement,
          red=bool(confinement))
    if confinement:
        write(f"  ✗ {confinement}")
    missing, said = round_trip(session.skill) if session.skill is not None else \
        (None, "not asked: no skill is installed, so nothing calls Palette")
    ready = missing is None and not found and not confinement
    write(f"backend: {describe_backend()}: {'ready' if ready else 'NOT ready'} ({said})", green=ready, red=not ready)
    if missing:
        write(f"  ✗ {missing}")
    for name, problems in asked.hosts.items():
        ready = ready and not problems
        write(f"{name}: {'ready' if not problems else 'NOT ready'}", green=not problems, red=bool(problems))
        for problem in problems:
            write(f"  ✗ {problem}")
    return 0 if ready else 1


def header(session: Session, named: Sequence[Path] = ()) -> list[str]:
    """What is about to be measured: hosts, model, skill (with its hash), Palette backend, run folder. `named`: the
    paths of the command line (a task family among them offers its own skill)."""
    settings = session.settings
    families = [path for path in named if is_family(path, named=True)]
    skill = f"palette: {skill_words(session)}" + (f" · {describe_backend()}" if session.skill is not None else
                                                  ": no skill is installed on any host; judged by the same rules")
    return [
        f"palette: hosts {', '.join(settings.hosts)} · model {settings.model.label}",
        # A task family offers its own skill and is graded by its own hooks and tests, not Palette's.
        *([f"palette: task famil{'y' if len(families) == 1 else 'ies'} {', '.join(map(str, families))}: each "
           "offers its own .claude/ skill and is graded by its own hooks and hidden tests"] if families else []),
        *([skill] if len(families) < len(named) or not families else []),
        f"palette: run folder {session.run_dir} · the agent's commands "
        + " and ".join(sorted({session.hosts[name].sandbox_kind(settings.host) for name in settings.hosts}))
        + (f" (given {', '.join(settings.host.sandbox_env)} too)" if settings.host.sandbox_env else ""),
        *(f"palette: {name}: " + ", ".join(f"{k} {v}" for k, v in session.terms(name).scaffold)
          for name in settings.hosts),
        *([credentials.describe(settings.credentials, session.supplied)] if settings.credentials is not None
          else []),
        *([cost_line(session)] if settings.prices is not None or settings.max_cost is not None else []),
    ]


def skill_words(session: Session) -> str:
    """The skill under test as the header and the check name it: its folder and hash, or the baseline."""
    if session.skill is None:
        return f"skill: {NO_SKILL} (baseline)"
    return f"skill {session.settings.skill_dir} ({session.skill_hash})"


def cost_line(session: Session) -> str:
    """Where this session's costs will come from, and its limit."""
    settings, price = session.settings, session.price
    model = settings.model
    if price is not None:
        said = (f"cost from --palette-prices {settings.prices_file} ({money(price.input)} input, "
                f"{money(price.output)} output per million tokens)")
    elif model.provider == "rehearsal":
        said = "tokens, no cost: the rehearsal model is priced only when --palette-prices names it"
    else:
        said = (f"cost as the client reports it, else none: no price for {model.text}"
                + (f" in {settings.prices_file}" if settings.prices_file else ": pass --palette-prices"))
    if settings.max_cost is not None:
        said += f" · no item starts after the session has recorded {money(settings.max_cost)} (--palette-max-cost)"
    return f"palette: {said}"


def arguments(config: pytest.Config) -> list[Path]:
    """The paths the command line names (a node id's file part), resolved."""
    return [(config.invocation_params.dir / arg.split("::")[0]).resolve() for arg in config.args]


def measuring(config: pytest.Config) -> bool:
    """Whether this session collects palette cases: an argument is, holds or lies in a case folder, or is YAML."""
    return collects_cases(config, config.stash[SESSION].settings.case_dirs)


def collects_cases(config: pytest.Config, case_dirs: Sequence[Path]) -> bool:
    """Whether an argument is, holds or lies in a case folder, is YAML, or is a task family's root."""
    return any(path.suffix in (".yaml", ".yml") or is_family(path, named=True) or any(
        path.is_relative_to(d) or d.is_relative_to(path) for d in case_dirs) for path in arguments(config))
