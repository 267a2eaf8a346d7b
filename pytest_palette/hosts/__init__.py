"""Agent hosts: the scaffolds that drive the skill under test."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import Host


def builtin_classes() -> list[type[Host]]:
    """The hosts that ship with the plugin. Imported here, when asked for: each imports its own client only when
    it starts a conversation, so their options can be read at every pytest start."""
    from .claude import ClaudeHost
    from .codex import CodexHost
    from .cuga import CugaHost
    from .manual import ManualHost
    from .react import ReactHost

    return [ReactHost, ManualHost, ClaudeHost, CugaHost, CodexHost]


def builtin() -> dict[str, Host]:
    """One of each host that ships with the plugin, by name."""
    return {host.name: host() for host in builtin_classes()}
