"""When a run projects itself live: after K whole epochs (the epoch rule) or after a fraction
of its budget's samples (the step-level rule). Two explicit settings, ``project_after_epochs``
and ``project_after_fraction``; the old ``project_after``, which meant epochs when >= 1 and a
fraction when < 1, is a deprecated spelling of one of them."""

from __future__ import annotations

import math
import warnings
from typing import Literal

from wattlab.errors import ConfigError

EPOCHS = "project_after_epochs"
FRACTION = "project_after_fraction"
LEGACY = "project_after"


def check_after_epochs(value: object, name: str = "--project-after-epochs") -> int:
    """``value`` as a whole number of epochs >= 1; ConfigError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name} must be a whole number of epochs >= 1, got {value!r}.")
    if not (math.isfinite(value) and value >= 1 and value == int(value)):
        raise ConfigError(f"{name} must be a whole number of epochs >= 1, got {value!r}.")
    return int(value)


def check_after_fraction(value: object, name: str = "--project-after-fraction") -> float:
    """``value`` as a fraction of the budget in (0, 1); ConfigError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name} must be a fraction of the budget in (0, 1), got {value!r}.")
    if not (math.isfinite(value) and 0 < value < 1):
        raise ConfigError(f"{name} must be a fraction of the budget in (0, 1), got {value!r}.")
    return float(value)


def from_legacy(
    value: object,
) -> tuple[Literal["project_after_epochs", "project_after_fraction"], float | int]:
    """The setting the deprecated ``project_after`` value means: ("project_after_epochs", K) for
    a whole number K >= 1, ("project_after_fraction", f) for 0 < f < 1; ConfigError otherwise."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = math.nan
    if 0 < number < 1:
        return "project_after_fraction", number
    if number >= 1 and math.isfinite(number) and number == int(number):
        return "project_after_epochs", int(number)
    raise ConfigError(
        f"--project-after must be a whole number of epochs (>= 1) or a fraction of the budget "
        f"in (0, 1), got {value!r}."
    )


def legacy_flag(value: object) -> str:
    """The new spelling of ``--project-after VALUE`` (ConfigError for a bad value)."""
    key, number = from_legacy(value)
    return f"--{key.replace('_', '-')} {number:g}"


def deprecation_line(value: object) -> str:
    """The one line a user of the deprecated ``--project-after VALUE`` sees."""
    return f"--project-after is deprecated; use {legacy_flag(value)} (the same projection)."


def warn_legacy(value: object, where: str = "project_after", stacklevel: int = 3) -> None:
    """A FutureWarning (shown to users by default) that ``where`` is the old spelling."""
    key, number = from_legacy(value)
    warnings.warn(
        f"{where} is deprecated; use {key}: {number:g} (the same projection).",
        FutureWarning,
        stacklevel=stacklevel,
    )
