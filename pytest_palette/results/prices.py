"""The user's price table (`--palette-prices FILE`): USD per million input and output tokens, per model.

A cost comes from the provider when it reports one (the claude CLI for a real Anthropic model); otherwise
from this table; otherwise it stays empty and the report says which model had no price. The table prices
only a model it names: the rehearsal model is priced only when the user's table names it.

The file is YAML (JSON is YAML too)::

    anthropic:claude-sonnet-4-5: {input: 3.00, output: 15.00}
    openai:gpt-4o: {input: 2.50, output: 10.00}
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from ..models import ModelSpec

#: Where a recorded cost came from (Usage.cost_source).
FROM_PROVIDER: Final = "provider"
FROM_TABLE: Final = "prices"
PRICE_KEYS = ("input", "output")


class PriceError(ValueError):
    """A price table that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    input: float
    output: float

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return round((input_tokens * self.input + output_tokens * self.output) / 1_000_000, 6)


PriceTable = dict[str, Price]


def load_prices(path: Path) -> PriceTable:
    """The table in `path`; PriceError naming the file and the key (or line) when it is not one."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise PriceError(f"{path}: cannot be read ({getattr(error, 'strerror', None) or error})") from None
    try:
        data: Any = yaml.safe_load(text)
        # YAML keeps the last of two equal keys without a word; a second price of one model is a mistake.
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise PriceError(f"{path}: {where}not YAML or JSON ({problem})") from None
    if not isinstance(data, dict) or not data:
        raise PriceError(f"{path}: expected a mapping of model names to {{input: USD, output: USD}} per million "
                         "tokens")
    first: dict[str, int] = {}
    for key, _ in root.value if isinstance(root, yaml.MappingNode) else []:
        name, line = str(key.value).strip(), key.start_mark.line + 1
        if name in first:
            raise PriceError(f"{path}: line {line}: {name} is priced twice (first at line {first[name]}); keep one "
                             "price per model")
        first[name] = line
    table: PriceTable = {}
    for model, entry in data.items():
        if not isinstance(model, str) or not model.strip():
            raise PriceError(f"{path}: {model!r}: a model name must be a non-empty string")
        if not isinstance(entry, dict):
            raise PriceError(f"{path}: {model}: expected {{input: USD, output: USD}} per million tokens")
        unknown = sorted(str(key) for key in entry if key not in PRICE_KEYS)
        if unknown:
            raise PriceError(f"{path}: {model}.{unknown[0]}: unknown key (expected input and output, USD per "
                             "million tokens)")
        values: dict[str, float] = {}
        for key in PRICE_KEYS:
            value = entry.get(key)
            if value is None:
                raise PriceError(f"{path}: {model}.{key}: missing (USD per million tokens)")
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value < 0:
                raise PriceError(f"{path}: {model}.{key}: {value!r} is not a price (a number of USD ≥ 0)")
            values[key] = float(value)
        table[model.strip()] = Price(**values)
    return table


def names_of(model: ModelSpec) -> list[str]:
    """The names a table may give `model` under, most specific first. The rehearsal model answers only to
    its own name (`rehearsal`, `rehearsal:<name>`), never to a real model's."""
    names = [model.text, f"{model.provider}:{model.model_id}"]
    if model.provider != "rehearsal":
        names.append(model.model_id)
    return list(dict.fromkeys(names))


def price_of(table: PriceTable | None, model: ModelSpec) -> Price | None:
    """The table's price for `model`, or None when the table does not name it."""
    if not table:
        return None
    return next((table[name] for name in names_of(model) if name in table), None)


def money(value: float) -> str:
    """USD as people write it: cents, or more digits when a sum is below a cent's resolution."""
    if value == 0 or round(value, 2) == round(value, 6):
        return f"${value:,.2f}"
    return f"${value:,.4f}" if value >= 0.0001 else f"${value:.2g}"
