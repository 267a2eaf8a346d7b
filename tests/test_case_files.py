"""Case files cannot hurt the machine: hostile YAML is a one-line error naming the file and line, read in
bounded memory; merge keys work; names are short, non-empty and unique (issue 11, step 3)."""

from __future__ import annotations

import os
import socket
import tracemalloc
from pathlib import Path

import pytest

from pytest_palette.cases import MAX_NAME, CaseFileError, Refused, kernel_devices, load_cases, read_regular

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


# Route 6 of issue 21: a case file reads regular files only. A refusal keeps the case from running (context_file:
# it ERRORs at setup, with this one line) or fails the file's collection (documents:), and reads nothing.

def context_of(tmp_path: Path, where: str, env: dict[str, str] | None = None) -> tuple[str, str | None]:
    (tmp_path / "cases").mkdir(exist_ok=True)
    path = tmp_path / "cases" / "c.yaml"
    path.write_text(f"- name: a\n  covers: x\n  request: r\n  context_file: {where!r}\n", encoding="utf-8")
    [case] = load_cases(path, env=env or {})
    return case.context, case.problem


def refused(tmp_path: Path, where: str, said: str, env: dict[str, str] | None = None) -> str:
    context, problem = context_of(tmp_path, where, env)
    assert context == "" and problem is not None, problem
    assert problem.startswith(f"{tmp_path / 'cases' / 'c.yaml'}:4: context_file ") and "\n" not in problem
    assert said in problem, problem
    return problem


def test_a_context_file_in_proc_is_refused_and_nothing_of_it_is_read(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PALETTE_FAKE_SECRET", "sk-not-a-real-key-4242")
    problem = refused(tmp_path, "/proc/self/environ", "is under /proc: a case file reads regular files only")
    assert "sk-not-a-real-key" not in problem
    refused(tmp_path, "${PROC}/self/environ", "is under /proc", env={"PROC": "/proc"})
    refused(tmp_path, "/dev/zero", "is under /dev")
    refused(tmp_path, "/sys/kernel/uevent_seqnum", "is under /sys")


def test_a_link_is_followed_to_its_end_and_judged_there(tmp_path: Path) -> None:
    cases, outside = tmp_path / "cases", tmp_path / "outside.md"
    cases.mkdir()
    outside.write_text("# Outside\n- a point\n", encoding="utf-8")
    (cases / "inner.md").write_text("# Inner\n- a point\n", encoding="utf-8")
    for name, target in [("environ.md", "/proc/self/environ"), ("zero.md", "/dev/zero"),
                         ("out.md", str(outside)), ("in.md", "inner.md")]:
        (cases / name).symlink_to(target)
    refused(tmp_path, "environ.md", "outside the case file's folder")
    refused(tmp_path, "zero.md", "outside the case file's folder")
    refused(tmp_path, "out.md", "outside the case file's folder")
    assert context_of(tmp_path, "in.md") == ("# Inner\n- a point", None)
    # Named by an absolute path, a link is the user's choice: followed to a regular file, still not into /proc.
    assert context_of(tmp_path, str(cases / "out.md")) == ("# Outside\n- a point", None)
    refused(tmp_path, str(cases / "environ.md"), "is under /proc")


def test_fifos_sockets_and_folders_are_refused_without_waiting(tmp_path: Path) -> None:
    cases = tmp_path / "cases"
    cases.mkdir()
    os.mkfifo(cases / "pipe.md")  # nobody writes to it: a read would wait forever
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(cases / "sock.md"))
        refused(tmp_path, "sock.md", "is a socket: a case file reads regular files only")
    refused(tmp_path, "pipe.md", "is a FIFO: a case file reads regular files only")
    refused(tmp_path, ".", "is a folder: a case file reads regular files only")


def test_a_relative_path_stays_in_the_case_files_folder_an_absolute_or_variable_one_is_the_users(
        tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("# Notes\n- a point\n", encoding="utf-8")
    refused(tmp_path, "../notes.md", "a relative path must not climb out of the case file's folder")
    refused(tmp_path, "sub/../../notes.md", "must not climb out")
    assert context_of(tmp_path, str(tmp_path / "notes.md")) == ("# Notes\n- a point", None)
    assert context_of(tmp_path, "${NOTES}/notes.md", {"NOTES": str(tmp_path)}) == ("# Notes\n- a point", None)


def test_the_read_is_bounded_whatever_the_file_says_its_size_is(tmp_path: Path) -> None:
    path = tmp_path / "big.md"
    path.write_bytes(b"x" * 2_000)
    with pytest.raises(Refused, match=r"is 2,000 bytes, more than the 1,000 allowed \(--palette-max-context\)"):
        read_regular(path, 1_000)
    assert read_regular(path, 2_000) == "x" * 2_000


def test_the_kernels_file_systems_are_known_wherever_they_are_mounted() -> None:
    if not Path("/proc/self/mountinfo").exists():
        pytest.skip("no /proc/self/mountinfo here")
    assert os.stat("/proc").st_dev in kernel_devices()
    assert os.stat("/").st_dev not in kernel_devices()


@pytest.mark.parametrize(("pattern", "said"), [
    ("/proc/self/*", "is under /proc"),
    ("docs/*", "is a FIFO"),
    ("links/*", "outside the case file's folder"),
])
def test_a_documents_glob_reads_regular_files_only(tmp_path: Path, pattern: str, said: str) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n- a point\n", encoding="utf-8")
    os.mkfifo(tmp_path / "docs" / "b.md")
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "environ.md").symlink_to("/proc/self/environ")
    error = error_of(tmp_path, f"- documents: {pattern!r}\n  covers: x\n  request: Turn this into a deck\n")
    assert error.line == 1 and said in str(error) and "\n" not in str(error)


def test_a_relative_documents_glob_stays_in_the_case_files_folder(tmp_path: Path) -> None:
    error = error_of(tmp_path, "- documents: '../*.md'\n  covers: x\n  request: Turn this into a deck\n")
    assert error.line == 1 and "climbs out of the case file's folder" in str(error)

