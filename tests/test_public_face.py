"""The public face: `wattlab.__all__` is exactly what `import wattlab` exports, each name real."""

from __future__ import annotations

import importlib.metadata
import types

import wattlab


def test_all_names_exist_and_are_public() -> None:
    assert len(wattlab.__all__) == len(set(wattlab.__all__)), "a name is listed twice"
    for name in wattlab.__all__:
        assert not name.startswith("_"), name
        assert hasattr(wattlab, name), f"wattlab.__all__ names {name!r}, which wattlab lacks"


def test_every_public_attribute_is_in_all() -> None:
    exported = {
        name
        for name, value in vars(wattlab).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    lazy = set(wattlab._LAZY)  # loaded on first use (PEP 562), so not in vars() before it
    assert exported - lazy == set(wattlab.__all__) - lazy


def test_lazy_names_load_nothing_until_used() -> None:
    import subprocess
    import sys

    code = (
        "import sys, wattlab; assert 'wattlab.estimate' not in sys.modules; "
        "assert callable(wattlab.advise); assert 'wattlab.estimate.advise.api' in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_one_version_source() -> None:
    assert wattlab.__version__ == importlib.metadata.version("wattlab")


def test_the_changelog_s_newest_heading_is_this_version_with_its_date() -> None:
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "CHANGELOG.md").read_text()
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    heading = next(h for h in headings if h != "## Unreleased")  # the newest release
    assert re.fullmatch(rf"## {re.escape(wattlab.__version__)} — \d{{4}}-\d{{2}}-\d{{2}}", heading)


def test_package_is_typed() -> None:
    from importlib import resources

    assert resources.files("wattlab").joinpath("py.typed").is_file()
