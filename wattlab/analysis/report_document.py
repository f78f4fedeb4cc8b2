"""The report as a document: a list of blocks (heading, paragraph, bullet list, table, figure)
built once and rendered twice, as Markdown and as HTML, so both always say the same thing; and
the number formatting every report shares."""

from __future__ import annotations

import math
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
