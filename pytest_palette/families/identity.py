"""What identifies a family's run: the skill set under test and the family's revision (docs/families.md).

- The skill-set hash is the seed's: `sha256:` and the SHA-256 of `apm.lock.yaml`'s bytes, each CR before a LF
  taken out; "" when the family has no lockfile.
- The `.claude/` hash is of the tree itself, staged as hosts are offered it, so that an edited `.claude/` with a
  stale lockfile no longer keeps its hash: `sha256:` over one row per file, `<path>\\0<sha256 of its bytes>\\n`,
  sorted by path (the peer's tree hash); "" when there is no `.claude/`.
- The revision is `git:<commit>` where the family is in a git work tree (`-dirty` when its files differ from the
  commit), else `sha256:` of the tree hash of its files (`.git` and `node_modules` left out).

The harness installs nothing from a network: the skill packs `apm.yml` names that are not staged under `.claude/`
are named (`unstaged_packs`), so that a run without its skills never looks like a run with them.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import unicodedata
from pathlib import Path

import yaml

from .errors import FamilyError

LOCKFILE = "apm.lock.yaml"
MANIFEST = "apm.yml"
SKILLS = ".claude"
#: Folders no tree hash reads: a package manager's and git's.
SKIPPED = frozenset({".git", "node_modules"})


def skill_set_hash(root: Path) -> str:
    """`sha256:<hex>` of the family's lockfile, LF-normalised; "" when it has none."""
    lockfile = root / LOCKFILE
    if not lockfile.is_file():
        return ""
    return "sha256:" + hashlib.sha256(lockfile.read_bytes().replace(b"\r\n", b"\n")).hexdigest()


def tree_hash(folder: Path) -> str:
    """`sha256:<hex>` over the regular files under `folder` (links followed, SKIPPED folders not entered): one row
    `<relative path>\\0<sha256>\\n` per file, sorted by NFC-normalised path; "" when `folder` is not there."""
    if not folder.is_dir():
        return ""
    rows: list[tuple[str, str]] = []
    for place, folders, files in os.walk(folder, followlinks=True):
        folders[:] = sorted(name for name in folders if name not in SKIPPED)
        for name in files:
            path = Path(place, name)
            if not path.is_file():
                continue  # a dangling link, a FIFO: nothing a host would be offered
            relative = unicodedata.normalize("NFC", path.relative_to(folder).as_posix())
            rows.append((relative, hashlib.sha256(path.read_bytes()).hexdigest()))
    digest = hashlib.sha256()
    for relative, hashed in sorted(rows):
        digest.update(f"{relative}\0{hashed}\n".encode())
    return "sha256:" + digest.hexdigest()


def skills_hash(root: Path) -> str:
    """The hash of the family's `.claude/` tree, as hosts are offered it."""
    return tree_hash(root / SKILLS)


def revision(root: Path) -> str:
    """`git:<commit>` (with `-dirty` when the family's files differ from it) where the family is in git, else the
    tree hash of its files."""
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=30, check=False)
        if head.returncode == 0:
            status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "."], capture_output=True,
                                    text=True, timeout=30, check=False)
            dirty = "-dirty" if status.returncode or status.stdout.strip() else ""
            return f"git:{head.stdout.strip()}{dirty}"
    except (OSError, subprocess.TimeoutExpired):
        pass
    return tree_hash(root)


def unstaged_packs(root: Path) -> list[str]:
    """The skill packs `apm.yml` depends on (`dependencies: {apm: [owner/repo[/path][#ref]]}`) of which nothing is
    staged under `.claude/` (a skill folder or an agent profile of the pack's name); FamilyError when apm.yml is not
    such a manifest."""
    manifest = root / MANIFEST
    if not manifest.is_file():
        return []
    try:
        said = yaml.safe_load(manifest.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise FamilyError(f"{manifest}: not YAML ({' '.join(str(error).split())[:160]})") from None
    dependencies = said.get("dependencies") if isinstance(said, dict) else None
    packs = dependencies.get("apm") if isinstance(dependencies, dict) else None
    if packs is None:
        return []
    if not isinstance(packs, list) or not all(isinstance(pack, str) and pack.strip() for pack in packs):
        raise FamilyError(f"{manifest}: dependencies.apm is not a list of packs (owner/repo[/path][#ref])")
    missing = []
    for pack in packs:
        name = re.split(r"[#@]", pack.strip().rstrip("/"))[0].rsplit("/", 1)[-1]
        staged = (root / SKILLS / "skills" / name).is_dir() or (root / SKILLS / "agents" / f"{name}.md").is_file()
        if not staged:
            missing.append(pack.strip())
    return missing
