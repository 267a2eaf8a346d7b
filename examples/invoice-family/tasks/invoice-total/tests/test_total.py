import invoice
from lines import LINES


def test_the_total_is_in_cents():
    total = invoice.total(LINES)
    assert isinstance(total, int), f"total is a {type(total).__name__}, not an int of cents"
    assert total == 3 * 1250 + 99999 + 10 * 7


def test_an_empty_invoice_totals_zero():
    assert invoice.total([]) == 0
