"""Colour schemes selectable with ``--palette-family`` (IBM Carbon colours)."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import EngineError

DEFAULT_FAMILY = "ibm_watsonx"


@dataclass(frozen=True)
class Family:
    name: str
    background: str
    title: str
    body: str
    accent: str  # the side bar, title rule and bullet marks
    header_fill: str  # table header row
    header_text: str
    row_fill: str  # every other table row
    muted: str  # footer
    grid: str  # table cell borders in previews


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("ibm_watsonx", "FFFFFF", "161616", "262626", "0F62FE", "0F62FE", "FFFFFF", "EDF5FF", "6F6F6F",
               "A6C8FF"),
        Family("ibm_carbon_light", "F4F4F4", "161616", "393939", "8A3FFC", "6929C4", "FFFFFF", "E8DAFF", "6F6F6F",
               "C6C6C6"),
        Family("ibm_carbon_dark", "161616", "F4F4F4", "C6C6C6", "78A9FF", "393939", "F4F4F4", "262626", "8D8D8D",
               "525252"),
        Family("ibm_teal", "FFFFFF", "022B30", "2D3F41", "009D9A", "007D79", "FFFFFF", "D9FBFB", "6F6F6F",
               "9EF0F0"),
        Family("ibm_magenta", "FFFFFF", "2A0A18", "3F2A33", "D02670", "9F1853", "FFFFFF", "FFF0F7", "6F6F6F",
               "FFAFD2"),
    )
}


def get_family(name: str | None) -> Family:
    key = (name or DEFAULT_FAMILY).strip().lower()
    if key not in FAMILIES:
        raise EngineError(f"unknown palette family {name!r}; the reference engine knows: {', '.join(FAMILIES)}")
    return FAMILIES[key]


def rgb(hex_colour: str) -> tuple[int, int, int]:
    return int(hex_colour[0:2], 16), int(hex_colour[2:4], 16), int(hex_colour[4:6], 16)
