"""On a GPU machine: does EnergyMonitor agree with the raw NVML energy counter?

A bf16 matrix-multiply load runs for --seconds (default 20). Over the same interval we read:
  * the raw NVML counter delta (nvmlDeviceGetTotalEnergyConsumption, mJ),
  * EnergyMonitor on the counter meter (it is the same counter: should match to ~0.1 %),
  * EnergyMonitor on the same GPU with the counter ignored (sampled power, trapezoid rule),
    which should agree with the counter within 2 %,
and a 30 ms window, which must be flagged short and bridged with power, not 0 J.
Read-only: this changes no GPU setting.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, write_json  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=0.1)
    args = parser.parse_args()

    import pynvml
    import torch

    from wattlab.meters.nvml import NvmlGpuMeter, NvmlSession, visible_gpus
    from wattlab.monitor import EnergyMonitor

    session = NvmlSession(pynvml)  # hold NVML open: handles die with the last session
    gpus = visible_gpus(pynvml)
    counter_meter = NvmlGpuMeter(pynvml, 0, gpus[0])
    sampled_meter = NvmlGpuMeter(pynvml, 0, gpus[0], force_sampled=True)
    device = counter_meter.device  # the adapter: the raw counter, already in J
    mon_counter = EnergyMonitor([counter_meter], interval_s=args.interval).start()
    mon_sampled = EnergyMonitor([sampled_meter], interval_s=args.interval).start()

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(5):
        a @ b
    torch.cuda.synchronize()
    time.sleep(1.0)

    raw0_j = device.energy_counter_j()
    mon_counter.begin_window("load")
    mon_sampled.begin_window("load")
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < args.seconds:
        for _ in range(20):
            a @ b
        torch.cuda.synchronize()
    m_counter = mon_counter.end_window("load")
    m_sampled = mon_sampled.end_window("load")
    raw1_j = device.energy_counter_j()
    raw_j = raw1_j - raw0_j

    mon_counter.begin_window("short")
    for _ in range(3):
        a @ b
    m_short = mon_counter.end_window("short")
    mon_counter.stop()
    mon_sampled.stop()
    session.close()

    c_j = m_counter.energy_j["gpu:0"]
    s_j = m_sampled.energy_j["gpu:0"]
    rows = [
        ["raw NVML counter delta", raw_j, "-", m_counter.duration_s, "measured"],
        [
            "EnergyMonitor (counter)",
            c_j,
            f"{(c_j - raw_j) / raw_j:+.3%}",
            m_counter.duration_s,
            m_counter.provenance["gpu:0"].value,
        ],
        [
            f"EnergyMonitor (sampled, {args.interval * 1000:.0f} ms)",
            s_j,
            f"{(s_j - c_j) / c_j:+.3%} vs counter",
            m_sampled.duration_s,
            m_sampled.provenance["gpu:0"].value,
        ],
        [
            "30 ms window",
            m_short.energy_j["gpu:0"],
            f"short={m_short.short_window['gpu:0']}",
            m_short.duration_s,
            m_short.provenance["gpu:0"].value,
        ],
    ]
    print_table(
        f"EnergyMonitor vs NVML counter, {args.seconds:.0f} s bf16 matmul load on "
        f"{counter_meter.info.details.get('name')}",
        ["source", "energy J", "difference", "duration s", "provenance"],
        rows,
    )
    print(
        f"mean power {c_j / m_counter.duration_s:.0f} W; uncertainty (counter) "
        f"±{m_counter.uncertainty_j['gpu:0']:.1f} J, "
        f"(sampled) ±{m_sampled.uncertainty_j['gpu:0']:.1f} J"
    )
    write_json(
        "validate_nvml",
        {
            "raw_j": raw_j,
            "counter_j": c_j,
            "sampled_j": s_j,
            "counter_vs_raw": (c_j - raw_j) / raw_j,
            "sampled_vs_counter": (s_j - c_j) / c_j,
            "duration_s": m_counter.duration_s,
            "short_window": m_short.to_dict(),
        },
    )


if __name__ == "__main__":
    main()
