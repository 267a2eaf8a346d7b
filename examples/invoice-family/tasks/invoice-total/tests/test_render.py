import invoice
from lines import LINES


def test_render_formats_each_line_and_the_total():
    assert invoice.render(LINES).splitlines() == [
        "Widget x3: €37.50",
        "Gadget x1: €999.99",
        "Bolt x10: €0.70",
        "Total: €1,038.19",
    ]
