"""Third fault campaign (issue 33), the power-limit journal: two hosts sharing one state folder
(a home directory on NFS) each keep their own journal, so neither takes the other's for its
own; and a journal whose owner's pid now names another program can be restored with
``wattlab power restore --force`` (said in the refusal), or without it when the journal
recorded its owner's start time. Against the fake NVML (tests/fakes)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.fake_gpu import FakeNvmlBackend, make_devices
from wattlab.errors import PowerLimitError

WATTLAB = [sys.executable, "-m", "wattlab.cli"]
ROOT = Path(__file__).resolve().parents[2]


def _as_host(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: name)


def test_two_hosts_sharing_a_state_folder_keep_their_own_journals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wattlab.power_limits import PowerLimitSession, restore_from_journal

    env = {"WATTLAB_STATE_DIR": str(tmp_path / "state")}
    gpus_a = FakeNvmlBackend(make_devices(1, limit_w=700.0))
    gpus_b = FakeNvmlBackend(make_devices(1, limit_w=700.0))
    gpus_b.devices[0].uuid = "GPU-on-host-b"
    _as_host(monkeypatch, "host-b")
    session_b = PowerLimitSession(gpus_b, [0], limit_w=400, env=env, geteuid=lambda: 0)
    session_b.__enter__()  # B's session runs (then B is killed: its journal stays)
    journal_b = session_b.journal_path
    kept = journal_b.read_text()
    try:
        _as_host(monkeypatch, "host-a")
        with PowerLimitSession(gpus_a, [0], limit_w=500, env=env, geteuid=lambda: 0) as a:
            assert a.journal_path != journal_b
            assert gpus_a.devices[0].limit_w == 500
        assert gpus_a.devices[0].limit_w == 700  # A restored its own GPU
        assert journal_b.read_text() == kept  # and never touched B's record
        monkeypatch.setenv("WATTLAB_STATE_DIR", env["WATTLAB_STATE_DIR"])
        assert restore_from_journal(gpus_a) == []  # A has nothing left to restore
        assert journal_b.read_text() == kept
        _as_host(monkeypatch, "host-b")  # B, after its crash: restores its own journal
        results = restore_from_journal(gpus_b, force=True)
        assert [r["status"] for r in results] == ["restored"]
        assert gpus_b.devices[0].limit_w == 700 and not journal_b.exists()
    finally:
        session_b._uninstall_handlers()


@pytest.fixture
def other_program():
    """A live process that is not a wattlab session (its pid, as if reused)."""
    sleeper = subprocess.Popen(["sleep", "60"])
    yield sleeper.pid
    sleeper.kill()
    sleeper.wait()


def _journal(path: Path, pid: int, gpu: str, **more: object) -> None:
    path.write_text(json.dumps({"pid": pid, "hostname": socket.gethostname(),
                                "gpus": [{"uuid": gpu, "original_limit_mw": 700_000}],
                                **more}))  # fmt: skip


def test_a_reused_pid_is_named_and_force_is_offered(tmp_path: Path, other_program: int) -> None:
    from wattlab.power_limits import restore_from_journal

    nv = FakeNvmlBackend(make_devices(1, limit_w=300.0))
    path = tmp_path / "j.json"
    _journal(path, other_program, nv.devices[0].uuid)  # an older journal: no start time
    with pytest.raises(PowerLimitError) as refused:
        restore_from_journal(nv, path)
    message = str(refused.value)
    assert "wattlab power restore --force" in message and "sleep" in message, message
    assert nv.devices[0].limit_w == 300.0
    assert [r["status"] for r in restore_from_journal(nv, path, force=True)] == ["restored"]
    assert nv.devices[0].limit_w == 700.0


def test_a_journal_with_its_owners_start_time_sees_a_reused_pid_as_gone(
    tmp_path: Path, other_program: int
) -> None:
    from wattlab.power_limits import PowerLimitSession, restore_from_journal

    nv = FakeNvmlBackend(make_devices(1, limit_w=300.0))
    path = tmp_path / "j.json"
    with PowerLimitSession(nv, [0], limit_w=400, journal_path=path, geteuid=lambda: 0):
        written = json.loads(path.read_text())
    assert written["pid"] == os.getpid() and written["pid_started_unix"] > 0
    _journal(path, other_program, nv.devices[0].uuid, pid_started_unix=1000.0)
    nv.devices[0].limit_w = 350.0
    assert [r["status"] for r in restore_from_journal(nv, path)] == ["restored"]


@pytest.mark.slow  # the CLI in a subprocess
def test_power_restore_takes_force(tmp_path: Path, other_program: int) -> None:
    from wattlab.power_limits import default_journal_path

    env = {**os.environ, "PYTHONPATH": str(ROOT), "WATTLAB_STATE_DIR": str(tmp_path)}
    path = default_journal_path(env)
    _journal(path, other_program, "GPU-x")
    plain = subprocess.run([*WATTLAB, "power", "restore"], env=env, capture_output=True,
                           text=True, timeout=120)  # fmt: skip
    assert plain.returncode == 2 and "--force" in plain.stderr, plain.stderr
    forced = subprocess.run([*WATTLAB, "power", "restore", "--force"], env=env,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert "Traceback" not in forced.stderr and "No such option" not in forced.stderr
    assert "still running" not in forced.stderr  # past the owner's check (no NVML here)
    assert path.exists()
