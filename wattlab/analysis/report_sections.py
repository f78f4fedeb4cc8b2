"""The sections of a run report, each a list of document blocks built from the summary table
and its JSON summary: header, findings, configuration table, power-limit effect, GPU scaling,
CodeCarbon."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from wattlab.analysis import plots
from wattlab.analysis.chance import Chance, chance_of
from wattlab.analysis.energy_shares import config_parts, describe_shares
from wattlab.analysis.phases import PHASE_ENERGY_WORDS, PHASE_NAMES
from wattlab.analysis.report_document import (
    Block,
    Bullets,
    Heading,
    Para,
    Table,
    as_number,
    criteria_text,
    decimals_of,
    fmt,
    fmt_ci,
    pct,
    span_text,
)
from wattlab.analysis.runs_table import intensity_range, numeric, ok_runs
from wattlab.analysis.summary import interval_kind
from wattlab.wording import coverage_text, interval_words, percent, plural


def interval_counts(summary: pd.DataFrame) -> str:
    """What the configurations' intervals are, counted: "min–max of 3 runs (75 % coverage) for
    2 configurations; 95 % CI (6 runs) for 1"."""
    counts: dict[str, int] = {}
    for _, row in summary.sort_values("n", kind="stable").iterrows():
        words = interval_words(interval_kind(row))
        counts[words] = counts.get(words, 0) + 1
    items = list(counts.items())
    return "; ".join(
        f"{words} for {plural(n, 'configuration') if i == 0 else n}"
        for i, (words, n) in enumerate(items)
    )


def header_blocks(
    runs: pd.DataFrame, summary: pd.DataFrame, data: dict[str, Any], windows: pd.DataFrame | None
) -> list[Block]:
    ok = ok_runs(runs)
    hw = data["hardware"]
    carbon = data["carbon"]
    rng = intensity_range(runs)
    intensity = ", ".join(f"{x:g}" for x in carbon["intensity_kg_per_kwh"]) or "unknown"
    pue = ", ".join(f"{x:g}" for x in carbon["pue"]) or "unknown"
    items = [
        f"Hardware: GPU {', '.join(hw['gpu_name']) or 'none'}; "
        f"CPU {', '.join(hw['cpu_model']) or 'unknown'}; "
        f"host(s) {', '.join(hw['hostname']) or 'unknown'}"
        + (f"; driver {', '.join(hw['driver'])}" if hw["driver"] else "")
        + ".",
        f"Carbon: intensity {intensity} kgCO2e/kWh"
        + (f" (sensitivity range {rng[0]:.3g}-{rng[1]:.3g})" if rng else "")
        + f", PUE {pue}.",
        f"Energy provenance: {describe_shares(data['energy_shares'])}.",
        f"Runs: {data['runs']['ok']} ok in {len(summary)} configuration(s), "
        f"{data['runs']['failed']} failed"
        + (f", {data['runs']['running']} still running" if data["runs"].get("running") else "")
        + (
            f", {data['runs']['abandoned']} abandoned (their process died before they finished)"
            if data["runs"].get("abandoned")
            else ""
        )
        + (
            f", {len(data['runs']['left_out'])} left out (stored as ok without a usable "
            "energy or time)."
            if data["runs"].get("left_out")
            else "."
        ),
        f"Baseline: {data['baseline']['label']}"
        + (f" ({data['baseline']['source']})." if data["baseline"].get("source") else "."),
        f"Operating region: {criteria_text(data['criteria'])}, each configuration against "
        f"{data['criteria']['region_reference']}.",
        f"Intervals: {data['intervals']['method']}; here {interval_counts(summary)}.",
    ]
    if data.get("budget_windows"):  # runs of a command sweep: what their window holds
        items.append(data["budget_windows"]["sentence"])
    blocks: list[Block] = [Bullets(items)]
    blocks += left_out_blocks(data["runs"].get("left_out") or [])
    blocks += provenance_blocks(data.get("energy_shares"))
    if data.get("estimate_assumptions"):  # fallback TDP, machine-wide load, the RAM model
        blocks.append(Para(str(data["estimate_assumptions"])))
    blocks += interval_blocks(summary, data["intervals"])
    if windows is not None and "short_window" in windows.columns and not windows.empty:
        ids = set(numeric(ok["id"]).tolist()) if "id" in ok.columns else set()
        mine = windows[pd.to_numeric(windows["run_id"], errors="coerce").isin(ids)]
        short = int((pd.to_numeric(mine["short_window"], errors="coerce") == 1).sum())
        if short:
            blocks.append(
                Para(
                    f"{short} measurement window(s) were shorter than a counter's update period; "
                    "their energies are less certain (the budget figures are unaffected unless "
                    "the budget window itself is short)."
                )
            )
    failures = data["runs"]["failures"]
    if failures:
        blocks.append(Heading("Failed runs", 3))
        blocks.append(
            Bullets(
                [
                    f"{f.get('label')} (run {f.get('run_id')}, repetition {f.get('repetition')}): "
                    f"{(f.get('error') or 'no error recorded')}"
                    for f in failures
                ]
            )
        )
    return blocks


def _against(row: pd.Series, column: str, what: str) -> str:
    if bool(row.get("is_baseline")):
        return "the baseline"
    return f"{pct(row[column])} {what} against the baseline"


def extremes(summary: pd.DataFrame) -> list[str]:
    """Fastest and least energy: of whole runs when every run saw the same number of images,
    else per image, saying that the image counts differ."""
    t = numeric(summary["duration_s"])
    e = numeric(summary["energy_total_j"])
    if not (np.isfinite(t).any() and np.isfinite(e).any()):
        return []
    low, high = numeric(summary["samples_low"]), numeric(summary["samples_high"])
    if np.all(np.isfinite(low) & (low == high)) and np.unique(low).size == 1:
        fast = summary.iloc[int(np.nanargmin(t))]
        least = summary.iloc[int(np.nanargmin(e))]
        return [
            f"Fastest for the same {int(low[0]):,} images: {fast['label']} "
            f"({fmt(fast['duration_s'])} s, {_against(fast, 'time_change', 'time')}). Least "
            f"energy: {least['label']} ({fmt(least['energy_total_j'])} J, "
            f"{_against(least, 'energy_change', 'energy')})."
        ]
    if np.all(np.isfinite(low) & (low > 0)):
        images = numeric(summary["samples"])
        per_t, per_e = t / images, e / images
        if np.isfinite(per_t).any() and np.isfinite(per_e).any():
            fast = summary.iloc[int(np.nanargmin(per_t))]
            least = summary.iloc[int(np.nanargmin(per_e))]
            return [
                f"The configurations' runs saw different numbers of images "
                f"({int(np.nanmin(low)):,}–{int(np.nanmax(high)):,} per run), so per image: "
                f"fastest {fast['label']} ({fmt(fast['duration_s'] / fast['samples'] * 1e3)} ms "
                f"per image), least energy {least['label']} "
                f"({fmt(least['energy_total_j'] / least['samples'])} J per image). Δ time and "
                "Δ energy in the table compare whole runs."
            ]
    fast = summary.iloc[int(np.nanargmin(t))]
    least = summary.iloc[int(np.nanargmin(e))]
    return [
        f"Per run (the image counts were not recorded for every run): fastest {fast['label']} "
        f"({fmt(fast['duration_s'])} s), least energy {least['label']} "
        f"({fmt(least['energy_total_j'])} J)."
    ]


def findings(
    summary: pd.DataFrame, data: dict[str, Any], effects: pd.DataFrame, scaling: pd.DataFrame
) -> list[str]:
    items: list[str] = []
    items += extremes(summary)
    chance = data.get("accuracy_vs_chance") or {}
    if chance.get("none_beyond"):
        items.append(chance["sentence"])
    axes = data.get("pareto_axes") or ["energy", "time"]
    per = " per image" if data.get("pareto_per") == "image" else ""
    if "accuracy" in axes:
        front = (
            f"Pareto front over {', '.join(axes)}{per} (no other configuration is at least as "
            "good on every axis and better on one; accuracy higher is better): "
        )
    else:
        front = (
            f"Pareto front{per} (no other configuration is both faster and uses less energy{per}): "
        )
    items.append(front + "; ".join(data["pareto"]) + ".")
    items += region_findings(data, effects)
    if not effects.empty:
        capped = effects[effects["time_change"].notna() & (effects["energy_change"].notna())]
        capped = capped[capped["reference_label"] != capped["label"]]
        for limit, group in capped.groupby("power_limit_w", sort=True):
            n_in = int(group["in_operating_region"].sum())
            items.append(
                f"Power limit {limit:g} W per GPU against the highest limit of the same "
                f"configuration ({len(group)} group(s)): energy "
                f"{span_text(list(group['energy_change']))}, "
                f"time {span_text(list(group['time_change']))}; "
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
            f"CodeCarbon vs {codecarbon_reference(cc)} over {cc['n']} run(s): median error "
            f"{pct(cc['median'])}, median |error| {pct(cc['median_abs'], False)} (IQR "
            f"{pct(cc['q1'])} to {pct(cc['q3'])})."
        )
    else:
        items.append("CodeCarbon: not measured (no run was made with CodeCarbon alongside).")
    return items


def config_table(summary: pd.DataFrame, runs: pd.DataFrame, data: dict[str, Any]) -> Table:
    e_div, e_unit = plots.energy_unit(float(np.nanmax(numeric(summary["energy_total_j"]))))
    top = np.nanmax(numeric(summary["co2e_kg"])) if summary["co2e_kg"].notna().any() else math.nan
    c_div, c_unit = plots.co2e_unit(float(top))
    records = {c["config_hash"]: c for c in data["configurations"]}
    parts = plots.component_medians(summary)
    every = plots.component_provenances(runs)  # one pass over the runs, not one per row
    shares = config_parts(runs)
    chances = {
        h: chance_of(row.get("dataset"), row.get("test_size"), classes=row.get("classes"))
        for h, row in summary.iterrows()
    }
    at_chance: list[Chance] = []
    for h, row in summary.iterrows():
        chance, accuracy = chances[h], as_number(row.get("accuracy"))
        if chance is not None and accuracy is not None and not chance.beyond(accuracy):
            at_chance.append(chance)
    rows = []
    for hsh, row in summary.iterrows():
        rec = records[hsh]
        provs = every.get(str(hsh), {})

        def comp(kind: str, value: float, provs: dict[str, str] = provs) -> str:
            if value == 0 and kind not in provs:
                return "n/a" if kind != "other" else "0"
            mark = {"sampled": " (sampled)", "estimated": " (est.)", "unknown": " (?)"}
            return fmt(value / e_div) + mark.get(provs.get(kind, "measured"), "")

        co2 = as_number(row["co2e_kg"])
        lo, hi = as_number(row.get("co2e_low_kg")), as_number(row.get("co2e_high_kg"))
        co2_text = "n/a" if co2 is None else fmt(co2 / c_div)
        if co2 is not None and lo is not None and hi is not None:
            d = decimals_of(co2_text)
            co2_text += f" [{lo / c_div:,.{d}f}-{hi / c_div:,.{d}f}]"
        acc = as_number(row.get("accuracy"))
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
                _accuracy_cell(acc, chances[hsh]),
                shares[str(hsh)].short() if str(hsh) in shares else "n/a",
                "baseline" if rec["is_baseline"] else pct(row["time_change"]),
                "baseline" if rec["is_baseline"] else pct(row["energy_change"]),
                "★" if rec["pareto"] else "",
                "✓" if rec["operating_region"] else "",
            ]
        )
    headers = [
        "Configuration",
        "Runs",
        "Time (s) [interval]",
        f"Energy ({e_unit}) [interval]",
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
        "Medians over the ok runs of each configuration. [interval] = order-statistic interval "
        f"of the median: {interval_counts(summary)}. Δ = median / baseline median - 1 of "
        "whole runs (negative = less). ★ = on the Pareto front"
        + (" (per image)" if data.get("pareto_per") == "image" else "")
        + (
            "; ✓ = in the operating region (against the same configuration at its highest "
            "power limit)"
            if data.get("power_limit_effects")
            else ""
        )
        + ". A component marked "
        "(est.) or (sampled) was not read from an energy counter in at least one run; "
        "Provenance is each configuration's energy by share."
    )
    if at_chance:
        example = at_chance[0]
        note += (
            f" (chance) = not beyond chance: guessing among {example.classes} classes reaches "
            f"it with probability above {coverage_text(example.alpha)} on the runs' test images "
            f"(beyond chance from {percent(example.threshold)} on {example.test_images:,} images)."
        )
    # a component no configuration has, or a region column without any power-limit twin, says
    # nothing: left out (the text says why there is no region)
    empty = {"n/a", "0", ""}
    droppable = {f"GPU ({e_unit})", f"CPU ({e_unit})", f"DRAM/RAM ({e_unit})", f"Other ({e_unit})"}
    if not data.get("power_limit_effects"):
        droppable.add("Region")
    keep = [
        i
        for i, name in enumerate(headers)
        if name not in droppable or any(row[i] not in empty for row in rows)
    ]
    headers = [headers[i] for i in keep]
    rows = [[row[i] for i in keep] for row in rows]
    low, high = numeric(summary["samples_low"]), numeric(summary["samples_high"])
    if not (np.all(np.isfinite(low) & (low == high)) and np.unique(low).size == 1):
        headers.insert(2, "Images/run")
        for row_cells, (_, row) in zip(rows, summary.iterrows(), strict=True):
            row_cells.insert(2, _images_cell(row))
        note += (
            " The configurations' runs saw different numbers of images (Images/run), so their "
            "Δ energy compares different amounts of work; J/sample compares per image."
        )
    return Table(headers, rows, note)


def _accuracy_cell(accuracy: float | None, chance: Chance | None) -> str:
    if accuracy is None:
        return "n/a"
    at_chance = chance is not None and not chance.beyond(accuracy)
    return percent(accuracy, 2) + (" (chance)" if at_chance else "")


def _images_cell(row: pd.Series) -> str:
    low, high = as_number(row.get("samples_low")), as_number(row.get("samples_high"))
    if low is None or high is None:
        return "n/a"
    return f"{low:,.0f}" if low == high else f"{low:,.0f}–{high:,.0f}"


def effects_table(effects: pd.DataFrame) -> Table:
    rows = [
        [
            str(r["reference_label"]),
            ("default" if r["is_default_limit"] else "")
            + (f" {r['power_limit_w']:g} W" if as_number(r["power_limit_w"]) is not None else ""),
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
    return Table(
        headers,
        [[c.strip() for c in row] for row in rows],
        "Each configuration against the same configuration at its highest power limit.",
    )


def scaling_table(scaling: pd.DataFrame) -> Table:
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
    return Table(
        headers,
        rows,
        "Speed-up = time(fewest GPUs) / time(N); scaling efficiency = speed-up / (N / fewest); "
        "energy ratio = energy(N) / energy(fewest). On the CPU the count is processes.",
    )


def codecarbon_reference(cc: dict[str, Any]) -> str:
    """What CodeCarbon was compared with, in words, e.g. "direct measurement (96.3 % of the
    energy measured)" or "wattlab's estimate (no energy counter was read)"."""
    share = cc.get("reference_measured_share")
    if cc.get("reference") == "wattlab's estimate":
        return "wattlab's estimate (no energy counter was read)"
    if share is None or share >= 0.9995:
        return "direct measurement"
    return f"direct measurement ({share:.1%} of the energy measured, the rest estimated)"


def codecarbon_blocks(cc: dict[str, Any]) -> list[Block]:
    if not cc.get("measured"):
        return [Para("CodeCarbon: not measured (no run was made with CodeCarbon alongside).")]
    estimated_only = cc.get("reference") == "wattlab's estimate"
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
    blocks: list[Block] = [
        Table(
            ["Part", "Runs", "Median error", "Median |error|", "IQR", "Min", "Max"],
            rows,
            "Error = (CodeCarbon - wattlab) / wattlab per run, against "
            f"{codecarbon_reference(cc)}. Components compare CodeCarbon's gpu/cpu/ram energy "
            "with ours (gpu, cpu, DRAM or RAM estimate).",
        )
    ]
    if estimated_only:
        blocks.insert(
            0,
            Para(
                "No energy counter was read for these runs, so this compares CodeCarbon's model "
                "with wattlab's model (both estimates), not CodeCarbon with a measurement; the "
                "difference says how far two estimates disagree, not which is right.",
                warning=True,
            ),
        )
    by_label: dict[str, list[float]] = {}
    for r in cc["runs"]:
        by_label.setdefault(r["label"], []).append(r["rel_error"])
    blocks.append(
        Table(
            ["Configuration", "Runs", "Median error"],
            [[k, str(len(v)), pct(float(np.median(v)))] for k, v in by_label.items()],
        )
    )
    if cc["mismatches"]:
        blocks.append(
            Para(
                f"the stored codecarbon_rel_error disagrees with the recomputed error for run(s) "
                f"{', '.join(str(m) for m in cc['mismatches'])}; the recomputed value is used.",
                warning=True,
            )
        )
    return blocks


def left_out_blocks(left_out: list[dict[str, Any]]) -> list[Block]:
    """A warning naming the runs stored as ok whose energy or time is not a finite number >= 0:
    they are left out of every figure, table and statistic."""
    if not left_out:
        return []
    named = "; ".join(
        f"run {r.get('run_id')} ({r.get('label')}): {r.get('reason')}" for r in left_out
    )
    return [
        Para(
            f"{plural(len(left_out), 'run')} stored as ok {'has' if len(left_out) == 1 else 'have'}"
            f" no usable energy or time and {'is' if len(left_out) == 1 else 'are'} left out of "
            f"every statistic, table and figure: {named}.",
            warning=True,
        )
    ]


def provenance_blocks(shares: dict[str, Any] | None) -> list[Block]:
    """The provenance by share: a warning unless all energy was measured, and "every energy
    figure is estimated" only when nothing at all was measured or sampled."""
    if not shares or not shares.get("by_provenance"):
        return [Para("no energy figures were recorded with their provenance.", warning=True)]
    by_prov = shares["by_provenance"]
    sentence = describe_shares(shares)
    measured = (by_prov.get("measured") or 0) + (by_prov.get("sampled") or 0)
    if measured <= 0:
        return [
            Para(
                "every energy figure in this report is estimated: no hardware energy counter was "
                f"read (the energy: {sentence}). Treat them as models, not measurements.",
                warning=True,
            )
        ]
    if (by_prov.get("measured") or 0) >= 1:
        return []  # the header's provenance line says it: all measured
    return [
        Para(
            f"not every joule here was read from a hardware counter: {sentence}. The component "
            "columns mark which parts were sampled or estimated.",
            warning=True,
        )
    ]


def interval_blocks(summary: pd.DataFrame, intervals: dict[str, Any]) -> list[Block]:
    """A warning naming the configurations with too few runs for a 95 % interval, with what
    their interval is instead."""
    short = intervals["short_configurations"]
    if not short:
        return []
    need = intervals["min_runs"]
    kinds = {
        int(row["n"]): interval_words(interval_kind(row))
        for _, row in summary[summary["label"].isin(short)].iterrows()
    }
    return [
        Para(
            f"{len(short)} configuration(s) have fewer than the {need} ok runs a "
            f"{_level(intervals['level_asked'])} interval of the median needs (they have: "
            + "; ".join(kinds[n] for n in sorted(kinds))
            + f"): {'; '.join(short)}. Run at least {need} repetitions for "
            f"{_level(intervals['level_asked'])} intervals.",
            warning=True,
        )
    ]


def region_findings(data: dict[str, Any], effects: pd.DataFrame) -> list[str]:
    """The operating region (each configuration against its own highest power limit) and,
    separately and named so, the comparison with the one baseline."""
    crit = data["criteria"]
    items: list[str] = []
    if effects.empty:
        items.append(
            "Operating region: no configuration was run at two power limits, so there is no "
            "power-limit effect to judge."
        )
    else:
        hits = effects[effects["in_operating_region"].astype(bool)]
        if hits.empty:
            items.append(
                f"Operating region ({criteria_text(crit)} against the same configuration at its "
                "highest power limit): no configuration."
            )
        else:
            listed = "; ".join(
                f"{r['label']} (energy {pct(r['energy_change'])}, time {pct(r['time_change'])} "
                f"against {r['reference_label']})"
                for _, r in hits.sort_values("energy_change", kind="stable").iterrows()
            )
            items.append(
                f"Operating region ({len(hits)} configuration(s) with {criteria_text(crit)} "
                f"against the same configuration at its highest power limit): {listed}."
            )
    vs_base = [c for c in data["configurations"] if c["region_vs_baseline"]]
    base = data["baseline"]["label"]
    per_image = data.get("pareto_per") == "image"  # the runs saw different numbers of images
    per = " per image" if per_image else ""
    suffix = "_per_image" if per_image else ""
    if vs_base:
        listed = "; ".join(
            f"{c['label']} (energy {pct(c['energy_change' + suffix])}, "
            f"time {pct(c['time_change' + suffix])})"
            for c in vs_base
        )
        items.append(
            f"Against the baseline {base}{per} (not the operating region: precision, GPU count "
            f"and batch size count here too), {len(vs_base)} configuration(s) have "
            f"{criteria_text(crit)}: {listed}."
        )
    else:
        items.append(
            f"Against the baseline {base}{per} (not the operating region), no configuration has "
            f"{criteria_text(crit)}."
        )
    return items


def energy_to_accuracy_blocks(eta: dict[str, Any] | None) -> list[Block]:
    """The energy-to-accuracy section: its sentence and, when measured, one row per
    configuration (runs that reached the target, median energy, time and epoch)."""
    if not eta:
        return []
    blocks: list[Block] = [Heading("Energy to accuracy"), Para(eta["sentence"])]
    if not eta.get("measured") or not eta.get("configurations"):
        return blocks
    rows = [
        [
            c["label"],
            f"{c['reached']}/{c['runs']}",
            fmt(c["energy_j"], 4) if c["energy_j"] is not None else "not reached",
            fmt(c["time_s"], 3) if c["time_s"] is not None else "",
            f"{c['epoch']:g}" if c["epoch"] is not None else "",
            fmt(c["best_accuracy"], 3),
        ]
        for c in eta["configurations"]
    ]
    headers = [
        "configuration",
        "reached",
        "energy (J)",
        "time (s)",
        "epoch",
        "best per-epoch accuracy (subset)",
    ]
    blocks.append(Table(headers, rows))
    blocks.append(
        Para(
            "Energy to accuracy (as Zeus defines it): the cumulative energy of the training "
            "epochs and their per-epoch evaluations up to the first epoch whose accuracy on "
            "the fixed subset reaches the target; medians over the runs that reached it. The "
            "best per-epoch accuracy is the median over a configuration's runs of their best "
            "epoch on that subset, not the final test accuracy the findings and the "
            "configuration table give (after the last epoch, on the whole test set)."
        )
    )
    return blocks


def phase_blocks(phases: dict[str, Any] | None) -> list[Block]:
    """ "Where the sweep's time went": each phase's summed wall time, share and median per run;
    nothing when the runs carry no phase times."""
    if not phases:
        return []
    rows = [
        [
            PHASE_NAMES.get(p["phase"], p["phase"]),
            fmt(p["total_s"]),
            pct(p["share"], False),
            fmt(p["median_s"]),
        ]
        for p in phases["phases"]
    ]
    rows.append(["all phases", fmt(phases["total_s"]), "100.0 %", ""])
    sentence = (
        f"Over {phases['runs']} run(s), {fmt(phases['total_s'])} s of wall time were spent in "
        f"the runs' phases, of which the training budget (the window the comparisons use) took "
        f"{pct(phases['budget_share'], False)}; the rest is overhead."
    )
    return [
        Heading("Where the sweep's time went"),
        Para(sentence),
        Table(
            ["Phase", "Total (s)", "Share", "Median per run (s)"],
            rows,
            "Wall time per phase, summed over the runs that recorded it (failed runs included). "
            + PHASE_ENERGY_WORDS,
        ),
    ]


def _level(level: float) -> str:
    """A confidence level as "95 %"."""
    return f"{level * 100:g} %"
