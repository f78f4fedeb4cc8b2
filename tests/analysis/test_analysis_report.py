"""Reports end to end on made-up runs tables shaped like the store's (schema.sql columns)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from wattlab.analysis.plots import figure_context
from wattlab.analysis.profile_report import write_profile_report
from wattlab.analysis.profiles import analyze_profile, load_zeus_profile
from wattlab.analysis.report import analyze_runs, write_report
from wattlab.errors import ConfigError, DataError

EVIL = "<script>alert(1)</script>"


def make_runs(
    *, reps: int = 2, codecarbon: bool = True, provenance: str = "measured", sweep: str = "study"
) -> pd.DataFrame:
    """1/2 GPUs x default/250 W, fp32, ``reps`` runs each, plus one failed run. Times and
    energies are fixed numbers (2 GPUs: 0.55x the time; 250 W: +1.2 % time, -7 % energy)."""
    rows, run_id = [], 0
    for gpus in (1, 2):
        for limit in (None, 250.0):
            label = f"resnet50 {gpus}xGPU fp32{f' {limit:g}W' if limit else ''} bs256"
            for rep in range(reps):
                run_id += 1
                time_s = (1000.0 if gpus == 1 else 550.0) * (1.012 if limit else 1.0) + rep
                energy = (300e3 if gpus == 1 else 310e3) * (0.93 if limit else 1.0) + 100 * rep
                parts = {f"gpu:{i}": {"energy_j": 0.8 * energy / gpus, "provenance": provenance,
                                      "uncertainty_j": 1.0, "in_total": True}
                         for i in range(gpus)}  # fmt: skip
                parts["cpu:package-0"] = {"energy_j": 0.15 * energy, "provenance": provenance}
                parts["ram:estimated"] = {"energy_j": 0.05 * energy, "provenance": "estimated"}
                row = {
                    "id": run_id, "sweep": sweep, "status": "ok", "error": None,
                    "config_hash": f"c{gpus}{limit}", "repetition": rep, "config_json": "{}",
                    "label": label, "model": "resnet50", "stem": "cifar", "dataset": "cifar10",
                    "precision": "fp32", "device": "cuda", "gpus": gpus, "world_size": gpus,
                    "batch_size": 256, "epochs": 5.0, "power_limit_w": limit or 300.0,
                    "power_limit_requested_w": limit, "samples": 250000,
                    "gpu_name": "NVIDIA A40", "cpu_model": "AMD EPYC 7543", "hostname": "node1",
                    "driver": "550.54", "duration_s": time_s, "wall_s": time_s + 30,
                    "energy_total_j": energy, "energy_gpu_j": 0.8 * energy,
                    "energy_cpu_j": 0.15 * energy, "energy_dram_j": 0.05 * energy,
                    "energy_other_j": 0.0, "provenance": provenance,
                    "components_json": json.dumps(parts), "co2e_kg": energy / 3.6e6 * 0.2,
                    "co2e_low_kg": energy / 3.6e6 * 0.1, "co2e_high_kg": energy / 3.6e6 * 0.3,
                    "intensity_kg_per_kwh": 0.2, "pue": 1.0, "accuracy": 0.92 + 0.001 * rep,
                }  # fmt: skip
                if codecarbon:
                    cc = energy * (1.04 + 0.01 * rep)
                    row["codecarbon_energy_j"] = cc
                    row["codecarbon_rel_error"] = (cc - energy) / energy
                    row["codecarbon_components_json"] = json.dumps(
                        {"gpu_j": 0.8 * energy, "cpu_j": 0.2 * energy, "ram_j": 0.05 * energy}
                    )
                rows.append(row)
    rows.append(
        {
            "id": run_id + 1,
            "sweep": sweep,
            "status": "failed",
            "config_hash": "c1None",
            "label": "resnet50 1xGPU fp32 bs256",
            "repetition": 7,
            "config_json": "{}",
            "error": "CUDA out of memory <b>at step 3</b>",
        }  # fmt: skip
    )
    return pd.DataFrame(rows)


def make_trace(runs: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for run_id in runs.loc[runs["status"] == "ok", "id"]:
        for k in range(20):
            rows.append((run_id, k * 0.5, "gpu:0", 200.0 + k))
            rows.append((run_id, k * 0.5, "cpu:package-0", 60.0))
    return pd.DataFrame(rows, columns=["run_id", "t_s", "component", "power_w"])


def make_windows(runs: pd.DataFrame) -> pd.DataFrame:
    ids = list(runs.loc[runs["status"] == "ok", "id"])
    return pd.DataFrame(
        {"run_id": ids, "name": "budget", "duration_s": 100.0, "short_window": 0}
    ).assign(short_window=[1] + [0] * (len(ids) - 1))


def external_refs(page: str) -> list[str]:
    """src/href attribute values that leave the file (http, https, protocol-relative)."""
    refs = re.findall(r"""(?:src|href)\s*=\s*["']([^"']*)["']""", page, flags=re.I)
    return [r for r in refs if re.match(r"(?i)(https?:)?//", r) or "http" in r.lower()]


@pytest.fixture(scope="module")
def full_report(tmp_path_factory):
    runs = make_runs()
    out = tmp_path_factory.mktemp("report")
    paths = write_report(runs, make_windows(runs), make_trace(runs), out, sweep="study")
    return paths, runs


@pytest.mark.slow
def test_report_files_and_embedded_figures(full_report):
    paths, _ = full_report
    names = sorted(p.name for p in paths.figures)
    assert names == sorted(
        f"{n}.{ext}"
        for n in ("energy_vs_time", "energy_components", "co2e", "power_traces",
                  "codecarbon_parity")
        for ext in ("png", "svg")
    )  # fmt: skip
    for path in paths.figures:
        data = path.read_bytes()
        assert data.startswith(b"\x89PNG") if path.suffix == ".png" else b"<svg" in data[:2000]
    page = paths.html.read_text()
    assert page.count('src="data:image/png;base64,') == 5
    assert external_refs(page) == []
    assert "<link" not in page and "<script" not in page
    md = paths.markdown.read_text()
    for fig in ("energy_vs_time.png", "energy_components.png", "co2e.png", "power_traces.png",
                "codecarbon_parity.png"):  # fmt: skip
        assert f"]({fig})" in md


@pytest.mark.slow
def test_report_tables_and_findings(full_report):
    paths, _ = full_report
    md = paths.markdown.read_text()
    # header: hardware, intensity with its range, PUE, provenance, runs, the failed run's error
    assert "NVIDIA A40" in md and "AMD EPYC 7543" in md
    assert "intensity 0.2 kgCO2e/kWh (sensitivity range 0.1-0.3), PUE 1" in md
    assert "Runs: 8 ok in 4 configuration(s), 1 failed." in md
    assert "CUDA out of memory &lt;b&gt;at step 3&lt;/b&gt;" in md
    assert "1 measurement window(s) were shorter" in md
    # 250 W on one GPU: time 1012.5/1000.5 - 1 = +1.2 %, energy 279050/300050 - 1 = -7.0 %
    row = next(line for line in md.splitlines() if line.startswith("| resnet50 1xGPU fp32 250W"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[-4:] == ["+1.2 %", "-7.0 %", "★", "✓"]
    assert "DRAM/RAM (kJ)" in md and "(est.)" in row  # RAM was an estimate
    base = next(line for line in md.splitlines() if "bs256 (baseline)" in line)
    assert "1,000 [1,000, 1,001]" in base  # time median and CI of 1000 and 1001 s
    assert "Power limit 250 W per GPU" in md and "in the operating region in 2 of 2" in md
    assert "speed-up 1.82x" in md  # 1000.5 / 550.5
    assert "| total | 8 | +4.5 % | 4.5 % |" in md  # CodeCarbon +4 % and +5 % per run


@pytest.mark.slow
def test_summary_json(full_report):
    paths, _ = full_report
    data = json.loads(paths.summary_json.read_text())
    assert data["baseline"]["label"] == "resnet50 1xGPU fp32 bs256"
    # medians (s, J): 1 GPU (1000.5, 300050), 1 GPU 250 W (1012.5, 279050),
    # 2 GPUs (550.5, 310050), 2 GPUs 250 W (557.1, 288350)
    # region, each against its own default limit: 279050/300050 - 1 = -7.0 % for +1.2 %
    # (1 GPU), 288350/310050 - 1 = -7.0 % for +1.2 % (2 GPUs)
    assert sorted(data["operating_region"]) == [
        "resnet50 1xGPU fp32 250W bs256",
        "resnet50 2xGPU fp32 250W bs256",
    ]
    # against the one baseline: 2 GPUs at 250 W: 288350/300050 - 1 = -3.9 % for -44 % time
    assert data["operating_region_vs_baseline"] == [
        "resnet50 1xGPU fp32 250W bs256",
        "resnet50 2xGPU fp32 250W bs256",
    ]
    # 1 GPU at the default limit is dominated by 2 GPUs at 250 W (faster, less energy)
    assert data["pareto"] == [
        "resnet50 2xGPU fp32 bs256",
        "resnet50 2xGPU fp32 250W bs256",
        "resnet50 1xGPU fp32 250W bs256",
    ]
    assert data["codecarbon"]["median"] == pytest.approx(0.045)
    conf = {c["label"]: c for c in data["configurations"]}["resnet50 1xGPU fp32 bs256"]
    assert conf["time_s"] == pytest.approx(1000.5) and conf["energy_j"] == pytest.approx(300050)
    assert set(conf) >= {"time_change", "energy_change", "time_s_ci", "energy_j_ci", "co2e_kg",
                         "co2e_low_kg", "co2e_high_kg", "provenance"}  # fmt: skip
    assert data["runs"]["failed"] == 1 and data["carbon"]["pue"] == [1.0]


@pytest.mark.slow
def test_escaping_single_configuration_estimated_without_codecarbon(tmp_path):
    runs = make_runs(reps=1, codecarbon=False, provenance="estimated", sweep=EVIL)
    runs = runs[runs["config_hash"] == "c1None"].copy()
    runs["label"] = f"resnet50 {EVIL} | $x$"
    paths = write_report(runs, None, None, tmp_path / "out", sweep=EVIL)
    page, md = paths.html.read_text(), paths.markdown.read_text()
    for text in (page, md):
        assert "<script>alert(1)" not in text and "<b>at step" not in text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "\\| $x$" in md  # the pipe cannot break the table
    assert "every energy figure in this report is estimated" in md
    assert "CodeCarbon: not measured" in md
    assert "Power traces: none recorded" in md
    assert page.count("data:image/png;base64,") == 3  # no trace, no CodeCarbon figure
    assert "energy: estimated (GPU, CPU, RAM)." in page  # nothing measured: the word alone
    assert "No configurations differ only in their GPU count." in md
    assert external_refs(page) == []


def test_errors_for_people(tmp_path):
    runs = make_runs()
    with pytest.raises(DataError, match=r"sweep 'other' has no runs.*'study'"):
        write_report(runs, None, None, tmp_path, sweep="other")
    failed = runs[runs["status"] == "failed"]
    with pytest.raises(DataError, match=r"no successful runs.*first error: CUDA out of memory"):
        write_report(failed, None, None, tmp_path)
    with pytest.raises(ConfigError, match="matches no configuration"):
        analyze_runs(runs, baseline="gpus=8")
    with pytest.raises(ConfigError, match="is a file"):
        (tmp_path / "f").write_text("x")
        write_report(runs, None, None, tmp_path / "f")


def test_analyze_runs_with_a_text_baseline():
    summary, data = analyze_runs(make_runs(), baseline="gpus=2,power_limit_w=300")
    assert data["baseline"]["label"] == "resnet50 2xGPU fp32 bs256"
    assert bool(summary.loc["c2None", "is_baseline"])


def test_figure_context_states_hardware_carbon_and_provenance():
    context = figure_context(make_runs(provenance="sampled"))
    # GPU and CPU from sampled power (0.8 + 0.15 of every run), the RAM estimated (0.05)
    assert context == (
        "GPU 1/2x NVIDIA A40; CPU AMD EPYC 7543; intensity 0.2 kgCO2e/kWh (range 0.1-0.3), "
        "PUE 1; energy: 95.0 % from sampled GPU and CPU power, 5.0 % estimated (RAM)."
    )


def test_profile_report(tmp_path):
    csv = tmp_path / "A40+resnet50+gpu0.csv"
    csv.write_text(
        "start_time,window_name,elapsed_time,gpu0_energy\n"
        "1,__GlobalPowerLimitOptimizer_300,24.011604165658355,6224.88599999249\n"
        "2,__GlobalPowerLimitOptimizer_250,24.163184974342585,5915.574000000954\n"
        "3,__GlobalPowerLimitOptimizer_200,25.185305630788207,5017.506999999285\n"
    )
    df = load_zeus_profile(csv)
    analysis = analyze_profile(df)
    paths = write_profile_report(df, analysis, tmp_path / "out")
    assert [p.name for p in paths.figures] == ["profile.png", "profile.svg"]
    page, md = paths.html.read_text(), paths.markdown.read_text()
    assert page.count("data:image/png;base64,") == 1 and external_refs(page) == []
    assert "| 250 | 24.16 | 5,916 | +0.6 % | -5.0 % | ★ | ✓ |" in md
    assert json.loads(paths.summary_json.read_text())["operating_region"] == [250.0]


def test_importing_analysis_does_not_import_matplotlib():
    code = (
        "import sys, wattlab.analysis, wattlab.analysis.report, wattlab.analysis.profiles; "
        "print('matplotlib' in sys.modules)"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def _spec(baseline: dict | None) -> dict:
    spec = {
        "name": "study",
        "base": {"model": "resnet50", "stem": "cifar", "epochs": 5, "batch_size": 256},
        "grid": {"gpus": [1, 2], "power_limit_w": [250, 300]},
    }
    if baseline is not None:
        spec["baseline"] = baseline
    return spec


def test_a_sweep_specs_baseline_is_the_reports_baseline_and_says_so():
    from wattlab.experiment.specs.trainer import SweepSpec

    runs = make_runs()
    # stored runs of another wattlab version: config hashes that the spec does not reproduce,
    # so the spec's baseline point is matched by its axes
    _, data = analyze_runs(runs, spec=_spec({"gpus": 2, "power_limit_w": 250}))
    assert data["baseline"]["label"] == "resnet50 2xGPU fp32 250W bs256"
    assert data["baseline"]["source"] == "the sweep spec's baseline"
    # runs whose hash is the spec's baseline point: matched by the hash
    spec = _spec({"gpus": 1, "power_limit_w": 250})
    wanted = SweepSpec.from_dict(spec).baseline_config_hash()
    runs.loc[runs["config_hash"] == "c1250.0", "config_hash"] = wanted
    _, data = analyze_runs(runs, spec=spec)
    assert data["baseline"]["config_hash"] == wanted
    # --baseline wins over the spec; a spec without one leaves the default
    _, data = analyze_runs(runs, baseline="gpus=2,power_limit_w=300", spec=spec)
    assert data["baseline"]["label"] == "resnet50 2xGPU fp32 bs256"
    assert data["baseline"]["source"] == "--baseline"
    _, data = analyze_runs(runs, spec=_spec(None))
    assert data["baseline"]["label"] == "resnet50 1xGPU fp32 bs256"
    assert data["baseline"]["source"].startswith("default")


def test_the_other_column_is_the_median_of_other_energy_not_a_residual_of_medians():
    from wattlab.analysis.plots import component_medians

    # medians of three runs, each with other = 0: the median total (61.79) is not the median
    # cpu (56.78) + the median ram (4.71); the 0.29 J between them is no component's energy
    summary = pd.DataFrame(
        {"energy_total_j": [61.79], "energy_gpu_j": [0.0], "energy_cpu_j": [56.78],
         "energy_dram_j": [4.71], "energy_other_j": [0.0]}, index=["c"],
    )  # fmt: skip
    assert component_medians(summary).loc["c", "other"] == 0.0
    older = summary.drop(columns="energy_other_j")  # tables without the column: the residual
    assert component_medians(older).loc["c", "other"] == pytest.approx(0.3)


@pytest.mark.slow
def test_report_paths_hold_the_summary_they_wrote(full_report):
    paths, _ = full_report  # `wattlab report` prints this summary; it reads no file back
    assert paths.summary == json.loads(paths.summary_json.read_text())
    assert paths.summary["baseline"]["label"] == "resnet50 1xGPU fp32 bs256"
