"""Case files: YAML lists of scripted conversations, validated with the file and line of every mistake.

A typo must never be ignored, so unknown keys and wrong types are errors at collection. What can only
be resolved on the machine that runs the case — an environment variable, a context file, a corpus
glob — is resolved here too, but a failure there is kept on the case as a `problem`, so that case
ERRORs at setup while every other case still runs.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import json
import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from .replies import asks_for_change
from .results.checks import COMMON_CHECKS, PALETTE_CHECKS
from .results.record import GATE, Role
from .results.redaction import Secrets

NAME = re.compile(r"[a-z0-9_]+")
#: A case name becomes a folder name and a test id: short enough for any file system, long enough for a title.
MAX_NAME = 64
#: The most YAML nodes one value may expand to: a case file is small, an alias bomb is not.
MAX_NODES = 100_000
#: Pasted material larger than this is refused (a case can set its own with --palette-max-context).
MAX_CONTEXT = 1_000_000
#: How much of a value an error message shows.
SHOWN = 80
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
DEFAULT_MAX_POLLS = 12
#: The share of the pasted material's figures and headings a deck must carry (docs/judge.md, rule 10): the good
#: rehearsal model with the reference engine carries all of them on every shipped case but one the user trims.
DEFAULT_CONTENT = 0.9
MERGE_TAG = "tag:yaml.org,2002:merge"
#: The kernel's and the devices' trees: no case reads there (/proc/self/environ holds every key of the session,
#: /dev/zero never ends), whatever the path or link that leads there.
SYSTEM_TREES = (Path("/proc"), Path("/sys"), Path("/dev"))
#: File systems whose files are the kernel's wherever they are mounted (a second /proc under /tmp is still /proc).
KERNEL_FILE_SYSTEMS = frozenset({"proc", "sysfs", "devtmpfs", "devpts", "debugfs", "tracefs", "securityfs", "cgroup",
                                 "cgroup2", "configfs", "efivarfs", "bpf", "pstore", "fusectl", "mqueue",
                                 "binfmt_misc", "autofs", "hugetlbfs", "rpc_pipefs", "nsfs"})

CASE_KEYS = ("name", "covers", "tags", "request", "context", "context_file", "replies", "expect", "documents")
EXPECT_KEYS = ("skill", "deck", "slides", "edit", "context", "max_polls", "content", "checks", "rubric")
#: What a case that needs no skill (`skill: false`) cannot also expect: each is about driving the skill (a rubric
#: grades a deck).
DRIVING_KEYS = ("slides", "edit", "context", "max_polls", "content", "rubric")


#: Checks the value a case gives under `expect: {<skill>: …}` (a skill's rules register it); raises ValueError
#: with one line to refuse it.
ExpectCheck = Callable[[Any], object]


class Refused(Exception):
    """Why a file a case names is not read, in words that follow "context_file '…': "."""


def kernel_devices() -> frozenset[int]:
    """The device numbers of the kernel's file systems mounted here (from /proc/self/mountinfo; none elsewhere)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text(encoding="utf-8").splitlines()
    except OSError:
        return frozenset()
    found = set()
    for line in lines:
        mount, _, source = line.partition(" - ")  # the file system's type is the first word after " - "
        fields, kind = mount.split(), source.split()[:1]
        if len(fields) > 2 and kind and kind[0] in KERNEL_FILE_SYSTEMS:
            major, _, minor = fields[2].partition(":")
            found.add(os.makedev(int(major), int(minor)))
    return frozenset(found)


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))
    return next((said for test, said in kinds if test(mode)), "not a regular file")


def read_regular(path: Path, limit: int, kernel: frozenset[int] = frozenset(), inside: Path | None = None,
                 written: str | None = None) -> str:
    """A regular file's UTF-8 text, at most `limit` bytes, read without trusting what the path leads to: links are
    followed to their end first, and the end must be a regular file outside /proc, /sys and /dev (and the kernel's
    file systems, `kernel`), inside the folder `inside` when given. Raise Refused with the reason.

    The reason names the file by where it leads — unless `written`, the path as the case file writes it, names a
    ${VARIABLE}: then by `written` alone, since the expansion may be a secret (issue 36)."""
    real = Path(os.path.realpath(path))
    hidden = written is not None and VARIABLE.search(written) is not None
    subject = written if hidden else str(real)
    if inside is not None and not real.is_relative_to(os.path.realpath(inside)):
        led = "leads" if hidden else f"leads to {real},"
        raise Refused(f"{written if hidden else path} {led} outside the case file's folder {inside}: a relative "
                      "path stays in it (write an absolute path or ${VARIABLE} to read elsewhere)")
    for tree in SYSTEM_TREES:
        if real.is_relative_to(tree):
            raise Refused(f"{subject} is under {tree}: a case file reads regular files only")
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        raise Refused(f"no file at {subject}") from None
    except OSError as error:
        raise Refused(f"cannot read {subject}: {error.strerror}") from None
    if not stat.S_ISREG(mode):  # refused before opening it: opening a device or a FIFO can act
        raise Refused(f"{subject} is {_kind(mode)}: a case file reads regular files only")
    try:  # no link at the end, no wait on a FIFO swapped in meanwhile
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as error:
        raise Refused(f"cannot read {subject}: {error.strerror}") from None
    with os.fdopen(fd, "rb") as file:
        opened = os.fstat(fd)  # what was opened, which is what counts
        if not stat.S_ISREG(opened.st_mode):
            raise Refused(f"{subject} is {_kind(opened.st_mode)}: a case file reads regular files only")
        if opened.st_dev in kernel:
            raise Refused(f"{subject} is a file of the kernel: a case file reads regular files only")
        # The size a kernel file states is often 0: the read is bounded, not only the stat.
        data = file.read(limit + 1) if opened.st_size <= limit else b""
    if max(len(data), opened.st_size) > limit:
        size = f"{opened.st_size:,} bytes" if opened.st_size > limit else f"more than {limit:,} bytes"
        raise Refused(f"{subject} is {size}, more than the {limit:,} allowed (--palette-max-context)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused(f"{subject} is not UTF-8 text") from None


def climbs_out(relative: str) -> bool:
    """Whether a relative path (or glob) climbs above the folder it is relative to, as written."""
    return os.path.normpath(relative).split(os.sep)[0] == os.pardir


class CaseFileError(Exception):
    """A mistake in a case file, with the file and line it is on."""

    def __init__(self, path: Path, line: int, message: str) -> None:
        super().__init__(f"{path}:{line}: {message}")
        self.path, self.line, self.message = path, line, message


@dataclass(frozen=True)
class Expect:
    #: Whether the request needs the skill at all; False for a near miss (a question about slides, a chat-only
    #: task), where any call of the skill fails the case and no deck is expected.
    skill: bool = True
    deck: bool = True
    slides: int | None = None
    edit: bool = False
    context: bool = False
    max_polls: int = DEFAULT_MAX_POLLS
    #: The least share of the pasted material's figures and headings the deck must carry (0 turns the rule off).
    content: float = DEFAULT_CONTENT
    #: What a case expects under another skill's name (`expect: {changelog: {…}}`), as JSON text per name: that
    #: skill's rules read it (`of`), its own check refused a wrong one at collection.
    own: tuple[tuple[str, str], ...] = ()
    #: `checks:` — the weights this case gives its checks, and the scored checks it makes gates (checks.py).
    weights: tuple[tuple[str, float], ...] = ()
    gates: tuple[str, ...] = ()
    #: What a model grades the deck by (`--palette-grader`), in the case's words; None for no rubric.
    rubric: str | None = None

    def of(self, skill: str, default: Any = None) -> Any:
        """The value this case gives under `expect: {<skill>: …}`, or `default`."""
        return next((json.loads(text) for name, text in self.own if name == skill), default)

    def to_json(self) -> dict[str, Any]:
        data = {key: value for key, value in self.__dict__.items() if key != "own"}
        return {**data, "own": {name: json.loads(text) for name, text in self.own}} if self.own else data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Expect:
        own = tuple((name, json.dumps(value, sort_keys=True)) for name, value in data.get("own", {}).items())
        plain = {key: value for key, value in data.items() if key not in ("own", "weights", "gates")}
        return cls(**plain, own=own, weights=tuple((str(n), float(w)) for n, w in data.get("weights", ())),
                   gates=tuple(data.get("gates", ())))


@dataclass(frozen=True)
class Case:
    """One scripted user: an opening request (maybe with pasted material) and one reply per yield."""

    name: str
    covers: str
    tags: tuple[str, ...]
    request: str
    context: str
    replies: tuple[str, ...]
    expect: Expect
    path: Path
    line: int
    #: Why this case cannot run here (an unset variable, a missing file); it ERRORs at setup.
    problem: str | None = None
    #: Where the pasted material was read: never shown (the expansion of a ${VARIABLE} may be a secret).
    context_source: str | None = field(default=None, compare=False, repr=False)

    @property
    def opening(self) -> str:
        """The first message: the request, a blank line, the pasted material."""
        return f"{self.request}\n\n{self.context}" if self.context else self.request

    def to_json(self) -> dict[str, Any]:
        """Everything needed to judge this case again later, without its case file."""
        return {"name": self.name, "covers": self.covers, "tags": list(self.tags), "request": self.request,
                "context": self.context, "replies": list(self.replies), "expect": self.expect.to_json(),
                "path": str(self.path), "line": self.line}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Case:
        return cls(name=data["name"], covers=data["covers"], tags=tuple(data["tags"]), request=data["request"],
                   context=data["context"], replies=tuple(data["replies"]), expect=Expect.from_json(data["expect"]),
                   path=Path(data["path"]), line=int(data["line"]))

    def digest(self) -> str:
        """A hash of what the case asks and expects: two runs of the same digest asked the same question."""
        # Keys left out at their defaults, so a case written before they existed keeps its hash.
        expect = {k: v for k, v in self.expect.to_json().items()
                  if not (k == "skill" and v) and not (k == "content" and v == DEFAULT_CONTENT)
                  and not (k in ("weights", "gates", "rubric") and not v)}
        payload = json.dumps([self.request, self.context, list(self.replies), expect], sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:12]



def item_name(case: str, host: str, run_index: int | None = None) -> str:
    """A case's item on a host as pytest names it: `case[host]`, or `case[host-k]` for its run k when the cases
    run several times. Here, below everything that prints one: the run side, the judge and the results alike."""
    return f"{case}[{host}]" if run_index is None else f"{case}[{host}-{run_index}]"


def expand(text: str, env: Mapping[str, str]) -> tuple[str, list[str]]:
    """Expand `${VAR}`; return the text and the names of variables that are unset or empty."""
    missing: list[str] = []

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if not env.get(name):
            missing.append(name)
            return match.group(0)
        return env[name]

    return VARIABLE.sub(value, text), missing


class _Reader:
    """Walks one file's YAML node tree, so every error can name the line it is on."""

    def __init__(self, path: Path, env: Mapping[str, str], max_context: int = MAX_CONTEXT,
                 namespaces: Mapping[str, ExpectCheck | None] | None = None,
                 checks: Mapping[str, Role] | None = None, secrets: Secrets | None = None) -> None:
        self.path = path
        self.env = env
        self._secrets = secrets
        self.max_context = max_context
        self.namespaces = dict(namespaces or {})
        self.checks = dict(checks) if checks is not None else known_checks()
        data = path.read_bytes()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            line = data[:error.start].count(b"\n") + 1
            raise CaseFileError(path, line, f"not UTF-8 text (byte 0x{data[error.start]:02x}); save the file as "
                                            "UTF-8") from None
        # libyaml when present: the pure-Python loader dominates collecting thousands of cases.
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        self.loader = loader(text)

    @functools.cached_property
    def kernel(self) -> frozenset[int]:
        """The kernel's file systems here, looked up once per case file that reads a file."""
        return kernel_devices()

    @functools.cached_property
    def secrets(self) -> Secrets:
        """The session's secrets, or those of `env` (compiled once per case file that reads a file)."""
        return self._secrets if self._secrets is not None else Secrets.of(self.env)

    def pasted(self, path: Path, inside: Path | None, written: str) -> str:
        """A file's text as pasted material (read_regular), refused when it holds a secret's value: it would go
        to the model and into the run's files (the credentials file, a `.env`)."""
        text = read_regular(path, self.max_context, self.kernel, inside, written).strip()
        holder = self.secrets.found(text)
        if holder is not None:
            subject = written if VARIABLE.search(written) else os.path.realpath(path)
            raise Refused(f"{subject} holds the value of ${holder}: pasted material never carries a secret")
        return text

    def error(self, node: yaml.Node, message: str) -> CaseFileError:
        return CaseFileError(self.path, node.start_mark.line + 1, message)

    def value(self, node: yaml.Node) -> Any:
        """The Python value of a node — after checking that it is not an alias bomb, and with an unknown tag
        (`!!python/object`, anything but YAML's own) an error at its line."""
        self.bounded(node)
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.YAMLError as error:
            problem = " ".join(str(getattr(error, "problem", None) or error).split())
            raise self.error(node, f"cannot read this value: {shown(problem)}") from None

    def bounded(self, node: yaml.Node) -> None:
        """Refuse a value that expands to more than MAX_NODES nodes, before anything expands it."""
        budget, stack = MAX_NODES, [node]
        while stack:
            current = stack.pop()
            budget -= 1
            if budget < 0:
                raise self.error(node, f"this value expands to more than {MAX_NODES:,} YAML nodes (an alias "
                                       "repeated inside itself?): not a case")
            if isinstance(current, yaml.SequenceNode):
                stack.extend(current.value)
            elif isinstance(current, yaml.MappingNode):
                stack.extend(part for pair in current.value for part in pair)

    def cases(self) -> Iterator[Case]:
        try:
            root = self.loader.get_single_node()
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            problem = " ".join(str(getattr(error, "problem", None) or error).split())
            where = f" (column {mark.column + 1})" if mark else ""
            raise CaseFileError(self.path, (mark.line + 1) if mark else 1,
                                f"not valid YAML: {problem[:SHOWN]}{where}") from None
        finally:
            self.loader.dispose()
        if root is None:
            raise CaseFileError(self.path, 1, "the file is empty; a case file is a list of cases")
        if not isinstance(root, yaml.SequenceNode):
            raise self.error(root, "a case file is a list of cases (each item starts with '- name: ...')")
        for item in root.value:
            yield from self.case(item)

    def fields(self, node: yaml.Node, known: tuple[str, ...], what: str) -> dict[str, tuple[yaml.Node, Any]]:
        if not isinstance(node, yaml.MappingNode):
            raise self.error(node, f"{what} must be a mapping of keys to values")
        for key_node, value_node in node.value:  # each part checked where it is, before anything expands
            if key_node.tag == MERGE_TAG:
                self.bounded(value_node)
            elif not isinstance(key_node, yaml.ScalarNode):
                raise self.error(key_node, f"a key in {what} must be plain text")
        own = {id(key) for key, _ in node.value if key.tag != MERGE_TAG}
        try:
            # `<<: *shared` merges a mapping in (users share replies through anchors); own keys win.
            self.loader.flatten_mapping(node)
        except yaml.YAMLError as error:
            raise self.error(node, f"cannot merge into {what}: {shown(str(getattr(error, 'problem', error)))}") \
                from None
        found: dict[str, tuple[yaml.Node, Any]] = {}
        mine: set[str] = set()
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or not isinstance(key := self.value(key_node), str):
                raise self.error(key_node, f"a key in {what} must be plain text")
            if key not in known:
                raise self.error(key_node, f"unknown key {shown(key)} in {what} (known: {', '.join(known)})")
            if id(key_node) in own:
                if key in mine:
                    raise self.error(key_node, f"{key!r} appears twice in {what}")
                mine.add(key)
            elif key in found:
                continue  # merged twice: the first merge wins, as YAML says
            found[key] = (value_node, self.value(value_node))
        return found

    def typed(self, fields: dict[str, tuple[yaml.Node, Any]], key: str, kind: type | tuple[type, ...],
              what: str, default: Any = None) -> Any:
        if key not in fields:
            return default
        node, value = fields[key]
        # bool is an int in Python; a count of `true` slides is a typo, not a number.
        wrong_bool = isinstance(value, bool) and kind in (int, (int, type(None)))
        if not isinstance(value, kind) or wrong_bool:
            names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
            raise self.error(node, f"{what} {key!r} must be {names.replace('NoneType', 'null')}, "
                                   f"not {type(value).__name__}")
        if isinstance(value, str) and key in ("context", "request") and len(value.encode()) > self.max_context:
            raise self.error(node, f"{what} {key!r} is {len(value.encode()):,} bytes, more than the "
                                   f"{self.max_context:,} allowed (--palette-max-context)")
        return value

    def text_list(self, fields: dict[str, tuple[yaml.Node, Any]], key: str, what: str,
                  default: list[str]) -> list[str]:
        value = self.typed(fields, key, list, what, default)
        node = fields[key][0] if key in fields else None
        for entry in value:
            if not isinstance(entry, str) or not entry.strip():
                assert node is not None
                raise self.error(node, f"every entry of {what} {key!r} must be non-empty text")
        return list(value)

    def case(self, node: yaml.Node) -> Iterator[Case]:
        fields = self.fields(node, CASE_KEYS, "a case")
        line = node.start_mark.line + 1
        label = f"case at line {line}"
        if "documents" in fields:
            yield from self.generated(node, fields)
            return
        name = self.typed(fields, "name", str, label)
        if name is None:
            raise self.error(node, "a case needs a 'name' ([a-z0-9_]+)")
        label = f"case {shown(name)}"
        if not NAME.fullmatch(name) or len(name) > MAX_NAME:
            raise self.error(fields["name"][0], f"case name {shown(name)} must match [a-z0-9_]+ and be at most "
                                                f"{MAX_NAME} characters")
        common = self.common(node, fields, label)
        context, source, problem = self.context(fields, label)
        yield self.build(name, common, context, source, problem, line, fields, label)

    def common(self, node: yaml.Node, fields: dict[str, tuple[yaml.Node, Any]], label: str) -> dict[str, Any]:
        covers = self.typed(fields, "covers", str, label)
        if not covers or not covers.strip():
            raise self.error(node, f"{label} needs 'covers': what the case is there to catch")
        request = self.typed(fields, "request", str, label)
        if not request or not request.strip():
            raise self.error(node, f"{label} needs a non-empty 'request'")
        tags = self.text_list(fields, "tags", label, [])
        for tag in tags:
            if not NAME.fullmatch(tag) or len(tag) > MAX_NAME:
                raise self.error(fields["tags"][0], f"tag {shown(tag)} of {label} must match [a-z0-9_]+ and be at "
                                                    f"most {MAX_NAME} characters (it becomes a marker)")
        replies = self.text_list(fields, "replies", label, ["yes"])
        return {"covers": covers.strip(), "request": request.strip(), "tags": tuple(tags), "replies": tuple(replies)}

    def context(self, fields: dict[str, tuple[yaml.Node, Any]], label: str) -> tuple[str, str | None, str | None]:
        if "context" in fields and "context_file" in fields:
            raise self.error(fields["context_file"][0], f"{label} has both 'context' and 'context_file'; keep one")
        if "context" in fields:
            return self.typed(fields, "context", str, label).strip(), None, None
        if "context_file" not in fields:
            return "", None, None
        raw = self.typed(fields, "context_file", str, label)
        text, missing = expand(raw, self.env)
        if missing:
            return "", raw, (f"{self.path}:{fields['context_file'][0].start_mark.line + 1}: context_file {raw!r} "
                             f"needs {', '.join('$' + m for m in missing)}, which is not set")
        where = f"{self.path}:{fields['context_file'][0].start_mark.line + 1}: context_file {shown(raw)}"
        # A relative path is the case file's own business, so it stays in its folder; an absolute or ${VARIABLE}
        # path is the user's explicit choice of where to read.
        chosen = os.path.isabs(raw) or bool(VARIABLE.search(raw))
        if not chosen and climbs_out(text):
            return "", None, f"{where}: a relative path must not climb out of the case file's folder " \
                             f"{self.path.parent} (write an absolute path or ${{VARIABLE}} to read elsewhere)"
        path = self.path.parent / text
        try:
            return self.pasted(path, None if chosen else self.path.parent, raw), os.path.realpath(path), None
        except Refused as refused:
            return "", os.path.realpath(path), f"{where}: {refused}"

    def expect(self, fields: dict[str, tuple[yaml.Node, Any]], common: dict[str, Any], has_context: bool,
               label: str) -> Expect:
        known = EXPECT_KEYS + tuple(sorted(set(self.namespaces) - set(EXPECT_KEYS)))
        given = self.fields(fields["expect"][0], known, f"'expect' of {label}") if "expect" in fields else {}
        what = f"'expect' of {label}:"
        own = tuple(self.own(given, name, check, what) for name, check in sorted(self.namespaces.items())
                    if name in given and name not in EXPECT_KEYS)
        weights, gates = self.weights(given, what, label)
        if not self.typed(given, "skill", bool, what, True):
            return replace(self.near_miss(given, what, own), weights=weights, gates=gates)
        rubric = self.typed(given, "rubric", str, what)
        if rubric is not None and not rubric.strip():
            raise self.error(given["rubric"][0], f"{what} rubric is empty: write what the grader should look for")
        slides = self.typed(given, "slides", (int, type(None)), what)
        max_polls = self.typed(given, "max_polls", int, what, DEFAULT_MAX_POLLS)
        if slides is not None and slides < 1:
            raise self.error(given["slides"][0], f"{what} slides must be at least 1")
        if max_polls < 0:
            raise self.error(given["max_polls"][0], f"{what} max_polls must be 0 or more")
        content = self.typed(given, "content", (int, float), what, DEFAULT_CONTENT)
        if isinstance(content, bool) or not 0 <= content <= 1:
            raise self.error(given["content"][0], f"{what} content must be a number from 0 to 1 (the share of the "
                                                  f"pasted material's figures and headings the deck must carry), "
                                                  f"not {shown(content)}")
        return Expect(
            deck=self.typed(given, "deck", bool, what, True),
            slides=slides,
            # A reply that asks for a change expects an edit, whatever the tags say; `edit: false` overrides.
            edit=self.typed(given, "edit", bool, what,
                            "edit" in common["tags"] or any(asks_for_change(r) for r in common["replies"])),
            context=self.typed(given, "context", bool, what, has_context),
            max_polls=max_polls,
            content=float(content),
            own=own,
            weights=weights,
            gates=gates,
            rubric=rubric.strip() if rubric is not None else None,
        )

    def weights(self, given: dict[str, tuple[yaml.Node, Any]], what: str,
                label: str) -> tuple[tuple[tuple[str, float], ...], tuple[str, ...]]:
        """`checks: {slides: 2, content: gate}`: a weight (0 or more) per scored check, or `gate` to make one a
        gate; each name is a check the rules know."""
        if "checks" not in given:
            return (), ()
        named = self.fields(given["checks"][0], tuple(self.checks), f"'expect: checks' of {label}")
        weights: list[tuple[str, float]] = []
        gates: list[str] = []
        for name, (node, value) in named.items():
            if value == GATE:
                gates.append(name)
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                if self.checks[name] == GATE:
                    raise self.error(node, f"{what} checks: {name} is a gate, which has no weight (it fails the run "
                                           "whatever it weighs): drop it")
                if not 0 <= value < float("inf"):
                    raise self.error(node, f"{what} checks: the weight of {name} must be a number, 0 or more, "
                                           f"not {shown(value)}")
                weights.append((name, float(value)))
            else:
                raise self.error(node, f"{what} checks: {name} must be a weight (a number, 0 or more) or "
                                       f"'gate', not {shown(value)}")
        return tuple(weights), tuple(gates)

    def own(self, given: dict[str, tuple[yaml.Node, Any]], name: str, check: ExpectCheck | None,
            what: str) -> tuple[str, str]:
        """A skill's own value under `expect: {<name>: …}`, checked by that skill's rules, kept as JSON."""
        node, value = given[name]
        try:
            text = json.dumps(value, sort_keys=True)
        except (TypeError, ValueError):
            raise self.error(node, f"{what} {name!r} must hold plain values (text, numbers, true/false, lists, "
                                   "mappings)") from None
        if check is not None:
            try:
                check(value)
            except ValueError as error:
                raise self.error(node, f"{what} {name}: {' '.join(str(error).split())}") from None
        return name, text

    def near_miss(self, given: dict[str, tuple[yaml.Node, Any]], what: str, own: tuple[tuple[str, str], ...]) -> Expect:
        """`skill: false`: the request needs no skill, so no deck, and nothing about driving it, may be expected."""
        if self.typed(given, "deck", bool, what, False):
            raise self.error(given["deck"][0], f"{what} skill: false means no deck is built; drop 'deck: true'")
        for key in DRIVING_KEYS:
            if key in given:
                raise self.error(given[key][0], f"{what} {key!r} is about driving the skill, which skill: false "
                                                "says the request does not need; drop it")
        return Expect(skill=False, deck=False, own=own)

    def build(self, name: str, common: dict[str, Any], context: str, source: str | None, problem: str | None,
              line: int, fields: dict[str, tuple[yaml.Node, Any]], label: str) -> Case:
        has_context = bool(context) or "context_file" in fields
        expect = self.expect(fields, common, has_context, label)
        if not expect.skill and "replies" not in fields:
            common = {**common, "replies": ()}  # a near miss is answered, not planned: nothing waits for a reply
        return Case(name=name, context=context, context_source=source, problem=problem, path=self.path,
                    line=line, expect=expect, **common)

    def generated(self, node: yaml.Node, fields: dict[str, tuple[yaml.Node, Any]]) -> Iterator[Case]:
        """`documents: <glob>`: one case per matching document, named from its file stem."""
        line = node.start_mark.line + 1
        label = f"documents case at line {line}"
        for key in ("name", "context", "context_file"):
            if key in fields:
                raise self.error(fields[key][0],
                                 f"{label}: {key!r} does not go with 'documents' "
                                 "(each document is the pasted material; cases are named from its file stem)")
        pattern = self.typed(fields, "documents", str, label)
        common = self.common(node, fields, label)
        text, missing = expand(pattern, self.env)
        placeholder = f"{self.path.stem.replace('-', '_').lower()}_documents_line{line}"
        if missing:
            problem = (f"{self.path}:{line}: documents {pattern!r} needs {', '.join('$' + m for m in missing)}, "
                       "which is not set: point it at the folder of corpus documents")
            yield self.build(placeholder, common, "", pattern, problem, line, fields, label)
            return
        chosen = os.path.isabs(pattern) or bool(VARIABLE.search(pattern))
        if not chosen and climbs_out(text):
            raise self.error(fields["documents"][0], f"{label}: documents {shown(pattern)} climbs out of the case "
                                                     f"file's folder {self.path.parent}: a relative glob stays in "
                                                     "it (write an absolute path or ${VARIABLE} to read elsewhere)")
        full = text if os.path.isabs(text) else str(self.path.parent / text)
        # Folders are passed over, as before; anything else that matches is read as a regular file, or refused.
        matches = sorted(Path(p) for p in glob.glob(full) if not os.path.isdir(p))
        if not matches:
            # The glob as written, and as expanded only when it names no variable (the value may be a secret).
            problem = f"{self.path}:{line}: documents {pattern!r} matched no file" + \
                ("" if VARIABLE.search(pattern) else f" ({full})")
            yield self.build(placeholder, common, "", pattern, problem, line, fields, label)
            return
        inside = None if chosen else self.path.parent
        named: dict[str, Path] = {}
        for document in matches:
            holder = self.secrets.found(document.name)
            if holder is not None:  # neither its name nor its case's may be shown
                raise self.error(fields["documents"][0], f"{label}: a document's file name holds the value of "
                                                         f"${holder}: rename it")
            name = re.sub(r"[^a-z0-9_]+", "_", document.stem.lower()).strip("_")[:MAX_NAME].rstrip("_")
            if not name:
                raise self.error(fields["documents"][0], f"{label}: the document {document.name!r} gives no case "
                                                         "name (its file name has no letter or digit a-z, 0-9): "
                                                         "rename it")
            if name in named:
                raise self.error(fields["documents"][0], f"{label}: the documents {named[name].name!r} and "
                                                         f"{document.name!r} both give the case name {name!r}: "
                                                         "rename one")
            named[name] = document
            context = self.document(document, fields["documents"][0], label, inside, pattern)
            yield self.build(name, common, context, str(document), None, line, fields, label)

    def document(self, path: Path, node: yaml.Node, label: str, inside: Path | None, pattern: str) -> str:
        """A corpus document's text: a regular file, UTF-8, within the size limit, no secret in it."""
        try:
            return self.pasted(path, inside, as_written(pattern, path))
        except Refused as refused:
            raise self.error(node, f"{label}: the document {path.name!r}: {refused}") from None


def load_cases(path: Path, env: Mapping[str, str] | None = None, max_context: int = MAX_CONTEXT,
               namespaces: Mapping[str, ExpectCheck | None] | None = None,
               checks: Mapping[str, Role] | None = None, secrets: Secrets | None = None) -> list[Case]:
    """Every case in one file, in file order; CaseFileError on the first mistake. `namespaces` are the skills
    whose rules take keys of their own under `expect:` (name → the check of its value); `checks` the checks a
    case may weigh under `expect: {checks: …}` (name → role; Palette's and the common ones unless given);
    `secrets` what no pasted file may hold (the session's; those of `env` unless given)."""
    return list(_Reader(path, os.environ if env is None else env, max_context, namespaces, checks,
                        secrets).cases())


def as_written(pattern: str, match: Path) -> str:
    """A file a `documents` glob matched, named as the case file writes it: the glob's folder as written, then the
    file's name; the glob itself when its last part names a ${VARIABLE} (an expansion is never shown)."""
    folder, _, last = pattern.rpartition("/")
    if VARIABLE.search(last):
        return pattern
    return f"{folder}/{match.name}" if folder or pattern.startswith("/") else match.name


def known_checks(*specs: Mapping[str, Any]) -> dict[str, Role]:
    """The checks a case may name: the common ones, Palette's, and those of `specs` (each a SkillRules.checks)."""
    found: dict[str, Role] = {}
    for each in (COMMON_CHECKS, PALETTE_CHECKS, *specs):
        found.update({name: spec.role for name, spec in each.items()})
    return dict(sorted(found.items()))


def shown(value: object) -> str:
    """A value as an error message shows it: its repr, cut to SHOWN characters."""
    text = repr(value)
    return text if len(text) <= SHOWN else f"{text[:SHOWN]}… ({len(text):,} characters)"
