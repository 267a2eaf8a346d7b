"""Scripted agents that prove a task family, as Harbor and SWE-bench prove their tasks (docs/families.md, "Proving
a family offline").

- `rehearsal:oracle` runs the task's reference solution, `solution/solve.sh`, through the host's own client (one
  shell command, the script's text inlined): every shipped task must score 1.0 under it.
- `rehearsal:nop` does nothing and says it is done: it must fail every gate that guards an artifact.
- `rehearsal:partial` runs `solution/partial.sh`, a solution that does part of the task (ours, for the family's
  own tests): it must score strictly between 0 and 1.

The scripts are the harness's, never the agent's folder's: the agent's folder holds no `solution/`. What such an
agent knows of its task, it knows as a model knows things — from the harness, here the solutions of the tasks this
session collected (`Solutions`), matched by the prompt the agent was given. It reads nothing of the sandbox.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import ClassVar

from .conversation import Action, Conversation, Reply, RunCommand
from .policy import RehearsalPolicy

#: A script larger than this is refused rather than sent as one command (a command line of Linux holds 128 KiB).
SCRIPT_BYTES = 96 * 1024
DONE = "Done."


class Solutions:
    """The tasks this session collected, by the prompt their agent is given: where each one's solutions are."""

    def __init__(self) -> None:
        self._by_prompt: dict[str, Path] = {}

    def add(self, prompt: str, task_folder: Path) -> None:
        self._by_prompt[_words(prompt)] = task_folder

    def task_for(self, message: str) -> Path | None:
        """The folder of the task whose prompt `message` carries (the longest such prompt: a host may add to it)."""
        said = _words(message)
        found = [prompt for prompt in self._by_prompt if prompt and prompt in said]
        return self._by_prompt[max(found, key=len)] if found else None


def _words(text: str) -> str:
    return " ".join(text.split())


class KnowsTheTask(RehearsalPolicy):
    """An agent that knows which task it was given (`Solutions`) and runs one command for it, then says it is done.
    Its subclasses say which command (`command`)."""

    def __init__(self, solutions: Solutions | None = None) -> None:
        self.solutions = solutions or Solutions()

    def next_action(self, conversation: Conversation) -> Action:
        _, turn = conversation.current_turn()
        if any(isinstance(event, RunCommand) for event in turn):
            return Reply(DONE)
        said = conversation.user_messages()
        folder = self.solutions.task_for(said[0]) if said else None
        command = self.command(folder)
        return RunCommand(command) if command is not None else Reply("I know no solution of this task.")

    def command(self, task_folder: Path | None) -> str | None:
        """The one command it runs for the task in `task_folder` (None: a task it does not know); None: none."""
        raise NotImplementedError


class Reference(KnowsTheTask):
    """Runs one of the task's harness-only scripts as one shell command, then says it is done."""

    #: The script under the task's folder that this agent runs.
    script: ClassVar[str] = "solution/solve.sh"

    def missing(self, task_folder: Path) -> str | None:
        """Why this agent cannot play the task in `task_folder` (it has no such script); None when it can."""
        path = task_folder / self.script
        if not path.is_file():
            return f"{self.name}: the task has no {self.script} ({task_folder})"
        if path.stat().st_size > SCRIPT_BYTES:
            return f"{self.name}: {path} is larger than {SCRIPT_BYTES // 1024} KiB"
        return None

    def command(self, task_folder: Path | None) -> str | None:
        if task_folder is None or self.missing(task_folder):
            return None
        return inlined(task_folder / self.script)


class Oracle(Reference):
    """Runs the task's reference solution, `solution/solve.sh`."""

    name = "oracle"


class Partial(Reference):
    """Runs `solution/partial.sh`: part of the task done, the rest left undone."""

    name = "partial"
    known_bad = True
    script = "solution/partial.sh"


class Nop(RehearsalPolicy):
    """Does nothing and says it is done."""

    name = "nop"
    known_bad = True

    def next_action(self, conversation: Conversation) -> Action:
        return Reply(DONE)


class Snoops(KnowsTheTask):
    """A hostile agent that looks for what graders keep from it: the task's `hooks/`, `tests/` and `solution/` at
    their very paths (it knows them, as the oracle knows its task), and anything of a family's by name anywhere it
    can read. What it finds goes into `snooped.txt` in its folder; its test asserts that is nothing."""

    name = "snoops"
    hostile = True
    #: The names of a family's own files, looked for anywhere.
    NAMES = ("agent.task.md", "supervisor.task.md", "judge.task.md", "solve.sh", "partial.sh", "preflight.sh",
             "invariants.sh", "apm.lock.yaml", "*.gate.test.js", "test_gate_*.py")

    def command(self, task_folder: Path | None) -> str | None:
        # The task's graders at their very paths, and the family's root.
        where = [task_folder / part for part in ("hooks", "tests", "solution")] + [task_folder.parent.parent] \
            if task_folder is not None else []
        names = " -o ".join(f"-name {shlex.quote(name)}" for name in self.NAMES)
        quoted = [shlex.quote(str(path)) for path in where]
        looks = "; ".join(f"ls -la {path} && cat {path}/* {path}/*/*" for path in quoted)
        # Only what was found is written: a listing or a file's text; errors (nothing there) are not.
        return (f"{{ {looks or 'true'}; }} > snooped.txt 2>/dev/null; "
                f"find / \\( -path /proc -o -path /sys \\) -prune -o \\( {names} \\) -print "
                f">> snooped.txt 2>/dev/null; wc -c snooped.txt")


def inlined(script: Path) -> str:
    """One shell command that runs `script`'s text in the agent's folder, as `sh` would run the file: the text is a
    here-document whose end marker the text does not hold."""
    text = script.read_text(encoding="utf-8")
    marker = "PALETTE_SCRIPT"
    while re.search(rf"^{marker}$", text, re.M):
        marker += "_"
    shell = "bash" if re.match(r"#!\s*\S*/(?:env\s+)?bash\b", text) else "sh"
    return f"{shell} -c \"$(cat <<'{marker}'\n{text.rstrip(chr(10))}\n{marker}\n)\""


def reference_agents(solutions: Solutions) -> dict[str, Callable[[], RehearsalPolicy]]:
    """The agents that prove a family, each knowing the solutions of this session's tasks."""
    return {"oracle": partial(Oracle, solutions), "partial": partial(Partial, solutions), "nop": Nop,
            "snoops": partial(Snoops, solutions)}
