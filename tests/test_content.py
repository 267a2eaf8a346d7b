"""The content rules, each shown failing and passing: pasted material's figures and headings reach the deck
(rule 10), a change that names a subject gets it (rule 11), a question is answered before anything changes
(rule 12) — on built evidence, on decks written with python-pptx, and on a deck the reference engine renders."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_palette.cases import DEFAULT_CONTENT, Case, CaseFileError, Expect, load_cases
from pytest_palette.judge import judge
from pytest_palette.judge.content import coverage, deck_text, figures, headings, not_mentioned, topic_words
from pytest_palette.judge.evidence import Evidence, turn_answers

MATERIAL = """# Finance review
## Revenue by region
| Region | Q2 | Q3 | Change |
|---|---|---|---|
| North | $12.4M | $13,900,000 | +12.1% |
| South | $8.1M | $7.6M | \u22126.2% |

## Outlook
- Q4 target $34.5M; pipeline coverage 2.7x, as in 2026
- 9 open roles and release 4.2.1 are counts and versions, not figures
"""
ALL_FIGURES = ["$12.4M", "$13900000", "12.1%", "$8.1M", "$7.6M", "-6.2%", "$34.5M", "2.7x", "2026"]


def deck_saying(path: Path, *texts: str, table: Sequence[Sequence[str]] = (), notes: str = "",
                grouped: str = "") -> Path:
    """A .pptx written with python-pptx: one slide per text, a table, speaker notes and a grouped text box on the
    last."""
    from pptx import Presentation
    from pptx.util import Inches

    presentation = Presentation()
    slide = None
    for text in texts or ("",):
        slide = presentation.slides.add_slide(presentation.slide_layouts[1])
        slide.shapes.title.text = text.split("\n")[0]
        slide.placeholders[1].text = "\n".join(text.split("\n")[1:])
    assert slide is not None
    if table:
        shape = slide.shapes.add_table(len(table), len(table[0]), Inches(1), Inches(4), Inches(6), Inches(2))
        for r, row in enumerate(table):
            for c, cell in enumerate(row):
                shape.table.cell(r, c).text = cell
    if notes:
        slide.notes_slide.notes_text_frame.text = notes
    if grouped:
        group = slide.shapes.add_group_shape()
        group.shapes.add_textbox(Inches(1), Inches(1), Inches(2), Inches(1)).text_frame.text = grouped
    path.parent.mkdir(parents=True, exist_ok=True)
    presentation.save(str(path))
    return path


def case_of(*, pasted: str = "", replies: Sequence[str] = ("yes",), **expect: Any) -> Case:
    """A case with `pasted` material (expected to reach the plan, unless `context` says otherwise)."""
    return Case(name="c", covers="the content rules", tags=(), request="a deck from this", context=pasted,
                replies=tuple(replies), expect=Expect(**{"context": bool(pasted), **expect}),
                path=Path("c.yaml"), line=1)


def evidence_of(pptx: Path | None, trace: Sequence[dict[str, Any]] = (), turns: Sequence[float] = (),
                answers: Sequence[str] = ()) -> Evidence:
    return Evidence(workspace=Path("/nonexistent"), pptx=pptx, slides=3, has_plex=True, size=31_000,
                    decks=(pptx,) if pptx else (), calls=tuple(trace), turns_started=tuple(turns),
                    answers=tuple(answers))


def call(command: str, at: float = 0.0, text: str | None = None, **args: Any) -> dict[str, Any]:
    answer = {"state": "done", "done": True, **({"text": text} if text is not None else {})}
    return {"at": at, "command": command, "args": args, "seconds": 0.1, "exit_code": 0, "stdout": json.dumps(answer)}


# --------------------------------------------------------------------------- what counts as a figure, a heading


@pytest.mark.parametrize(("text", "found"), [
    ("$12.4M and $12.4m", ["$12.4M"]),
    ("+12.1% vs 12.1 %", ["12.1%"]),
    ("\u22126.2% and \u20136.2% and -6.2%", ["-6.2%"]),
    ("2.7x or 2.7\u00d7", ["2.7x"]),
    ("$4,000 and $4000", ["$4000"]),
    ("600K users, \u00a3200 prize, 1.2 s start, 1.8 TB, -0.7 pt", ["600K", "\u00a3200", "1.2 s", "1.8 TB", "-0.7 pt"]),
    ("in 2026, from 2024-2025", ["2026", "2024", "2025"]),
    ("a 3\u20134% rise", ["4%"]),
    ("- 99.97% uptime", ["99.97%"]),  # a bullet's dash is not a minus
    ("9 open roles, 2,000 invoices, release 4.2.1, Q3, p95, SOC 2, 24/7, week 46", []),
])
def test_figures_are_numbers_that_carry_a_unit_and_compare_normalised(text: str, found: list[str]) -> None:
    assert figures(text) == found


def test_the_figures_and_headings_of_a_material() -> None:
    assert figures(MATERIAL) == ALL_FIGURES
    assert headings(MATERIAL) == ["finance review", "revenue by region", "outlook"]
    assert headings("```\n# a comment in code\n```\n### **Risks** & *mitigations* ###\n#not a heading") == [
        "risks and mitigations"]


def test_coverage_names_what_is_missing_and_the_share() -> None:
    deck = "Finance review\nRevenue by region\nNorth $12.4M $13,900,000 +12.1%\nSouth $8.1M \u22126.2%"
    found = coverage(MATERIAL, deck)
    assert found.missing_figures == ("$7.6M", "$34.5M", "2.7x", "2026")
    assert found.missing_headings == ("outlook",)
    assert (found.total, found.share) == (12, 1 - 5 / 12)
    assert found.missing() == ("4 of 9 figures of the pasted material are not in the deck: $7.6M, $34.5M, 2.7x, "
                               "2026; 1 of 3 headings of the pasted material are not in the deck: \u201coutlook\u201d")
    assert "and 2 more" in found.missing(shown=2)
    assert coverage("no figures, no headings", "").share == 1.0


def test_a_heading_is_found_as_whole_words_whatever_its_case() -> None:
    assert coverage("## Costs", "OPERATING COSTS").share == 1.0
    assert coverage("## Cost", "Costs").share == 0.0  # "cost" is not the word "costs": no partial words


def test_the_deck_text_reads_titles_bodies_tables_notes_and_groups(tmp_path: Path) -> None:
    deck = deck_saying(tmp_path / "deck.pptx", "Revenue\nNorth grew", table=[["Q2", "Q3"], ["$12.4M", "$13.9M"]],
                       notes="said aloud: 2.7x", grouped="in a group: 2026")
    text = deck_text(deck)
    assert text is not None
    for needed in ("Revenue", "North grew", "Q2 | Q3", "$12.4M | $13.9M", "said aloud: 2.7x", "in a group: 2026"):
        assert needed in text
    assert deck_text(tmp_path / "missing.pptx") is None
    (tmp_path / "broken.pptx").write_bytes(b"PK not a zip")
    assert deck_text(tmp_path / "broken.pptx") is None


# --------------------------------------------------------------------------- rule 10: the material reaches the deck


def content_failures(case: Case, evidence: Evidence) -> tuple[tuple[str, tuple[int, ...]], ...]:
    verdict = judge(case, evidence)
    return tuple(zip(verdict.failures, verdict.blame, strict=True))


TRACE = (call("find"), call("plan", context=MATERIAL, request="r"), call("start"))


@pytest.mark.end_to_end
def test_a_deck_that_carries_too_little_of_the_material_fails_naming_what_is_missing(tmp_path: Path) -> None:
    deck = deck_saying(tmp_path / "deck.pptx", "Finance review\n$12.4M up 12.1%")
    [(words, blame)] = content_failures(case_of(pasted=MATERIAL), evidence_of(deck, TRACE))
    assert words.startswith("7 of 9 figures of the pasted material are not in the deck: $13900000, $8.1M, $7.6M, "
                            "-6.2%, $34.5M, 2.7x, 2026; 2 of 3 headings of the pasted material are not in the deck: "
                            "\u201crevenue by region\u201d, \u201coutlook\u201d")
    assert words.endswith("(the deck carries 25% of its 12 figures and headings; the case asks for at least 90%)")
    assert blame == (1,)  # the plan call that was given the material


def test_a_deck_that_carries_the_material_passes(tmp_path: Path) -> None:
    deck = deck_saying(tmp_path / "deck.pptx", "Finance review", "Revenue by region\n$34.5M target, 2.7x in 2026",
                       "Outlook", table=[["North", "$12.4M", "$13,900,000", "+12.1%"],
                                         ["South", "$8.1M", "$7.6M", "-6.2%"]])
    assert content_failures(case_of(pasted=MATERIAL), evidence_of(deck, TRACE)) == ()


def test_the_share_the_case_asks_for_is_the_line(tmp_path: Path) -> None:
    # 11 of 12: 92% passes the default 90%, fails a case that asks for all of it.
    deck = deck_saying(tmp_path / "deck.pptx", "Finance review", "Revenue by region\n$34.5M target, 2.7x in 2026",
                       table=[["North", "$12.4M", "$13,900,000", "+12.1%"], ["South", "$8.1M", "$7.6M", "-6.2%"]])
    assert DEFAULT_CONTENT == 0.9
    assert content_failures(case_of(pasted=MATERIAL), evidence_of(deck, TRACE)) == ()
    [(words, _)] = content_failures(case_of(pasted=MATERIAL, content=1.0), evidence_of(deck, TRACE))
    assert "1 of 3 headings" in words and "at least 100%" in words


def test_the_rule_is_off_for_content_0_for_context_false_and_for_material_with_nothing_to_look_for(
        tmp_path: Path) -> None:
    deck = deck_saying(tmp_path / "deck.pptx", "Something else entirely")
    evidence = evidence_of(deck, TRACE)
    assert content_failures(case_of(pasted=MATERIAL, content=0.0), evidence) == ()
    assert content_failures(case_of(pasted=MATERIAL, context=False), evidence) == ()
    prose = "Maya: we go with layout B. Tom starts next sprint."
    assert content_failures(case_of(pasted=prose), evidence_of(deck, (call("plan", context=prose),))) == ()


def test_a_deck_whose_text_cannot_be_read_is_noted_not_failed(tmp_path: Path) -> None:
    broken = tmp_path / "deck.pptx"
    broken.write_bytes(b"PK" + b"\0" * 30_000)
    verdict = judge(case_of(pasted=MATERIAL), evidence_of(broken, TRACE))
    assert verdict.failures == ()
    assert any("could not be told (its text could not be read)" in note for note in verdict.notes)


def run_engine(*args: str, cwd: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "pytest_palette.engine", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120, check=False)
    assert done.returncode == 0, done.stderr


@pytest.mark.end_to_end
def test_a_deck_the_reference_engine_renders_from_the_material_carries_all_of_it(tmp_path: Path) -> None:
    run_engine("build-plan", "Make slides from these numbers", "--context", MATERIAL, "--out", "plan.md", cwd=tmp_path)
    run_engine("build-deck", "--plan", "plan.md", "--out-dir", "deck", cwd=tmp_path)
    deck = tmp_path / "deck" / "deck.pptx"
    text = deck_text(deck)
    assert text is not None and coverage(MATERIAL, text).share == 1.0
    assert content_failures(case_of(pasted=MATERIAL, content=1.0), evidence_of(deck, TRACE)) == ()
    # The same deck judged against other material: nothing of it is there.
    other = "## Hiring plan\n- 14 engineers by June, $2.1M budget"
    [(words, _)] = content_failures(case_of(pasted=other), evidence_of(deck, (call("plan", context=other),)))
    assert words.startswith("1 of 1 figures of the pasted material are not in the deck: $2.1M; 1 of 1 headings")


# --------------------------------------------------------------------------- rule 11: a named subject is covered

PLAN = "# On-call\n\n## On-call at a glance\n- Who is on call\n\n## Next steps\n- Name an owner\n"
WITH_PATHS = PLAN.replace("## Next steps", "## Escalation paths\n- Who to call next\n\n## Next steps")
ADD = ("add a slide on escalation paths", "yes")
TURNS = (100.0, 200.0, 300.0)  # the request, the change, the approval


def topic_verdict(deck: Path, edited: str | None, *, turns: Sequence[float] = TURNS,
                  replies: Sequence[str] = ADD, command: str = "edit") -> tuple[tuple[str, ...], tuple[Any, ...]]:
    trace = (call("plan", 110.0, PLAN, request="r"), call(command, 210.0, edited), call("start", 310.0))
    verdict = judge(case_of(replies=replies, edit=True), evidence_of(deck, trace, turns))
    return verdict.failures, verdict.blame


def test_an_edit_that_leaves_the_named_subject_out_fails_and_blames_the_edit(tmp_path: Path) -> None:
    deck = deck_saying(tmp_path / "deck.pptx", "On-call at a glance", "Next steps")
    failures, blame = topic_verdict(deck, PLAN)
    assert failures == ("reply 1 ('add a slide on escalation paths') asked for escalation paths, but the edit left "
                        "it out: neither the plan revised in that turn nor the deck mentions it (no \u201cescalation"
                        "\u201d, \u201cpath\u201d)",)
    assert blame == ((1,),)


def test_the_named_subject_in_the_revised_plan_or_in_the_deck_passes(tmp_path: Path) -> None:
    bare = deck_saying(tmp_path / "bare.pptx", "On-call at a glance", "Next steps")
    assert topic_verdict(bare, WITH_PATHS) == ((), ())  # the plan of that turn has it (a later turn may trim)
    covered = deck_saying(tmp_path / "covered.pptx", "On-call at a glance", "Escalation Paths\nwho next")
    assert topic_verdict(covered, PLAN) == ((), ())
    assert topic_verdict(covered, None) == ((), ())  # an edit that answered without its plan's text


def test_without_the_turns_times_the_deck_alone_is_judged(tmp_path: Path) -> None:
    bare = deck_saying(tmp_path / "bare.pptx", "On-call at a glance", "Next steps")
    failures, blame = topic_verdict(bare, WITH_PATHS, turns=())
    assert failures == ("reply 1 ('add a slide on escalation paths') asked for escalation paths, but the deck does "
                        "not mention it (no \u201cescalation\u201d, \u201cpath\u201d)",)
    assert blame == ((2,),)  # the build of a deck without it


def test_a_reply_that_names_no_subject_is_not_judged_by_this_rule(tmp_path: Path) -> None:
    bare = deck_saying(tmp_path / "bare.pptx", "On-call at a glance", "Next steps")
    assert topic_verdict(bare, PLAN, replies=("make it shorter", "yes")) == ((), ())


@pytest.mark.parametrize(("topic", "words"), [("escalation paths", ["escalation", "path"]),
                                              ("our Q3 numbers", ["q3", "number"]), ("the logo", ["logo"]),
                                              ("a slide", [])])
def test_a_subjects_words_are_what_must_appear(topic: str, words: list[str]) -> None:
    assert topic_words(topic) == words
    assert not_mentioned("Escalation Paths for Q3: the numbers, and our logo", words) == []


# --------------------------------------------------------------------------- rule 12: a question is answered

QUESTION = ("why is there no slide on rollback?", "ok, go ahead")


def question_verdict(tmp_path: Path, in_turn: Sequence[str], *, turns: Sequence[float] = TURNS,
                     answers: Sequence[str] = ("plan shown", "The plan has 5 slides …", "Your deck is ready")
                     ) -> tuple[tuple[str, ...], tuple[Any, ...], tuple[str, ...]]:
    deck = deck_saying(tmp_path / "deck.pptx", "CI migration")
    trace = (call("plan", 110.0, PLAN, request="r"), *(call(c, 210.0 + i) for i, c in enumerate(in_turn)),
             call("start", 310.0))
    verdict = judge(case_of(replies=QUESTION), evidence_of(deck, trace, turns, answers))
    return verdict.failures, verdict.blame, verdict.notes


def test_a_question_answered_with_nothing_changed_passes(tmp_path: Path) -> None:
    assert question_verdict(tmp_path, ("find",))[:2] == ((), ())
    assert question_verdict(tmp_path, ("find", "plan-status", "status"))[:2] == ((), ())  # looking is no change


@pytest.mark.parametrize("acted", [("edit",), ("find", "edit", "plan-status"), ("plan",), ("start",)])
def test_a_question_acted_on_as_a_change_fails_and_blames_what_changed(tmp_path: Path, acted: Sequence[str]) -> None:
    failures, blame, _ = question_verdict(tmp_path, acted)
    changed = [c for c in acted if c in ("plan", "edit", "start")]
    mine = [(f, b) for f, b in zip(failures, blame, strict=True) if "asked a question" in f]
    assert mine == [(f"reply 1 ('why is there no slide on rollback?') asked a question, but the agent acted on it "
                     f"instead of answering ({', '.join(changed)} in that turn): a question asks for nothing to "
                     f"change", tuple(1 + acted.index(c) for c in changed))]


def test_a_question_met_with_silence_fails(tmp_path: Path) -> None:
    failures, _, _ = question_verdict(tmp_path, ("find",), answers=("plan shown", "  ", "Your deck is ready"))
    assert failures == ("reply 1 ('why is there no slide on rollback?') asked a question, but the agent said nothing "
                        "in that turn",)
    # No record of what was said (a conversation held by hand): only the calls are judged.
    assert question_verdict(tmp_path, ("find",), answers=())[:2] == ((), ())


def test_without_the_turns_times_the_rule_says_it_cannot_tell(tmp_path: Path) -> None:
    failures, _, notes = question_verdict(tmp_path, ("edit",), turns=())
    assert failures == ()
    assert any("asked a question; whether it was answered before anything changed could not be told" in note
               for note in notes)


def test_the_answers_come_from_turns_json(tmp_path: Path) -> None:
    turns = tmp_path / "turns.json"
    turns.write_text(json.dumps({"turns": [{"sent": "a", "answer": "plan"}, {"sent": "b"}, {"sent": "c",
                                                                                         "answer": None}]}))
    assert turn_answers(turns) == ("plan", "", "")
    turns.write_text("{torn")
    assert turn_answers(turns) == ()
    assert turn_answers(tmp_path / "missing.json") == ()
    turns.write_text(json.dumps({"turns": ["not a turn"]}))
    assert turn_answers(turns) == ()


# --------------------------------------------------------------------------- the case's key: expect.content


def load(tmp_path: Path, expect: str) -> list[Case]:
    path = tmp_path / "c.yaml"
    path.write_text(f"- name: a\n  covers: x\n  request: r\n  context: '## Costs'\n  expect:\n    {expect}\n",
                    encoding="utf-8")
    return load_cases(path, env={})


@pytest.mark.parametrize(("given", "share"), [("content: 0.75", 0.75), ("content: 1", 1.0), ("content: 0", 0.0),
                                              ("slides: 3", DEFAULT_CONTENT)])
def test_a_case_sets_the_share_it_asks_for(tmp_path: Path, given: str, share: float) -> None:
    [case] = load(tmp_path, given)
    assert case.expect.content == share
    assert Case.from_json(json.loads(json.dumps(case.to_json()))).expect.content == share
    # Left out of the digest at its default, so a case that does not set it keeps the digest it had.
    plain = replace(case, expect=replace(case.expect, content=DEFAULT_CONTENT))
    assert (case.digest() == plain.digest()) is (share == DEFAULT_CONTENT)


@pytest.mark.parametrize(("given", "message"), [
    ("content: 1.5", "'expect' of case 'a': content must be a number from 0 to 1 (the share of the pasted "
                     "material's figures and headings the deck must carry), not 1.5"),
    ("content: -0.1", "content must be a number from 0 to 1"),
    ("content: true", "content must be a number from 0 to 1"),
    ("content: .nan", "content must be a number from 0 to 1"),
    ("content: most", "'expect' of case 'a': 'content' must be int or float, not str"),
])
def test_a_wrong_share_is_an_error_naming_file_and_line(tmp_path: Path, given: str, message: str) -> None:
    with pytest.raises(CaseFileError) as raised:
        load(tmp_path, given)
    assert raised.value.line == 6 and str(raised.value).startswith(f"{tmp_path / 'c.yaml'}:6: ")
    assert message in str(raised.value)


def test_a_near_miss_cannot_ask_for_content(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("- name: a\n  covers: x\n  request: how long should a talk be?\n  expect:\n    skill: false\n"
                    "    content: 0.5\n", encoding="utf-8")
    with pytest.raises(CaseFileError) as raised:
        load_cases(path, env={})
    assert raised.value.line == 6 and "'content' is about driving the skill" in str(raised.value)
