"""The advisor before training: every allowed configuration predicted by PRE (and, for power
limits, by the power-cap law without capping), then ranked (``ranking.rank``).

Every candidate keeps the images of the configuration given (the same ``samples``), so energy
and time compare the same work. A stored run can correct PRE (``Correction``): its measured
energy and time over PRE's prediction for its own configuration scale every candidate.

Power limits: each uncapped candidate is turned into a run of its predicted duration and GPU
energy (``GPU_SHARE`` of the total, the rest CPU and RAM; or the stored run's own power trace)
and capped at 95 % .. 50 % of TDP by ``power_caps.predict_limit``; the interval is PRE's,
widened by the law's leave-one-file-out error on the Zeus profiles (``CAP_ENERGY_WIDEN``,
``CAP_TIME_WIDEN``). Nothing here sets a power limit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from wattlab.errors import ConfigError
from wattlab.estimate.advise.knobs import knob_notes, parse_allow
from wattlab.estimate.advise.ranking import Limit, Option, Setting, advice_sentence, rank
from wattlab.estimate.features import CIFAR_TRAIN_SIZE, DEFAULT_IMAGE_SIZE, default_samples
from wattlab.estimate.pre import PreModel
from wattlab.estimate.specs import NAME_WAY_OUT, lookup_gpu
from wattlab.monitor.carbon import CarbonSettings, co2e
from wattlab.train.config import PRECISIONS

# median energy_gpu_j / energy_total_j over the 168 H200 reference runs of the 7 models (0.916
# with the 15 runs of the families grid added); a test checks it against the shipped CSV to 1 %
GPU_SHARE = 0.923
CAP_FRACTIONS = tuple(round(1.0 - 0.05 * i, 2) for i in range(1, 11))  # 95 % .. 50 % of TDP
# the cap law's leave-one-file-out MAPE on the 12 Zeus A40/V100 files (docs/estimation.md)
CAP_ENERGY_WIDEN = 1.092
CAP_TIME_WIDEN = 1.075
# a change must be predicted to save at least this share to lead (ranking.rank's min_saving)
MIN_PREDICTED_SAVING = 0.05


@dataclass(frozen=True)
class Correction:
    """What one stored run measured against PRE's prediction for its configuration:
    every candidate's energy and time are scaled by these ratios."""

    run_id: int
    energy_ratio: float  # measured / predicted
    time_ratio: float
    measured_energy_j: float
    measured_duration_s: float
    trace: Any = None  # power_caps.UncappedRun of the run (its power trace), if any

    def describe(self) -> str:
        return (
            f"PRE corrected by run {self.run_id}: measured/predicted energy "
            f"x{self.energy_ratio:.3f}, time x{self.time_ratio:.3f}"
        )


@dataclass
class Advice:
    """The ranked rows and what they rest on. ``rows[0]`` is the advice."""

    rows: list[Option]
    sentence: str
    limit: Limit
    allowed: tuple[str, ...]
    current: Setting
    model: str
    samples: float
    gpu_name: str
    notes: list[str] = field(default_factory=list)
    carbon: CarbonSettings = field(default_factory=CarbonSettings)
    probe: Any = None  # probe.ProbeReport when the candidates were measured (--probe)
    # what was not imported: a stored run's model factory the user did not name again
    not_imported: str | None = None

    def __iter__(self) -> Iterator[Option]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> Option:
        return self.rows[index]

    def to_dict(self) -> dict[str, Any]:
        return {
            "advice": self.sentence,
            "model": self.model,
            "gpu_name": self.gpu_name,
            "samples": self.samples,
            "limit": {
                "max_slowdown": self.limit.max_slowdown,
                "deadline_s": self.limit.deadline_s,
                "describe": self.limit.describe(),
            },
            "allowed": list(self.allowed),
            "current": self.current.__dict__,
            "rows": [row.to_dict() for row in self.rows],
            "notes": self.notes,
            "carbon": self.carbon.to_dict(),
            "probe": None if self.probe is None else self.probe.to_dict(),
            "not_imported": self.not_imported,
        }


def limit_from(max_slowdown_percent: float | None, deadline_s: float | None) -> Limit:
    """The limit of ``--max-slowdown PCT`` or ``--deadline-s S``."""
    slowdown = None if max_slowdown_percent is None else float(max_slowdown_percent) / 100.0
    return Limit(max_slowdown=slowdown, deadline_s=deadline_s)


def advise(
    *,
    model: str | None = None,
    model_factory: str | None = None,
    gpu_name: str,
    epochs: float | None = None,
    train_size: int = CIFAR_TRAIN_SIZE,
    batch_size: int = 256,
    precision: str = "fp32",
    gpus: int = 1,
    image_size: int = DEFAULT_IMAGE_SIZE,
    stem: str = "cifar",
    samples: float | None = None,
    max_slowdown_percent: float | None = None,
    deadline_s: float | None = None,
    allow: str | tuple[str, ...] | None = None,
    pre_model: PreModel | None = None,
    pre_fit: Callable[[], tuple[PreModel | None, str]] | None = None,
    carbon: CarbonSettings | None = None,
    correction: Correction | None = None,
) -> Advice:
    """The least-energy configurations of this training within a time limit, ranked.

    The configuration the arguments describe is the current one. ``allow``: knob names (a
    comma-separated string as ``--allow`` takes, or a tuple; default ``knobs.DEFAULT_KNOBS``).
    PRE comes from ``pre_model``, or ``pre_fit()`` (default: the shipped reference, fitted once
    and cached). ConfigError for bad input: an unknown knob, model or GPU, a deadline below the
    fastest prediction, both limits at once.
    """
    from wattlab.estimate.predict import _model_name

    allowed = (
        parse_allow(allow)
        if allow is None or isinstance(allow, str)
        else parse_allow(",".join(allow))
    )
    limit = limit_from(max_slowdown_percent, deadline_s)
    name = _model_name(model, model_factory)
    if precision not in PRECISIONS:
        raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}.")
    if epochs is None and samples is None:
        raise ConfigError("give the training length: --epochs N.")
    spec = lookup_gpu(gpu_name, way_out=NAME_WAY_OUT)
    if ":" in name:  # a factory: the same checks as wattlab run makes before training
        from wattlab.train.models import check_model

        check_model(name, stem=stem, num_classes=10, image_size=int(image_size))
    if samples is None:
        assert epochs is not None
        samples = default_samples(epochs, train_size, batch_size)
        if samples <= 0:
            raise ConfigError(
                f"batch_size {batch_size} leaves no full batch in a training set of {train_size}."
            )
    if epochs is None:
        epochs = float(samples) / train_size
    if pre_model is None:  # PRE is to be fitted (or read from its cache)
        _check_counting(name, stem, int(image_size))
    pre = _pre(pre_model, pre_fit)
    assert pre.seen is not None
    carbon = carbon or CarbonSettings()
    current = Setting(precision, int(batch_size), int(gpus))

    precisions = [p for p in PRECISIONS if p == precision or spec.supports(p)]
    if "precision" not in allowed:
        precisions = [precision]
    batches = [int(batch_size)]
    if "batch" in allowed:
        batches = sorted(
            {int(batch_size), *(int(b) for b in pre.seen.batch_sizes if b <= train_size)}
        )
    common = {
        "model": name,
        "gpus": gpus,
        "epochs": epochs,
        "gpu_name": spec.name,
        "stem": stem,
        "image_size": image_size,
        "train_size": train_size,
        "samples": samples,
    }
    options: list[Option] = []
    notes: list[str] = []
    for p in precisions:
        for b in batches:
            prediction = pre.predict_config(**common, precision=p, batch_size=b)
            option = Option(
                setting=Setting(p, b, int(gpus)),
                energy_j=prediction.energy_j,
                duration_s=prediction.duration_s,
                energy_low_j=prediction.energy_low_j,
                energy_high_j=prediction.energy_high_j,
                duration_low_s=prediction.duration_low_s,
                duration_high_s=prediction.duration_high_s,
                notes=prediction.notes,
            )
            if correction is not None:
                option = _corrected(option, correction, is_current=option.setting == current)
            options.append(option)
            if option.setting == current and prediction.notes:
                notes.append(f"PRE for the current configuration: {prediction.notes}")
    if "power-limit" in allowed:
        options += [
            capped
            for option in list(options)
            for capped in _capped(option, spec.tdp_w, int(gpus), correction, current)
        ]
    options = [_with_co2e(o, carbon) for o in options]
    ranked = rank(options, current, limit, MIN_PREDICTED_SAVING)
    notes += knob_notes(allowed)
    if "power-limit" in allowed:
        notes.append(
            "power limits are predicted by the power-cap law without capping (interval widened "
            f"x{CAP_ENERGY_WIDEN:g} energy, x{CAP_TIME_WIDEN:g} time for its leave-one-file-out "
            "error); this advice changes no GPU setting"
        )
    if correction is not None:
        notes.append(correction.describe())
    notes.append("PRE: " + pre.describe())
    return Advice(
        rows=ranked,
        sentence=advice_sentence(ranked, limit, MIN_PREDICTED_SAVING),
        limit=limit,
        allowed=allowed,
        current=current,
        model=name,
        samples=float(samples),
        gpu_name=spec.name,
        notes=notes,
        carbon=carbon,
    )


def _check_counting(model: str, stem: str, image_size: int) -> None:
    """Before PRE's fit: without the train extra no model's cost can be counted, which is one
    sentence now rather than after a fit. (The cost is cached for the prediction; a model that
    cannot be built is left to PRE, which imputes a stored run's recorded cost.)"""
    from wattlab.errors import WattlabError
    from wattlab.estimate import features
    from wattlab.extras import MissingExtraError

    try:
        features.model_cost(model, stem=stem, image_size=image_size)
    except MissingExtraError:
        raise
    except WattlabError:
        pass


def _pre(
    pre_model: PreModel | None, pre_fit: Callable[[], tuple[PreModel | None, str]] | None
) -> PreModel:
    if pre_model is not None:
        return pre_model
    if pre_fit is None:
        from wattlab.estimate import pre_cache

        pre_fit = pre_cache.fit_reference
    model, why = pre_fit()
    if model is None:
        from wattlab.errors import DataError

        raise DataError(f"PRE cannot be fitted, so nothing can be advised: {why}")
    return model


def _corrected(option: Option, correction: Correction, *, is_current: bool) -> Option:
    """``option`` scaled by the run's measured/predicted ratios; the current one is the run."""
    if is_current:
        e, t = correction.measured_energy_j, correction.measured_duration_s
        return replace(
            option,
            energy_j=e,
            duration_s=t,
            energy_low_j=e,
            energy_high_j=e,
            duration_low_s=t,
            duration_high_s=t,
            source=f"measured (run {correction.run_id})",
        )
    return option.scaled(
        correction.energy_ratio,
        correction.time_ratio,
        f"predicted, corrected by run {correction.run_id}",
    )


def _capped(
    option: Option,
    tdp_w: float,
    gpus: int,
    correction: Correction | None,
    current: Setting,
) -> list[Option]:
    """``option`` under each power limit that bites (below the draw's peaks)."""
    from wattlab.estimate import power_caps

    run = None
    if correction is not None and correction.trace is not None and option.setting == current:
        run = correction.trace  # the stored run's own power trace
    if run is None:
        gpu_j = option.energy_j * GPU_SHARE
        run = power_caps.from_mean_draw(
            option.duration_s, [gpu_j / gpus] * gpus, tdp_w, tdp_w, option.energy_j - gpu_j
        )
    base_energy = run.gpu_energy_j + run.other_energy_j
    out = []
    for fraction in CAP_FRACTIONS:
        limit_w = round(fraction * tdp_w)
        p = power_caps.predict_limit(run, float(limit_w))
        if p.case.startswith("cap above the draw"):
            continue  # changes nothing: the uncapped row already says it
        e_ratio, t_ratio = p.energy_j / base_energy, p.duration_s / run.duration_s
        out.append(
            replace(
                option,
                setting=replace(option.setting, power_limit_w=float(limit_w)),
                energy_j=option.energy_j * e_ratio,
                duration_s=option.duration_s * t_ratio,
                energy_low_j=option.energy_low_j * e_ratio / CAP_ENERGY_WIDEN,
                energy_high_j=option.energy_high_j * e_ratio * CAP_ENERGY_WIDEN,
                duration_low_s=option.duration_low_s * t_ratio / CAP_TIME_WIDEN,
                duration_high_s=option.duration_high_s * t_ratio * CAP_TIME_WIDEN,
                source=(option.source if option.source.startswith("predicted") else "predicted")
                + " + cap law",
                notes=f"cap law: {p.case}",
            )
        )
    return out


def _with_co2e(option: Option, carbon: CarbonSettings) -> Option:
    return replace(
        option,
        co2e_kg=co2e(option.energy_j, carbon).value_kg,
        co2e_low_kg=co2e(option.energy_low_j, carbon).low_kg,
        co2e_high_kg=co2e(option.energy_high_j, carbon).high_kg,
    )


def _finite(value: float) -> bool:
    return math.isfinite(value)


__all__ = [
    "CAP_ENERGY_WIDEN",
    "CAP_FRACTIONS",
    "CAP_TIME_WIDEN",
    "GPU_SHARE",
    "MIN_PREDICTED_SAVING",
    "Advice",
    "Correction",
    "advise",
    "limit_from",
]
