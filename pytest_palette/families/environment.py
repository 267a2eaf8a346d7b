"""A family's `.env` and `.env.local` files: read, resolved against the process's environment, and rendered into
the agent's folder (docs/families.md, "Environment").

The files are found in the family root and in the task, and read in that order (in each folder `.env.local`
before `.env`, the local values standing over the committed defaults). The process's environment wins, and a
name already given keeps its first value: so the first value found stands, as in the peer. Each file is rendered
into the agent's folder under its own name, with the resolved values, before preflight runs. Every value loaded
this way is a secret: kept out of every record, trace, page and log (results/redaction.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..results.redaction import Secrets
from .errors import FamilyError

FILES = (".env.local", ".env")
#: The bound of one `.env` file.
ENV_BYTES = 256 * 1024
_LINE = re.compile(r"^\s*(?:export\s+)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*=\s*(?P<value>.*?)\s*$")


@dataclass(frozen=True)
class Environment:
    """What the `.env` files of one task gave: each file's names in order, and the resolved value of each name."""

    files: Mapping[str, tuple[str, ...]]  #: ".env" / ".env.local" → the names it renders, in order
    values: Mapping[str, str]  #: name → resolved value (the process's, else the first file's)

    def secrets(self, environ: Mapping[str, str]) -> Secrets:
        """The secrets of `environ`, and every value these files gave (whatever its name)."""
        return Secrets.of(environ, self.values.items())

    def render(self, folder: Path) -> list[Path]:
        """Write each file, with the resolved values, into the agent's `folder`; the paths written."""
        written = []
        for name, names in self.files.items():
            path = folder / name
            path.write_text("".join(f"{each}={_quoted(self.values[each])}\n" for each in names), encoding="utf-8")
            written.append(path)
        return written


def parse(path: Path) -> list[tuple[str, str]]:
    """The (name, value) pairs of one dotenv file, in order; FamilyError naming the line that is not one."""
    data = path.read_bytes()
    if len(data) > ENV_BYTES:
        raise FamilyError(f"{path}: larger than {ENV_BYTES // 1024} KiB")
    pairs = []
    for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            raise FamilyError(f"{path}:{number}: not a NAME=value line")
        pairs.append((match.group("name"), _unquoted(match.group("value"))))
    return pairs


def load(folders: list[Path], environ: Mapping[str, str]) -> Environment:
    """The files of `folders` (the family root, then the task), resolved against `environ`."""
    files: dict[str, list[str]] = {}
    values: dict[str, str] = {}
    for folder in folders:
        for name in FILES:
            path = folder / name
            if not path.is_file():
                continue
            names = files.setdefault(name, [])
            for key, value in parse(path):
                if key not in names:
                    names.append(key)
                values.setdefault(key, environ.get(key, value))
    return Environment({name: tuple(names) for name, names in sorted(files.items(), reverse=True)}, values)


def _unquoted(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return value[1:-1]
    if len(value) >= 2 and value[0] == value[-1] == '"':
        try:
            decoded: str = json.loads(value)
            return decoded
        except ValueError:
            return value[1:-1]
    return re.sub(r"\s+#.*$", "", value)  # a comment after an unquoted value


def _quoted(value: str) -> str:
    return value if re.fullmatch(r"[A-Za-z0-9_./:@%+,-]*", value) else json.dumps(value, ensure_ascii=False)
