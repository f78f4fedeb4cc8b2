"""`wattlab advise --probe`: measure the candidates for a short while instead of predicting them.

The advice PRE gave (``advisor.advise`` or ``stored.advise_from_run``) names the candidates;
``probe_rows.choose_candidates`` orders them by PRE (the current configuration in its place)
and prunes those PRE is sure lose. Then, in this process, one model (``train.interleave``):

1. **Set-up.** The model, its optimizer and the data are built once on the device; each
   candidate is set up in turn (real steps to a steady step time: cuDNN's autotuning of its
   shape and dtype, as the training would do it, and a CUDA graph's capture). A candidate is
   set up only while the windows of every candidate set up so far, ``MIN_ROUNDS`` each at the
   shortest window, and its own expected set-up still fit the seconds; the others stay
   unmeasured. Set-up is timed and reported apart from the windows.
2. **Windows, interleaved in rounds.** Every candidate once per round, in a fresh random order
   each round, so drift and heating fall on all alike; at least ``MIN_ROUNDS`` rounds, more
   while the time allows. The window length is what the time left allows, between
   ``WINDOW_S[device]``'s bounds. Each window is an ``EnergyMonitor`` window of its own.
3. **Rows.** A measured candidate's row is the median energy and time per image over its
   windows, with an interval from their range and the counter's resolution, and its
   provenance by share (``probe_rows.measured_rows``). Candidates not measured keep PRE's
   prediction, scaled by the probe's measured/predicted ratio and marked predicted; a
   predicted row leads only when it beats the best measured one by ``MIN_PREDICTED_SAVING``
   (``probe_rows.combined``).

The probe's own energy, time and CO2e are measured around all of it (one outer window), and
stated with their share of the advised training. The default length is the smaller of
``DEFAULT_PROBE_S`` and ``TRAINING_SHARE`` of the predicted training; when that cannot measure
the candidates, or the probe would cost more energy than the change could save, the probe does
not run and one sentence says so beside PRE's advice. Nothing is stored and no file is left:
``--json`` carries every window.

The probe speaks of one device: it runs only where the advice is for the GPU it runs on (the
``--gpu-name`` is this machine's GPU); asked for another GPU (an H200's advice on a CPU or on an
H100), one sentence says it cannot measure that GPU here and the advice stays PRE's, so no row
is ever scaled by a measurement of another device. A candidate that fails or cannot run here
(amp-fp16 without CUDA) is left out of the ranking, never advised. The probe's whole time, set-up
included, stays within ``MAX_OVERRUN`` times its seconds: a candidate whose set-up or windows
would not fit is not measured, and the report says so. The windows' lengths it states are the
measured ones (median and longest).

Power limits and several GPUs cannot be switched inside one process here; they stay PRE's
predictions and a note says so.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from wattlab.errors import ConfigError
from wattlab.estimate.advise.advisor import Advice, _with_co2e
from wattlab.estimate.advise.probe_rows import (
    MIN_MEASURED_SAVING,
    MIN_PREDICTED_SAVING,
    SETUP_GUESS_S,
    Candidate,
    Choice,
    Measured,
    choose_candidates,
    combined,
    describe_choice,
    measured_rows,
    scale_of,
)
from wattlab.estimate.advise.ranking import Option, Setting, advice_sentence
from wattlab.monitor.carbon import CarbonSettings

DEFAULT_PROBE_S = 30.0  # the default is the smaller of this and TRAINING_SHARE of the training
TRAINING_SHARE = 0.05
MIN_PROBE_S = 5.0
INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
MIN_ROUNDS = 3  # windows per candidate, at least; its row is their median
# a window's length bounds (s): the shortest keeps the counter's resolution (~0.1 s updates on
# the H200's NVML energy counter) a few per cent of one window; longer than the longest buys
# less than another round
WINDOW_S = {"cuda": (1.0, 2.5), "cpu": (0.5, 2.0)}
SWITCH_S = 0.05  # the per-window cost beyond its steps: two device syncs and the meters' reads
# the probe's whole time, set-up included, stays within this many times the seconds it was given
MAX_OVERRUN = 1.5


@dataclass(frozen=True)
class ProbeReport:
    """What the probe did and what it cost: its own energy, time and CO2e, measured around all
    of it, with the provenance by share; the set-up apart from the windows; its share of the
    advised training (energy and time)."""

    device: str
    device_name: str  # the GPU's name, or "CPU"
    seconds_given: float
    duration_s: float
    energy_j: float
    co2e_kg: float
    provenance: str  # by share: "96.7 % measured by GPU counters, 3.3 % estimated (CPU, RAM)"
    setup_s: float  # the model, optimizer and data, once
    candidate_setup_s: dict[str, float]  # each candidate's autotuning, capture, steady steps
    windows_s: float  # the windows' own time, all of them
    windows: int
    rounds: int
    window_s: float  # the windows' median length, as measured
    measured: int
    pruned: int
    unmeasured: int
    failed: list[str] = field(default_factory=list)
    longest_window_s: float = 0.0
    setup_skipped: int = 0  # candidates whose set-up would not have fit the seconds
    training_energy_share: float = math.nan  # of the advised training's energy
    training_time_share: float = math.nan
    window_rows: list[dict[str, Any]] = field(default_factory=list)
    pre_rows: list[dict[str, Any]] = field(default_factory=list)  # PRE's rows before the probe

    def cost(self) -> str:
        """The probe's cost in one clause."""
        share = (
            f"; {self.training_energy_share:.1%} of the advised training's energy and "
            f"{self.training_time_share:.1%} of its time"
            if math.isfinite(self.training_energy_share)
            else ""
        )
        return (
            f"the probe took {self.duration_s:.1f} s and {self.energy_j / 1e3:.3g} kJ "
            f"({self.provenance}), {self.co2e_kg * 1e3:.3g} g CO2e{share}"
        )

    def describe(self) -> str:
        setups = sum(self.candidate_setup_s.values())
        parts = [
            f"{self.measured} candidate(s) measured in {self.windows} window(s) of "
            f"{self.window_s:.2g} s (median; the longest {self.longest_window_s:.2g} s) over "
            f"{self.rounds} interleaved round(s) ({self.windows_s:.1f} s)",
            f"set-up {self.setup_s + setups:.1f} s ({self.setup_s:.1f} s model and data once, "
            f"{setups:.1f} s for {len(self.candidate_setup_s)} candidate(s)' warm-up steps"
            + (", cuDNN autotuning and graph capture)" if self.device == "cuda" else ")"),
        ]
        if self.pruned:
            parts.append(f"{self.pruned} pruned by PRE")
        if self.unmeasured:
            parts.append(f"{self.unmeasured} not measured for lack of time")
        if self.setup_skipped:
            parts.append(
                f"{self.setup_skipped} not set up: their set-up would not have fit within "
                f"{MAX_OVERRUN:g}x the {self.seconds_given:g} s given"
            )
        if self.failed:
            parts.append(f"{len(self.failed)} could not run: {'; '.join(self.failed)}")
        tuned = (
            "; cuDNN chose its kernels by timing them (benchmark mode), as the training does"
            if self.device == "cuda"
            else ""
        )
        return f"{self.cost()}; {'; '.join(parts)}{tuned}"

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

    def run_config(self, device: str, settings: list[Setting]) -> Any:
        """The ``RunConfig`` the probe's trainer is built from: the model and data, a few
        batches of the largest candidate's size (a throughput window needs no more)."""
        from wattlab.train.config import RunConfig

        largest = max(s.batch_size for s in settings)
        fields: dict[str, Any] = {
            "stem": self.stem,
            "image_size": self.image_size,
            "dataset": self.dataset,
            "device": device,
            "precision": settings[0].precision,
            "batch_size": settings[0].batch_size,
            "epochs": 1,
            "train_samples": max(4 * largest, 2048),
            "test_samples": 256,
        }
        if self.model_factory:
            fields["model_factory"] = self.model_factory
        else:
            fields["model"] = self.model
        if self.data_dir:
            fields["data_dir"] = self.data_dir
        return RunConfig(**fields)


def device_name(device: str) -> str:
    """The name of the GPU the probe runs on ("CPU" on the CPU)."""
    if device != "cuda":
        return "CPU"
    import torch

    return str(torch.cuda.get_device_name(0))


def same_device(here: str, there: str) -> bool:
    """Whether the device the probe runs on (``device_name``) is the GPU the advice is for."""
    here, there = here.lower().strip(), there.lower().strip()
    return bool(here) and bool(there) and (here in there or there in here)


def probe_device() -> str:
    """'cuda' when torch sees a CUDA GPU here, else 'cpu'."""
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def _runnable(option: Option, device: str) -> str:
    """Why this candidate cannot be measured in one process here ('' when it can)."""
    setting = option.setting
    if setting.power_limit_w is not None:
        return "power limit"
    if setting.gpus != 1:
        return "gpus"
    if device == "cpu" and setting.precision == "amp-fp16":
        return "amp-fp16 needs a CUDA GPU"
    return ""


def default_seconds(advice: Advice) -> tuple[float, str]:
    """The default probe length and, when no probe is worth running, why (one sentence)."""
    current = next(o for o in advice.rows if o.is_current)
    share_s = TRAINING_SHARE * current.duration_s
    seconds = min(DEFAULT_PROBE_S, share_s)
    if seconds < MIN_PROBE_S:
        return seconds, (
            f"No probe: the training is predicted to take {current.duration_s:.0f} s, so "
            f"{TRAINING_SHARE:.0%} of it ({share_s:.1f} s) is too short to measure the candidates "
            f"(at least {MIN_PROBE_S:g} s); the advice is PRE's (give --probe SECONDS to probe "
            "anyway)."
        )
    best_low = min(o.energy_low_j for o in advice.rows)
    can_save_j = max(0.0, current.energy_j - best_low)
    probe_j = current.energy_j / max(current.duration_s, 1e-9) * seconds
    if probe_j >= can_save_j:
        return seconds, (
            f"No probe: it would cost about {probe_j / 1e3:.3g} kJ, more than the "
            f"{can_save_j / 1e3:.3g} kJ the best change could save at most by PRE's intervals; "
            "the advice is PRE's (give --probe SECONDS to probe anyway)."
        )
    return seconds, ""


class _Hooks:
    """Window hooks over one ``EnergyMonitor``: each window's ``Measurement`` kept by name."""

    def __init__(self, monitor: Any) -> None:
        self.monitor = monitor
        self.results: dict[str, Any] = {}

    def begin(self, name: str, epoch: int | None = None) -> None:
        self.monitor.begin_window(name)

    def end(self, name: str, epoch: int | None = None, samples: int = 0) -> None:
        self.results[name] = self.monitor.end_window(name)


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0][:200] if lines else type(error).__name__


@dataclass
class _Run:
    """What the probe's loop produced."""

    windows: list[Measured] = field(default_factory=list)
    window_rows: list[dict[str, Any]] = field(default_factory=list)
    setup_s: float = 0.0
    candidate_setup_s: dict[str, float] = field(default_factory=dict)
    unmeasured: list[Candidate] = field(default_factory=list)
    setup_skipped: int = 0
    failed: dict[Setting, str] = field(default_factory=dict)
    rounds: int = 0
    window_s: float = 0.0
    windows_s: float = 0.0


def _shape(setting: Setting) -> Any:
    from wattlab.train.interleave import Shape

    return Shape(setting.precision, setting.batch_size, setting.cuda_graphs)


def _run(
    trainee: Trainee,
    choice: Choice,
    device: str,
    monitor: Any,
    stop_at: float,
    hard_stop_at: float,
    clock: Callable[[], float],
    rng: random.Random,
    say: Callable[[str], None] | None,
) -> _Run:
    """Set up the candidates while they fit, then interleaved rounds (the module docstring).
    ``stop_at``: when the probe should end; ``hard_stop_at``: when it must have ended
    (``MAX_OVERRUN`` times its seconds), set-up included: a candidate whose set-up or windows
    would pass it is not measured."""
    import torch

    from wattlab.train.interleave import InterleavedTrainer

    out = _Run()
    hooks = _Hooks(monitor)
    low_s, high_s = WINDOW_S[device]
    settings = [c.setting for c in choice.measure]
    trainer = InterleavedTrainer(
        trainee.run_config(device, settings), torch.device(device), clock=clock
    )
    out.setup_s = trainer.setup_s
    ready: list[Setting] = []
    step_s: dict[Setting, float] = {}
    for i, candidate in enumerate(choice.measure):
        setting = candidate.setting
        timed = list(out.candidate_setup_s.values())
        expected = statistics.median(timed) if timed else SETUP_GUESS_S[device]
        windows_need = MIN_ROUNDS * (len(ready) + 1) * (low_s + SWITCH_S)
        # the first candidate may take the probe past its seconds, never past the hard stop
        if clock() + expected + windows_need > (stop_at if ready else hard_stop_at):
            out.unmeasured = choice.measure[i:]
            out.setup_skipped = len(out.unmeasured)
            break
        try:
            prepared = trainer.prepare(_shape(setting), stop_at=stop_at - windows_need)
        except Exception as error:  # noqa: BLE001 - a candidate that cannot run is reported
            out.failed[setting] = _first_line(error)
            if device == "cuda":
                torch.cuda.empty_cache()
            continue
        out.candidate_setup_s[setting.describe()] = prepared.setup_s
        step_s[setting] = prepared.step_s
        ready.append(setting)
        if say is not None:
            say(
                f"probe: set up {setting.describe()} in {prepared.setup_s:.1f} s "
                f"({prepared.warmup_steps} steps, {prepared.step_s * 1e3:.3g} ms a step)"
            )
    # candidates whose steps are too long for MIN_ROUNDS windows before the hard stop: the
    # last set up (PRE's least likely) go first, the current configuration last
    while ready:
        one_round = sum(max(low_s, step_s[s]) + step_s[s] + SWITCH_S for s in ready)
        if clock() + MIN_ROUNDS * one_round <= hard_stop_at:
            break
        dropped = ready.pop()
        out.unmeasured.append(next(c for c in choice.measure if c.setting == dropped))
    if not ready:
        return out
    left = stop_at - clock()
    per_round_overhead = sum(step_s[s] + SWITCH_S for s in ready)
    window = (left / MIN_ROUNDS - per_round_overhead) / len(ready)
    out.window_s = min(high_s, max(low_s, window))
    started = clock()
    while True:
        round_cost = sum(max(out.window_s, step_s[s]) + step_s[s] + SWITCH_S for s in ready)
        if out.rounds >= MIN_ROUNDS and clock() + round_cost > stop_at:
            break
        if clock() + round_cost > hard_stop_at:  # fewer rounds rather than past the hard stop
            break
        order = list(ready)
        rng.shuffle(order)
        for setting in order:
            name = f"probe:{setting.describe()}:round {out.rounds + 1}"
            ran = trainer.window(_shape(setting), out.window_s, hooks, name)
            m = hooks.results.pop(name)
            out.windows.append(
                Measured(
                    setting=setting,
                    samples=float(ran.images),
                    energy_j=m.total_energy_j,
                    duration_s=m.duration_s,
                    uncertainty_j=m.total_uncertainty_j,
                    parts=m.energy_parts(),
                )
            )
            out.window_rows.append(
                {
                    "candidate": setting.describe(),
                    "round": out.rounds + 1,
                    "steps": ran.steps,
                    "images": ran.images,
                    "duration_s": m.duration_s,
                    "energy_j": m.total_energy_j,
                    "gpu_energy_j": m.gpu_energy_j,
                    "uncertainty_j": m.total_uncertainty_j,
                    "provenance": m.energy_parts().phrase(),
                }
            )
        out.rounds += 1
    out.windows_s = sum(w.duration_s for w in out.windows)
    if say is not None and out.windows:
        lengths = [w.duration_s for w in out.windows]
        say(
            f"probe: {out.rounds} rounds of {len(ready)} window(s) of "
            f"{statistics.median(lengths):.2g} s (median; the longest {max(lengths):.2g} s) in "
            f"{clock() - started:.1f} s"
        )
    return out


@contextmanager
def inductor_cache_in_temp() -> Iterator[str | None]:
    """torch's compiler makes its cache folder (``$TMPDIR/torchinductor_$USER``) as soon as it
    is imported, and the probe stores nothing: unless the user chose the folder
    (``$TORCHINDUCTOR_CACHE_DIR``), it goes into a temporary folder removed afterwards. Yields
    that folder (None: the user's)."""
    if os.environ.get(INDUCTOR_CACHE_ENV):
        yield None
        return
    folder = tempfile.mkdtemp(prefix="wattlab-probe-inductor-")
    os.environ[INDUCTOR_CACHE_ENV] = folder
    try:
        yield folder
    finally:
        if os.environ.get(INDUCTOR_CACHE_ENV) == folder:
            del os.environ[INDUCTOR_CACHE_ENV]
        shutil.rmtree(folder, ignore_errors=True)


def probe(
    advice: Advice,
    trainee: Trainee,
    *,
    seconds: float | None = None,
    carbon: CarbonSettings | None = None,
    device: str | None = None,
    say: Callable[[str], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    seed: int | None = None,
) -> Advice:
    """``advice`` with its candidates measured (see the module). ``seconds``: the probe's
    length (None: the default, which may decide not to probe). ``say``: progress lines.
    ``seed``: the rounds' random order (None: a fresh one)."""
    notes: list[str] = []
    if seconds is None:
        seconds, why_not = default_seconds(advice)
        if why_not:
            return replace(advice, notes=[*advice.notes, why_not], sentence=advice.sentence)
    if not (math.isfinite(seconds) and seconds >= MIN_PROBE_S):
        raise ConfigError(f"--probe needs at least {MIN_PROBE_S:g} s, got {seconds:g}.")
    device = device or probe_device()
    here = device_name(device)
    if not same_device(here, advice.gpu_name):
        return replace(
            advice,
            notes=[
                *advice.notes,
                f"No probe: the probe measures the device it runs on, this machine's {here}, "
                f"and cannot measure {advice.gpu_name} here; the advice is PRE's for "
                f"{advice.gpu_name}.",
            ],
        )
    carbon = carbon or advice.carbon
    candidates: list[Option] = []
    cannot: list[str] = []
    cannot_run: set[Setting] = set()
    kept_out = {"power limit": 0, "gpus": 0}
    for option in advice.rows:
        reason = _runnable(option, device)
        if reason in kept_out:
            kept_out[reason] += 1
            continue
        if reason:
            cannot.append(f"{option.setting.describe()}: {reason}")
            cannot_run.add(option.setting)
            continue
        candidates.append(option)
    if kept_out["power limit"]:
        notes.append(
            f"{kept_out['power limit']} power-limit candidate(s) were not probed (the probe "
            "switches precision, batch size and CUDA graphs in one process); they stay predicted"
        )
    if kept_out["gpus"]:
        notes.append(
            f"{kept_out['gpus']} candidate(s) on other GPU counts were not probed (the probe "
            "trains one GPU in one process); they stay predicted"
        )
    if not any(o.setting == advice.current for o in candidates):
        why = "; ".join(cannot) or "it is not a one-GPU configuration without a power limit"
        return replace(
            advice,
            notes=[
                *advice.notes,
                *notes,
                f"No probe: the probe cannot run the current configuration here ({why}); "
                "the advice is PRE's.",
            ],
        )
    choice = choose_candidates(
        candidates, advice.current, graphs="graphs" in advice.allowed and device == "cuda"
    )
    from wattlab.monitor import EnergyMonitor
    from wattlab.train.factory import time_cap

    rng = random.Random(seed)
    with (
        time_cap(seconds, f"the probe ({seconds:g} s)"),
        inductor_cache_in_temp(),
        EnergyMonitor(carbon=carbon, record_trace=False) as monitor,
    ):
        monitor.begin_window("probe")
        started = clock()
        stop_at, hard_stop_at = started + seconds, started + MAX_OVERRUN * seconds
        run = _run(trainee, choice, device, monitor, stop_at, hard_stop_at, clock, rng, say)
        cost = monitor.end_window("probe")
    measured = measured_rows(run.windows, advice.samples)
    measured = {s: _with_co2e(o, carbon) for s, o in measured.items()}
    if not measured:
        why = "; ".join(f"{s.describe()}: {w}" for s, w in run.failed.items()) or "no time"
        if run.setup_skipped:
            why = (
                f"the model and data took {run.setup_s:.1f} s to set up, and no candidate's "
                f"set-up and windows would have fit within {MAX_OVERRUN:g}x the {seconds:g} s "
                "given"
            )
        return replace(
            advice,
            notes=[
                *advice.notes,
                *notes,
                f"No probe result: no candidate could be measured ({why}); the advice is "
                f"PRE's. The attempt took {cost.duration_s:.1f} s and "
                f"{cost.total_energy_j / 1e3:.3g} kJ ({cost.energy_parts().phrase()}).",
            ],
        )
    choice = replace(choice, unmeasured=[*choice.unmeasured, *run.unmeasured])
    lengths = [w.duration_s for w in run.windows]
    report = ProbeReport(
        device=device,
        device_name=here,
        seconds_given=float(seconds),
        duration_s=cost.duration_s,
        energy_j=cost.total_energy_j,
        co2e_kg=cost.co2e.value_kg,
        provenance=cost.energy_parts().phrase(),
        setup_s=run.setup_s,
        candidate_setup_s=run.candidate_setup_s,
        windows_s=run.windows_s,
        windows=len(run.windows),
        rounds=run.rounds,
        window_s=statistics.median(lengths),
        longest_window_s=max(lengths),
        setup_skipped=run.setup_skipped,
        measured=len(measured),
        pruned=len(choice.pruned),
        unmeasured=len(choice.unmeasured),
        failed=[f"{s.describe()}: {why}" for s, why in run.failed.items()] + cannot,
        window_rows=run.window_rows,
        pre_rows=[o.to_dict() for o in advice.rows],
    )
    return _advice_with(advice, measured, choice, report, notes, {*cannot_run, *run.failed})


def _advice_with(
    advice: Advice,
    measured: dict[Setting, Option],
    choice: Choice,
    report: ProbeReport,
    notes: list[str],
    cannot_run: set[Setting] | frozenset[Setting] = frozenset(),
) -> Advice:
    """The advice ranked on the measured rows and the scaled predictions of the rest
    (``probe_rows.combined``), the probe's cost stated with its share of the advised
    training. A candidate in ``cannot_run`` (it failed, or cannot run on this device) is left
    out of the ranking: it is never advised (the current configuration stays, as it is)."""
    choice = replace(choice, unmeasured=[c for c in choice.unmeasured if c.setting not in measured])
    done = [*advice.notes, *notes, *describe_choice(choice)]
    rows = [o for o in advice.rows if o.setting not in cannot_run or o.is_current]
    if len(rows) < len(advice.rows):
        done.append(
            f"{len(advice.rows) - len(rows)} candidate(s) that could not run here are left out "
            "of the ranking"
        )
    ranked = combined(rows, measured, advice.current, advice.limit)
    ranked = [_with_co2e(o, advice.carbon) for o in ranked]
    first = ranked[0]
    share_e = report.energy_j / first.energy_j if first.energy_j > 0 else math.nan
    share_t = report.duration_s / first.duration_s if first.duration_s > 0 else math.nan
    report = replace(report, training_energy_share=share_e, training_time_share=share_t)
    what = _rows_word(measured)
    scale = scale_of(rows, measured)
    changes = len([s for s in measured if s != advice.current])
    current_word = (
        f"the current configuration {what}"
        if advice.current in measured
        else "the current configuration not measured: savings against PRE's scaled prediction of it"
    )
    if first.setting in measured and first.is_current:
        sentence = (
            f"Keep the current configuration: none of the {changes} change(s) {what} used at "
            f"least {MIN_MEASURED_SAVING:.0%} less energy, and none predicted at least "
            f"{MIN_PREDICTED_SAVING:.0%} less, {advice.limit.describe()}"
        )
    elif first.setting in measured and advice.current in measured:
        sentence = advice_sentence(ranked, advice.limit, MIN_MEASURED_SAVING).rstrip(".")
    else:
        sentence = advice_sentence(ranked, advice.limit, MIN_PREDICTED_SAVING).rstrip(".")
    lead = what if first.setting in measured else "predicted (PRE scaled by the probe)"
    basis = f"probed: {len(measured)} candidate(s) {what}, {current_word}; the advice is {lead}"
    unmeasured = [o for o in ranked if o.setting not in measured]
    if unmeasured:
        done.append(
            f"{len(unmeasured)} row(s) not measured are PRE's predictions for {advice.gpu_name}"
            + (
                f", scaled by the probe's measured/predicted ratio (energy x{scale.energy:.3g}, "
                f"time x{scale.time:.3g}, the median over {scale.count} measured candidate(s))"
                if scale.count
                else ""
            )
        )
    if any(s.cuda_graphs for s in measured):
        done = [n for n in done if not n.startswith("CUDA graphs are not advised")]
    done.append("probe: " + report.describe())
    return replace(
        advice,
        rows=ranked,
        sentence=f"{sentence} ({basis}; {report.cost()}).",
        notes=done,
        probe=report,
    )


def _rows_word(measured: dict[Setting, Option]) -> str:
    """'measured' when every measured row is by its share, else 'estimated'."""
    words = {o.source.split(" ", 1)[0] for o in measured.values()}
    return "measured" if words == {"measured"} else "estimated"


def stored_trainee(runs: Any, run_id: int, model_factory: str | None = None) -> Trainee:
    """The model and data of a stored run (its ``config_json``). A model factory the run names
    is probed (imported, its code run) only when ``model_factory`` names it again; otherwise a
    ConfigError says what would be imported."""
    from wattlab.train.factory_ref import factory_not_imported, is_factory, same_factory

    match = runs[runs["id"] == run_id]
    if not len(match):
        raise ConfigError(f"no run {run_id} in the database.")
    text = match.iloc[0]["config_json"]
    config = json.loads(text) if isinstance(text, str) else dict(text or {})
    trainee = Trainee.from_run_config(config)
    ref = trainee.model_factory or trainee.model
    if ref and is_factory(ref) and not same_factory(ref, model_factory):
        raise ConfigError(factory_not_imported(run_id, ref) + "; nothing was probed.")
    return trainee


__all__ = [
    "DEFAULT_PROBE_S",
    "MIN_MEASURED_SAVING",
    "MIN_ROUNDS",
    "ProbeReport",
    "Trainee",
    "default_seconds",
    "probe",
    "stored_trainee",
]
