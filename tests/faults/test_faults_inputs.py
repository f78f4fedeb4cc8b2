"""The second fault campaign, kept closed (issue 25, inputs and outputs): no code runs from a
data file, no output is written through a symbolic link, nothing unchecked reaches sbatch or
torchrun, every file input is checked before work starts, MLflow fails fast and the power-limit
journal is never lost.

Each test asserts the promise (exit code 2 and one sentence, the link's target untouched, no
marker file), not the behaviour the campaign found. The in-process tests run with the fast
suite; the ones that start the real CLI are marked slow and reuse ``test_faults_cli``'s harness.
"""

from __future__ import annotations

import json
import os
import pickle
import socket
import stat
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from tests.fakes.fake_gpu import FakeNvmlBackend, make_devices
from tests.faults.test_faults_cli import TINY_RUN, Case, a_database, wattlab
from wattlab.errors import ConfigError, DataError, PowerLimitError, WattlabError

MARKER = "MARK-code-ran"


# -- data files --------------------------------------------------------------------------------


class _RunsCode:
    """What a hostile batch holds: unpickling it calls os.system."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _batch(n: int = 16) -> dict:
    """A batch shaped like the official ones (python-2 keys become bytes)."""
    rng = np.random.default_rng(n)
    return {
        b"batch_label": b"training batch 1 of 5",
        b"labels": [int(v) for v in rng.integers(0, 10, n)],
        b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
        b"filenames": [b"img.png"] * n,
    }


def cifar_folder(root: Path, *, evil: str | None = None, truncated: str | None = None) -> Path:
    """A cifar-10-batches-py folder of small protocol-2 batches (as the official archive);
    ``evil`` names a batch that runs code when unpickled, ``truncated`` one cut short."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = _batch()
        if name == evil:
            batch[b"extra"] = _RunsCode(root / MARKER)
        data = pickle.dumps(batch, protocol=2)
        if name == truncated:
            data = data[: len(data) // 2]
        (folder / name).write_bytes(data)
    return folder


@pytest.mark.extra("train")
def test_real_shaped_cifar_batches_load(tmp_path: Path) -> None:
    from wattlab.train.data import check_cifar10_dir, load_cifar10

    cifar_folder(tmp_path)
    assert check_cifar10_dir(tmp_path).name == "cifar-10-batches-py"
    data = load_cifar10(tmp_path)
    assert data.train_size == 80 and data.test_size == 16
    assert data.train_x.shape[1:] == (3, 32, 32)


@pytest.mark.parametrize("batch", ["data_batch_1", "data_batch_4", "test_batch"])
@pytest.mark.extra("train")
def test_a_batch_that_runs_code_is_refused_and_never_runs(tmp_path: Path, batch: str) -> None:
    from wattlab.train.data import UnsafePickleError, check_cifar10_dir, load_cifar10

    cifar_folder(tmp_path, evil=batch)
    for load in (check_cifar10_dir, load_cifar10):
        with pytest.raises(UnsafePickleError, match=r"asks to load posix\.system") as error:
            load(tmp_path)
        assert "\n" not in str(error.value) and str(error.value).count(". ") == 0
    assert not (tmp_path / MARKER).exists()


@pytest.mark.extra("train")
def test_other_globals_are_refused(tmp_path: Path) -> None:
    """A subclass of ndarray or a builtin is refused as well: only plain data is built."""
    from wattlab.train.data import UnsafePickleError, load_data_pickle

    path = tmp_path / "b"
    path.write_bytes(pickle.dumps({b"f": eval}, protocol=2))
    with pytest.raises(UnsafePickleError, match=r"asks to load (__builtin__|builtins)\.eval"):
        load_data_pickle(path)
    path.write_bytes(pickle.dumps({b"x": np.ma.masked_array([1, 2])}, protocol=2))
    with pytest.raises(UnsafePickleError):
        load_data_pickle(path)


@pytest.mark.extra("train")
def test_every_batch_is_checked_before_training(tmp_path: Path) -> None:
    from wattlab.experiment.runs.checks import check_inputs
    from wattlab.train.config import RunConfig

    cifar_folder(tmp_path, truncated="data_batch_5")  # the last one, not read by a small run
    cfg = RunConfig(
        dataset="cifar10",
        data_dir=str(tmp_path),
        device="cpu",
        train_samples=32,
        batch_size=16,
        epochs=1,
    )
    with pytest.raises(DataError, match="data_batch_5' could not be read"):
        check_inputs(cfg)


@pytest.mark.extra("train")
def test_a_dry_run_opens_no_data_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import wattlab.train.data as data
    from wattlab.experiment.runs.checks import check_inputs
    from wattlab.train.config import RunConfig

    cifar_folder(tmp_path, evil="data_batch_1")
    opened: list[Path] = []
    real_open = Path.open

    def spy(self: Path, *args, **kwargs):
        opened.append(self)
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", spy)
    cfg = RunConfig(
        dataset="cifar10",
        data_dir=str(tmp_path),
        device="cpu",
        train_samples=32,
        batch_size=16,
        epochs=1,
    )
    check_inputs(cfg, open_files=False)
    assert opened == [] and not (tmp_path / MARKER).exists()
    (tmp_path / "cifar-10-batches-py" / "test_batch").unlink()
    with pytest.raises(DataError, match="lacks test_batch"):
        data.check_cifar10_dir(tmp_path, open_files=False)


# -- outputs never follow links ------------------------------------------------------------


def _victim(tmp_path: Path, mode: int = 0o4755) -> Path:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    victim.chmod(mode)
    return victim


def _untouched(victim: Path, mode: int = 0o4755) -> bool:
    return victim.read_text() == "precious\n" and stat.S_IMODE(victim.stat().st_mode) == mode


def test_the_writer_refuses_a_link_at_the_target(tmp_path: Path) -> None:
    from wattlab.jsonio import dump_json, write_text_atomic

    victim = _victim(tmp_path)
    link = tmp_path / "out.json"
    link.symlink_to(victim)
    for write in (lambda: write_text_atomic(link, "x"), lambda: dump_json({"a": 1}, link)):
        with pytest.raises(ConfigError, match="is a symbolic link"):
            write()
    assert _untouched(victim) and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "victim.txt"]  # no temp


def test_the_writer_refuses_a_folder_that_is_a_link(tmp_path: Path) -> None:
    from wattlab.jsonio import check_output_dir, check_writable, output_folder, write_text_atomic

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "out").symlink_to(elsewhere, target_is_directory=True)
    for check in (
        lambda: write_text_atomic(tmp_path / "out" / "report.md", "x"),
        lambda: check_writable(tmp_path / "out" / "s.json"),
        lambda: check_output_dir(tmp_path / "out"),
        lambda: output_folder(tmp_path / "out").__enter__(),
    ):
        with pytest.raises(ConfigError, match="is a symbolic link"):
            check()
    assert list(elsewhere.iterdir()) == []


def test_new_files_get_normal_permissions(tmp_path: Path) -> None:
    from wattlab.jsonio import write_text_atomic

    old = os.umask(0o022)
    try:
        write_text_atomic(tmp_path / "report.html", "<p>")
        replaced = {mode: tmp_path / f"summary-{mode:o}.json" for mode in (0o4755, 0o600)}
        for mode, path in replaced.items():
            path.write_text("{}")
            path.chmod(mode)  # the replaced file's mode is never carried over
            write_text_atomic(path, "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "report.html").stat().st_mode) == 0o644
    for path in replaced.values():
        assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_report_and_export_refuse_a_link_among_their_files(tmp_path: Path) -> None:
    from wattlab.analysis.report_files import prepare_out_dir
    from wattlab.experiment.db.export import export_tables
    from wattlab.experiment.db.store import open_store

    victim = _victim(tmp_path)
    out = tmp_path / "rep"
    out.mkdir()
    (out / "energy_vs_time.png").symlink_to(victim)
    with pytest.raises(ConfigError, match="energy_vs_time.png is a symbolic link"):
        prepare_out_dir(out)
    a_database()(tmp_path)
    ex = tmp_path / "ex"
    ex.mkdir()
    (ex / "windows.csv").symlink_to(victim)
    with open_store(tmp_path / "w.db", readonly=True) as store:
        with pytest.raises(ConfigError, match="windows.csv is a symbolic link"):
            export_tables(store, ex)
    assert sorted(p.name for p in ex.iterdir()) == ["windows.csv"]  # nothing half-written
    assert _untouched(victim)


def test_the_sweep_lock_refuses_a_link(tmp_path: Path) -> None:
    from wattlab.experiment.sweep.lock import SweepLock, lock_path

    victim = _victim(tmp_path)
    lock_path(tmp_path / "w.db", "s").symlink_to(victim)
    with pytest.raises(ConfigError, match="sweep lock .* is a symbolic link"):
        SweepLock(tmp_path / "w.db", "s").acquire()
    assert _untouched(victim)


@pytest.mark.parametrize(
    ("points_at", "message"),
    [
        # a dangling link: nothing to restore, so the writer meets the link and refuses it
        ("missing-target", "is a symbolic link"),
        # a link to a file: the session reads it as a journal first; it is no journal, so the
        # session stops in one sentence before it writes anything
        ("victim.txt", "power-limit journal .* cannot be read"),
    ],
)
def test_the_power_journal_is_not_written_through_a_link(
    tmp_path: Path, points_at: str, message: str
) -> None:
    from wattlab.power_limits import PowerLimitSession

    victim = _victim(tmp_path)
    journal = tmp_path / "j.json"
    journal.symlink_to(tmp_path / points_at)
    nv = FakeNvmlBackend(make_devices(1))
    with pytest.raises(WattlabError, match=message):
        with PowerLimitSession(nv, [0], limit_w=500, journal_path=journal, geteuid=lambda: 0):
            pass
    assert journal.is_symlink() and os.readlink(journal) == str(tmp_path / points_at)
    assert not (tmp_path / "missing-target").exists()
    assert victim.read_bytes() == b"precious\n" and _untouched(victim)
    assert nv.set_calls == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["j.json", "victim.txt"]  # no temp


def test_result_files_are_not_written_through_a_link(tmp_path: Path) -> None:
    from tests.experiment.test_store import make_run
    from wattlab.experiment.db.store import open_store
    from wattlab.experiment.executors.result_files import export_result
    from wattlab.experiment.runs.worker import failed_row  # noqa: F401  (the task's own store)

    with open_store(tmp_path / "task.db") as store:
        store.insert_run(make_run())
    victim = _victim(tmp_path)
    (tmp_path / "r.json").symlink_to(victim)
    with pytest.raises(ConfigError, match="symbolic link"):
        export_result(tmp_path / "task.db", tmp_path / "r.json", {"scheduler": "slurm"})
    assert _untouched(victim)


# -- sbatch and torchrun get checked values only ---------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("partition", "debug\ntouch INJECTED #", "--partition must be text on one line"),
        ("partition", "debug; touch x", "--partition must be a SLURM name"),
        ("account", "acct\r", "--account must be text on one line"),
        ("sbatch_flags", ["--comment=a\nb"], "--sbatch-flag must be text on one line"),
        ("sbatch_flags", ["--qos=high\ntouch x"], "--sbatch-flag must be text on one line"),
        ("sbatch_flags", ["--q$(x)=1"], "is not an sbatch option name"),
    ],
)
def test_values_for_sbatch_are_refused_before_any_script(
    tmp_path: Path, field: str, value: object, message: str
) -> None:
    from wattlab.experiment.executors.slurm import SlurmOptions, submitit_parameters

    options = SlurmOptions(folder=tmp_path / "slurm", **{field: value})
    with pytest.raises(ConfigError, match=message):
        options.validate()
    with pytest.raises(ConfigError, match=message):
        submitit_parameters(options, "quickstart", 1)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "endpoint",
    ["junk", "node1:", ":29500", "node1:99999", "node1:0", "a b:1", "node1:29500\n", "::1:5",
     "[::1]", "host:12x", "-rf:1", "x" * 300 + ":1"],
)  # fmt: skip
@pytest.mark.extra("train")
def test_a_junk_rendezvous_endpoint_is_refused(endpoint: str) -> None:
    from wattlab.train.distributed import torchrun_command

    with pytest.raises(ConfigError, match="--rdzv-endpoint"):
        torchrun_command("m", [], 1, nnodes=2, node_rank=0, rdzv_endpoint=endpoint)


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        ("node001:29500", "node001:29500"),
        ("10.0.0.1:1", "10.0.0.1:1"),
        ("[::1]:29500", "[::1]:29500"),
    ],
)
@pytest.mark.extra("train")
def test_good_rendezvous_endpoints_pass(endpoint: str, expected: str) -> None:
    from wattlab.train.distributed import torchrun_command

    command = torchrun_command("m", [], 1, nnodes=2, node_rank=1, rdzv_endpoint=endpoint)
    assert f"--rdzv-endpoint={expected}" in command


def test_a_sweep_name_with_a_trailing_newline_is_refused() -> None:
    from wattlab.experiment.specs.trainer import SweepSpec

    with pytest.raises(ConfigError, match="name: expected letters"):
        SweepSpec(name="quick\n", base={"model": "mobilenet_v3_small"})


# -- intensity traces --------------------------------------------------------------------------


def _trace(tmp_path: Path, rows: list[tuple[datetime, float]]) -> Path:
    path = tmp_path / "grid.csv"
    lines = ["timestamp,intensity_kg_per_kwh"] + [f"{t.isoformat()},{v}" for t, v in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


NOW = datetime.now(timezone.utc).replace(microsecond=0)


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([(NOW, 0.2), (NOW + timedelta(hours=1), 5000)], "above the 3 kgCO2e/kWh"),
        ([(NOW, 0.2), (NOW + timedelta(hours=1), 1e308)], "above the 3 kgCO2e/kWh"),
        (
            [(NOW, 0.2), (NOW + timedelta(hours=1), 0.2), (NOW + timedelta(days=31), 0.2)],
            "has no rows from",
        ),
    ],
)
def test_bad_trace_values_and_holes_are_refused(tmp_path: Path, rows, message: str) -> None:
    from wattlab.monitor.carbon import load_intensity_trace

    with pytest.raises(DataError, match=message) as error:
        load_intensity_trace(_trace(tmp_path, rows))
    assert "\n" not in str(error.value)


def test_a_trace_must_be_a_small_regular_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wattlab.monitor.carbon as carbon

    for path in ("/dev/zero", str(tmp_path)):
        with pytest.raises(DataError, match="not a regular file"):
            carbon.load_intensity_trace(path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(DataError, match="not a regular file"):
        carbon.load_intensity_trace(fifo)  # refused at once, no reader waits for a writer
    monkeypatch.setattr(carbon, "TRACE_MAX_BYTES", 64)
    big = _trace(tmp_path, [(NOW + timedelta(hours=i), 0.2) for i in range(20)])
    with pytest.raises(DataError, match="more than the"):
        carbon.load_intensity_trace(big)


def test_a_trace_must_cover_now_and_says_what_it_covers(tmp_path: Path) -> None:
    from wattlab.monitor.carbon import load_intensity_trace

    past = [(NOW - timedelta(days=3), 0.2), (NOW - timedelta(days=3) + timedelta(hours=1), 0.2)]
    trace = load_intensity_trace(_trace(tmp_path, past))
    with pytest.raises(DataError, match="covers .* which does not include now"):
        trace.check_covers_now()
    around = [(NOW - timedelta(hours=1), 0.2), (NOW + timedelta(hours=1), 0.2)]
    load_intensity_trace(_trace(tmp_path, around)).check_covers_now()


# -- MLflow ------------------------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_mlflow_stores_are_checked_before_any_work(tmp_path: Path) -> None:
    from wattlab.integrations.mlflow import check_tracking_uri

    with pytest.raises(ConfigError, match="cannot reach the MLflow tracking server"):
        check_tracking_uri(f"http://127.0.0.1:{_closed_port()}")
    with pytest.raises(ConfigError, match="which does not exist"):
        check_tracking_uri(f"sqlite:///{tmp_path}/missing/mlflow.db")
    assert not (tmp_path / "missing").exists()
    check_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")  # an existing folder passes


# -- the power-limit journal -------------------------------------------------------------------

DEAD_PID = 2**22 + 12345


@pytest.mark.parametrize(
    "journal",
    [
        {"pid": DEAD_PID, "gpus": [["GPU-x", 300000]]},
        {"pid": DEAD_PID, "gpus": [{"uuid": 7, "original_limit_mw": 300000}]},
        {"pid": DEAD_PID, "gpus": [{"uuid": "GPU-x"}]},
        {"pid": DEAD_PID, "gpus": [{"uuid": "GPU-x", "original_limit_mw": "300 W"}]},
        {"pid": DEAD_PID, "gpus": [{"uuid": "GPU-x", "original_limit_mw": True}]},
        {"pid": "me", "gpus": []},
    ],
)
def test_a_malformed_journal_entry_is_one_sentence(tmp_path: Path, journal: dict) -> None:
    from wattlab.power_limits import restore_from_journal

    path = tmp_path / "j.json"
    path.write_text(json.dumps(journal))
    nv = FakeNvmlBackend(make_devices(1))
    with pytest.raises(PowerLimitError, match="is malformed") as error:
        restore_from_journal(nv, path)
    assert not isinstance(error.value.__cause__, (TypeError, KeyError))
    assert path.exists() and nv.set_calls == []


def test_a_journal_from_another_host_is_kept_and_named(tmp_path: Path) -> None:
    from wattlab.power_limits import PowerLimitSession, restore_from_journal

    nv = FakeNvmlBackend(make_devices(1))
    path = tmp_path / "j.json"
    text = json.dumps(
        {
            "pid": DEAD_PID,
            "hostname": "node-elsewhere",
            "gpus": [{"uuid": "GPU-on-that-node", "original_limit_mw": 650_000}],
        }
    )
    path.write_text(text)
    with pytest.raises(PowerLimitError, match="written on host 'node-elsewhere'"):
        restore_from_journal(nv, path)
    with pytest.raises(PowerLimitError, match="node-elsewhere"):
        with PowerLimitSession(nv, [0], limit_w=500, journal_path=path, geteuid=lambda: 0):
            pass
    assert path.read_text() == text and nv.set_calls == []


def test_a_partial_restore_keeps_the_unapplied_entries(tmp_path: Path) -> None:
    from wattlab.power_limits import PowerLimitSession, restore_from_journal

    nv = FakeNvmlBackend(make_devices(1, limit_w=300.0))
    here = {"uuid": nv.devices[0].uuid, "original_limit_mw": 650_000}
    gone = {"uuid": "GPU-removed", "original_limit_mw": 700_000}
    path = tmp_path / "j.json"
    path.write_text(json.dumps({"pid": DEAD_PID, "gpus": [here, gone]}))
    results = restore_from_journal(nv, path)
    assert [r["status"] for r in results] == ["restored", "gpu not found"]
    assert json.loads(path.read_text())["gpus"] == [gone]  # kept, with only what is left
    with pytest.raises(PowerLimitError, match="could not be put back"):
        with PowerLimitSession(nv, [0], limit_w=500, journal_path=path, geteuid=lambda: 0):
            pass
    assert json.loads(path.read_text())["gpus"] == [gone]


def test_a_restore_that_fails_midway_keeps_what_was_not_applied(tmp_path: Path) -> None:
    from wattlab.power_limits import restore_from_journal

    devices = make_devices(2, limit_w=300.0)
    nv = FakeNvmlBackend(devices)
    devices[1].set_permission_denied = True
    entries = [{"uuid": d.uuid, "original_limit_mw": 650_000} for d in devices]
    path = tmp_path / "j.json"
    path.write_text(json.dumps({"pid": DEAD_PID, "gpus": entries}))
    with pytest.raises(PowerLimitError, match="needs root"):
        restore_from_journal(nv, path)
    assert json.loads(path.read_text())["gpus"] == [entries[1]]


def test_a_new_journal_names_its_host(tmp_path: Path) -> None:
    from wattlab.power_limits import PowerLimitSession

    nv = FakeNvmlBackend(make_devices(1))
    path = tmp_path / "j.json"
    with PowerLimitSession(nv, [0], limit_w=500, journal_path=path, geteuid=lambda: 0):
        assert json.loads(path.read_text())["hostname"] == socket.gethostname()


# -- the real CLI (slow: a subprocess each) ---------------------------------------------------

CIFAR_SPEC = """
name: cifar-tiny
base: {model: mobilenet_v3_small, stem: imagenet, dataset: cifar10, data_dir: data,
       train_samples: 32, test_samples: 16, epochs: 1, warmup_steps: 0,
       device: cpu}
grid: {batch_size: [16]}
repetitions: 1
"""
CIFAR_RUN = [*TINY_RUN, "--dataset", "cifar10", "--data-dir", "data", "--train-samples", "32",
             "--test-samples", "16", "--batch-size", "16"]  # fmt: skip


def files_and_links(folder: Path) -> dict[str, tuple]:
    """Every file (size, mtime, mode) and link (its target) under ``folder``; folders by name
    only (a parse-time write probe may touch a folder's mtime, never a file)."""
    out: dict[str, tuple] = {}
    for path in sorted(folder.rglob("*")):
        st = path.lstat()
        name = str(path.relative_to(folder))
        if stat.S_ISLNK(st.st_mode):
            out[name] = ("link", os.readlink(path))
        elif stat.S_ISDIR(st.st_mode):
            out[name] = ("folder",)
        else:
            out[name] = (st.st_size, st.st_mtime_ns, st.st_mode)
    return out


def _past_trace(cwd: Path) -> None:
    _trace(cwd, [(NOW - timedelta(days=3), 0.2), (NOW - timedelta(days=3, hours=-1), 0.2)])


def _link_in(name: str, target: str = "victim.txt") -> object:
    def setup(cwd: Path) -> None:
        (cwd / target).write_text("precious\n")
        (cwd / target).chmod(0o4755)
        parent = (cwd / name).parent
        parent.mkdir(parents=True, exist_ok=True)
        (cwd / name).symlink_to(cwd / target)

    return setup


def _db_and(*setups) -> object:
    return lambda cwd: [a_database()(cwd), *(s(cwd) for s in setups)]


SLOW_CASES = [
    Case(
        "run-cifar-runs-code",
        [*CIFAR_RUN, "--db", "w.db"],
        "asks to load posix.system",
        setup=lambda cwd: cifar_folder(cwd / "data", evil="data_batch_2"),
    ),
    Case(
        "sweep-cifar-runs-code",
        ["sweep", "spec.yaml", "--db", "w.db"],
        "asks to load posix.system",
        setup=lambda cwd: (
            cifar_folder(cwd / "data", evil="test_batch"),
            (cwd / "spec.yaml").write_text(CIFAR_SPEC),
        ),
    ),
    Case(
        "run-cifar-truncated-batch",
        [*CIFAR_RUN, "--db", "w.db"],
        "data_batch_4' could not be read",
        setup=lambda cwd: cifar_folder(cwd / "data", truncated="data_batch_4"),
    ),
    Case(
        "report-out-link-folder",
        ["report", "--db", "w.db", "--out", "rep"],
        "is a symbolic link",
        setup=_db_and(lambda cwd: ((cwd / "real").mkdir(), (cwd / "rep").symlink_to("real"))),
    ),
    Case(
        "report-link-among-files",
        ["report", "--db", "w.db", "--out", "rep"],
        "co2e.png is a symbolic link",
        setup=_db_and(_link_in("rep/co2e.png")),
    ),
    Case(
        "report-html-link",
        ["report", "--db", "w.db", "--out", "rep"],
        "report.html is a symbolic link",
        setup=_db_and(_link_in("rep/report.html")),
    ),
    Case(
        "export-link-among-files",
        ["export", "--db", "w.db", "--out", "ex"],
        "runs.csv is a symbolic link",
        setup=_db_and(_link_in("ex/runs.csv")),
    ),
    Case(
        "report-json-link",
        ["report", "--db", "w.db", "--json", "s.json"],
        "s.json: it is a symbolic link",
        setup=_db_and(_link_in("s.json")),
    ),
    Case(
        "sweep-lock-link",
        ["sweep", "quickstart", "--db", "w.db"],
        "is a symbolic link",
        setup=_link_in("w.db.quickstart.sweep-lock"),
    ),
    Case(
        "slurm-partition-injection",
        [
            "sweep",
            "quickstart",
            "--db",
            "w.db",
            "--executor",
            "slurm",
            "--partition",
            "debug\ntouch INJECTED #",
        ],
        "--partition must be text on one line",
    ),  # fmt: skip
    Case(
        "run-rdzv-junk",
        [*TINY_RUN, "--nnodes", "2", "--rdzv-endpoint", "junk!", "--db", "w.db"],
        "--rdzv-endpoint must be HOST:PORT",
    ),
    Case(
        "monitor-trace-dev-zero",
        ["monitor", "--intensity-trace", "/dev/zero", "--", "touch", MARKER],
        "not a regular file",
    ),
    Case(
        "monitor-trace-past",
        ["monitor", "--intensity-trace", "grid.csv", "--", "touch", MARKER],
        "does not include now",
        setup=_past_trace,
    ),
    Case(
        "run-trace-past",
        [*TINY_RUN, "--intensity-trace", "grid.csv", "--db", "w.db"],
        "does not include now",
        setup=_past_trace,
    ),
    Case(
        "sweep-name-newline",
        ["sweep", "spec.yaml", "--db", "w.db", "--dry-run"],
        "name: expected letters",
        setup=lambda cwd: (cwd / "spec.yaml").write_text(
            'name: "quick\\n"\nbase: {model: mobilenet_v3_small}\n'
        ),
    ),
    Case(
        "export-mlflow-closed-port",
        ["export", "--db", "w.db", "--mlflow", "--tracking-uri", "http://127.0.0.1:9"],
        "cannot reach the MLflow tracking server",
        setup=a_database(),
    ),
    Case(
        "export-mlflow-sqlite-missing-folder",
        ["export", "--db", "w.db", "--mlflow", "--tracking-uri", "sqlite:///nope/m.db"],
        "which does not exist",
        setup=a_database(),
    ),
]


@pytest.mark.slow  # a subprocess per case
@pytest.mark.parametrize("case", SLOW_CASES, ids=[c.id for c in SLOW_CASES])
def test_cli_fault_is_one_line_exit_2_and_nothing_written(case: Case, tmp_path: Path) -> None:
    if case.setup is not None:
        case.setup(tmp_path)
    before = files_and_links(tmp_path)
    done = wattlab(*case.args, cwd=tmp_path, timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == case.code, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert len(lines) == 1, done.stderr[-2000:]
    assert case.message in lines[0], lines[0]
    assert files_and_links(tmp_path) == before  # nothing written; a link's target untouched
    assert not (tmp_path / MARKER).exists() and not (tmp_path / "INJECTED").exists()


@pytest.mark.slow
def test_a_dry_run_of_a_hostile_cifar_folder_runs_no_code(tmp_path: Path) -> None:
    cifar_folder(tmp_path / "data", evil="data_batch_1")
    (tmp_path / "spec.yaml").write_text(CIFAR_SPEC)
    before = files_and_links(tmp_path)
    done = wattlab("sweep", "spec.yaml", "--db", "w.db", "--dry-run", cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]  # it plans, and opens no data file
    assert not (tmp_path / MARKER).exists()
    assert files_and_links(tmp_path) == before


@pytest.mark.slow
def test_report_html_is_0644_under_umask_022(tmp_path: Path) -> None:
    a_database()(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c",
         "import os, sys; os.umask(0o022); sys.argv = ['wattlab', 'report', '--db', 'w.db', "
         "'--out', 'rep', '--json', '-']; from wattlab.cli import main; main()"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    for path in (tmp_path / "rep").iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


# -- advise names only its own flags (issue 33) ------------------------------------------------


@pytest.mark.parametrize("gpu_name", ["unknown", "A100"])  # unknown, and several matches
def test_advise_on_an_unknown_gpu_names_no_flag_it_lacks(gpu_name: str) -> None:
    from wattlab.estimate.advise.advisor import advise

    with pytest.raises(ConfigError) as caught:
        advise(model="resnet18", gpu_name=gpu_name, epochs=1)
    message = str(caught.value)
    assert "--gpu-tdp" not in message and "--gpu-name" in message, message
    assert message.count(". ") == 0 and message.endswith("."), message


def test_advise_from_a_run_on_an_unknown_gpu_names_no_flag_it_lacks() -> None:
    import pandas as pd

    from wattlab.estimate.advise.stored import advise_from_run

    runs = pd.DataFrame([{"id": 1, "status": "ok", "device": "cuda", "duration_s": 10.0,
                          "energy_total_j": 100.0, "gpu_name": "Voodoo 5"}])  # fmt: skip
    with pytest.raises(DataError) as caught:
        advise_from_run(runs, pd.DataFrame(), pd.DataFrame(), 1)
    message = str(caught.value)
    assert "--gpu-tdp" not in message and "'Voodoo 5'" in message, message
