"""The fault campaign, kept closed: every case runs the real CLI in a subprocess.

Each row of CASES is one hostile or unlucky command line (marked slow: one subprocess each; the
in-process check of every numeric flag at the end runs with `make test-fast`). For every row the
command must exit with the given code (2 for bad input), print exactly one line on stderr
containing ``message`` and no traceback, print nothing on stdout, and leave the working folder
exactly as it was (nothing written, nothing half-written).

To add a case: append a ``Case(...)`` to CASES; ``setup`` prepares files in the working folder.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.experiment.test_store import WINDOWS, make_run
from tests.fakes.powercap import FakePowercap
from wattlab.experiment.db.store import open_store

WATTLAB = [sys.executable, "-m", "wattlab.cli"]
PY = sys.executable
TINY_RUN = [
    "run",
    "--device",
    "cpu",
    "--model",
    "mobilenet_v3_small",
    "--stem",
    "imagenet",
    "--train-samples",
    "64",
    "--test-samples",
    "64",
    "--batch-size",
    "32",
    "--epochs",
    "1",
    "--warmup-steps",
    "0",
    "--no-progress",
]
# A command for `monitor` that leaves a trace if it ever runs.
MARK = ["--", PY, "-c", "open('child-ran', 'w').close()"]


def wattlab(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300, **kw
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*WATTLAB, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        **kw,
    )


# -- setups: files a case needs in its working folder ----------------------------------------


def a_file(name: str = "notes.txt") -> Callable[[Path], None]:
    return lambda cwd: (cwd / name).write_text("my notes\n")


def a_folder(name: str = "sub") -> Callable[[Path], None]:
    return lambda cwd: (cwd / name).mkdir()


def _close_wal(db: Path) -> None:
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.close()


def a_database(name: str = "w.db", *, failed_only: bool = False) -> Callable[[Path], None]:
    def setup(cwd: Path) -> None:
        with open_store(cwd / name) as store:
            if failed_only:
                store.insert_run(make_run(status="failed", error="boom"))
            else:
                store.insert_run(make_run(), WINDOWS, [(0.1 * i, "gpu:0", 100.0) for i in range(9)])
        _close_wal(cwd / name)

    return setup


def a_corrupt_database(cwd: Path, name: str = "bad.db") -> None:
    """A real database with 4 KiB of random bytes written into its middle."""
    db = cwd / name
    with open_store(db) as store:
        for i in range(20):
            trace = [(0.1 * t, "gpu:0", 100.0 + t) for t in range(300)]
            store.insert_run(make_run(sweep=f"s{i}"), WINDOWS, trace)
    _close_wal(db)
    size = db.stat().st_size
    with open(db, "r+b") as handle:
        handle.seek(size // 2)
        handle.write(random.Random(12).randbytes(4096))


def an_empty_file(name: str = "empty.db") -> Callable[[Path], None]:
    return lambda cwd: (cwd / name).touch()


def a_journal(cwd: Path) -> None:
    journal = {"pid": 999_999_999, "gpus": [{"uuid": "GPU-fake", "original_limit_mw": 300_000}]}
    (cwd / "power-journal.json").write_text(json.dumps(journal))


def a_spec(text: str, name: str = "spec.yaml") -> Callable[[Path], None]:
    return lambda cwd: (cwd / name).write_text(text)


def _laughs(levels: int = 9) -> str:
    """A billion-laughs mapping: 10**levels strings built from ~100 characters of aliases."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels + 1)]
    return "{" + ", ".join(lines) + "}"


SPEC_BASE = "base: {epochs: 1, device: cpu}\n"


def bomb_in(key: str) -> str:
    fields = {"name": "b", "description": "x", "grid": "{precision: [fp32]}"}
    if key == "grid.precision":
        fields["description"] = _laughs()  # anchors defined here, used in the grid
        fields["grid"] = "{precision: *a9}"
    else:
        fields[key] = _laughs()
    return SPEC_BASE + "".join(f"{k}: {v}\n" for k, v in fields.items())


BIG_GRID = (
    "name: g\n" + SPEC_BASE + "order: sequential\ngrid:\n"
    "  seed: [" + ",".join(str(i) for i in range(1000)) + "]\n"
    "  lr: [" + ",".join(f"0.{i + 1:04d}" for i in range(1000)) + "]\n"
)


def _nvml_present() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:
        return False


@dataclass(frozen=True)
class Case:
    id: str
    args: list[str]
    message: str  # must appear in the single stderr line
    code: int = 2
    setup: Callable[[Path], None] | None = None
    env: dict[str, str] = field(default_factory=dict)
    skip: Callable[[], str] | None = None  # returns a reason to skip, or ""


CASES = [
    # -- 1. output paths are checked, fully, before anything runs ---------------------------
    Case("devices-json-in-proc", ["devices", "--json", "/proc/x.json"], "cannot write /proc/x"),
    Case("devices-json-folder", ["devices", "--json", "sub"], "is a folder", setup=a_folder()),
    Case("devices-json-no-folder", ["devices", "--json", "no/x.json"], "does not exist"),
    Case("report-out-etc-passwd", ["report", "--out", "/etc/passwd"], "is an existing file"),
    Case(
        "report-out-a-file",
        ["report", "--db", "w.db", "--out", "notes.txt"],
        "is an existing file",
        setup=lambda cwd: (a_file()(cwd), a_database()(cwd)),
    ),
    Case("monitor-json-in-proc", ["monitor", "--json", "/proc/x.json", *MARK], "cannot write"),
    Case(
        "monitor-csv-folder",
        ["monitor", "--csv-trace", "sub", *MARK],
        "is a folder",
        setup=a_folder(),
    ),
    Case("monitor-csv-stdout", ["monitor", "--csv-trace", "-", *MARK], "--csv-trace"),
    Case("run-json-in-proc", [*TINY_RUN, "--json", "/proc/x.json"], "cannot write /proc/x"),
    Case(
        "sweep-dry-json-in-proc",
        ["sweep", "quickstart", "--dry-run", "--json", "/proc/x.json"],
        "cannot write /proc/x",
    ),
    Case(
        "estimate-json-in-proc",
        ["estimate", "--model", "resnet50", "--epochs", "1", "--json", "/proc/x.json"],
        "cannot write /proc/x",
    ),
    Case(
        "evaluate-json-in-proc",
        ["estimate", "evaluate", "--json", "/proc/x.json"],
        "cannot write /proc/x",
    ),
    Case(
        "evaluate-out-a-file",
        ["estimate", "evaluate", "--out", "notes.txt"],
        "is an existing file",
        setup=a_file(),
    ),
    Case(
        "export-out-a-file",
        ["export", "--db", "w.db", "--out", "notes.txt"],
        "is an existing file",
        setup=lambda cwd: (a_file()(cwd), a_database()(cwd)),
    ),
    Case(
        "export-out-in-proc",
        ["export", "--db", "w.db", "--out", "/proc/wattlab-x"],
        "cannot write",
        setup=a_database(),
    ),
    # report --out DIR: the folder is not left behind when there is nothing to report
    Case("report-out-no-database", ["report", "--db", "none.db", "--out", "newdir"], "no database"),
    Case(
        "report-out-no-ok-runs",
        ["report", "--db", "w.db", "--out", "new/dir"],
        "no successful runs",
        setup=a_database(failed_only=True),
    ),
    # -- 3. corrupted databases: one sentence, and never written into ------------------------
    Case(
        "report-corrupt-db",
        ["report", "--db", "bad.db", "--json", "s.json"],
        "integrity_check",
        setup=a_corrupt_database,
    ),
    Case(
        "export-corrupt-db",
        ["export", "--db", "bad.db", "--out", "ex"],
        "integrity_check",
        setup=a_corrupt_database,
    ),
    Case(
        "run-corrupt-db", [*TINY_RUN, "--db", "bad.db"], "integrity_check", setup=a_corrupt_database
    ),
    Case(
        "sweep-corrupt-db",
        ["sweep", "quickstart", "--db", "bad.db"],
        "integrity_check",
        setup=a_corrupt_database,
    ),
    # -- 4. a read-only database is refused before training (root may write it anyway)
    Case(
        "run-read-only-db",
        [*TINY_RUN, "--db", "w.db"],
        "read-only",
        setup=lambda cwd: (a_database()(cwd), (cwd / "w.db").chmod(0o444)),
        skip=lambda: "root may write a read-only file" if os.geteuid() == 0 else "",
    ),
    # -- 10. an empty database file: readers refuse it (writers create the database in it) ----
    Case(
        "report-empty-db",
        ["report", "--db", "empty.db", "--json", "-"],
        "empty file",
        setup=an_empty_file(),
    ),
    Case(
        "export-empty-db",
        ["export", "--db", "empty.db", "--out", "ex"],
        "empty file",
        setup=an_empty_file(),
    ),
    # -- 5. YAML bombs and huge specs: refused at once, with a short message -----------------
    *[
        Case(
            f"yaml-bomb-in-{key}",
            ["sweep", "spec.yaml", "--dry-run"],
            "aliases counted",
            setup=a_spec(bomb_in(key)),
        )
        for key in ("name", "description", "baseline", "grid.precision")
    ],
    Case(
        "yaml-alias-loop",
        ["sweep", "spec.yaml", "--dry-run"],
        "refers to itself",
        setup=a_spec("name: l\n" + SPEC_BASE + "grid: {precision: &l [fp32, *l]}\n"),
    ),
    Case(
        "grid-1000x1000",
        ["sweep", "spec.yaml", "--dry-run"],
        "more than 100000 runs",
        setup=a_spec(BIG_GRID),
    ),
    Case(
        "repetitions-1e20",
        ["sweep", "spec.yaml", "--dry-run"],
        "repetitions",
        setup=a_spec(
            "name: r\n" + SPEC_BASE + "grid: {precision: [fp32]}\n"
            "repetitions: 100000000000000000000\n"
        ),
    ),
    # -- 7. non-finite and absurd numbers, in specs ... --------------------------------------
    Case(
        "spec-cooldown-inf",
        ["sweep", "spec.yaml", "--dry-run"],
        "cooldown_s",
        setup=a_spec("name: c\n" + SPEC_BASE + "grid: {precision: [fp32]}\ncooldown_s: .inf\n"),
    ),
    Case(
        "spec-base-lr-inf",
        ["sweep", "spec.yaml", "--dry-run"],
        "base.lr",
        setup=a_spec(
            "name: c\nbase: {epochs: 1, device: cpu, lr: .inf}\ngrid: {precision: [fp32]}\n"
        ),
    ),
    Case(
        "spec-grid-lr-nan",
        ["sweep", "spec.yaml", "--dry-run"],
        "grid.lr[1]",
        setup=a_spec("name: c\n" + SPEC_BASE + "grid: {lr: [0.1, .nan]}\nbaseline: {lr: 0.1}\n"),
    ),
    Case(
        "spec-batch-size-huge",
        ["sweep", "spec.yaml", "--dry-run"],
        "grid.batch_size[0]",
        setup=a_spec("name: c\n" + SPEC_BASE + "grid: {batch_size: [99999999999999999999]}\n"),
    ),
    # ... and in flags, on every command
    Case("run-lr-inf", [*TINY_RUN, "--lr", "inf"], "--lr"),
    Case("run-lr-nan", [*TINY_RUN, "--lr", "nan"], "--lr"),
    Case(
        "run-batch-size-huge", [*TINY_RUN, "--batch-size", "99999999999999999999"], "--batch-size"
    ),
    Case("run-interval-1e308", [*TINY_RUN, "--interval", "1e308"], "--interval"),
    Case("run-power-limit-inf", [*TINY_RUN, "--power-limit", "inf"], "--power-limit"),
    Case("monitor-interval-1e308", ["monitor", "--interval", "1e308", *MARK], "--interval"),
    Case("monitor-idle-inf", ["monitor", "--idle-baseline", "inf", *MARK], "--idle-baseline"),
    Case("monitor-idle-negative", ["monitor", "--idle-baseline", "-5", *MARK], "--idle-baseline"),
    Case("monitor-idle-nan", ["monitor", "--idle-baseline", "nan", *MARK], "--idle-baseline"),
    Case("monitor-cpu-tdp-inf", ["monitor", "--cpu-tdp", "inf", *MARK], "--cpu-tdp"),
    Case(
        "monitor-intensity-inf",
        ["monitor", "--carbon-intensity", "inf", *MARK],
        "--carbon-intensity",
    ),
    Case(
        "monitor-intensity-range-inf",
        ["monitor", "--intensity-range", "0.1:inf", *MARK],
        "--intensity-range HIGH",
    ),
    Case("monitor-pue-nan", ["monitor", "--pue", "nan", *MARK], "--pue"),
    Case("devices-cpu-tdp-inf", ["devices", "--cpu-tdp", "inf"], "--cpu-tdp"),
    Case(
        "estimate-epochs-1e300",
        ["estimate", "--model", "resnet50", "--epochs", "1e300"],
        "--epochs",
    ),
    Case(
        "estimate-duration-inf",
        ["estimate", "--model", "resnet50", "--epochs", "1", "--duration-s", "inf"],
        "--duration-s",
    ),
    Case(
        "report-min-saving-nan",
        ["report", "--min-saving", "nan", "--json", "-"],
        "--region-min-saving",
    ),
    Case(
        "report-max-penalty-inf",
        ["report", "--max-penalty", "inf", "--json", "-"],
        "--region-max-slowdown",
    ),
    # usage errors are one line too
    Case("run-interval-not-a-number", [*TINY_RUN, "--interval", "abc"], "--interval"),
    Case("run-unknown-option", ["run", "--bogus"], "--bogus"),
    Case("sweep-without-spec", ["sweep"], "Missing argument"),
    # -- 9. power restore without NVML ------------------------------------------------------
    Case(
        "power-restore-without-nvml",
        ["power", "restore"],
        "cannot be applied here",
        setup=a_journal,
        env={"WATTLAB_STATE_DIR": "."},
        skip=lambda: "NVML is present here" if _nvml_present() else "",
    ),
    # -- issue #40: a huge value is cut when echoed; a negative number after an optional flag
    Case(
        "monitor-region-5000-characters",
        ["monitor", "--region", "x" * 5000, *MARK],
        "--region 'xxx",
    ),  # fmt: skip
    Case(
        "advise-probe-negative-without-equals",
        ["advise", "--model", "resnet18", "--gpu-name", "H200", "--epochs", "1", "--probe", "-5"],
        "--probe must be a number from 5",
    ),
]


def snapshot(folder: Path) -> dict[str, tuple[int, int, int]]:
    """Every file and folder under ``folder``: (size, mtime_ns, mode)."""
    out = {}
    for path in sorted(folder.rglob("*")):
        st = path.lstat()
        out[str(path.relative_to(folder))] = (st.st_size, st.st_mtime_ns, st.st_mode)
    return out


@pytest.mark.slow  # a subprocess per case: minutes on 2 cores
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_fault_is_one_line_exit_code_and_nothing_written(case: Case, tmp_path: Path) -> None:
    if case.skip is not None and (reason := case.skip()):
        pytest.skip(reason)
    if case.setup is not None:
        case.setup(tmp_path)
    before = snapshot(tmp_path)
    env = {k: (str(tmp_path) if v == "." else v) for k, v in case.env.items()}
    done = wattlab(*case.args, cwd=tmp_path, env=env, timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == case.code, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert len(lines) == 1, done.stderr[-2000:]
    assert case.message in lines[0]
    assert len(lines[0]) < 600  # no echoed bomb
    assert done.stdout == ""
    assert snapshot(tmp_path) == before  # nothing written, nothing half-written


# -- cases that succeed, or need more than one command -----------------------------------------


@pytest.mark.slow  # a subprocess per case: minutes on 2 cores
def test_dry_run_writes_nothing_even_where_run_would_refuse(tmp_path: Path) -> None:
    done = wattlab(
        "sweep",
        "quickstart",
        "--dry-run",
        "--db",
        str(tmp_path / "no/x.db"),
        "--json",
        "-",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert len(plan["runs"]) == 8 and plan["order_seed"] is not None
    assert not (tmp_path / "no").exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # a subprocess per case: minutes on 2 cores
def test_dry_run_of_a_changed_spec_says_so_and_leaves_the_database_alone(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    with open_store(db) as store:
        store.register_sweep("quickstart", {"old": True}, "0123456789abcdef", 7)
    _close_wal(db)
    before = db.read_bytes()
    done = wattlab("sweep", "quickstart", "--dry-run", "--db", "w.db", "--json", "-", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    notes = " ".join(json.loads(done.stdout)["notes"])
    assert "different spec" in notes
    assert db.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.db"]
    # the real sweep is still refused, in one sentence, before anything runs
    done = wattlab("sweep", "quickstart", "--db", "w.db", cwd=tmp_path)
    assert done.returncode == 2 and "different spec" in done.stderr
    with open_store(db, readonly=True) as store:
        assert store.sweep_record("quickstart") == ("0123456789abcdef", 7)
        assert len(store.runs()) == 0


@pytest.mark.slow  # a subprocess per case: minutes on 2 cores
def test_empty_powercap_root_variable_is_unset_not_the_current_folder(tmp_path: Path) -> None:
    tree = FakePowercap(tmp_path)  # zones in the working folder itself
    tree.add_package(0, dram=False, core=False, energy_uj=1000)
    done = wattlab("devices", "--json", "-", cwd=tmp_path, env={"WATTLAB_POWERCAP_ROOT": ""})
    assert done.returncode == 0, done.stderr
    components = [row["component"] for row in json.loads(done.stdout)["meters"]]
    assert "cpu:package-0" not in components
    done = wattlab("devices", "--json", "-", cwd=tmp_path, env={"WATTLAB_POWERCAP_ROOT": "."})
    assert "cpu:package-0" in [r["component"] for r in json.loads(done.stdout)["meters"]]


@pytest.mark.slow  # a subprocess per case: minutes on 2 cores
def test_zone_name_with_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    tree = FakePowercap(tmp_path / "pc")
    tree.add_package(0, dram=False, core=False, energy_uj=1000)
    (tree.path("intel-rapl:0") / "name").write_bytes(b"package-\xff\xfe\n")
    for command in (["devices", "--json", "-"], ["monitor", "--json", "-", "--", "true"]):
        done = wattlab(command[0], "--powercap-root", "pc", *command[1:], cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        json.loads(done.stdout)


def _counter_script(zone: Path, values: list[str]) -> str:
    """A child for `monitor` that writes ``values`` into the zone's counter, then exits 3."""
    return (
        "import time, pathlib\n"
        f"p = pathlib.Path({str(zone / 'energy_uj')!r})\n"
        f"for v in {values!r}:\n"
        "    p.write_text(v + '\\n'); time.sleep(0.15)\n"
        "raise SystemExit(3)\n"
    )


@pytest.mark.slow  # a subprocess per case: minutes on 2 cores
@pytest.mark.parametrize(
    ("values", "error"),
    [
        (["1000", "999"], "glitch, not a wrap"),  # a step back is not a 262 kJ wrap
        (["1000", "-5"], "glitch, not a wrap"),
        (["1000", "garbage"], "failed"),
    ],
    ids=["backwards", "negative", "garbage"],
)
def test_monitor_keeps_the_child_code_when_a_counter_fails(
    tmp_path: Path, values: list[str], error: str
) -> None:
    tree = FakePowercap(tmp_path / "pc")
    tree.add_package(0, dram=False, core=False, energy_uj=500)
    script = _counter_script(tree.path("intel-rapl:0"), values)
    done = wattlab(
        "monitor",
        "--interval",
        "0.05",
        "--powercap-root",
        "pc",
        "--json",
        "m.json",
        "--",
        PY,
        "-c",
        script,
        cwd=tmp_path,
    )
    assert done.returncode == 3, done.stderr  # the child's code, not ours
    assert "Traceback" not in done.stderr
    data = json.loads((tmp_path / "m.json").read_text())
    assert data["exit_code"] == 3
    assert error in data["error"]
    assert data["energy_j"] is None  # nothing reported as measured
    assert "could not be measured" in done.stderr


@pytest.mark.slow  # a subprocess per case: minutes on 2 cores
def test_monitor_json_on_stdout_sends_the_child_output_to_stderr(tmp_path: Path) -> None:
    done = wattlab(
        "monitor", "--json", "-", "--", PY, "-c", "print('hello from the child')", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["exit_code"] == 0  # stdout is the JSON alone
    assert "hello from the child" in done.stderr


@pytest.mark.slow  # a subprocess per case: minutes on 2 cores
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux")
def test_sigkill_of_monitor_takes_its_child_with_it(tmp_path: Path) -> None:
    script = "import os, time\nopen('child.pid', 'w').write(str(os.getpid()))\ntime.sleep(120)\n"
    parent = subprocess.Popen(
        [*WATTLAB, "monitor", "--json", "m.json", "--", PY, "-c", script],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pid_file = tmp_path / "child.pid"
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    child_pid = int(pid_file.read_text())
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=30)
    deadline = time.monotonic() + 30
    while _alive(child_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    alive = _alive(child_pid)
    if alive:  # clean up before failing
        os.kill(child_pid, signal.SIGKILL)
    assert not alive, "the monitored command outlived `wattlab monitor`"


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie awaiting its reaper counts as dead)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.slow  # a subprocess per case: minutes on 2 cores
@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_output_files_honour_the_umask(tmp_path: Path, umask: int, mode: int) -> None:
    a_database()(tmp_path)
    for args in (["devices", "--json", "d.json"], ["export", "--db", "w.db", "--out", "ex"]):
        done = wattlab(*args, cwd=tmp_path, umask=umask)
        assert done.returncode == 0, done.stderr
    for path in (tmp_path / "d.json", tmp_path / "ex" / "runs.csv"):
        assert path.stat().st_mode & 0o777 == mode, path


@pytest.mark.slow  # a subprocess per case: minutes on 2 cores
def test_writers_adopt_an_empty_database_file(tmp_path: Path) -> None:
    (tmp_path / "empty.db").touch()
    done = wattlab("sweep", "quickstart", "--dry-run", "--db", "empty.db", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "empty.db").stat().st_size == 0  # a dry run still writes nothing
    with open_store(tmp_path / "empty.db") as store:  # what run and sweep do
        assert len(store.runs()) == 0


# -- every numeric flag of every command goes through the bounds table ---------------------------


def _numeric_flags() -> list[tuple[list[str], str, type, bool]]:
    """(command words, flag, int|float, has a callback) for every numeric option of every
    command, read from the typed signatures of the typer app's callbacks."""
    import typing

    from wattlab.cli import app as app_mod

    found = []
    groups = [([], app_mod.app)]
    while groups:
        words, group = groups.pop()
        callbacks = [(words + [c.name or c.callback.__name__], c.callback)
                     for c in group.registered_commands]  # fmt: skip
        if group.registered_callback is not None and words:
            callbacks.append((words, group.registered_callback.callback))
        groups += [(words + [g.name], g.typer_instance) for g in group.registered_groups]
        for command, callback in callbacks:
            for name, hint in typing.get_type_hints(callback, include_extras=True).items():
                if typing.get_origin(hint) is not typing.Annotated:
                    continue
                base, *extras = typing.get_args(hint)
                kinds = {t for t in (base, *typing.get_args(base)) if t in (int, float)}
                if not kinds:
                    continue
                option = extras[0]
                names = [d for d in (option.default, *option.param_decls) if _is_flag(d)]
                flag = names[0] if names else f"--{name.replace('_', '-')}"
                found.append((command, flag, kinds.pop(), option.callback is not None))
    return found


def _is_flag(value: object) -> bool:
    return isinstance(value, str) and value.startswith("--")


NUMERIC_FLAGS = _numeric_flags()


def test_every_numeric_flag_has_a_bounds_check():
    assert len(NUMERIC_FLAGS) >= 30  # run, monitor, devices, sweep, report, estimate
    unchecked = [" ".join([*c, f]) for c, f, _, checked in NUMERIC_FLAGS if not checked]
    assert unchecked == []


@pytest.mark.parametrize(
    ("command", "flag", "kind"),
    [entry[:3] for entry in NUMERIC_FLAGS],
    ids=[" ".join([*c, f]) for c, f, _, _ in NUMERIC_FLAGS],
)
def test_every_numeric_flag_refuses_absurd_values_at_parse_time(
    command, flag, kind, monkeypatch, capsys, tmp_path
):
    from wattlab.cli.app import main

    monkeypatch.chdir(tmp_path)
    values = ["nan"] if kind is float else ["99999999999999999999"]
    for value in values:
        monkeypatch.setattr(sys, "argv", ["wattlab", *command, flag, value])
        with pytest.raises(SystemExit) as stop:
            main()
        err = capsys.readouterr().err
        assert stop.value.code == 2, err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and flag in lines[0], err
    assert list(tmp_path.iterdir()) == []
