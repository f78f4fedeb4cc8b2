"""bench/probe_evaluate.py's scoring: the probe's and PRE's picks from every start and limit,
scored on a ground truth (here made up, so the right regrets are known), and its checks."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _module(name: str = "probe_evaluate") -> Any:
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(precision: str, energy: float, time: float, source: str) -> dict[str, Any]:
    return {"precision": precision, "batch_size": 96, "energy_j": energy,
            "duration_s": time, "energy_low_j": energy * 0.98, "energy_high_j": energy * 1.02,
            "duration_low_s": time, "duration_high_s": time, "source": source}  # fmt: skip


# per image: bf16 is cheapest and fastest, fp32 the dearest; tf32 between
TRUTH = {"fp32": (3.0, 0.010), "tf32": (2.0, 0.007), "amp-bf16": (1.0, 0.004)}
MEASURED = "measured (probe, 3 windows: measured by GPU counters)"


def test_a_probe_that_measured_the_truth_has_no_regret_and_a_wrong_pre_has_some() -> None:
    module = _module()
    probe = [_row(p, e, t, MEASURED) for p, (e, t) in TRUTH.items()]
    # PRE believes fp32 is cheapest (it is the dearest): its pick from any start is fp32
    pre = [_row("fp32", 0.5, 0.002, "predicted"), _row("tf32", 2.0, 0.007, "predicted"),
           _row("amp-bf16", 1.5, 0.004, "predicted")]  # fmt: skip
    scores = module.score(TRUTH, probe, pre, 96)
    assert len(scores["probe"]) == len(scores["pre"]) == 3 * 4  # 3 starts x 4 limits
    assert all(s["regret"] == 0 and not s["violation"] for s in scores["probe"])
    assert max(s["regret"] for s in scores["pre"]) == pytest.approx(3.0 / 1.0 - 1)
    summary = module.summary(scores["pre"])
    assert summary["n"] == 12 and summary["p90_regret"] > 0


def test_an_unmeasured_candidate_keeps_pre_s_scaled_prediction_and_can_still_win() -> None:
    module = _module()
    probe = [_row("fp32", 3.0, 0.010, MEASURED), _row("tf32", 2.0, 0.007, MEASURED),
             _row("amp-bf16", 1.0, 0.004, "predicted (PRE x1 energy)")]  # fmt: skip
    pre = [_row(p, e, t, "predicted") for p, (e, t) in TRUTH.items()]
    scores = module.score(TRUTH, probe, pre, 96)
    assert {s["start"]["precision"] for s in scores["probe"]} == {"fp32", "tf32"}  # measured
    # bf16 was never measured, but PRE's prediction of it (right here) still leads
    assert all(
        s["pick"]["precision"] == "amp-bf16" for s in scores["probe"] if s["limit"] == "none"
    )
    assert all(s["regret"] == 0 for s in scores["probe"])


def test_the_checks_count_windows_and_compare_energy_with_the_truth() -> None:
    module = _module()
    data = {
        "samples": 1000.0,
        "advice": "Change ...",
        "rows": [_row("amp-bf16", 1.05 * 1000, 0.004 * 1000, MEASURED)],
        "probe": {"duration_s": 29.0, "energy_j": 300.0, "setup_s": 2.0,
                  "candidate_setup_s": {"a": 3.0, "b": 4.0},
                  "window_rows": [{"candidate": "amp-bf16, batch 96, 1 GPU"}] * 3},
    }  # fmt: skip
    c = module.checks(TRUTH, data, 1000.0)
    assert c["windows"] == {"amp-bf16, batch 96, 1 GPU": 3} and c["setup_s"] == 9.0
    assert c["energy_error"]["amp-bf16"] == pytest.approx(0.05)
    assert c["cost_share"]["of_30_epochs"] == pytest.approx(300.0 / (1.0 * 30 * 50_000))
    assert c["cost_share"]["of_10_minutes"] == pytest.approx(300.0 / (1.0 / 0.004 * 600))


def test_the_summary_names_where_the_probe_did_worse_than_pre() -> None:
    summary = _module("probe_summary")
    pair = {"scores": {
        "probe": [{"regret": 0.1, "start": {"precision": "fp32"}, "limit": "none"},
                  {"regret": 0.0, "start": {"precision": "tf32"}, "limit": "none"}],
        "pre": [{"regret": 0.0, "start": {"precision": "fp32"}, "limit": "none"},
                {"regret": 0.2, "start": {"precision": "tf32"}, "limit": "none"}]}}  # fmt: skip
    assert summary.worse_cases(pair) == [("fp32", "none", 0.1, 0.0)]


def test_rescore_reads_recorded_probes_and_truths_from_their_archives(tmp_path: Path) -> None:
    import io
    import json
    import tarfile

    summary = _module("probe_summary")
    samples = 1000.0
    rows = [_row(p, e * samples, t * samples, MEASURED) for p, (e, t) in TRUTH.items()]
    probe = {"samples": samples, "rows": rows, "advice": "x",
             "probe": {"pre_rows": rows, "window_rows": [], "energy_j": 1.0,
                       "duration_s": 1.0}}  # fmt: skip
    truth = {"median": {p: {"energy_per_image_j": e, "time_per_image_s": t, "spread": 0.01}
                        for p, (e, t) in TRUTH.items()}}  # fmt: skip
    archive = tmp_path / "raw.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in (("raw/probe-m-bs96.json", probe), ("raw/truth-m-bs96.json", truth)):
            blob = json.dumps(data).encode()
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    found = summary.rescored([str(archive)])
    assert list(found) == ["m bs96"]
    assert found["m bs96"]["probe"]["n"] == 3 * 4 and found["m bs96"]["probe"]["p90_regret"] == 0
