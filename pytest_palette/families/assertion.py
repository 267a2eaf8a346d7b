"""The `assert` command a family's hooks find on their PATH (also as `gemba-trace`, so a family written for the
peer runs unchanged): one check, written as one JSON row on stdout, which the hook sends to `$RESULTS_FD`.

    assert NAME [--gate] [--not] [--weight W] [--message M] (--exists FILE | --grep PATTERN FILE)
    gemba-trace assert NAME …

`--exists` holds when FILE is there; `--grep` when a line of FILE matches PATTERN (a regular expression);
`--not` turns either around. The row is `{"test", "pass"}`, with `"gate": true`, `"weight"` and `"message"` as
given (a failure without a message says what was not found). A usage error writes no row, says why on stderr and
exits 2; a row written means exit 0, held or not: a hook's checks are its rows, not its exit statuses.

Standard library only, run with `python -I -S`: a hook may call it dozens of times.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys

USAGE = ("usage: assert NAME [--gate] [--not] [--weight W] [--message M] (--exists FILE | --grep PATTERN FILE)")
#: The bound of a file `--grep` reads.
GREP_BYTES = 64 * 1024 * 1024


class Usage(Exception):
    pass


def parse(args: list[str]) -> dict[str, object]:
    """The row's parts from the arguments (`assert` itself already taken off)."""
    if not args or args[0].startswith("--"):
        raise Usage("a check name comes first")
    options: dict[str, object] = {"name": args[0], "gate": False, "not": False}
    rest = args[1:]
    while rest:
        flag = rest.pop(0)
        if flag in ("--gate", "--not"):
            options[flag[2:]] = True
        elif flag in ("--weight", "--message", "--exists"):
            if not rest:
                raise Usage(f"{flag} needs a value")
            options[flag[2:]] = rest.pop(0)
        elif flag == "--grep":
            if len(rest) < 2:
                raise Usage("--grep needs a PATTERN and a FILE")
            options["grep"] = (rest.pop(0), rest.pop(0))
        else:
            raise Usage(f"unknown argument {flag!r}")
    if ("exists" in options) == ("grep" in options):
        raise Usage("give one of --exists FILE or --grep PATTERN FILE")
    if "weight" in options:
        try:
            weight = float(str(options["weight"]))
        except ValueError:
            raise Usage(f"--weight {options['weight']!r} is not a number") from None
        if not math.isfinite(weight) or weight < 0:
            raise Usage("--weight must be a number ≥ 0")
        options["weight"] = int(weight) if weight.is_integer() else weight
    return options


def evaluate(options: dict[str, object]) -> dict[str, object]:
    """The row: whether the check held, and its role and words."""
    if "exists" in options:
        path = str(options["exists"])
        found = os.path.exists(path)
        why = f"{path} exists" if found else f"{path} does not exist"
    else:
        grep = options["grep"]
        assert isinstance(grep, tuple)
        pattern, path = str(grep[0]), str(grep[1])
        try:
            expression = re.compile(pattern)
        except re.error as error:
            raise Usage(f"--grep {pattern!r} is not a regular expression ({error})") from None
        try:
            with open(path, "rb") as opened:
                text = opened.read(GREP_BYTES).decode("utf-8", "replace")
        except OSError:
            found, why = False, f"{path} cannot be read"
        else:
            found = any(expression.search(line) for line in text.splitlines())
            why = f"a line of {path} matches {pattern!r}" if found else f"no line of {path} matches {pattern!r}"
    held = found != bool(options["not"])
    row: dict[str, object] = {"test": options["name"], "pass": held}
    if options["gate"]:
        row["gate"] = True
    if "weight" in options:
        row["weight"] = options["weight"]
    if "message" in options:
        row["message"] = options["message"]
    elif not held:
        row["message"] = why
    return row


def main(argv: list[str]) -> int:
    """`argv`: the name the command was called by (`assert`, `gemba-trace`), then its arguments."""
    program, args = (argv[0], argv[1:]) if argv else ("assert", [])
    if program == "gemba-trace":
        if args[:1] != ["assert"]:
            print("gemba-trace: only `gemba-trace assert …` is provided here", file=sys.stderr)
            return 2
        args = args[1:]
    try:
        row = evaluate(parse(args))
    except Usage as error:
        print(f"{program}: {error}\n{USAGE}", file=sys.stderr)
        return 2
    sys.stdout.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
