"""At 600 px the report's tables scroll inside their own box instead of being cut off by the
page (issue 39): every table is wrapped, and the wrapper scrolls sideways."""

from __future__ import annotations

import re
from pathlib import Path

from wattlab.analysis.report_document import Para, Table
from wattlab.analysis.report_html import TABLE_WRAP, render_html


def test_every_table_is_wrapped_in_a_sideways_scrolling_box(tmp_path: Path) -> None:
    wide = Table([f"column {i}" for i in range(14)], [[f"{i * 1234.5:,}" for i in range(14)]])
    page = render_html("t", [Para("x"), wide, Table(["a"], [["1"]], "note")], tmp_path)
    assert page.count("<table>") == 2 == page.count(TABLE_WRAP + "<table>")
    assert page.count("</table></div>") == 2
    css = re.search(r"<style>(.*)</style>", page, re.S)
    assert css is not None and ".table-wrap{overflow-x:auto" in css.group(1)
    assert "@media (max-width:700px)" in css.group(1)
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in page
