"""Property tests: generated run tables (equal and unequal image counts, 1 to 8 repetitions,
every provenance mix, failed runs, one configuration, ties, NaN and infinite energies, accuracy
at chance), the report built from each, and every statement checked against the table it came
from. The expected values are computed here from the generated runs, not by the report's code.
"""

from __future__ import annotations

import html
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from scipy.stats import binom

from wattlab.analysis.plots import energy_time_legend
from wattlab.analysis.report import analyze_runs, report_blocks
from wattlab.analysis.report_markdown import render_markdown
from wattlab.analysis.statement import energy_statement
from wattlab.errors import DataError

PROVENANCES = ("measured", "sampled", "estimated")
# a component of a run: (name in components_json, the kind the report names, provenance)
COMPONENT_CHOICES = (
    ("gpu:0", "GPU", "measured"),
    ("gpu:0", "GPU", "sampled"),
    ("gpu:0", "GPU", "estimated"),
    ("cpu:package-0", "CPU", "measured"),
    ("cpu:estimated", "CPU", "estimated"),
    ("dram:package-0", "DRAM", "measured"),
    ("ram:estimated", "RAM", "estimated"),
)
CHANCE_IMAGES = 512  # every generated run's test set; 10 classes (the synthetic dataset)
PROPERTY_SETTINGS = settings(
    max_examples=int(os.environ.get("WATTLAB_PROPERTY_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@dataclass
class Generated:
    """A generated runs table and what the test knows about it."""

    runs: pd.DataFrame
    # per usable ok run: config label -> list of (energy_j, time_s, images or None)
    usable: dict[str, list[tuple[float, float, int | None]]] = field(default_factory=dict)
    # joules by provenance over the usable ok runs
    joules: dict[str, float] = field(default_factory=dict)
    left_out: list[int] = field(default_factory=list)
    failed: int = 0
    # per usable ok run, in usable's order: config label -> list of (tokens, accuracy)
    work: dict[str, list[tuple[int | None, float | None]]] = field(default_factory=dict)


def _split(total: float, weights: list[float]) -> list[float]:
    s = sum(weights)
    return [total * w / s for w in weights]


@st.composite
def run_tables(draw: st.DrawFn) -> Generated:
    n_configs = draw(st.integers(1, 4))
    image_mode = draw(st.sampled_from(["same", "per-config", "per-run", "missing"]))
    ties = draw(st.booleans())  # energies drawn from a tiny set: equal medians, equal runs
    common_images = draw(st.integers(1, 5000))
    token_mode = draw(st.sampled_from(["none", "all", "some"]))  # a text model's tokens
    rows: list[dict] = []
    gen = Generated(runs=pd.DataFrame())
    run_id = 0
    for c in range(n_configs):
        label = f"cfg{c} bs{2 ** (c + 4)}"
        reps = draw(st.integers(1, 8))
        config_images = draw(st.integers(1, 5000)) if image_mode != "same" else common_images
        accuracy_level = draw(st.sampled_from([None, "chance", "learned"]))
        for rep in range(reps):
            run_id += 1
            if ties:
                energy = float(draw(st.sampled_from([100.0, 100.0, 250.0])))
            else:
                energy = draw(st.floats(0.5, 1e6, allow_nan=False, allow_infinity=False))
            time_s = draw(st.floats(0.01, 1e4, allow_nan=False, allow_infinity=False))
            images: int | None = config_images
            if image_mode == "per-run":
                images = draw(st.integers(1, 5000))
            elif image_mode == "missing" and draw(st.booleans()):
                images = None
            broken = draw(st.sampled_from([None] * 8 + ["nan", "inf", "null", "negative"]))
            picks = draw(
                st.lists(
                    st.sampled_from(COMPONENT_CHOICES),
                    min_size=0,
                    max_size=4,
                    unique_by=lambda x: x[0],
                )
            )
            if picks:
                weights = [draw(st.floats(0.01, 1.0)) for _ in picks]
                parts = _split(energy, weights)
                components = {
                    name: {"energy_j": part, "provenance": prov, "in_total": True}
                    for (name, _, prov), part in zip(picks, parts, strict=True)
                }
                components["psys:0"] = {
                    "energy_j": 1e9,
                    "provenance": "measured",
                    "in_total": False,
                }
                weakest = max((p for _, _, p in picks), key=PROVENANCES.index)
                run_joules = {}
                for (_, _, prov), part in zip(picks, parts, strict=True):
                    run_joules[prov] = run_joules.get(prov, 0.0) + part
                components_json = json.dumps(components)
            else:
                weakest = draw(st.sampled_from(PROVENANCES))
                run_joules = {weakest: energy}
                components_json = None
            accuracy = None
            if accuracy_level == "chance":
                accuracy = draw(st.floats(0.05, 0.13))
            elif accuracy_level == "learned":
                accuracy = draw(st.floats(0.5, 1.0))
            tokens: int | None = None
            if token_mode == "all" or (token_mode == "some" and draw(st.booleans())):
                tokens = draw(st.integers(1, 10**8))
            stored_energy: object = energy
            if broken == "nan":
                stored_energy = math.nan
            elif broken == "inf":
                stored_energy = math.inf
            elif broken == "null":
                stored_energy = None
            elif broken == "negative":
                stored_energy = -energy
            rows.append(
                {
                    "id": run_id, "sweep": "gen", "status": "ok", "error": None,
                    "config_hash": f"h{c}", "repetition": rep, "config_json": "{}",
                    "label": label, "model": "m", "stem": "cifar", "dataset": "synthetic",
                    "precision": "fp32", "device": "cuda", "gpus": 1, "world_size": 1,
                    "batch_size": 2 ** (c + 4), "power_limit_w": 300.0,
                    "power_limit_requested_w": None, "samples": images,
                    "duration_s": time_s, "energy_total_j": stored_energy,
                    "energy_gpu_j": energy * 0.5, "energy_cpu_j": energy * 0.3,
                    "energy_dram_j": energy * 0.2, "energy_other_j": 0.0,
                    "provenance": weakest, "components_json": components_json,
                    "co2e_kg": energy / 3.6e6 * 0.2, "co2e_low_kg": energy / 3.6e6 * 0.1,
                    "co2e_high_kg": energy / 3.6e6 * 0.3, "intensity_kg_per_kwh": 0.2,
                    "pue": 1.0, "accuracy": accuracy, "test_size": CHANCE_IMAGES,
                    "gpu_name": "NVIDIA H200", "driver": "580.1", "cpu_model": "Xeon",
                    "hostname": "node", "energy_uncertainty_j": energy * 0.01,
                    "tokens": tokens,
                }
            )  # fmt: skip
            if broken is None:
                gen.usable.setdefault(label, []).append((energy, time_s, images))
                gen.work.setdefault(label, []).append((tokens, accuracy))
                for prov, joules in run_joules.items():
                    gen.joules[prov] = gen.joules.get(prov, 0.0) + joules
            else:
                gen.left_out.append(run_id)
        for _ in range(draw(st.integers(0, 1))):  # a failed run of this configuration
            run_id += 1
            gen.failed += 1
            rows.append(
                {"id": run_id, "sweep": "gen", "status": "failed", "error": "CUDA out of memory",
                 "config_hash": f"h{c}", "repetition": reps, "config_json": "{}", "label": label}
            )  # fmt: skip
    gen.runs = pd.DataFrame(rows)
    return gen


def build(gen: Generated) -> tuple[pd.DataFrame, dict, str]:
    summary, data = analyze_runs(gen.runs)
    usable = gen.runs[~gen.runs["id"].isin(gen.left_out)]
    blocks = report_blocks(usable, summary, data, None, [])
    md = render_markdown("wattlab report", blocks, Path("."))
    return summary, data, html.unescape(md).replace("\\", "")  # read as text, not Markdown


def _percent(share: float) -> str:
    """The percentage the report must print for a share (its rule, restated here)."""
    if share >= 1:
        return "100 %"
    text = f"{share * 100:.1f} %"
    return {"0.0 %": "< 0.1 %", "100.0 %": "> 99.9 %"}.get(text, text)


def _coverage(n: int) -> float:
    return 1 - 2.0 ** (1 - n)  # the min-max range of n continuous values holds the median


def _images(runs: list[tuple[float, float, int | None]]) -> set[int | None]:
    return {images for _, _, images in runs}


# --------------------------------------------------------------------------- the properties


@PROPERTY_SETTINGS
@given(run_tables())
def test_every_statement_of_the_report_is_true_of_its_runs(gen: Generated) -> None:
    if not gen.usable:  # nothing usable: one clear error, never a traceback
        with pytest.raises(DataError, match="no (usable|successful) runs"):
            analyze_runs(gen.runs)
        return
    summary, data, md = build(gen)
    json.dumps(data, allow_nan=False)  # strict JSON whatever the energies were

    # runs: every usable ok run counted, the broken ones named and left out, failures counted
    assert data["runs"]["ok"] == sum(len(v) for v in gen.usable.values())
    assert data["runs"]["failed"] == gen.failed
    assert sorted(r["run_id"] for r in data["runs"]["left_out"]) == sorted(gen.left_out)
    for run_id in gen.left_out:
        assert f"run {run_id} (" in md
    for label, runs in gen.usable.items():
        assert int(summary.set_index("label").loc[label, "n"]) == len(runs)

    _check_finding(gen, data["finding"])
    _check_intervals(gen, md)
    _check_legend(gen, energy_time_legend(summary))
    _check_provenance(gen, md)
    _check_chance(gen, summary, md)
    _check_progress_lines(gen)
    _check_against_baseline(gen, data, md)
    if "Fastest for the same" in md:  # said only when every run saw the same image count
        counts = set().union(*(_images(r) for r in gen.usable.values()))
        assert len(counts) == 1 and None not in counts


def _check_finding(gen: Generated, finding: dict) -> None:
    sentence = finding["sentence"]
    if "energy_ratio" not in finding:
        assert len(gen.usable) == 1
        return
    best, ref = gen.usable[finding["best"]], gen.usable[finding["reference"]]
    per_image = all(None not in _images(r) for r in gen.usable.values())

    def unit_energy(runs: list[tuple[float, float, int | None]]) -> float:
        if not per_image:
            return float(np.median([x[0] for x in runs]))
        return float(np.median([x[0] / x[2] for x in runs]))  # type: ignore[operator]

    expected = unit_energy(ref) / unit_energy(best)
    assert finding["energy_ratio"] == pytest.approx(expected, rel=1e-9)
    # the best used the least energy per unit of every configuration
    assert unit_energy(best) <= min(unit_energy(r) for r in gen.usable.values()) * (1 + 1e-12)
    same = _images(best) == _images(ref) and len(_images(best)) == 1 and None not in _images(best)
    assert ("for the same" in sentence) == (same and per_image and "less energy than" in sentence)
    assert finding["same_images"] == (same and per_image)
    if per_image and not same:  # per image, with both counts stated

        def count(runs: list) -> str:
            lo, hi = min(x[2] for x in runs), max(x[2] for x in runs)
            return f"{lo:,}" if lo == hi else f"{lo:,}–{hi:,}"

        assert f"{count(best)} vs {count(ref)} images per run" in sentence
        assert "per image" in sentence
    if not per_image:
        assert "images" not in sentence.replace("image counts not recorded", "")


def _check_intervals(gen: Generated, md: str) -> None:
    ns = sorted({len(r) for r in gen.usable.values()})
    note = next(line for line in md.splitlines() if line.startswith("*Medians over the ok runs"))
    for n in ns:
        if n == 1:
            assert "1 run, no interval" in note
        elif n < 6:
            words = f"min–max of {n} runs, {_coverage(n) * 100:.1f}".rstrip("0").rstrip(".")
            assert words + " % coverage" in note, (n, note)
        else:  # 6 or more runs reach 95 %: k from the binomial, coverage >= 0.95
            assert _coverage(n) >= 0.95
            assert f"95 % CI of {n} runs" in note
    # "95 % CI" is never said of fewer than 6 runs, anywhere in the report
    for found in re.findall(r"95 % CI of (\d+) runs", md):
        assert int(found) >= 6
    # the coverage stated next to any min-max range is that range's
    for n, cov in re.findall(r"min–max of (\d+) runs, ([\d.]+) % coverage", md):
        assert float(cov) == pytest.approx(round(_coverage(int(n)) * 100, 1), abs=0.051)


def _check_legend(gen: Generated, legend: str) -> None:
    ns = sorted({len(r) for r in gen.usable.values()})
    assert ("95 % CI" in legend) == any(n >= 6 for n in ns)
    if legend == "median, 95 % CI":
        assert all(n >= 6 for n in ns)
    for n in ns:
        if 2 <= n < 6:
            words = f"min–max of {n} runs, {_coverage(n) * 100:.1f}".rstrip("0").rstrip(".")
            assert words + " % coverage" in legend, (n, legend)
        elif n == 1:
            assert "no interval for 1 run" in legend or legend == "median of 1 run each, no bars"
    if legend.startswith("median of"):
        assert ns == [1]


def _check_provenance(gen: Generated, md: str) -> None:
    total = sum(gen.joules.values())
    line = next(x for x in md.splitlines() if x.startswith("- Energy provenance:"))
    shares = {p: j / total for p, j in gen.joules.items() if j > 0} if total > 0 else {}
    if len(shares) == 1:
        (only,) = shares
        word = {"measured": "measured by", "sampled": "from sampled", "estimated": "estimated"}
        assert line.startswith(f"- Energy provenance: {word[only]}"), line
        assert "%" not in line.split("(")[0]  # no share: it is all of the energy
    else:
        for prov, share in shares.items():
            word = {"measured": "measured", "sampled": "from sampled", "estimated": "estimated"}
            assert f"{_percent(share)} {word[prov]}" in line, (prov, share, line)
    measured = shares.get("measured", 0) + shares.get("sampled", 0)
    assert ("every energy figure in this report is estimated" in md) == (measured == 0)
    if measured == 0:
        assert "measured" not in line and "sampled" not in line


def _check_against_baseline(gen: Generated, data: dict, md: str) -> None:
    """With different image counts, the comparison with the baseline is per image, and each
    listed change is the change of the per-image medians."""
    counts = [_images(r) for r in gen.usable.values()]
    known = all(None not in c for c in counts)
    differ = known and len(set().union(*counts)) > 1
    base = data["baseline"]["label"]
    assert (f"Against the baseline {base} per image" in md) == differ
    if not differ:
        return

    def per_image(runs: list) -> tuple[float, float]:
        return (
            float(np.median([e / n for e, _, n in runs])),
            float(np.median([t / n for _, t, n in runs])),
        )

    base_e, base_t = per_image(gen.usable[base])
    for label in data["operating_region_vs_baseline"]:
        e, t = per_image(gen.usable[label])
        energy, time = (e / base_e - 1) * 100, (t / base_t - 1) * 100
        said = f"{label} (energy {energy:+.1f} %, time {time:+.1f} %)"
        assert said in md, said


def _check_progress_lines(gen: Generated) -> None:
    """`sweep`'s line per run says the run's own provenance by share, in the report's words."""
    from wattlab.cli.render import run_summary_line

    for row in gen.runs[~gen.runs["id"].isin(gen.left_out)].to_dict("records"):
        if row["status"] != "ok":
            continue
        cell = row["components_json"]
        comps = json.loads(cell) if isinstance(cell, str) else None
        joules: dict[str, float] = {}
        if comps:
            for info in comps.values():
                if info["in_total"]:
                    joules[info["provenance"]] = (
                        joules.get(info["provenance"], 0) + info["energy_j"]
                    )
        else:
            joules[row["provenance"]] = row["energy_total_j"]
        line = run_summary_line(row)
        total = sum(joules.values())
        if len(joules) > 1:
            for prov, j in joules.items():
                assert (
                    f"{_percent(j / total)} {prov if prov != 'sampled' else 'from sampled'}" in line
                )
        else:
            assert "%" not in line.split("(", 1)[1].split(")")[0]  # all of it: no share
        assert row["provenance"] in line  # the weakest is named (with its share when mixed)


def _check_chance(gen: Generated, summary: pd.DataFrame, md: str) -> None:
    # the lowest accuracy guessing among 10 classes reaches on 512 images with P <= 0.001
    k = int(binom.isf(0.001, CHANCE_IMAGES, 0.1)) + 1
    while binom.sf(k - 2, CHANCE_IMAGES, 0.1) <= 0.001:
        k -= 1
    threshold = k / CHANCE_IMAGES
    accuracies = [a for a in summary["accuracy"] if a is not None and math.isfinite(a)]
    none_beyond = bool(accuracies) and all(a < threshold for a in accuracies)
    assert ("No configuration learned beyond chance" in md) == none_beyond
    for label, acc in zip(summary["label"], summary["accuracy"], strict=True):
        row = next(x for x in md.splitlines() if x.startswith(f"| {label}"))
        if acc is not None and math.isfinite(acc):
            assert ("(chance)" in row) == (acc < threshold), (acc, threshold, row)


def test_the_chance_threshold_is_the_binomial_bound() -> None:
    from wattlab.analysis.chance import chance_threshold

    for classes, n in ((10, 512), (10, 10_000), (2, 100), (100, 50)):
        t = chance_threshold(classes, n)
        k = round(t * n)
        assert binom.sf(k - 1, n, 1 / classes) <= 0.001 < binom.sf(k - 2, n, 1 / classes)
    assert chance_threshold(10, 2) == math.inf  # two images: even a perfect score may be luck


@PROPERTY_SETTINGS
@given(run_tables(), st.sampled_from([None, "FRA", "USA"]))
def test_the_statement_is_true_of_its_runs(gen: Generated, region: str | None) -> None:
    assume(gen.usable)
    from wattlab.monitor.carbon import settings_from_flags

    carbon = settings_from_flags(region=region) if region else None
    stated = energy_statement(gen.runs, carbon=carbon, region=region)
    facts = stated.facts
    energies = [e for runs in gen.usable.values() for e, _, _ in runs]
    if len(gen.usable) == 1:
        assert facts["scope"] == "configuration"
        assert facts["energy_j"] == pytest.approx(float(np.median(energies)))
        n = len(energies)
        if n >= 2:
            assert (
                f"min–max of {n} runs" in stated.paragraph
                or f"95 % CI of {n} runs" in stated.paragraph
            )
        if n >= 6:
            assert f"95 % CI of {n} runs" in stated.paragraph
    else:
        assert facts["scope"] == "selection"
        assert facts["energy_j"] == pytest.approx(sum(energies))
        assert len(stated.table) == 2 + len(gen.usable)
    total = sum(gen.joules.values())
    measured = (gen.joules.get("measured", 0) + gen.joules.get("sampled", 0)) / total
    assert facts["measured_share"] == pytest.approx(measured)
    assert ("All of it is estimated, not measured" in stated.paragraph) == (measured == 0)
    intensity, pue = (carbon.intensity_kg_per_kwh, carbon.pue) if carbon else (0.2, 1.0)
    assert facts["co2e_kg"] == pytest.approx(facts["energy_j"] / 3.6e6 * pue * intensity)
    card = yaml.safe_load(stated.model_card)["co2_eq_emissions"]
    assert card["emissions"] == pytest.approx(facts["co2e_kg"] * 1e3, rel=1e-3)
    assert card["hardware_used"] == "1 x NVIDIA H200"
    assert ("geographical_location" in card) == (region is not None)
    if region == "FRA":
        assert card["geographical_location"] == "France" and "France's 20" in stated.paragraph
    for run_id in gen.left_out:
        assert str(run_id) in stated.paragraph
    # the rates per unit of work, and the CO2e at the reference intensity (issue 51)
    p = stated.paragraph
    many = len(gen.usable) > 1
    energy = facts["energy_j"]  # checked above against the generated energies
    co2e = energy / 3.6e6 * pue * intensity
    images = [i for runs in gen.usable.values() for _, _, i in runs]
    work = [w for runs in gen.work.values() for w in runs]
    expected: dict[str, float] = {}
    if all(i is not None for i in images):
        expected["sample"] = float(sum(images) if many else np.median(images))
    if all(t is not None for t, _ in work):
        tokens = [t for t, _ in work]
        expected["token"] = float(sum(tokens) if many else np.median(tokens))
    if not many and all(a is not None for _, a in work):
        expected["accuracy_point"] = float(np.median([a for _, a in work])) * 100
    rates = facts["work_rates"]
    assert set(rates) == set(expected)
    assert set(facts["work_missing"]) == {"sample", "token", "accuracy_point"} - set(expected)
    for unit, amount in expected.items():
        assert rates[unit]["amount"] == pytest.approx(amount)
        assert rates[unit]["energy_j"] == pytest.approx(energy / amount)
        assert rates[unit]["co2e_kg"] == pytest.approx(co2e / amount)
        assert rates[unit]["co2e_at_reference_kg"] == pytest.approx(energy / 3.6e6 * 0.2 / amount)
    assert ("per training sample (" in p) == ("sample" in expected)
    assert ("per training token (" in p) == ("token" in expected)
    assert ("per point of test accuracy (" in p) == ("accuracy_point" in expected)
    reference = facts["reference_carbon"]
    assert reference["intensity_kg_per_kwh"] == 0.2 and reference["pue"] == 1.0
    assert reference["co2e_kg"] == pytest.approx(energy / 3.6e6 * 0.2)
    # priced at a country's grid, the reference CO2e stands beside the local one; priced at the
    # stored default, that is the reference intensity, and the statement says so
    at_reference = region is None
    assert ("That CO2e is at wattlab's reference intensity" in p) == at_reference
    assert ("At the reference intensity of 0.2 kgCO2e/kWh and a PUE of 1" in p) != at_reference
    # the model card: the kWh the CO2e was priced from, and its measured share
    energy_card = yaml.safe_load(stated.model_card)["energy_consumption"]
    assert energy_card["energy_kwh"] == pytest.approx(energy / 3.6e6, rel=1e-3)
    assert energy_card["measured_share"] == pytest.approx(measured, abs=1e-4)
    assert ("energy_interval_kwh" in energy_card) == (not many and len(energies) >= 2)
    # the EU GPAI form of the same runs: the same energy; the budget's time (no windows given)
    from wattlab.analysis.eu_gpai import eu_gpai_form

    form = eu_gpai_form(stated, gen.runs)
    gpai = form.facts
    assert gpai["energy_kwh"] == pytest.approx(energy / 3.6e6)
    times = [t for runs in gen.usable.values() for _, t, _ in runs]
    expected_s = sum(times) if many else float(np.median(times))
    assert gpai["training_time_s"] == pytest.approx(expected_s)
    assert gpai["gpu_hours"] == pytest.approx(expected_s / 3600)  # one GPU a run
    assert "training_flop" not in gpai  # no run stored its FLOPs per sample
    amount = next(i.answer for i in form.items if i.question.endswith("amount"))
    if many:
        assert "no interval for a sum of configurations" in amount
    elif len(energies) >= 2:
        assert "interval " in amount and "coverage of the median" in amount
    assert any("failed run" in n for n in form.notes) == (gen.failed > 0)
    assert any("without a usable energy" in n for n in form.notes) == bool(gen.left_out)
    json.dumps(gpai, allow_nan=False)


@PROPERTY_SETTINGS
@given(run_tables())
def test_summary_json_gives_each_configurations_rates_per_unit_of_work(gen: Generated) -> None:
    assume(gen.usable)
    _, data, _ = build(gen)
    assert data["reference_carbon"]["intensity_kg_per_kwh"] == 0.2
    by_label = {c["label"]: c for c in data["configurations"]}
    for label, runs in gen.usable.items():
        config = by_label[label]
        energies = np.array([e for e, _, _ in runs])
        images = [i for _, _, i in runs]
        tokens = [t for t, _ in gen.work[label]]
        accuracies = [a for _, a in gen.work[label]]
        co2e = energies / 3.6e6 * 0.2  # the generated rows' stored CO2e
        if all(i is not None for i in images):
            assert config["co2e_per_sample_kg"] == pytest.approx(np.median(co2e / images))
        else:  # one run without its count: unknown, never a rate of the others
            assert config["co2e_per_sample_kg"] is None
        if all(t is not None for t in tokens):
            assert config["energy_per_token_j"] == pytest.approx(np.median(energies / tokens))
            assert config["co2e_per_token_kg"] == pytest.approx(np.median(co2e / tokens))
        else:
            assert config["energy_per_token_j"] is None and config["co2e_per_token_kg"] is None
        if all(a is not None for a in accuracies):
            points = float(np.median(accuracies)) * 100
            assert config["energy_per_accuracy_point_j"] == pytest.approx(
                np.median(energies) / points
            )
        else:
            assert config["energy_per_accuracy_point_j"] is None
        assert config["co2e_at_reference_kg"] == pytest.approx(np.median(energies) / 3.6e6 * 0.2)
