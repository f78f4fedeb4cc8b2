"""PRE (``wattlab.estimate.pre``): a regression learned from other measured runs, fitted on the
target. In ``estimate evaluate`` it learns across runs, so each run is predicted by a model
fitted without the run's group (its configuration, model, precision, family or batch size);
before training, by the model fitted on the reference runs (or ``--db``/``--data``)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from wattlab.estimate.baselines import Estimate, cannot_apply, made
from wattlab.estimate.methods.base import EstimationMethod, HeldOut, PlannedRun, StoredRuns

NAME = "pre"


def held_out(
    stored: StoredRuns, group: HeldOut
) -> tuple[dict[Hashable, Estimate], dict[Hashable, str]]:
    """PRE's prediction of each run from a model fitted without the run's group, and why the
    others were left out, by runs index. The target's energy stands in for ``energy_total_j``
    in the runs it learns from."""
    import pandas as pd

    from wattlab.errors import DataError
    from wattlab.estimate.pre import fit_pre, training_table

    runs, settings = stored.runs, stored.settings
    estimates: dict[Hashable, Estimate] = {}
    excluded: dict[Hashable, str] = {}
    learn = runs.copy()
    learn["energy_total_j"] = runs[list(stored.columns)].apply(pd.to_numeric).sum(axis=1)
    try:
        usable, features, left_out = training_table(learn)
    except DataError as error:
        return estimates, {index: str(error).rstrip(".") for index in runs.index}
    excluded.update({i: f"PRE has no features for it: {r}" for i, r in left_out.items()})
    column, what = group.column, group.what
    if column in usable and usable[column].notna().all():
        groups = usable[column].astype(str)
    elif group.protocol == "loco":
        groups = features.drop(columns=["feature_error"]).astype(str).agg("|".join, axis=1)
    else:
        for index in usable.index:
            excluded[index] = f"the runs table has no {column} to {what} by"
        return estimates, excluded
    for value in pd.unique(groups):
        held = groups.index[groups == value]
        try:
            model = fit_pre(
                usable.drop(index=held),
                search_iter=settings["pre_search_iter"],
                families=tuple(settings["pre_families"]),
                min_configs=settings["pre_min_configs"],
            )
            predicted = model.predict(features.loc[held])
        except (DataError, ValueError) as error:
            for index in held:
                excluded[index] = (
                    f"{str(error).rstrip('.')} once its own {column} ({value}) is held out"
                )
            continue
        for index, row in predicted.iterrows():
            estimates[index] = made(
                NAME,
                row["energy_j"],
                row["duration_s"],
                "; ".join(
                    n for n in (f"fitted without this run's {column} ({what})", row["notes"]) if n
                )
                + f"; {model.describe()}",
                energy_low_j=row["energy_low_j"],
                energy_high_j=row["energy_high_j"],
            )
    return estimates, excluded


def evaluate(stored: StoredRuns, group: HeldOut | None) -> dict[Hashable, Estimate]:
    if group is None:
        raise ValueError("PRE learns across runs: it is evaluated under a protocol")
    estimates, excluded = held_out(stored, group)
    return {
        index: estimates.get(index) or cannot_apply(NAME, excluded.get(index, "not predicted"))
        for index in stored.runs.index
    }


def predict(planned: PlannedRun) -> Estimate:
    from wattlab.errors import DataError
    from wattlab.estimate.pre import fit_pre

    if planned.spec_name is None:
        return cannot_apply(
            NAME,
            f"PRE needs the GPU's specs from the table, and {planned.gpu_name!r} is not in it",
        )
    pre_model = planned.pre_model
    if pre_model is None and planned.pre_fit is not None:
        pre_model, why = planned.pre_fit()
        if pre_model is None:
            return cannot_apply(NAME, why)
    if pre_model is None:
        if planned.runs_df is None:
            return cannot_apply(
                NAME, "PRE needs measured runs to learn from: give --db FILE or --data CSV"
            )
        try:
            pre_model = fit_pre(planned.runs_df)
        except DataError as error:
            return cannot_apply(NAME, str(error))
    prediction = pre_model.predict_config(
        model=planned.model,
        gpus=planned.gpus,
        precision=planned.precision,
        epochs=planned.epochs,
        gpu_name=planned.spec_name or "",
        batch_size=planned.batch_size,
        stem=planned.stem,
        image_size=planned.image_size,
        train_size=planned.train_size,
        power_limit_w=planned.power_limit_w,
        gpu_tdp_w=planned.gpu_tdp_w,
        gflops_per_sample=planned.forward_flops_per_sample / 1e9,
        params=planned.params,
        samples=planned.samples,
    )
    # the prediction's own notes say what it extrapolates (model, precision, batch, GPU transfer)
    notes = "; ".join(n for n in (prediction.notes, pre_model.describe()) if n)
    if planned.cost_source != "counted":  # no torch: no model to count (issue 48)
        notes = f"{notes}; {WITHOUT_TORCH}"
    return made(
        NAME,
        prediction.energy_j,
        prediction.duration_s,
        notes,
        planned.carbon,
        energy_low_j=prediction.energy_low_j,
        energy_high_j=prediction.energy_high_j,
    )


# what PRE says when torch is not installed: the fit it can make then is a poorer one
WITHOUT_TORCH = (
    "without torch PRE knows each model's FLOPs and parameters only (from the shipped reference "
    "data), not its activations and layers, so it fits and predicts without its memory-traffic "
    "and kernel-launch terms: a worse fit than with torch (the CV error above is this fit's; "
    "install torch, pip install 'wattlab[train]', for the full one)"
)


def how(settings: Mapping[str, Any]) -> str:
    return "PRE is fitted without the held-out run's group"


METHOD = EstimationMethod(
    name=NAME,
    label="PRE",
    inputs=("nothing measured: other runs only",),
    evaluate=evaluate,
    how=how,
    learns=True,
    predict=predict,
)
