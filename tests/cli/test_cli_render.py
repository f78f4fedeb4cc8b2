"""The one line a sweep prints per run says what CodeCarbon was compared with."""

from __future__ import annotations

import json

from wattlab.cli.render import run_summary_line

ROW = {
    "status": "ok", "label": "m 1xCPU fp32 bs16", "duration_s": 8.1, "energy_total_j": 61.8,
    "provenance": "estimated", "co2e_kg": 3.4e-6, "co2e_low_kg": 1.7e-6, "co2e_high_kg": 5.1e-6,
    "codecarbon_rel_error": 2.69,
}  # fmt: skip


def test_codecarbon_against_an_estimate_says_so():
    parts = {"cpu:estimated": {"energy_j": 61.8, "provenance": "estimated"}}
    line = run_summary_line({**ROW, "components_json": parts})
    assert "CodeCarbon +269.0% vs our estimate" in line


def test_codecarbon_against_a_partly_measured_run_is_a_comparison_with_ours():
    parts = {
        "gpu:0": {"energy_j": 60.0, "provenance": "measured"},
        "cpu:estimated": {"energy_j": 1.8, "provenance": "estimated"},
    }
    line = run_summary_line({**ROW, "components_json": json.dumps(parts)})
    assert "CodeCarbon +269.0%" in line and "estimate" not in line.split("CodeCarbon")[1]


def test_the_run_table_says_whether_steps_interval_held(capsys):
    from wattlab.cli.render import print_run_row

    row = {**ROW, "samples": 1000, "energy_uncertainty_j": 1.0, "pue": 1.0,
           "intensity_kg_per_kwh": 0.2, "projected_energy_j": 60.0, "projection_error": -0.029,
           "projected_energy_low_j": 55.0, "projected_energy_high_j": 64.0}  # fmt: skip
    print_run_row(row)
    assert "90 % interval 55.0 J to 64.0 J, held" in capsys.readouterr().out
    print_run_row({**row, "projected_energy_high_j": 61.0})
    assert "90 % interval 55.0 J to 61.0 J, missed" in capsys.readouterr().out
    print_run_row({**row, "projected_energy_low_j": None, "projected_energy_high_j": None})
    out = capsys.readouterr().out
    assert "-2.90% vs measured" in out and "interval" not in out


def test_the_report_table_leaves_co2e_empty_when_runs_carry_none() -> None:
    from wattlab.cli.report_cmd import _co2e_cell

    assert _co2e_cell({"co2e_kg": None, "co2e_low_kg": None, "co2e_high_kg": None}) == ""
    assert _co2e_cell({"co2e_kg": float("nan"), "co2e_low_kg": 1.0, "co2e_high_kg": 2.0}) == ""
    cell = _co2e_cell({"co2e_kg": 0.002, "co2e_low_kg": 0.001, "co2e_high_kg": 0.003})
    assert cell.startswith("2") and "[" in cell and "–" in cell


def test_lines_say_provenance_by_share_in_the_reports_words(capsys) -> None:
    """A run 96.2 % read from the GPU's counter is not "estimated", in any line that prints it."""
    from wattlab.cli.render import print_measurement
    from wattlab.meters.base import Provenance
    from wattlab.monitor import Measurement

    parts = {
        "gpu:0": {"energy_j": 962.0, "provenance": "measured"},
        "cpu:estimated": {"energy_j": 30.0, "provenance": "estimated"},
        "ram:estimated": {"energy_j": 8.0, "provenance": "estimated"},
    }
    line = run_summary_line({**ROW, "energy_total_j": 1000.0, "components_json": parts})
    assert "1.00 kJ (96.2 % measured by GPU counters, 3.8 % estimated (CPU, RAM))," in line
    estimated = {"cpu:estimated": {"energy_j": 61.8, "provenance": "estimated"}}
    assert "61.8 J (estimated (CPU))," in run_summary_line({**ROW, "components_json": estimated})
    m = Measurement(
        name="command",
        started_at="2026-01-01T00:00:00+00:00",
        duration_s=10.0,
        energy_j={"gpu:0": 962.0, "cpu:estimated": 38.0, "psys:0": 5000.0},
        provenance={
            "gpu:0": Provenance.MEASURED,
            "cpu:estimated": Provenance.ESTIMATED,
            "psys:0": Provenance.MEASURED,
        },
        uncertainty_j={},
        in_total={"psys:0": False},  # overlaps the others: not in the total, nor in the shares
    )
    print_measurement(m, "wattlab monitor: x")
    out = capsys.readouterr().out
    assert "(96.2 % measured by GPU counters, 3.8 % estimated (CPU))" in out
    assert "96.2 % measured, 3.8 % estimated" in out  # the table's total row
