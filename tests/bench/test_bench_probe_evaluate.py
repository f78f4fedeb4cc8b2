"""bench/probe_evaluate.py's scoring: the probe's and PRE's picks from every start and limit,
scored on a ground truth (here made up, so the right regrets are known)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "probe_evaluate.py"


def _module() -> Any:
    spec = importlib.util.spec_from_file_location("probe_evaluate", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(precision: str, batch: int, energy: float, time: float, source: str) -> dict[str, Any]:
    return {"precision": precision, "batch_size": batch, "energy_j": energy,
            "duration_s": time, "energy_low_j": energy * 0.98, "energy_high_j": energy * 1.02,
            "duration_low_s": time, "duration_high_s": time, "source": source}  # fmt: skip


# per image: bf16 is cheapest and fastest, fp32 the dearest; tf32 between
TRUTH = {("fp32", 96): (3.0, 0.010), ("tf32", 96): (2.0, 0.007), ("amp-bf16", 96): (1.0, 0.004)}


def test_a_probe_that_measured_the_truth_has_no_regret_and_a_wrong_pre_has_some() -> None:
    module = _module()
    probe = [_row(p, b, e, t, "measured (probe, 2 runs)") for (p, b), (e, t) in TRUTH.items()]
    # PRE believes fp32 is cheapest (it is the dearest): its pick from any start is fp32
    pre = {("fp32", 96): _row("fp32", 96, 0.5, 0.002, "predicted"),
           ("tf32", 96): _row("tf32", 96, 2.0, 0.007, "predicted"),
           ("amp-bf16", 96): _row("amp-bf16", 96, 1.5, 0.004, "predicted")}  # fmt: skip
    scores = module.score(TRUTH, probe, pre)
    assert len(scores["probe"]) == len(scores["pre"]) == 3 * 4  # 3 starts x 4 limits
    assert all(s["regret"] == 0 and not s["violation"] for s in scores["probe"])
    assert max(s["regret"] for s in scores["pre"]) == pytest.approx(3.0 / 1.0 - 1)
    summary = module.summary(scores["pre"])
    assert summary["n"] == 12 and summary["p90_regret"] > 0


def test_only_measured_starts_are_scored_and_the_best_is_the_best_of_all() -> None:
    module = _module()
    probe = [_row("fp32", 96, 3.0, 0.010, "measured (probe, 1 run)"),
             _row("tf32", 96, 2.0, 0.007, "measured (probe, 1 run)")]  # fmt: skip
    pre = {k: _row(k[0], k[1], e, t, "predicted") for k, (e, t) in TRUTH.items()}
    scores = module.score(TRUTH, probe, pre)
    starts = {s["start"]["precision"] for s in scores["probe"]}
    assert starts == {"fp32", "tf32"}
    assert {s["start"]["precision"] for s in scores["pre"]} == starts
    # the probe never measured bf16, the true best: its pick (tf32) regrets 2.0 / 1.0 - 1
    assert max(s["regret"] for s in scores["probe"]) == pytest.approx(1.0)
    assert all(s["regret"] == 0 for s in scores["pre"])  # PRE right here: bf16 from both
