"""Writing a report's files: report.md, report.html and summary.json, atomically, into a
folder that is created only once the input has been checked."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from wattlab.analysis.plots import FigureFile
from wattlab.analysis.report_document import Block, ReportPaths
from wattlab.analysis.report_html import render_html
from wattlab.analysis.report_markdown import render_markdown
from wattlab.errors import ConfigError
from wattlab.jsonio import jsonable, refuse_links_in, write_text_atomic

# every name a report writes (figures vary with the data): none may be a link
REPORT_FILES = ("report.md", "report.html", "summary.json", "*.png", "*.svg")


def write_document(
    out_dir: Path,
    title: str,
    blocks: Sequence[Block],
    summary: dict[str, Any],
    figures: Sequence[FigureFile],
) -> ReportPaths:
    md = write_text_atomic(out_dir / "report.md", render_markdown(title, blocks, out_dir))
    page = write_text_atomic(out_dir / "report.html", render_html(title, blocks, out_dir))
    clean = jsonable(summary)
    text = json.dumps(clean, indent=2, allow_nan=False, ensure_ascii=False)
    js = write_text_atomic(out_dir / "summary.json", text + "\n")
    files = tuple(p for f in figures for p in (f.png, f.svg))
    return ReportPaths(
        out_dir=out_dir, markdown=md, html=page, summary_json=js, figures=files, summary=clean
    )


def prepare_out_dir(out_dir: str | Path) -> Path:
    out = Path(out_dir)
    refuse_links_in(out, REPORT_FILES, "report")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; give a folder for the report.")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the report folder {out}: {exc.strerror}.") from None
    return out
