"""A family's agent profiles, `.claude/agents/<name>.md`: the agent's (`--palette-agent-profile`), added to its
system prompt as each host takes one, and the judge's (`judge.md`, or `--palette-judge-profile`)."""

from __future__ import annotations

from pathlib import Path

from ..skill import split_frontmatter
from .errors import FamilyError

AGENTS = Path(".claude") / "agents"
#: The judge's profile when no other is named (the seed's).
JUDGE = "judge"


def profile(root: Path, name: str, flag: str) -> str:
    """The body of the family's profile `name` (its frontmatter left out); FamilyError naming the file, the flag and
    the profiles the family has when it has none of that name."""
    folder = root / AGENTS
    path = folder / f"{name}.md"
    if not path.is_file():
        there = sorted(p.stem for p in folder.glob("*.md")) if folder.is_dir() else []
        raise FamilyError(f"{path}: no such agent profile ({flag} {name}; the family has {', '.join(there) or 'none'})")
    try:
        return split_frontmatter(path.read_text(encoding="utf-8"))[1].strip()
    except (OSError, UnicodeDecodeError) as error:
        raise FamilyError(f"{path}: cannot be read ({error})") from None


def agent_profile(root: Path, name: str | None) -> str | None:
    """`--palette-agent-profile NAME`'s instructions; None when no profile is named."""
    return None if name is None else profile(root, name, "--palette-agent-profile")


def judge_profile(root: Path, name: str | None) -> str:
    """The judge's profile: `--palette-judge-profile NAME`'s, else `judge.md` where the family has one, else ""."""
    if name is None and not (root / AGENTS / f"{JUDGE}.md").is_file():
        return ""
    return profile(root, name or JUDGE, "--palette-judge-profile")
