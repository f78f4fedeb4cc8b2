"""Optional dependencies: import one, or say in one sentence which extra installs it."""

from __future__ import annotations

import importlib
from types import ModuleType

from wattlab.errors import WattlabError


class MissingExtraError(WattlabError):
    """An integration was asked for but its optional dependency is not installed."""


def require(module: str, extra: str, what: str) -> ModuleType:
    """Import ``module`` or raise one sentence naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtraError(
            f"{what} needs the {module!r} package, which is not installed; "
            f"pip install 'wattlab[{extra}]'."
        ) from None
