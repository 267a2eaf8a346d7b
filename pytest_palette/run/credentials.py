"""Credentials from one file, as the seed benchmark keeps them: `~/.config/palette/env`, or the file `PALETTE_ENV`
names. `KEY=value` lines, parsed and never executed (no shell sources it: a value holding `$(…)` stays text).

The file's values reach the model clients and the backend through the session's environment; a variable already
set there wins. The sandbox withholds the file's names from the agent's commands (`withheld`), and the header names
the file and the variables it supplied, never a value.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path

from ..results.redaction import Secrets, is_secret

#: The variable that names another file.
VARIABLE = "PALETTE_ENV"
#: A credentials file is a few lines; anything larger is not one.
MAX_BYTES = 64 * 1024
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: The backend's settings (deck.py reads them in the agent's commands), which therefore cannot be withheld.
BACKEND_PREFIX = "PALETTE_"


class CredentialsError(Exception):
    """The credentials file cannot be used: one line naming the file (and line) and the fix."""


@dataclass(frozen=True)
class Credentials:
    """What one credentials file holds. Plain values, so Settings stays serialisable; `values` is never shown."""

    path: Path
    values: tuple[tuple[str, str], ...] = field(repr=False)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.values)

    def supplies(self, environ: Mapping[str, str]) -> tuple[str, ...]:
        """The names the file gives a value to here: those the environment has not set (or set empty)."""
        return tuple(name for name, value in self.values if value and not environ.get(name))

    def apply(self, environ: MutableMapping[str, str]) -> tuple[str, ...]:
        """Set what the environment lacks; return the names set (to undo at the session's end)."""
        supplied = self.supplies(environ)
        environ.update((name, value) for name, value in self.values if name in supplied)
        return supplied

    def secrets(self) -> tuple[tuple[str, str], ...]:
        """The file's (name, value) pairs no line leaving a run may hold (results/redaction.py): all but the
        backend's settings, which the agent's commands get anyway — unless the name says it holds a secret."""
        return tuple((name, value) for name, value in self.values
                     if is_secret(name) or not name.startswith(BACKEND_PREFIX))

    def withheld(self, passed: tuple[str, ...] = ()) -> tuple[str, ...]:
        """The file's names the agent's commands must not get: all but the backend's settings and those the user
        passes on purpose (`--palette-sandbox-env`); and PALETTE_ENV, which says where the file is."""
        names = (*self.names, VARIABLE)
        return tuple(name for name in dict.fromkeys(names)
                     if (name == VARIABLE or not name.startswith(BACKEND_PREFIX)) and name not in passed)


def location(environ: Mapping[str, str]) -> tuple[Path, bool]:
    """The credentials file, and whether the user named it (PALETTE_ENV) rather than left the default."""
    named = environ.get(VARIABLE, "").strip()
    if named:
        return Path(named).expanduser(), True
    config = environ.get("XDG_CONFIG_HOME", "").strip() or os.path.join(environ.get("HOME", "~"), ".config")
    return Path(config).expanduser() / "palette" / "env", False


def load(environ: Mapping[str, str] | None = None) -> Credentials | None:
    """The credentials file's contents, None when there is none (and none is named); CredentialsError when it is
    unreadable, readable by others, or holds a line that is not `KEY=value`."""
    environ = os.environ if environ is None else environ
    path, named = location(environ)
    why = f" (named by {VARIABLE})" if named else ""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        if named:
            raise CredentialsError(f"{path}: no such credentials file{why}; create it or unset {VARIABLE}") from None
        return None
    except OSError as error:
        raise CredentialsError(f"{path}: cannot read the credentials file{why}: {error.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise CredentialsError(f"{path}: the credentials file{why} is not a regular file")
    if info.st_mode & 0o066:
        raise CredentialsError(f"{path}: group or others can read or write this credentials file (mode "
                               f"{stat.S_IMODE(info.st_mode):o}){why}; keep it yours alone: chmod 600 {path}")
    if info.st_size > MAX_BYTES:
        raise CredentialsError(f"{path}: {info.st_size:,} bytes is not a credentials file (at most {MAX_BYTES:,})")
    try:
        text = path.read_bytes()[:MAX_BYTES].decode("utf-8")
    except OSError as error:
        raise CredentialsError(f"{path}: cannot read the credentials file{why}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise CredentialsError(f"{path}: the credentials file is not UTF-8 text") from None
    return Credentials(path, tuple(parse(text, path).items()))


def secrets_of(environ: Mapping[str, str], credentials: Credentials | None) -> Secrets:
    """What no line leaving a run may hold: the secrets of `environ` and of the credentials file."""
    return Secrets.of(environ, credentials.secrets() if credentials is not None else ())


def secrets_here() -> Secrets:
    """This process's secrets outside a session (a `palette-bench` command): its environment's and its credentials
    file's — none of the file's when it cannot be read, since no session could have used them then."""
    try:
        found = load()
    except CredentialsError:
        found = None
    return secrets_of(os.environ, found)


def parse(text: str, path: Path) -> dict[str, str]:
    """`KEY=value` lines: blank lines and `#` comments skipped, an optional `export `, a value in single quotes
    kept as written, in double quotes with `\\"` and `\\\\` unescaped, bare with a trailing ` # comment` cut. Nothing
    is expanded or run. A later line for the same name wins, as a shell sourcing the file would have it."""
    found: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export ") or line.startswith("export\t"):
            line = line[len("export"):].lstrip()
        name, equals, value = line.partition("=")
        name = name.strip()
        if not equals or not NAME.fullmatch(name):
            # The line's text is not shown: it may hold a key.
            raise CredentialsError(f"{path}:{number}: not a KEY=value line (a name of letters, digits and _, "
                                   "then =)")
        found[name] = _value(value.strip(), path, number)
    return found


def _value(value: str, path: Path, number: int) -> str:
    if value[:1] in ("'", '"'):
        quote = value[0]
        end = _closing(value, quote)
        if end < 0:
            raise CredentialsError(f"{path}:{number}: the value's {quote} is never closed")
        rest = value[end + 1:].strip()
        if rest and not rest.startswith("#"):
            raise CredentialsError(f"{path}:{number}: text after the value's closing {quote}")
        inner = value[1:end]
        return inner if quote == "'" else re.sub(r'\\(["\\])', r"\1", inner)
    return re.split(r"\s+#", value, maxsplit=1)[0].strip()


def _closing(value: str, quote: str) -> int:
    """Where the quote opened at 0 closes (a double quote may be escaped), -1 when it does not."""
    index = 1
    while index < len(value):
        if quote == '"' and value[index] == "\\":
            index += 2
            continue
        if value[index] == quote:
            return index
        index += 1
    return -1


def describe(credentials: Credentials, supplied: tuple[str, ...]) -> str:
    """The header's line: the file and the names it supplied (never a value)."""
    kept = [name for name in credentials.names if name not in supplied]
    said = f"supplied {', '.join(supplied)}" if supplied else "supplied nothing"
    if kept:
        said += f" ({', '.join(kept)} set already: the environment wins)"
    backend = [name for name in credentials.names if name.startswith(BACKEND_PREFIX)]
    given = f"none of them but the backend's {', '.join(backend)}" if backend else "none of them"
    return f"palette: credentials from {credentials.path}: {said}; the agent's commands get {given}"
