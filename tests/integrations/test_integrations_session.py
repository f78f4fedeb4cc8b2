"""The rank logic every framework callback shares: each process meters its own devices, the
host once per machine, windows combine on the main process, and only it gets results."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import time

import pytest

from wattlab.integrations import MissingExtraError, require
from wattlab.integrations.session import RankInfo, TrainingMeter, window_metrics


def test_rank_from_env():
    info = RankInfo.from_env({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"})
    assert (info.rank, info.local_rank, info.world_size) == (3, 1, 4)
    assert not info.is_main and not info.is_local_main
    assert RankInfo.from_env({}).is_main


@pytest.mark.parametrize("load", ["machine", "process"])
def test_the_callbacks_cpu_estimate_counts_the_load_asked_for(tmp_path, load):
    from wattlab.integrations.session import CallbackSettings

    class Device:  # what a torch.device gives the session: its type and index
        type, index = "cpu", None

    settings = CallbackSettings(powercap_root=tmp_path, cpu_load=load)  # no RAPL under it
    meter = settings.new_training_meter(RankInfo(), Device())
    meter.start()
    try:
        assert meter.monitor is not None
        cpu = next(m for m in meter.monitor.meters if m.info.component == "cpu:estimated")
        assert cpu.info.details["cpu_load"] == load
    finally:
        meter.stop()


def test_a_second_process_on_the_machine_meters_no_host_and_gets_no_result():
    sent = []

    def gather(obj):  # what torch.distributed does for a non-main rank: send, get nothing
        sent.append(obj)
        return None

    meter = TrainingMeter(RankInfo(rank=1, local_rank=1, world_size=2), "cpu", gather=gather)
    meter.start()
    meter.begin("train")
    time.sleep(0.05)
    assert meter.end("train") is None
    meter.stop()
    assert sent and sent[0].energy_j == {}  # no GPU asked for, host left to local rank 0
    assert meter.results == {}


def test_main_process_combines_and_refuses_a_double_count():
    parts = []
    meter = TrainingMeter(RankInfo(), "cpu", interval_s=0.02, gather=lambda m: [m, *parts])
    meter.start()
    meter.begin("train")
    time.sleep(0.05)
    combined = meter.end("train")
    assert combined is not None and combined.total_energy_j > 0
    metrics = window_metrics(combined, "wattlab/train")
    assert metrics["wattlab/train/energy_j"] == pytest.approx(combined.total_energy_j)
    parts.append(meter.local_results["train"])  # the same host metered by a second process
    meter.begin("again")
    with pytest.raises(ValueError, match="metered by two processes"):
        meter.end("again")
    meter.stop()


def test_missing_extra_names_it():
    said = r"'lightning' extra\).*install it with: .*\[lightning\]'$"
    with pytest.raises(MissingExtraError, match=said):
        require("no_such_module_for_wattlab", "lightning", "the Lightning callback")


def test_import_wattlab_needs_no_integration():
    code = (
        "import sys\n"
        "for name in ('transformers', 'pytorch_lightning', 'mlflow', 'prometheus_client'):\n"
        "    sys.modules[name] = None\n"
        "import wattlab, wattlab.integrations, wattlab.cli.app\n"
        "try:\n"
        "    import wattlab.integrations.transformers\n"
        "except wattlab.WattlabError as e:\n"
        "    print(e)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert re.search(r"'transformers' extra\).*install it with: .*\[transformers\]'$", done.stdout)


GLOO_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    import torch.distributed as dist
    from wattlab.integrations.session import RankInfo, TrainingMeter

    dist.init_process_group("gloo")
    rank = RankInfo.from_env()
    meter = TrainingMeter(rank, "cpu", interval_s=0.02)
    meter.start()
    meter.begin("train")
    time.sleep(0.2)
    combined = meter.end("train")
    meter.stop()
    local = sorted(meter.local_results["train"].energy_j)
    out = {"rank": rank.rank, "local": local,
           "combined": sorted(combined.energy_j) if combined else None}
    with open(f"{sys.argv[1]}/rank{rank.rank}.json", "w") as f:
        json.dump(out, f)
    dist.destroy_process_group()
    """
)


@pytest.mark.slow
def test_two_gloo_processes_meter_the_host_once(tmp_path):
    script = tmp_path / "ddp.py"
    script.write_text(GLOO_SCRIPT)
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         str(script), str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rank0 = json.loads((tmp_path / "rank0.json").read_text())
    rank1 = json.loads((tmp_path / "rank1.json").read_text())
    assert rank0["local"] and rank1["local"] == []  # the host belongs to local rank 0
    assert rank0["combined"] == rank0["local"]  # combined on the main process, once
    assert rank1["combined"] is None
