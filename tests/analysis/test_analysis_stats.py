"""Statistics on small hand-made runs tables: every expected number is computed by hand."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from wattlab.analysis import (
    codecarbon_errors,
    pareto_front,
    parse_baseline,
    power_limit_effects,
    region_against_baseline,
    scaling_efficiency,
    summarize,
    summary_to_json,
)
from wattlab.errors import ConfigError, DataError


def run(config: str, time_s: float, energy_j: float, **extra: object) -> dict:
    """One ok run of a configuration named ``config`` (gpus/precision/limit from ``extra``)."""
    row = {
        "status": "ok",
        "config_hash": config,
        "label": config,
        "model": "resnet50",
        "device": "cuda",
        "gpus": 1,
        "world_size": 1,
        "precision": "fp32",
        "batch_size": 256,
        "power_limit_requested_w": None,
        "power_limit_w": 300.0,
        "duration_s": time_s,
        "energy_total_j": energy_j,
        "samples": 1000,
        "provenance": "measured",
    }
    row.update(extra)
    return row


def study_table() -> pd.DataFrame:
    """Three configurations x three runs (1 GPU fp32 at default/250 W, 2 GPUs fp32 default)."""
    rows = [
        run("base", 100.0, 1000.0, id=1),
        run("base", 102.0, 1010.0, id=2),
        run("base", 98.0, 990.0, id=3),
        run("cap250", 101.0, 940.0, power_limit_requested_w=250.0, power_limit_w=250.0, id=4),
        run("cap250", 101.5, 930.0, power_limit_requested_w=250.0, power_limit_w=250.0, id=5),
        run("cap250", 100.5, 950.0, power_limit_requested_w=250.0, power_limit_w=250.0, id=6),
        run("two", 60.0, 1100.0, gpus=2, world_size=2, id=7),
        run("two", 61.0, 1080.0, gpus=2, world_size=2, id=8),
        run("two", 59.0, 1120.0, gpus=2, world_size=2, id=9),
        {"status": "failed", "config_hash": "base", "label": "base", "id": 10, "error": "OOM"},
    ]
    return pd.DataFrame(rows)


def test_summarize_medians_and_changes_by_hand():
    s = summarize(study_table())
    assert list(s.index) == ["base", "cap250", "two"]
    assert s.loc["base", "duration_s"] == 100.0  # median of 98, 100, 102
    assert s.loc["cap250", "energy_total_j"] == 940.0  # median of 930, 940, 950
    assert s.loc["two", "energy_total_j"] == 1100.0
    assert s.loc["base", "n"] == 3 and s.loc["base", "n_failed"] == 1
    assert s.loc["base", "energy_per_sample_j"] == pytest.approx(1.0)  # 1000 J / 1000 samples
    # default baseline: fewest GPUs, fp32, default limit counts as the highest
    assert s["is_baseline"].tolist() == [True, False, False]
    assert s.loc["cap250", "time_change"] == pytest.approx(101.0 / 100.0 - 1)  # +1 %
    assert s.loc["cap250", "energy_change"] == pytest.approx(940.0 / 1000.0 - 1)  # -6 %
    assert s.loc["two", "time_change"] == pytest.approx(-0.40)
    assert s.loc["two", "energy_change"] == pytest.approx(0.10)
    assert s.loc["base", "time_change"] == 0.0
    lo, hi = s.loc["cap250", "energy_change_ci_low"], s.loc["cap250", "energy_change_ci_high"]
    assert lo <= -0.06 <= hi and hi < 0  # every resample of 930-950 vs 990-1010 saves energy


def test_summarize_explicit_baseline_coerces_strings():
    s = summarize(study_table(), baseline=parse_baseline("gpus=2"))
    assert s.loc["two", "is_baseline"]
    assert s.loc["base", "time_change"] == pytest.approx(100.0 / 60.0 - 1)
    s = summarize(study_table(), baseline={"power_limit_w": "250W"})
    assert s.loc["cap250", "is_baseline"]
    s = summarize(study_table(), baseline={"gpus": 1, "power_limit_requested_w": "default"})
    assert s.loc["base", "is_baseline"]


def test_baseline_errors_name_the_baseline_and_configurations():
    with pytest.raises(ConfigError, match=r"baseline gpus=4 matches no configuration.*base"):
        summarize(study_table(), baseline={"gpus": "4"})
    with pytest.raises(ConfigError, match=r"matches 2 configurations"):
        summarize(study_table(), baseline={"gpus": 1})
    with pytest.raises(ConfigError, match=r"'colour' is not a configuration column"):
        summarize(study_table(), baseline={"colour": "red"})
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_baseline("gpus")
    assert parse_baseline("gpus=1, precision=fp32") == {"gpus": "1", "precision": "fp32"}


def test_default_baseline_prefers_fp32_and_highest_limit():
    rows = [
        run("amp", 50.0, 500.0, precision="amp-bf16"),
        run("fp32-200", 120.0, 800.0, power_limit_requested_w=200.0, power_limit_w=200.0),
        run("fp32-250", 110.0, 900.0, power_limit_requested_w=250.0, power_limit_w=250.0),
        run("two", 60.0, 1000.0, gpus=2, world_size=2),
    ]
    s = summarize(pd.DataFrame(rows))
    assert s.loc[s["is_baseline"], "label"].tolist() == ["fp32-250"]


def test_no_ok_runs_and_missing_columns_are_data_errors():
    failed = pd.DataFrame([{**run("a", 1, 1), "status": "failed"}])
    with pytest.raises(DataError, match="no successful runs"):
        summarize(failed)
    with pytest.raises(DataError, match="energy_total_j"):
        summarize(pd.DataFrame([run("a", 1, 1)]).drop(columns=["energy_total_j"]))


def test_summary_intervals_are_order_statistics_and_deterministic():
    s1 = summarize(study_table())
    pd.testing.assert_frame_equal(s1, summarize(study_table()))
    # three runs cannot give a 95 % interval: the range, labelled so, with 75 % coverage
    assert (s1.loc["base", "duration_s_ci_low"], s1.loc["base", "duration_s_ci_high"]) == (
        98.0,
        102.0,
    )
    assert s1.loc["base", "ci_method"] == "range"
    assert s1.loc["base", "ci_coverage"] == pytest.approx(0.75)


def test_single_run_configuration_has_no_interval():
    s = summarize(pd.DataFrame([run("only", 10.0, 100.0)]))
    assert s.loc["only", "energy_total_j"] == 100.0
    assert math.isnan(s.loc["only", "energy_total_j_ci_low"])
    assert s.loc["only", "is_baseline"]


def test_pareto_front_with_ties_duplicates_and_missing():
    df = pd.DataFrame(
        {
            "t": [1.0, 2.0, 2.0, 3.0, 1.0, 4.0, 2.5, np.nan],
            "e": [5.0, 3.0, 3.0, 1.0, 6.0, 1.0, 4.0, 0.5],
        },
        index=list("abcdefgh"),
    )
    # e: same time as a, more energy -> dominated; f: same energy as d, slower -> dominated;
    # g: dominated by b; b and c are identical -> both kept; h has no time -> left out
    assert pareto_front(df, "t", "e") == ["a", "b", "c", "d"]


def test_region_thresholds_by_hand():
    s = pd.DataFrame(
        {
            "time_change": [0.0, 0.019, 0.021, -0.05, 0.01, 0.02],
            "energy_change": [0.0, -0.046, -0.096, -0.02, -0.03, -0.10],
        },
        index=["base", "in", "too_slow", "saves_too_little", "edge", "edge_time"],
    )
    assert region_against_baseline(s) == ["edge_time", "in", "edge"]  # largest saving first
    assert region_against_baseline(s, min_saving=0.05, max_penalty=0.05) == [
        "edge_time",
        "too_slow",
    ]
    faster = pd.DataFrame({"time_change": [-0.3], "energy_change": [-0.04]}, index=["fast"])
    assert region_against_baseline(faster) == ["fast"]  # less time is no penalty
    with pytest.raises(ConfigError, match="--region-min-saving"):
        region_against_baseline(s, min_saving=1.5)
    with pytest.raises(ConfigError, match="--region-max-slowdown"):
        region_against_baseline(s, max_penalty=-0.1)


def test_scaling_efficiency_by_hand():
    s = summarize(study_table())
    sc = scaling_efficiency(s)
    # only "base" and "two" share precision, requested limit (default) and batch size
    assert sorted(sc["label"]) == ["base", "two"]
    two = sc[sc["label"] == "two"].iloc[0]
    assert two["speedup"] == pytest.approx(100.0 / 60.0)
    assert two["scaling_efficiency"] == pytest.approx(100.0 / 60.0 / 2)
    assert two["energy_ratio"] == pytest.approx(1100.0 / 1000.0)
    assert two["reference_label"] == "base"


def test_scaling_on_cpu_uses_processes():
    rows = [
        run("p1", 100.0, 500.0, device="cpu", gpus=0, world_size=1),
        run("p2", 80.0, 520.0, device="cpu", gpus=0, world_size=2),
    ]
    sc = scaling_efficiency(summarize(pd.DataFrame(rows)))
    p2 = sc[sc["label"] == "p2"].iloc[0]
    assert p2["gpus"] == 2 and p2["scaling_efficiency"] == pytest.approx(1.25 / 2)


def test_power_limit_effects_compare_within_gpu_count():
    s = summarize(study_table())
    eff = power_limit_effects(s)
    assert list(eff["label"]) == ["base", "cap250"]  # "two" has a single limit
    cap = eff[eff["label"] == "cap250"].iloc[0]
    assert cap["energy_change"] == pytest.approx(-0.06)
    assert cap["time_change"] == pytest.approx(0.01)
    assert bool(cap["in_operating_region"])
    assert bool(eff.iloc[0]["is_default_limit"]) and eff.iloc[0]["power_limit_w"] == 300.0


def test_codecarbon_errors_by_hand():
    rows = [
        run("a", 1, 100.0, id=1, codecarbon_energy_j=105.0, codecarbon_rel_error=0.05,
            energy_gpu_j=80.0, energy_cpu_j=10.0, energy_dram_j=10.0,
            codecarbon_components_json=json.dumps({"gpu_j": 80.0, "cpu_j": 12.0, "ram_j": 13.0})),
        run("a", 1, 200.0, id=2, codecarbon_energy_j=196.0, codecarbon_rel_error=0.5),
        run("a", 1, 50.0, id=3, codecarbon_energy_j=52.0),
        run("a", 1, 70.0, id=4),
    ]  # fmt: skip
    cc = codecarbon_errors(pd.DataFrame(rows))
    assert cc["measured"] and cc["n"] == 3
    errors = sorted(r["rel_error"] for r in cc["runs"])
    assert errors == pytest.approx([-0.02, 0.04, 0.05])
    assert cc["median"] == pytest.approx(0.04)
    assert cc["median_abs"] == pytest.approx(0.04)
    assert cc["min"] == pytest.approx(-0.02) and cc["max"] == pytest.approx(0.05)
    assert cc["mismatches"] == [2]  # the stored 0.5 is not (196 - 200) / 200
    assert cc["components"]["gpu"]["median"] == pytest.approx(0.0)
    assert cc["components"]["cpu"]["median"] == pytest.approx(0.2)
    assert cc["components"]["ram"]["median"] == pytest.approx(0.3)
    assert codecarbon_errors(study_table())["measured"] is False
    assert cc["reference"] == "direct measurement" and cc["reference_measured_share"] == 1.0


def test_codecarbon_against_an_estimate_is_named_so():
    from wattlab.analysis.report_sections import codecarbon_blocks, codecarbon_reference

    def with_parts(run_id: int, parts: dict) -> dict:
        total = sum(p["energy_j"] for p in parts.values())
        return run("a", 1, total, id=run_id, codecarbon_energy_j=2 * total,
                   components_json=json.dumps(parts))  # fmt: skip

    cpu_only = {"cpu:estimated": {"energy_j": 90.0, "provenance": "estimated"},
                "ram:estimated": {"energy_j": 10.0, "provenance": "estimated"}}  # fmt: skip
    cc = codecarbon_errors(pd.DataFrame([with_parts(1, cpu_only), with_parts(2, cpu_only)]))
    assert cc["reference"] == "wattlab's estimate" and cc["reference_measured_share"] == 0.0
    assert codecarbon_reference(cc).startswith("wattlab's estimate")
    warning = codecarbon_blocks(cc)[0]
    assert warning.warning and "two estimates" in warning.text
    with_gpu = {"gpu:0": {"energy_j": 90.0, "provenance": "measured"},
                "cpu:estimated": {"energy_j": 10.0, "provenance": "estimated"}}  # fmt: skip
    cc = codecarbon_errors(pd.DataFrame([with_parts(1, with_gpu)]))
    assert cc["reference"] == "direct measurement"
    assert cc["reference_measured_share"] == pytest.approx(0.9)
    assert codecarbon_reference(cc) == (
        "direct measurement (90.0% of the energy measured, the rest estimated)"
    )
    assert not getattr(codecarbon_blocks(cc)[0], "warning", False)


def test_summary_to_json_keys_and_strict_json():
    runs = study_table()
    s = summarize(runs)
    data = summary_to_json(s, runs)
    text = json.dumps(data, allow_nan=False)  # NaN must have become null
    assert json.loads(text)["baseline"]["label"] == "base"
    # two (60 s, 1100 J), base (100 s, 1000 J), cap250 (101 s, 940 J): none dominates another
    assert data["pareto"] == ["two", "base", "cap250"]
    assert set(data) >= {"configurations", "pareto", "operating_region", "baseline", "codecarbon"}
    by_label = {c["label"]: c for c in data["configurations"]}
    cap = by_label["cap250"]
    assert cap["time_s"] == 101.0 and cap["energy_j"] == 940.0
    assert cap["energy_change"] == pytest.approx(-0.06)
    assert cap["operating_region"] and data["operating_region"] == ["cap250"]
    assert len(cap["time_s_ci"]) == 2 and cap["provenance"] == "measured"
    assert data["runs"] == {
        "ok": 9,
        "failed": 1,
        "failures": [{"run_id": 10, "label": "base", "repetition": None, "error": "OOM"}],
        "left_out": [],
    }
