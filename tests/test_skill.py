"""Skill cards: frontmatter, staging a fresh copy, and the hash of what is under test."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_palette.skill import (
    PACKAGED_SKILLS,
    InstallError,
    SkillNotFound,
    install,
    load_skill,
    parse_frontmatter,
    skill_hash,
)


def test_the_reference_skill_loads_with_a_routing_description() -> None:
    card = load_skill("palette")
    assert card.name == "palette"
    assert "deck" in card.description and "presentation" in card.description
    assert "  " not in card.description and "\n" not in card.description
    assert (card.scripts / "deck.py").is_file()


def test_the_body_is_the_verbatim_tail_of_the_file() -> None:
    card = load_skill("palette")
    text = (card.directory / "SKILL.md").read_text(encoding="utf-8")
    assert text.endswith(card.body) and text.startswith("---")
    for command in ("deck.py find", "deck.py plan", "deck.py edit", "deck.py start", "deck.py status", "--context"):
        assert command in card.body


def test_folded_and_plain_frontmatter() -> None:
    meta = parse_frontmatter("name: x\ndescription: >-\n  one\n  two\nother: 'q'")
    assert meta == {"name": "x", "description": "one two", "other": "q"}


def test_an_unknown_skill_names_what_exists(tmp_path: Path) -> None:
    with pytest.raises(SkillNotFound, match="palette"):
        load_skill("nope", PACKAGED_SKILLS)
    with pytest.raises(SkillNotFound, match="no skill folders"):
        load_skill("nope", tmp_path)


def test_staging_copies_fresh_without_caches_and_leaves_the_source_alone(tmp_path: Path) -> None:
    card = load_skill("palette")
    before = skill_hash(card.directory)
    target = tmp_path / "skills" / "palette"
    staged = install(card, tmp_path)
    assert staged.directory == target
    assert (target / "SKILL.md").read_bytes() == (card.directory / "SKILL.md").read_bytes()
    assert install(card, tmp_path).directory == target  # an identical copy is used as it is
    assert not list(target.rglob("__pycache__"))
    assert skill_hash(target) == before == skill_hash(card.directory)


def test_a_folder_in_the_way_is_never_deleted_or_changed(tmp_path: Path) -> None:
    target = tmp_path / "skills" / "palette"
    target.mkdir(parents=True)
    (target / "stale.txt").write_text("left over")
    with pytest.raises(InstallError, match=r"skills/palette already exists and is not the skill under test .*"
                                           r"nothing was changed"):
        install(load_skill("palette"), tmp_path)
    assert [p.name for p in target.iterdir()] == ["stale.txt"] and (target / "stale.txt").read_text() == "left over"


def test_the_hash_changes_with_any_file(tmp_path: Path) -> None:
    staged = install(load_skill("palette"), tmp_path)
    before = skill_hash(staged.directory)
    (staged.directory / "SKILL.md").write_text(staged.body + "\nOne more rule.\n")
    assert skill_hash(staged.directory) != before
