#!/bin/sh
# The reference solution: run in the agent's folder, it does what the task asks.
set -eu
cat > invoice.py <<'PY'
"""Invoices: totals in integer cents, printed with money.format_cents."""

import os

from money import format_cents


def _currency() -> str:
    if os.environ.get("INVOICE_CURRENCY"):
        return os.environ["INVOICE_CURRENCY"]
    try:
        with open(".env", encoding="utf-8") as env:
            for line in env:
                name, _, value = line.strip().partition("=")
                if name == "INVOICE_CURRENCY" and value:
                    return value.strip("'\"")
    except OSError:
        pass
    return "EUR"


def total(lines):
    return sum(line["quantity"] * line["unit_cents"] for line in lines)


def render(lines):
    currency = _currency()
    rows = [f"{line['item']} x{line['quantity']}: {format_cents(line['quantity'] * line['unit_cents'], currency)}"
            for line in lines]
    return "\n".join([*rows, f"Total: {format_cents(total(lines), currency)}"])
PY
