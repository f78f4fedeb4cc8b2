"""`wattlab advise --probe`: measure the candidates for a short while instead of predicting them.

The advice PRE gave (``advisor.advise`` or ``stored.advise_from_run``) names the candidates;
``probe_rows.choose_candidates`` orders them by PRE, prunes those PRE is sure lose and takes as
many as the seconds allow (the current configuration always). They become one trainer sweep,
``probe-<model>-<UTC time>``, in the database: each candidate's run trains the
real model for a timed window (``budget_s``) after its warm-up steps (cuDNN's autotuning is
there, not in the window), in one warm worker process, the current configuration first and the
others in a random order, a second pass (repetition) when the time allows; the one sweep loop
(``experiment.sweep.driver``) starts no run past the deadline. Stored like any sweep,
``wattlab report --sweep probe-...`` shows them.

The ranking then uses the measured rows (energy and time per image of each candidate's
windows, ``probe_rows.measured_rows``) scaled to the advice's images: the advice is chosen
among the measured candidates; those not measured (pruned, out of time, failed) keep PRE's
prediction and are listed after them. The probe measures itself: an ``EnergyMonitor`` around
the whole probe gives its energy, time and CO2e (``ProbeReport``).

Power limits are probed only with ``--allow power-limit`` on a machine where wattlab may set
them (root, a CUDA GPU, ``WATTLAB_FORBID_POWER_LIMITS`` unset); each such run holds its limit
through the runner's ``PowerLimitSession``, restored at the end, on a stop signal, and from its
journal after a kill. Elsewhere they stay predicted and the notes say why.

On the CPU the probe works the same way; the CPU's energy is then modelled (TDP x load), so
its rows say ``estimated``, not ``measured``.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from wattlab.errors import ConfigError
from wattlab.estimate.advise.advisor import Advice, _with_co2e
from wattlab.estimate.advise.probe_rows import (
    WARMUP_GUESS_S,
    Choice,
    Measured,
    choose_candidates,
    describe_choice,
    measured_rows,
)
from wattlab.estimate.advise.ranking import Option, Setting, advice_sentence, rank
from wattlab.monitor.carbon import CarbonSettings

DEFAULT_PROBE_S = 60.0
# each candidate's timed window (s), after its warm-up steps; the counter's resolution (~1 J
# per 25 ms on the H200's NVML counter) is well under 1 % of a 3 s window at a few hundred W
WINDOW_S = {"cuda": 3.0, "cpu": 2.0}
WARMUP_STEPS = 5  # untimed steps before each window (autotuning, caches); budget_s needs >= 3
PROBE_REPETITIONS = 2  # the second pass runs when the time allows
MIN_PROBE_S = 5.0
# a measured saving leads when it is at least this share: the repetitions' spread on the H200
# (docs/measured/h200-wide-2026-12-04: two runs of one configuration differ by ~1 %)
MIN_MEASURED_SAVING = 0.02


@dataclass(frozen=True)
class ProbeReport:
    """What the probe did and what it cost (its own energy, time and CO2e, measured around
    the whole probe; ``provenance`` says whether the energy was measured or modelled)."""

    sweep: str
    db: str
    device: str
    device_name: str  # the GPU's name, or "CPU"
    seconds_given: float
    duration_s: float
    energy_j: float
    co2e_kg: float
    provenance: str
    measured: int
    runs: int
    pruned: int
    unmeasured: int
    failed: list[str] = field(default_factory=list)

    def describe(self) -> str:
        cost = (
            f"the probe took {self.duration_s:.0f} s and {self.energy_j / 1e3:.3g} kJ "
            f"({self.provenance}), {self.co2e_kg * 1e3:.3g} g CO2e"
        )
        parts = [f"{self.measured} candidate(s) measured in {self.runs} run(s)"]
        if self.pruned:
            parts.append(f"{self.pruned} pruned by PRE")
        if self.unmeasured:
            parts.append(f"{self.unmeasured} not measured for lack of time")
        if self.failed:
            parts.append(f"{len(self.failed)} could not run")
        return (
            f"{cost}; {', '.join(parts)}; its runs are sweep {self.sweep!r} in {self.db} "
            f"(wattlab report --db {self.db} --sweep {self.sweep})"
        )

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Trainee:
    """What the probe trains: the model and its data, as ``wattlab run`` takes them."""

    model: str | None = None
    model_factory: str | None = None
    stem: str = "cifar"
    image_size: int = 32
    dataset: str = "synthetic"
    data_dir: str | None = None

    @classmethod
    def from_run_config(cls, config: dict[str, Any]) -> Trainee:
        return cls(
            model=None if config.get("model_factory") else config.get("model"),
            model_factory=config.get("model_factory"),
            stem=str(config.get("stem") or "cifar"),
            image_size=int(config.get("image_size") or 32),
            dataset=str(config.get("dataset") or "synthetic"),
            data_dir=config.get("data_dir"),
        )

    @property
    def name(self) -> str:
        return self.model_factory or self.model or "model"

    def base(self) -> dict[str, Any]:
        out: dict[str, Any] = {"stem": self.stem, "image_size": self.image_size}
        out["dataset"] = self.dataset
        if self.model_factory:
            out["model_factory"] = self.model_factory
        else:
            out["model"] = self.model
        if self.data_dir:
            out["data_dir"] = self.data_dir
        return out


def device_name(device: str) -> str:
    """The name of the GPU the probe runs on ("CPU" on the CPU)."""
    if device != "cuda":
        return "CPU"
    import torch

    return str(torch.cuda.get_device_name(0))


def probe_device() -> str:
    """'cuda' when torch sees a CUDA GPU here, else 'cpu'."""
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def _power_limit_why_not(device: str) -> str:
    """Why power-limit candidates cannot be measured here ('' when they can)."""
    from wattlab.experiment.sweep.plan import MachineFacts

    if device != "cuda":
        return "power limits need a CUDA GPU"
    machine = MachineFacts.detect()
    return "" if machine.can_set_power_limits else machine.power_limit_reason


def _runnable(option: Option, device: str, power_ok: bool) -> str:
    """Why this candidate cannot run here ('' when it can)."""
    setting = option.setting
    if setting.power_limit_w is not None and not power_ok:
        return "power limit"
    if device == "cpu" and setting.precision == "amp-fp16":
        return "amp-fp16 needs a CUDA GPU"
    if device == "cpu" and setting.gpus > 1:
        return f"{setting.gpus} GPUs on a machine without a CUDA GPU"
    return ""


def sweep_name(trainee: Trainee, now: datetime | None = None) -> str:
    """``probe-<model>-<UTC time>``: letters, digits, '.', '_' and '-' only (a sweep name)."""
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    base = Path(trainee.name.split(":")[-1]).name
    return f"probe-{re.sub(r'[^A-Za-z0-9_.-]+', '-', base).strip('-.') or 'model'}-{stamp}"


def probe_spec(
    name: str,
    trainee: Trainee,
    candidates: list[Setting],
    device: str,
    window_s: float,
    seed: int | None = None,
) -> dict[str, Any]:
    """The probe's sweep spec: the candidates as ``only`` points of a grid over the knobs they
    vary, each a timed window after its warm-up steps, twice when the time allows. The first
    candidate (the current configuration: every saving is against it) runs first; the others
    follow in a random order drawn with ``seed`` (None: a fresh one), the same in both passes."""
    import random

    rest = list(candidates[1:])
    random.Random(seed).shuffle(rest)
    candidates = [candidates[0], *rest]
    axes = {
        "precision": sorted({c.precision for c in candidates}),
        "batch_size": sorted({c.batch_size for c in candidates}),
        "cuda_graphs": sorted({c.cuda_graphs for c in candidates}),
        "power_limit_w": sorted(
            {c.power_limit_w for c in candidates}, key=lambda w: -1.0 if w is None else w
        ),
    }
    smallest = min(c.batch_size for c in candidates)
    largest = max(c.batch_size for c in candidates)
    base = {
        **trainee.base(),
        "device": device,
        "gpus": candidates[0].gpus if device == "cuda" else 1,
        "budget_s": window_s,
        "warmup_steps": WARMUP_STEPS,
        "epoch_eval_samples": 0,
        # a few batches of data are enough for a throughput window (the data loads faster)
        "train_samples": max(4 * largest, 2048),
        "test_samples": smallest,
    }
    return {
        "name": name,
        "description": "wattlab advise --probe: each candidate for a short measured window",
        "base": base,
        "grid": axes,
        "only": [
            {
                "precision": c.precision,
                "batch_size": c.batch_size,
                "cuda_graphs": c.cuda_graphs,
                "power_limit_w": c.power_limit_w,
            }
            for c in candidates
        ],
        "repetitions": PROBE_REPETITIONS,
        "order": "sequential",
        "warmup_runs": 0,
        "cooldown_s": 0.0,
    }


def _setting_of(config: Any, gpus: int) -> Setting:
    return Setting(
        config.precision, int(config.batch_size), gpus, config.power_limit_w, config.cuda_graphs
    )


def _first_line(text: Any) -> str:
    lines = str(text or "failed").strip().splitlines()
    return lines[0] if lines else "failed"


def probe(
    advice: Advice,
    trainee: Trainee,
    *,
    db: str,
    seconds: float = DEFAULT_PROBE_S,
    carbon: CarbonSettings | None = None,
    device: str | None = None,
    window_s: float | None = None,
    say: Callable[[str], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Advice:
    """``advice`` with its candidates measured (see the module). ``db``: the database the
    probe's sweep is stored in. ``say``: called with a line per probe run (progress)."""
    if not (math.isfinite(seconds) and seconds >= MIN_PROBE_S):
        raise ConfigError(f"--probe needs at least {MIN_PROBE_S:g} s, got {seconds:g}.")
    device = device or probe_device()
    window = window_s if window_s is not None else WINDOW_S[device]
    carbon = carbon or advice.carbon
    why_no_power = _power_limit_why_not(device) if "power-limit" in advice.allowed else "n/a"
    notes: list[str] = []
    candidates: list[Option] = []
    cannot: list[str] = []
    for option in advice.rows:
        reason = _runnable(option, device, power_ok=not why_no_power)
        if reason == "power limit":
            continue  # stays predicted; one note below
        if reason:
            cannot.append(f"{option.setting.describe()}: {reason}")
            continue
        candidates.append(option)
    if "power-limit" in advice.allowed and why_no_power:
        notes.append(f"power limits were not probed ({why_no_power}); they stay predicted")
    if not any(o.setting == advice.current for o in candidates):
        raise ConfigError(
            f"the probe cannot run the current configuration here ({'; '.join(cannot)})."
        )
    choice = choose_candidates(
        candidates,
        advice.current,
        graphs="graphs" in advice.allowed and device == "cuda",
        seconds=seconds,
        window_s=window,
        device=device,
    )
    name = sweep_name(trainee)
    started = clock()
    stop_at = started + seconds
    from wattlab.monitor import EnergyMonitor

    with EnergyMonitor(carbon=carbon, record_trace=False) as monitor:
        runs, failed = _run_probe(name, trainee, choice, device, window, db, carbon, stop_at, say)
    cost = monitor.result
    assert cost is not None
    measured_list = list(runs)
    estimated = any(m.provenance != "measured" for m in measured_list)
    note = (
        "the CPU's energy is modelled from its TDP and load (no RAPL), not measured"
        if estimated
        else ""
    )
    measured = measured_rows(measured_list, advice.samples, estimated_note=note)
    measured = {s: _with_co2e(o, carbon) for s, o in measured.items()}
    report = ProbeReport(
        sweep=name,
        db=db,
        device=device,
        device_name=device_name(device),
        seconds_given=float(seconds),
        duration_s=cost.duration_s,
        energy_j=cost.total_energy_j,
        co2e_kg=cost.co2e.value_kg,
        provenance=str(cost.total_provenance.value),
        measured=len(measured),
        runs=len(measured_list),
        pruned=len(choice.pruned),
        unmeasured=len(choice.unmeasured)
        + sum(c.setting not in measured and c.setting not in failed for c in choice.measure),
        failed=[f"{s.describe()}: {why}" for s, why in failed.items()] + cannot,
    )
    return _advice_with(advice, measured, choice, report, notes)


def _run_probe(
    name: str,
    trainee: Trainee,
    choice: Choice,
    device: str,
    window_s: float,
    db: str,
    carbon: CarbonSettings,
    stop_at: float,
    say: Callable[[str], None] | None,
) -> tuple[list[Measured], dict[Setting, str]]:
    """Run the probe sweep; its ok runs as ``Measured``, and why each candidate that could
    not run failed (its first error line)."""
    from wattlab.experiment.db.store import open_store
    from wattlab.experiment.options import WorkerOptions
    from wattlab.experiment.specs.trainer import SweepSpec
    from wattlab.experiment.sweep.plan import MachineFacts, make_plan, run_plan

    settings = [c.setting for c in choice.measure]
    spec = SweepSpec(**probe_spec(name, trainee, settings, device, window_s))
    gpus = settings[0].gpus
    with open_store(db) as store:
        plan = make_plan(spec, store, MachineFacts.detect())
    guess = WARMUP_GUESS_S[device] + window_s
    for entry in plan.entries:
        if entry.expected_s is None:
            entry.expected_s = guess
    todo = plan.to_run
    if todo:
        todo[0].expected_s = 0.0  # the current configuration always runs: savings need it
    by_hash = {e.config_hash: _setting_of(e.config, gpus) for e in plan.entries}
    failed = {by_hash[e.config_hash]: e.reason for e in plan.entries if e.action == "skip"}
    started: list[float] = []
    took: list[float] = []

    def on_start(entry: Any) -> None:
        started.append(time.monotonic())

    def on_finish(entry: Any, outcome: Any) -> None:
        took.append(time.monotonic() - started[-1])
        for later in todo:  # no run starts that the runs so far say would cross the deadline
            if later.expected_s is not None and later.expected_s > 0:
                later.expected_s = max(later.expected_s, statistics.median(took))
        if say is not None:
            what = "ok" if outcome.status == "ok" else _first_line(outcome.error)
            setting = by_hash[entry.config_hash].describe()
            say(f"probe: {setting} (pass {entry.repetition + 1}): {what} in {took[-1]:.0f} s")

    opts = WorkerOptions(db_path=db, carbon=carbon, progress=False)
    run_plan(plan, opts, on_start=on_start, on_finish=on_finish, stop_at=stop_at)
    with open_store(db, create=False, readonly=True) as store:
        stored = store.runs(sweep=name)
    out: list[Measured] = []
    for _, row in stored.iterrows():
        setting = by_hash.get(str(row["config_hash"]))
        if setting is None:
            continue
        if row["status"] != "ok":
            failed.setdefault(setting, _first_line(row.get("error")))
            continue
        out.append(
            Measured(
                setting=setting,
                samples=float(row["samples"] or 0),
                energy_j=float(row["energy_total_j"]),
                duration_s=float(row["duration_s"]),
                uncertainty_j=float(row.get("energy_uncertainty_j") or 0.0),
                provenance=str(row.get("provenance") or "measured"),
            )
        )
    ok = {m.setting for m in out}
    return out, {s: why for s, why in failed.items() if s not in ok}


def _advice_with(
    advice: Advice,
    measured: dict[Setting, Option],
    choice: Choice,
    report: ProbeReport,
    notes: list[str],
) -> Advice:
    """The advice re-ranked on the measured rows; the rest listed after them as PRE predicted
    them, with their savings against PRE's prediction of the current configuration (a
    measured row and a predicted one are never compared with each other)."""
    done = [*advice.notes, *notes, *describe_choice(choice), "probe: " + report.describe()]
    if advice.current not in measured:  # the current configuration failed or never ran
        done.append(
            "the probe could not measure the current configuration, so the ranking stays PRE's"
        )
        return replace(advice, notes=done, probe=report)
    ranked = rank(list(measured.values()), advice.current, advice.limit, MIN_MEASURED_SAVING)
    rest = [o for o in advice.rows if o.setting not in measured]
    rows = [replace(o, rank=i + 1) for i, o in enumerate([*ranked, *rest])]
    what = "estimated" if any(o.source.startswith("estimated") for o in ranked) else "measured"
    others = len(ranked) - 1
    if others == 0:
        sentence = (
            "No measured advice: the probe had time to measure only the current configuration, "
            "so no change was measured against it (give --probe more seconds)"
        )
    elif ranked[0].is_current:
        sentence = (
            f"Keep the current configuration: none of the {others} change(s) {what} used at "
            f"least {MIN_MEASURED_SAVING:.0%} less energy {advice.limit.describe()}"
        )
    else:
        sentence = advice_sentence(ranked, advice.limit, MIN_MEASURED_SAVING).rstrip(".")
    if rest:
        done.append(
            f"rows {len(ranked) + 1}-{len(rows)} are PRE's predictions for {advice.gpu_name}, not "
            "measured; their savings are against PRE's prediction of the current configuration"
        )
    here, there = report.device_name.lower(), advice.gpu_name.lower()
    if not (here in there or there in here):
        done.append(
            f"the probe measured this machine's {report.device_name}, not {advice.gpu_name}: "
            "the measured rows rank the candidates here"
        )
    graphs_why = "CUDA graphs are not advised"
    graphs_done = _graphs_measured(measured)
    done = [n for n in done if not (graphs_done and n.startswith(graphs_why))]
    return replace(
        advice,
        rows=rows,
        sentence=f"{sentence} (probed: {what} for {len(measured)} candidate(s)).",
        notes=done,
        probe=report,
    )


def _graphs_measured(measured: dict[Setting, Option]) -> bool:
    return any(s.cuda_graphs for s in measured)


def stored_trainee(runs: Any, run_id: int) -> Trainee:
    """The model and data of a stored run (its ``config_json``)."""
    match = runs[runs["id"] == run_id]
    if not len(match):
        raise ConfigError(f"no run {run_id} in the database.")
    text = match.iloc[0]["config_json"]
    config = json.loads(text) if isinstance(text, str) else dict(text or {})
    return Trainee.from_run_config(config)


__all__ = [
    "DEFAULT_PROBE_S",
    "MIN_MEASURED_SAVING",
    "ProbeReport",
    "Trainee",
    "probe",
    "probe_spec",
    "stored_trainee",
    "sweep_name",
]
