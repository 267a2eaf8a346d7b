"""What one run of the Claude Code CLI printed (`--output-format stream-json --verbose`), read: the skills its
`system/init` line names, each step and command as it streamed, and its `result` — the answer, usage, and why the
turn ended (`stopped`: a limit, in the result's own fields) or failed (`failure`, in the CLI's own words)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..arena.command_log import NOT_FOUND, CommandRun, not_found
from .stops import TurnStopped, context_limit, finished, output_limit, step_budget

Json = dict[str, Any]

#: How much of the CLI's stderr a failure's words keep.
TAIL = 1500
#: The model the CLI names on a message it wrote itself (an API error's words, in the model's place).
SYNTHETIC = "<synthetic>"


@dataclass
class CliOutput:
    """One invocation's stream-json output, read."""

    skills: list[str] | None = None  # from system/init; None when the CLI printed no init
    session_id: str | None = None
    steps: list[str] = field(default_factory=list)
    result: Json | None = None
    #: The Bash commands that ended, with the times the CLI stamped on the call and on its result.
    commands: list[CommandRun] = field(default_factory=list)
    #: API calls the CLI retried after a transient error: one `system/api_retry` line each.
    retries: int = 0
    #: Each time the CLI compacted the conversation (a `system/compact_boundary` line): its `compact_metadata`.
    compactions: list[Json] = field(default_factory=list)
    #: The model's answers the CLI streamed, by message id (one answer may stream as several `assistant` lines, a
    #: block each), in order: not the CLI's own `<synthetic>` messages (an API error's words), nor a failed call.
    answers: list[str] = field(default_factory=list)


def parse_stream(lines: Iterable[str]) -> CliOutput:
    """The init, the steps (tool calls and results), the commands run and the final result of a stream-json
    run."""
    out = CliOutput()
    running: dict[str, tuple[str, float]] = {}  # Bash tool_use id → (command, when the CLI made the call)
    for line in lines:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue  # not ours to judge: the CLI may print a warning line
        if not isinstance(event, dict):
            continue
        kind = event.get("type")
        if kind == "system" and event.get("subtype") == "init":
            out.skills = [str(s) for s in event.get("skills") or []]
            out.session_id = event.get("session_id")
        elif kind == "system" and event.get("subtype") == "api_retry":
            out.retries += 1
        elif kind == "system" and event.get("subtype") == "compact_boundary":
            metadata = event.get("compact_metadata")
            out.compactions.append(metadata if isinstance(metadata, dict) else {})
        elif kind in ("assistant", "user"):
            out.steps += _steps(event)
            _commands(event, running, out.commands)
            message = event.get("message") if kind == "assistant" else None
            if isinstance(message, dict) and message.get("model") != SYNTHETIC and message.get("id") \
                    and str(message["id"]) not in out.answers:
                out.answers.append(str(message["id"]))
        elif kind == "result":
            out.result = event
    return out


def _steps(event: Json) -> list[str]:
    """Progress lines in the react host's shape: `→ tool: input`, `← result`."""
    content = (event.get("message") or {}).get("content")
    lines: list[str] = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "tool_use":
            given = block.get("input") or {}
            shown = given.get("command") or given.get("skill") or json.dumps(given)[:200]
            lines.append(f"→ {block.get('name')}: {shown}")
        elif block.get("type") == "tool_result":
            lines.append(f"← {' '.join(_result_text(block).split())[:160]}")
    return lines


def _result_text(block: Json) -> str:
    """A tool result's text: the CLI gives a string or a list of text blocks."""
    body = block.get("content")
    return body if isinstance(body, str) else " ".join(
        str(b.get("text", "")) for b in body or [] if isinstance(b, dict))


def _commands(event: Json, running: dict[str, tuple[str, float]], ended: list[CommandRun]) -> None:
    """Pair each Bash call with its result, timed by the stamps the CLI puts on both events."""
    try:
        at = datetime.fromisoformat(str(event.get("timestamp"))).timestamp()
    except ValueError:
        return  # an event without a time cannot place a command
    content = (event.get("message") or {}).get("content")
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "tool_use" and block.get("name") == "Bash":
            command = (block.get("input") or {}).get("command")
            if isinstance(command, str):
                running[str(block.get("id"))] = (command, at)
        elif block.get("type") == "tool_result" and str(block.get("tool_use_id")) in running:
            command, started = running.pop(str(block.get("tool_use_id")))
            result = event.get("tool_use_result")
            text = _result_text(block)
            if isinstance(result, dict):
                stdout, stderr = str(result.get("stdout", "")), str(result.get("stderr", ""))
            else:  # the text mixes both; a failure's text is also the error (the CLI's word on why)
                stdout, stderr = text, (text if block.get("is_error") else "")
            # The CLI marks a failed command as an error and says its exit code in the text; a command its shell
            # could not find is 127 even where the CLI says only the shell's words.
            code = re.search(r"\bExit code (\d+)", text) if block.get("is_error") else None
            exit_code = int(code.group(1)) if code else (
                (NOT_FOUND if not_found(text) else None) if block.get("is_error") else 0)
            ended.append(CommandRun(command, started, max(at, started), exit_code, stdout, stderr))


def stopped(out: CliOutput, max_turns: int | None = None, message: str = "", window: int | None = None,
            refusal: tuple[int, bytes] | None = None) -> TurnStopped | None:
    """Why the CLI ended this turn before the agent answered, when its result names a limit (hosts/stops.py) — read
    from the fields the CLI sets, never from the model's words; None when it names none. `max_turns` is the budget
    the turn ran with, `message` the turn's, `window` the model's context window as the CLI reported it on an
    earlier turn, and `refusal` the last error answer (status, body) the forwarder passed on this turn: the CLI
    words an API's context refusal without its sizes."""
    result = out.result
    if result is None:
        return None
    subtype, reason, said = result.get("subtype"), result.get("terminal_reason"), str(result.get("result") or "")
    if subtype == "error_max_turns" or reason == "max_turns":
        # CLI 2.1: {"subtype": "error_max_turns", "terminal_reason": "max_turns", "errors": ["Reached maximum
        # number of turns (N)"]} after N model calls, each asking for a tool.
        return step_budget(f"max-turns {max_turns}" if max_turns else "the CLI's max-turns")
    if result.get("api_error") == "max_output_tokens":
        # CLI 2.1 meets `stop_reason: "max_tokens"` by asking the model to go on (three times), then gives up:
        # {"is_error": true, "subtype": "success", "api_error": "max_output_tokens", "terminal_reason": "api_error"}.
        return output_limit('the CLI\'s result: api_error "max_output_tokens", after it asked the model to go on')
    stop_reason = str(result.get("stop_reason") or "")
    ended = finished(stop_reason, f'the CLI\'s result: stop_reason "{stop_reason}"')
    if ended is not None:
        return ended
    if reason == "blocking_limit":
        # Auto-compact is off (WHOLE_CONVERSATION): past its model's window the CLI stops, sending nothing.
        size = f" of {window:,} tokens" if window else ""  # known once a call of this session has said it
        return TurnStopped("context_limit", f"ended at the model's context limit: the CLI would not send the "
                                            f"conversation (terminal_reason \"blocking_limit\", \"{said[:100]}\"): "
                                            f"with this turn's message of {len(message):,} characters it is past "
                                            f"the model's context window{size}, a limit of the host (docs/hosts.md, "
                                            "Limits)")
    if reason == "prompt_too_long":
        # The API refused the request (CLI 2.1: "api_error_status": 400, "result": "Prompt is too long"); its own
        # words, as the forwarder passed them on, name the sizes.
        status = result.get("api_error_status") or (refusal[0] if refusal else None)
        words = refusal[1].decode("utf-8", "replace") if refusal else ""
        reported = f"API status {status}, terminal_reason \"prompt_too_long\""
        found = context_limit(words)
        if found is not None:
            return TurnStopped("context_limit", f"{found} ({reported})")
        return TurnStopped("context_limit", f"ended at the model's context limit ({reported}: \"{said[:100]}\"; "
                                            "no sizes named) before the agent answered")
    return None


def failure(out: CliOutput, returncode: int, stderr: str) -> str | None:
    """Why this turn failed, in the CLI's own words, when no limit ended it (`stopped`); None when it succeeded.
    The words begin with what the result says (is_error, api_error_status, terminal_reason, subtype), then give
    its message whole: the harness shows one line of it and keeps the whole in the item's folder."""
    result = out.result
    if result is None:
        return f"the CLI exited {returncode} without a result: {stderr.strip()[-TAIL:] or '(no stderr)'}"
    if result.get("is_error") or returncode != 0:
        said = [str(e) for e in result.get("errors") or []] or [str(result.get("result") or "")]
        detail = "; ".join(s for s in said if s) or stderr.strip()[-TAIL:] or "(no message)"
        return f"{reported_error(result, returncode)}: {detail}"
    denials = result.get("permission_denials") or []
    if denials:
        shown = "; ".join(f"{d.get('tool_name')}: {json.dumps(d.get('tool_input'))[:200]}" for d in denials)
        return f"the CLI denied {len(denials)} tool call(s), a setup problem: {shown}"
    if out.compactions:  # auto-compact is off (WHOLE_CONVERSATION): should the CLI compact anyway, it is named
        return compacted(out.compactions[0])
    return None


def reported_error(result: Json, returncode: int) -> str:
    """What a failed result says of itself, in its own fields: "the CLI's result is an error (api_error_status 500,
    terminal_reason "api_error"), exit 1". Its `subtype` is named only when it is not "success" (the CLI says
    "success" of a run whose last API call failed: the loop itself completed)."""
    facts = []
    if result.get("api_error_status"):
        kind = result.get("api_error_type")
        facts.append(f"api_error_status {result['api_error_status']}" + (f" {kind}" if kind else ""))
    for name in ("api_error", "terminal_reason"):
        if result.get(name) and result.get(name) != "completed":
            facts.append(f'{name} "{result[name]}"')
    if result.get("subtype") not in (None, "success"):
        facts.append(f'subtype "{result["subtype"]}"')
    shown = f" ({', '.join(facts)})" if facts else ""
    if result.get("is_error"):
        return f"the CLI's result is an error{shown}, exit {returncode}"
    return f"the CLI exited {returncode} after a result that is not an error{shown}"


def compacted(metadata: Json) -> str:
    """A compaction as the turn's error: the agent no longer saw the conversation whole, the CLI's doing."""
    before, after = metadata.get("pre_tokens"), metadata.get("post_tokens")
    sizes = (f", {before:,} tokens to {after:,}" if isinstance(before, int) and isinstance(after, int) else "")
    return (f"the CLI compacted the conversation ({metadata.get('trigger') or 'unknown trigger'}{sizes}): the agent "
            "went on from a summary of what it had seen, a limit of the host's context window (docs/hosts.md, "
            "Limits)")


def context_window(result: Json) -> int | None:
    """The model's context window in tokens, as the CLI reports it in a result's modelUsage; None if it does not."""
    usage = result.get("modelUsage")
    windows = [entry.get("contextWindow") for entry in usage.values() if isinstance(entry, dict)] \
        if isinstance(usage, dict) else []
    return max((w for w in windows if isinstance(w, int) and not isinstance(w, bool)), default=None)


def usage_of(result: Json) -> dict[str, int]:
    """The integer token counts of the result's `usage` (nested details left out)."""
    usage = result.get("usage") or {}
    return {k: int(v) for k, v in usage.items() if isinstance(v, int) and not isinstance(v, bool)}
