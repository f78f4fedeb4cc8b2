"""Which settings the advisor may change (its knobs), and what it says about the ones it cannot.

Allowed by default: the knobs that leave the learning problem alone (precision, CUDA graphs,
power limit, GPU count). Batch size changes convergence (steps per epoch, the learning rate that
suits it), so it is changed only when asked for (``--allow batch``), and the advice says so.

Two default knobs have no evidence to predict from, and the advisor says so instead of guessing:

- CUDA graphs: the reference set has no runs with graphs; one measured pair exists (ResNet-50,
  bf16, batch 512: 0.45x the GPU energy per image, ``docs/measured/h200-train-throughput.json``),
  and one model is too little to predict another configuration.
- GPU count: the reference set covers one GPU only, so another count would be an unchecked
  extrapolation; the advice keeps the count it was given.
"""

from __future__ import annotations

from wattlab.errors import ConfigError, echo

KNOBS = ("precision", "graphs", "power-limit", "gpus", "batch")
DEFAULT_KNOBS = ("precision", "graphs", "power-limit", "gpus")
# knobs the advisor varies; the others are accepted and explained (WHY_NOT)
VARIED = ("precision", "power-limit", "batch")

WHY_NOT = {
    "graphs": (
        "CUDA graphs are not advised: the reference set has no runs with graphs, and the one "
        "measured pair (ResNet-50, bf16, batch 512: 0.45x the GPU energy per image, "
        "docs/measured/h200-train-throughput.json) is one model, too little to predict another."
    ),
    "gpus": (
        "the GPU count is kept: the reference set covers one GPU only, so another count would "
        "be an unchecked extrapolation."
    ),
}
BATCH_NOTE = (
    "batch size may change (--allow batch): it changes convergence (steps per epoch and the "
    "learning rate that suits it), so check the accuracy of an advised batch size."
)


def parse_allow(text: str | None) -> tuple[str, ...]:
    """The knobs named in ``--allow`` (comma-separated; None: the default knobs), in KNOBS order.

    ConfigError for an unknown or empty knob list."""
    if text is None:
        return DEFAULT_KNOBS
    names = [part.strip().lower() for part in text.split(",")]
    if not any(names) or any(not n for n in names):
        raise ConfigError(
            f"--allow must list knobs separated by commas ({', '.join(KNOBS)}), got {echo(text)}."
        )
    aliases = {"power_limit": "power-limit", "power": "power-limit", "batch-size": "batch",
               "batch_size": "batch", "cuda-graphs": "graphs", "gpu": "gpus"}  # fmt: skip
    names = [aliases.get(n, n) for n in names]
    unknown = [n for n in names if n not in KNOBS]
    if unknown:
        raise ConfigError(
            f"--allow names an unknown knob {echo(unknown[0])}; the knobs are {', '.join(KNOBS)}."
        )
    return tuple(k for k in KNOBS if k in names)


def knob_notes(allowed: tuple[str, ...]) -> list[str]:
    """One sentence per allowed knob the advisor does not vary, and the batch-size warning."""
    notes = [WHY_NOT[k] for k in allowed if k in WHY_NOT]
    if "batch" in allowed:
        notes.append(BATCH_NOTE)
    return notes


__all__ = ["BATCH_NOTE", "DEFAULT_KNOBS", "KNOBS", "VARIED", "WHY_NOT", "knob_notes", "parse_allow"]
