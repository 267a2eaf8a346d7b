"""What a conversation left on disk: the deck and the skill's call trace. Nothing from the agent's words."""

from __future__ import annotations

import json
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: A failed render can leave a valid but tiny stub; a real deck is larger.
MIN_PPTX_BYTES = 20_000
TRACE_NAME = "palette-calls.jsonl"


@dataclass(frozen=True)
class DeckFacts:
    path: Path
    size: int
    slides: int
    has_plex: bool


def inspect_deck(pptx: Path) -> DeckFacts:
    """Slide count and whether slide 1 carries IBM Plex (Palette's renderer forces it)."""
    size = pptx.stat().st_size if pptx.exists() else 0
    try:
        with zipfile.ZipFile(pptx) as archive:
            names = archive.namelist()
            slides = sum(1 for n in names if n.startswith("ppt/slides/slide") and n.endswith(".xml"))
            first = archive.read("ppt/slides/slide1.xml").decode("utf-8", "replace")
    except (OSError, zipfile.BadZipFile, KeyError):
        return DeckFacts(pptx, size, 0, False)
    return DeckFacts(pptx, size, slides, "IBM Plex" in first)


def newest_deck(workspace: Path) -> Path | None:
    """The newest `deck.pptx` of at least MIN_PPTX_BYTES anywhere under the workspace."""
    decks = [p for p in workspace.rglob("deck.pptx") if p.is_file() and p.stat().st_size >= MIN_PPTX_BYTES]
    return max(decks, key=lambda p: p.stat().st_mtime) if decks else None


def any_deck(workspace: Path) -> list[Path]:
    """Every .pptx under the workspace, whatever its name or size: for cases that forbid a deck."""
    return sorted(p for p in workspace.rglob("*.pptx") if p.is_file())


def read_trace(path: Path) -> list[dict[str, Any]]:
    """The call trace's records; a torn or foreign line is skipped with a warning, never fatal."""
    if not path.exists():
        return []
    calls: list[dict[str, Any]] = []
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            warnings.warn(f"{path}:{number}: not a JSON line, skipped", stacklevel=2)
            continue
        if not isinstance(record, dict):
            warnings.warn(f"{path}:{number}: a JSON {type(record).__name__}, not a call record, skipped",
                          stacklevel=2)
            continue
        calls.append(record)
    return calls


def format_call(call: dict[str, Any], width: int = 90) -> str:
    """One trace line as people read it: `plan  1.2s {'request': ..., 'out': 'plan.md'}`."""
    args = {k: v for k, v in (call.get("args") or {}).items() if k not in {"hold_seconds", "wait"}}
    shown = {k: (" ".join(str(v).split())[:width] if isinstance(v, str) else v) for k, v in args.items()}
    return f"{call.get('command', '?'):<12} {float(call.get('seconds', 0)):6.1f}s {shown}"
