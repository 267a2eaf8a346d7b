"""The judge gate's prompt: a task's `judge.task.md` with the seed's template variables filled in (docs/families.md,
"The judge gate").

The peer's judge is an agent with tools that reads the trace at `{{AGENT_TRACE_PATH}}`; ours is a model asked once,
in a session of its own, so the path names the item's record of commands and the commands themselves follow the
prompt as data. A `{{NAME}}` the seed does not define is left as written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

#: The seed's variables, each as the judge reads it.
VARIABLES = ("AGENT_INSTRUCTIONS", "AGENT_PROFILE", "AGENT_TRACE_PATH", "GRADE_RESULT", "SKILL_SET_HASH", "TASK_ID",
             "TASK_DIR")
_VARIABLE = re.compile(r"\{\{\s*([A-Z_]+)\s*\}\}")


def grade_result(data: Mapping[str, Any]) -> str:
    """`{{GRADE_RESULT}}`: the grade object (verdict, gatesPass, score) and the merged check rows, as JSON."""
    rows = [{"test": c["name"], "source": c["source"], "role": c["role"], "weight": c["weight"], "pass": c["pass"],
             **({"message": c["words"]} if c["words"] else {})} for c in data["checks"]]
    return json.dumps({"verdict": data["verdict"], "gatesPass": data["gates_pass"], "score": data["score"],
                       "checks": rows}, indent=2, ensure_ascii=False)


def fill(template: str, values: Mapping[str, str]) -> str:
    """The template with each of the seed's variables replaced by its value."""
    unknown = set(values) - set(VARIABLES)
    if unknown:
        raise ValueError(f"not a variable of judge.task.md: {', '.join(sorted(unknown))}")
    return _VARIABLE.sub(lambda match: values.get(match.group(1), match.group(0)), template)
