"""``python -m pytest_palette.engine``: the reference engine's command line."""

from __future__ import annotations

from .cli import main

raise SystemExit(main())
