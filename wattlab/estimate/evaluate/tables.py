"""The evaluation written for people: ``evaluation_markdown`` (one table per protocol, the
settings, how each method predicts, what was left out), ``equal_information_markdown`` and
``write_evaluation`` (evaluation.md, evaluation.json and the predicted-vs-measured plot)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from wattlab.estimate import methods as registry
from wattlab.estimate.evaluate.result import ONLINE, EvaluationResult

MARKERS = "os^xDvP<>"  # the plot's marker of each registered method, in registry order


def _kj(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 1e3:.2f}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} %"


def _read(metrics: dict[str, Any]) -> str:
    value = metrics.get("median_read_percent")
    return "0 %" if value is None else f"{value:.0f} %"


def _coverage(m: dict[str, Any]) -> str:
    coverage = m.get("coverage_percent")
    ci = m.get("coverage_ci_percent")
    if coverage is None:
        return "no interval"
    width = m.get("median_width_percent")
    return (
        f"{coverage:.0f} % of {m['interval_runs']}"
        + (f" (95 % CI {ci[0]:.0f}-{ci[1]:.0f} %)" if ci else "")
        + ("" if width is None else f", median width {width:.0f} %")
    )


def evaluation_markdown(result: EvaluationResult) -> str:
    """The evaluation as Markdown: one table per protocol on the common runs, the settings and
    the exclusions."""
    settings = result.settings
    target = settings.get("target", "total")
    lines = [
        "# Energy estimation methods against measured runs",
        "",
        f"{settings.get('runs', '?')} measured ok runs. Target `{target}`: "
        f"{settings.get('target_covers', '')} (`{' + '.join(settings.get('target_columns', []))}`"
        f"; provenance: {', '.join(settings.get('measured_provenance') or ['unknown'])}). "
        "Every method predicts this target, except where *covers* says less.",
    ]
    share = settings.get("target_modelled_share")
    if share:
        lines += [
            "",
            f"The target is not all GPU: a median {share['median_percent']:.1f} % (max "
            f"{share['max_percent']:.1f} %) of it is CPU and RAM energy, modelled where no RAPL "
            "counter was read; `--target gpu` scores the GPUs' counters alone.",
        ]
    for protocol, table in result.protocols.items():
        lines += [
            "",
            f"## {table['label']} ({protocol}): {table['common_runs']} common runs",
            "",
            "Metrics over the runs every scored method could handle; *own n* and *own MAPE* "
            "are over all the runs the method handled.",
            "",
            "| method | covers | n | RMSE (kJ) | MAPE | median APE | bias | interval coverage "
            "| own n | own MAPE | excluded | oracle inputs | budget read |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- "
            "| ---: |",
        ]
        for name in result.methods:
            method = registry.get(name)
            m = table["methods"][name]
            own = m["own"]
            lines.append(
                f"| {method.label} | {method.covers(target)} | {m['n']} | "
                f"{_kj(m['rmse_j'])} | {_pct(m['mape_percent'])} | {_pct(m['mdape_percent'])} | "
                f"{_pct(m['bias_percent'])} | {_coverage(m)} | {own['n']} | "
                f"{_pct(own['mape_percent'])} | {own['excluded']} | "
                f"{'; '.join(method.oracle_inputs) or 'none'} | {_read(m)} |"
            )
        if table["unscored_methods"]:
            names = ", ".join(registry.label(m) for m in table["unscored_methods"])
            lines += ["", f"Not in the common set (no run it could handle): {names}."]
    how = "; ".join(registry.get(name).how(settings) for name in result.methods)
    lines += [
        "",
        f"How: {how}. Bias is the mean signed error.",
        "",
        "*Oracle inputs* are measured on the very run being predicted and known only "
        "once it has finished; *budget read* is the median share of the run's budget a "
        "method read before predicting (0 % for methods that read none of it).",
    ]
    lines += equal_information_markdown(result.equal_information)
    if len(result.excluded):
        lines += [
            "",
            "## Left out",
            "",
            "| method | protocol | runs | reason |",
            "| --- | --- | ---: | --- |",
        ]
        grouped = result.excluded.groupby(["method", "protocol", "reason"], sort=False).size()
        for (method, protocol, reason), count in grouped.items():
            lines.append(f"| {registry.label(method)} | {protocol} | {count} | {reason} |")
    return "\n".join(lines) + "\n"


def equal_information_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """Markdown lines of the equal-information comparison (none without rows)."""
    if not rows:
        return []
    lines = [
        "",
        "## STEP rules at equal information",
        "",
        "Each rule reads the same share of every run's budget: the published rule a window of w "
        "epochs ending at the last epoch read (s = n - w + 1, w = min(5, n - 1): the first epoch "
        "is never in the window), the step-level rule its marks up to the same share. Metrics "
        "over the runs both could handle.",
        "",
        "| share read | epochs read (of all) | published rule: s, w | runs | published MAPE "
        "| step-level MAPE | difference (points) |",
        "| ---: | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        paper, marks = row["published"], row["step_level"]
        difference = (
            "n/a"
            if paper["mape_percent"] is None or marks["mape_percent"] is None
            else f"{marks['mape_percent'] - paper['mape_percent']:+.2f}"
        )
        lines.append(
            f"| {row['fraction']:.1%} | {row['epochs_read']} of {row['epochs']} | "
            f"s = {row['stable_epoch']}, w = {row['window_epochs']} | {row['runs']} | "
            f"{_pct(paper['mape_percent'])} | {_pct(marks['mape_percent'])} | {difference} |"
        )
    return lines


def write_evaluation(result: EvaluationResult, out_dir: str | Path) -> dict[str, Path]:
    """Write evaluation.md, evaluation.json and predicted-vs-measured.png/.svg to ``out_dir``
    (the first protocol's predictions); returns the paths by kind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from wattlab.jsonio import refuse_links_in, write_atomic, write_text_atomic

    out = Path(out_dir)
    paths = {
        "markdown": out / "evaluation.md",
        "json": out / "evaluation.json",
        "png": out / "predicted-vs-measured.png",
        "svg": out / "predicted-vs-measured.svg",
    }
    refuse_links_in(out, [p.name for p in paths.values()], "evaluation")
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(paths["markdown"], evaluation_markdown(result))
    write_text_atomic(paths["json"], result.to_json() + "\n")

    first = result.settings.get("protocols", ["loco"])[0]
    predictions = result.predictions[result.predictions["protocol"].isin([ONLINE, first])]
    fig, ax = plt.subplots(figsize=(6.5, 6.0))
    registered = registry.names()
    if predictions.empty:
        ax.text(
            0.5, 0.5, "no predictions to plot", ha="center", va="center", transform=ax.transAxes
        )
    else:
        for method in result.methods:
            rows = predictions[predictions["method"] == method]
            if rows.empty:
                continue
            rmse = result.metrics[method]["rmse_j"]
            ax.scatter(
                rows["measured_j"] / 1e3,
                rows["predicted_j"] / 1e3,
                marker=MARKERS[registered.index(method) % len(MARKERS)],
                alpha=0.75,
                label=f"{registry.label(method)} (RMSE {rmse / 1e3:.1f} kJ, n={len(rows)})",
            )
        values = pd.concat([predictions["measured_j"], predictions["predicted_j"]]) / 1e3
        low, high = float(values.min()) * 0.8, float(values.max()) * 1.25
        ax.plot([low, high], [low, high], color="black", linewidth=1, label="predicted = measured")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(low, high)
        ax.set_ylim(low, high)
        ax.legend(fontsize=7, loc="upper left")
    ax.set_xlabel(f"measured energy, kJ (target {result.settings.get('target')})")
    ax.set_ylabel("predicted energy, kJ (estimated)")
    ax.set_title(f"Energy estimates against measurements ({first})")
    fig.tight_layout()
    write_atomic(paths["png"], lambda handle: fig.savefig(handle, format="png", dpi=150))
    write_atomic(paths["svg"], lambda handle: fig.savefig(handle, format="svg"))
    plt.close(fig)
    return paths


__all__ = ["equal_information_markdown", "evaluation_markdown", "write_evaluation"]
