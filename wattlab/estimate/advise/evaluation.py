"""The advice judged where nobody measured (``wattlab advise evaluate``).

Reference set (leave one model out): for each model, PRE is fitted on the other models' runs
(``pre_cache.fit_runs``: fitted once per fold, then cached) and predicts every configuration of
the held-out model (per image, from the features of its measured runs). For every starting
configuration and every limit (``--max-slowdown`` 0 %, 5 %, 20 %, none) the advisor picks among
the configurations its knobs reach; the pick is then looked up in what was *measured* (median
per image over its repetitions):

- regret: the pick's measured energy over the least measured energy among the reachable
  configurations whose measured time meets the limit, minus 1 (negative when the pick broke the
  limit to save more);
- violation: the pick's measured time breaks the limit (start's measured time x (1 + slowdown));
- realised saving: 1 - the pick's measured energy / the start's.

A start whose knobs reach no other measured configuration (a model run at one precision, for
the precision knob) is not scored: keeping it would count as perfect advice; the folds say how
many were left out. The advisor leads only with a change predicted to save at least
``MIN_PREDICTED_SAVING`` (5 %); the plain lowest prediction (no threshold) and a fixed rule
(always amp-bf16 at the start's batch size) are scored beside it.

Power limits (leave one file out on the Zeus A40/V100 profiles): for each file the cap law is
fitted on the other files, each limit's energy and time are predicted from the file's
highest-limit window, and the pick under each limit is looked up in the file's measured windows.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from wattlab.errors import DataError
from wattlab.estimate.advise.advisor import MIN_PREDICTED_SAVING
from wattlab.estimate.advise.ranking import Limit, Option, Setting, rank
from wattlab.estimate.pre import PreModel, training_table
from wattlab.experiment.db.stored_run import RunCol

SLOWDOWNS: tuple[float | None, ...] = (0.0, 0.05, 0.20, None)
KNOB_SETS: dict[str, tuple[str, ...]] = {
    "precision": ("precision",),
    "precision + batch": ("precision", "batch"),
}
TARGET_MEDIAN_REGRET = 0.05
TARGET_VIOLATIONS = 0.10
CONFIG = (RunCol.MODEL, RunCol.PRECISION, RunCol.BATCH_SIZE)


def _config(runs: pd.DataFrame) -> list[str]:
    """The columns one configuration is known by: the GPU's name too where the runs have it
    (the same model, precision and batch size on two GPUs are two configurations)."""
    return [*CONFIG, *([RunCol.GPU_NAME] if RunCol.GPU_NAME in runs else [])]


def measured_per_image(runs: pd.DataFrame) -> pd.DataFrame:
    """Median energy (J) and time (s) per image of each (model, precision, batch size[, GPU]),
    with the number of repetitions."""
    ok = runs[runs[RunCol.STATUS] == "ok"] if RunCol.STATUS in runs else runs
    table = ok.assign(
        energy_pi=ok[RunCol.ENERGY_TOTAL_J] / ok[RunCol.SAMPLES],
        time_pi=ok[RunCol.DURATION_S] / ok[RunCol.SAMPLES],
    )
    grouped = table.groupby(_config(table))
    out = grouped[["energy_pi", "time_pi"]].median()
    out["repetitions"] = grouped.size()
    return out.reset_index()


def predicted_per_image(pre: PreModel, runs: pd.DataFrame) -> pd.DataFrame:
    """PRE's energy and time per image (and the interval's low/high factors) of each
    configuration in ``runs``, the median over its runs' feature rows."""
    used, features, _ = training_table(runs)
    if used.empty:
        raise DataError("no run of the held-out model has usable features.")
    predicted = pre.predict(features)
    table = pd.DataFrame(
        {
            "model": used["model"].to_numpy(),
            "precision": used["precision"].to_numpy(),
            "batch_size": used["batch_size"].to_numpy(),
            "energy_pi": predicted["energy_per_sample_j"].to_numpy(dtype=float),
            "time_pi": predicted["time_per_sample_s"].to_numpy(dtype=float),
            "low": (predicted["energy_low_j"] / predicted["energy_j"]).to_numpy(dtype=float),
            "high": (predicted["energy_high_j"] / predicted["energy_j"]).to_numpy(dtype=float),
        }
    )
    if RunCol.GPU_NAME in used:
        table[RunCol.GPU_NAME] = used[RunCol.GPU_NAME].to_numpy()
    return table.groupby(_config(table)).median().reset_index()


def _options(table: pd.DataFrame) -> dict[Setting, Option]:
    out = {}
    for row in table.itertuples():
        setting = Setting(str(row.precision), int(row.batch_size), 1)
        low = float(getattr(row, "low", 1.0))
        high = float(getattr(row, "high", 1.0))
        out[setting] = Option(
            setting, row.energy_pi, row.time_pi, row.energy_pi * low, row.energy_pi * high,
            row.time_pi, row.time_pi,
        )  # fmt: skip
    return out


def reachable(start: Setting, settings: Sequence[Setting], knobs: tuple[str, ...]) -> list[Setting]:
    """The settings that differ from ``start`` only in the knobs allowed."""
    out = []
    for s in settings:
        if s.precision != start.precision and "precision" not in knobs:
            continue
        if s.batch_size != start.batch_size and "batch" not in knobs:
            continue
        if s.gpus != start.gpus or s.power_limit_w != start.power_limit_w:
            continue
        out.append(s)
    return out


def score_pick(
    pick: Setting,
    start: Setting,
    candidates: Sequence[Setting],
    measured: dict[Setting, tuple[float, float]],
    slowdown: float | None,
) -> dict[str, Any]:
    """Regret, violation and realised saving of ``pick`` (see the module docstring).
    ``measured``: setting -> (energy, time) as measured."""
    e_start, t_start = measured[start]
    bound = math.inf if slowdown is None else t_start * (1 + slowdown)
    meeting = [s for s in candidates if measured[s][1] <= bound * (1 + 1e-12)]
    best = min(meeting, key=lambda s: measured[s][0])
    e_pick, t_pick = measured[pick]
    return {
        "regret": e_pick / measured[best][0] - 1.0,
        "violation": bool(t_pick > bound * (1 + 1e-12)),
        "realised_saving": 1.0 - e_pick / e_start,
        "best": best.__dict__,
        "best_saving": 1.0 - measured[best][0] / e_start,
    }


def summarise(scores: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Median and 90th percentile of regret, the violation rate, the median realised saving."""
    if not scores:
        return {"n": 0}
    regret = np.array([s["regret"] for s in scores], dtype=float)
    saving = np.array([s["realised_saving"] for s in scores], dtype=float)
    return {
        "n": len(scores),
        "median_regret": float(np.median(regret)),
        "p90_regret": float(np.quantile(regret, 0.9)),
        "violation_rate": float(np.mean([s["violation"] for s in scores])),
        "median_realised_saving": float(np.median(saving)),
        "median_best_saving": float(np.median([s["best_saving"] for s in scores])),
    }


def _label(slowdown: float | None) -> str:
    return "none" if slowdown is None else f"{slowdown * 100:g} %"


def _fixed_rule(start: Setting, candidates: Sequence[Setting]) -> Setting:
    """The baseline rule: amp-bf16 at the start's batch size (the start when not reachable)."""
    wanted = Setting("amp-bf16", start.batch_size, start.gpus, start.power_limit_w)
    return wanted if wanted in candidates else start


HOLD_OUT = {"model": "leave one model out", "gpu": "leave one GPU out"}


def evaluate_reference(
    runs: pd.DataFrame,
    *,
    models: Sequence[str] | None = None,
    fit: Callable[[pd.DataFrame], tuple[PreModel | None, str]] | None = None,
    hold_out: str = "model",
) -> dict[str, Any]:
    """Leave one model out on a reference runs table (see the module docstring); or, with
    ``hold_out="gpu"``, one GPU: PRE fitted on the other GPUs' runs advises every model on the
    held-out GPU (each prediction a transfer), scored on what that GPU measured."""
    if fit is None:
        from wattlab.estimate import pre_cache

        fit = pre_cache.fit_runs
    if hold_out not in HOLD_OUT:
        raise DataError(f"hold out 'model' or 'gpu', not {hold_out!r}.")
    for column in (*CONFIG, RunCol.ENERGY_TOTAL_J, RunCol.DURATION_S, RunCol.SAMPLES):
        if column not in runs:
            raise DataError(f"the runs table lacks the column {column!r} the evaluation needs.")
    runs = runs[runs[RunCol.STATUS] == "ok"] if RunCol.STATUS in runs else runs
    names = sorted(str(m) for m in runs["model"].dropna().unique())
    if models:
        unknown = [m for m in models if m not in names]
        if unknown:
            raise DataError(
                f"--models names {unknown[0]!r}, which the data lack ({', '.join(names)})."
            )
        names = [m for m in names if m in models]
    column = RunCol.MODEL if hold_out == "model" else RunCol.GPU_NAME
    if hold_out == "model" and len(set(runs["model"].dropna())) < 3:
        raise DataError("leave-one-model-out needs runs of at least three models.")
    if hold_out == "gpu":
        gpus = sorted(str(g) for g in runs[column].dropna().unique()) if column in runs else []
        if len(gpus) < 2:
            raise DataError(
                "leave-one-GPU-out needs runs of at least two GPUs; the data have "
                f"{', '.join(gpus) or 'none'}."
            )
    groups = names if hold_out == "model" else gpus
    measured_all = measured_per_image(runs)
    picks: list[dict[str, Any]] = []
    folds = []
    for group in groups:
        started = time.perf_counter()
        pre, how = fit(runs[runs[column] != group].reset_index(drop=True))
        fit_s = time.perf_counter() - started
        if pre is None:
            raise DataError(f"PRE cannot be fitted without {group}: {how}")
        held_all = runs[runs[column] == group]
        held_models = [group] if hold_out == "model" else [m for m in names if m in set(
            held_all["model"].astype(str))]  # fmt: skip
        nothing_to_choose = {k: 0 for k in KNOB_SETS}
        configurations = 0
        for name in held_models:
            held_model = held_all[held_all["model"] == name]
            # one model's configurations on one GPU at a time: a setting names no GPU
            on_gpus = (
                [(str(g), held_model[held_model[RunCol.GPU_NAME] == g])
                 for g in sorted(held_model[RunCol.GPU_NAME].dropna().unique())]
                if RunCol.GPU_NAME in held_model
                else [(None, held_model)]
            )  # fmt: skip
            for gpu, held in on_gpus:
                predicted = _options(predicted_per_image(pre, held))
                mine = measured_all[measured_all["model"] == name]
                if gpu is not None:
                    mine = mine[mine[RunCol.GPU_NAME] == gpu]
                measured = {s: (o.energy_j, o.duration_s) for s, o in _options(mine).items()}
                settings = [s for s in predicted if s in measured]
                configurations += len(settings)
                _score_starts(
                    name, settings, predicted, measured, nothing_to_choose, picks,
                    {} if gpu is None else {"gpu": gpu},
                )  # fmt: skip
        fold = {HOLD_OUT_KEY[hold_out]: group, "fit": how, "fit_s": fit_s,
                "configurations": configurations,
                "starts_with_nothing_to_choose": nothing_to_choose}  # fmt: skip
        if hold_out == "gpu":
            fold["model"] = f"{group} ({len(held_models)} models)"
        folds.append(fold)
    summary: dict[str, Any] = {}
    for knob_name in KNOB_SETS:
        summary[knob_name] = {}
        for label in [*(_label(s) for s in SLOWDOWNS), "all"]:
            rows = [
                p for p in picks
                if p["knobs"] == knob_name and (label == "all" or p["max_slowdown"] == label)
            ]  # fmt: skip
            summary[knob_name][label] = {
                "advisor": summarise(rows),
                "lowest prediction": summarise(_renamed(rows, "lowest")),
                "amp-bf16 rule": summarise(_renamed(rows, "rule")),
            }
    return {"folds": folds, "summary": summary, "picks": picks, "hold_out": hold_out}


HOLD_OUT_KEY = {"model": "model", "gpu": "gpu"}


def _score_starts(
    name: str,
    settings: list[Setting],
    predicted: dict[Setting, Option],
    measured: dict[Setting, tuple[float, float]],
    nothing_to_choose: dict[str, int],
    picks: list[dict[str, Any]],
    extra: dict[str, Any],
) -> None:
    """Every start of one model's measured settings, every knob set and limit: the advisor's
    pick, the lowest prediction's and the amp-bf16 rule's, scored on what was measured."""
    for start in settings:
        for knob_name, knobs in KNOB_SETS.items():
            candidates = reachable(start, settings, knobs)
            if len(candidates) < 2:  # only the start: keeping it is no advice to score
                nothing_to_choose[knob_name] += 1
                continue
            for slowdown in SLOWDOWNS:
                options = [predicted[s] for s in candidates]
                limit = Limit(max_slowdown=slowdown)
                ranked = rank(options, start, limit, MIN_PREDICTED_SAVING)
                pick = ranked[0].setting
                lowest = rank(options, start, limit)[0].setting
                rule = _fixed_rule(start, candidates)
                row = {
                    "model": name,
                    **extra,
                    "start": start.__dict__,
                    "knobs": knob_name,
                    "max_slowdown": _label(slowdown),
                    "pick": pick.__dict__,
                    "predicted_saving": ranked[0].saving,
                    **score_pick(pick, start, candidates, measured, slowdown),
                }
                plain = score_pick(lowest, start, candidates, measured, slowdown)
                row["lowest_regret"] = plain["regret"]
                row["lowest_violation"] = plain["violation"]
                row["lowest_realised_saving"] = plain["realised_saving"]
                fixed = score_pick(rule, start, candidates, measured, slowdown)
                row["rule_regret"] = fixed["regret"]
                row["rule_violation"] = fixed["violation"]
                row["rule_realised_saving"] = fixed["realised_saving"]
                picks.append(row)


def _renamed(rows: Sequence[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    return [
        {
            "regret": r[f"{prefix}_regret"],
            "violation": r[f"{prefix}_violation"],
            "realised_saving": r[f"{prefix}_realised_saving"],
            "best_saving": r["best_saving"],
        }
        for r in rows
    ]


def evaluate_power_limits(profiles: Sequence[Any]) -> dict[str, Any]:
    """Leave one Zeus profile file out (see the module docstring)."""
    from wattlab.estimate import power_caps

    if len(profiles) < 2:
        raise DataError("leave-one-file-out needs at least two profiles.")
    picks = []
    for i, profile in enumerate(profiles):
        others = [p for j, p in enumerate(profiles) if j != i]
        law = power_caps.fit_cap_law(others, draw_sensitive=True)  # as DEFAULT_LAW is fitted
        run = profile.uncapped()
        top = float(profile.limits_w.max())
        gpus = int(profile.gpu_energy_j.shape[1])
        options, measured = [], {}
        start = Setting("as profiled", 0, gpus, None)
        for limit, duration, energies in zip(
            profile.limits_w, profile.duration_s, profile.gpu_energy_j, strict=True
        ):
            setting = (
                start if float(limit) == top else Setting("as profiled", 0, gpus, float(limit))
            )
            p = power_caps.predict_limit(run, float(limit), law)
            energy_j = run.gpu_energy_j if setting == start else p.energy_j
            duration_s = run.duration_s if setting == start else p.duration_s
            options.append(
                Option(setting, energy_j, duration_s, energy_j, energy_j, duration_s, duration_s)
            )
            measured[setting] = (float(np.sum(energies)), float(duration))
        settings = list(measured)
        for slowdown in SLOWDOWNS:
            ranked = rank(options, start, Limit(max_slowdown=slowdown), MIN_PREDICTED_SAVING)
            pick = ranked[0].setting
            picks.append(
                {
                    "file": profile.name,
                    "max_slowdown": _label(slowdown),
                    "pick_w": pick.power_limit_w or top,
                    "predicted_saving": ranked[0].saving,
                    **score_pick(pick, start, settings, measured, slowdown),
                }
            )
    summary = {
        label: summarise([p for p in picks if label == "all" or p["max_slowdown"] == label])
        for label in [*(_label(s) for s in SLOWDOWNS), "all"]
    }
    return {"files": len(profiles), "summary": summary, "picks": picks}


@dataclass
class AdviceEvaluation:
    """Both evaluations and how long they took."""

    reference: dict[str, Any]
    power_limits: dict[str, Any] | None
    seconds: float
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "targets": {
                "median_regret": TARGET_MEDIAN_REGRET,
                "violation_rate": TARGET_VIOLATIONS,
            },
            "reference": self.reference,
            "power_limits": self.power_limits,
            "seconds": self.seconds,
            "notes": self.notes,
        }


def evaluate_advice(
    runs: pd.DataFrame,
    *,
    profiles: Sequence[Any] | None = None,
    models: Sequence[str] | None = None,
    fit: Callable[[pd.DataFrame], tuple[PreModel | None, str]] | None = None,
    hold_out: str = "model",
) -> AdviceEvaluation:
    """The reference evaluation (holding out each model, or each GPU) and, given Zeus
    ``profiles``, the power-limit one."""
    started = time.perf_counter()
    reference = evaluate_reference(runs, models=models, fit=fit, hold_out=hold_out)
    notes = []
    limits = None
    if profiles is not None:
        limits = evaluate_power_limits(profiles)
    else:
        notes.append("power limits not scored: give --profiles FOLDER (the Zeus profiles)")
    return AdviceEvaluation(reference, limits, time.perf_counter() - started, notes)


def _pct(value: float) -> str:
    return f"{value * 100:.1f} %"


def evaluation_markdown(evaluation: AdviceEvaluation) -> str:
    """The summary tables as Markdown."""
    lines = [
        "| knobs | max slowdown | advice | median regret | p90 regret | violations | "
        "realised saving (median) | best possible saving (median) | lowest prediction: regret "
        "median / p90 / violations | amp-bf16 rule: regret median / p90 / violations |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for knob_name, by_limit in evaluation.reference["summary"].items():
        for label, both in by_limit.items():
            a, low, r = both["advisor"], both["lowest prediction"], both["amp-bf16 rule"]
            if not a.get("n"):
                continue
            name = f"**{label}**" if label == "all" else label
            lines.append(
                f"| {knob_name} | {name} | {a['n']} | {_pct(a['median_regret'])} | "
                f"{_pct(a['p90_regret'])} | {_pct(a['violation_rate'])} | "
                f"{_pct(a['median_realised_saving'])} | {_pct(a['median_best_saving'])} | "
                f"{_pct(low['median_regret'])} / {_pct(low['p90_regret'])} / "
                f"{_pct(low['violation_rate'])} | {_pct(r['median_regret'])} / "
                f"{_pct(r['p90_regret'])} / {_pct(r['violation_rate'])} |"
            )
    if evaluation.power_limits is not None:
        lines += [
            "",
            f"Power limit, leave one Zeus profile file out ({evaluation.power_limits['files']} "
            "files):",
            "",
            "| max slowdown | advice | median regret | p90 regret | violations | realised saving "
            "(median) | best possible saving (median) |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for label, s in evaluation.power_limits["summary"].items():
            lines.append(
                f"| {label} | {s['n']} | {_pct(s['median_regret'])} | {_pct(s['p90_regret'])} | "
                f"{_pct(s['violation_rate'])} | {_pct(s['median_realised_saving'])} | "
                f"{_pct(s['median_best_saving'])} |"
            )
    lines += ["", *(f"note: {n}" for n in evaluation.notes)]
    return "\n".join(lines).rstrip() + "\n"


__all__ = [
    "KNOB_SETS",
    "SLOWDOWNS",
    "AdviceEvaluation",
    "evaluate_advice",
    "evaluate_power_limits",
    "evaluate_reference",
    "evaluation_markdown",
    "measured_per_image",
    "predicted_per_image",
    "reachable",
    "score_pick",
    "summarise",
]
