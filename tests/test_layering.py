"""The layers point one way: meters <- monitor/carbon/step/power_limits <- train <-
experiment <- analysis/estimate <- cli. Nothing imports from a layer above its own, and the
measuring core loads nothing heavy or high up."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "wattlab"

# Higher numbers sit above lower ones; a module may import its own layer and any layer below.
# The longest matching prefix wins. A top-level module not listed here (wattlab.errors,
# wattlab.jsonio, any new helper) is a base utility: it may import only other base utilities.
BASE = -1
LAYERS: dict[str, float] = {
    "wattlab.meters": 0,
    "wattlab.monitor": 1,
    "wattlab.carbon": 1,
    "wattlab.step": 1,  # STEP: the worker projects live, so it sits below experiment
    "wattlab.power_limits": 1,
    "wattlab": 1,  # the package's __init__: re-exports the measuring API
    "wattlab.train": 2,
    "wattlab.experiment": 3,
    "wattlab.analysis": 4,
    "wattlab.estimate": 4,
    "wattlab.integrations": 4.5,  # may import anything below cli
    # served by EnergyMonitor(prometheus_port=...): part of the measuring core, imports only it
    "wattlab.integrations.prometheus": 1,
    "wattlab.cli": 5,
}

# Arrows that still point upward, each with the reason it is tolerated. Keep this empty: an
# entry is a debt with an owner, not a permission.
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {}


def layer_of(module: str) -> float:
    if module == "wattlab":
        return LAYERS["wattlab"]
    best = ""
    for prefix in LAYERS:
        if prefix == "wattlab":
            continue
        if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best):
            best = prefix
    return LAYERS[best] if best else BASE


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def wattlab_imports(path: Path) -> list[tuple[str, int]]:
    """Every wattlab module this file imports (anywhere in it, lazily or not), with lines."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((target, node.lineno))
    return sorted((m, line) for m, line in found if m == "wattlab" or m.startswith("wattlab."))


def upward_imports() -> list[str]:
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        importer = module_name(path)
        for imported, line in wattlab_imports(path):
            if (importer, imported) in KNOWN_EXCEPTIONS:
                continue
            mine, theirs = layer_of(importer), layer_of(imported)
            if mine == BASE and theirs != BASE or theirs > mine:
                problems.append(
                    f"{path.relative_to(REPO)}:{line}: {importer} (layer {mine}) imports "
                    f"{imported} (layer {theirs})"
                )
    return problems


def test_layer_table_knows_every_package():
    packages = {module_name(p.parent) for p in PACKAGE.rglob("__init__.py")}
    unknown = sorted(p for p in packages if layer_of(p) == BASE)
    assert unknown == [], f"add these packages to LAYERS in {Path(__file__).name}: {unknown}"


def test_layer_of():
    assert layer_of("wattlab.meters.nvml") == 0
    assert layer_of("wattlab.monitor") == 1
    assert layer_of("wattlab.monitoring") == BASE  # a prefix must end at a dot
    assert layer_of("wattlab.cli.render") == 5
    assert layer_of("wattlab") == 1
    assert layer_of("wattlab.errors") == BASE


def test_the_scan_sees_lazy_and_relative_imports(tmp_path, monkeypatch):
    fake = tmp_path / "wattlab" / "meters"
    fake.mkdir(parents=True)
    (tmp_path / "wattlab" / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("")
    (fake / "bad.py").write_text(
        "def f():\n    from wattlab.cli import render\n\nfrom ..experiment import store\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "wattlab")
    problems = upward_imports()
    assert len(problems) == 2
    assert "bad.py:2: wattlab.meters.bad (layer 0) imports wattlab.cli (layer 5)" in problems[0]
    assert (
        "bad.py:4: wattlab.meters.bad (layer 0) imports wattlab.experiment (layer 3)"
        in (problems[1])
    )


def test_no_module_imports_from_a_layer_above_it():
    problems = upward_imports()
    assert problems == [], "imports that point upward:\n" + "\n".join(problems)


def test_known_exceptions_are_still_needed():
    """An exception that no longer matches any import must be deleted from the list."""
    seen = set()
    for path in PACKAGE.rglob("*.py"):
        seen |= {(module_name(path), imported) for imported, _ in wattlab_imports(path)}
    assert sorted(set(KNOWN_EXCEPTIONS) - seen) == []


FORBIDDEN = ("torch", "wattlab.train", "wattlab.experiment", "wattlab.analysis", "wattlab.cli")
FORBIDDEN += ("wattlab.estimate",)


@pytest.mark.parametrize(
    "module",
    ["wattlab.meters", "wattlab.monitor", "wattlab"]
    + [
        f"wattlab.step.{m}"
        for m in ("epochs", "marks", "stored", "calibration", "paper", "schedule")
    ],
)
def test_the_measuring_core_loads_nothing_from_above(module):
    code = f"import json, sys\nimport {module}\nprint(json.dumps(sorted(sys.modules)))\n"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    loaded = json.loads(done.stdout)
    bad = [m for m in loaded if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)]
    assert module in loaded and bad == []
