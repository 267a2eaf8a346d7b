"""Skill folders: read a SKILL.md card, install a fresh copy for a host and check it for drift, hash what is
under test."""

from __future__ import annotations

import filecmp
import hashlib
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

#: The skill folders shipped with the package: the reference Palette skill lives here.
PACKAGED_SKILLS = Path(__file__).parent / "skills"

_FRONTMATTER = re.compile(r"\A---[ \t]*\n(?P<meta>.*?)\n---[ \t]*\n?", re.DOTALL)
_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc")


class SkillNotFound(LookupError):
    """A skill named by a user or a host is not where it was looked for."""


@dataclass(frozen=True)
class SkillCard:
    """What a host needs of a skill: its name, its routing description, its body and its folder."""

    name: str
    description: str
    body: str
    directory: Path

    @property
    def scripts(self) -> Path:
        return self.directory / "scripts"

    @property
    def script_names(self) -> tuple[str, ...]:
        """The skill's entry points, as a command line names them: the files of its `scripts/` folder. A command
        that runs one is a call of the skill (our own record of the calls, when the skill writes no trace)."""
        if not self.scripts.is_dir():
            return ()
        return tuple(sorted(p.name for p in self.scripts.iterdir() if p.is_file() and p.suffix != ".pyc"))


def parse_frontmatter(meta: str) -> dict[str, str]:
    """Parse the flat `key: value` frontmatter SKILL.md files use, folded scalars included.

    A regex parser rather than PyYAML: a skill's frontmatter is read the same way by every
    host here, and folded (`>-`, `>`, `|`) descriptions are joined onto one line.
    """
    fields: dict[str, str] = {}
    key: str | None = None
    folded: list[str] = []
    for line in meta.splitlines():
        match = re.match(r"^([A-Za-z0-9_-]+):\s*(.*)$", line)
        if match and not line.startswith((" ", "\t")):
            if key is not None and folded:
                fields[key] = " ".join(folded)
            key, value = match.group(1), match.group(2).strip()
            folded = []
            if value in {">", ">-", "|", "|-"}:
                fields[key] = ""
            else:
                fields[key] = value.strip("\"'")
                key = None
        elif key is not None and line.strip():
            folded.append(line.strip())
    if key is not None and folded:
        fields[key] = " ".join(folded)
    return fields


def split_frontmatter(text: str) -> tuple[dict[str, str], str]:
    """A SKILL.md's (or an agent profile's) frontmatter, parsed, and the body after it."""
    match = _FRONTMATTER.match(text)
    return (parse_frontmatter(match.group("meta")), text[match.end():]) if match else ({}, text)


def load_card(directory: Path) -> SkillCard:
    """Read `<directory>/SKILL.md` without writing anything."""
    path = directory / "SKILL.md"
    if not path.is_file():
        raise SkillNotFound(f"no SKILL.md in {directory}")
    meta, body = split_frontmatter(path.read_text(encoding="utf-8"))
    return SkillCard(
        name=meta.get("name") or directory.name,
        description=meta.get("description", ""),
        body=body,
        directory=directory,
    )


def load_skill(name: str, root: Path = PACKAGED_SKILLS) -> SkillCard:
    """Find the skill called `name` under a skills root (a folder of skill folders)."""
    directory = root / name
    if not (directory / "SKILL.md").is_file():
        present = sorted(p.name for p in root.iterdir() if (p / "SKILL.md").is_file()) if root.is_dir() else []
        where = f"{root} holds {', '.join(present)}" if present else f"{root} holds no skill folders"
        raise SkillNotFound(f"no skill named {name!r}: {where}")
    return load_card(directory)


def install(card: SkillCard, into: Path) -> SkillCard:
    """Copy the skill fresh into `<into>/skills/<name>` and return the installed card.

    SKILL.md names its script relative to the folder that holds `skills/`, so installed in a conversation's
    working folder, `python3 skills/palette/scripts/deck.py` resolves from there. Each item's folder is new,
    so a host cannot carry edits from one conversation to the next; a copy already there is used only when it
    is identical to the skill under test, and never deleted (InstallError otherwise).
    """
    target = into / "skills" / card.name
    if target.exists():
        # Never deleted: a folder we did not create may be the user's (converse runs in their folder).
        differences = drift(card.directory, target)
        if differences:
            raise InstallError(f"{target} already exists and is not the skill under test ({differences[0]}"
                               f"{f' and {len(differences) - 1} more' if len(differences) > 1 else ''}); "
                               "nothing was changed: move it away, or work in another folder")
        return SkillCard(card.name, card.description, card.body, target)
    shutil.copytree(card.directory, target, ignore=_IGNORED)
    return SkillCard(card.name, card.description, card.body, target)


class InstallError(RuntimeError):
    """The skill cannot be installed without replacing files this run did not create."""


def drift(source: Path, installed: Path) -> list[str]:
    """How an installed copy differs from the skill under test (missing, extra and changed files); [] if not."""
    if not installed.is_dir():
        return [f"{installed} does not exist"]
    ours = {p.relative_to(source).as_posix() for p in skill_files(source)}
    theirs = {p.relative_to(installed).as_posix() for p in skill_files(installed)}
    found = [f"{installed}/{rel} is missing" for rel in sorted(ours - theirs)]
    found += [f"{installed}/{rel} is not in the skill under test" for rel in sorted(theirs - ours)]
    found += [f"{installed}/{rel} differs from {source}/{rel}" for rel in sorted(ours & theirs)
              if not filecmp.cmp(source / rel, installed / rel, shallow=False)]
    return found


def skill_files(directory: Path) -> list[Path]:
    """The files that make up a skill, in a stable order, caches left out."""
    return sorted(
        p for p in directory.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    )


def skill_hash(directory: Path) -> str:
    """A short sha256 over the skill's file names and contents: which skill was under test."""
    digest = hashlib.sha256()
    for path in skill_files(directory):
        digest.update(path.relative_to(directory).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:12]
