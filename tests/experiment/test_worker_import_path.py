"""A sweep's worker imports the installed wattlab whatever the current folder holds, and a run
that fails stores and prints its real error (issue 48).

``python -m`` puts the current folder first on ``sys.path``: run from the folder that holds the
clone (or beside any folder called ``wattlab``), the worker imported that folder instead of the
package, and every run printed ``FAILED — None`` while its row stayed ``running``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import wattlab
from tests.in_process import wattlab_in_process
from wattlab.python_argv import module_argv

PACKAGE_DIR = Path(wattlab.__file__).resolve().parent

SPEC = """
name: decoy
base: {model: mobilenet_v3_small, stem: imagenet, device: cpu, train_samples: 64,
       test_samples: 32, epochs: 1, batch_size: 32, warmup_steps: 1}
grid: {precision: [fp32]}
repetitions: 1
order: sequential
warmup_runs: 0
cooldown_s: 0
"""


def _decoy(folder: Path, body: str) -> Path:
    """A folder ``wattlab`` in ``folder`` that is not the package."""
    (folder / "wattlab").mkdir()
    (folder / "wattlab" / "__init__.py").write_text(body)
    return folder


def test_a_module_started_by_wattlab_never_imports_the_current_folders_wattlab(tmp_path):
    cwd = _decoy(tmp_path, "raise ImportError('the decoy, not the package')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    plain = subprocess.run([sys.executable, "-m", "wattlab.python_argv"], cwd=cwd, env=env,
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert "the decoy, not the package" in plain.stderr  # what -m did
    done = subprocess.run(
        [*module_argv("wattlab.python_argv"), "a", "b"], cwd=cwd, env=env,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # and the module runs as -m runs it: as __main__, with its own arguments
    shown = subprocess.run(
        [*module_argv("json.tool", "--compact")], cwd=cwd, env=env, input='{"a": [1, 2]}',
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert shown.returncode == 0 and shown.stdout.strip() == '{"a":[1,2]}', shown.stderr


@pytest.mark.slow
@pytest.mark.extra("train")
def test_a_sweep_started_beside_a_folder_called_wattlab_runs(tmp_path):
    cwd = _decoy(tmp_path, "raise ImportError('the decoy, not the package')\n")
    (cwd / "decoy.yaml").write_text(SPEC)
    done = wattlab_in_process("sweep", "decoy.yaml", "--db", "d.db", "--json", "s.json", cwd=cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((cwd / "s.json").read_text())["results"]
    assert [r["status"] for r in results] == ["ok"]


@pytest.mark.slow
@pytest.mark.extra("train")
def test_a_worker_that_cannot_import_wattlab_stores_and_prints_its_real_error(tmp_path):
    # first on PYTHONPATH: a wattlab whose modules are the package's but which has no
    # __version__ (what a namespace package made of the clone's folder did)
    (tmp_path / "path").mkdir()
    decoy = _decoy(tmp_path / "path", f"__path__ = [{str(PACKAGE_DIR)!r}]\n")
    (tmp_path / "decoy.yaml").write_text(SPEC)
    path = os.pathsep.join([str(decoy), os.environ.get("PYTHONPATH", "")])
    done = wattlab_in_process("sweep", "decoy.yaml", "--db", "d.db", cwd=tmp_path,
                              env={"PYTHONPATH": path})  # fmt: skip
    assert done.returncode != 0
    assert "None" not in done.stderr
    assert "cannot import name '__version__'" in done.stderr, done.stderr[-3000:]
    con = sqlite3.connect(tmp_path / "d.db")
    rows = con.execute("SELECT status, error FROM runs").fetchall()
    assert len(rows) == 1 and rows[0][0] == "failed", rows
    assert "cannot import name '__version__'" in rows[0][1]
