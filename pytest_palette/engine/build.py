"""build-deck: plan file -> deck.pptx, deck.json and slide-N.png in the output directory.

Everything is written under temporary names first and renamed into place at the end,
deck.pptx last: a reader never sees a torn zip, and once deck.pptx exists its previews
and deck.json do too.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import ENGINE_NAME
from .errors import EngineError
from .families import get_family
from .latency import simulate
from .plan_format import Plan, parse_plan
from .render import FONT

PPTX_NAME, JSON_NAME = "deck.pptx", "deck.json"
_PREVIEW = re.compile(r"^slide-(\d+)\.png$")


def read_plan(path: Path) -> Plan:
    if not path.is_file():
        raise EngineError(f"no plan at {path}")
    plan = parse_plan(path.read_text(encoding="utf-8", errors="replace"))
    if not plan.sections:
        raise EngineError(f"the plan at {path} is empty: it has no '## ' sections, so there are no slides")
    return plan


def describe(plan: Plan, family: str, layouts: list[str]) -> dict[str, Any]:
    """deck.json: what was rendered, slide by slide."""
    return {
        "engine": ENGINE_NAME,
        "title": plan.title,
        "audience": plan.audience,
        "tone": plan.tone,
        "family": family,
        "font": FONT,
        "slide_count": len(plan.sections),
        "slides": [
            {
                "index": i + 1,
                "title": s.title,
                "bullets": s.bullets,
                "table": s.tables[0] if s.tables else None,
                "tables": s.tables,
                "code": s.code,
                "layout": layouts[i],
                "directives": s.directives,
                "preview": f"slide-{i + 1}.png",
            }
            for i, s in enumerate(plan.sections)
        ],
    }


def build_deck(plan_path: Path, out_dir: Path, family_name: str | None, delay: float,
               progress: Callable[[str], None]) -> dict[str, Any]:
    started = time.monotonic()
    family = get_family(family_name)  # fail on a bad family before any work
    plan = read_plan(plan_path)
    out_dir.mkdir(parents=True, exist_ok=True)
    if delay > 0:  # before python-pptx and Pillow load: a build waiting on a slow service holds little memory
        progress(f"simulated latency: {delay:g}s (PALETTE_ENGINE_LATENCY)")
        simulate(delay)
    # Deferred imports: python-pptx and Pillow cost ~0.3 s that plan/edit should not pay.
    from .previews import write_previews
    from .render import render_pptx

    count = len(plan.sections)
    tag = f"{os.getpid()}.tmp"
    final = [out_dir / PPTX_NAME, out_dir / JSON_NAME] + [out_dir / f"slide-{i}.png" for i in range(1, count + 1)]
    temps = [path.with_name(f".{path.name}.{tag}") for path in final]
    try:
        progress(f"rendering {count} slide(s) in the {family.name} family")
        layouts = render_pptx(plan, family, temps[0])
        progress("drawing previews")
        write_previews(plan, layouts, family, temps[2:])
        kinds = [layout.kind for layout in layouts]
        temps[1].write_text(json.dumps(describe(plan, family.name, kinds), indent=2) + "\n", encoding="utf-8")
        for temp, path in reversed(list(zip(temps, final, strict=True))):  # deck.pptx last
            os.replace(temp, path)
    finally:
        for temp in temps:
            temp.unlink(missing_ok=True)
    for stale in out_dir.glob("slide-*.png"):  # previews of a longer earlier build
        match = _PREVIEW.match(stale.name)
        if match and int(match.group(1)) > count:
            stale.unlink(missing_ok=True)
    pptx = final[0].resolve()
    return {
        "ok": True,
        "engine": ENGINE_NAME,
        "deck": str(pptx),
        "pptx": str(pptx),
        "slides": count,
        "bytes": pptx.stat().st_size,
        "json": str(final[1].resolve()),
        "previews": [str(p.resolve()) for p in final[2:]],
        "family": family.name,
        "seconds": round(time.monotonic() - started, 3),
    }
