"""The report as a document: a list of blocks (heading, paragraph, bullet list, table, figure)
built once and rendered twice, as Markdown and as HTML, so both always say the same thing; and
the number formatting every report shares."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wattlab.analysis.plots import FigureFile


@dataclass(frozen=True)
class ReportPaths:
    """What a report wrote: the folder, report.md, report.html, summary.json and every figure
    file (PNG and SVG); and ``summary``, the JSON summary as summary.json holds it."""

    out_dir: Path
    markdown: Path
    html: Path
    summary_json: Path
    figures: tuple[Path, ...] = field(default_factory=tuple)
    summary: dict[str, Any] = field(default_factory=dict)


# A code span wattlab writes into a text (a command to type): marked with two Unicode
# noncharacters (U+FDD0, U+FDD1: reserved for a program's internal use, so no label, GPU or
# sweep name carries them, while a control character such as \x03 can come from a run), so that
# each renderer shows it as code (Markdown `...`, HTML <code>) while a backtick in a user's or a
# run's text stays a literal, escaped character.
CODE_START, CODE_END = "\ufdd0", "\ufdd1"
CODE_SPAN = re.compile("\ufdd0([^\ufdd0\ufdd1]*)\ufdd1")


def code(text: str) -> str:
    """``text`` as a code span inside a block's text (see ``CODE_START``)."""
    return f"{CODE_START}{text.replace(CODE_START, '').replace(CODE_END, '')}{CODE_END}"


def spans(text: object) -> list[tuple[str, bool]]:
    """A block text split into (part, is_code); stray markers are dropped."""
    out: list[tuple[str, bool]] = []
    s = str(text)
    at = 0
    for match in CODE_SPAN.finditer(s):
        out.append((s[at : match.start()], False))
        out.append((match.group(1), True))
        at = match.end()
    out.append((s[at:], False))
    return [(part.replace(CODE_START, "").replace(CODE_END, ""), is_code) for part, is_code in out]


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Para:
    text: str
    warning: bool = False
    lead: bool = False  # the report's opening finding, set apart


@dataclass
class Bullets:
    items: list[str]


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]
    note: str | None = None


@dataclass
class Figure:
    figure: FigureFile


Block = Heading | Para | Bullets | Table | Figure


def fmt(value: object, digits: int = 4) -> str:
    """A number with about ``digits`` significant digits and thousands separators; 'n/a' when
    missing."""
    x = as_number(value)
    if x is None:
        return "n/a"
    if x == 0:
        return "0"
    decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(x)))))
    return f"{x:,.{decimals}f}"


def as_number(value: object) -> float | None:
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) or math.isinf(x) else x


def decimals_of(text: str) -> int:
    return len(text.split(".")[1]) if "." in text else 0


def fmt_ci(value: object, low: object, high: object, scale: float = 1.0) -> str:
    """``value [low, high]`` with the bounds printed to the value's decimals."""
    x = as_number(value)
    if x is None:
        return "n/a"
    main = fmt(x / scale)
    lo, hi = as_number(low), as_number(high)
    if lo is None or hi is None:
        return main
    d = decimals_of(main)
    return f"{main} [{lo / scale:,.{d}f}, {hi / scale:,.{d}f}]"


def pct(value: object, signed: bool = True) -> str:
    """A fraction as a percentage (``+1.9 %``); 'n/a' when missing."""
    x = as_number(value)
    if x is None:
        return "n/a"
    return f"{x * 100:+.1f} %" if signed else f"{x * 100:.1f} %"


def criteria_text(crit: Mapping[str, float]) -> str:
    """The operating region's rule in words."""
    return (
        f"at least {pct(crit['min_saving'], False)} energy saved for at most "
        f"{pct(crit['max_penalty'], False)} more time"
    )


def span_text(values: Sequence[float], signed: bool = True) -> str:
    lo, hi = pct(min(values), signed), pct(max(values), signed)
    return lo if lo == hi else f"{lo} to {hi}"
