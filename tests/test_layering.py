"""Two pillars, joined above them. Measure: meters <- monitor (windows, carbon, the Prometheus
exporter) and power_limits. Workload: train. Neither pillar imports the other; experiment/ joins
them, and analysis/estimate <- cli sit above it. Nothing imports from a layer above its own, and
the measuring core loads nothing heavy or high up."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Collection
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
    "wattlab.monitor": 1,  # energy windows, carbon, the Prometheus exporter
    "wattlab.power_limits": 1,
    "wattlab": 1,  # the package's __init__: re-exports the measuring API
    "wattlab.step": 1,  # STEP: the worker projects live, so it sits below experiment
    # which of the two settings a run projects after: plain checks any layer may use (RunConfig)
    "wattlab.step.schedule": BASE,
    "wattlab.train": 1,
    "wattlab.experiment": 2,  # joins the two pillars; its shared leaves: options, hosts
    # experiment's rooms, each above the ones it uses (docs/layout.md): what a sweep measures,
    # the store, the run kinds, the one sweep driver, the SLURM executor, what --json writes
    "wattlab.experiment.specs": 2.1,
    "wattlab.experiment.db": 2.2,
    "wattlab.experiment.runs": 2.3,
    "wattlab.experiment.sweep": 2.4,
    "wattlab.experiment.executors": 2.5,
    "wattlab.experiment.result_json": 2.6,
    "wattlab.analysis": 3,
    "wattlab.estimate": 3,
    "wattlab.integrations": 3.5,  # may import anything below cli
    "wattlab.cli": 4,
}

# The pillars below experiment/. A module in a pillar imports only its own pillar and base
# utilities: the measuring core needs no training code, and train needs no measuring code (it
# imports only wattlab.errors; the experiment hands it the monitor's windows through
# train.loop.WindowHooks). A package not listed here belongs to no pillar; only the layers hold
# it. Longest prefix wins, as for LAYERS.
MEASURE, WORKLOAD = "measure", "workload"
PILLARS: dict[str, str] = {
    "wattlab.meters": MEASURE,
    "wattlab.monitor": MEASURE,
    "wattlab.power_limits": MEASURE,  # sets GPU power limits through meters.nvml
    "wattlab": MEASURE,  # the package's __init__
    "wattlab.train": WORKLOAD,
}

# Arrows that still point upward, each with the reason it is tolerated. Keep this empty: an
# entry is a debt with an owner, not a permission.
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {}


def _longest_prefix(module: str, table: Collection[str]) -> str | None:
    if module == "wattlab":
        return "wattlab" if "wattlab" in table else None
    best = ""
    for prefix in table:
        if prefix == "wattlab":
            continue
        if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best):
            best = prefix
    return best or None


def layer_of(module: str) -> float:
    prefix = _longest_prefix(module, LAYERS)
    return LAYERS[prefix] if prefix else BASE


def pillar_of(module: str) -> str | None:
    prefix = _longest_prefix(module, PILLARS)
    return PILLARS[prefix] if prefix else None


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
            where = f"{path.relative_to(REPO)}:{line}: {importer}"
            mine, theirs = layer_of(importer), layer_of(imported)
            if mine == BASE and theirs != BASE or theirs > mine:
                problems.append(f"{where} (layer {mine}) imports {imported} (layer {theirs})")
            pillar, their_pillar = pillar_of(importer), pillar_of(imported)
            if pillar is not None and theirs != BASE and their_pillar != pillar:
                problems.append(
                    f"{where} ({pillar} pillar) imports {imported} ({their_pillar or 'no'} pillar)"
                )
    return problems


def test_layer_table_knows_every_package():
    packages = {module_name(p.parent) for p in PACKAGE.rglob("__init__.py")}
    unknown = sorted(p for p in packages if layer_of(p) == BASE)
    assert unknown == [], f"add these packages to LAYERS in {Path(__file__).name}: {unknown}"


def test_the_pillars_stand_below_experiment_and_name_known_packages():
    assert set(PILLARS) <= set(LAYERS)  # a pillar entry outlives no move
    assert all(LAYERS[p] < LAYERS["wattlab.experiment"] for p in PILLARS)
    assert {PILLARS[p] for p in PILLARS} == {MEASURE, WORKLOAD}


def test_layer_of():
    assert layer_of("wattlab.meters.nvml") == 0
    assert layer_of("wattlab.monitor") == 1
    assert layer_of("wattlab.monitor.carbon") == 1
    assert layer_of("wattlab.monitoring") == BASE  # a prefix must end at a dot
    assert layer_of("wattlab.cli.render") == 4
    assert layer_of("wattlab") == 1
    assert layer_of("wattlab.errors") == BASE


def test_pillar_of():
    assert pillar_of("wattlab.meters.nvml") == MEASURE
    assert pillar_of("wattlab.monitor.prometheus") == MEASURE
    assert pillar_of("wattlab") == MEASURE
    assert pillar_of("wattlab.train.loop") == WORKLOAD
    assert pillar_of("wattlab.trainer") is None  # a prefix must end at a dot
    assert pillar_of("wattlab.experiment.runs.worker") is None
    assert pillar_of("wattlab.errors") is None


def test_the_scan_sees_lazy_and_relative_imports_and_pillar_crossings(tmp_path, monkeypatch):
    root = tmp_path / "wattlab"
    for package in ("meters", "train"):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "meters" / "bad.py").write_text(
        "def f():\n    from wattlab.cli import render\n\nfrom ..experiment import store\n"
    )
    (root / "train" / "loop.py").write_text(
        "from wattlab.errors import ConfigError\nfrom ..monitor import EnergyMonitor\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", root)
    problems = upward_imports()
    assert len(problems) == 5
    assert "bad.py:2: wattlab.meters.bad (layer 0) imports wattlab.cli (layer 4)" in problems[0]
    assert (
        "bad.py:2: wattlab.meters.bad (measure pillar) imports wattlab.cli (no pillar)"
        in (problems[1])
    )
    assert (
        "bad.py:4: wattlab.meters.bad (layer 0) imports wattlab.experiment (layer 2)"
        in (problems[2])
    )
    assert (
        "loop.py:2: wattlab.train.loop (workload pillar) imports wattlab.monitor " in (problems[4])
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


def import_graph(prefix: str) -> dict[str, set[str]]:
    """Which modules under ``prefix`` each module under it imports, anywhere in the file (top
    level, in a function, under TYPE_CHECKING). ``from pkg import mod`` names the module
    ``pkg.mod`` when it is one, else ``pkg``."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    inside = {m for m in modules if m == prefix or m.startswith(prefix + ".")}
    graph: dict[str, set[str]] = {}
    for name in sorted(inside):
        path = modules[name]
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    found.add(sub if sub in modules else target)
        graph[name] = {m for m in found if m in inside and m != name}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) for each group of modules that import each other."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        order[node] = low[node] = len(order)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in order:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], order[nxt])
        if low[node] == order[node]:
            group = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in order:
            visit(node)
    cycles = []
    for group in groups:  # the shortest way from the group's first module back to itself
        start = min(group)
        paths = {start: [start]}
        queue = [start]
        while queue:
            node = queue.pop(0)
            for nxt in sorted(graph[node] & group):
                if nxt == start:
                    queue = []
                    cycles.append(paths[node] + [start])
                    break
                if nxt not in paths:
                    paths[nxt] = paths[node] + [nxt]
                    queue.append(nxt)
    return sorted(cycles)


def test_import_cycles_are_found_and_named():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"f"}, "f": {"e"}}
    assert import_cycles(graph) == [["a", "b", "c", "a"], ["e", "f", "e"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_the_scan_sees_function_level_and_type_checking_imports(tmp_path, monkeypatch):
    root = tmp_path / "wattlab" / "experiment"
    root.mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "a.py").write_text("def f():\n    from wattlab.experiment import b\n")
    (root / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import f\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "wattlab")
    graph = import_graph("wattlab.experiment")
    assert graph["wattlab.experiment.a"] == {"wattlab.experiment.b"}
    assert import_cycles(graph) == [
        ["wattlab.experiment.a", "wattlab.experiment.b", "wattlab.experiment.a"]
    ]


def test_experiment_has_no_import_cycle():
    """Every room of experiment/ imports only what sits below it, lazily or not: a circle
    means two modules that cannot be read, or changed, one without the other."""
    cycles = import_cycles(import_graph("wattlab.experiment"))
    assert cycles == [], "modules that import each other:\n" + "\n".join(
        " -> ".join(cycle) for cycle in cycles
    )


def test_wattlab_has_no_import_cycle_anywhere():
    """The same for every package and across packages (issue 38: estimate/ held a circle of
    13 modules, baselines <-> methods/* <-> step_marks): the whole of wattlab/ is one graph."""
    cycles = import_cycles(import_graph("wattlab"))
    assert cycles == [], "modules that import each other:\n" + "\n".join(
        " -> ".join(cycle) for cycle in cycles
    )


@pytest.mark.parametrize(
    "package", sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
)
def test_no_package_has_an_import_cycle(package):
    """Each package on its own, so a failure names the package."""
    cycles = import_cycles(import_graph(f"wattlab.{package}"))
    assert cycles == [], f"modules of {package}/ that import each other:\n" + "\n".join(
        " -> ".join(cycle) for cycle in cycles
    )


FORBIDDEN = ("torch", "wattlab.train", "wattlab.experiment", "wattlab.analysis", "wattlab.cli")
FORBIDDEN += ("wattlab.estimate", "wattlab.integrations", "prometheus_client")


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
