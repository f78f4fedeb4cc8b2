"""The energy every estimation method predicts and is measured against (``estimate evaluate
--target``): ``total`` (every measured component), ``gpu`` (the GPUs) or ``paper`` (GPU + RAM,
the reference paper's target). Light: no pandas, so the CLI may read it at start-up."""

from __future__ import annotations

# target -> (the runs table's columns that add up to it, what it holds)
TARGETS: dict[str, tuple[tuple[str, ...], str]] = {
    "total": (("energy_total_j",), "every measured component (GPU, CPU, RAM, ...)"),
    "gpu": (("energy_gpu_j",), "the GPUs only"),
    "paper": (
        ("energy_gpu_j", "energy_dram_j"),
        "GPU + RAM, the reference paper's target (RAM modelled where RAPL has no DRAM domain)",
    ),
}
# the components a prediction of the whole target includes (the table's *covers* column)
TARGET_COMPONENTS = {"total": "total", "gpu": "gpu", "paper": "gpu+ram"}

__all__ = ["TARGETS", "TARGET_COMPONENTS"]
