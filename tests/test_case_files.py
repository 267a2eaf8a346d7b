"""Case files cannot hurt the machine: hostile YAML is a one-line error naming the file and line, read in
bounded memory; merge keys work; names are short, non-empty and unique (issue 11, step 3)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from pytest_palette.cases import MAX_NAME, CaseFileError, load_cases

#: Nine levels of nine: 9**7 strings once expanded, a few hundred bytes on disk.
CHAIN = ("[&a [lol,lol,lol,lol,lol,lol,lol,lol,lol], "
         + ", ".join(f"&{k} [" + ",".join([f"*{p}"] * 9) + "]" for p, k in zip("abcdef", "bcdefg", strict=True))
         + "]")


def error_of(tmp_path: Path, text: str | bytes, **kwargs: int) -> CaseFileError:
    path = tmp_path / "c.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(CaseFileError) as raised:
        load_cases(path, env={}, **kwargs)
    return raised.value


def within_memory(tmp_path: Path, text: str) -> tuple[CaseFileError, int]:
    tracemalloc.start()
    try:
        error = error_of(tmp_path, text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return error, peak


def test_an_alias_bomb_as_a_value_is_refused_before_it_expands(tmp_path: Path) -> None:
    error, peak = within_memory(tmp_path, f"- name: bomb\n  covers: x\n  request: {CHAIN}\n")
    assert error.line == 3 and "expands to more than 100,000 YAML nodes" in str(error)
    assert peak < 50_000_000 and len(str(error)) < 400


def test_an_alias_bomb_as_a_key_is_refused_without_expanding_it(tmp_path: Path) -> None:
    # It once printed 351 MB in the "unknown key" message, then died of MemoryError.
    error, peak = within_memory(tmp_path, f"- name: bomb\n  covers: x\n  request: r\n  ? {CHAIN}\n  : 1\n")
    assert error.line == 4 and "a key in a case must be plain text" in str(error)
    assert peak < 50_000_000 and len(str(error)) < 400


@pytest.mark.parametrize("tag", ["!!python/object/apply:os.system ['echo pwned']", "!!python/name:os.system",
                                 "!custom 3"])
def test_an_unknown_tag_is_a_one_line_error_at_its_line(tmp_path: Path, tag: str) -> None:
    error = error_of(tmp_path, f"- name: tagged\n  covers: x\n  request: {tag}\n")
    assert error.line == 3 and "cannot read this value" in str(error) and "\n" not in str(error)


def test_merge_keys_share_replies_through_anchors(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("- &base\n  name: first\n  covers: x\n  request: Build a deck\n"
                    "  replies: [make it 3 slides, \"yes\"]\n"
                    "- <<: *base\n  name: second\n  request: Build another deck\n", encoding="utf-8")
    first, second = load_cases(path, env={})
    assert (second.name, second.request, second.replies) == ("second", "Build another deck",
                                                             ("make it 3 slides", "yes"))
    assert second.expect.edit and first.covers == second.covers == "x"


def test_a_key_twice_in_the_same_case_is_still_an_error_with_merges(tmp_path: Path) -> None:
    error = error_of(tmp_path, "- <<: {covers: x}\n  name: a\n  request: r\n  name: b\n")
    assert error.line == 4 and "'name' appears twice" in str(error)


def test_bytes_that_are_not_utf8_are_named_with_their_line(tmp_path: Path) -> None:
    error = error_of(tmp_path, b"- name: a\n  covers: x\n  request: caf\xe9\n")
    assert (error.line, error.message) == (3, "not UTF-8 text (byte 0xe9); save the file as UTF-8")


def test_pasted_material_over_the_limit_is_refused_with_its_size(tmp_path: Path) -> None:
    error = error_of(tmp_path, "- name: big\n  covers: x\n  request: r\n  context: " + "x" * 2_000 + "\n",
                     max_context=1_000)
    assert error.line == 4 and "2,000 bytes, more than the 1,000 allowed (--palette-max-context)" in str(error)


@pytest.mark.parametrize(("name", "why"), [
    ("a" * (MAX_NAME + 1), f"at most {MAX_NAME} characters"),
    ('"trailing\\n"', "must match [a-z0-9_]+"),
    ("Has_Capitals", "must match [a-z0-9_]+"),
])
def test_a_case_name_must_be_short_and_plain(tmp_path: Path, name: str, why: str) -> None:
    error = error_of(tmp_path, f"- name: {name}\n  covers: x\n  request: r\n")
    assert error.line == 1 and why in str(error) and len(str(error)) < 300


def test_a_long_value_is_cut_in_the_message(tmp_path: Path) -> None:
    error = error_of(tmp_path, f"- name: a\n  covers: x\n  request: r\n  ? {'k' * 5000}\n  : 1\n")
    assert "characters)" in str(error) and len(str(error)) < 400


def test_yaml_that_does_not_parse_is_one_line_with_its_line_and_column(tmp_path: Path) -> None:
    error = error_of(tmp_path, "- name: a\n  covers: x\n  request: [unclosed\n")
    assert error.line == 4 and "not valid YAML" in str(error) and "(column" in str(error)
    assert "\n" not in str(error)


@pytest.mark.parametrize("stem", ["---", "日本語", "   "])
def test_a_document_whose_name_gives_no_case_name_is_refused(tmp_path: Path, stem: str) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / f"{stem}.md").write_text("# Notes\n- a point\n", encoding="utf-8")
    error = error_of(tmp_path, "- documents: docs/*.md\n  covers: x\n  request: Turn this into a deck\n")
    assert error.line == 1 and f"the document '{stem}.md' gives no case name" in str(error)


def test_two_documents_that_give_one_case_name_are_both_named(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    for stem in ("Q3 Review", "q3-review"):
        (tmp_path / "docs" / f"{stem}.md").write_text("# Q3\n- figures\n", encoding="utf-8")
    error = error_of(tmp_path, "- documents: docs/*.md\n  covers: x\n  request: Turn this into a deck\n")
    assert "'Q3 Review.md' and 'q3-review.md' both give the case name 'q3_review'" in str(error)
