"""`wattlab advise`'s library: knobs, ranking within a limit, regret scoring, the advisor and
advice from a stored run. Hand-made tables where the right answer is known; PRE stands in as a
small known law (``KnownLaw``) so that what the advisor does with predictions is checked."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tests.estimate.test_estimate_pre import fake_models  # noqa: F401 - the fixture
from wattlab.errors import ConfigError, DataError
from wattlab.estimate.advise.advisor import (
    CAP_FRACTIONS,
    GPU_SHARE,
    MIN_PREDICTED_SAVING,
    Correction,
    advise,
)
from wattlab.estimate.advise.evaluation import reachable, score_pick, summarise
from wattlab.estimate.advise.knobs import DEFAULT_KNOBS, WHY_NOT, knob_notes, parse_allow
from wattlab.estimate.advise.ranking import Limit, Option, Setting, advice_sentence, rank
from wattlab.estimate.advise.stored import advise_from_run


def option(precision: str, energy: float, time: float, batch: int = 256) -> Option:
    return Option(
        Setting(precision, batch, 1), energy, time, energy * 0.9, energy * 1.1, time, time
    )


NOW = Setting("fp32", 256, 1)
TABLE = [
    option("fp32", 100.0, 10.0),  # the current one
    option("tf32", 60.0, 10.4),  # 4 % slower, 40 % less energy
    option("amp-bf16", 50.0, 12.0),  # 20 % slower, least energy
    option("amp-fp16", 80.0, 8.0),  # fastest
]


# --- ranking -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("limit", "first"),
    [
        (Limit(), "amp-bf16"),  # no limit: least energy
        (Limit(max_slowdown=0.05), "tf32"),  # 10.4 s <= 10.5 s
        (Limit(max_slowdown=0.0), "amp-fp16"),  # only the faster ones
        (Limit(max_slowdown=0.20), "amp-bf16"),  # 12.0 s is exactly 20 % slower
        (Limit(deadline_s=9.0), "amp-fp16"),
    ],
)
def test_rank_gives_the_least_energy_within_the_limit(limit: Limit, first: str) -> None:
    ranked = rank(TABLE, NOW, limit)
    assert ranked[0].setting.precision == first
    assert [r.rank for r in ranked] == [1, 2, 3, 4]
    meeting = [r for r in ranked if r.meets_limit]
    assert [r.energy_j for r in meeting] == sorted(r.energy_j for r in meeting)
    assert all(r.meets_limit for r in ranked[: len(meeting)])  # the rest come after


def test_rank_states_saving_slowdown_and_changes_against_the_current() -> None:
    ranked = {r.setting.precision: r for r in rank(TABLE, NOW, Limit())}
    assert ranked["fp32"].is_current and ranked["fp32"].saving == 0.0
    assert ranked["amp-bf16"].saving == pytest.approx(0.5)
    assert ranked["amp-bf16"].saving_low == pytest.approx(1 - 55 / 100)
    assert ranked["amp-bf16"].saving_high == pytest.approx(1 - 45 / 100)
    assert ranked["amp-bf16"].slowdown == pytest.approx(0.2)
    assert ranked["amp-bf16"].changes == "precision fp32 -> amp-bf16"
    assert ranked["fp32"].changes == "no change"


def test_a_deadline_nothing_meets_names_the_fastest() -> None:
    with pytest.raises(ConfigError, match=r"deadline of 5 s: the fastest, precision fp32 -> "
                       r"amp-fp16, is predicted to take 8 s"):  # fmt: skip
        rank(TABLE, NOW, Limit(deadline_s=5.0))


def test_both_limits_or_a_negative_one_are_refused() -> None:
    with pytest.raises(ConfigError, match="not both"):
        Limit(max_slowdown=0.1, deadline_s=10.0)
    with pytest.raises(ConfigError, match=">= 0"):
        Limit(max_slowdown=-0.1)


def test_a_small_predicted_saving_does_not_lead() -> None:
    table = [option("fp32", 100.0, 10.0), option("tf32", 97.0, 9.0)]  # 3 % less
    ranked = rank(table, NOW, Limit(), min_saving=0.05)
    assert ranked[0].is_current and ranked[1].setting.precision == "tf32"
    assert advice_sentence(ranked, Limit(), 0.05).startswith(
        "Keep the current configuration: no allowed change is predicted to use at least 5% less"
    )
    assert rank(table, NOW, Limit())[0].setting.precision == "tf32"  # without the threshold


def test_the_advice_sentence_names_change_saving_and_time() -> None:
    ranked = rank(TABLE, NOW, Limit(max_slowdown=0.05))
    sentence = advice_sentence(ranked, Limit(max_slowdown=0.05))
    assert sentence.startswith("Change precision fp32 -> tf32: 40% less energy (34% to 46%)")
    assert "4% slower" in sentence and "at most 5 % slower than now" in sentence


def test_setting_changes_in_words() -> None:
    capped = Setting("amp-bf16", 512, 1, 455.0)
    assert capped.changes_from(NOW) == (
        "precision fp32 -> amp-bf16; batch size 256 -> 512; power limit default -> 455 W"
    )


# --- scoring -------------------------------------------------------------------------------
MEASURED = {  # setting -> (energy, time) as "measured"
    Setting("fp32", 256, 1): (100.0, 10.0),
    Setting("tf32", 256, 1): (70.0, 10.8),  # 8 % slower
    Setting("amp-bf16", 256, 1): (40.0, 9.0),
    Setting("amp-fp16", 256, 1): (45.0, 9.5),
}


def test_regret_violation_and_saving_of_a_pick() -> None:
    settings = list(MEASURED)
    good = score_pick(Setting("amp-bf16", 256, 1), NOW, settings, MEASURED, 0.0)
    assert good == {
        "regret": 0.0, "violation": False, "realised_saving": pytest.approx(0.6),
        "best": Setting("amp-bf16", 256, 1).__dict__, "best_saving": pytest.approx(0.6),
    }  # fmt: skip
    second = score_pick(Setting("amp-fp16", 256, 1), NOW, settings, MEASURED, 0.0)
    assert second["regret"] == pytest.approx(45 / 40 - 1) and not second["violation"]
    slow = score_pick(Setting("tf32", 256, 1), NOW, settings, MEASURED, 0.05)
    assert slow["violation"] and slow["regret"] == pytest.approx(70 / 40 - 1)
    # with no limit the 8 % slower pick breaks nothing
    assert not score_pick(Setting("tf32", 256, 1), NOW, settings, MEASURED, None)["violation"]


def test_the_best_meeting_the_limit_excludes_what_was_measured_slower() -> None:
    measured = {NOW: (100.0, 10.0), Setting("tf32", 256, 1): (50.0, 11.0)}
    kept = score_pick(NOW, NOW, list(measured), measured, 0.05)
    assert kept["regret"] == 0.0  # tf32 was 10 % slower: not a better choice within 5 %
    assert score_pick(NOW, NOW, list(measured), measured, None)["regret"] == pytest.approx(1.0)


def test_summarise_medians_and_p90() -> None:
    scores = [
        {"regret": r, "violation": v, "realised_saving": 0.1, "best_saving": 0.2}
        for r, v in zip(np.linspace(0, 0.9, 10), [True] + [False] * 9, strict=True)
    ]
    summary = summarise(scores)
    assert summary["n"] == 10
    assert summary["median_regret"] == pytest.approx(0.45)
    assert summary["p90_regret"] == pytest.approx(np.quantile(np.linspace(0, 0.9, 10), 0.9))
    assert summary["violation_rate"] == pytest.approx(0.1)


def test_reachable_keeps_to_the_knobs() -> None:
    settings = [Setting(p, b, 1) for p in ("fp32", "amp-bf16") for b in (128, 256)]
    # the start itself stays reachable (keeping it is always a choice)
    assert reachable(NOW, settings, ("precision",)) == [NOW, Setting("amp-bf16", 256, 1)]
    assert len(reachable(NOW, settings, ("precision", "batch"))) == 4


# --- knobs ---------------------------------------------------------------------------------
def test_parse_allow() -> None:
    assert parse_allow(None) == DEFAULT_KNOBS and "batch" not in DEFAULT_KNOBS
    assert parse_allow("batch, precision") == ("precision", "batch")
    assert parse_allow("power_limit,cuda-graphs") == ("graphs", "power-limit")
    with pytest.raises(ConfigError, match="unknown knob 'turbo'"):
        parse_allow("precision,turbo")
    with pytest.raises(ConfigError, match="must list knobs"):
        parse_allow("precision,,")


def test_knobs_not_varied_are_explained_in_one_sentence_each() -> None:
    notes = knob_notes(("graphs", "gpus", "batch"))
    assert notes[0] == WHY_NOT["graphs"] and "no runs with graphs" in notes[0]
    assert "one GPU only" in notes[1]
    assert "changes convergence" in notes[2]
    assert knob_notes(("precision",)) == []


def test_the_gpu_share_is_the_reference_median() -> None:
    from wattlab.estimate.reference import load_default_reference

    runs, _ = load_default_reference()
    share = float((runs["energy_gpu_j"] / runs["energy_total_j"]).median())
    assert abs(GPU_SHARE - share) < 0.01  # a stated assumption: 1 % of it moves little


# --- the advisor, with a known law standing in for PRE -------------------------------------
@dataclass(frozen=True)
class _Prediction:
    energy_j: float
    duration_s: float
    energy_low_j: float
    energy_high_j: float
    duration_low_s: float
    duration_high_s: float
    notes: str = ""


@dataclass(frozen=True)
class _Seen:
    batch_sizes: tuple[float, ...] = (128.0, 256.0, 512.0)


class KnownLaw:
    """Per image: time and power by precision; a bigger batch is faster at the same power."""

    seen = _Seen()
    TIME = {"fp32": 4e-4, "tf32": 2e-4, "amp-bf16": 1e-4, "amp-fp16": 1.05e-4}
    POWER = {"fp32": 600.0, "tf32": 550.0, "amp-bf16": 400.0, "amp-fp16": 400.0}

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def predict_config(self, **config: object) -> _Prediction:
        self.calls.append(config)
        if config["model"] not in ("resnet18", "resnet50"):
            raise ConfigError(f"unknown model {config['model']!r}.")
        precision = str(config["precision"])
        batch = float(config["batch_size"])
        t = self.TIME[precision] * (256 / batch) ** 0.3 * float(config["samples"])
        e = t * self.POWER[precision]
        return _Prediction(e, t, e * 0.8, e * 1.25, t * 0.8, t * 1.25)

    def describe(self) -> str:
        return "a known law"


def test_the_advisor_ranks_precisions_at_the_same_images() -> None:
    law = KnownLaw()
    advice = advise(model="resnet18", gpu_name="H200", epochs=2, train_size=1000, batch_size=100,
                    allow="precision", pre_model=law)  # fmt: skip
    assert {c["samples"] for c in law.calls} == {2 * 10 * 100}  # every candidate: same images
    assert {r.setting.batch_size for r in advice.rows} == {100}  # batch not allowed
    assert advice.rows[0].setting.precision == "amp-bf16"
    best = advice.rows[0]
    assert best.saving == pytest.approx(1 - (1e-4 * 400) / (4e-4 * 600))
    assert best.co2e_kg == pytest.approx(best.energy_j / 3.6e6 * 0.2)
    assert advice.sentence.startswith("Change precision fp32 -> amp-bf16")
    assert not any("batch size may change" in n for n in advice.notes)


def test_batch_sizes_only_when_allowed_and_then_said() -> None:
    law = KnownLaw()
    advice = advise(model="resnet18", gpu_name="H200", epochs=2, train_size=1000, batch_size=100,
                    allow="precision,batch", pre_model=law)  # fmt: skip
    # the reference's batch sizes that fit the training set, and the current one
    assert {r.setting.batch_size for r in advice.rows} == {100, 128, 256, 512}
    assert advice.rows[0].setting == Setting("amp-bf16", 512, 1)
    assert any("changes convergence" in n for n in advice.notes)


def test_power_limits_are_predicted_rows_that_change_no_setting() -> None:
    advice = advise(model="resnet18", gpu_name="H200", epochs=2, train_size=1000,
                    allow="power-limit", pre_model=KnownLaw())  # fmt: skip
    capped = [r for r in advice.rows if r.setting.power_limit_w is not None]
    assert capped, "a 600 W draw on a 700 W GPU: caps below it bite"
    assert {r.setting.power_limit_w for r in capped} <= {round(f * 700) for f in CAP_FRACTIONS}
    assert all(r.source.endswith("cap law") for r in capped)
    uncapped = next(r for r in advice.rows if r.is_current)
    deepest = min(capped, key=lambda r: r.setting.power_limit_w or 0)
    assert deepest.duration_s > uncapped.duration_s  # a cap below the draw stretches time
    # the interval is PRE's, widened for the cap law
    assert deepest.energy_high_j / deepest.energy_j > uncapped.energy_high_j / uncapped.energy_j
    assert any("changes no GPU setting" in n for n in advice.notes)
    slow = advise(model="resnet18", gpu_name="H200", epochs=2, train_size=1000,
                  allow="power-limit", max_slowdown_percent=0,
                  pre_model=KnownLaw())  # fmt: skip
    assert all(r.duration_s <= uncapped.duration_s for r in slow.rows if r.meets_limit)


def test_a_correction_makes_the_current_row_the_measurement() -> None:
    correction = Correction(run_id=7, energy_ratio=1.5, time_ratio=2.0, measured_energy_j=999.0,
                            measured_duration_s=9.0)  # fmt: skip
    plain = advise(model="resnet18", gpu_name="H200", epochs=2, train_size=1000,
                   allow="precision", pre_model=KnownLaw())  # fmt: skip
    fixed = advise(model="resnet18", gpu_name="H200", epochs=2, train_size=1000,
                   allow="precision", pre_model=KnownLaw(),
                   correction=correction)  # fmt: skip
    current = next(r for r in fixed.rows if r.is_current)
    assert (current.energy_j, current.duration_s) == (999.0, 9.0)
    assert current.source == "measured (run 7)"
    before = {r.setting: r for r in plain.rows}
    for row in fixed.rows:
        if not row.is_current:
            assert row.energy_j == pytest.approx(before[row.setting].energy_j * 1.5)
            assert row.duration_s == pytest.approx(before[row.setting].duration_s * 2.0)


def test_advisor_refuses_bad_input() -> None:
    law = KnownLaw()
    with pytest.raises(ConfigError, match="unknown knob"):
        advise(model="resnet18", gpu_name="H200", epochs=2, allow="nitro", pre_model=law)
    with pytest.raises(ConfigError, match="unknown GPU"):
        advise(model="resnet18", gpu_name="Voodoo 5", epochs=2, pre_model=law)
    with pytest.raises(ConfigError, match="deadline of 0.001 s"):
        advise(model="resnet18", gpu_name="H200", epochs=2, deadline_s=0.001, pre_model=law)
    with pytest.raises(ConfigError, match="precision must be one of"):
        advise(model="resnet18", gpu_name="H200", epochs=2, precision="fp8", pre_model=law)


# --- from a stored run ---------------------------------------------------------------------
def _store(tmp_path: Path, **overrides: object) -> tuple[Path, int]:
    from wattlab.experiment.db.store import open_store

    db = tmp_path / "runs.db"
    trace_w = [550.0, 650.0] * 10  # one sample a second in the budget
    duration = float(len(trace_w))
    gpu_j = float(sum(trace_w))
    run = {
        "status": "ok", "config_hash": "advise", "config_json": {"model": "resnet18"},
        "label": "resnet18 1xGPU fp32 bs256", "model": "resnet18", "device": "cuda", "gpus": 1,
        "precision": "fp32", "batch_size": 256, "epochs": 2, "samples": 51_200,
        "train_size": 25_600, "image_size": 32, "stem": "cifar", "duration_s": duration,
        "energy_total_j": gpu_j + 40.0 * duration, "energy_gpu_j": gpu_j,
        "gpu_name": "NVIDIA H200", "gpu_tdp_w": 700.0, "power_limit_w": 700.0,
        **overrides,
    }  # fmt: skip
    with open_store(db) as store:
        run_id = store.insert_run(
            run,
            [{"name": "budget", "start_s": 1.0, "duration_s": duration, "energy_total_j": gpu_j}],
            [(1.5 + i, "gpu:0", w) for i, w in enumerate(trace_w)],
        )
    return db, run_id


def _tables(db: Path, run_id: int):
    from wattlab.experiment.db.store import open_store

    with open_store(db, create=False) as store:
        return store.runs(), store.windows([run_id]), store.trace([run_id])


def test_advice_from_a_stored_run_corrects_pre_by_what_it_measured(tmp_path: Path) -> None:
    db, run_id = _store(tmp_path)
    law = KnownLaw()
    advice = advise_from_run(*_tables(db, run_id), run_id, allow="precision,power-limit",
                             pre_model=law)  # fmt: skip
    predicted = law.predict_config(model="resnet18", precision="fp32", batch_size=256,
                                   samples=51_200)  # fmt: skip
    current = next(r for r in advice.rows if r.is_current)
    assert current.energy_j == pytest.approx(12_000.0 + 800.0)  # as measured
    assert current.duration_s == pytest.approx(20.0)
    bf16 = next(r for r in advice.rows if r.setting == Setting("amp-bf16", 256, 1))
    ratio_e = 12_800.0 / predicted.energy_j
    bf16_pred = law.predict_config(model="resnet18", precision="amp-bf16", batch_size=256,
                                   samples=51_200)  # fmt: skip
    assert bf16.energy_j == pytest.approx(bf16_pred.energy_j * ratio_e)
    assert bf16.source == f"predicted, corrected by run {run_id}"
    # the current configuration's caps come from its own trace: 650 W peaks, so 630 W bites
    caps = [r for r in advice.rows if r.setting.precision == "fp32" and r.setting.power_limit_w]
    assert any(r.setting.power_limit_w == 630.0 for r in caps)
    assert any(f"corrected by run {run_id}" in n for n in advice.notes)


def test_a_callback_run_pre_cannot_count_gets_power_limit_advice_only(tmp_path: Path) -> None:
    db, run_id = _store(tmp_path, model="BertForSequenceClassification", precision="amp-bf16")
    advice = advise_from_run(*_tables(db, run_id), run_id, pre_model=KnownLaw())
    assert {r.setting.precision for r in advice.rows} == {"amp-bf16"}
    assert len(advice.rows) > 1 and all(
        r.setting.power_limit_w is not None for r in advice.rows if not r.is_current
    )
    assert advice.notes[0].startswith("only the power limit is advised: PRE cannot count run")


def test_a_run_of_a_command_sweep_gets_power_limit_advice_from_its_trace(tmp_path: Path) -> None:
    """A sweep of a user's script stores its program as the model and its axes as columns: PRE
    cannot count `train.py`, so the power limit is advised from the run's own trace."""
    db, run_id = _store(
        tmp_path, model="train.py", label="train.py batch_size=256 precision=amp-bf16",
        config_json={"axes": {"batch_size": 256, "precision": "amp-bf16"}},
        precision="amp-bf16", launcher="command",  # samples from wattlab.budget(samples=N)
        command_json={"argv": ["python", "train.py"], "cwd": None, "env": {}},
    )  # fmt: skip
    advice = advise_from_run(*_tables(db, run_id), run_id, pre_model=KnownLaw())
    assert advice.notes[0].startswith("only the power limit is advised: PRE cannot count run")
    assert next(r for r in advice.rows if r.is_current).source == f"measured (run {run_id})"
    capped = [r for r in advice.rows if not r.is_current]
    assert capped and all(r.setting.power_limit_w is not None for r in capped)
    assert any(r.setting.power_limit_w == 630.0 for r in capped)  # the trace peaks at 650 W


def test_a_missing_or_unfinished_run_is_one_sentence(tmp_path: Path) -> None:
    db, run_id = _store(tmp_path)
    with pytest.raises(DataError, match=r"there is no run with id 99 in the database\."):
        advise_from_run(*_tables(db, run_id), 99, pre_model=KnownLaw())
    (tmp_path / "cpu").mkdir()
    db2, run2 = _store(tmp_path / "cpu", device="cpu")
    with pytest.raises(DataError, match="ran on the CPU"):
        advise_from_run(*_tables(db2, run2), run2, pre_model=KnownLaw())


def test_min_saving_is_the_documented_five_percent() -> None:
    assert MIN_PREDICTED_SAVING == 0.05 and not math.isnan(GPU_SHARE)


def test_the_public_face_returns_the_ranked_rows(tmp_path: Path) -> None:
    import wattlab

    advice = wattlab.advise(model="resnet18", gpu_name="H200", epochs=2, train_size=1000,
                            allow="precision", pre_model=KnownLaw())  # fmt: skip
    rows = list(advice)
    assert rows == advice.rows and len(advice) == 4 and advice[0].rank == 1
    assert advice.to_dict()["rows"][0]["precision"] == "amp-bf16"
    db, run_id = _store(tmp_path)
    stored = wattlab.advise(db=db, run=run_id, allow="precision", pre_model=KnownLaw())
    assert next(r for r in stored if r.is_current).source == f"measured (run {run_id})"
    with pytest.raises(DataError, match="no run with id 5"):
        wattlab.advise(db=db, run=5, pre_model=KnownLaw())
    with pytest.raises(DataError, match="both db and run"):
        wattlab.advise(db=db)


@pytest.mark.usefixtures("fake_models")
def test_leave_one_gpu_out_advises_each_model_on_the_held_out_gpu() -> None:
    import pandas as pd

    from tests.estimate.test_estimate_pre import synthetic_runs
    from wattlab.estimate.advise.evaluation import evaluate_reference
    from wattlab.estimate.pre import fit_pre

    h200 = synthetic_runs(models=("r18", "r50", "vgg"), batches=(128, 512), reps=1)
    h100 = synthetic_runs(
        models=("r18", "r50", "vgg"), batches=(128, 512), reps=1, gpu="NVIDIA H100 SXM", seed=1
    )
    h100["id"] += 1000
    runs = pd.concat([h200, h100], ignore_index=True)
    seen: list[set[str]] = []

    def fit(train: pd.DataFrame):
        seen.append(set(train["gpu_name"]))
        return fit_pre(train, search_iter=1, families=("physics",)), "fitted"

    result = evaluate_reference(runs, fit=fit, hold_out="gpu")
    assert result["hold_out"] == "gpu"
    assert seen == [{"NVIDIA H200"}, {"NVIDIA H100 SXM"}]  # each fold fits on the other GPU
    assert [f["gpu"] for f in result["folds"]] == ["NVIDIA H100 SXM", "NVIDIA H200"]
    # 3 models x 6 settings per GPU; each start x 4 limits, scored on the held-out GPU's runs
    assert all(f["configurations"] == 18 for f in result["folds"])
    picks = [p for p in result["picks"] if p["knobs"] == "precision"]
    assert len(picks) == 2 * 18 * 4
    assert {p["gpu"] for p in picks} == {"NVIDIA H100 SXM", "NVIDIA H200"}
    # by model: the same configuration on two GPUs stays two configurations
    by_model = evaluate_reference(runs, fit=fit, hold_out="model")
    assert by_model["folds"][0]["configurations"] == 12
    with pytest.raises(DataError, match="at least two GPUs"):
        evaluate_reference(h200, fit=fit, hold_out="gpu")
