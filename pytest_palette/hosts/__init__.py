"""Agent hosts: the scaffolds that drive the skill under test."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import Host


def builtin(claude_cli: str | None = None) -> dict[str, Host]:
    """The hosts that ship with the plugin. Imported here, when asked for: each pulls in its own client."""
    from .claude import ClaudeHost
    from .cuga import CugaHost
    from .manual import ManualHost
    from .react import ReactHost

    return {"react": ReactHost(), "manual": ManualHost(), "claude": ClaudeHost(cli=claude_cli), "cuga": CugaHost()}
