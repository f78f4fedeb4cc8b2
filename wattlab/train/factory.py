"""Model factories: a user's own ``nn.Module``, named ``FILE.py:FUNC`` or ``package.module:FUNC``.

The callable is called as ``FUNC(num_classes=N)`` and must return a freshly initialised
``torch.nn.Module`` (initialisation drawn from torch's global generator, which the trainer seeds,
so every rank of a distributed run builds the same weights). A relative FILE is resolved against
the current directory. Every way a factory can be wrong (a missing file, a missing function, a
function that raises, something that is not a Module) is a one-sentence ``ConfigError``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

from torch import nn

from wattlab.errors import ConfigError

REASON_CHARS = 200  # of a factory's own error message, quoted in ours


def is_factory(name: str) -> bool:
    """Whether a model name refers to a factory (``FILE.py:FUNC`` / ``module:FUNC``): torchvision
    names never contain a colon."""
    return ":" in name


def _reason(error: BaseException) -> str:
    """``TypeError: message`` on one line, short enough for a sentence."""
    text = " ".join(str(error).split()) or "no message"
    if len(text) > REASON_CHARS:
        text = text[:REASON_CHARS] + "..."
    return f"{type(error).__name__}: {text.rstrip('.')}"


def _split(ref: str) -> tuple[str, str]:
    target, _, func = ref.rpartition(":")
    if not target or not func.isidentifier():
        raise ConfigError(
            f"model factory {ref!r} must be FILE.py:FUNC or package.module:FUNC "
            "(a function name after the colon)."
        )
    return target, func


def _import_file(target: str) -> object:
    path = Path(target).expanduser().resolve()
    if not path.is_file():
        raise ConfigError(f"model factory file {target!r} does not exist (looked at {path}).")
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
    name = f"wattlab_model_factory_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"model factory file {target!r} cannot be imported as Python.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # so that classes defined there can be pickled and inspected
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # noqa: BLE001 - any failure is the user's file
        sys.modules.pop(name, None)
        raise ConfigError(
            f"importing model factory file {target!r} failed with {_reason(error)}."
        ) from None
    return module


def _import_module(target: str) -> object:
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as error:
        raise ConfigError(
            f"model factory module {target!r} cannot be found ({_reason(error)}); give an "
            "importable package.module or a FILE.py."
        ) from None
    except Exception as error:  # noqa: BLE001
        raise ConfigError(
            f"importing model factory module {target!r} failed with {_reason(error)}."
        ) from None


def load_factory(ref: str) -> Callable[..., object]:
    """The callable ``ref`` names; a ConfigError when the file, module or function is missing."""
    target, func = _split(ref)
    module = _import_file(target) if target.endswith(".py") else _import_module(target)
    factory = getattr(module, func, None)
    if factory is None:
        raise ConfigError(f"model factory {target!r} has no function {func!r}.")
    if not callable(factory):
        raise ConfigError(
            f"model factory {ref!r} is an object of type {type(factory).__name__!r}, not a "
            "callable."
        )
    return factory


def build_from_factory(ref: str, *, num_classes: int) -> nn.Module:
    """``FUNC(num_classes=num_classes)``, checked to be an ``nn.Module``."""
    factory = load_factory(ref)
    try:
        model = factory(num_classes=num_classes)
    except Exception as error:  # noqa: BLE001 - the user's function
        raise ConfigError(
            f"model factory {ref!r} raised {_reason(error)} when called with "
            f"num_classes={num_classes}."
        ) from None
    if not isinstance(model, nn.Module):
        raise ConfigError(
            f"model factory {ref!r} returned an object of type {type(model).__name__!r}, not a "
            "torch.nn.Module."
        )
    return model
