"""Amounts of money: integer cents, printed one way."""

SIGNS = {"EUR": "€", "USD": "$", "GBP": "£"}


def format_cents(cents: int, currency: str = "EUR") -> str:
    """`format_cents(123450, "EUR")` is "€1,234.50"; a negative amount keeps its sign in front."""
    if not isinstance(cents, int):
        raise TypeError(f"an amount is an int of cents, not {type(cents).__name__}")
    sign = "-" if cents < 0 else ""
    whole, part = divmod(abs(cents), 100)
    return f"{sign}{SIGNS.get(currency, currency + ' ')}{whole:,}.{part:02d}"
