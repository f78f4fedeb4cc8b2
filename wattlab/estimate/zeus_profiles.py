"""Where the Zeus project's measured power-limit profiles are: the copy shipped in the package
(``wattlab/data/zeus-profiles``, Apache-2.0, see its SOURCE.md), or the folder named by
``$WATTLAB_ZEUS_PROFILES``."""

from __future__ import annotations

import os
from pathlib import Path

from wattlab.errors import ConfigError

ENV_VAR = "WATTLAB_ZEUS_PROFILES"
PACKAGED = Path(__file__).resolve().parents[1] / "data" / "zeus-profiles"


def profiles_dir(env: dict[str, str] | None = None) -> Path:
    """The profiles folder: ``$WATTLAB_ZEUS_PROFILES`` when set, else the packaged copy."""
    chosen = (os.environ if env is None else env).get(ENV_VAR)
    if not chosen:
        return PACKAGED
    path = Path(chosen)
    if not path.is_dir():
        raise ConfigError(f"{ENV_VAR}={chosen} is not a folder of Zeus profile CSV files.")
    return path
