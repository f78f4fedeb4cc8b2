"""Sweep specs that run your own command: ``command:`` with ``{axis}`` placeholders.

::

    name: my-net
    command: [python, train.py, --batch-size, "{batch_size}", --precision, "{precision}"]
    label: my-net            # optional: the runs' model name (default: the script's name)
    cwd: .                   # optional: where the command runs (default: where wattlab runs)
    env: {OMP_NUM_THREADS: "2"}   # optional: added to the environment; may use placeholders
    grid: {batch_size: [64, 128], precision: [fp32, bf16]}
    repetitions: 3
    order: random
    warmup_runs: 1           # the default: one untimed run of the first configuration
    cooldown_s: 10           # the default: a pause between runs sized for short runs
    baseline: {batch_size: 64, precision: fp32}

Axes may have any name (letters, digits, ``_``). Every placeholder must name an axis and every
axis must appear in a placeholder (in ``command`` or ``env``): either mistake is a ConfigError
of one sentence. ``{{`` and ``}}`` are literal braces. Each grid point's resolved argv is what
identifies its runs (``config_hash``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from wattlab.errors import ConfigError, echo
from wattlab.experiment.specs.base import (
    MAX_COOLDOWN_S,
    SpecBase,
    check_baseline,
    check_run_count,
    point_text,
    spec_digest,
    unknown_key,
)
from wattlab.processes import argv_problem

_AXIS_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
Scalar = str | int | float | bool
# axes whose values also fill the runs table's column of the same name (when the type fits),
# so that the report's configuration table, default baseline and scaling see them
_COLUMN_AXES: dict[str, type | tuple[type, ...]] = {
    "batch_size": int,
    "gpus": int,
    "world_size": int,
    "epochs": (int, float),
    "precision": str,
    "dataset": str,
    "device": str,
    "stem": str,
}
_PYTHONS = re.compile(r"^python[0-9.]*$")


def is_command_spec(data: object) -> bool:
    """Whether a parsed spec (or its stored JSON) is a command sweep."""
    return isinstance(data, dict) and "command" in data


def program_name(argv: list[str]) -> str:
    """The name a command's runs are stored under: the script for ``python x.py`` or
    ``python -m pkg.mod``, else the program's file name."""
    first = Path(argv[0]).name
    if _PYTHONS.match(first) and len(argv) > 1:
        if argv[1] == "-m" and len(argv) > 2:
            return argv[2]
        if not argv[1].startswith("-"):
            return Path(argv[1]).name
    return first


def _fields(text: str, where: str) -> list[str]:
    """The placeholder names in ``text``; a ConfigError for a malformed one."""
    try:
        parts = list(string.Formatter().parse(text))
    except ValueError as error:
        raise ConfigError(
            f"{where}: {echo(text)} is not a valid template ({error}); write a literal brace "
            "as {{ or }}."
        ) from None
    names = []
    for _, name, _, _ in parts:
        if name is None:
            continue
        if not _AXIS_RE.match(name):
            raise ConfigError(
                f"{where}: placeholder {{{name}}} in {echo(text)} names no grid axis; use "
                "{axis} with an axis name (write a literal brace as {{ or }})."
            )
        names.append(name)
    return names


def _short_point(axes: dict[str, Scalar]) -> str:
    """``(axis=value, ...)`` with each value cut short and escaped, for an error message."""
    return "(" + ", ".join(f"{k}={echo(v, 40)}" for k, v in axes.items()) + ")"


def _render(value: Scalar) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


@dataclass(frozen=True)
class CommandPoint:
    """One grid point of a command sweep: its axes, the resolved command and its identity."""

    axes: dict[str, Scalar]
    argv: list[str]
    env: dict[str, str]
    cwd: str | None
    model: str
    label: str
    config_hash: str
    columns: dict[str, Any] = field(default_factory=dict)  # runs-table columns from the axes

    def config_json(self) -> dict[str, Any]:
        """What the runs table stores as the run's configuration."""
        return {
            "kind": "command",
            "command": self.argv,
            "env": self.env,
            "cwd": self.cwd,
            "axes": self.axes,
            "model": self.model,
        }


@dataclass(frozen=True)
class PlannedCommand:
    index: int
    config: CommandPoint
    repetition: int
    label: str
    config_hash: str


class CommandSweepSpec(SpecBase):
    """A validated command sweep (see the module docstring); the fields every spec shares
    (repetitions, order, warm-up, cool-down, baseline) are ``SpecBase``'s."""

    command: list[str]
    label: str | None = None
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    grid: dict[str, list[Scalar]]
    # 10 s, not a built-in sweep's 60: a user's runs are often seconds long (docs/engine.md,
    # "Cool-down between runs"); cooldown_until_c waits for a temperature instead
    cooldown_s: float = Field(10.0, ge=0, le=MAX_COOLDOWN_S, allow_inf_nan=False)
    baseline: dict[str, Scalar] | None = None

    @field_validator("command", mode="before")
    @classmethod
    def _check_command(cls, command: Any) -> Any:
        if isinstance(command, str):
            raise ConfigError(
                f"command: expected a list of arguments such as [python, train.py, "
                f'--batch-size, "{{batch_size}}"], got the text {echo(command)}.'
            )
        if not isinstance(command, list) or not command:
            raise ConfigError(
                "command: expected a non-empty list of arguments such as [python, train.py]."
            )
        out = []
        for i, arg in enumerate(command):
            if isinstance(arg, (int, float)) and not isinstance(arg, bool):
                arg = str(arg)  # `--epochs, 3` in YAML is a number: pass it as text
            if not isinstance(arg, str) or "\x00" in arg:
                raise ConfigError(f"command[{i}]: expected text, got {echo(arg)}.")
            out.append(arg)
        if not out[0].strip():
            raise ConfigError("command[0]: the program is empty.")
        return out

    @field_validator("grid")
    @classmethod
    def _check_grid(cls, grid: dict[str, list[Scalar]]) -> dict[str, list[Scalar]]:
        if not grid:
            raise ConfigError("grid: no axes; give at least one, such as batch_size: [64, 128].")
        check_run_count([len(v) for v in grid.values()], 1)
        for key, values in grid.items():
            if not _AXIS_RE.match(key):
                raise ConfigError(
                    f"grid.{key}: an axis name has letters, digits and '_' only (it is used "
                    "as {" + key + "} in the command)."
                )
            if not values:
                raise ConfigError(f"grid.{key}: the list is empty; give at least one value.")
            seen: list[str] = []
            for i, value in enumerate(values):
                if _render(value) in seen:
                    raise ConfigError(f"grid.{key}[{i}]: {echo(value)} appears twice in this axis.")
                seen.append(_render(value))
        return grid

    @model_validator(mode="after")
    def _check_spec(self) -> CommandSweepSpec:
        check_run_count([len(v) for v in self.grid.values()], self.repetitions)
        used: set[str] = set()
        templates = [(f"command[{i}]", arg) for i, arg in enumerate(self.command)]
        templates += [(f"env.{k}", v) for k, v in self.env.items()]
        for where, text in templates:
            for name in _fields(text, where):
                if name not in self.grid:
                    axes = ", ".join(self.grid)
                    raise ConfigError(
                        f"{where}: placeholder {{{name}}} names no grid axis; axes: {axes}."
                    )
                used.add(name)
        for key in self.grid:
            if key not in used:
                raise ConfigError(
                    f"grid.{key}: no placeholder uses this axis; add {{{key}}} to the command "
                    "(or env) or remove the axis."
                )
        for key in self.env:
            if not key or "=" in key or "\x00" in key:
                raise ConfigError(f"env: {echo(key)} is not an environment variable name.")
        self._check_baseline()
        return self

    def _check_baseline(self) -> None:
        if self.baseline is not None:
            grid = self.grid
            check_baseline(
                self.baseline,
                grid,
                lambda key, value: _render(value) in [_render(v) for v in grid[key]],
            )

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Any, source: str = "the sweep spec") -> CommandSweepSpec:
        """Validate a parsed YAML document; every mistake is a one-sentence ConfigError."""
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: a sweep spec must be a mapping of keys.")
        allowed = tuple(cls.model_fields)
        for key in data:
            if key not in allowed:
                hint = " (a command sweep has no base: its settings are the command's)"
                error = unknown_key(key, "at top level of a command sweep", allowed)
                raise ConfigError(str(error) + (hint if key in ("base", "adjust") else ""))
        return cls._validated(data)

    # -- the plan --------------------------------------------------------------------------
    @property
    def model(self) -> str:
        return self.label or program_name(self.command)

    def points(self) -> list[dict[str, Scalar]]:
        axes = list(self.grid)
        return [
            dict(zip(axes, combo, strict=True)) for combo in itertools.product(*self.grid.values())
        ]

    def resolve(self, point: dict[str, Scalar]) -> CommandPoint:
        """The command, environment and identity of one grid point."""
        values = {k: _render(v) for k, v in point.items()}
        argv = [arg.format(**values) for arg in self.command]
        env = {k: v.format(**values) for k, v in self.env.items()}
        identity = {"command": argv, "env": env, "cwd": self.cwd, "model": self.model}
        blob = json.dumps(identity, sort_keys=True, separators=(",", ":"))
        label = " ".join([self.model, *(f"{k}={values[k]}" for k in point)])
        columns = {
            k: v
            for k, v in point.items()
            if k in _COLUMN_AXES and isinstance(v, _COLUMN_AXES[k]) and not isinstance(v, bool)
        }
        return CommandPoint(
            axes=dict(point),
            argv=argv,
            env=env,
            cwd=self.cwd,
            model=self.model,
            label=label,
            config_hash=hashlib.sha256(blob.encode()).hexdigest()[:16],
            columns=columns,
        )

    @property
    def n_runs(self) -> int:
        return len(self.points()) * self.repetitions

    def expand(self, order_seed: int | None = None) -> list[PlannedCommand]:
        """Every run in the order to run them: one pass over the grid per repetition,
        shuffled per pass with the seed under ``order: random`` (as built-in sweeps)."""
        points = [self.resolve(p) for p in self.points()]
        seen: dict[str, CommandPoint] = {}
        for point in points:
            if point.config_hash in seen:
                raise ConfigError(
                    f"grid points {point_text(seen[point.config_hash].axes)} and "
                    f"{point_text(point.axes)} give the same command; remove one value."
                )
            seen[point.config_hash] = point
            problem = argv_problem(point.argv, point.env)
            if problem is not None:  # found here, before any run is claimed
                raise ConfigError(
                    f"the command of grid point {_short_point(point.axes)} cannot be "
                    f"started: {problem}; pass such a value in a file instead."
                )
        plan = self.run_order(points, order_seed)
        return [
            PlannedCommand(i, p, rep, p.label, p.config_hash) for i, (p, rep) in enumerate(plan)
        ]

    def as_dict(self) -> dict[str, Any]:
        """The spec as plain JSON-able data, the grid's and baseline's values as given: pydantic
        before 2.6 dumps a ``true`` of the ``str | int | float | bool`` union as 1, which would
        change the stored spec and its hash with the pydantic version."""
        data = super().as_dict()
        data["grid"] = {axis: list(values) for axis, values in self.grid.items()}
        if self.baseline is not None:
            data["baseline"] = dict(self.baseline)
        return data

    def spec_hash(self) -> str:
        """A stable hash of what the sweep runs and how (``description`` left out)."""
        data = self.as_dict()
        data.pop("description", None)
        if "cooldown_s" not in self.model_fields_set:  # the old default: a sweep begun before
            data["cooldown_s"] = 60.0  # the default became 10 s resumes as the same sweep
        return spec_digest(data)

    def baseline_point(self) -> dict[str, Scalar]:
        given = self.baseline or {}
        out: dict[str, Scalar] = {}
        for key, values in self.grid.items():
            if key in given:
                wanted = _render(given[key])
                out[key] = next(v for v in values if _render(v) == wanted)
            else:
                out[key] = values[0]
        return out

    def baseline_config_hash(self) -> str:
        return self.resolve(self.baseline_point()).config_hash

    def check_program(self) -> None:
        """The program exists here (on PATH, or as a file relative to ``cwd``)."""
        import shutil

        program = self.command[0]
        if _fields(program, "command[0]"):
            return  # decided per grid point
        folder = Path(self.cwd).expanduser() if self.cwd else Path.cwd()
        if self.cwd and not folder.is_dir():
            raise ConfigError(f"cwd: {echo(self.cwd)} is not a folder.")
        if os.sep in program:
            target = folder / program
            if not target.exists():
                raise ConfigError(f"command[0]: {echo(program)} does not exist in {folder}.")
        elif shutil.which(program) is None:
            raise ConfigError(f"command[0]: {echo(program)} is not a program on PATH.")
