"""The folder a site is written into: only an empty one, or a site written here before."""

from __future__ import annotations

from pathlib import Path

#: What marks a folder as a site written by pytest-palette: it may be written again, and nothing else may.
MARKER = ".palette-site"


def refusal(out: Path) -> str | None:
    """Why a site may not be written into `out`, in one line; None when it may. Never into a folder of someone
    else's files: writing there could replace them."""
    if out.exists() and not out.is_dir():
        return f"{out}: a file, not a folder"
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).is_file():
        return (f"{out}: not empty, and not a site written by palette-bench view (no {MARKER}) — choose a new or "
                "empty folder")
    return None
