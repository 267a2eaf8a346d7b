"""Support: the invoice lines the checks use (staged beside them, never graded)."""

LINES = [
    {"item": "Widget", "quantity": 3, "unit_cents": 1250},
    {"item": "Gadget", "quantity": 1, "unit_cents": 99999},
    {"item": "Bolt", "quantity": 10, "unit_cents": 7},
]
