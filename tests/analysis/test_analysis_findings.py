"""The report's opening: the finding in one sentence, provenance by share, where time went."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from wattlab.analysis.energy_shares import describe_shares, energy_shares
from wattlab.analysis.headline import finding
from wattlab.analysis.phases import phase_times
from wattlab.analysis.report import write_report
from wattlab.analysis.summary import summarize


def run(config: str, time_s: float, energy_j: float, **extra: object) -> dict:
    row = {
        "status": "ok", "config_hash": config, "label": config, "model": "resnet18",
        "device": "cuda", "gpus": 1, "world_size": 1, "precision": "fp32", "batch_size": 256,
        "duration_s": time_s, "energy_total_j": energy_j, "samples": 1000,
        "provenance": "measured",
    }  # fmt: skip
    row.update(extra)
    return row


def two_configs(amp_time_s: float = 40.0, amp_energy_j: float = 250.0) -> pd.DataFrame:
    return pd.DataFrame(
        [
            run("fp32", 100.0, 1000.0, id=1),
            run("fp32", 101.0, 1010.0, id=2),
            run("bf16", amp_time_s, amp_energy_j, precision="amp-bf16", id=3),
            run("bf16", amp_time_s + 1, amp_energy_j + 5, precision="amp-bf16", id=4),
        ]
    )


def test_finding_names_the_ratio_and_the_speed_up():
    f = finding(summarize(two_configs()))
    # energy per image 252.5/1000 vs 1005/1000 J: 3.98x; time per image 40.5 vs 100.5 s: 2.48x
    assert f["best"] == "bf16" and f["reference"] == "fp32"
    assert f["energy_ratio"] == pytest.approx(1005 / 252.5)
    assert f["speedup"] == pytest.approx(100.5 / 40.5)
    assert f["sentence"] == (
        "bf16 used 3.98x less energy than the baseline fp32 for the same 1,000 images "
        "(0.2525 vs 1.005 J per image) and was 2.48x faster."
    )


def test_finding_when_the_best_is_slower_or_the_baseline_or_noise():
    slow = finding(summarize(two_configs(amp_time_s=150.0, amp_energy_j=800.0)))
    # 1 - 802.5 / 1005 = 20.1 % less energy; 150.5 / 100.5 - 1 = 49.8 % more time
    assert "bf16 used 20.1 % less energy than the baseline fp32" in slow["sentence"]
    assert "but took 49.8 % more time" in slow["sentence"]
    slower = finding(summarize(two_configs(amp_time_s=160.0, amp_energy_j=100.0)))
    assert "9.80x less energy" in slower["sentence"]  # 1005 / 102.5
    assert "but took 1.60x as long" in slower["sentence"]  # 160.5 / 100.5
    base_best = finding(summarize(two_configs(amp_energy_j=2000.0)))
    assert base_best["best"] == "fp32" and base_best["reference"] == "bf16"
    assert base_best["sentence"].startswith("The baseline fp32 used 1.99x less energy than bf16")
    close = finding(summarize(two_configs(amp_energy_j=990.0)))  # 990-995 vs 1000-1010
    assert "used 1.2 % less energy" in close["sentence"]  # 1 - 992.5 / 1005
    same = finding(summarize(two_configs(amp_energy_j=998.0)))  # 1005 / 1000.5: 0.4 %
    assert same["sentence"].startswith("No configuration used clearly less energy per image")
    overlap = finding(summarize(two_configs(amp_energy_j=905.0, amp_time_s=100.0)))
    assert overlap["overlap"] is False  # 905-910 vs 1000-1010
    wide = two_configs(amp_energy_j=900.0)
    wide.loc[wide["id"] == 4, "energy_total_j"] = 1100.0  # bf16 900-1100 spans fp32's
    assert (
        "their intervals overlap, so the difference may be noise"
        in finding(summarize(wide))["sentence"]
    )
    one = finding(summarize(pd.DataFrame([run("only", 10.0, 50.0)])))
    assert (
        one["sentence"]
        == "One configuration, only: 0.05000 J per image, 100 images/s, over 1 run(s)."
    )


def parts(gpu_j: float, cpu_j: float, ram_j: float, gpu_prov: str = "measured") -> str:
    return json.dumps(
        {
            "gpu:0": {"energy_j": gpu_j, "provenance": gpu_prov},
            "cpu:estimated": {"energy_j": cpu_j, "provenance": "estimated"},
            "ram:estimated": {"energy_j": ram_j, "provenance": "estimated"},
            "psys:0": {"energy_j": 999.0, "provenance": "measured", "in_total": False},
        }
    )


def test_energy_shares_by_provenance_and_component():
    runs = pd.DataFrame(
        [
            run("a", 1.0, 100.0, components_json=parts(80.0, 15.0, 5.0)),
            run("a", 1.0, 100.0, components_json=parts(80.0, 15.0, 5.0)),
            run("b", 1.0, 50.0, components_json=None, provenance="estimated"),
            {**run("c", 1.0, 1e6, components_json=parts(1e6, 0, 0)), "status": "failed"},
        ]
    )
    shares = energy_shares(runs)
    assert shares["total_j"] == pytest.approx(250.0)  # psys and the failed run left out
    assert shares["by_provenance"] == pytest.approx({"measured": 0.64, "estimated": 0.36})
    assert shares["by_component"]["gpu"]["share"] == pytest.approx(160 / 250)
    assert shares["by_component"]["total"]["by_provenance"] == pytest.approx({"estimated": 0.2})
    assert describe_shares(shares) == (
        "64.0 % measured by GPU counters, 36.0 % estimated (CPU 12.0 %, RAM 4.0 %, whole-run "
        "totals 20.0 %)"
    )


def test_phase_times_by_hand():
    phases = {"phase_launch_s": 2.0, "phase_setup_s": 1.0, "phase_data_s": 0.5,
              "phase_warmup_s": 1.5, "phase_budget_s": 10.0, "phase_eval_s": 1.0,
              "phase_teardown_s": 0.0}  # fmt: skip
    runs = pd.DataFrame(
        [
            run("a", 10.0, 1.0, **phases),
            run("a", 12.0, 1.0, **{**phases, "phase_budget_s": 12.0}),
            {**run("a", 1.0, 1.0, **{**phases, "phase_budget_s": 2.0}), "status": "failed"},
            run("a", 1.0, 1.0),  # stored before phases were recorded
        ]
    )
    t = phase_times(runs)
    assert t["runs"] == 3 and t["total_s"] == pytest.approx(3 * 6.0 + 24.0)
    assert t["budget_share"] == pytest.approx(24.0 / 42.0)
    budget = next(p for p in t["phases"] if p["phase"] == "budget")
    assert budget["total_s"] == 24.0 and budget["median_s"] == 10.0
    assert [p["phase"] for p in t["phases"]][0] == "launch"
    assert phase_times(runs.drop(columns=[c for c in runs if c.startswith("phase_")])) is None


@pytest.mark.slow
def test_report_opens_with_the_finding_and_tells_provenance_by_share(tmp_path):
    runs = two_configs()
    runs["components_json"] = [parts(0.96 * e, 0.03 * e, 0.01 * e) for e in runs["energy_total_j"]]
    runs["provenance"] = "estimated"  # weakest over the components
    runs["phase_budget_s"] = runs["duration_s"]
    runs["phase_launch_s"] = 5.0
    paths = write_report(runs, None, None, tmp_path / "r")
    md = paths.markdown.read_text()
    assert '<h1>wattlab report</h1>\n<p class="finding">bf16 used 3.98x' in paths.html.read_text()
    first = md.split("\n\n")[1]
    assert first.startswith("**bf16 used 3.98x less energy than the baseline fp32")
    assert "every energy figure in this report is estimated" not in md
    assert "96.0 % measured by GPU counters, 4.0 % estimated (CPU 3.0 %, RAM 1.0 %)" in md
    assert "## Where the sweep's time went" in md
    assert "| launch (process start, imports) | 20.00 |" in md  # 4 runs x 5 s
    assert "fewer than the 6 ok runs" in md
    plain = write_report(two_configs(), None, None, tmp_path / "p").markdown.read_text()
    assert "Where the sweep's time went" not in plain
