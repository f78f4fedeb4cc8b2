"""CodeCarbon's OfflineEmissionsTracker over the budget window (never the online one)."""

from __future__ import annotations


class CodeCarbon:
    """CodeCarbon's OfflineEmissionsTracker over the budget window (never the online one)."""

    def __init__(self, country: str, interval_s: float) -> None:
        import logging

        from codecarbon import OfflineEmissionsTracker

        logging.getLogger("codecarbon").setLevel(logging.ERROR)  # its INFO lines are noise here

        self.tracker = OfflineEmissionsTracker(
            country_iso_code=country,
            measure_power_secs=max(interval_s, 0.5),
            save_to_file=False,
            log_level="error",
            tracking_mode="machine",
        )
        self.data: dict[str, float] | None = None

    def start(self) -> None:
        self.tracker.start()

    def stop(self) -> None:
        self.tracker.stop()
        data = self.tracker.final_emissions_data
        self.data = {
            "energy_j": float(data.energy_consumed) * 3.6e6,
            "gpu_j": float(data.gpu_energy) * 3.6e6,
            "cpu_j": float(data.cpu_energy) * 3.6e6,
            "ram_j": float(data.ram_energy) * 3.6e6,
        }
