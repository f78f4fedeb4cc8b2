"""Advice from one stored run (``wattlab advise --db DB --run ID``).

The run's configuration is the current one. PRE predicts that configuration; the run's measured
energy and budget time over that prediction correct every other candidate (``Correction``); the
current row is the measurement itself; the power-limit rows of the current configuration come
from the run's own power trace (``power_caps.run_from_store``). Runs stored by the framework
callbacks and by sweeps of a user's script work the same way; when PRE cannot count the run's
model (a class name rather than a torchvision name or a factory) or the run names no precision,
only the power-limit knob is advised, from the trace, and the notes say why.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

from wattlab.errors import ConfigError, DataError
from wattlab.estimate.advise.advisor import (
    CAP_ENERGY_WIDEN,
    CAP_TIME_WIDEN,
    MIN_PREDICTED_SAVING,
    Advice,
    Correction,
    _capped,
    _pre,
    _with_co2e,
    advise,
    limit_from,
)
from wattlab.estimate.advise.knobs import knob_notes, parse_allow
from wattlab.estimate.advise.ranking import Option, Setting, advice_sentence, rank
from wattlab.estimate.pre import PreModel
from wattlab.estimate.specs import lookup_gpu
from wattlab.experiment.db.stored_run import StoredRun
from wattlab.monitor.carbon import CarbonSettings
from wattlab.train.config import PRECISIONS
from wattlab.train.factory_ref import factory_not_imported, is_factory, same_factory


def advise_from_run(
    runs: pd.DataFrame,
    windows: pd.DataFrame,
    trace: pd.DataFrame,
    run_id: int,
    *,
    max_slowdown_percent: float | None = None,
    deadline_s: float | None = None,
    allow: str | tuple[str, ...] | None = None,
    pre_model: PreModel | None = None,
    pre_fit: Callable[[], tuple[PreModel | None, str]] | None = None,
    carbon: CarbonSettings | None = None,
    model_factory: str | None = None,
) -> Advice:
    """Advice starting from stored run ``run_id`` (``runs``/``windows``/``trace``: the store's
    tables). DataError when the run is not there, did not finish, or lacks what advice needs.

    A model factory (``FILE.py:FUNC``) the run names is imported (its code run) only when
    ``model_factory`` names it again: a database never makes wattlab run code. Otherwise only
    the power limit is advised, and ``Advice.not_imported`` says what would be imported."""
    from wattlab.estimate import power_caps

    run = StoredRun.in_frame(runs, run_id)
    if run is None:
        raise DataError(f"there is no run with id {run_id} in the database.")
    if run.status != "ok":
        raise DataError(f"run {run_id} did not finish (status {run.status!r}).")
    if run.device == "cpu":
        raise DataError(f"run {run_id} ran on the CPU; the advisor's knobs are GPU settings.")
    duration, energy = run.duration_s, run.energy_total_j
    samples = None if run.samples is None else float(run.samples)
    if not duration or not energy or duration <= 0 or energy <= 0:
        raise DataError(f"run {run_id} lacks the measured energy and duration advice starts from.")
    gpu_name = run.gpu_name or None
    if gpu_name is None:
        raise DataError(f"run {run_id} does not name its GPU, so no GPU's specs can be used.")
    try:
        spec = lookup_gpu(gpu_name.split(",")[0])
    except ConfigError:
        raise DataError(
            f"run {run_id} ran on {gpu_name!r}, a GPU not in wattlab/estimate/gpu_specs.csv, so "
            "advise has no specs to start from; give --model, --gpu-name (a known GPU) and "
            "--epochs instead."
        ) from None
    try:
        uncapped = power_caps.run_from_store(runs, windows, trace, run_id)
    except DataError:
        uncapped = None  # no GPU energy or TDP: no power-limit rows from the trace
    model, precision = run.model or None, run.precision or None
    gpus = run.gpus or 1
    batch = run.batch_size or 0
    allowed = parse_allow(allow if allow is None or isinstance(allow, str) else ",".join(allow))
    why_not = None
    not_imported = None
    if model is None:
        why_not = f"run {run_id} names no model"
    elif is_factory(model) and not same_factory(model, model_factory):
        why_not = not_imported = factory_not_imported(run_id, model)
    elif precision not in PRECISIONS:
        why_not = f"run {run_id} names no precision PRE knows ({precision!r})"
    elif not samples or batch <= 0:
        why_not = f"run {run_id} lacks its images or batch size"
    if why_not is None:
        assert model is not None and precision is not None and samples is not None
        train_size = max(int(run.train_size or samples), batch)
        epochs = run.epochs or samples / train_size
        stem = run.stem or "cifar"
        image_size = run.image_size or 32
        pre = _pre(pre_model, pre_fit)
        try:
            predicted = pre.predict_config(
                model=model, gpus=gpus, precision=precision, epochs=epochs, gpu_name=spec.name,
                batch_size=batch, stem=stem, image_size=image_size, train_size=train_size,
                samples=samples,
            )  # fmt: skip
        except ConfigError as error:
            why_not = f"PRE cannot count run {run_id}'s model {model!r} ({error})"
        else:
            correction = Correction(
                run_id=run_id,
                energy_ratio=energy / predicted.energy_j,
                time_ratio=duration / predicted.duration_s,
                measured_energy_j=energy,
                measured_duration_s=duration,
                trace=uncapped,
            )
            return advise(
                model=model,
                gpus=gpus,
                precision=precision,
                epochs=epochs,
                gpu_name=spec.name,
                batch_size=batch,
                stem=stem,
                image_size=image_size,
                train_size=train_size,
                samples=samples,
                max_slowdown_percent=max_slowdown_percent,
                deadline_s=deadline_s,
                allow=allowed,
                pre_model=pre,
                carbon=carbon,
                correction=correction,
            )
    limited = _limits_only(
        run_id, why_not, uncapped, energy, duration, samples, model, spec.name, gpus, batch,
        precision, allowed, limit_from(max_slowdown_percent, deadline_s), carbon,
    )  # fmt: skip
    limited.not_imported = not_imported
    return limited


def _limits_only(
    run_id: int,
    why_not: str,
    uncapped: Any,
    energy: float,
    duration: float,
    samples: float | None,
    model: str | None,
    gpu_name: str,
    gpus: int,
    batch: int,
    precision: str | None,
    allowed: tuple[str, ...],
    limit: Any,
    carbon: CarbonSettings | None,
) -> Advice:
    """Only the power-limit knob, from the run's own trace (PRE cannot predict the others)."""
    if uncapped is None or "power-limit" not in allowed:
        raise DataError(
            f"nothing can be advised for run {run_id}: {why_not}, and "
            + (
                "the power-limit knob is not allowed."
                if uncapped is not None
                else "it lacks the GPU energy and TDP the power-limit knob needs."
            )
        )
    carbon = carbon or CarbonSettings()
    current = Setting(precision or "as run", batch, gpus)
    measured = Option(
        setting=current,
        energy_j=energy,
        duration_s=duration,
        energy_low_j=energy,
        energy_high_j=energy,
        duration_low_s=duration,
        duration_high_s=duration,
        source=f"measured (run {run_id})",
    )
    correction = Correction(run_id, 1.0, 1.0, energy, duration, trace=uncapped)
    options = [measured, *_capped(measured, uncapped.tdp_w, gpus, correction, current)]
    ranked = rank([_with_co2e(o, carbon) for o in options], current, limit, MIN_PREDICTED_SAVING)
    notes = [
        f"only the power limit is advised: {why_not}, so PRE cannot predict other settings",
        *knob_notes(allowed),
        "power limits are predicted by the power-cap law from the run's "
        f"{uncapped.source} without capping (interval x{CAP_ENERGY_WIDEN:g} energy, "
        f"x{CAP_TIME_WIDEN:g} time); this advice changes no GPU setting",
    ]
    return Advice(
        rows=ranked,
        sentence=advice_sentence(ranked, limit, MIN_PREDICTED_SAVING),
        limit=limit,
        allowed=allowed,
        current=current,
        model=model or "unknown",
        samples=float(samples or 0.0),
        gpu_name=gpu_name,
        notes=notes,
        carbon=carbon,
    )


__all__ = ["advise_from_run"]
