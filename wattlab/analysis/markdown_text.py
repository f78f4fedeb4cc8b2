"""Text from the runs (a label, a sweep name, a host, a CPU model, a factory's path) written into
Markdown so that it shows as written and does nothing else: on one line (a newline cannot start
a heading or end a table row), its Markdown characters escaped (no emphasis, code, table cell,
link, image or raw HTML such as ``<script>``), and no @mention, URL or ``www.`` that GitHub
would turn into a notification or a live link (an invisible word joiner, U+2060, is put in).
``wattlab compare``, the report and the energy statement all write through here."""

from __future__ import annotations

import re

_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# characters that change what Markdown shows when they stand in running text
# (a ">" only quotes at the start of a line: ``block_safe``)
_MARKDOWN_SPECIAL = re.compile(r"([\\`*\[\]<|#~!&]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")
# what opens a list, a heading underline or a thematic break when it starts a line (or a list
# item: "- {label}")
_BLOCK_START = re.compile(r"^(\s*)([-+=>]|\d{1,9}(?=[.)]))")
JOINER = "\u2060"  # WORD JOINER: invisible, and it ends GitHub's mention and autolink patterns
_LINKING = re.compile(r"(@)(?=[A-Za-z0-9])|(?i:(https?|ftp|mailto|xmpp)(:))|(?i:(www)(\.))")


def visible(text: str) -> str:
    """``text`` on one line, every character that does not print (a newline, DEL, a C1
    control, a lone surrogate, a line separator) written as its escape (``\\n``, ``\\x7f``):
    a name read from the hardware or the database never breaks the paragraph or a table."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if ch.isprintable():
            out.append(ch)
        elif ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x100:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    return "".join(out)


def unlinked(text: str) -> str:
    """``text`` with a word joiner after each ``@`` that would mention someone, each URL
    scheme's colon and each ``www``: it reads the same, and links or notifies no one."""

    def joined(match: re.Match[str]) -> str:
        return match.group(0) + JOINER

    return _LINKING.sub(joined, text)


def block_safe(text: str) -> str:
    """``text`` with a backslash before a list marker, a number's ``.`` or ``)``, a ``=`` or a
    ``>`` that would start a block where the text starts a line."""
    match = _BLOCK_START.match(text)
    if match is None:
        return text
    lead, marker = match.groups()
    if marker.isdigit():
        end = match.end()
        return text[:end] + "\\" + text[end:]
    return f"{lead}\\{text[len(lead) :]}"


def md_text(text: object, *, line_start: bool = False) -> str:
    """``text`` as Markdown running text (or a table cell) that shows it as written: on one line
    (``visible``), its Markdown characters escaped with a backslash, linking nothing; at a
    ``line_start`` (a list item's text), nothing there opens a block either."""
    escaped = _MARKDOWN_SPECIAL.sub(r"\\\1", visible(str(text)))
    return unlinked(block_safe(escaped) if line_start else escaped)


def md_code(text: object, *, cell: bool = False) -> str:
    """``text`` as inline code, on one line, whatever backticks it holds (a code span links,
    mentions and renders nothing); in a table ``cell`` a ``|`` is escaped so that it cannot
    end the cell (GitHub drops that backslash there)."""
    shown = visible(str(text))
    if cell:
        shown = shown.replace("|", "\\|")
    longest = max((len(m) for m in re.findall(r"`+", shown)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if longest or shown.startswith(" ") or not shown else ""
    return f"{fence}{pad}{shown}{pad}{fence}"


__all__ = ["JOINER", "block_safe", "md_code", "md_text", "unlinked", "visible"]
