"""Sweep specifications: a base RunConfig, a grid of axes, repetitions and a run order.

A spec is a YAML file (or a preset shipped with wattlab)::

    name: paper-12
    base: {model: resnet50, stem: cifar, dataset: cifar10, epochs: 10, batch_size: 256}
    grid: {gpus: [1, 2], precision: [fp32, amp-bf16], power_limit_w: [300, 250, 200]}
    repetitions: 3
    order: random        # random | sequential
    order_seed: null     # drawn and recorded by the runner when null
    warmup_runs: 1       # untimed runs before the sweep, not stored as results
    cooldown_s: 60       # pause between runs (s), at most 3600
    cooldown_until_c: 45 # optional: end the pause early once every GPU is at or below 45 C
    codecarbon: true
    baseline: {gpus: 1, precision: fp32, power_limit_w: 300}
    adjust:              # optional: settings for some grid points only, applied in order
      - when: {precision: fp32}            # an axis value, or a list of them
        set: {budget_samples: 65536}       # any base setting that is not a grid axis
    only:                # optional: run only these grid points, in this order
      - {gpus: 1, precision: fp32, power_limit_w: 300}

Every mistake is a ConfigError of one sentence naming the path in the YAML, such as
``grid.power_limit_w[1]: expected a number, got 'abc'.``
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import (
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from wattlab.bounds import BOUNDS, check_number
from wattlab.errors import ConfigError, echo
from wattlab.experiment.specs.base import (
    SpecBase,
    check_baseline,
    check_run_count,
    describe,
    point_text,
    read_spec,
    spec_digest,
    unknown_key,
)
from wattlab.step import schedule
from wattlab.train.config import NOT_HASHED, RunConfig, format_validation_error

_RUN_FIELDS = tuple(RunConfig.model_fields)
# Set by the sweep itself: `sweep` is the spec's name, `codecarbon` a top-level key.
_SET_BY_SPEC = {
    "sweep": "it is set to the sweep's name",
    "codecarbon": "set codecarbon at the top level of the spec",
}


@dataclass(frozen=True)
class PlannedRun:
    """One run of a sweep: its position in the order, configuration and repetition (0-based)."""

    index: int
    config: RunConfig
    repetition: int
    label: str
    config_hash: str


# -- messages ------------------------------------------------------------------------------


@cache
def _adapter(field: str) -> TypeAdapter[Any]:
    annotation = RunConfig.model_fields[field].annotation
    if annotation is None:  # pydantic's type allows it; every RunConfig field is annotated
        raise KeyError(field)
    return TypeAdapter(annotation)


def _check_value(field: str, value: Any, where: str) -> Any:
    """Validate one RunConfig field value (strictly: YAML gives typed values); return it coerced."""
    try:
        checked = _adapter(field).validate_python(value, strict=True)
    except ValidationError as error:
        raise ConfigError(describe(error.errors()[0], where)) from None
    if field in BOUNDS:
        check_number(field, checked, where, spec=True)
    return checked


def _check_run_key(key: object, section: str) -> str:
    if not isinstance(key, str) or key not in _RUN_FIELDS:
        raise unknown_key(key, f"in {section}", _RUN_FIELDS)
    if key in _SET_BY_SPEC:
        raise ConfigError(f"{section}.{key}: not allowed here; {_SET_BY_SPEC[key]}.")
    return key


def _renamed_project_after(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with the deprecated ``project_after`` (in base and in adjust rules' set) renamed
    to ``project_after_epochs`` or ``project_after_fraction``, with one FutureWarning."""

    def rename(section: Any, where: str) -> Any:
        if not isinstance(section, dict) or schedule.LEGACY not in section:
            return section
        value = section[schedule.LEGACY]
        try:
            key, number = schedule.from_legacy(value)
        except ConfigError:
            raise ConfigError(
                f"{where}.project_after: expected a whole number of epochs (>= 1) or a fraction "
                f"of the budget in (0, 1), got {echo(value)}."
            ) from None
        if schedule.EPOCHS in section or schedule.FRACTION in section:
            raise ConfigError(
                f"{where}.project_after: the old spelling of project_after_epochs and "
                "project_after_fraction; give only one of them."
            )
        schedule.warn_legacy(value, f"{where}.project_after", stacklevel=5)
        renamed = {k: v for k, v in section.items() if k != schedule.LEGACY}
        renamed[key] = number
        return renamed

    out = dict(data)
    if "base" in out:
        out["base"] = rename(out["base"], "base")
    if isinstance(out.get("adjust"), list):
        out["adjust"] = [
            {**rule, "set": rename(rule.get("set"), f"adjust[{i}].set")}
            if isinstance(rule, dict) and "set" in rule
            else rule
            for i, rule in enumerate(out["adjust"])
        ]
    return out


def _legacy_project_after(section: dict[str, Any]) -> dict[str, Any]:
    """For the spec hash: ``project_after_epochs`` / ``project_after_fraction`` spelled as the
    one float ``project_after`` they replace (lossless: epochs are >= 1, fractions < 1), so a
    sweep registered before the rename resumes."""
    out = {k: v for k, v in section.items() if k not in (schedule.EPOCHS, schedule.FRACTION)}
    for key in (schedule.EPOCHS, schedule.FRACTION):
        if section.get(key) is not None:
            out[schedule.LEGACY] = float(section[key])
    return out


# -- the spec ------------------------------------------------------------------------------


class SweepSpec(SpecBase):
    """A validated sweep: ``base`` + every point of ``grid``, ``repetitions`` times each.

    ``base`` and the grid axes take RunConfig fields; the fields every spec shares
    (repetitions, order, warm-up, cool-down, baseline) are ``SpecBase``'s.
    """

    base: dict[str, Any] = Field(default_factory=dict)
    grid: dict[str, list[Any]]
    codecarbon: bool = False
    # settings for some grid points only: [{when: {axis: value or [values]}, set: {field: v}}]
    adjust: list[dict[str, Any]] = Field(default_factory=list)
    # run only these grid points, in this order (each names a value of every axis): a part of
    # the product, such as a fractional design or a priority order that may be cut short
    only: list[dict[str, Any]] | None = None

    # -- validation (ConfigError passes through pydantic unchanged) ------------------------
    @field_validator("base")
    @classmethod
    def _check_base(cls, base: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for key, value in base.items():
            _check_run_key(key, "base")
            out[key] = _check_value(key, value, f"base.{key}")
        return out

    @field_validator("grid")
    @classmethod
    def _check_grid(cls, grid: dict[str, list[Any]]) -> dict[str, list[Any]]:
        if not grid:
            raise ConfigError(
                "grid: no axes; give at least one, such as precision: [fp32, amp-bf16]."
            )
        check_run_count([len(v) if isinstance(v, list) else 1 for v in grid.values()], 1)
        out = {}
        for key, values in grid.items():
            _check_run_key(key, "grid")
            if key in NOT_HASHED:
                raise ConfigError(
                    f"grid.{key}: {key} does not change what is measured, so it cannot be a "
                    "grid axis; set it in base."
                )
            if not values:
                raise ConfigError(f"grid.{key}: the list is empty; give at least one value.")
            checked: list[Any] = []
            for i, value in enumerate(values):
                value = _check_value(key, value, f"grid.{key}[{i}]")
                if value in checked:
                    raise ConfigError(f"grid.{key}[{i}]: {echo(value)} appears twice in this axis.")
                checked.append(value)
            out[key] = checked
        return out

    @field_validator("adjust")
    @classmethod
    def _check_adjust(cls, rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for i, rule in enumerate(rules):
            where = f"adjust[{i}]"
            if not isinstance(rule, dict) or set(rule) != {"when", "set"}:
                raise ConfigError(
                    f"{where}: expected a mapping with the keys when and set, such as "
                    "{when: {precision: fp32}, set: {budget_samples: 65536}}, got "
                    f"{echo(rule)}."
                )
            when, settings = rule["when"], rule["set"]
            for part, value in (("when", when), ("set", settings)):
                if not isinstance(value, dict) or not value:
                    raise ConfigError(f"{where}.{part}: expected a non-empty mapping.")
            checked_when = {}
            for key, value in when.items():
                _check_run_key(key, f"{where}.when")
                values = value if isinstance(value, list) else [value]
                checked_when[key] = [
                    _check_value(key, v, f"{where}.when.{key}[{j}]") for j, v in enumerate(values)
                ]
            checked_set = {}
            for key, value in settings.items():
                _check_run_key(key, f"{where}.set")
                checked_set[key] = _check_value(key, value, f"{where}.set.{key}")
            out.append({"when": checked_when, "set": checked_set})
        return out

    def _check_only_against_grid(self) -> None:
        if self.only is None:
            return
        if not self.only:
            raise ConfigError("only: the list is empty; give grid points or leave only out.")
        axes = set(self.grid)
        seen: dict[tuple, int] = {}
        for i, point in enumerate(self.only):
            where = f"only[{i}]"
            if not isinstance(point, dict) or set(point) != axes:
                raise ConfigError(
                    f"{where}: expected a mapping with a value for every grid axis "
                    f"({', '.join(self.grid)}), got {echo(point)}."
                )
            key = []
            for axis in self.grid:
                value = _check_value(axis, point[axis], f"{where}.{axis}")
                if value not in self.grid[axis]:
                    raise ConfigError(
                        f"{where}.{axis}: {echo(value)} is not among grid.{axis} values "
                        f"{echo(self.grid[axis])}."
                    )
                key.append(json.dumps(value, sort_keys=True))
            if tuple(key) in seen:
                raise ConfigError(f"{where}: the same grid point as only[{seen[tuple(key)]}].")
            seen[tuple(key)] = i

    def _check_adjust_against_grid(self) -> None:
        for i, rule in enumerate(self.adjust):
            for key, values in rule["when"].items():
                if key not in self.grid:
                    raise ConfigError(
                        f"adjust[{i}].when.{key}: {key!r} is not a grid axis; axes: "
                        f"{', '.join(self.grid)}."
                    )
                for value in values:
                    if value not in self.grid[key]:
                        raise ConfigError(
                            f"adjust[{i}].when.{key}: {echo(value)} is not among grid.{key} "
                            f"values {echo(self.grid[key])}."
                        )
            for key in rule["set"]:
                if key in self.grid:
                    raise ConfigError(
                        f"adjust[{i}].set.{key}: {key!r} is a grid axis; a rule may set only "
                        "what the grid does not vary."
                    )

    def _adjusted(self, point: dict[str, Any]) -> dict[str, Any]:
        """What the ``adjust`` rules set for this grid point (later rules win)."""
        settings: dict[str, Any] = {}
        for rule in self.adjust:
            if all(point.get(k) in values for k, values in rule["when"].items()):
                settings.update(rule["set"])
        return settings

    @model_validator(mode="after")
    def _check_spec(self) -> SweepSpec:
        if self.only is None:
            check_run_count([len(v) for v in self.grid.values()], self.repetitions)
        else:
            check_run_count([len(self.only)], self.repetitions)
        self._check_only_against_grid()
        self._check_adjust_against_grid()
        for key in self.grid:
            if key in self.base:
                raise ConfigError(f"grid.{key}: {key} is set in both base and grid; keep one.")
        base = self.base
        dataset_axis = self.grid.get("dataset", [base.get("dataset")])
        if "cifar10" in dataset_axis and not base.get("data_dir"):
            raise ConfigError(
                f"sweep {self.name!r} trains on cifar10, so it needs --data-dir DIR "
                "(the cifar-10-batches-py folder) or base.data_dir in the spec."
            )
        self._check_baseline()
        seen: dict[str, dict[str, Any]] = {}
        for point in self.points():
            config = self.run_config(point)
            digest = config.config_hash()
            if digest in seen:
                raise ConfigError(
                    f"grid points {point_text(seen[digest])} and {point_text(point)} describe "
                    "the same run; remove one value."
                )
            seen[digest] = point
        return self

    def _check_baseline(self) -> None:
        if self.baseline is not None:
            grid = self.grid
            baseline = {  # in the grid's form (a power limit of 150 is 150.0)
                k: _check_value(k, v, f"baseline.{k}") if k in grid else v
                for k, v in self.baseline.items()
            }
            check_baseline(baseline, grid, lambda key, value: value in grid[key])

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Any, source: str = "the sweep spec") -> SweepSpec:
        """Validate a parsed YAML document; every mistake is a one-sentence ConfigError."""
        if not isinstance(data, dict):
            kind = "an empty file" if data is None else f"a {type(data).__name__}"
            raise ConfigError(
                f"{source}: a sweep spec must be a mapping of keys (name, base, grid, ...), "
                f"got {kind}."
            )
        allowed = tuple(cls.model_fields)
        for key in data:
            if key not in allowed:
                raise unknown_key(key, "at top level", allowed)
        return cls._validated(_renamed_project_after(data))

    def with_overrides(self, **base_overrides: Any) -> SweepSpec:
        """A copy with ``base`` values replaced (``data_dir``, ``device``, ...); None is ignored.

        ``codecarbon`` sets the top-level key. A grid axis cannot be overridden.
        """
        return SweepSpec.from_dict(_apply_overrides(self.as_dict(), base_overrides))

    # -- the plan --------------------------------------------------------------------------
    def points(self) -> list[dict[str, Any]]:
        """The grid points in grid order (the product of the axes, first axis slowest), or the
        ``only`` points in their listed order."""
        axes = list(self.grid)
        if self.only is not None:
            return [
                {axis: _check_value(axis, point[axis], axis) for axis in axes}
                for point in self.only
            ]
        return [
            dict(zip(axes, combo, strict=True)) for combo in itertools.product(*self.grid.values())
        ]

    def run_config(self, point: dict[str, Any]) -> RunConfig:
        """The RunConfig of one grid point; a ConfigError naming the point when invalid."""
        values = {
            **self.base,
            **self._adjusted(point),
            **point,
            "sweep": self.name,
            "codecarbon": self.codecarbon,
        }
        if "seed" in values:  # given in base, grid or an adjust rule: pinned for every repetition
            values["seed_pinned"] = True
        try:
            return RunConfig(**values)
        except ValidationError as error:
            message = format_validation_error(error)
            raise ConfigError(f"grid point {point_text(point)}: {message}") from None

    @property
    def n_runs(self) -> int:
        """Timed runs in the sweep: grid points x repetitions (warm-up runs excluded)."""
        return len(self.points()) * self.repetitions

    def expand(self, order_seed: int | None = None) -> list[PlannedRun]:
        """Every run of the sweep, in the order to run them (``SpecBase.run_order``: one pass
        over the grid points per repetition, shuffled per pass under ``order: random``).

        Each repetition trains with its own seed (``repetition_config``). A random order
        without a seed is a ValueError: pass the seed ``Store.register_sweep`` returns (it
        draws and records one when the spec has none).
        """
        configs = [self.run_config(p) for p in self.points()]
        plan = self.run_order(configs, order_seed)
        return [
            PlannedRun(
                index=i,
                config=repetition_config(config, rep),
                repetition=rep,
                label=config.label(),
                config_hash=config.config_hash(),
            )
            for i, (config, rep) in enumerate(plan)
        ]

    def spec_hash(self) -> str:
        """A stable hash of what the sweep measures and how: unchanged by YAML formatting,
        comments, key order, ``300`` vs ``300.0``, ``description`` and ``base.data_dir``."""
        data = self.as_dict()
        data.pop("description", None)
        if data.get("cooldown_until_c") is None:  # hashes stay those of specs without it
            data.pop("cooldown_until_c", None)
            data["cooldown_until_idle"] = False
        if not data.get("adjust"):  # likewise for specs without adjust rules
            data.pop("adjust", None)
        if data.get("only") is None:  # and without a list of points
            data.pop("only", None)
        data["base"] = _legacy_project_after(
            {k: v for k, v in data["base"].items() if k != "data_dir"}
        )
        for rule in data.get("adjust", []):
            rule["set"] = _legacy_project_after(rule["set"])
        return spec_digest(data)

    def baseline_filter(self) -> dict[str, Any]:
        """The baseline grid point ``{axis: value}`` (RunConfig field names) for the analysis.

        Axes with one value are filled in; without a ``baseline`` key, the first value of
        every axis is the baseline.
        """
        given = self.baseline or {}
        return {
            key: _check_value(key, given[key], f"baseline.{key}") if key in given else values[0]
            for key, values in self.grid.items()
        }

    def baseline_config_hash(self) -> str:
        """The config_hash of the baseline run (match it against ``runs.config_hash``)."""
        return self.run_config(self.baseline_filter()).config_hash()


def repetition_config(config: RunConfig, repetition: int) -> RunConfig:
    """``config`` as repetition ``repetition`` (0-based) runs it: with its own seed, the
    configuration's seed + the repetition, unless the spec pinned the seed (then every
    repetition trains with it). The config hash does not change: repetitions stay one group."""
    seed = config.seed if config.seed_pinned else config.seed + repetition
    return config.model_copy(update={"repetition_seed": seed})


# -- loading -------------------------------------------------------------------------------


def load_spec(path_or_preset: str | Path, **base_overrides: Any) -> SweepSpec:
    """Load a sweep spec from a YAML file, or a preset by name (``paper-12``, ``quickstart``,
    ``h200-1gpu``, ``demo-gpu``, ``demo-cpu``), applying ``base_overrides`` (e.g.
    ``data_dir=...``) before validation. A command sweep is refused: use load_sweep_spec."""
    data, source = read_spec(path_or_preset)
    if isinstance(data, dict) and "command" in data:
        raise ConfigError(f"{source} is a command sweep (it has command:); use load_sweep_spec.")
    if base_overrides and isinstance(data, dict):
        data = _apply_overrides(data, base_overrides)
    return SweepSpec.from_dict(data, source=source)


def _apply_overrides(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if not overrides:
        return data
    data = dict(data)
    if "codecarbon" in overrides:
        data["codecarbon"] = overrides.pop("codecarbon")
    grid = data.get("grid")
    axes: dict[str, Any] = grid if isinstance(grid, dict) else {}
    for key in overrides:
        if key not in _RUN_FIELDS:
            raise unknown_key(key, "in the overrides", _RUN_FIELDS)
        if key in axes:
            raise ConfigError(
                f"{key} is a grid axis of sweep {data.get('name')!r}, so it cannot be "
                f"overridden; change grid.{key} in the spec instead."
            )
    base = data.get("base")
    if base is None:
        base = {}
    if isinstance(base, dict):
        data["base"] = {**base, **overrides}
    return data
