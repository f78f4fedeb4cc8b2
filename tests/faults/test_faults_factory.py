"""Third fault campaign (issue 33), model factories (``--model-factory FILE.py:FUNC``): a module
that never finishes importing is said and stopped at a time limit; one that calls sys.exit is
one sentence and exit 2, not a silent exit 0; and what the user's code prints never mixes with
wattlab's JSON on stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wattlab.errors import ConfigError

pytestmark = pytest.mark.extra("train")  # a factory builds a torch nn.Module

ROOT = Path(__file__).resolve().parents[2]
WATTLAB = [sys.executable, "-m", "wattlab.cli"]

GOOD = """
import torch.nn as nn

def make(num_classes=10):
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, num_classes))
"""


def _factory(folder: Path, prelude: str, name: str = "fac.py", body: str = GOOD) -> str:
    path = folder / name
    path.write_text(prelude + "\n" + body)
    return f"{path}:make"


def test_a_factory_that_never_finishes_importing_is_said_and_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from wattlab.train.factory import ENV_TIMEOUT, load_factory

    monkeypatch.setenv(ENV_TIMEOUT, "3")
    ref = _factory(tmp_path, "while True:\n    pass", name="loops.py")
    started = time.monotonic()
    with pytest.raises(ConfigError) as refused:
        load_factory(ref)
    assert time.monotonic() - started < 15
    message = str(refused.value)
    assert "loops.py" in message and "3 s" in message and ENV_TIMEOUT in message, message
    err = capsys.readouterr().err
    assert "importing the model factory" in err and "loops.py" in err, err


def test_a_factory_that_sleeps_at_import_is_stopped_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wattlab.train.factory import ENV_TIMEOUT, load_factory

    monkeypatch.setenv(ENV_TIMEOUT, "1")
    ref = _factory(tmp_path, "import time\ntime.sleep(600)", name="sleeps.py")
    started = time.monotonic()
    with pytest.raises(ConfigError, match="did not finish"):
        load_factory(ref)
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e9", "soon"])
def test_a_bad_time_limit_is_one_sentence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    from wattlab.train.factory import ENV_TIMEOUT, load_factory

    monkeypatch.setenv(ENV_TIMEOUT, value)
    with pytest.raises(ConfigError, match=ENV_TIMEOUT):
        load_factory(_factory(tmp_path, ""))


@pytest.mark.parametrize("code", ["sys.exit(0)", "sys.exit(3)", "raise SystemExit('bye')"])
@pytest.mark.parametrize("where", ["import", "call"])
def test_a_factory_calling_sys_exit_is_one_sentence(tmp_path: Path, code: str, where: str) -> None:
    from wattlab.train.factory import build_from_factory

    if where == "import":
        ref = _factory(tmp_path, f"import sys\n{code}")
    else:
        body = f"import sys\n\ndef make(num_classes=10):\n    {code}\n"
        ref = _factory(tmp_path, "", body=body)
    with pytest.raises(ConfigError, match="sys.exit|SystemExit") as refused:
        build_from_factory(ref, num_classes=10)
    assert "\n" not in str(refused.value)


def test_what_a_factory_prints_goes_to_stderr(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from wattlab.train.factory import build_from_factory

    body = GOOD.replace("    return", "    print('hello from make')\n    import os\n"
                        "    os.write(1, b'raw bytes from make\\n')\n    return")  # fmt: skip
    ref = _factory(tmp_path, "print('hello from import')", body=body)
    print("wattlab's own line", flush=True)
    build_from_factory(ref, num_classes=10)
    print("wattlab's next line", flush=True)
    out, err = capfd.readouterr()
    assert out == "wattlab's own line\nwattlab's next line\n"
    assert "hello from import" in err and "hello from make" in err and "raw bytes" in err


def _cli(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*WATTLAB, *args], cwd=cwd, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},  # the session's cache (conftest)
    )  # fmt: skip


ESTIMATE = ["estimate", "--epochs", "1", "--gpu-name", "NVIDIA H200", "--json", "-"]


@pytest.mark.slow  # the CLI, torch imported
def test_estimate_json_stays_clean_when_a_factory_prints(tmp_path: Path) -> None:
    ref = _factory(
        tmp_path,
        "print('noise at import')",
        body=GOOD.replace("    return", "    print('noise in make')\n    return"),
    )
    done = _cli([*ESTIMATE, "--model-factory", ref], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    json.loads(done.stdout)  # the JSON alone
    assert "noise at import" in done.stderr


@pytest.mark.slow  # the CLI, torch imported
def test_estimate_with_a_factory_that_exits_is_exit_2(tmp_path: Path) -> None:
    ref = _factory(tmp_path, "import sys\nsys.exit(0)")
    done = _cli([*ESTIMATE, "--model-factory", ref], tmp_path)
    assert done.returncode == 2, (done.returncode, done.stderr[-3000:])
    assert done.stdout == ""
    errors = [line for line in done.stderr.splitlines() if line.startswith("wattlab: error:")]
    assert len(errors) == 1 and "sys.exit" in errors[0], done.stderr


@pytest.mark.slow  # the CLI, torch imported
def test_estimate_with_a_factory_that_loops_says_so_and_stops(tmp_path: Path) -> None:
    ref = _factory(tmp_path, "while True:\n    pass", name="loops.py")
    done = _cli([*ESTIMATE, "--model-factory", ref], tmp_path, WATTLAB_FACTORY_TIMEOUT_S="5")
    assert done.returncode == 2, (done.returncode, done.stderr[-3000:])
    assert "importing the model factory" in done.stderr and "Traceback" not in done.stderr


# -- issue #50: a hung factory under --probe is cut off at the probe's length, not at 120 s ------
def test_a_time_cap_bounds_a_hung_factory_below_the_environment_s_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wattlab.train.factory import ENV_TIMEOUT, load_factory, time_cap

    monkeypatch.delenv(ENV_TIMEOUT, raising=False)  # the default: 120 s
    ref = _factory(tmp_path, "import time\ntime.sleep(300)", name="hangs.py")
    started = time.monotonic()
    with time_cap(2, "the probe (2 s)"), pytest.raises(ConfigError) as refused:
        load_factory(ref)
    assert time.monotonic() - started < 15
    message = str(refused.value)
    assert "hangs.py" in message and "2 s, the length of the probe (2 s)" in message, message
    monkeypatch.setenv(ENV_TIMEOUT, "1")  # a shorter limit of the environment still wins
    with time_cap(60, "the probe (60 s)"), pytest.raises(ConfigError, match=ENV_TIMEOUT):
        load_factory(ref)


@pytest.mark.slow  # the CLI, torch imported
def test_advise_probe_cuts_a_hung_factory_off_at_the_probe_s_length(tmp_path: Path) -> None:
    ref = _factory(tmp_path, "import time\ntime.sleep(300)", name="hangs.py")
    started = time.monotonic()
    done = _cli(["advise", "--model-factory", ref, "--gpu-name", "H200", "--epochs", "1",
                 "--probe", "6"], tmp_path)  # fmt: skip
    took_s = time.monotonic() - started
    assert done.returncode == 2, (done.returncode, done.stderr[-3000:])
    assert took_s < 90, took_s  # was 120 s of the factory alone
    errors = [line for line in done.stderr.splitlines() if line.startswith("wattlab: error:")]
    assert len(errors) == 1 and "--probe 6" in errors[0], done.stderr
