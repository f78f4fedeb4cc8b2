"""The report: per-configuration tables, the study's answer in sentences, and figures, written
as ``report.md`` and a self-contained ``report.html`` (figures embedded as base64 PNG, inline
CSS, no external resource), next to the PNG/SVG figure files and ``summary.json``.

The document is built once as a list of blocks (heading, paragraph, list, table, figure) and
rendered twice, so Markdown and HTML always say the same thing. Every string that came from a
user or a run (sweep names, labels, errors) is escaped in both renderings.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from wattlab.analysis import plots
from wattlab.analysis.profiles import describe_region
from wattlab.analysis.stats import (
    DEFAULT_MAX_PENALTY,
    DEFAULT_MIN_SAVING,
    DEFAULT_N_BOOT,
    REQUIRED_COLUMNS,
    failed_runs,
    intensity_range,
    jsonable,
    numeric,
    ok_runs,
    operating_region,
    pareto_front,
    parse_baseline,
    power_limit_effects,
    scaling_efficiency,
    summarize,
    summary_to_json,
)
from wattlab.errors import ConfigError, DataError
from wattlab.jsonio import write_text_atomic


@dataclass(frozen=True)
class ReportPaths:
    """What a report wrote: the folder, report.md, report.html, summary.json and every figure
    file (PNG and SVG)."""

    out_dir: Path
    markdown: Path
    html: Path
    summary_json: Path
    figures: tuple[Path, ...] = field(default_factory=tuple)


# --------------------------------------------------------------------------- blocks


@dataclass
class _Heading:
    text: str
    level: int = 2


@dataclass
class _Para:
    text: str
    warning: bool = False


@dataclass
class _List:
    items: list[str]


@dataclass
class _Table:
    headers: list[str]
    rows: list[list[str]]
    note: str | None = None


@dataclass
class _Figure:
    figure: plots.FigureFile


# --------------------------------------------------------------------------- formatting


def fmt(value: object, digits: int = 4) -> str:
    """A number with about ``digits`` significant digits and thousands separators; 'n/a' when
    missing."""
    x = _float(value)
    if x is None:
        return "n/a"
    if x == 0:
        return "0"
    decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(x)))))
    return f"{x:,.{decimals}f}"


def _float(value: object) -> float | None:
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) or math.isinf(x) else x


def _decimals_of(text: str) -> int:
    return len(text.split(".")[1]) if "." in text else 0


def fmt_ci(value: object, low: object, high: object, scale: float = 1.0) -> str:
    """``value [low, high]`` with the bounds printed to the value's decimals."""
    x = _float(value)
    if x is None:
        return "n/a"
    main = fmt(x / scale)
    lo, hi = _float(low), _float(high)
    if lo is None or hi is None:
        return main
    d = _decimals_of(main)
    return f"{main} [{lo / scale:,.{d}f}, {hi / scale:,.{d}f}]"


def pct(value: object, signed: bool = True) -> str:
    """A fraction as a percentage (``+1.9 %``); 'n/a' when missing."""
    x = _float(value)
    if x is None:
        return "n/a"
    return f"{x * 100:+.1f} %" if signed else f"{x * 100:.1f} %"


def _criteria(crit: Mapping[str, float]) -> str:
    """The operating region's rule in words."""
    return (
        f"at least {pct(crit['min_saving'], False)} energy saved for at most "
        f"{pct(crit['max_penalty'], False)} more time"
    )


def _span(values: Sequence[float], signed: bool = True) -> str:
    lo, hi = pct(min(values), signed), pct(max(values), signed)
    return lo if lo == hi else f"{lo} to {hi}"


_MD_SPECIAL = re.compile(r"([\\`*|])")
_MD_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def md_escape(text: object) -> str:
    """Text safe inside Markdown (and its table cells): HTML characters become entities,
    emphasis/code/pipe characters are backslash-escaped, ``](`` cannot open a link, and
    newlines become spaces."""
    s = str(text).replace("\r", " ").replace("\n", " ")
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = _MD_SPECIAL.sub(r"\\\1", s).replace("](", "]\\(")  # no inline link or image
    return _MD_UNDERSCORE.sub(r"\\_", s)


def h(text: object) -> str:
    """HTML-escaped text (quotes included)."""
    return html.escape(str(text), quote=True)


# --------------------------------------------------------------------------- rendering

_CSS = """
body{font-family:-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:2em auto;
max-width:1200px;padding:0 1em;color:#222;line-height:1.45}
h1{font-size:1.6em;border-bottom:2px solid #ddd;padding-bottom:.2em}
h2{font-size:1.25em;margin-top:1.8em;border-bottom:1px solid #eee}
table{border-collapse:collapse;margin:.8em 0;font-size:.86em}
th,td{border:1px solid #ccc;padding:.25em .5em;text-align:right;vertical-align:top}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
tr:nth-child(even) td{background:#fafafa}
.warning{background:#fff4e5;border-left:4px solid #e69500;padding:.5em .8em}
.note{color:#555;font-size:.9em}
figure{margin:1.2em 0}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:.88em;color:#444}
"""


def _render_markdown(title: str, blocks: list[object], out_dir: Path) -> str:
    lines = [f"# {md_escape(title)}", ""]
    for block in blocks:
        if isinstance(block, _Heading):
            lines += [f"{'#' * block.level} {md_escape(block.text)}", ""]
        elif isinstance(block, _Para):
            text = md_escape(block.text)
            lines += [f"> **Warning:** {text}" if block.warning else text, ""]
        elif isinstance(block, _List):
            lines += [f"- {md_escape(item)}" for item in block.items] + [""]
        elif isinstance(block, _Table):
            lines.append("| " + " | ".join(md_escape(x) for x in block.headers) + " |")
            lines.append("|" + "|".join(" --- " for _ in block.headers) + "|")
            lines += ["| " + " | ".join(md_escape(x) for x in row) + " |" for row in block.rows]
            lines.append("")
            if block.note:
                lines += [f"*{md_escape(block.note)}*", ""]
        elif isinstance(block, _Figure):
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


def _render_html(title: str, blocks: list[object], out_dir: Path) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{h(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{h(title)}</h1>",
    ]
    for block in blocks:
        if isinstance(block, _Heading):
            parts.append(f"<h{block.level}>{h(block.text)}</h{block.level}>")
        elif isinstance(block, _Para):
            if block.warning:
                parts.append(f'<p class="warning"><strong>Warning:</strong> {h(block.text)}</p>')
            else:
                parts.append(f"<p>{h(block.text)}</p>")
        elif isinstance(block, _List):
            parts.append("<ul>" + "".join(f"<li>{h(x)}</li>" for x in block.items) + "</ul>")
        elif isinstance(block, _Table):
            head = "".join(f"<th>{h(x)}</th>" for x in block.headers)
            body = "".join(
                "<tr>" + "".join(f"<td>{h(x)}</td>" for x in row) + "</tr>" for row in block.rows
            )
            parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
            if block.note:
                parts.append(f'<p class="note">{h(block.note)}</p>')
        elif isinstance(block, _Figure):
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


def _write(
    out_dir: Path,
    title: str,
    blocks: list[object],
    summary: dict[str, Any],
    figures: Sequence[plots.FigureFile],
) -> ReportPaths:
    md = write_text_atomic(out_dir / "report.md", _render_markdown(title, blocks, out_dir))
    page = write_text_atomic(out_dir / "report.html", _render_html(title, blocks, out_dir))
    text = json.dumps(jsonable(summary), indent=2, allow_nan=False, ensure_ascii=False)
    js = write_text_atomic(out_dir / "summary.json", text + "\n")
    files = tuple(p for f in figures for p in (f.png, f.svg))
    return ReportPaths(out_dir=out_dir, markdown=md, html=page, summary_json=js, figures=files)


def _prepare_out_dir(out_dir: str | Path) -> Path:
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; give a folder for the report.")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the report folder {out}: {exc.strerror}.") from None
    return out


# --------------------------------------------------------------------------- run reports


def select_runs(runs: pd.DataFrame, sweep: str | None) -> pd.DataFrame:
    """The runs of ``sweep`` (all runs when None); DataError when it has none."""
    missing = [c for c in REQUIRED_COLUMNS if c not in runs.columns]
    if missing:
        raise DataError(
            f"the runs table lacks the column(s) {', '.join(missing)}; "
            "it must have the columns of wattlab/experiment/schema.sql."
        )
    if sweep is None:
        if runs.empty:
            raise DataError("the database holds no runs yet; run `wattlab run` or `wattlab sweep`.")
        return runs
    if "sweep" not in runs.columns:
        raise DataError(f"cannot select sweep {sweep!r}: the runs table has no sweep column.")
    chosen = runs[runs["sweep"].astype("object") == sweep]
    if chosen.empty:
        present = sorted({str(s) for s in runs["sweep"].dropna()})
        listed = ", ".join(repr(s) for s in present) if present else "none"
        raise DataError(f"sweep {sweep!r} has no runs in this database; the sweeps are: {listed}.")
    return chosen


def _require_ok(runs: pd.DataFrame, sweep: str | None) -> None:
    if not ok_runs(runs).empty:
        return
    failed = failed_runs(runs)
    where = f" in sweep {sweep!r}" if sweep else ""
    first = ""
    if not failed.empty and "error" in failed.columns:
        errors = [str(e) for e in failed["error"] if isinstance(e, str) and e.strip()]
        if errors:
            first = f" (first error: {errors[0].strip().splitlines()[0]})"
    raise DataError(
        f"there are no successful runs to report{where}: all {len(runs)} run(s) failed{first}."
    )


def _coerce_baseline(baseline: Mapping[str, object] | str | None) -> Mapping[str, object] | None:
    if isinstance(baseline, str):
        return parse_baseline(baseline)
    return baseline


def analyze_runs(
    runs: pd.DataFrame,
    *,
    sweep: str | None = None,
    baseline: Mapping[str, object] | str | None = None,
    min_saving: float = DEFAULT_MIN_SAVING,
    max_penalty: float = DEFAULT_MAX_PENALTY,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The summary table and the JSON summary (see ``summary_to_json``) of ``runs``, without
    writing anything: what ``wattlab report --json`` prints. ``baseline`` may be a dict or the
    ``KEY=VALUE,...`` text of ``--baseline``."""
    runs = select_runs(runs, sweep)
    _require_ok(runs, sweep)
    summary = summarize(runs, _coerce_baseline(baseline), n_boot=n_boot, seed=seed)
    data = summary_to_json(summary, runs, min_saving=min_saving, max_penalty=max_penalty)
    data["sweep"] = sweep
    return summary, data


def _provenance_counts(ok: pd.DataFrame) -> dict[str, int]:
    counts: dict[str, int] = {}
    values = ok["provenance"] if "provenance" in ok.columns else [None] * len(ok)
    for value in values:
        key = value if isinstance(value, str) and value else "unknown"
        counts[key] = counts.get(key, 0) + 1
    return counts


def _header(
    runs: pd.DataFrame, summary: pd.DataFrame, data: dict[str, Any], windows: pd.DataFrame | None
) -> list[object]:
    ok = ok_runs(runs)
    hw = data["hardware"]
    carbon = data["carbon"]
    rng = intensity_range(runs)
    intensity = ", ".join(f"{x:g}" for x in carbon["intensity_kg_per_kwh"]) or "unknown"
    pue = ", ".join(f"{x:g}" for x in carbon["pue"]) or "unknown"
    counts = _provenance_counts(ok)
    prov_text = ", ".join(f"{k} ({v} run{'s' if v != 1 else ''})" for k, v in counts.items())
    items = [
        f"Hardware: GPU {', '.join(hw['gpu_name']) or 'none'}; "
        f"CPU {', '.join(hw['cpu_model']) or 'unknown'}; "
        f"host(s) {', '.join(hw['hostname']) or 'unknown'}"
        + (f"; driver {', '.join(hw['driver'])}" if hw["driver"] else "")
        + ".",
        f"Carbon: intensity {intensity} kgCO2e/kWh"
        + (f" (sensitivity range {rng[0]:.3g}-{rng[1]:.3g})" if rng else "")
        + f", PUE {pue}.",
        f"Energy provenance: {data['provenance']} overall (weakest); per run: {prov_text}.",
        f"Runs: {data['runs']['ok']} ok in {len(summary)} configuration(s), "
        f"{data['runs']['failed']} failed.",
        f"Baseline: {data['baseline']['label']}.",
        f"Operating region: {_criteria(data['criteria'])}.",
    ]
    blocks: list[object] = [_List(items)]
    if counts and set(counts) <= {"estimated", "unknown"}:
        blocks.append(
            _Para(
                "every energy figure in this report is estimated (no hardware energy counter was "
                "read); treat them as models, not measurements.",
                warning=True,
            )
        )
    elif data["provenance"] != "measured":
        blocks.append(
            _Para(
                f"some energy figures are {data['provenance']}, not read from a hardware counter; "
                "the provenance column says which configurations.",
                warning=True,
            )
        )
    if windows is not None and "short_window" in windows.columns and not windows.empty:
        ids = set(numeric(ok["id"]).tolist()) if "id" in ok.columns else set()
        mine = windows[pd.to_numeric(windows["run_id"], errors="coerce").isin(ids)]
        short = int((pd.to_numeric(mine["short_window"], errors="coerce") == 1).sum())
        if short:
            blocks.append(
                _Para(
                    f"{short} measurement window(s) were shorter than a counter's update period; "
                    "their energies are less certain (the budget figures are unaffected unless "
                    "the budget window itself is short)."
                )
            )
    failures = data["runs"]["failures"]
    if failures:
        blocks.append(_Heading("Failed runs", 3))
        blocks.append(
            _List(
                [
                    f"{f.get('label')} (run {f.get('run_id')}, repetition {f.get('repetition')}): "
                    f"{(f.get('error') or 'no error recorded')}"
                    for f in failures
                ]
            )
        )
    return blocks


def _findings(
    summary: pd.DataFrame, data: dict[str, Any], effects: pd.DataFrame, scaling: pd.DataFrame
) -> list[str]:
    items: list[str] = []
    t = numeric(summary["duration_s"])
    e = numeric(summary["energy_total_j"])
    if np.isfinite(t).any() and np.isfinite(e).any():
        fast = summary.iloc[int(np.nanargmin(t))]
        low = summary.iloc[int(np.nanargmin(e))]
        items.append(
            f"Fastest: {fast['label']} ({fmt(fast['duration_s'])} s, "
            f"{pct(fast['time_change'])} time against the baseline). Least energy: {low['label']} "
            f"({fmt(low['energy_total_j'])} J, {pct(low['energy_change'])} energy)."
        )
    items.append(
        "Pareto front (no other configuration is both faster and uses less energy): "
        + "; ".join(data["pareto"])
        + "."
    )
    crit = data["criteria"]
    region = [c for c in data["configurations"] if c["operating_region"]]
    if region:
        listed = "; ".join(
            f"{c['label']} (energy {pct(c['energy_change'])}, time {pct(c['time_change'])})"
            for c in region
        )
        items.append(
            f"Operating region against the baseline ({len(region)} configuration(s) with "
            f"{_criteria(crit)}): {listed}."
        )
    else:
        items.append(
            f"Operating region against the baseline: no configuration has {_criteria(crit)}."
        )
    if not effects.empty:
        capped = effects[effects["time_change"].notna() & (effects["energy_change"].notna())]
        capped = capped[capped["reference_label"] != capped["label"]]
        for limit, group in capped.groupby("power_limit_w", sort=True):
            n_in = int(group["in_operating_region"].sum())
            items.append(
                f"Power limit {limit:g} W per GPU against the highest limit of the same "
                f"configuration ({len(group)} group(s)): energy "
                f"{_span(list(group['energy_change']))}, time {_span(list(group['time_change']))}; "
                f"in the operating region in {n_in} of {len(group)}."
            )
    if not scaling.empty:
        for _, row in scaling[scaling["gpus"] != scaling["reference_gpus"]].iterrows():
            items.append(
                f"Scaling {row['reference_label']} → {row['gpus']} GPUs ({row['label']}): "
                f"speed-up {row['speedup']:.2f}x, scaling efficiency "
                f"{row['scaling_efficiency']:.0%}, energy x{row['energy_ratio']:.3f}."
            )
    cc = data["codecarbon"]
    if cc.get("measured"):
        items.append(
            f"CodeCarbon vs direct measurement over {cc['n']} run(s): median error "
            f"{pct(cc['median'])}, median |error| {pct(cc['median_abs'], False)} (IQR "
            f"{pct(cc['q1'])} to {pct(cc['q3'])})."
        )
    else:
        items.append("CodeCarbon: not measured (no run was made with CodeCarbon alongside).")
    return items


def _config_table(summary: pd.DataFrame, runs: pd.DataFrame, data: dict[str, Any]) -> _Table:
    e_div, e_unit = plots.energy_unit(float(np.nanmax(numeric(summary["energy_total_j"]))))
    top = np.nanmax(numeric(summary["co2e_kg"])) if summary["co2e_kg"].notna().any() else math.nan
    c_div, c_unit = plots.co2e_unit(float(top))
    records = {c["config_hash"]: c for c in data["configurations"]}
    parts = plots.component_medians(summary)
    rows = []
    for hsh, row in summary.iterrows():
        rec = records[hsh]
        provs = plots.component_provenance(runs, str(hsh))

        def comp(kind: str, value: float, provs: dict[str, str] = provs) -> str:
            if value == 0 and kind not in provs:
                return "n/a" if kind != "other" else "0"
            mark = {"sampled": " (sampled)", "estimated": " (est.)", "unknown": " (?)"}
            return fmt(value / e_div) + mark.get(provs.get(kind, "measured"), "")

        co2 = _float(row["co2e_kg"])
        lo, hi = _float(row.get("co2e_low_kg")), _float(row.get("co2e_high_kg"))
        co2_text = "n/a" if co2 is None else fmt(co2 / c_div)
        if co2 is not None and lo is not None and hi is not None:
            d = _decimals_of(co2_text)
            co2_text += f" [{lo / c_div:,.{d}f}-{hi / c_div:,.{d}f}]"
        acc = _float(row.get("accuracy"))
        label = str(row["label"]) + (" (baseline)" if rec["is_baseline"] else "")
        rows.append(
            [
                label,
                str(int(row["n"]))
                + (f" (+{int(row['n_failed'])} failed)" if row["n_failed"] else ""),
                fmt_ci(row["duration_s"], row["duration_s_ci_low"], row["duration_s_ci_high"]),
                fmt_ci(
                    row["energy_total_j"],
                    row["energy_total_j_ci_low"],
                    row["energy_total_j_ci_high"],
                    e_div,
                ),
                comp("gpu", parts.loc[hsh, "gpu"]),
                comp("cpu", parts.loc[hsh, "cpu"]),
                comp("dram", parts.loc[hsh, "dram"]),
                comp("other", parts.loc[hsh, "other"]),
                fmt(row["energy_per_sample_j"]),
                co2_text,
                "n/a" if acc is None else f"{acc:.2%}",
                str(row["provenance"]),
                "baseline" if rec["is_baseline"] else pct(row["time_change"]),
                "baseline" if rec["is_baseline"] else pct(row["energy_change"]),
                "★" if rec["pareto"] else "",
                "✓" if rec["operating_region"] else "",
            ]
        )
    headers = [
        "Configuration",
        "Runs",
        "Time (s) [95 % CI]",
        f"Energy ({e_unit}) [95 % CI]",
        f"GPU ({e_unit})",
        f"CPU ({e_unit})",
        f"DRAM/RAM ({e_unit})",
        f"Other ({e_unit})",
        "J/sample",
        f"CO2e ({c_unit}) [low-high]",
        "Accuracy",
        "Provenance",
        "Δ time",
        "Δ energy",
        "Pareto",
        "Region",
    ]
    note = (
        "Medians over the ok runs of each configuration; 95 % percentile-bootstrap CIs of the "
        "median (none with a single run). Δ = median / baseline median - 1 (negative = less). "
        "★ = on the time-energy Pareto front; ✓ = in the operating region. A component marked "
        "(est.) or (sampled) was not read from an energy counter in at least one run."
    )
    return _Table(headers, rows, note)


def _effects_table(effects: pd.DataFrame) -> _Table:
    rows = [
        [
            str(r["reference_label"]),
            ("default" if r["is_default_limit"] else "")
            + (f" {r['power_limit_w']:g} W" if _float(r["power_limit_w"]) is not None else ""),
            str(r["label"]),
            fmt(r["time_s"]),
            fmt(r["energy_j"]),
            pct(r["time_change"]),
            pct(r["energy_change"]),
            "✓" if r["in_operating_region"] else "",
        ]
        for _, r in effects.iterrows()
    ]
    headers = [
        "Reference (highest limit)",
        "Power limit",
        "Configuration",
        "Time (s)",
        "Energy (J)",
        "Δ time",
        "Δ energy",
        "Region",
    ]
    return _Table(
        headers,
        [[c.strip() for c in row] for row in rows],
        "Each configuration against the same configuration at its highest power limit.",
    )


def _scaling_table(scaling: pd.DataFrame) -> _Table:
    rows = [
        [
            str(r["label"]),
            str(r["gpus"]),
            fmt(r["time_s"]),
            fmt(r["energy_j"]),
            f"{r['speedup']:.2f}x",
            f"{r['scaling_efficiency']:.0%}",
            f"{r['energy_ratio']:.3f}",
        ]
        for _, r in scaling.iterrows()
    ]
    headers = [
        "Configuration",
        "GPUs",
        "Time (s)",
        "Energy (J)",
        "Speed-up",
        "Scaling efficiency",
        "Energy ratio",
    ]
    return _Table(
        headers,
        rows,
        "Speed-up = time(fewest GPUs) / time(N); scaling efficiency = speed-up / (N / fewest); "
        "energy ratio = energy(N) / energy(fewest). On the CPU the count is processes.",
    )


def _codecarbon_blocks(cc: dict[str, Any]) -> list[object]:
    if not cc.get("measured"):
        return [_Para("CodeCarbon: not measured (no run was made with CodeCarbon alongside).")]
    rows = [
        [
            "total",
            str(cc["n"]),
            pct(cc["median"]),
            pct(cc["median_abs"], False),
            f"{pct(cc['q1'])} to {pct(cc['q3'])}",
            pct(cc["min"]),
            pct(cc["max"]),
        ]
    ]
    for name, s in cc["components"].items():
        rows.append(
            [
                name,
                str(s["n"]),
                pct(s["median"]),
                pct(s["median_abs"], False),
                f"{pct(s['q1'])} to {pct(s['q3'])}",
                pct(s["min"]),
                pct(s["max"]),
            ]
        )
    blocks: list[object] = [
        _Table(
            ["Part", "Runs", "Median error", "Median |error|", "IQR", "Min", "Max"],
            rows,
            "Error = (CodeCarbon - direct) / direct per run. Components compare CodeCarbon's "
            "gpu/cpu/ram energy with ours (gpu, cpu, DRAM or RAM estimate).",
        )
    ]
    by_label: dict[str, list[float]] = {}
    for r in cc["runs"]:
        by_label.setdefault(r["label"], []).append(r["rel_error"])
    blocks.append(
        _Table(
            ["Configuration", "Runs", "Median error"],
            [[k, str(len(v)), pct(float(np.median(v)))] for k, v in by_label.items()],
        )
    )
    if cc["mismatches"]:
        blocks.append(
            _Para(
                f"the stored codecarbon_rel_error disagrees with the recomputed error for run(s) "
                f"{', '.join(str(m) for m in cc['mismatches'])}; the recomputed value is used.",
                warning=True,
            )
        )
    return blocks


def _scheduler_blocks(
    runs: pd.DataFrame,
    jobs: pd.DataFrame | None,
    windows: pd.DataFrame | None,
    data: dict[str, Any],
) -> list[object]:
    """SLURM's ConsumedEnergy beside ours (a column and one line), only for SLURM runs."""
    from wattlab.analysis.scheduler_energy import scheduler_energy, scheduler_energy_line

    if jobs is None or jobs.empty:
        return []
    info = scheduler_energy(runs, jobs, windows)
    data["scheduler_energy"] = info
    blocks: list[object] = [
        _Heading("SLURM accounting vs wattlab"),
        _Para(scheduler_energy_line(info)),
    ]
    if info["runs"]:
        rows = [
            [
                str(r["label"]),
                str(r["job_id"]),
                f"{r['wattlab_j'] / 1e3:.3g} kJ ({r['wattlab_window']})",
                f"{r['slurm_j'] / 1e3:.3g} kJ",
                pct(r["rel_diff"]),
            ]
            for r in info["runs"]
        ]
        blocks.append(
            _Table(
                [
                    "Configuration",
                    "SLURM job",
                    "wattlab",
                    "SLURM ConsumedEnergy",
                    "SLURM vs wattlab",
                ],
                rows,
                "SLURM vs wattlab = (SLURM - wattlab) / wattlab per run.",
            )
        )
    return blocks


def write_report(
    runs: pd.DataFrame,
    windows: pd.DataFrame | None,
    trace: pd.DataFrame | None,
    out_dir: str | Path,
    *,
    sweep: str | None = None,
    baseline: Mapping[str, object] | str | None = None,
    min_saving: float = DEFAULT_MIN_SAVING,
    max_penalty: float = DEFAULT_MAX_PENALTY,
    title: str | None = None,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    scheduler_jobs: pd.DataFrame | None = None,
) -> ReportPaths:
    """Write report.md, report.html, summary.json and the figures (PNG + SVG) to ``out_dir``.

    ``runs``/``windows``/``trace`` are DataFrames with the columns of the schema's tables;
    ``sweep`` keeps one sweep's runs; ``baseline`` is ``{column: value}`` or ``KEY=VALUE,...``
    (default: fewest GPUs, fp32, highest power limit); ``min_saving``/``max_penalty`` are the
    operating region's fractions; ``scheduler_jobs`` (the store's table) adds SLURM's
    ConsumedEnergy beside ours when it was reported. Raises DataError when there is no ok run,
    ConfigError for a baseline that matches no single configuration or an unusable ``out_dir``.
    """
    summary, data = analyze_runs(
        runs,
        sweep=sweep,
        baseline=baseline,
        min_saving=min_saving,
        max_penalty=max_penalty,
        n_boot=n_boot,
        seed=seed,
    )
    runs = select_runs(runs, sweep)
    if trace is not None and "id" in runs.columns and not trace.empty:
        ids = set(pd.to_numeric(runs["id"], errors="coerce").dropna().astype(int))
        trace = trace[pd.to_numeric(trace["run_id"], errors="coerce").isin(ids)]
    out = _prepare_out_dir(out_dir)
    pareto = pareto_front(summary, "duration_s", "energy_total_j")
    region = operating_region(summary, min_saving, max_penalty)
    effects = power_limit_effects(summary, min_saving, max_penalty)
    scaling = scaling_efficiency(summary)
    figures = plots.plot_run_figures(runs, trace, summary, out, pareto=pareto, region=region)
    title = title or (f"wattlab report: sweep {sweep}" if sweep else "wattlab report")
    blocks: list[object] = _header(runs, summary, data, windows)
    blocks += [_Heading("Findings"), _List(_findings(summary, data, effects, scaling))]
    blocks += [_Heading("Configurations"), _config_table(summary, runs, data)]
    if not effects.empty:
        blocks += [_Heading("Power-limit effect"), _effects_table(effects)]
    blocks.append(_Heading("GPU scaling"))
    if scaling.empty:
        blocks.append(_Para("No configurations differ only in their GPU count."))
    else:
        blocks.append(_scaling_table(scaling))
    blocks += [
        _Heading("CodeCarbon vs direct measurement"),
        *_codecarbon_blocks(data["codecarbon"]),
    ]
    blocks += _scheduler_blocks(runs, scheduler_jobs, windows, data)
    blocks.append(_Heading("Figures"))
    blocks += [_Figure(f) for f in figures]
    if not any(f.name == "power_traces" for f in figures):
        blocks.append(_Para("Power traces: none recorded for these runs."))
    data["title"] = title
    data["generated_at"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    data["figures"] = [f.png.name for f in figures]
    return _write(out, title, blocks, data, figures)


# --------------------------------------------------------------------------- profile reports


def write_profile_report(
    profile_df: pd.DataFrame,
    analysis: dict[str, Any],
    out_dir: str | Path,
    *,
    title: str | None = None,
) -> ReportPaths:
    """Report an imported power-limit profile (``load_zeus_profile`` + ``analyze_profile``):
    report.md, report.html, summary.json (the analysis) and the energy/time-vs-limit figure."""
    out = _prepare_out_dir(out_dir)
    figure = plots.plot_profile(profile_df, analysis, out)
    source = Path(str(analysis.get("source") or "profile")).name
    title = title or f"wattlab power-limit profile: {source}"
    crit = analysis["criteria"]
    items = [
        f"Source: {source} ({analysis.get('gpus') or '?'} GPU(s), "
        f"{analysis.get('gpu_name') or 'unknown GPU'}"
        + (f", model {analysis['model']}" if analysis.get("model") else "")
        + ").",
        f"Energy provenance: {analysis.get('provenance') or 'unknown'} (GPU energy only; no CPU "
        "or DRAM energy, no CO2e: intensity and PUE are not applied).",
        f"Baseline: {analysis['baseline_w']:g} W. Operating region: {_criteria(crit)}.",
    ]
    findings = [describe_region(analysis)]
    findings.append(
        "Pareto front (W): " + ", ".join(f"{w:g}" for w in analysis["pareto"]) + "; least energy "
        f"at {analysis['min_energy_w']:g} W, least time at {analysis['min_time_w']:g} W."
    )
    rows = [
        [
            f"{x['power_limit_w']:g}" + (" (baseline)" if x["is_baseline"] else ""),
            fmt(x["time_s"]),
            fmt(x["energy_j"]),
            pct(x["time_change"]),
            pct(x["energy_change"]),
            "★" if x["pareto"] else "",
            "✓" if x["operating_region"] else "",
        ]
        for x in analysis["limits"]
    ]
    blocks: list[object] = [
        _List(items),
        _Heading("Findings"),
        _List(findings),
        _Heading("Power limits"),
        _Table(
            [
                "Power limit (W)",
                "Time (s)",
                "Energy (J)",
                "Δ time",
                "Δ energy",
                "Pareto",
                "Region",
            ],
            rows,
            "Medians over the windows at each limit; Δ against the baseline limit.",
        ),
        _Heading("Figure"),
        _Figure(figure),
    ]
    return _write(out, title, blocks, dict(analysis, title=title), [figure])
