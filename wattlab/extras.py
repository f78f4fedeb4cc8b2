"""Optional dependencies: import one, or say in one sentence which extra installs it and the
install line that works for how this wattlab was installed (a clone, a wheel, an index).

How wattlab was installed comes from its distribution's ``direct_url.json`` (PEP 610): an
editable install of a clone (``pip install -e .``), a folder or a wheel file, a VCS URL, or none
of those (a package index). A source tree on ``PYTHONPATH`` that no installed distribution
holds gets the clone's line.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import json
import shlex
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import unquote, urlparse

from wattlab.errors import ConfigError

DISTRIBUTION = "wattlab"

# top-level module -> the extra of pyproject.toml that installs it (tests/test_extras.py checks
# this table against the package's declared extras)
EXTRA_OF_MODULE: dict[str, str] = {
    "torch": "train",
    "torchvision": "train",
    "codecarbon": "codecarbon",
    "pyarrow": "parquet",
    "submitit": "slurm",
    "stumpy": "step",
    "transformers": "transformers",
    "accelerate": "transformers",
    "pytorch_lightning": "lightning",
    "mlflow": "mlflow",
    "sqlalchemy": "mlflow",
    "alembic": "mlflow",
    "prometheus_client": "prometheus",
}


class MissingExtraError(ConfigError):
    """Something was asked for whose optional dependency is not installed (exit code 2)."""


def _package_root() -> Path:
    """The folder holding the running ``wattlab`` package (a clone's root, or site-packages)."""
    return Path(__file__).resolve().parent.parent


def _direct_url(dist: importlib.metadata.Distribution) -> dict[str, Any] | None:
    text = dist.read_text("direct_url.json")
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _file_path(url: str) -> Path | None:
    parsed = urlparse(url)
    if parsed.scheme != "file":
        return None
    return Path(unquote(parsed.path))


def _runs_from(path: Path) -> bool:
    """True when the running ``wattlab`` package lives under ``path``."""
    try:
        _package_root().relative_to(path.resolve())
    except ValueError:
        return False
    return True


def _shown(path: Path) -> str:
    """A path as a person types it: '.' for the working folder, else as it is."""
    try:
        if path.resolve() == Path.cwd().resolve():
            return "."
    except OSError:
        pass
    return str(path)


def _clone_line(root: Path, extra: str, *, editable: bool) -> str:
    spec = shlex.quote(f"{_shown(root)}[{extra}]")
    return f"install -e {spec}" if editable else f"install {spec}"


def _installer() -> str:
    """The pip that installs into this interpreter's environment: plain ``pip`` when the one on
    PATH lives beside this interpreter, else this interpreter's ``-m pip`` (or uv's, where the
    environment has no pip, as uv's environments do not)."""
    here = Path(sys.executable).parent
    found = shutil.which("pip")
    if found and Path(found).parent == here:
        return "pip"
    exe = shlex.quote(sys.executable)
    if importlib.util.find_spec("pip") is None and shutil.which("uv"):
        return f"uv pip --python {exe}"
    return f"{exe} -m pip"


def pip_arguments(extra: str) -> str:
    """pip's arguments (``install ...``) that add ``extra`` to the wattlab being run."""
    root = _package_root()
    try:
        dist: importlib.metadata.Distribution | None = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        dist = None
    direct = _direct_url(dist) if dist is not None else None
    url = direct.get("url") if direct is not None else None
    local = _file_path(url) if isinstance(url, str) else None
    dir_info = direct.get("dir_info") if direct is not None else None
    if isinstance(dir_info, dict) and local is not None and _runs_from(local):
        return _clone_line(local, extra, editable=bool(dir_info.get("editable")))
    if (root / "pyproject.toml").is_file():  # a clone's package, on PYTHONPATH
        return _clone_line(root, extra, editable=True)
    if direct is None or not isinstance(url, str):
        return f"install {shlex.quote(f'{DISTRIBUTION}[{extra}]')}"  # from a package index
    if isinstance(dir_info, dict) and local is not None and local.is_dir():
        # installed (copied) from a folder: that folder again
        return _clone_line(local, extra, editable=bool(dir_info.get("editable")))
    vcs_info = direct.get("vcs_info")
    if isinstance(vcs_info, dict):
        ref = vcs_info.get("commit_id") or vcs_info.get("requested_revision")
        vcs = vcs_info.get("vcs", "git")
        at = f"@{ref}" if ref else ""
        return f"install {shlex.quote(f'{DISTRIBUTION}[{extra}] @ {vcs}+{url}{at}')}"
    if local is not None and local.is_file():  # a wheel or sdist file that is still there
        return f"install {shlex.quote(f'{local}[{extra}]')}"
    return f"install {shlex.quote(f'{DISTRIBUTION}[{extra}] @ {url}')}"


def install_line(extra: str) -> str:
    """The whole command that adds ``extra`` to the wattlab being run, e.g.
    ``pip install -e '.[train]'`` in a clone's folder."""
    return f"{_installer()} {pip_arguments(extra)}"


def missing_sentence(
    what: str, module: str, extra: str | None = None, *, instead: str | None = None
) -> str:
    """One sentence: ``what`` needs ``module``, which extra installs it, and the install line
    (last, so that it can be copied); ``instead`` is the other way out (``use csv or json``)."""
    top = module.split(".")[0]
    extra = extra or EXTRA_OF_MODULE.get(top)
    other = f"{instead}, or " if instead else ""
    if extra is None:
        return f"{what} needs the {top!r} package, which is not installed; {other}install it."
    return (
        f"{what} needs the {top!r} package (wattlab's {extra!r} extra), which is not installed; "
        f"{other}install it with: {install_line(extra)}"
    )


def require(module: str, extra: str, what: str, *, instead: str | None = None) -> ModuleType:
    """Import ``module`` or raise one sentence naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtraError(missing_sentence(what, module, extra, instead=instead)) from None


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # hidden on purpose, or a broken install
        return False


def missing_extra_module(error: BaseException) -> str | None:
    """The top-level module of an extra that ``error`` (or an error it came from) says is not
    installed, or None: how the command line tells a missing extra from any other error."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ModuleNotFoundError) and current.name:
            top = current.name.split(".")[0]
            if top in EXTRA_OF_MODULE and not _installed(top):
                return top
        current = current.__cause__ or current.__context__
    return None


__all__ = [
    "EXTRA_OF_MODULE",
    "MissingExtraError",
    "install_line",
    "missing_extra_module",
    "missing_sentence",
    "pip_arguments",
    "require",
]
