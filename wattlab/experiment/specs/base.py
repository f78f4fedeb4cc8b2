"""What every sweep spec shares: the fields and checks of a sweep (name, repetitions, run
order, warm-up, cool-down, baseline), the one-sentence error messages that name a YAML path,
reading a spec's YAML (a file or a shipped preset), and the spec hash's digest.

``SpecBase`` is extended by the built-in trainer's spec (``specs.trainer.SweepSpec``) and by a
command's (``specs.command.CommandSweepSpec``); ``specs.load.load_sweep_spec`` picks which one a
YAML file is. This module imports neither of them.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import random
import re
import secrets
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import ErrorDetails

from wattlab.bounds import MAX_SWEEP_RUNS, check_number
from wattlab.errors import ConfigError, echo

PRESETS = ("paper-12", "quickstart", "h200-1gpu", "demo-gpu", "demo-cpu")
MAX_COOLDOWN_S = 3600.0  # one hour between runs at most
MIN_COOLDOWN_C, MAX_COOLDOWN_C = 20.0, 100.0  # a GPU temperature to wait for, in degrees C
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
# A spec file larger than this, or whose YAML expands (aliases counted) to more values, is
# refused before it is built: a billion-laughs file must not take minutes and gigabytes.
MAX_SPEC_BYTES = 1_000_000
MAX_YAML_VALUES = 100_000

T = TypeVar("T")
S = TypeVar("S", bound="SpecBase")


# -- messages ------------------------------------------------------------------------------


def yaml_path(loc: tuple[int | str, ...]) -> str:
    """``('grid', 'power_limit_w', 1)`` -> ``grid.power_limit_w[1]``."""
    out = ""
    for part in loc:
        if part == "[key]":
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _expected(error: ErrorDetails) -> str:
    """What a pydantic error says was expected, in plain words."""
    kind = error.get("type", "")
    ctx = error.get("ctx") or {}
    if kind.startswith("float") or kind == "finite_number":
        return "expected a number"
    if kind.startswith("int"):
        return "expected a whole number"
    if kind.startswith("bool"):
        return "expected true or false"
    if kind.startswith("string_type") or kind == "str_type":
        return "expected text"
    if kind == "list_type":
        return "expected a list such as [a, b]"
    if kind == "dict_type":
        return "expected a mapping of keys to values"
    if kind == "greater_than_equal":
        return f"expected a value >= {ctx.get('ge')}"
    if kind == "greater_than":
        return f"expected a value > {ctx.get('gt')}"
    msg = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
    msg = msg.replace("Input should be", "expected")
    return msg[:1].lower() + msg[1:]


def describe(error: ErrorDetails, where: str) -> str:
    kind = error.get("type", "")
    if kind == "missing":
        return f"missing key {where!r} at top level."
    value = error.get("input")
    return f"{where}: {_expected(error)}, got {echo(value)}."


def unknown_key(key: object, where: str, allowed: tuple[str, ...]) -> ConfigError:
    close = difflib.get_close_matches(str(key), allowed, n=1)
    hint = f"did you mean {close[0]!r}?" if close else "allowed: " + ", ".join(allowed) + "."
    return ConfigError(f"unknown key {echo(key)} {where}; {hint}")


def check_run_count(axis_lengths: list[int], repetitions: int) -> None:
    """Refuse a spec that expands to more than MAX_SWEEP_RUNS runs, before expanding it."""
    runs = repetitions
    for length in axis_lengths:
        runs *= max(length, 1)
        if runs > MAX_SWEEP_RUNS:
            break
    if runs > MAX_SWEEP_RUNS:
        shape = " x ".join(str(n) for n in axis_lengths[:8])
        raise ConfigError(
            f"the sweep expands to more than {MAX_SWEEP_RUNS} runs (grid {shape}, "
            f"{repetitions} repetition(s)); split it into smaller sweeps."
        )


def check_baseline(
    baseline: dict[str, Any],
    grid: dict[str, list[Any]],
    in_grid: Callable[[str, Any], bool],
) -> None:
    """A spec's baseline names one value of each grid axis with several values, and only grid
    axes; ``in_grid(key, value)`` says whether a baseline value is among that axis's values."""
    for key, value in baseline.items():
        if key not in grid:
            axes = ", ".join(grid)
            raise ConfigError(f"baseline.{key}: {key!r} is not a grid axis; axes: {axes}.")
        if not in_grid(key, value):
            raise ConfigError(
                f"baseline.{key}: {echo(value)} is not among grid.{key} values {echo(grid[key])}."
            )
    for key, values in grid.items():
        if key not in baseline and len(values) > 1:
            raise ConfigError(
                f"baseline: give a value for grid axis {key!r} (one of {echo(values)})."
            )


def point_text(point: dict[str, Any]) -> str:
    shown = (f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in point.items())
    return "(" + ", ".join(shown) + ")"


# -- the fields every spec shares ----------------------------------------------------------


class SpecBase(BaseModel):
    """The fields and checks every sweep spec shares. ``cooldown_s`` is the pause between runs
    in seconds; with ``cooldown_until_c`` it is the longest pause, ended early once every GPU
    is at or below that temperature. ``warmup_runs`` untimed runs precede the sweep and are
    not stored. A subclass adds what it sweeps (``grid``, ...) and may change a default."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str
    description: str | None = None
    repetitions: int = Field(3, ge=1)
    order: Literal["random", "sequential", "abba"] = "random"
    order_seed: int | None = Field(None, ge=0)
    warmup_runs: int = Field(1, ge=0)
    cooldown_s: float = Field(60.0, ge=0, le=MAX_COOLDOWN_S, allow_inf_nan=False)
    cooldown_until_c: float | None = Field(
        None, ge=MIN_COOLDOWN_C, le=MAX_COOLDOWN_C, allow_inf_nan=False
    )
    baseline: dict[str, Any] | None = None

    @field_validator("name")
    @classmethod
    def _check_name(cls, name: str) -> str:
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):  # no trailing newline
            raise ConfigError(
                f"name: expected letters, digits, '.', '_' or '-' (no spaces), got {echo(name)}."
            )
        return name

    @field_validator("repetitions", "warmup_runs", "cooldown_s", "order_seed")
    @classmethod
    def _check_bounds(cls, value: Any, info: ValidationInfo) -> Any:
        return check_number(str(info.field_name), value, str(info.field_name), spec=True)

    @classmethod
    def _validated(cls: type[S], data: dict[str, Any]) -> S:
        """``data`` validated as this spec; pydantic's first error as one sentence naming the
        YAML path (a ConfigError raised by a check passes through unchanged)."""
        try:
            return cls.model_validate(data)
        except ValidationError as error:
            first = error.errors()[0]
            where = yaml_path(first.get("loc", ())) or "top level"
            raise ConfigError(describe(first, where)) from None

    def as_dict(self) -> dict[str, Any]:
        """The spec as plain JSON-able data (what the database stores as spec_json)."""
        return self.model_dump(mode="json")

    def run_order(self, items: Sequence[T], order_seed: int | None = None) -> list[tuple[T, int]]:
        """Every (item, repetition) in the order to run them: one pass over ``items`` per
        repetition (repetition 0 of every item, then repetition 1, ...); ``sequential`` keeps
        the items' order within a pass, ``random`` shuffles each pass with ``order_seed`` (the
        argument, else the spec's), so slow drift (temperature, other tenants) is spread
        evenly instead of being confounded with the configuration; ``abba`` runs every other
        pass backwards (A B, B A, A B, ...), so a drift that is linear over two passes falls on
        every item alike and each item's run of a repetition lies next to the others' (what
        ``wattlab compare --sides`` pairs). A random order without a seed is a ValueError:
        pass the one ``Store.register_sweep`` returns."""
        seed = self.order_seed if order_seed is None else order_seed
        if self.order == "random" and seed is None:
            raise ValueError(
                "a random order needs a seed; pass the one Store.register_sweep returns"
            )
        rng = random.Random(seed)
        plan: list[tuple[T, int]] = []
        for rep in range(self.repetitions):
            block = list(items)
            if self.order == "random":
                rng.shuffle(block)
            elif self.order == "abba" and rep % 2 == 1:
                block.reverse()
            plan.extend((item, rep) for item in block)
        return plan


def spec_digest(data: dict[str, Any]) -> str:
    """The spec hash of a spec's hashed data: 16 hex digits of the SHA-256 of its JSON with
    sorted keys and no spaces (so key order and formatting do not count)."""
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def draw_order_seed() -> int:
    """A fresh random seed for a random run order (record it: the order depends on it)."""
    return secrets.randbelow(2**31)


# -- reading a spec's YAML -----------------------------------------------------------------


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys instead of silently keeping the last one."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: let PyYAML report it
                continue
            if duplicate:
                raise ConfigError(
                    f"duplicate key {echo(key)} at line {key_node.start_mark.line + 1}; "
                    "keep one of them."
                )
        return super().construct_mapping(node, deep=deep)


def _expanded_values(root: yaml.Node, source: str) -> int:
    """How many values the YAML document expands to, every alias counted in full (a shared
    node is counted once per use, but computed once). A ConfigError for a self-reference."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            sizes[key] = 1
            continue
        if children_done:
            on_path.discard(key)
            sizes[key] = min(1 + sum(sizes[id(c)] for c in children), MAX_YAML_VALUES + 1)
            continue
        if key in on_path:
            raise ConfigError(f"{source}: a YAML alias refers to itself; remove the loop.")
        on_path.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in on_path:
                raise ConfigError(f"{source}: a YAML alias refers to itself; remove the loop.")
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)]


def parse_yaml(text: str, source: str) -> Any:
    """Parse YAML text; a syntax error is a ConfigError naming ``source`` and the line. A text
    over MAX_SPEC_BYTES, or one that expands to more than MAX_YAML_VALUES values (anchors and
    aliases counted, as in a billion-laughs file), is refused before anything is built."""
    if len(text) > MAX_SPEC_BYTES:
        raise ConfigError(
            f"{source}: the spec is {len(text)} characters long; at most {MAX_SPEC_BYTES} are "
            "allowed."
        )
    try:
        loader = _UniqueKeyLoader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            if _expanded_values(node, source) > MAX_YAML_VALUES:
                raise ConfigError(
                    f"{source}: the spec expands to more than {MAX_YAML_VALUES} values (YAML "
                    "aliases counted); write the values out or split the sweep."
                )
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except ConfigError as error:
        if str(error).startswith(source):
            raise
        raise ConfigError(f"{source}: {error}") from None
    except RecursionError:
        raise ConfigError(f"{source}: the YAML is nested too deeply.") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error)
        raise ConfigError(f"{source}: YAML syntax error{where}: {problem}.") from None


def preset_text(name: str) -> str:
    """The YAML text of a preset shipped with wattlab."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {echo(name)}; presets: {', '.join(PRESETS)}.")
    folder = resources.files("wattlab.experiment.specs").joinpath("presets")
    return folder.joinpath(f"{name}.yaml").read_text("utf-8")


def read_spec(path_or_preset: str | Path) -> tuple[Any, str]:
    """The parsed YAML of a spec file or preset, and where it came from."""
    text_or_path = str(path_or_preset)
    path = Path(text_or_path).expanduser()
    if path.is_file():
        try:
            if path.stat().st_size > MAX_SPEC_BYTES:
                raise ConfigError(
                    f"{path}: the spec file is {path.stat().st_size} bytes; at most "
                    f"{MAX_SPEC_BYTES} are allowed."
                )
            text = path.read_text("utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise ConfigError(f"cannot read sweep spec {path}: {error}.") from None
        source = str(path)
    elif text_or_path in PRESETS:
        text, source = preset_text(text_or_path), f"preset {text_or_path}"
    else:
        raise ConfigError(
            f"{echo(text_or_path)} is neither a sweep spec YAML file nor a preset; "
            f"presets: {', '.join(PRESETS)}."
        )
    return parse_yaml(text, source), source
