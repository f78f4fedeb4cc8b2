"""What ``wattlab compare`` writes: Markdown fit for a pull request's comment, and JSON.

Every sentence is true of the data: a verdict names its interval and confidence, a
configuration with one repetition on a side says that no interval can be formed, and the
smallest change the data could have detected is given beside each verdict.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from wattlab.analysis.compare import MAX_REPS, Change
from wattlab.analysis.compare_runs import (
    SESSION_SD_H200,
    Comparison,
    ConfigComparison,
    estimated_share,
    fingerprint_values,
    host_load,
    idle_summary,
    provenance_phrase,
    started_span,
)
from wattlab.analysis.idle_settle import SETTLED_AFTER_S
from wattlab.analysis.markdown_text import md_code, md_text


def _pct(fraction: float, signed: bool = True) -> str:
    if not math.isfinite(fraction):
        return "n/a"
    return f"{fraction * 100:+.1f} %" if signed else f"{fraction * 100:.1f} %"


def _setting(fraction: float) -> str:
    """A setting given as a fraction (the threshold, the confidence) as people wrote it: 5 %."""
    return f"{fraction * 100:g} %"


def _interval(change: Change) -> str:
    if change.verdict == "no interval":
        return "no interval"
    return f"[{_pct(change.low - 1)}, {_pct(change.high - 1)}]"


def _reps(change: Change) -> str:
    if change.verdict == "no interval":
        return "n/a"
    if change.reps_needed is None:
        return "none: a session floor" if change.session_sd > 0 else f"more than {MAX_REPS}"
    return str(change.reps_needed)


def _verdict(change: Change, gate: bool) -> str:
    if change.verdict == "regression" and gate:
        return "**regression**" if change.exceeds else "regression, below the threshold"
    return change.verdict


def _per_sample(value: float, unit: str) -> str:
    if not math.isfinite(value):
        return "n/a"
    return f"{value:.4g} {unit}"


def headline(comparison: Comparison, name: Callable[[str], str] = str) -> str:
    """One sentence: the gate's outcome and why; ``name`` writes a configuration's label
    (``md_text`` in Markdown, as it is in JSON)."""
    threshold = _setting(comparison.threshold)
    failing = [c for c in comparison.configs if c.energy.exceeds]
    if failing:
        worst = max(failing, key=lambda c: c.energy.ratio)
        beyond = worst.energy.low - 1 >= comparison.threshold
        reach = "beyond" if beyond else "which may reach"
        return (
            f"Energy per sample regressed: {name(worst.label)} {_pct(worst.energy.change)} "
            f"{_interval(worst.energy)}, {reach} the {threshold} threshold "
            f"({len(failing)} of {len(comparison.configs)} configuration(s) fail)."
        )
    formed = [c for c in comparison.configs if c.energy.verdict != "no interval"]
    if not formed:
        return (
            "No interval can be formed for any configuration (at least 2 repetitions per side "
            "are needed), so nothing can be said about a regression."
        )
    blind = [c for c in formed if c.energy.detectable > comparison.threshold]
    sentence = f"No energy regression that may reach {threshold} was found"
    if blind:
        lows = sorted(c.energy.detectable for c in blind)
        span = _pct(lows[0], signed=False)
        if len(lows) > 1:
            span += f" to {_pct(lows[-1], signed=False)}"
        sentence += (
            f"; but for {len(blind)} of {len(formed)} configuration(s) the smallest change the "
            f"data could have detected is above it ({span})"
        )
    missing = len(comparison.configs) - len(formed)
    if missing:
        sentence += f"; {missing} configuration(s) have too few repetitions for an interval"
    return sentence + "."


def _row(config: ConfigComparison) -> str:
    e, t = config.energy, config.time
    return (
        f"| {md_text(config.label)} | {e.baseline_n} / {e.candidate_n} "
        f"| {_per_sample(e.baseline_mean, 'J')} -> {_per_sample(e.candidate_mean, 'J')} "
        f"| {_pct(e.change)} {_interval(e)} | {_verdict(e, gate=True)} "
        f"| {_pct(t.change)} {_interval(t)} | {_verdict(t, gate=False)} "
        f"| {_pct(e.detectable, signed=False) if e.verdict != 'no interval' else 'n/a'} "
        f"| {_reps(e)} |"
    )


def markdown(comparison: Comparison) -> str:
    """The comparison as Markdown (a PR comment)."""
    c = comparison
    gate = "FAILED" if c.exceeds else "passed"
    threshold = _setting(c.threshold)
    lines = [
        f"## wattlab compare: energy gate {gate}",
        "",
        headline(c, md_text) + judged_model(c),
        "",
        f"Baseline {md_code(c.baseline.spec.name)} ({len(c.baseline.runs)} runs) against "
        f"candidate {md_code(c.candidate.spec.name)} ({len(c.candidate.runs)} runs); threshold "
        f"{threshold}, "
        f"{_setting(c.confidence)} confidence over all {len(c.configs)} configuration(s).",
        "",
        how_the_sides_ran(c),
        "",
        what_was_measured(c),
        "",
        "| configuration | reps (base / cand) | energy per sample | energy change | verdict "
        f"| time per sample change | verdict | smallest detectable | reps for {threshold} |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *(_row(config) for config in c.configs),
        "",
    ]
    no_interval = [x for x in c.configs if x.energy.why_no_interval]
    for config in no_interval:
        label, why = md_text(config.label, line_start=True), config.energy.why_no_interval
        lines.append(f"- {label}: {md_text(why)}.")
    if no_interval:
        lines.append("")
    lines += _differences(c)
    lines += conditions(c)
    lines += ["### How this was computed", "", *_method(c), ""]
    if c.notes:
        lines += ["### Notes", "", *(f"- {md_text(n, line_start=True)}" for n in c.notes), ""]
    return "\n".join(lines)


def _differences(c: Comparison) -> list[str]:
    idle_b, idle_c = c.idle
    lines = ["### What differs between the two sides", ""]
    if not c.differences:
        lines.append(
            "Nothing in the runs' fingerprints differs (hardware, drivers, libraries, "
            "wattlab, code commit)."
        )
    else:
        lines += ["| | baseline | candidate |", "| --- | --- | --- |"]
        for d in c.differences:
            mark = " (hardware)" if d.mismatch else ""
            baseline, candidate = (", ".join(map(md_text, v)) for v in (d.baseline, d.candidate))
            lines.append(f"| {md_text(d.label)}{mark} | {baseline} | {candidate} |")
    soon = [side["idle_readings_not_at_rest"] or 0 for side in (idle_b, idle_c)]
    lines += [
        "",
        f"GPU power just before the runs: {_watts(_num(idle_b['idle_power_w']))} (baseline), "
        f"{_watts(_num(idle_c['idle_power_w']))} (candidate); hottest GPU "
        f"{_celsius(_num(idle_b['idle_temperature_c']))} and "
        f"{_celsius(_num(idle_c['idle_temperature_c']))}.",
    ]
    if any(soon):
        lines.append(
            f"Not the cards at rest: at least {soon[0]} of {idle_b['idle_readings']} "
            f"(baseline) and {soon[1]} of {idle_c['idle_readings']} (candidate) readings "
            f"came less than {SETTLED_AFTER_S:.0f} s after the previous run had ended "
            "(a cool-down between runs lets the card settle)."
        )
    lines.append("")
    return lines


def _num(value: float | int | None) -> float | None:
    return None if value is None else float(value)


def _watts(value: float | None) -> str:
    return "not recorded" if value is None else f"{value:.0f} W"


def _celsius(value: float | None) -> str:
    return "not recorded" if value is None else f"{value:.0f} C"


MOSTLY_MODELLED = 0.5  # above this estimated share of a side's energy, the verdict judges a model


def judged_model(c: Comparison) -> str:
    """A sentence for the headline when most of either side's energy is a model's estimate
    (the verdict then judges the model, not a meter), and what the model assumed (whose CPU
    load, which TDP); empty otherwise."""
    from wattlab.analysis.assumptions import assumptions_sentence

    shares = [estimated_share(side.runs) for side in (c.baseline, c.candidate)]
    if max(shares) <= MOSTLY_MODELLED:
        return ""
    assumed = assumptions_sentence([*c.baseline.runs, *c.candidate.runs])
    return (
        f" This verdict judges a model, not a measurement: {_pct(shares[0], signed=False)} of "
        f"the baseline's and {_pct(shares[1], signed=False)} of the candidate's energy is "
        "estimated (no energy counter read it), so a change the model does not follow is not "
        "seen." + (f" The model: {assumed}" if assumed else "")
    )


def what_was_measured(c: Comparison) -> str:
    """Each side's energy by provenance, by share."""
    return (
        f"What was measured: baseline {provenance_phrase(c.baseline.runs)}; candidate "
        f"{provenance_phrase(c.candidate.runs)}."
    )


def _span(c: Comparison, baseline: bool) -> str:
    span = started_span((c.baseline if baseline else c.candidate).runs)
    return "not recorded" if span is None else f"{span[0]} to {span[1]}"


def how_the_sides_ran(c: Comparison) -> str:
    """Whether the sides ran interleaved or one after the other (and out of one sweep)."""
    source = ""
    if c.one_sweep:
        order = c.baseline.order or "not recorded"
        source = (
            f"Both sides come out of one sweep (run order: {order}), told apart by its grid "
            f"axis {c.baseline.spec.axis}: {c.baseline.spec.value} against "
            f"{c.candidate.spec.value}. "
        )
    if c.timing == "interleaved":
        return source + (
            "The sides ran interleaved (each side's runs began while the other's were going "
            "on), so a drift of the machine falls on both alike."
        )
    if c.timing == "sequential":
        return source + (
            "The sides ran one after the other, not interleaved (the baseline's runs began "
            f"{_span(c, True)}, the candidate's {_span(c, False)}): a change of the machine in "
            "between cannot be told apart from a change of the code."
        )
    return source + "When the runs began is not recorded on both sides."


def conditions(c: Comparison) -> list[str]:
    """The sides' conditions beside each other: when their runs began, the host's load, the
    GPUs' power and temperature read just before the runs."""
    idle_b = idle_summary(c.baseline.runs, ())
    idle_c = idle_summary(c.candidate.runs, ())

    def load(value: float | None) -> str:
        return "not recorded" if value is None else f"{value:.2f}"

    return [
        "### Conditions before the runs",
        "",
        "| | baseline | candidate |",
        "| --- | --- | --- |",
        f"| runs began (UTC) | {_span(c, True)} | {_span(c, False)} |",
        f"| 1-minute load average per CPU (mean) | {load(host_load(c.baseline.runs))} "
        f"| {load(host_load(c.candidate.runs))} |",
        f"| GPU power (mean) | {_watts(_num(idle_b['idle_power_w']))} "
        f"| {_watts(_num(idle_c['idle_power_w']))} |",
        f"| hottest GPU (mean) | {_celsius(_num(idle_b['idle_temperature_c']))} "
        f"| {_celsius(_num(idle_c['idle_temperature_c']))} |",
        "",
        *(
            [
                "The load is read just before each run, so it includes the tail of the previous "
                "run.",
                "",
            ]
            if host_load(c.baseline.runs) is not None or host_load(c.candidate.runs) is not None
            else []
        ),
    ]


def _analysis_lines(c: Comparison) -> list[str]:
    paired = [x for x in c.configs if x.energy.method == "paired"]
    if not paired:
        return []
    n = ", ".join(str(x.energy.baseline_n) for x in paired)
    return [
        f"- Paired analysis for {len(paired)} of {len(c.configs)} configuration(s) ({n} "
        "pairs): each baseline run with the candidate run of the same repetition of the one "
        "sweep; a t on the pairs' log differences, so a drift shared by both runs of a pair "
        "drops out. The change is the ratio of the paired runs' geometric means."
    ]


def _method(c: Comparison) -> list[str]:
    each = f"{c.config_confidence * 100:.2f} %" if len(c.configs) > 1 else _setting(c.confidence)
    methods = {x.energy.method for x in c.configs}
    opening = {
        "welch": "Welch's t on the logarithm of each repetition's energy (and time) per sample; "
        "the change is the ratio of geometric means, its interval's ends",
        "paired": "The interval's ends are",
    }["paired" if methods == {"paired"} else "welch"]
    lines = [
        *_analysis_lines(c),
        f"- {'Otherwise, ' if len(methods) > 1 else ''}{opening} one-sided bounds at {each} each"
        + (f" (Sidak over {len(c.configs)} configurations)" if len(c.configs) > 1 else "")
        + ", widened by the counters' resolution (NVML's millijoule, the clock's microsecond).",
        "- Verdict: regression when the lower bound is above 0, improvement when the upper "
        "bound is below 0, otherwise no detectable change. The gate (exit 1) fails on an energy "
        f"regression whose upper bound reaches {_setting(c.threshold)}.",
        "- Smallest detectable: the true change these repetitions would catch 80 % of the time; "
        "reps: the repetitions per side that would make the threshold detectable.",
    ]
    if c.same_session and c.session_sd == 0:
        lines.append(
            "- Both sides ran interleaved on the same GPU card(s) (or both without one): one "
            "session, so no between-session term is added."
        )
    elif c.session_sd > 0:
        origin = (
            "measured on H200s, bench/compare_power.py"
            if c.session_sd == SESSION_SD_H200
            else "as given by --session-noise"
        )
        why = (
            "interleaved, one session, but --session-noise was given"
            if c.same_session
            else "not one session (other cards, or run one after the other)"
        )
        lines.append(
            f"- The sides are {why}, so a between-session spread of "
            f"{c.session_sd * 100:.1f} % per side ({origin}) is added, which no number of "
            "repetitions lowers; measure both sides interleaved in one sweep (--sides) to "
            "detect smaller changes."
        )
    else:
        lines.append(
            "- The sides are not one session, but --session-noise 0 was given: no "
            "between-session term is added."
        )
    return lines


def _change_json(change: Change) -> dict[str, Any]:
    return {
        "verdict": change.verdict,
        "exceeds_threshold": change.exceeds,
        "baseline_repetitions": change.baseline_n,
        "candidate_repetitions": change.candidate_n,
        "baseline_per_sample": change.baseline_mean,
        "candidate_per_sample": change.candidate_mean,
        "ratio": change.ratio,
        "ratio_low": change.low,
        "ratio_high": change.high,
        "smallest_detectable_change": change.detectable,
        "repetitions_for_threshold": change.reps_needed,
        "spread_log": change.spread,
        "why_no_interval": change.why_no_interval,
        "analysis": change.method,
    }


def as_json(comparison: Comparison) -> dict[str, Any]:
    """The comparison as plain data (``wattlab compare --json``)."""
    c = comparison
    return {
        "gate": "failed" if c.exceeds else "passed",
        "headline": headline(c) + judged_model(c),
        "threshold": c.threshold,
        "confidence": c.confidence,
        "confidence_per_configuration": c.config_confidence,
        "method": (
            "paired t on log differences of runs of the same repetition where both sides come "
            "out of one sweep with 2 or more pairs (each configuration's 'analysis'), else "
            if any(x.energy.method == "paired" for x in c.configs)
            else ""
        )
        + "welch-t on log per-sample values; one-sided bounds; sidak over configurations",
        "same_session": c.same_session,
        "session_sd_log": c.session_sd,
        "timing": c.timing,
        "one_sweep": c.one_sweep,
        "judges_a_model": bool(judged_model(c)),
        "baseline": _side_json(c, baseline=True),
        "candidate": _side_json(c, baseline=False),
        "configurations": [
            {
                "label": x.label,
                "baseline_config_hash": x.baseline_hash,
                "candidate_config_hash": x.candidate_hash,
                "energy_per_sample_j": _change_json(x.energy),
                "time_per_sample_s": _change_json(x.time),
            }
            for x in c.configs
        ],
        "differences": [
            {
                "field": d.field,
                "label": d.label,
                "hardware": d.mismatch,
                "baseline": list(d.baseline),
                "candidate": list(d.candidate),
            }
            for d in c.differences
        ],
        "notes": list(c.notes),
    }


def _side_json(c: Comparison, *, baseline: bool) -> dict[str, Any]:
    side = c.baseline if baseline else c.candidate
    return {
        "database": side.spec.path,
        "sweep": side.spec.sweep,
        "commit": side.spec.commit,
        "runs": len(side.runs),
        "run_ids": [r.id for r in side.runs],
        "fingerprint": fingerprint_values(side.runs),
        **c.idle[0 if baseline else 1],
        "axis": side.spec.axis,
        "axis_value": side.spec.value,
        "order": side.order,
        "started_span": started_span(side.runs),
        "load_per_cpu_before": host_load(side.runs),
        "provenance": provenance_phrase(side.runs),
        "estimated_share": estimated_share(side.runs),
    }
