"""The judge's side of the house: what it reads (evidence.py, content.py), the rules it applies (palette.py for
Palette's; a project's own through `pytest_palette_add_rules`) and the verdict it gives (verdict.py).

The judge reads an item's folder and never the run that made it: nothing here imports the run.
"""

from .evidence import Evidence
from .palette import PALETTE, PALETTE_RULES, CallFacts, answer_of, call_args, palette_rules
from .verdict import PASSED, Verdict, explain, judge, near_miss, with_findings

__all__ = ["PALETTE", "PALETTE_RULES", "PASSED", "CallFacts", "Evidence", "Verdict", "answer_of", "call_args",
           "explain", "judge", "near_miss", "palette_rules", "with_findings"]
