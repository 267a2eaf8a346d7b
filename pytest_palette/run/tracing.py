"""OpenTelemetry traces of a session's items (`--palette-otlp`, docs/runs.md, "OpenTelemetry traces").

Each item is one trace, sent over OTLP/HTTP through the OpenTelemetry SDK as the item ends: a root span for the item
(case × host), a span per turn under it, and under each turn a span for the turn's model calls and one per command
the agent ran. Attributes use the GenAI semantic conventions' names (as opentelemetry-semantic-conventions 0.66b2
spells them) and our own `palette.*`. The spans are built once the item's record is written, from the record, the
turns and our record of the commands, with the times those hold.

A collector that does not take them costs the run one warning at its end: an export is bounded (EXPORT_TIMEOUT, in
the processor's own thread, never an item's), the first failure stops this process sending, and the SDK's own log
lines about it are kept out of the run's output. Every string that goes into a span is scrubbed of the session's
secrets; no answer or message of the agent's goes in, only its commands' text.

The SDK is imported only by a session that sends traces (`pytest-palette[otlp]`). Each process that runs items (the
one process, or each xdist worker) has its own tracer provider, made at its first item's end and shut down at its
session's end; a worker hands the controller why its collector failed (`workeroutput`), and the controller warns.
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from .. import __version__
from ..arena import command_log
from ..arena.command_log import CommandRun
from ..arena.workspace import Workspace, item_label
from ..hosts.base import TurnRecord
from ..hosts.stops import one_line
from ..models import ModelSpec
from ..options import otlp_installed
from ..results.record import Record
from ..results.redaction import Secrets
from .session import SESSION

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer

#: Seconds one export may take, its retries included: a collector that is down never holds the run for longer.
EXPORT_TIMEOUT = 3.0
#: The batch processor's wait between looks at its queue: an item's trace leaves about this long after the item ends.
SCHEDULE_MS = 500
#: The characters of one command's text kept in its span.
COMMAND_CHARS = 2_000
#: The SDK's logger that reports a failed export (its retries and its giving up): its lines are this module's
#: one warning instead.
EXPORTER_LOGGER = "opentelemetry.exporter.otlp.proto.http.trace_exporter"
#: Where a worker tells the controller why its collector did not take its traces.
WORKER_OUTPUT = "palette_otlp_failed"
#: Our providers, by their GenAI name (`gen_ai.provider.name`); the others are named as `--model` names them.
PROVIDERS = {"watsonx": "ibm.watsonx.ai", "openai": "openai", "anthropic": "anthropic"}


class OtlpWarning(UserWarning):
    """The collector did not take the session's traces: the run went on without them."""


@dataclass
class Traces:
    """One session's traces in this process: where they go, the provider once an item has ended, and why the
    collector failed (the first time)."""

    url: str
    source: str
    model: ModelSpec
    run_id: str
    #: Why no span leaves this process: the collector failed to take a batch, or the SDK is not installed.
    failed: str | None = None
    provider: TracerProvider | None = None
    tracer: Tracer | None = None
    #: The SDK's words about the export that failed (its first log line of it), the reason the warning gives.
    said: str | None = None
    #: Whether the warning was given (the session's end is reached twice: sessionfinish, then unconfigure).
    warned: bool = False
    _quiet: logging.Filter | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> Tracer:
        """This process's tracer, its provider and batch processor made the first time."""
        with self._lock:
            if self.tracer is None:
                from opentelemetry.sdk.resources import Resource
                from opentelemetry.sdk.trace import TracerProvider
                from opentelemetry.sdk.trace.export import BatchSpanProcessor

                # Not the process's global provider: a session held in-process (pytester) must leave nothing behind.
                self.provider = TracerProvider(resource=Resource.create({
                    "service.name": "pytest-palette", "service.version": __version__, "palette.run_id": self.run_id}))
                self.provider.add_span_processor(BatchSpanProcessor(_exporter(self), schedule_delay_millis=SCHEDULE_MS))
                self._quiet = _Quiet(self)
                logging.getLogger(EXPORTER_LOGGER).addFilter(self._quiet)
                self.tracer = self.provider.get_tracer("pytest_palette", __version__)
            return self.tracer

    def stop(self) -> None:
        """Send what is left (bounded) and let the provider go; the SDK's logger as it was."""
        provider, self.provider, self.tracer = self.provider, None, None
        if provider is not None:
            # The processor's last exports: each bounded by EXPORT_TIMEOUT, and none tried once one failed.
            provider.shutdown()
        if self._quiet is not None:
            logging.getLogger(EXPORTER_LOGGER).removeFilter(self._quiet)
            self._quiet = None

    def fail(self, why: str) -> None:
        if self.failed is None:
            self.failed = why


TRACES = pytest.StashKey[Traces]()


def start(config: pytest.Config) -> None:
    """The session's traces, when a collector is named: nothing is imported or started until an item ends."""
    session = config.stash[SESSION]
    settings = session.settings
    if settings.otlp is None:
        return
    traces = config.stash[TRACES] = Traces(settings.otlp, settings.otlp_from, settings.model, session.run_id)
    if not otlp_installed():  # named by a variable set for other programs; the flag refused this already
        traces.failed = (f"{settings.otlp_from} names a collector, but the OpenTelemetry SDK is not installed: "
                         "pip install 'pytest-palette[otlp]'")


def item_ended(config: pytest.Config, record: Record, turns: Sequence[TurnRecord], workspace: Workspace,
               secrets: Secrets) -> None:
    """Hand the item's trace to this process's batch processor, which sends it within SCHEDULE_MS. Never raises: a
    trace that cannot be made is the session's one warning, not the item's failure."""
    traces = config.stash.get(TRACES, None)
    if traces is None or traces.failed is not None:
        return
    try:
        commands = command_log.read(workspace.commands) if turns else []
        _item_spans(traces.start(), record, item_label(record, workspace), turns, commands, traces.model, secrets)
    except Exception as error:  # a bug of ours, named in the warning; the item's verdict stands
        traces.fail(f"its spans could not be made: {type(error).__name__}: {error}")


def finish(config: pytest.Config) -> None:
    """This process's session end: its last traces sent, its provider shut down; a worker tells the controller
    why its collector failed, the controller or the one process warns once."""
    traces = config.stash.get(TRACES, None)
    if traces is None:
        return
    traces.stop()
    output: dict[str, Any] | None = getattr(config, "workeroutput", None)
    if output is not None:
        if traces.failed is not None:
            output[WORKER_OUTPUT] = traces.failed
        return
    if traces.failed is not None and not traces.warned:
        traces.warned = True
        _warn(config, traces)


def node_down(config: pytest.Config, output: Mapping[str, Any] | None) -> None:
    """xdist's controller: a worker ended; the first reason any worker gives is the one the warning says."""
    traces = config.stash.get(TRACES, None)
    if traces is not None and output and output.get(WORKER_OUTPUT):
        traces.fail(str(output[WORKER_OUTPUT]))


def _warn(config: pytest.Config, traces: Traces) -> None:
    session = config.stash.get(SESSION, None)  # its secrets as they are at the end (a family adds its .env's)
    secrets = session.secrets if session is not None else Secrets()
    words = secrets.scrub(f"palette: the OpenTelemetry collector at {traces.url} ({traces.source}) did not take "
                          f"this run's traces: {traces.failed}; the run went on without them")
    try:
        warnings.warn(OtlpWarning(words), stacklevel=1)
    except Warning:  # -W error: still said once, and never the session's error
        terminal = config.pluginmanager.get_plugin("terminalreporter")
        if terminal is not None:
            terminal.write_line("")  # ends the line of progress it may be on
            terminal.write_line(words, yellow=True)


class _Quiet(logging.Filter):
    """Keeps the SDK's lines about a failed export out of the run's output, and its last words for the warning."""

    def __init__(self, traces: Traces) -> None:
        super().__init__()
        self.traces = traces

    def filter(self, record: logging.LogRecord) -> bool:
        if self.traces.said is None:  # the first names the cause (a refused connection); the last only gives up
            self.traces.said = one_line(_cause(record), 300)
        return False


def _cause(record: logging.LogRecord) -> str:
    """The SDK's line about a failed export, down to its cause where it is one of the two lines that name one (its
    retry, its refusal by HTTP status); else the whole line."""
    args = record.args if isinstance(record.args, tuple) else ()
    if str(record.msg).startswith("Transient error") and args:
        return str(args[0])
    if str(record.msg).startswith("Failed to export %s batch code") and len(args) == 3:
        return f"HTTP {args[1]}: {args[2]}" if args[1] else str(args[2])
    return record.getMessage()


def _exporter(traces: Traces) -> SpanExporter:
    """The SDK's OTLP/HTTP exporter, bounded by EXPORT_TIMEOUT, that sends nothing more once a batch failed."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class Guarded(SpanExporter):
        def __init__(self) -> None:
            self.inner = OTLPSpanExporter(endpoint=traces.url, timeout=EXPORT_TIMEOUT)

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            if traces.failed is not None:  # one failure is enough: the rest of the run pays nothing more
                return SpanExportResult.FAILURE
            try:
                result = self.inner.export(spans)
            except Exception as error:  # the processor would log it: it is the warning's instead
                traces.said, result = f"{type(error).__name__}: {error}", SpanExportResult.FAILURE
            if result is not SpanExportResult.SUCCESS:
                traces.fail(traces.said or "it did not answer")
            traces.said = None  # a retry that went through: its words were no failure
            return result

        def shutdown(self) -> None:
            self.inner.shutdown()  # type: ignore[no-untyped-call]  # the SDK leaves it unannotated

        def force_flush(self, timeout_millis: int = 30_000) -> bool:
            return True

    return Guarded()


# -- the spans of one item ------------------------------------------------------------------------------------


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def _model_attributes(model: ModelSpec) -> dict[str, str]:
    provider = PROVIDERS.get(model.provider, model.provider)
    # gen_ai.system is gen_ai.provider.name's former name, which collectors still read.
    return {"gen_ai.request.model": model.model_id, "gen_ai.provider.name": provider, "gen_ai.system": provider}


def _tokens(input_tokens: int | None, output_tokens: int | None, prefix: str = "gen_ai.usage") -> dict[str, int]:
    """Token counts as attributes, each only where the host reported it (None is never 0). The GenAI usage names go
    on the model calls' spans alone, where the tokens were spent: a receiver that sums a trace's spans (Phoenix does)
    then counts each once; the item and its turns say theirs as `palette.input_tokens` and `palette.output_tokens`."""
    counts = {f"{prefix}.input_tokens": input_tokens, f"{prefix}.output_tokens": output_tokens}
    return {name: count for name, count in counts.items() if count is not None}


def _scrubbed(attributes: Mapping[str, Any], secrets: Secrets) -> dict[str, Any]:
    """Attributes with every string, alone or in a sequence, scrubbed of the session's secrets (again, for a text
    cut short: it is scrubbed before its cut); None left out."""
    kept: dict[str, Any] = {}
    for name, value in attributes.items():
        if isinstance(value, str):
            kept[name] = secrets.scrub(value)
        elif isinstance(value, (tuple, list)):
            kept[name] = [secrets.scrub(v) if isinstance(v, str) else v for v in value]
        elif value is not None:
            kept[name] = value
    return kept


def _item_spans(tracer: Tracer, record: Record, label: str, turns: Sequence[TurnRecord],
                commands: Sequence[CommandRun], model: ModelSpec, secrets: Secrets) -> None:
    from opentelemetry.trace import Status, StatusCode, set_span_in_context

    usage, judged = record.usage, record.judged
    root = tracer.start_span(label, start_time=_ns(usage.started_at), attributes=_scrubbed({
        # The item is a workflow of turns: the scripted user's messages, each an invocation of the agent.
        "gen_ai.operation.name": "invoke_workflow", "gen_ai.workflow.name": label, "gen_ai.agent.name": record.host,
        "gen_ai.conversation.id": f"{record.run_id}/{record.workspace or label}",
        **_model_attributes(model), **_tokens(usage.input_tokens, usage.output_tokens, "palette"),
        "palette.case": record.case, "palette.host": record.host, "palette.run_id": record.run_id,
        "palette.run_index": record.run_index, "palette.outcome": record.outcome,
        "palette.score": judged.score if judged is not None else None,
        "palette.failed_checks": [c.name for c in judged.checks if c.passed is False] if judged is not None else [],
        "palette.failures": [one_line(secrets.scrub(f)) for f in record.failures], "palette.turns": usage.turns,
        "palette.model_calls": usage.model_calls, "palette.commands": usage.commands,
        "palette.cost_usd": usage.cost_usd, "palette.skill_hash": record.terms.skill_hash,
        "palette.model": record.terms.label, "palette.sandbox": record.terms.sandbox,
    }, secrets))
    if record.outcome == "error":  # a fault of the run; a FAIL is a verdict on the skill, said by palette.outcome
        root.set_status(Status(StatusCode.ERROR, one_line(secrets.scrub(record.failures[0]) if record.failures
                                                          else "error")))
    item = set_span_in_context(root)
    timed = [turn for turn in turns if turn.started_at is not None]
    # A turn's commands are those started from its message to the next turn's (the first's from the item's start).
    bounds = [float("-inf"), *(turn.started_at for turn in timed[1:] if turn.started_at is not None), float("inf")]
    for number, turn in enumerate(timed):
        mine = [run for run in commands if bounds[number] <= run.started_at < bounds[number + 1]]
        _turn_spans(tracer, item, number + 1, turn, mine, record.host, model, secrets)
    if not timed:  # turns of an earlier version kept no times: the commands hang from the item
        for run in commands:
            _command_span(tracer, item, run, secrets)
    root.end(end_time=_ns(max(usage.ended_at, usage.started_at)))


def _turn_spans(tracer: Tracer, item: Context, number: int, turn: TurnRecord, commands: Sequence[CommandRun], host: str,
                model: ModelSpec, secrets: Secrets) -> None:
    from opentelemetry.trace import Status, StatusCode, set_span_in_context

    assert turn.started_at is not None
    start, end = _ns(turn.started_at), _ns(turn.started_at + turn.seconds)
    counts = turn.usage.get("input_tokens"), turn.usage.get("output_tokens")
    span = tracer.start_span(f"invoke_agent {host}", context=item, start_time=start, attributes=_scrubbed({
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": host, **_model_attributes(model),
        **_tokens(*counts, "palette"),
        "palette.turn": number, "palette.stop": turn.stop, "palette.model_calls": turn.model_calls,
        "palette.commands": len(commands), "palette.retries": turn.retries, "palette.cost_usd": turn.cost_usd,
    }, secrets))
    if turn.error:
        span.set_status(Status(StatusCode.ERROR, one_line(secrets.scrub(turn.error))))
    inside = set_span_in_context(span)
    # No host times its model calls one by one: one span holds the turn's, with their count and tokens, over the turn.
    calls: Span = tracer.start_span(f"chat {model.model_id}", context=inside, start_time=start, attributes=_scrubbed({
        "gen_ai.operation.name": "chat", **_model_attributes(model), **_tokens(*counts),
        "palette.model_calls": turn.model_calls, "palette.retries": turn.retries,
    }, secrets))
    calls.end(end_time=end)
    for run in commands:
        _command_span(tracer, inside, run, secrets)
    span.end(end_time=end)


def _command_span(tracer: Tracer, parent: Context, run: CommandRun, secrets: Secrets) -> None:
    # Every host's tool for the agent's commands is a shell, whatever the host calls it (Bash, run_command, shell).
    text = secrets.scrub(run.command)  # before it is cut: a cut through a key would leave part of it
    text = text if len(text) <= COMMAND_CHARS else text[:COMMAND_CHARS] + "…"
    span = tracer.start_span("execute_tool shell", context=parent, start_time=_ns(run.started_at),
                             attributes=_scrubbed({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "shell",
                                                   "palette.command": text, "process.exit.code": run.exit_code},
                                                  secrets))
    span.end(end_time=_ns(max(run.ended_at, run.started_at)))
