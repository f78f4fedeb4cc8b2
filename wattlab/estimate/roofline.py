"""PRE's physics time model: a training step is as slow as the slower of its two workers, the
CPU that launches the step's kernels and the GPU that runs them.

Per training sample, from the nominal times of ``pre.physics_terms`` (s):

- ``launch_s``  = (layers + kernels) x LAUNCH_S_PER_LAYER / batch: the step's module calls and
  kernel launches, shared by the batch (the CPU's work; what bounds small models at 32x32 and
  small batches);
- ``compute_s`` = 3 x forward FLOPs / (GPUs x peak rate at the precision): fp32 has no tensor
  cores, so its peak is the plain FP32 rate (the 67 TFLOP/s of an H100/H200 against 495 for
  TF32): its own coefficient says how much of it a run reaches;
- ``memory_s``  = 3 x activation bytes / (GPUs x memory bandwidth): what bounds large batches of
  networks with little arithmetic per byte (depthwise convolutions, small ViTs);
- ``attention_s`` = 3 x the forward FLOPs of the attention products (QK^T, attention x V) /
  the same peak: they run far below the dense products' efficiency (small head dimensions, a
  softmax between them), so they get their own coefficient, pulled towards the dense one by a
  prior row (a reference set without attention keeps the dense efficiency for it);
- ``step_s``    = STEP_S / batch: what the loop does once per step whatever the model (the
  Python of the step, the learning rate, the STEP marks), shared by the batch; recipe 2 (it
  clips the gradient norm and trains LayerNorm models with AdamW) adds its own once-per-step
  work, a second coefficient on the same term for its runs;
- ``mark_s``    = marks per step x MARK_S / batch: STEP's live step-level marks, each reading
  the energy meters on the host inside the step loop (``run_shape``; 0 for a plain run). The
  shipped reference runs were all marked, one mark per step for most: without this term their
  marks' cost was learnt as launch and per-step cost and predicted for every unmarked run
  (issue 38: launch-bound runs outside the set +45 % too slow).

The time per sample is a soft maximum of the two sides::

    cpu  = (a[precision] x launch_s + (s + r x [recipe 2]) x step_s + k x mark_s) x h[machine]
    gpu  = c[precision] x compute_s + t x attention_s + m x memory_s + g x launch_s
    time = (cpu**K + gpu**K) ** (1 / K)        K = SOFTMAX_POWER

``h`` is the machine's (named by its GPU, where the reference set has two or more): the host
CPU that launches the kernels is not in the GPU's specs, and one machine's launches were slower
(issue 47); a deviation from 1 pulled towards it like a precision's, and 1 for a machine no run
came from. ``g`` is the GPU's own cost of a kernel however small (its floor at tiny batches).
A sum of the terms, the old form, cannot bend: fitted on batch sizes where the CPU sets the
pace it learns a small compute coefficient and predicts large batches too fast (issue 29: batch
768 came out 2-3x too fast). ``regime`` names the term that sets each prediction's pace.

The coefficients are fitted on log time by least squares (positive through their logs); the
per-precision launch and compute coefficients are deviations from pooled ones, pulled towards 0
by prior rows of scale PRIOR_SD (a precision whose runs barely constrain a term keeps the
pooled value). A precision without runs takes its sibling's deviations (amp-bf16 <-> amp-fp16)
or none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

SOFTMAX_POWER = 4.0
STEP_S = 1e-3  # the nominal once-per-step time the step_s term is counted in
MARK_S = 4e-3  # the nominal cost of one live mark: one read of an H200's energy counter
PRIOR_SD = 1.0  # log-space scale of a precision's deviation from the pooled coefficient
ANCHOR_SD = 10.0  # a very weak pull of each pooled coefficient towards its start: a term the
# runs do not constrain (no recipe-2 run, no attention) stays finite
_SIBLING = {"amp-bf16": "amp-fp16", "amp-fp16": "amp-bf16"}
_POOLED = 8  # pooled coefficients (a, c, m, g, r, t, s, k) before the per-precision deviations
REGIMES = ("launch-bound", "compute-bound", "memory-bound", "kernel-bound")


@dataclass
class Roofline:
    """Fitted coefficients (see the module docstring); logs of the pooled ones."""

    log_a: float = 0.0
    log_c: float = 0.0
    log_m: float = 0.0
    log_g: float = -3.0
    log_r: float = -3.0
    log_t: float = 0.0
    log_s: float = -3.0
    log_k: float = 0.0
    dev_a: dict[str, float] = field(default_factory=dict)
    dev_c: dict[str, float] = field(default_factory=dict)
    power: float = SOFTMAX_POWER
    # the CPU side's deviation per machine (named by its GPU): the host that launches the
    # kernels is not in the GPU's specs (issue 47: the H100's machine launched slower); a
    # machine no run came from takes none (the pooled coefficient)
    dev_h: dict[str, float] = field(default_factory=dict)

    # -- prediction ---------------------------------------------------------------------------
    def _deviation(self, table: dict[str, float], precision: str) -> float:
        if precision in table:
            return table[precision]
        sibling = _SIBLING.get(precision)
        return table.get(sibling, 0.0) if sibling is not None else 0.0

    def sides(
        self,
        parts: np.ndarray,
        precision: np.ndarray,
        recipe: np.ndarray,
        machine: np.ndarray | None = None,
    ) -> tuple:
        """(cpu, gpu compute, gpu memory, gpu kernels) per sample, s; the attention products
        count as compute. ``machine``: each row's GPU name (the CPU side's ``dev_h``)."""
        launch, compute, memory, attention = (parts[:, i] for i in range(4))
        dev_a = np.array([self._deviation(self.dev_a, str(p)) for p in precision])
        dev_c = np.array([self._deviation(self.dev_c, str(p)) for p in precision])
        recipe2 = (np.asarray(recipe, dtype=float) >= 2).astype(float)
        step = parts[:, 4]
        marks = parts[:, 5] if parts.shape[1] > 5 else np.zeros(len(parts))
        cpu = (
            _exp(self.log_a + dev_a) * launch
            + _exp(self.log_s) * step
            + _exp(self.log_r) * recipe2 * step
            + _exp(self.log_k) * marks
        )
        if machine is not None and self.dev_h:
            cpu = cpu * _exp(np.array([self.dev_h.get(str(m), 0.0) for m in machine]))
        return (
            cpu,
            _exp(self.log_c + dev_c) * compute + _exp(self.log_t) * attention,
            _exp(self.log_m) * memory,
            _exp(self.log_g) * launch,
        )

    def predict(
        self,
        parts: np.ndarray,
        precision: np.ndarray,
        recipe: np.ndarray,
        machine: np.ndarray | None = None,
    ) -> np.ndarray:
        cpu, compute, memory, kernels = self.sides(parts, precision, recipe, machine)
        gpu = compute + memory + kernels
        k = self.power
        return np.clip((cpu**k + gpu**k) ** (1.0 / k), 1e-15, None)

    def regime(
        self,
        parts: np.ndarray,
        precision: np.ndarray,
        recipe: np.ndarray,
        machine: np.ndarray | None = None,
    ) -> list[str]:
        """The term that sets each row's pace: the CPU's launches, or the GPU's largest part."""
        cpu, compute, memory, kernels = self.sides(parts, precision, recipe, machine)
        out = []
        for c, x, m, g in zip(cpu, compute, memory, kernels, strict=True):
            if c >= x + m + g:
                out.append("launch-bound")
            else:
                out.append(REGIMES[1 + int(np.argmax([x, m, g]))])
        return out

    # -- fitting ------------------------------------------------------------------------------
    @classmethod
    def fit(
        cls,
        parts: np.ndarray,
        precision: np.ndarray,
        recipe: np.ndarray,
        time_s: np.ndarray,
        machine: np.ndarray | None = None,
    ) -> Roofline:
        from scipy.optimize import least_squares

        precisions = tuple(sorted({str(p) for p in precision}))
        index = {p: i for i, p in enumerate(precisions)}
        rows = np.array([index[str(p)] for p in precision])
        n = len(precisions)
        # a deviation per machine only where there are two or more (one is the pooled value)
        machines = tuple(sorted({str(m) for m in machine})) if machine is not None else ()
        if len(machines) < 2:
            machines = ()
        h = len(machines)
        target = np.log(np.clip(np.asarray(time_s, dtype=float), 1e-15, None))

        def unpack(theta: np.ndarray) -> Roofline:
            return cls(
                log_a=theta[0],
                log_c=theta[1],
                log_m=theta[2],
                log_g=theta[3],
                log_r=theta[4],
                log_t=theta[5],
                log_s=theta[6],
                log_k=theta[7],
                dev_a={p: theta[_POOLED + index[p]] for p in precisions},
                dev_c={p: theta[_POOLED + n + index[p]] for p in precisions},
                dev_h={m: theta[_POOLED + 2 * n + i] for i, m in enumerate(machines)},
            )

        def residuals(theta: np.ndarray) -> np.ndarray:
            model = unpack(theta)
            fit = np.log(model.predict(parts, precisions_of(rows), recipe, machine)) - target
            prior = np.concatenate([theta[_POOLED:], [theta[5] - theta[1]]]) / PRIOR_SD
            anchor = (theta[:_POOLED] - theta0[:_POOLED]) / ANCHOR_SD
            return np.concatenate([fit, prior, anchor])

        def precisions_of(r: np.ndarray) -> np.ndarray:
            return np.array(precisions, dtype=object)[r]

        start = _start(parts, target)
        theta0 = np.concatenate([start, [start[1], start[0] - 3.0, 0.0], np.zeros(2 * n + h)])
        result = least_squares(residuals, theta0, method="trf", x_scale=1.0, max_nfev=2000)
        return unpack(result.x)

    # -- storage ------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "roofline",
            "log": [
                self.log_a,
                self.log_c,
                self.log_m,
                self.log_g,
                self.log_r,
                self.log_t,
                self.log_s,
                self.log_k,
            ],
            "dev_a": dict(self.dev_a),
            "dev_c": dict(self.dev_c),
            "dev_h": dict(self.dev_h),
            "power": self.power,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Roofline:
        logs = [float(v) for v in doc["log"]]
        if len(logs) != _POOLED or not all(math.isfinite(v) for v in logs):
            raise ValueError("roofline coefficients of the wrong length or not finite")
        devs = {}
        for key in ("dev_a", "dev_c", "dev_h"):
            table = {str(k): float(v) for k, v in dict(doc.get(key, {})).items()}
            if not all(math.isfinite(v) for v in table.values()):
                raise ValueError("roofline deviations not finite")
            devs[key] = table
        power = float(doc["power"])
        if not 1.0 <= power <= 64.0:
            raise ValueError("roofline power out of range")
        names = ("log_a", "log_c", "log_m", "log_g", "log_r", "log_t", "log_s", "log_k")
        return cls(
            **dict(zip(names, logs, strict=True)),
            dev_a=devs["dev_a"],
            dev_c=devs["dev_c"],
            dev_h=devs["dev_h"],
            power=power,
        )


def _exp(x: Any) -> Any:
    """exp of a log coefficient, kept finite (a coefficient the data does not constrain)."""
    return np.exp(np.clip(x, -60.0, 60.0))


def _start(parts: np.ndarray, log_time: np.ndarray) -> np.ndarray:
    """Starting logs: each side's coefficient as if it alone set the pace of the median run."""
    launch, compute, memory = (np.clip(parts[:, i], 1e-15, None) for i in range(3))
    median = float(np.median(log_time))
    log_a = median - float(np.median(np.log(launch)))
    log_c = median - float(np.median(np.log(compute)))
    log_m = median - float(np.median(np.log(memory)))
    return np.array([log_a, log_c - 1.0, log_m - 1.0, log_a - 3.0, log_a - 3.0])
