"""Power-limit sessions on the fake NVML backend: refusal before any change, journal before any
change, restore after success, exceptions, SIGTERM and (through the journal) SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.fakes.fake_gpu import FakeNvmlBackend, make_devices
from wattlab.errors import PowerLimitError
from wattlab.power_limits import (
    PowerLimitSession,
    TerminatedBySignal,
    default_journal_path,
    restore_from_journal,
)

REPO = Path(__file__).resolve().parents[2]
ROOT = lambda: 0  # noqa: E731  (geteuid of root)


def _limits(nv: FakeNvmlBackend) -> list[float]:
    return nv.limits_w()


def test_out_of_range_limit_is_refused_before_anything_changes(tmp_path):
    nv = FakeNvmlBackend(make_devices(2))
    journal = tmp_path / "j.json"
    with (
        pytest.raises(PowerLimitError) as err,
        PowerLimitSession(nv, [0, 1], limit_w=150, journal_path=journal, geteuid=ROOT),
    ):
        pass
    assert str(err.value) == (
        "power limit 150 W for GPU 0 (NVIDIA H200) is outside its allowed range 200-700 W."
    )
    assert nv.set_calls == []
    assert not journal.exists()
    assert nv.initialised == 0


def test_fraction_out_of_range_names_the_watts(tmp_path):
    nv = FakeNvmlBackend(make_devices(1))
    with (
        pytest.raises(PowerLimitError, match=r"fraction 0.2 of the default 700 W \(= 140 W\)"),
        PowerLimitSession(nv, fraction=0.2, journal_path=tmp_path / "j", geteuid=ROOT),
    ):
        pass
    assert nv.set_calls == []


def test_gpu_without_power_management_is_refused(tmp_path):
    nv = FakeNvmlBackend(make_devices(1, limits_supported=False))
    with (
        pytest.raises(PowerLimitError, match=r"power-limit range through NVML \(NVMLError_NotSup"),
        PowerLimitSession(nv, [0], limit_w=300, journal_path=tmp_path / "j", geteuid=ROOT),
    ):
        pass
    assert nv.set_calls == []


def test_not_root_is_refused_before_anything_changes(tmp_path):
    nv = FakeNvmlBackend(make_devices(1))
    journal = tmp_path / "j.json"
    with (
        pytest.raises(PowerLimitError, match="needs root"),
        PowerLimitSession(nv, [0], limit_w=300, journal_path=journal, geteuid=lambda: 1000),
    ):
        pass
    assert nv.set_calls == []
    assert not journal.exists()


def test_no_permission_from_nvml_restores_what_was_set(tmp_path):
    gpus = make_devices(2)
    gpus[1].set_permission_denied = True
    nv = FakeNvmlBackend(gpus)
    journal = tmp_path / "j.json"
    with (
        pytest.raises(PowerLimitError, match=r"GPU 1 .*\(no permission\); run as root"),
        PowerLimitSession(nv, [0, 1], limit_w=300, journal_path=journal, geteuid=ROOT),
    ):
        pass
    assert _limits(nv) == [700, 700]
    assert nv.set_calls == [(0, 300), (1, 300), (0, 700)]
    assert not journal.exists()


def test_bad_arguments():
    with pytest.raises(PowerLimitError, match="not both"):
        PowerLimitSession(FakeNvmlBackend(), limit_w=300, fraction=0.5)
    with pytest.raises(PowerLimitError, match="must be positive"):
        PowerLimitSession(FakeNvmlBackend(), limit_w=-1)
    with (
        pytest.raises(PowerLimitError, match="GPU 3 does not exist"),
        PowerLimitSession(FakeNvmlBackend(make_devices(2)), [3], limit_w=300, geteuid=ROOT),
    ):
        pass


def test_no_limit_requested_touches_nothing(tmp_path):
    nv = FakeNvmlBackend(make_devices(1))
    with PowerLimitSession(nv, [0], journal_path=tmp_path / "j") as session:
        assert session.changes == []
    assert nv.sessions_opened == 0 and nv.set_calls == []


def test_journal_is_written_before_the_first_set_and_limits_come_back(tmp_path):
    nv = FakeNvmlBackend(make_devices(2))
    journal = tmp_path / "state" / "power-journal.json"
    seen_at_set = []
    for device in nv.devices:
        real_set = device.set_power_limit_w

        def spying_set(limit_w, real_set=real_set):
            seen_at_set.append(json.loads(journal.read_text()))
            real_set(limit_w)

        device.set_power_limit_w = spying_set
    with PowerLimitSession(nv, [0, 1], limit_w=300, journal_path=journal, geteuid=ROOT) as s:
        assert _limits(nv) == [300, 300]
        assert [c.limit_w for c in s.changes] == [300.0, 300.0]
        assert [c.original_limit_w for c in s.changes] == [700.0, 700.0]
    assert _limits(nv) == [700, 700]
    assert not journal.exists()
    first = seen_at_set[0]
    assert [g["uuid"] for g in first["gpus"]] == [g.uuid for g in nv.devices]
    assert [g["original_limit_mw"] for g in first["gpus"]] == [700_000, 700_000]
    assert first["pid"] == os.getpid()


def test_fraction_of_default_limit(tmp_path):
    gpus = make_devices(1, default_limit_w=600.0, limit_w=450.0)
    nv = FakeNvmlBackend(gpus)
    with PowerLimitSession(nv, fraction=0.5, journal_path=tmp_path / "j", geteuid=ROOT) as s:
        assert _limits(nv) == [300]
        assert s.as_records()[0]["limit_w"] == 300.0
    assert _limits(nv) == [450]  # the original, not the default


@pytest.mark.parametrize("exc_type", [ValueError, KeyboardInterrupt])
def test_restore_after_exception(tmp_path, exc_type):
    nv = FakeNvmlBackend(make_devices(1))
    journal = tmp_path / "j.json"
    with (
        pytest.raises(exc_type),
        PowerLimitSession(nv, [0], limit_w=250, journal_path=journal, geteuid=ROOT),
    ):
        assert _limits(nv) == [250]
        raise exc_type()
    assert _limits(nv) == [700]
    assert not journal.exists()


def test_sigterm_in_process_restores_and_puts_the_old_handler_back(tmp_path):
    nv = FakeNvmlBackend(make_devices(1))
    before = signal.getsignal(signal.SIGTERM)
    with (
        pytest.raises(TerminatedBySignal) as err,
        PowerLimitSession(nv, [0], limit_w=400, journal_path=tmp_path / "j", geteuid=ROOT),
    ):
        os.kill(os.getpid(), signal.SIGTERM)
    assert err.value.code == 143
    assert _limits(nv) == [700]
    assert signal.getsignal(signal.SIGTERM) is before


CHILD = textwrap.dedent(
    """
    import sys, time
    from tests.fakes.fake_gpu import FakeNvmlBackend
    from wattlab.power_limits import PowerLimitSession
    nv = FakeNvmlBackend()  # GPUs and limits from WATTLAB_FAKE_NVML_STATE
    with PowerLimitSession(nv, [0, 1], limit_w=320, journal_path=sys.argv[1]):
        print("ready", flush=True)
        time.sleep(30)
    """
)


def _start_child(tmp_path: Path) -> tuple[subprocess.Popen, FakeNvmlBackend, Path]:
    state = tmp_path / "nvml-state.json"
    nv = FakeNvmlBackend(make_devices(2), state_path=state)
    journal = tmp_path / "journal.json"
    env = dict(os.environ, PYTHONPATH=str(REPO), WATTLAB_FAKE_NVML_STATE=str(state))
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(journal)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = child.stdout.readline()
    if line.strip() != "ready":
        child.kill()
        raise AssertionError(f"child did not start: {line!r} {child.stderr.read()}")
    return child, nv, journal


def test_sigterm_child_process_restores_limits(tmp_path):
    child, nv, journal = _start_child(tmp_path)
    try:
        assert _limits(nv) == [320, 320]  # seen through the state file
        assert journal.exists()
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=20) == 143
    finally:
        child.kill()
    assert _limits(nv) == [700, 700]
    assert not journal.exists()


def test_sigkill_child_then_restore_from_journal(tmp_path):
    child, nv, journal = _start_child(tmp_path)
    try:
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=20) == -signal.SIGKILL
    finally:
        child.kill()
    assert _limits(nv) == [320, 320]  # nobody restored them
    assert journal.exists()
    restored = restore_from_journal(nv, journal)
    assert [r["status"] for r in restored] == ["restored", "restored"]
    assert [r["previous_limit_w"] for r in restored] == [320.0, 320.0]
    assert [r["limit_w"] for r in restored] == [700.0, 700.0]
    assert _limits(nv) == [700, 700]
    assert not journal.exists()
    assert restore_from_journal(nv, journal) == []  # nothing left to do


def test_new_session_restores_a_stale_journal_first(tmp_path):
    nv = FakeNvmlBackend(make_devices(1))
    journal = tmp_path / "j.json"
    stale = {
        "pid": 2**22 + 12345,
        "boot_id": None,
        "gpus": [{"uuid": nv.devices[0].uuid, "original_limit_mw": 650_000}],
    }
    journal.write_text(json.dumps(stale))
    nv.devices[0].limit_w = 300.0  # left behind by the dead session
    with (
        pytest.warns(UserWarning, match="did not finish"),
        PowerLimitSession(nv, [0], limit_w=500, journal_path=journal, geteuid=ROOT) as s,
    ):
        assert s.changes[0].original_limit_w == 650.0
    assert _limits(nv) == [650]


def test_journal_of_a_live_process_is_not_touched(tmp_path):
    nv = FakeNvmlBackend(make_devices(1))
    journal = tmp_path / "j.json"
    journal.write_text(json.dumps({"pid": os.getppid(), "gpus": []}))
    with (
        pytest.raises(PowerLimitError, match="another power-limit session"),
        PowerLimitSession(nv, [0], limit_w=500, journal_path=journal, geteuid=ROOT),
    ):
        pass
    with pytest.raises(PowerLimitError, match="still running"):
        restore_from_journal(nv, journal)
    assert journal.exists()
    assert nv.set_calls == []


def test_default_journal_path(tmp_path):
    """One journal per host (hosts may share a state folder); odd host names stay one name."""
    assert default_journal_path({"WATTLAB_STATE_DIR": str(tmp_path)}, host="gpu-01") == (
        tmp_path / "power-journal-gpu-01.json"
    )
    assert default_journal_path({}, host="gpu-01").parts[-4:] == (
        ".local",
        "state",
        "wattlab",
        "power-journal-gpu-01.json",
    )
    assert default_journal_path({}, host="../x/y").name == "power-journal-_x_y.json"


def test_restore_without_permission_names_the_real_command(tmp_path):
    devices = make_devices(1, limit_w=300.0, set_permission_denied=True)
    nv = FakeNvmlBackend(devices)
    journal = tmp_path / "j.json"
    dead = {"pid": 2**22 + 12345, "gpus": [{"uuid": devices[0].uuid, "original_limit_mw": 700_000}]}
    journal.write_text(json.dumps(dead))
    with pytest.raises(PowerLimitError) as err:
        restore_from_journal(nv, journal)
    assert str(err.value).endswith("needs root; run `sudo wattlab power restore`.")
    assert journal.exists()  # kept for the next attempt
    assert nv.initialised == 0


def test_failed_restore_at_exit_keeps_the_journal_and_names_the_real_command(tmp_path):
    nv = FakeNvmlBackend(make_devices(1))
    journal = tmp_path / "j.json"
    with (
        pytest.raises(PowerLimitError, match=r"is kept, run `sudo wattlab power restore`\.$"),
        PowerLimitSession(nv, [0], limit_w=300, journal_path=journal, geteuid=ROOT),
    ):
        nv.devices[0].set_permission_denied = True  # e.g. root dropped mid-run
    assert _limits(nv) == [300]
    assert journal.exists()


def test_no_restore_power_command_is_named_anywhere():
    import wattlab.power_limits as module

    assert "restore-power" not in Path(module.__file__).read_text()


def test_forbidden_machine_refuses_before_touching_nvml(tmp_path):
    from wattlab.power_limits import FORBID_ENV

    nv = FakeNvmlBackend(make_devices(1))
    session = PowerLimitSession(
        nv,
        [0],
        limit_w=250,
        journal_path=tmp_path / "j.json",
        env={FORBID_ENV: "1"},
        geteuid=lambda: 0,
    )
    with pytest.raises(PowerLimitError, match="forbidden"):
        session.__enter__()
    assert nv.set_calls == []
    assert not (tmp_path / "j.json").exists()
