"""HTML rendering of a report document: one self-contained page (inline CSS, figures embedded
as base64 PNG, no external resource). Every string that came from a user or a run is escaped."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path

from wattlab.analysis.report_document import Block, Bullets, Figure, Heading, Para, Table, spans


def h(text: object) -> str:
    """HTML-escaped text (quotes included); a number keeps its "%" on its line."""
    return html.escape(str(text), quote=True).replace(" %", "\u00a0%")


def ht(text: object) -> str:
    """``h`` of a block's text, its code spans (``report_document.code``) as <code>."""
    return "".join(
        f"<code>{h(part)}</code>" if is_code else h(part) for part, is_code in spans(text)
    )


_CSS = """
body{font-family:-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:2em auto;
max-width:1200px;padding:0 1em;color:#222;line-height:1.45}
h1{font-size:1.6em;border-bottom:2px solid #ddd;padding-bottom:.2em}
h2{font-size:1.25em;margin-top:1.8em;border-bottom:1px solid #eee}
table{border-collapse:collapse;margin:.8em 0;font-size:.8em}
th,td{border:1px solid #ccc;padding:.25em .5em;text-align:right;vertical-align:top}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
tr:nth-child(even) td{background:#fafafa}
.warning{background:#fff4e5;border-left:4px solid #e69500;padding:.5em .8em}
.note{color:#555;font-size:.9em}
.finding{font-size:1.15em;font-weight:600;background:#eef5ee;border-left:4px solid #3a8a3a;
padding:.5em .8em}
figure{margin:1.2em 0}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:.88em;color:#444}
.table-wrap{overflow-x:auto;max-width:100%;-webkit-overflow-scrolling:touch}
.table-wrap table{margin:0}
@media (max-width:700px){body{margin:1em auto;padding:0 .5em}table{font-size:.72em}
th,td{padding:.2em .3em}}
"""
TABLE_WRAP = '<div class="table-wrap">'  # a table wider than the page scrolls, never cut off


def render_html(title: str, blocks: Sequence[Block], out_dir: Path) -> str:
    """The document as one HTML page; SVG links are relative to ``out_dir``."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{h(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{h(title)}</h1>",
    ]
    for block in blocks:
        if isinstance(block, Heading):
            parts.append(f"<h{block.level}>{h(block.text)}</h{block.level}>")
        elif isinstance(block, Para):
            if block.warning:
                parts.append(f'<p class="warning"><strong>Warning:</strong> {ht(block.text)}</p>')
            elif block.lead:
                parts.append(f'<p class="finding">{ht(block.text)}</p>')
            else:
                parts.append(f"<p>{ht(block.text)}</p>")
        elif isinstance(block, Bullets):
            parts.append("<ul>" + "".join(f"<li>{ht(x)}</li>" for x in block.items) + "</ul>")
        elif isinstance(block, Table):
            head = "".join(f"<th>{h(x)}</th>" for x in block.headers)
            body = "".join(
                "<tr>" + "".join(f"<td>{ht(x)}</td>" for x in row) + "</tr>" for row in block.rows
            )
            parts.append(
                f"{TABLE_WRAP}<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
                "</div>"
            )
            if block.note:
                parts.append(f'<p class="note">{ht(block.note)}</p>')
        elif isinstance(block, Figure):
            fig = block.figure
            data = base64.b64encode(fig.png.read_bytes()).decode("ascii")
            svg = fig.svg.relative_to(out_dir).as_posix()
            parts.append(
                f'<figure><img src="data:image/png;base64,{data}" alt="{h(fig.title)}">'
                f"<figcaption>{h(fig.caption)} "
                f'(<a href="{h(svg)}">SVG</a>)</figcaption></figure>'
            )
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
