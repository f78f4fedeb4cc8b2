"""Model factories: a user's own ``nn.Module``, named ``FILE.py:FUNC`` or ``package.module:FUNC``.

The callable is called as ``FUNC(num_classes=N)`` and must return a freshly initialised
``torch.nn.Module`` (initialisation drawn from torch's global generator, which the trainer seeds,
so every rank of a distributed run builds the same weights). A relative FILE is resolved against
the current directory. Every way a factory can be wrong (a missing file, a missing function, a
function that raises, something that is not a Module) is a one-sentence ``ConfigError``.

The user's code (importing the module, calling the function) runs under ``_user_code``:

* **A time limit**: ``$WATTLAB_FACTORY_TIMEOUT_S`` seconds (default 120) for the import and
  again for the call; after ``NOTE_AFTER_S`` one line on stderr says what wattlab is waiting
  for. The limit is a SIGALRM timer, so it holds in the main thread (where the CLI and the
  worker build the model); a module that loops forever (or sleeps) is then stopped with one
  sentence. Elsewhere only the line is said.
* **sys.exit** in the user's code (at import or in the call) is a one-sentence ConfigError,
  never a silent exit of wattlab with the code the module chose.
* **stdout**: what the user's code prints, from Python or C (file descriptor 1), goes to
  stderr, so that ``--json -`` stays the JSON alone.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import math
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stdout
from pathlib import Path
from typing import Any

from torch import nn

from wattlab.errors import ConfigError, echo
from wattlab.train.factory_ref import is_factory

REASON_CHARS = 200  # of a factory's own error message, quoted in ours
ENV_TIMEOUT = "WATTLAB_FACTORY_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 120.0
MAX_TIMEOUT_S = 86_400.0
NOTE_AFTER_S = 2.0  # a slower import or call is said in one line while it runs


class _TimedOut(BaseException):
    """Raised into the user's code by the time limit (BaseException: a bare ``except
    Exception`` there does not swallow it)."""


def timeout_s() -> float:
    """The time limit for a factory's import (and its call): ``$WATTLAB_FACTORY_TIMEOUT_S``, a
    number of seconds > 0 and <= 86 400; ConfigError (one sentence) for anything else."""
    raw = os.environ.get(ENV_TIMEOUT, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= MAX_TIMEOUT_S):
        raise ConfigError(
            f"{ENV_TIMEOUT} must be a number of seconds > 0 and <= {MAX_TIMEOUT_S:g}, got "
            f"{raw[:40]!r}."
        )
    return value


_CAPS: list[tuple[float, str]] = []  # (seconds, what bounds them): ``time_cap``


@contextmanager
def time_cap(limit_s: float, why: str) -> Iterator[None]:
    """Within the block, a factory's import and its call are stopped after ``limit_s`` seconds
    at most, however long ``$WATTLAB_FACTORY_TIMEOUT_S`` allows: ``why`` names what bounds them
    (``advise --probe 10`` cuts a hung factory off after its 10 s, not 120)."""
    _CAPS.append((float(limit_s), why))
    try:
        yield
    finally:
        _CAPS.pop()


def _limit() -> tuple[float, str | None]:
    """The time limit for the user's code now, and what capped it (None: the environment)."""
    limit = timeout_s()
    capped = min(_CAPS, default=None)
    if capped is not None and capped[0] < limit:
        return capped
    return limit, None


@contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """File descriptor 1 (and ``sys.stdout``) point at stderr for the block."""
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError, AttributeError):  # no real stdout: nothing to protect
        yield
        return
    try:
        os.dup2(2, 1)
        with redirect_stdout(sys.stderr):  # sys.stdout may be other than fd 1 (a capture)
            yield
    finally:
        try:
            sys.stdout.flush()  # what the user's code buffered goes to stderr, not after it
        except (OSError, ValueError):
            pass
        os.dup2(saved, 1)
        os.close(saved)


@contextmanager
def _time_limit(what: str, limit_s: float, why: str | None = None) -> Iterator[None]:
    """Say after NOTE_AFTER_S that ``what`` is still running, and raise _TimedOut into it
    after ``limit_s`` (SIGALRM: main thread only); ``why``: what set the limit."""
    note = threading.Timer(
        NOTE_AFTER_S,
        lambda: print(
            f"wattlab: {what} (still running after {NOTE_AFTER_S:g} s; stopped after "
            f"{limit_s:g} s, see {why or ENV_TIMEOUT})",
            file=sys.stderr,
            flush=True,
        ),
    )
    note.daemon = True
    armed = threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGALRM")
    previous: Any = None
    if armed:

        def expire(_signum: int, _frame: object) -> None:
            raise _TimedOut()

        previous = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, limit_s)
    note.start()
    try:
        yield
    finally:
        note.cancel()
        if armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous if previous is not None else signal.SIG_DFL)


@contextmanager
def _user_code(what: str, shown: str) -> Iterator[None]:
    """Run the user's code: its stdout to stderr, a time limit, sys.exit as one sentence.
    ``what``: what is running (for the line said while it runs); ``shown``: how a sentence
    names it."""
    limit, why = _limit()
    try:
        with _stdout_to_stderr(), _time_limit(what, limit, why):
            yield
    except _TimedOut:
        if why is not None:
            raise ConfigError(
                f"{shown} did not finish within {limit:g} s, the length of {why}, so it was "
                "stopped; make it finish (a module should only define its factory)."
            ) from None
        raise ConfigError(
            f"{shown} did not finish within {limit:g} s, so it was stopped; make it finish "
            f"(a module should only define its factory), or allow it more time with "
            f"{ENV_TIMEOUT}."
        ) from None
    except SystemExit as exit_:
        raise ConfigError(
            f"{shown} called sys.exit({echo(exit_.code, 40)}); a model factory must return a "
            "model, and its module must only define it, never exit."
        ) from None


def source_key(name: str) -> str:
    """What a model check is cached under: a ``FILE.py:FUNC`` factory by its file's absolute
    path, size and modification time (the same relative name in another folder, or the file
    edited since, is another model); anything else by its name."""
    target, _, func = name.rpartition(":")
    if not is_factory(name) or not target.endswith(".py"):
        return name
    path = Path(target).expanduser().resolve()
    try:
        stat = path.stat()
    except OSError:
        return f"{path}:{func}"  # missing: the check itself says so
    return f"{path}@{stat.st_mtime_ns}/{stat.st_size}:{func}"


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
        with _user_code(
            f"importing the model factory file {path}", f"importing model factory file {target!r}"
        ):
            spec.loader.exec_module(module)
    except ConfigError:
        sys.modules.pop(name, None)
        raise
    except Exception as error:  # noqa: BLE001 - any failure is the user's file
        sys.modules.pop(name, None)
        raise ConfigError(
            f"importing model factory file {target!r} failed with {_reason(error)}."
        ) from None
    return module


def _import_module(target: str) -> object:
    try:
        with _user_code(
            f"importing the model factory module {target}",
            f"importing model factory module {target!r}",
        ):
            return importlib.import_module(target)
    except ConfigError:
        raise
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
        with _user_code(
            f"calling the model factory {ref}(num_classes={num_classes})",
            f"model factory {ref!r}",
        ):
            model = factory(num_classes=num_classes)
    except ConfigError:
        raise
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
