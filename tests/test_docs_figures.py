"""Raw outputs or no figure: every link into docs/measured/ from README.md and the docs that
hold measured results (DOCUMENTS) names a file that exists, and every paragraph, list item or
table there that states a measured figure names its raw output.

The convention: a block (paragraph, list item, table or quote) that states a figure carries a
link to its raw file under docs/measured/ (``[raw](docs/measured/FILE)`` from the README,
``[raw](measured/FILE)`` from a file under docs/), in itself or in the block just before or
after it (a table's caption paragraph, or the sentence under it). A block of settings, targets
or thresholds, not measurements, says so with ``<!-- not measured -->``. A figure whose raw
output was lost is removed, not kept unbacked.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = (
    "README.md",
    "docs/results-h200.md",
    "docs/estimation.md",
    "docs/advise.md",
    "docs/engine.md",
    "docs/compare.md",
)
LINK = re.compile(r"\]\(([^)\s]*measured/[^)\s#]*)\)")
# a stated figure: a decimal with a unit or a ratio, or "N of M"
FIGURE = re.compile(r"\d+\.\d+\s?(?:%|x\b|s\b|kJ|J\b|W\b|mJ|img/s)|\b\d+ of \d+\b|\d[\d ]* img/s")
NOT_MEASURED = "<!-- not measured -->"


def blocks(text: str) -> list[str]:
    """Paragraphs, list items, tables and quotes outside code fences, in order."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    out: list[str] = []
    for chunk in re.split(r"\n\s*\n", text):
        item: list[str] = []
        for line in chunk.splitlines():
            if re.match(r"^\s*[-*] ", line) and item:  # a new list item starts a new block
                out.append("\n".join(item))
                item = []
            item.append(line)
        if item:
            out.append("\n".join(item))
    return [b for b in out if b.strip()]


def test_blocks_split_paragraphs_items_and_tables() -> None:
    text = "intro 1.5 %\n\n| a | b |\n| 1 | 2 |\n\n- one 2.0 s\n- two\n\n```\n3.5 %\n```\n"
    assert blocks(text) == ["intro 1.5 %", "| a | b |\n| 1 | 2 |", "- one 2.0 s", "- two"]
    assert FIGURE.search("median 7.1 s") and FIGURE.search("2 of 13") and FIGURE.search("9.76x")
    assert not FIGURE.search("batch 512 at 700 W")


@pytest.mark.parametrize("name", DOCUMENTS)
def test_every_link_into_measured_names_a_file_that_exists(name: str) -> None:
    path = ROOT / name
    links = LINK.findall(path.read_text())
    assert links, f"{name} links no raw output at all"
    missing = [link for link in links if not (path.parent / link).exists()]
    assert not missing, f"{name} links raw outputs that do not exist: {missing}"


@pytest.mark.parametrize("name", DOCUMENTS)
def test_every_stated_figure_names_its_raw_output(name: str) -> None:
    parts = blocks((ROOT / name).read_text())
    unbacked = []
    for i, block in enumerate(parts):
        if block.lstrip().startswith("#") or not FIGURE.search(block):
            continue
        near = parts[max(0, i - 1) : i + 2]
        if NOT_MEASURED in block or any(LINK.search(b) for b in near):
            continue
        unbacked.append(block.strip().splitlines()[0][:100])
    assert not unbacked, f"{name}: figures without a raw output link: {unbacked}"
