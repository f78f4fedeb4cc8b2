"""Markdown rendering of a report document. Every string that came from a user or a run is
escaped: it cannot open a link, emphasis, code or break a table."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from wattlab.analysis.markdown_text import block_safe, unlinked
from wattlab.analysis.report_document import Block, Bullets, Figure, Heading, Para, Table, spans

_MD_SPECIAL = re.compile(r"([\\`*|~#])")
_MD_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def md_escape(text: object) -> str:
    """Text safe inside Markdown (and its table cells): HTML characters become entities,
    emphasis/code/pipe characters are backslash-escaped, ``](`` cannot open a link, and
    newlines become spaces; an @mention or a URL is broken by an invisible word joiner
    (``markdown_text.unlinked``)."""
    s = str(text).replace("\r", " ").replace("\n", " ")
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = _MD_SPECIAL.sub(r"\\\1", s).replace("](", "]\\(")  # no inline link or image
    return unlinked(_MD_UNDERSCORE.sub(r"\\_", s))


def md_text(text: object) -> str:
    """``md_escape`` of a block's text, its code spans (``report_document.code``) as code."""
    out = []
    for part, is_code in spans(text):
        if not is_code:
            out.append(md_escape(part))
            continue
        inner = part.replace("\r", " ").replace("\n", " ").replace("|", "\\|")
        fence = "``" if "`" in inner else "`"
        out.append(f"{fence} {inner} {fence}" if fence == "``" else f"`{inner}`")
    return "".join(out)


def render_markdown(title: str, blocks: Sequence[Block], out_dir: Path) -> str:
    """The document as Markdown; figures link their PNG and SVG files relative to ``out_dir``."""
    lines = [f"# {md_escape(title)}", ""]
    for block in blocks:
        if isinstance(block, Heading):
            lines += [f"{'#' * block.level} {md_escape(block.text)}", ""]
        elif isinstance(block, Para):
            text = block_safe(md_text(block.text))  # it starts a line
            if block.warning:
                text = f"> **Warning:** {text}"
            elif block.lead:
                text = f"**{text}**"
            lines += [text, ""]
        elif isinstance(block, Bullets):
            lines += [f"- {block_safe(md_text(item))}" for item in block.items] + [""]
        elif isinstance(block, Table):
            lines.append("| " + " | ".join(md_escape(x) for x in block.headers) + " |")
            lines.append("|" + "|".join(" --- " for _ in block.headers) + "|")
            lines += ["| " + " | ".join(md_text(x) for x in row) + " |" for row in block.rows]
            lines.append("")
            if block.note:
                lines += [f"*{md_text(block.note)}*", ""]
        elif isinstance(block, Figure):
            fig = block.figure
            png = fig.png.relative_to(out_dir).as_posix()
            svg = fig.svg.relative_to(out_dir).as_posix()
            lines += [
                f"![{md_escape(fig.title)}]({png})",
                "",
                f"*{md_escape(fig.caption)}* ([SVG]({svg}))",
                "",
            ]
    return "\n".join(lines).rstrip() + "\n"
