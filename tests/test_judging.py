"""The one path from an item's folder to its verdict (`judge_folder`): the evidence, then the faults, then the
judge, with what differs between a live item, `rejudge` and the site given as arguments."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_palette.arena.command_log import CommandLog
from pytest_palette.arena.workspace import Workspace
from pytest_palette.cases import Case, Expect
from pytest_palette.judge.evidence import Evidence
from pytest_palette.rules import Failure, SkillRules
from pytest_palette.run.judging import judge_folder

FULL = "cp: error writing 'backup.md': No space left on device\n"
PLAN = "./skills/palette/scripts/deck.py plan --request 'tides' --out plan.md"


def make_case(**expect: object) -> Case:
    return Case(name="tides", covers="judging a folder", tags=(), request="a deck on tides", context="",
                replies=("actually, hold off",), expect=Expect(**expect),  # type: ignore[arg-type]
                path=Path("cases/judging.yaml"), line=1)


@pytest.fixture
def folder(tmp_path: Path) -> Workspace:
    """An item's folder as a conversation left it: one call of the skill (in our record, no trace), and a command
    whose standard error says the disk is full."""
    workspace = Workspace.of(tmp_path, "react", "tides", 1, False)
    workspace.work.mkdir(parents=True)
    log = CommandLog(workspace.commands)
    log.add(PLAN, 1.0, 2.0, 0, '{"state": "done", "done": true, "text": "## Tides"}')
    log.add("cp notes.md backup.md", 3.0, 4.0, 1, "", FULL)
    return workspace


def test_a_fault_ends_the_path_before_the_judge_and_nothing_is_saved(folder: Workspace) -> None:
    settled: list[bool] = []
    judgement = judge_folder(make_case(deck=False), folder, host="react", room=False, save=True,
                             settle=lambda: settled.append(True))
    assert judgement.verdict is None and settled == [True]
    assert judgement.fault == f"a command the agent ran met a limit of this machine: {FULL.strip()}"
    assert judgement.evidence.commands == ["plan"] and not folder.output.exists()


def test_with_room_the_same_words_are_a_note_on_a_verdict_and_the_outputs_are_saved_only_when_asked(
        folder: Workspace) -> None:
    judged = judge_folder(make_case(deck=False), folder, host="react", room=True)
    assert judged.fault is None and judged.verdict is not None and judged.verdict.ok
    assert judged.verdict.host == "react" and judged.verdict.calls_from == "host"
    [bound] = [note for note in judged.verdict.notes if "bound of its sandbox" in note]
    assert bound in judged.evidence.call_notes and bound.endswith(": cp notes.md backup.md")
    assert not folder.output.exists()
    saved = judge_folder(make_case(deck=False), folder, host="react", room=True, save=True).verdict
    assert saved is not None and (saved, saved.notes) == (judged.verdict, judged.verdict.notes)
    assert folder.output.is_dir()


def test_the_rules_and_the_skill_given_judge_it(folder: Workspace) -> None:
    def strict(case: Case, evidence: Evidence) -> list[Failure]:
        return [Failure(f"{case.name}: {len(evidence.calls)} call(s) is too many", (0,))]

    verdict = judge_folder(make_case(deck=False), folder, room=True, rules=SkillRules(judge=strict),
                           skill="tidal").verdict
    assert verdict is not None and verdict.failures == ("tides: 1 call(s) is too many",)
    assert verdict.rules == "tidal" and verdict.blame == ((0,),)
    # The deck a case asks for is judged by Palette's rules when none are given.
    missing = judge_folder(make_case(), folder, room=True).verdict
    assert missing is not None and missing.failures[0].startswith("no .pptx was produced")


def test_a_folder_named_from_the_callers_folder_is_read_as_from_anywhere(
        folder: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pptx import Presentation

    presentation = Presentation()  # a deck of python-pptx's: two slides, not Palette's fonts
    for _ in range(2):
        presentation.slides.add_slide(presentation.slide_layouts[1])
    (folder.work / "deck").mkdir()
    presentation.save(str(folder.work / "deck" / "deck.pptx"))
    monkeypatch.chdir(tmp_path)  # as `palette-bench rejudge runs/<id>` is given it
    relative = Workspace(folder.folder.relative_to(tmp_path), folder.relative)
    here, there = (judge_folder(make_case(slides=2), workspace, room=True) for workspace in (relative, folder))
    assert here.evidence.slides == there.evidence.slides == 2 and here.evidence.pptx == there.evidence.pptx
    assert here.verdict is not None and here.verdict.failures == ("the .pptx does not carry IBM Plex — it was not "
                                                                  "rendered by Palette",)
