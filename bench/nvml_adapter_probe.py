"""On a GPU machine, read-only: does the NVML adapter (wattlab.meters.nvml) agree with raw
pynvml? Reads every visible GPU through NvmlDevice and directly, opens the GPU meter and an
EnergyMonitor window over a few seconds (of matmuls when torch with CUDA is installed, else
idle), and checks that the adapter converted units once. Never sets anything.

    python bench/nvml_adapter_probe.py [--seconds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import pynvml

    from wattlab.meters.nvml import NvmlGpuMeter, open_session, visible_gpus
    from wattlab.monitor import EnergyMonitor

    rows = []
    with open_session(pynvml) as session:
        for device in session.devices():
            h = device.handle
            raw = {
                "energy_mj": pynvml.nvmlDeviceGetTotalEnergyConsumption(h),
                "limit_mw": pynvml.nvmlDeviceGetPowerManagementLimit(h),
                "default_mw": pynvml.nvmlDeviceGetPowerManagementDefaultLimit(h),
                "range_mw": list(pynvml.nvmlDeviceGetPowerManagementLimitConstraints(h)),
            }
            row = {
                "physical_index": device.physical_index,
                "uuid": device.uuid,
                "name": device.name,
                "pci_bus_id": device.pci_bus_id(),
                "mig_enabled": device.mig_enabled(),
                "energy_counter_j": device.energy_counter_j(),
                "instant_power_w": device.instant_power_w(),
                "average_power_w": device.average_power_w(),
                "utilization_percent": device.utilization_percent(),
                "power_limit_w": device.power_limit_w(),
                "default_power_limit_w": device.default_power_limit_w(),
                "power_limit_range_w": list(device.power_limit_range_w()),
                "raw": raw,
            }
            row["checks"] = {
                "limit_w == limit_mw/1000": row["power_limit_w"] == raw["limit_mw"] / 1000,
                "default_w == default_mw/1000": row["default_power_limit_w"]
                == raw["default_mw"] / 1000,
                "range_w == range_mw/1000": row["power_limit_range_w"]
                == [v / 1000 for v in raw["range_mw"]],
                "counter_j within 1 kJ of raw_mj/1000": abs(
                    row["energy_counter_j"] - raw["energy_mj"] / 1000
                )
                < 1000,
            }
            rows.append(row)
        gpus = visible_gpus(pynvml)
        meter = NvmlGpuMeter(pynvml, 0, gpus[0])
        work = "idle"
        try:
            import torch

            if torch.cuda.is_available():
                a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
                work = "bf16 matmul"
        except ImportError:
            torch = None
        with EnergyMonitor([meter], interval_s=0.1) as mon:
            t0 = time.perf_counter()
            with mon.window("load") as w:
                while time.perf_counter() - t0 < args.seconds:
                    if work != "idle":
                        for _ in range(10):
                            a @ a
                        torch.cuda.synchronize()
                    else:
                        time.sleep(0.05)
        m = w.result
        window = {
            "work": work,
            "duration_s": m.duration_s,
            "energy_j": m.energy_j["gpu:0"],
            "mean_power_w": m.energy_j["gpu:0"] / m.duration_s,
            "uncertainty_j": m.uncertainty_j["gpu:0"],
            "provenance": m.provenance["gpu:0"].value,
            "samples": len(m.samples),
            "meter_details": meter.info.details,
        }
        meter.close()
    result = {"gpus": rows, "window": window}
    text = json.dumps(result, indent=2, default=str)
    print(text)
    if args.json:
        Path(args.json).write_text(text)
    ok = all(all(r["checks"].values()) for r in rows)
    print("all checks passed" if ok else "SOME CHECKS FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
