"""Ctrl-C mid-turn ends the session on every host with nothing it started left running: the host's client,
the agent's shell, deck.py's hold, the engine drafting in a session of its own, the rehearsal server."""

from __future__ import annotations

from pathlib import Path

import pytest
from interrupting import interrupt

pytestmark = pytest.mark.end_to_end


@pytest.mark.parametrize(("host", "conversations"), [("react", 1), ("cuga", 3), ("claude", 1)])
def test_ctrl_c_mid_turn_ends_the_session_and_leaves_no_process(tmp_path: Path, host: str,
                                                               conversations: int) -> None:
    # cuga with 3 in flight: 3 workers, each in its own sandbox, each mid-turn (each worker costs seconds of CPU to
    # start: more would prove nothing more).
    ended = interrupt(tmp_path, host, conversations)
    if ended.skipped:
        pytest.skip(f"the {host} host's client is not installed here")
    assert ended.seconds is not None, f"the session had not ended long after Ctrl-C:\n{ended.output[-8000:]}"
    assert ended.exit_code == pytest.ExitCode.INTERRUPTED, ended.output[-3000:]
    assert ended.left == [], f"still running after the session ended: {ended.left}"
    # The interrupted item left its evidence as far as it got, and no record claims a verdict. The engine was
    # stopped while drafting: no plan was ever written (a session that merely waited for it would have one).
    items = list(tmp_path.glob(f"runs/*/{host}/slow_plan*"))
    assert len(items) == conversations
    assert all((item / "turns.json").is_file() and not list(item.rglob("plan.md")) for item in items)
    ledger = next(tmp_path.glob("runs/*/results.jsonl"), None)
    assert ledger is None or '"outcome":"pass"' not in ledger.read_text().replace(" ", "")
