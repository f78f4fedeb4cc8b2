"""Figures for reports, each saved as PNG and SVG.

Figures are drawn on ``matplotlib.figure.Figure`` objects with the Agg canvas attached
explicitly, so nothing here touches pyplot's global state or the user's chosen backend, and
importing this module imports no matplotlib at all (it is imported inside each function).
Every figure's title carries a context line: the hardware, the carbon intensity and PUE, and the
provenance of the energy it shows.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from wattlab.analysis.codecarbon_error import codecarbon_errors
from wattlab.analysis.energy_shares import energy_parts
from wattlab.analysis.runs_table import (
    as_float,
    intensity_range,
    numeric,
    ok_runs,
    parse_json_cell,
    weakest_provenance,
)
from wattlab.analysis.summary import interval_kind
from wattlab.jsonio import write_atomic
from wattlab.wording import PROVENANCES, component_kind, interval_legend, provenance_of

PNG_DPI = 110
_COLORS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
COMPONENT_COLORS = {"gpu": "#2f6db5", "cpu": "#e08a2c", "dram": "#4f9d5d", "other": "#9a9a9a"}
COMPONENT_NAMES = {"gpu": "GPU", "cpu": "CPU", "dram": "DRAM/RAM", "other": "other"}
MAX_TRACE_PANELS = 12
MAX_FIGURE_CONFIGS = 40  # configurations drawn by name in one figure; the tables hold them all
MAX_TRACE_POINTS = 2000


@dataclass(frozen=True)
class FigureFile:
    """One saved figure: ``png`` and ``svg`` paths, its ``title`` and a ``caption`` (plain text)
    that states hardware, intensity, PUE and provenance."""

    name: str
    png: Path
    svg: Path
    title: str
    caption: str


# --------------------------------------------------------------------------- helpers


def _t(text: object) -> str:
    """Text safe for matplotlib: a '$' would otherwise start mathtext."""
    return str(text).replace("$", r"\$")


def _new_figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def wrap_to_figure(text: str, width_in: float, fontsize: float) -> str:
    """``text`` wrapped so that no line is wider than a figure ``width_in`` inches wide at
    ``fontsize`` points (a character of DejaVu Sans is at most ~0.62 em wide on average in this
    text, with a margin for the figure's padding)."""
    chars = max(20, int((width_in * 72 - 24) / (0.62 * fontsize)))
    return "\n".join(textwrap.wrap(text, width=chars, break_on_hyphens=False))


def _save(fig: Any, out_dir: Path, name: str, title: str, context: str) -> FigureFile:
    """Title the figure (title and context line, each wrapped to the figure's width) and write
    ``name``.png and .svg."""
    import matplotlib

    out_dir.mkdir(parents=True, exist_ok=True)
    width = float(fig.get_figwidth())
    lines = f"{wrap_to_figure(_t(title), width, 9.5)}\n{wrap_to_figure(_t(context), width, 9.5)}"
    fig.suptitle(lines, fontsize=9.5)
    png, svg = out_dir / f"{name}.png", out_dir / f"{name}.svg"
    with matplotlib.rc_context({"svg.hashsalt": "wattlab", "svg.fonttype": "path"}):
        # through the one writer: a temporary file, renamed into place, never through a link
        write_atomic(
            png,
            lambda handle: fig.savefig(
                handle, format="png", dpi=PNG_DPI, metadata={"Software": None}
            ),
        )
        write_atomic(
            svg,
            lambda handle: fig.savefig(
                handle, format="svg", metadata={"Date": None, "Creator": None}
            ),
        )
    return FigureFile(name=name, png=png, svg=svg, title=title, caption=f"{title}. {context}")


def energy_unit(max_j: float) -> tuple[float, str]:
    """A divisor and unit name so that ``max_j`` prints with few digits (J, kJ, MJ, GJ)."""
    if not max_j or math.isnan(max_j) or max_j < 1e4:
        return 1.0, "J"
    if max_j < 1e7:
        return 1e3, "kJ"
    if max_j < 1e10:
        return 1e6, "MJ"
    return 1e9, "GJ"


def co2e_unit(max_kg: float) -> tuple[float, str]:
    """A divisor and unit for CO2e: g below 1 kg, kg, then t."""
    if not max_kg or math.isnan(max_kg) or max_kg < 1:
        return 1e-3, "g"
    if max_kg < 1e3:
        return 1.0, "kg"
    return 1e3, "t"


def _distinct(values: Sequence[object]) -> list[str]:
    out: list[str] = []
    for v in values:
        if v is None or (not isinstance(v, str) and pd.isna(v)):
            continue
        text = str(v).strip()
        if text and text not in out:
            out.append(text)
    return out


def figure_context(runs: pd.DataFrame) -> str:
    """The sentence every figure carries: hardware, intensity (range), PUE and provenance."""
    ok = ok_runs(runs)
    gpus = _distinct(list(ok["gpu_name"])) if "gpu_name" in ok else []
    cpus = _distinct(list(ok["cpu_model"])) if "cpu_model" in ok else []
    hw = []
    if gpus:
        counts = (
            sorted({int(g) for g in numeric(ok["gpus"]) if not math.isnan(g)})
            if ("gpus" in ok and "device" in ok and (ok["device"].astype("object") == "cuda").any())
            else []
        )
        count = f"{'/'.join(str(c) for c in counts)}x " if counts else ""
        hw.append(f"GPU {count}{', '.join(gpus)}")
    hw.append(f"CPU {', '.join(cpus)}" if cpus else "CPU unknown")
    intensities = _distinct(
        [f"{x:g}" for x in numeric(ok["intensity_kg_per_kwh"])]
        if "intensity_kg_per_kwh" in ok
        else []
    )
    intensities = [x for x in intensities if x != "nan"]
    rng = intensity_range(runs)
    carbon = f"intensity {', '.join(intensities) or 'unknown'} kgCO2e/kWh"
    if rng:
        carbon += f" (range {rng[0]:.3g}-{rng[1]:.3g})"
    pues = [
        x
        for x in _distinct([f"{x:g}" for x in numeric(ok["pue"])] if "pue" in ok else [])
        if x != "nan"
    ]
    carbon += f", PUE {', '.join(pues) or 'unknown'}"
    prov = energy_parts(runs).phrase()
    return f"{'; '.join(hw)}; {carbon}; energy: {prov}."


def _labels(summary: pd.DataFrame) -> list[str]:
    return [_t(x) for x in summary["label"]]


# --------------------------------------------------------------------------- run figures


def figure_configs(summary: pd.DataFrame, keep: Sequence[object] = ()) -> tuple[pd.DataFrame, str]:
    """The configurations a figure names: all of them up to MAX_FIGURE_CONFIGS, else those
    in ``keep`` (the Pareto front, the baseline) and then the lowest median energies, in the
    summary's order; and the note the figure's title gets when some were left out."""
    n = len(summary)
    if n <= MAX_FIGURE_CONFIGS:
        return summary, ""
    wanted = [h for h in keep if h in summary.index][:MAX_FIGURE_CONFIGS]
    if "is_baseline" in summary:
        base = summary.index[summary["is_baseline"].to_numpy(dtype=bool)]
        wanted = list(dict.fromkeys([*base[:1], *wanted]))[:MAX_FIGURE_CONFIGS]
    energy = np.nan_to_num(numeric(summary["energy_total_j"]), nan=np.inf)
    for i in np.argsort(energy, kind="stable"):
        if len(wanted) >= MAX_FIGURE_CONFIGS:
            break
        if summary.index[i] not in wanted:
            wanted.append(summary.index[i])
    chosen = set(wanted)
    subset = summary.loc[[h for h in summary.index if h in chosen]]
    note = (
        f" ({len(subset)} of {n} configurations: the baseline, the Pareto front and the "
        "lowest energies; the tables hold every one)"
    )
    return subset, note


# where a point's label may go, in points from the point: right-up first, then around it
_LABEL_OFFSETS = ((5, 5), (5, -11), (-5, 5), (-5, -11), (5, 14), (5, -20), (-5, 14), (-5, -20))


def place_labels(fig: Any, ax: Any, points: Sequence[tuple[float, float, str]]) -> None:
    """Label each point where the label overlaps no earlier label, the legend or a point, and
    stays inside the axes: the first free place of :data:`_LABEL_OFFSETS` (left of the point
    when right would leave the axes), else the one that overlaps least."""
    renderer = fig.canvas.get_renderer()
    fig.draw_without_rendering()  # constrained layout settles the axes before we measure
    box = ax.get_window_extent(renderer)
    taken = []
    legend = ax.get_legend()
    if legend is not None:
        taken.append(legend.get_window_extent(renderer))
    marks = [ax.transData.transform((x, y)) for x, y, _ in points]
    for (x, y, label), _ in zip(points, marks, strict=True):
        best, best_cost = None, math.inf
        for dx, dy in _LABEL_OFFSETS:
            far = abs(dy) > 11  # a label set further off gets a thin line to its point
            text = ax.annotate(
                label,
                (x, y),
                xytext=(dx, dy),
                textcoords="offset points",
                fontsize=7,
                ha="left" if dx > 0 else "right",
                arrowprops={"arrowstyle": "-", "lw": 0.4, "color": "#999999"} if far else None,
            )
            ext = text.get_window_extent(renderer)
            outside = max(0.0, box.x0 - ext.x0) + max(0.0, ext.x1 - box.x1)
            outside += max(0.0, box.y0 - ext.y0) + max(0.0, ext.y1 - box.y1)
            cost = 10 * outside + sum(_overlap(ext, other) for other in taken)
            cost += sum(
                1.0 for mx, my in marks if ext.x0 <= mx <= ext.x1 and ext.y0 <= my <= ext.y1
            )
            if cost < best_cost:
                if best is not None:
                    best.remove()
                best, best_cost = text, cost
            else:
                text.remove()
            if cost == 0:
                break
        if best is not None:
            taken.append(best.get_window_extent(renderer))


def _overlap(a: Any, b: Any) -> float:
    """The area two display boxes share (pixels squared)."""
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return max(0.0, w) * max(0.0, h)


def energy_time_legend(summary: pd.DataFrame) -> str:
    """What the energy-vs-time figure's points and bars are, from each configuration's runs:
    "median, 95 % CI" only when every interval reaches 95 % (:func:`interval_legend`)."""
    return interval_legend(interval_kind(row) for _, row in summary.iterrows())


def plot_energy_time(
    summary: pd.DataFrame,
    out_dir: Path,
    context: str,
    pareto: Sequence[object] = (),
    region: Sequence[object] = (),
    per_image: bool = False,
    noun: str = "image",
) -> FigureFile:
    """(a) Median energy vs median time per configuration with the interval of each median as
    error bars (the legend names their coverage: :func:`wattlab.wording.interval_legend`), the
    Pareto front joined and highlighted, the operating region ringed, the baseline marked.
    ``per_image`` (the runs saw different numbers of images) draws both per image (per
    ``noun``: "sample" for a task that is not images)."""
    fig = _new_figure(8.0, 5.6)
    ax = fig.add_subplot()
    t_col = "duration_per_sample_s" if per_image else "duration_s"
    e_col = "energy_per_sample_j" if per_image else "energy_total_j"
    t = numeric(summary[t_col]) * (1e3 if per_image else 1.0)
    e = numeric(summary[e_col])
    if per_image:
        div, unit = 1e-3, "mJ"
    else:
        div, unit = energy_unit(float(np.nanmax(e)) if np.isfinite(e).any() else math.nan)

    def err(col: str, centre: np.ndarray, scale: float) -> np.ndarray:
        lo = numeric(summary[f"{col}_ci_low"]) / scale
        hi = numeric(summary[f"{col}_ci_high"]) / scale
        c = centre / scale
        low, high = np.nan_to_num(c - lo), np.nan_to_num(hi - c)
        return np.vstack([np.clip(low, 0, None), np.clip(high, 0, None)])

    ax.errorbar(
        t,
        e / div,
        xerr=err(t_col, t / (1e3 if per_image else 1.0), 1e-3 if per_image else 1.0),
        yerr=err(e_col, e, div),
        fmt="o",
        color="#4a4a4a",
        ecolor="#9a9a9a",
        capsize=3,
        ms=6,
        zorder=2,
        label=f"configuration ({energy_time_legend(summary)})",
    )
    front = [i for i in pareto if i in summary.index]
    if front:
        pos = [summary.index.get_loc(i) for i in front]
        ax.plot(t[pos], e[pos] / div, "-", color="#d62728", lw=1.5, zorder=1)
        ax.scatter(t[pos], e[pos] / div, s=90, color="#d62728", zorder=3, label="Pareto front")
    ring = [summary.index.get_loc(i) for i in region if i in summary.index]
    if ring:
        ax.scatter(
            t[ring],
            e[ring] / div,
            s=260,
            facecolors="none",
            edgecolors="#2ca02c",
            linewidths=2,
            zorder=4,
            label="operating region (vs own highest limit)",
        )
    if "is_baseline" in summary:
        b = np.flatnonzero(summary["is_baseline"].to_numpy(dtype=bool))
        if b.size:
            ax.scatter(
                t[b],
                e[b] / div,
                marker="s",
                s=110,
                facecolors="none",
                edgecolors="#1f77b4",
                linewidths=2,
                zorder=4,
                label="baseline",
            )
    named, note = figure_configs(summary, front)
    where = [summary.index.get_loc(h) for h in named.index]
    points = [
        (float(x), float(y), label)
        for x, y, label in zip(t[where], e[where] / div, _labels(named), strict=True)
        if np.isfinite(x) and np.isfinite(y)
    ]
    if per_image:  # the runs saw different numbers of images: a whole run is no common unit
        ax.set_xlabel(f"training time per {noun} of the budget (ms, median)")
        ax.set_ylabel(f"energy per {noun}, all components ({unit}, median)")
    else:
        ax.set_xlabel("training time of the budget (s, median)")
        ax.set_ylabel(f"energy, all components ({unit}, median)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    place_labels(fig, ax, points)
    title = (
        "Energy vs time " + (f"per {noun}, " if per_image else "") + "per configuration"
    ) + note.replace("configurations:", "named:")
    return _save(fig, out_dir, "energy_vs_time", title, context)


def component_provenance(runs: pd.DataFrame, config_hash: str) -> dict[str, str]:
    """Weakest provenance per component kind (gpu, cpu, dram, other) from components_json;
    an estimated RAM component counts as dram (it fills energy_dram_j where no counter is);
    components kept out of the total (``in_total`` false, e.g. psys) are ignored."""
    return component_provenances(runs).get(str(config_hash), {})


def component_provenances(runs: pd.DataFrame) -> dict[str, dict[str, str]]:
    """``component_provenance`` of every configuration, in one pass over the ok runs."""
    found = component_provenance_sets(runs)
    return {h: {k: weakest_provenance(v) for k, v in kinds.items()} for h, kinds in found.items()}


def component_provenance_sets(runs: pd.DataFrame) -> dict[str, dict[str, list[str]]]:
    """Every provenance each component kind (gpu, cpu, dram, other) had in each
    configuration's ok runs, ``{config_hash: {kind: [provenance, ...]}}``."""
    ok = ok_runs(runs)
    if "components_json" not in ok:
        return {}
    found: dict[str, dict[str, list[str]]] = {}
    hashes = ok["config_hash"].astype("object").tolist()
    for config_hash, cell in zip(hashes, ok["components_json"].tolist(), strict=True):
        kinds = found.setdefault(str(config_hash), {})
        for comp, info in (parse_json_cell(cell) or {}).items():
            if isinstance(info, dict) and info.get("in_total") is False:
                continue
            kind = {"ram": "dram"}.get(component_kind(comp), component_kind(comp))
            kind = kind if kind in ("gpu", "cpu", "dram") else "other"
            kinds.setdefault(kind, []).append(
                provenance_of(info.get("provenance") if isinstance(info, dict) else None)
            )
    return found


def component_medians(summary: pd.DataFrame) -> pd.DataFrame:
    """Median energy per component (J) over each configuration's runs: gpu, cpu, dram and
    other (the runs' ``energy_other_j``; for tables without it, total minus the three). Each is
    its own median, so a stack can differ slightly from the median total: the residual of
    medians is not energy of any component, and is never shown as "other"."""
    gpu = np.nan_to_num(numeric(summary["energy_gpu_j"]))
    cpu = np.nan_to_num(numeric(summary["energy_cpu_j"]))
    dram = np.nan_to_num(numeric(summary["energy_dram_j"]))
    total = np.nan_to_num(numeric(summary["energy_total_j"]))
    if "energy_other_j" in summary and summary["energy_other_j"].notna().any():
        other = np.nan_to_num(numeric(summary["energy_other_j"]))
    else:
        other = total - gpu - cpu - dram
    other = np.where(other > 1e-9 * np.abs(total), other, 0.0)  # rounding noise is not energy
    return pd.DataFrame({"gpu": gpu, "cpu": cpu, "dram": dram, "other": other}, index=summary.index)


def plot_energy_components(
    summary: pd.DataFrame, runs: pd.DataFrame, out_dir: Path, context: str
) -> FigureFile:
    """(b) Median energy per component, stacked per configuration (gpu/cpu/dram/other);
    a component that is estimated in any run is hatched and says so in the legend. At most
    MAX_FIGURE_CONFIGS configurations (``figure_configs``)."""
    summary, note = figure_configs(summary)
    parts = component_medians(summary)
    n = len(summary)
    fig = _new_figure(8.0, 2.2 + 0.42 * n)
    ax = fig.add_subplot()
    div, unit = energy_unit(float(parts.sum(axis=1).max()))
    provs: dict[str, list[str]] = {}
    every = component_provenance_sets(runs)
    for h in summary.index:
        for kind, found in every.get(str(h), {}).items():
            provs.setdefault(kind, []).extend(found)
    left = np.zeros(n)
    y = np.arange(n)
    for kind in ("gpu", "cpu", "dram", "other"):
        values = parts[kind].to_numpy() / div
        if not values.any():
            continue
        seen = [p for p in PROVENANCES if p in provs.get(kind, [])]
        hatch = "//" if set(seen) & {"estimated", "unknown"} else None
        said = ", ".join(seen) if seen else "provenance not recorded"
        name = f"{COMPONENT_NAMES[kind]} ({said})"
        ax.barh(
            y,
            values,
            left=left,
            color=COMPONENT_COLORS[kind],
            hatch=hatch,
            edgecolor="white",
            label=name,
        )
        left += values
    ax.set_yticks(y, _labels(summary), fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"energy of the budget ({unit}, median per component)")
    ax.grid(True, axis="x", alpha=0.3)
    fig.legend(loc="outside lower center", fontsize=8, ncols=4, frameon=False)
    return _save(fig, out_dir, "energy_components", "Energy per component" + note, context)


def plot_co2e(summary: pd.DataFrame, out_dir: Path, context: str) -> FigureFile:
    """(c) Median CO2e per configuration with the low/high intensity sensitivity band (at
    most MAX_FIGURE_CONFIGS configurations, ``figure_configs``)."""
    summary, note = figure_configs(summary)
    n = len(summary)
    fig = _new_figure(8.0, 2.2 + 0.42 * n)
    ax = fig.add_subplot()
    value = numeric(summary["co2e_kg"])
    low = numeric(summary["co2e_low_kg"]) if "co2e_low_kg" in summary else np.full(n, np.nan)
    high = numeric(summary["co2e_high_kg"]) if "co2e_high_kg" in summary else np.full(n, np.nan)
    top = np.nanmax(np.concatenate([value, high])) if np.isfinite(value).any() else math.nan
    div, unit = co2e_unit(float(top))
    y = np.arange(n)
    ax.barh(y, np.nan_to_num(value / div), color="#6a9f58", label="CO2e at the chosen intensity")
    has_band = np.isfinite(low) & np.isfinite(high)
    if has_band.any():
        xerr = np.vstack(
            [
                np.clip(np.nan_to_num((value - low) / div), 0, None),
                np.clip(np.nan_to_num((high - value) / div), 0, None),
            ]
        )
        ax.errorbar(
            np.nan_to_num(value / div),
            y,
            xerr=xerr,
            fmt="none",
            ecolor="#333333",
            capsize=4,
            label="low-high intensity range",
        )
    ax.set_yticks(y, _labels(summary), fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"CO2e of the budget ({unit}, median)")
    ax.grid(True, axis="x", alpha=0.3)
    fig.legend(loc="outside lower center", fontsize=8, ncols=2, frameon=False)
    return _save(fig, out_dir, "co2e", "CO2e per configuration" + note, context)


def representative_runs(runs: pd.DataFrame, summary: pd.DataFrame, trace: pd.DataFrame) -> dict:
    """One run id per configuration (the ok run with a trace whose energy is closest to the
    configuration's median), ``{config_hash: run_id}``; configurations without a trace are
    left out."""
    ok = ok_runs(runs)
    if trace is None or trace.empty or "id" not in ok:
        return {}
    traced = set(pd.to_numeric(trace["run_id"], errors="coerce").dropna().astype(int))
    mine = ok[pd.to_numeric(ok["id"], errors="coerce").isin(traced)]
    if mine.empty:
        return {}
    hashes = mine["config_hash"].astype("object")
    median = {h: as_float(v, 0.0) for h, v in summary["energy_total_j"].items()}
    target = hashes.map(median).astype(float)
    distance = np.abs(numeric(mine["energy_total_j"]) - target.to_numpy())
    ranked = mine.assign(_distance=np.nan_to_num(distance, nan=np.inf), _hash=hashes)
    ranked = ranked[ranked["_hash"].isin(list(summary.index))]
    # the closest run of each configuration; the first in the runs' order on a tie
    best = ranked.sort_values("_distance", kind="stable").drop_duplicates("_hash")
    chosen = dict(zip(best["_hash"], best["id"].astype(int), strict=True))
    return {h: int(chosen[h]) for h in summary.index if h in chosen}


def plot_power_traces(
    runs: pd.DataFrame, trace: pd.DataFrame, summary: pd.DataFrame, out_dir: Path, context: str
) -> FigureFile | None:
    """(d) Power over time per component for one representative run per configuration (up to
    12 panels). None when no run has a trace."""
    chosen = representative_runs(runs, summary, trace)
    if not chosen:
        return None
    items = list(chosen.items())[:MAX_TRACE_PANELS]
    ncols = min(3, len(items))
    nrows = math.ceil(len(items) / ncols)
    fig = _new_figure(4.6 * ncols, 1.2 + 2.6 * nrows)
    axes = fig.subplots(nrows, ncols, sharey=True, squeeze=False)
    run_ids = pd.to_numeric(trace["run_id"], errors="coerce")
    kinds: dict[str, str] = {}
    for k, (h, run_id) in enumerate(items):
        ax = axes[k // ncols][k % ncols]
        rows = trace[run_ids == run_id]
        for comp, part in rows.groupby(rows["component"].astype("object"), sort=True):
            part = part.sort_values("t_s")
            step = max(1, len(part) // MAX_TRACE_POINTS)
            part = part.iloc[::step]
            color = kinds.setdefault(str(comp), _COLORS[len(kinds) % len(_COLORS)])
            ax.plot(
                numeric(part["t_s"]), numeric(part["power_w"]), lw=0.9, color=color, label=_t(comp)
            )
        ax.set_title(f"{_t(summary.loc[h, 'label'])} (run {run_id})", fontsize=8)
        ax.grid(True, alpha=0.3)
        ax.tick_params(labelsize=7)
        if k % ncols == 0:
            ax.set_ylabel("power (W)", fontsize=8)
        if k // ncols == nrows - 1:
            ax.set_xlabel("time since run start (s)", fontsize=8)
    for k in range(len(items), nrows * ncols):
        axes[k // ncols][k % ncols].set_visible(False)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=c, lw=1.5, label=_t(name)) for name, c in kinds.items()]
    # one legend for every panel, below them: a legend inside a panel covers its trace
    fig.legend(handles=handles, loc="outside lower center", fontsize=8, ncols=min(6, len(handles)),
               frameon=False)  # fmt: skip
    note = "" if len(chosen) <= MAX_TRACE_PANELS else f" (first {MAX_TRACE_PANELS})"
    return _save(
        fig, out_dir, "power_traces", f"Power traces, one run per configuration{note}", context
    )


PARITY_TICKS = 5  # at most this many labelled ticks per axis of the square parity figure


def parity_ticks(ax: Any, log: bool) -> None:
    """At most :data:`PARITY_TICKS` labelled ticks per axis, as plain numbers ("2000", not
    "2x10^3"), no labelled minor ticks, and the x labels turned: on a square axis a span of
    less than a decade otherwise labels every minor tick and the labels run into each other."""
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    low, high = ax.get_xlim()
    decades = math.log10(high / low) if log and low > 0 and high > low else 0.0
    # 1-2-5 within about a decade and a half, 1-3 up to three decades, else the decades alone
    subs = (1.0, 2.0, 5.0) if decades <= 1.5 else (1.0, 3.0) if decades <= 2.5 else (1.0,)
    for axis in (ax.xaxis, ax.yaxis):
        if log:
            axis.set_major_locator(LogLocator(subs=subs, numticks=PARITY_TICKS + 1))
            axis.set_minor_formatter(NullFormatter())
        else:
            axis.set_major_locator(MaxNLocator(nbins=PARITY_TICKS))
        axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:.3g}"))
    ax.tick_params(axis="x", labelrotation=30)


def plot_codecarbon_parity(
    runs: pd.DataFrame, out_dir: Path, context: str, windows: pd.DataFrame | None = None
) -> FigureFile | None:
    """(e) CodeCarbon's energy against the direct measurement per run, with the y = x line and
    ±5 % lines (log axes when the energies span more than 20x); the legend sits below the
    axes, where it covers no point. None when no run has CodeCarbon figures."""
    cc = codecarbon_errors(runs, windows)
    if not cc["measured"]:
        return None
    points = cc["runs"]
    direct = np.array([p["direct_j"] for p in points])
    theirs = np.array([p["codecarbon_energy_j"] for p in points])
    top = float(max(direct.max(), theirs.max()))
    div, unit = energy_unit(top)
    labels = list(dict.fromkeys(p["label"] for p in points))
    fig = _new_figure(6.4, 6.4 + 0.22 * min(len(labels), MAX_FIGURE_CONFIGS))
    ax = fig.add_subplot()
    for i, label in enumerate(labels):
        use = np.array([p["label"] == label for p in points])
        ax.scatter(
            direct[use] / div,
            theirs[use] / div,
            s=28,
            color=_COLORS[i % len(_COLORS)],
            label=_t(label) if i < MAX_FIGURE_CONFIGS else None,
            zorder=3,
        )
    bottom = float(min(direct.min(), theirs.min()))
    log = bottom > 0 and top / bottom > 20  # energies over decades: linear axes bunch them up
    if log:
        lim = np.array([bottom / 1.3, top * 1.3]) / div
        ax.set_xscale("log")
        ax.set_yscale("log")
    else:
        pad = 0.05 * max(top - bottom, 0.05 * top)
        lim = np.array([max(0.0, bottom - pad), top + pad]) / div
    line = np.geomspace(lim[0], lim[1], 50) if log else lim
    ax.plot(line, line, "-", color="#333333", lw=1, label="y = x")
    ax.plot(line, line * 1.05, ":", color="#777777", lw=1, label="±5 %")
    ax.plot(line, line * 0.95, ":", color="#777777", lw=1)
    ax.set_xlim(lim)
    ax.set_ylim(lim)
    ax.set_aspect("equal")
    parity_ticks(ax, log)
    estimated = cc.get("reference") == "wattlab's estimate"
    scale = ", log scale" if log else ""
    ax.set_xlabel(f"wattlab, {'estimated' if estimated else 'measured'} ({unit}{scale})")
    ax.set_ylabel(f"CodeCarbon ({unit}{scale})")
    ax.grid(True, alpha=0.3)
    fig.legend(loc="outside lower center", fontsize=7, ncols=2, frameon=False)
    title = (
        f"CodeCarbon vs {'estimated' if estimated else 'direct'} energy per run: median error "
        f"{cc['median'] * 100:+.1f} %, median |error| {cc['median_abs'] * 100:.1f} %, "
        f"n = {cc['n']}"
    )
    return _save(fig, out_dir, "codecarbon_parity", title, context)


def plot_run_figures(
    runs: pd.DataFrame,
    trace: pd.DataFrame | None,
    summary: pd.DataFrame,
    out_dir: Path,
    *,
    pareto: Sequence[object] = (),
    region: Sequence[object] = (),
    windows: pd.DataFrame | None = None,
    per_image: bool = False,
    noun: str = "image",
) -> list[FigureFile]:
    """All figures of a run report, in report order; the trace and CodeCarbon figures are
    skipped when there is nothing to draw."""
    context = figure_context(runs)
    figures = [
        plot_energy_time(summary, out_dir, context, pareto, region, per_image, noun),
        plot_energy_components(summary, runs, out_dir, context),
        plot_co2e(summary, out_dir, context),
        plot_power_traces(
            runs, trace if trace is not None else pd.DataFrame(), summary, out_dir, context
        ),
        plot_codecarbon_parity(runs, out_dir, context, windows),
    ]
    return [f for f in figures if f is not None]


# --------------------------------------------------------------------------- profiles


def profile_context(analysis: dict[str, Any]) -> str:
    """The context line of an imported profile's figures."""
    gpu = analysis.get("gpu_name") or "unknown GPU"
    n = analysis.get("gpus") or 1
    model = analysis.get("model")
    source = Path(str(analysis.get("source") or "profile")).name
    return (
        f"GPU {n}x {gpu}{f', model {model}' if model else ''}; imported from {source}; "
        "intensity and PUE: not applied (the profile holds energy only, no CO2e); "
        f"energy provenance: {analysis.get('provenance') or 'unknown'} (GPU energy only)."
    )


def plot_profile(
    profile: pd.DataFrame, analysis: dict[str, Any], out_dir: Path, name: str = "profile"
) -> FigureFile:
    """Energy and time against the power limit for an imported profile: the operating region
    shaded, the baseline marked, the Pareto limits highlighted."""
    limits = analysis["limits"]
    w = np.array([x["power_limit_w"] for x in limits])
    e = np.array([x["energy_j"] for x in limits])
    t = np.array([x["time_s"] for x in limits])
    div, unit = energy_unit(float(e.max()))
    fig = _new_figure(7.6, 6.4)
    ax_e, ax_t = fig.subplots(2, 1, sharex=True)
    steps = np.diff(np.sort(np.unique(w)))
    half = float(steps.min()) / 2 if steps.size else 5.0
    for ax in (ax_e, ax_t):
        for k, x in enumerate(x for x in limits if x["operating_region"]):
            ax.axvspan(
                x["power_limit_w"] - half,
                x["power_limit_w"] + half,
                color="#2ca02c",
                alpha=0.15,
                lw=0,
                label="operating region" if k == 0 else None,
            )
        ax.axvline(
            analysis["baseline_w"],
            color="#1f77b4",
            ls="--",
            lw=1,
            label=f"baseline {analysis['baseline_w']:g} W",
        )
        ax.grid(True, alpha=0.3)
    front = np.array([x["pareto"] for x in limits])
    ax_e.plot(w, e / div, "o-", color="#4a4a4a", ms=5, label="energy (sum over GPUs)")
    ax_e.scatter(w[front], e[front] / div, s=70, color="#d62728", zorder=3, label="Pareto front")
    ax_e.set_ylabel(f"energy ({unit})")
    ax_e.legend(fontsize=7, loc="best")
    ax_t.plot(w, t, "o-", color="#4a4a4a", ms=5, label="time")
    ax_t.scatter(w[front], t[front], s=70, color="#d62728", zorder=3)
    ax_t.set_ylabel("time of the window (s)")
    ax_t.set_xlabel("GPU power limit (W per GPU)")
    crit = analysis["criteria"]
    title = (
        f"Energy and time vs power limit (region: >= {crit['min_saving']:.1%} energy saved, "
        f"<= {crit['max_penalty']:.1%} more time)"
    )
    return _save(fig, out_dir, name, title, profile_context(analysis))
