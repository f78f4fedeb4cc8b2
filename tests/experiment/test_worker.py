"""Rank 0's combination of every rank's windows into one run row: each component once."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from wattlab.experiment.db.record import build_run_row
from wattlab.experiment.options import RunContext, WorkerOptions
from wattlab.meters.base import Provenance
from wattlab.monitor import Measurement
from wattlab.monitor.carbon import CarbonSettings
from wattlab.train.config import RunConfig


def _m(name: str, duration_s: float, energy: dict[str, float], prov=Provenance.MEASURED):
    gpus = [c for c in energy if c.startswith("gpu")]
    return Measurement(
        name=name,
        started_at="2026-12-02T00:00:00+00:00",
        duration_s=duration_s,
        energy_j=energy,
        provenance={c: prov for c in energy},
        uncertainty_j={c: 1.0 for c in energy},
        in_total={c: True for c in energy},
        # each GPU's sampled utilisation: gpu:0 busier than gpu:1, 20 readings each
        utilization_percent={c: 90.0 if c == "gpu:0" else 70.0 for c in gpus},
        utilization_readings={c: 20 for c in gpus},
    )


def _payload(host: str, rank_energy: dict[str, float], gpu: str, details: dict) -> dict:
    return {
        "hostname": host,
        "results": {
            "budget": _m("budget", 10.0, rank_energy),
            "run": _m("run", 12.0, {k: v * 1.2 for k, v in rank_energy.items()}),
            "epoch:1": _m("epoch:1", 5.0, {k: v / 2 for k, v in rank_energy.items()}),
        },
        "samples": {"budget": 1024, "epoch:1": 512, "run": 0},
        "meters": [{"component": gpu, "details": details}],
        "trace": [(0.5, gpu, 300.0)],
        "problems": [],
    }


def test_two_ranks_sum_their_gpus_and_count_the_host_once():
    cfg = RunConfig(model="resnet50", gpus=2, epochs=1, device="cuda", batch_size=256)
    details = {"name": "NVIDIA H200", "uuid": "GPU-a", "power_limit_w": 700.0,
               "default_power_limit_w": 700.0, "driver": "580"}  # fmt: skip
    rank0 = _payload(
        "h", {"gpu:0": 3000.0, "cpu:estimated": 400.0, "ram:estimated": 50.0}, "gpu:0", details
    )
    rank0["meters"].append({"component": "ram:estimated", "details": {"ram_measure": "process"}})
    rank1 = _payload("h", {"gpu:1": 2800.0}, "gpu:1", {**details, "uuid": "GPU-b"})
    result = SimpleNamespace(
        epochs_completed=1.0, samples=1024, accuracy=0.5, f1_macro=0.4, train_loss=1.0, params=1
    )
    opts = WorkerOptions(db_path="x.db", carbon=CarbonSettings())
    row, windows, trace = build_run_row(
        cfg, opts, RunContext(), [rank0, rank1], result, "2026-12-02T00:00:00+00:00", None, None
    )
    assert row["energy_gpu_j"] == pytest.approx(5800.0)
    assert row["energy_cpu_j"] == pytest.approx(400.0)
    assert row["energy_dram_j"] == pytest.approx(50.0)
    assert row["energy_total_j"] == pytest.approx(6250.0)
    assert row["samples"] == 1024 and row["gpus"] == 2 and row["world_size"] == 2
    assert row["gpu_uuids"] == "GPU-a,GPU-b" and row["hostname"] == "h"
    assert row["co2e_kg"] == pytest.approx(6250.0 / 3.6e6 * 0.20)
    assert row["provenance"] == "measured"
    budget = next(w for w in windows if w["name"] == "budget")
    assert budget["samples"] == 1024  # counted once, not once per rank
    epoch = next(w for w in windows if w["name"] == "epoch")
    assert epoch["epoch"] == 1 and epoch["energy_total_j"] == pytest.approx(3125.0)
    assert len(trace) == 2
    # Green Algorithms' utilisation: the budget window's sampled mean over both GPUs
    assert row["gpu_utilization_percent"] == pytest.approx(80.0)
    assert row["gpu_utilization_basis"] == (
        "sampled: 40 NVML readings over the 10.0 s budget window (2 GPUs)"
    )
    # which memory the RAM estimate counted travels with its component
    assert row["components_json"]["ram:estimated"]["ram_measure"] == "process"


def test_a_component_metered_twice_is_refused():
    cfg = RunConfig(model="resnet50", gpus=2, epochs=1, device="cuda")
    p = _payload("h", {"gpu:0": 1.0, "cpu:estimated": 1.0}, "gpu:0", {})
    result = SimpleNamespace(epochs_completed=1.0, samples=1, accuracy=0, f1_macro=0,
                             train_loss=0, params=1)  # fmt: skip
    with pytest.raises(ValueError, match="two processes"):
        build_run_row(
            cfg, WorkerOptions(db_path="x"), RunContext(), [p, p], result, "t", None, None
        )
