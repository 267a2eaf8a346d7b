"""What a secret is, and the one function that takes secrets out of every line that leaves a run.

A key can reach a message by many roads: a case file's `${ANTHROPIC_API_KEY}` in a path, a host's error, a model
that repeats what it read. The messages are written not to carry one (a case file's paths are named as written,
never expanded: cases.py). This is the second wall: each seam where a line leaves the run scrubs it with the
session's `Secrets` — the ledger (results/ledger.py), JUnit and the terminal (each report, warning and progress
line: run/scrubbing.py, run/progress.py), $GITHUB_STEP_SUMMARY (results/step_summary.py), the site (site/build.py),
and every `palette-bench` command's output and files (commands/).

A secret (docs/runs.md, "Secrets never in a message") is the value of

- a variable of the environment whose name says it holds one: it ends in KEY, TOKEN, SECRET, PASSWORD, PASSWD,
  CREDENTIAL or CREDENTIALS, in any case — every provider's key (`OPENAI_API_KEY`, `WATSONX_APIKEY`,
  `RITS_API_KEY`), `ANTHROPIC_AUTH_TOKEN`, `GITHUB_TOKEN`, `AWS_SECRET_ACCESS_KEY`, `PGPASSWORD`; and each
  header's value in `ANTHROPIC_CUSTOM_HEADERS`, which the claude host sends as credentials;
- any variable of the credentials file (run/credentials.py, `Credentials.secrets`), but the backend's `PALETTE_*`
  settings, which the agent's commands are given anyway (unless that name too says it holds a secret).

A value shorter than MIN_LENGTH characters is none: `none`, `dummy`, `1` are placeholders, and taking every `1`
out of a report would garble it and, by where the holes are, tell the value.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

#: What a secret is replaced by (the hosts' cassettes and logs write the same).
REDACTED = "[redacted]"
#: A value shorter than this is a placeholder, not a secret.
MIN_LENGTH = 8
#: The end of a variable's name that says it holds a secret.
SECRET_NAME = re.compile(r"(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$", re.IGNORECASE)
#: Variables of `Name: value` lines whose values a client sends as credentials.
HEADER_VARIABLES = ("ANTHROPIC_CUSTOM_HEADERS",)

T = TypeVar("T")


def is_secret(name: str) -> bool:
    """Whether the environment variable `name` holds a secret, by its name."""
    return SECRET_NAME.search(name) is not None or name in HEADER_VARIABLES


def _values(name: str, value: str) -> list[str]:
    if name not in HEADER_VARIABLES:
        return [value]
    headers = [line.partition(":") for line in value.splitlines()]
    return [value, *(said.strip() for _, colon, said in headers if colon)]


def secret_values(env: Mapping[str, str]) -> list[str]:
    """The values of `env`'s secret variables, of any length (a host's own redaction sets its bound)."""
    return [each for name, value in env.items() if value and is_secret(name) for each in _values(name, value)]


@dataclass(frozen=True)
class Secrets:
    """The secrets of one session (or one command), compiled once into one pattern that finds any of them, as
    written and as JSON and HTML write it. Never shown: its repr names the variables only."""

    #: Each form a secret is matched in → the variable whose value it is.
    named: Mapping[str, str] = field(default_factory=dict, repr=False)
    pattern: re.Pattern[str] | None = field(default=None, repr=False)

    @classmethod
    def of(cls, environ: Mapping[str, str], more: Iterable[tuple[str, str]] = ()) -> Secrets:
        """The secrets of `environ`, and `more` (name, value) pairs that are secrets whatever their names: the
        credentials file's (`Credentials.secrets`)."""
        given: dict[str, str] = {}
        for name, value in environ.items():
            if value and is_secret(name):
                given.update((each, name) for each in _values(name, value))
        for name, value in more:
            if value:
                given.setdefault(value, name)
        named: dict[str, str] = {}
        for value, name in given.items():
            if len(value) < MIN_LENGTH:
                continue
            for form in (value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1],
                         html.escape(value)):
                named.setdefault(form, name)
        return cls._compiled(named)

    @classmethod
    def _compiled(cls, named: Mapping[str, str]) -> Secrets:
        # The longest form first: a secret that holds another is taken out whole.
        alternatives = "|".join(map(re.escape, sorted(named, key=len, reverse=True)))
        return cls(named, re.compile(alternatives) if named else None)

    def more(self, pairs: Iterable[tuple[str, str]]) -> Secrets:
        """These secrets and `pairs` (name, value), secrets whatever their names (a family's `.env` values)."""
        added = Secrets.of({}, pairs)
        if not set(added.named) - set(self.named):
            return self
        return Secrets._compiled({**added.named, **self.named})

    @property
    def variables(self) -> list[str]:
        """The names of the variables whose values are secrets (names are never secret)."""
        return sorted(set(self.named.values()))

    def found(self, text: str) -> str | None:
        """The name of a variable whose value `text` holds, or None."""
        match = self.pattern.search(text) if self.pattern is not None and text else None
        return self.named[match.group(0)] if match else None

    def scrub(self, text: str) -> str:
        """`text` with every secret in it replaced by REDACTED."""
        return self.pattern.sub(REDACTED, text) if self.pattern is not None and text else text

    def scrub_data(self, data: T) -> T:
        """Plain data (what JSON holds) with every string in it, keys too, scrubbed: JSON stays JSON, whatever a
        secret's characters."""
        if isinstance(data, str):
            return self.scrub(data)  # type: ignore[return-value]
        if isinstance(data, dict):
            return {self.scrub_data(k): self.scrub_data(v) for k, v in data.items()}  # type: ignore[return-value]
        if isinstance(data, (list, tuple)):
            return type(data)(self.scrub_data(each) for each in data)
        return data

    def scrub_json(self, line: bytes) -> bytes:
        """One JSON document scrubbed: unchanged, and not parsed, when it holds no secret."""
        if self.pattern is None or self.pattern.search(line.decode("utf-8", "replace")) is None:
            return line
        data: Any = json.loads(line)
        return json.dumps(self.scrub_data(data), ensure_ascii=False, separators=(",", ":")).encode("utf-8")
