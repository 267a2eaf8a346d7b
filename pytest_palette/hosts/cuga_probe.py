"""What the cuga host asks of CUGA before a run, in a process of its own: that the SDK imports and builds an agent,
which skills CUGA's own discovery finds, and which model and step limit its settings give.

    python cuga_probe.py [--graph] [FOLDER]
        --graph   build one agent's graph too (the rest of the lean set: mcp, jinja2, browsergym, …)
        FOLDER    holds `skills/<name>/SKILL.md`, as `.cuga` does in an item's work: which skills CUGA finds there

Run by path, with the standard library and CUGA only. CUGA reads its models file once, at import, from
AGENT_SETTING_CONFIG, and its model from MODEL_NAME: the caller sets both in this process's environment. Importing
CUGA pulls in some 3,000 modules (3.5 CPU-s) that the harness has no other use for: they stay here. The answer is
the last line of stdout, one JSON object; a failure is an exit code and stderr's last line.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

# Run by path, this file's folder leads sys.path, and the host's own cuga.py there would shadow CUGA itself.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]


def configured_model(settings: Any) -> str:
    """The model CUGA's code agent will use, as CUGA resolves it (settings file, then MODEL_NAME)."""
    try:
        model_settings = settings.agent.code.model
        platform = str(model_settings.get("platform") or "unknown")
        name = os.environ.get("MODEL_NAME") or model_settings.get("model_name") or "(the provider's default)"
        return f"{platform}/{name}"
    except Exception as error:  # a report line must not fail a run
        return f"unknown (could not read CUGA's model settings: {type(error).__name__})"


def main(argv: list[str]) -> int:
    from cuga.backend.skills.loader import discover_skills  # type: ignore[import-untyped,import-not-found,unused-ignore]
    from cuga.config import settings  # type: ignore[import-untyped,import-not-found,unused-ignore]
    from cuga.sdk import CugaAgent  # type: ignore[import-untyped,import-not-found,unused-ignore]
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    graph, folders = "--graph" in argv, [arg for arg in argv if arg != "--graph"]
    if graph:
        # A fake model for the code agent; CUGA's other agents make their clients from the models file, which the
        # caller asks for only where that contacts no provider.
        agent = CugaAgent(model=GenericFakeChatModel(messages=iter([])), auto_load_policies=False,
                          enable_knowledge=False)
        if agent.graph is None:
            print("CUGA built no graph for its agent", file=sys.stderr)
            return 1
    skills = [entry.name for entry in discover_skills(folders[0])] if folders else None
    steps = settings.advanced_features.get("cuga_lite_max_steps", "?")
    print(json.dumps({"skills": skills, "model": configured_model(settings), "max_steps": str(steps)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
