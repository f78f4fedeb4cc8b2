"""Sixth fault campaign (issue #50 item 4): a database never makes wattlab run code. A model
factory (``FILE.py:FUNC``) that a stored run names is imported only when the user names it again
(``advise --db --run --model-factory``); otherwise one sentence says what would be imported."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from wattlab.experiment.db.store import open_store


def planted(tmp_path: Path) -> tuple[Path, Path]:
    """A helper.py whose import touches a marker file, and that marker's path."""
    marker = tmp_path / "IMPORTED"
    helper = tmp_path / "helper.py"
    helper.write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).touch()\n\n"
        "def make(num_classes=10):\n    raise SystemExit(3)\n"
    )
    return helper, marker


def shared_db(path: Path, ref: str) -> Path:
    """A database holding one ok H200 run whose model is the factory ``ref``, with a GPU trace
    (so the power-limit knob can still be advised)."""
    with open_store(path) as store:
        store.insert_run(
            {"sweep": None, "status": "ok", "config_hash": "h", "repetition": 0,
             "config_json": {"model": ref, "model_factory": ref, "precision": "fp32",
                             "batch_size": 256},
             "label": ref, "model": ref, "precision": "fp32", "batch_size": 256,
             "samples": 50_000, "train_size": 50_000, "epochs": 1, "gpus": 1,
             "gpu_name": "NVIDIA H200", "device": "cuda", "power_limit_w": 700.0,
             "gpu_tdp_w": 700.0,
             "duration_s": 60.0, "energy_total_j": 30_000.0, "energy_gpu_j": 27_000.0},
            [{"name": "budget", "start_s": 0.0, "duration_s": 60.0, "energy_total_j": 30_000.0,
              "energy_gpu_j": 27_000.0}],
            [(t * 0.5, "gpu0", 450.0) for t in range(121)],
        )  # fmt: skip
    return path


def wattlab(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    from wattlab.cli.app import main

    monkeypatch.setattr(sys, "argv", ["wattlab", *args])
    with pytest.raises(SystemExit) as stop:
        main()
    out = capsys.readouterr()
    return int(stop.value.code or 0), out.out, out.err


def test_advise_from_a_stored_run_never_imports_its_factory_unasked(
    tmp_path, monkeypatch, capsys
) -> None:
    helper, marker = planted(tmp_path)
    ref = f"{helper}:make"
    db = shared_db(tmp_path / "shared.db", ref)
    code, out, err = wattlab(monkeypatch, capsys, "advise", "--db", str(db), "--run", "1")
    assert not marker.exists()
    assert code == 0, err
    said = [line for line in err.splitlines() if "imports" in line]
    assert len(said) == 1 and ref in said[0] and "--model-factory" in said[0], err
    assert "power limit" in out
    # --probe would build the model: refused in one sentence, nothing imported
    code, out, err = wattlab(monkeypatch, capsys, "advise", "--db", str(db), "--run", "1",
                             "--probe", "10")  # fmt: skip
    assert code == 2 and not marker.exists()
    assert len(err.strip().splitlines()) == 1 and ref in err and "nothing was probed" in err


def test_another_factory_named_with_a_stored_run_is_refused(tmp_path, monkeypatch, capsys):
    helper, marker = planted(tmp_path)
    db = shared_db(tmp_path / "shared.db", f"{helper}:make")
    code, _, err = wattlab(monkeypatch, capsys, "advise", "--db", str(db), "--run", "1",
                           "--model-factory", f"{helper}:other")  # fmt: skip
    assert code == 2 and not marker.exists()
    assert len(err.strip().splitlines()) == 1 and "is not run 1's model" in err


def test_the_reports_advice_never_imports_a_stored_factory(tmp_path) -> None:
    from wattlab.analysis.report_advice import advice_blocks, advice_rows

    helper, marker = planted(tmp_path)
    ref = f"{helper}:make"
    db = shared_db(tmp_path / "shared.db", ref)
    with open_store(db, readonly=True) as store:
        runs, windows, trace = store.runs(), store.windows(), store.trace()
    data = {"configurations": [{"label": ref, "config_hash": "h", "is_baseline": True}]}
    rows = advice_rows(runs, windows, trace, data)
    assert not marker.exists()
    assert rows[0]["not_imported"] and ref in rows[0]["not_imported"]
    table = advice_blocks(rows)[-1]
    assert any("wattlab imports" in cell for row in table.rows for cell in row)


def test_a_named_factory_is_the_stored_ones_own(tmp_path) -> None:
    from wattlab.train.factory_ref import same_factory

    helper, _ = planted(tmp_path)
    ref = f"{helper}:make"
    assert same_factory(ref, ref)
    assert same_factory(ref, f"{tmp_path}/./helper.py:make")
    assert not same_factory(ref, f"{helper}:other")
    assert not same_factory(ref, None)
    assert not same_factory("resnet18", "resnet18")


@pytest.mark.slow  # imports torch to count the factory's model
def test_a_factory_named_again_is_imported(tmp_path, monkeypatch, capsys) -> None:
    helper, marker = planted(tmp_path)
    ref = f"{helper}:make"
    db = shared_db(tmp_path / "shared.db", ref)
    code, _, err = wattlab(monkeypatch, capsys, "advise", "--db", str(db), "--run", "1",
                           "--model-factory", ref)  # fmt: skip
    assert marker.exists(), err
    assert "only when you name it again" not in err


# -- git: the fingerprint reads a checkout, never runs what it configures (items 5 and 6) ------
def _checkout(folder: Path) -> str:
    import subprocess

    env = {**{f"GIT_{r}_{k}": v for r in ("AUTHOR", "COMMITTER")
              for k, v in (("NAME", "t"), ("EMAIL", "t@t"))},
           "HOME": str(folder.parent), "PATH": "/usr/bin:/bin"}  # fmt: skip
    folder.mkdir()
    (folder / "train.py").write_text("print(1)\n")
    for args in (["init", "-q"], ["add", "train.py"], ["commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(folder), *args], check=True, env=env)
    return subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip


def _config(folder: Path, key: str, value: str) -> None:
    import subprocess

    subprocess.run(["git", "-C", str(folder), "config", key, value], check=True)


def test_the_fingerprint_runs_no_command_a_checkout_configures(tmp_path) -> None:
    from wattlab.experiment.db.fingerprint import code_state

    repo = tmp_path / "r"
    head = _checkout(repo)
    marks = {name: tmp_path / name for name in ("FSMONITOR", "HOOK", "CLEAN", "PROCESS")}
    _config(repo, "core.fsmonitor", f"touch {marks['FSMONITOR']}; echo")
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for hook in ("post-index-change", "reference-transaction", "fsmonitor-watchman"):
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {marks['HOOK']}\n")
        (hooks / hook).chmod(0o755)
    _config(repo, "core.hooksPath", str(hooks))
    (repo / ".gitattributes").write_text("*.py filter=evil\n")
    _config(repo, "filter.evil.clean", f"touch {marks['CLEAN']}; cat")
    _config(repo, "filter.evil.required", "true")
    (repo / "train.py").write_text("print(2)\n")  # a modified file: status compares it
    state = code_state(repo)
    assert [name for name, mark in marks.items() if mark.exists()] == []
    assert state.commit == head and state.dirty is True
    # the same with a long-running filter process named instead
    _config(repo, "filter.evil.process", f"sh -c 'touch {marks['PROCESS']}'")
    code_state(repo)
    assert not marks["PROCESS"].exists()


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_hung_git_and_everything_it_started_end_with_the_timeout(tmp_path, monkeypatch):
    import time

    from wattlab.experiment.db import fingerprint

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pids = tmp_path / "pids"
    (bin_dir / "git").write_text(f"#!/bin/sh\nsleep 300 &\necho $! >> {pids}\nwait\n")
    (bin_dir / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setattr(fingerprint, "GIT_TIMEOUT_S", 1.0)
    started = time.monotonic()
    state = fingerprint.code_state(tmp_path)
    assert time.monotonic() - started < 10
    assert state == fingerprint.CodeState(None, None)
    children = [int(line) for line in pids.read_text().split()]
    assert children
    deadline = time.monotonic() + 5
    while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in children)


def test_what_a_git_that_succeeds_left_in_its_group_ends_with_it(tmp_path, monkeypatch) -> None:
    import shutil
    import time

    from wattlab.experiment.db.fingerprint import code_state

    real_git = shutil.which("git")
    assert real_git is not None
    repo = tmp_path / "r"
    head = _checkout(repo)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pids = tmp_path / "pids"
    (bin_dir / "git").write_text(  # a child that lets go of git's stdout, then git itself
        f'#!/bin/sh\nsleep 300 >/dev/null 2>&1 &\necho $! >> {pids}\nexec {real_git} "$@"\n'
    )
    (bin_dir / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    assert code_state(repo).commit == head
    children = [int(line) for line in pids.read_text().split()]
    deadline = time.monotonic() + 5
    while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert children and not any(_alive(pid) for pid in children)


def test_features_of_stored_runs_never_import_a_factory(tmp_path) -> None:
    """PRE's features of a database's runs (estimate --db, evaluate): a factory a run names is
    not built from the database; its recorded FLOPs are used, or the row says why it has none."""
    from wattlab.estimate.features import run_features

    helper, marker = planted(tmp_path)
    ref = f"{helper}:make"
    db = shared_db(tmp_path / "shared.db", ref)
    with open_store(db, readonly=True) as store:
        runs = store.runs()
    runs.loc[:, "epochs"] = 1.0
    without = run_features(runs)
    assert not marker.exists()
    assert "not imported from a database" in str(without["feature_error"].iloc[0])
    runs.loc[:, "model_gflops_per_sample"] = 0.5
    runs.loc[:, "params"] = 1e6
    counted = run_features(runs)
    assert not marker.exists()
    assert counted["feature_error"].iloc[0] is None
    assert counted["gflops_per_sample"].iloc[0] == 0.5


def test_the_flops_method_on_a_stored_run_never_imports_its_factory(tmp_path) -> None:
    from wattlab.estimate.methods import flops, gpu_facts

    helper, marker = planted(tmp_path)
    ref = f"{helper}:make"
    db = shared_db(tmp_path / "shared.db", ref)
    with open_store(db, readonly=True) as store:
        run = store.runs().iloc[0].to_dict()
    estimate = flops._stored(run, gpu_facts.stored_gpu_args(run), 0.3)
    assert not marker.exists()
    assert not estimate.ok and "not imported from a database" in str(estimate.error)
