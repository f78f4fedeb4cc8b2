"""Which shape a sweep spec has: the built-in trainer's (``specs.trainer``) or a user's command
(``specs.command``, a spec with ``command:``). The one module that imports both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wattlab.errors import ConfigError
from wattlab.experiment.specs.base import read_spec
from wattlab.experiment.specs.command import CommandSweepSpec, is_command_spec
from wattlab.experiment.specs.trainer import SweepSpec, load_spec


def load_sweep_spec(
    path_or_preset: str | Path, **base_overrides: Any
) -> SweepSpec | CommandSweepSpec:
    """``load_spec``, or a command sweep when the spec gives ``command:`` (see
    ``wattlab.experiment.specs.command``); base overrides do not apply to a command sweep."""
    data, source = read_spec(path_or_preset)
    if not is_command_spec(data):
        return load_spec(path_or_preset, **base_overrides)
    given = sorted(k for k, v in base_overrides.items() if v is not None)
    if given:
        raise ConfigError(
            f"{source} runs a command, so {', '.join(given)} cannot be set from the command "
            "line; pass such settings to the command through its grid or env."
        )
    return CommandSweepSpec.from_dict(data, source=source)
