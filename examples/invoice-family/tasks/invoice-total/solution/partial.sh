#!/bin/sh
# Part of the task (for the family's own tests, run by rehearsal:partial): total is right; render prints the
# amounts as bare cents, without the codebase's formatter.
set -eu
cat > invoice.py <<'PY'
"""Invoices: totals in integer cents."""


def total(lines):
    return sum(line["quantity"] * line["unit_cents"] for line in lines)


def render(lines):
    rows = [f"{line['item']} x{line['quantity']}: {line['quantity'] * line['unit_cents']} cents" for line in lines]
    return "\n".join([*rows, f"Total: {total(lines)} cents"])
PY
