"""What ``wattlab compare`` compares: the runs of each side, paired by configuration, and what
differs between the two sides (their fingerprints).

A side is a database, optionally one sweep of it (``DB::SWEEP``) and the runs of one code commit
(``--baseline-commit`` / ``--candidate-commit``, a prefix of the stored ``code_commit``); only
ok runs with a finite energy, a duration and samples count. Configurations pair by their
``config_hash``; when the sides share none and each holds exactly one configuration, those two
are compared (a deliberate change of the configuration, said so).

Two sides are one session when their runs share the same GPU cards (or none) and lie within
``SESSION_GAP_S`` of each other; otherwise ``compare`` adds the between-session term
(``analysis.compare``), since repetitions within a session cannot show a session's offset.
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from wattlab.analysis.compare import (
    CONFIDENCE,
    THRESHOLD,
    Change,
    compare_values,
    sidak_confidence,
)
from wattlab.errors import ConfigError, DataError
from wattlab.experiment.db.stored_run import StoredRun

SIDE_SEPARATOR = "::"
SESSION_GAP_S = 3600.0  # runs further apart than this (or on other cards): another session
# A session's offset in log energy per sample (its standard deviation), measured on H200s:
# bench/compare_power.py, docs/measured/compare-power-2026-12-05.txt ("session sd").
SESSION_SD_H200 = 0.060
NVML_ENERGY_QUANTUM_J = 0.001  # NVML's energy counter counts millijoules
CLOCK_QUANTUM_S = 1e-6  # a window's edges are read from a monotonic clock (finer than this)


@dataclass(frozen=True)
class SideSpec:
    """One side as given: a database, a sweep (None: all of it), a code commit prefix."""

    path: str
    sweep: str | None = None
    commit: str | None = None

    @property
    def name(self) -> str:
        text = self.path + (f"{SIDE_SEPARATOR}{self.sweep}" if self.sweep else "")
        return text + (f" @ {self.commit}" if self.commit else "")


def parse_side(text: str, commit: str | None = None) -> SideSpec:
    """``DB`` or ``DB::SWEEP`` (and a commit prefix) as a SideSpec; a ConfigError when empty. A
    file whose own name holds ``::`` (``x::y.db``) is that database, not DB::SWEEP."""
    path, sweep = text, None
    if SIDE_SEPARATOR in text and not Path(text).expanduser().is_file():
        path, sweep = text.rsplit(SIDE_SEPARATOR, 1)
        if not path or not sweep:
            raise ConfigError(
                f"{text!r} is neither DB nor DB::SWEEP; give a database file, optionally "
                "followed by :: and a sweep name."
            )
    if not path:
        raise ConfigError("a side of the comparison is empty; give a database file.")
    if commit is not None and not commit.strip():
        raise ConfigError("a commit to select runs by is empty; give a commit or its prefix.")
    return SideSpec(path, sweep, None if commit is None else commit.strip())


@dataclass(frozen=True)
class Side:
    """The runs of one side that can be compared, and a note of those left out."""

    spec: SideSpec
    runs: tuple[StoredRun, ...]
    left_out: int = 0  # ok runs without a finite energy, duration or samples


def _usable(run: StoredRun) -> bool:
    return all(
        v is not None and math.isfinite(v) and v > 0
        for v in (run.energy_total_j, run.duration_s, run.samples)
    )


def load_side(spec: SideSpec, configs: Sequence[str] = ()) -> Side:
    """The ok runs of ``spec`` (of ``configs`` only, when given: a config hash or its prefix,
    or a label); a DataError in one sentence when it holds none."""
    from wattlab.experiment.db.store import open_store

    if spec.sweep is not None and not Path(spec.path).expanduser().exists():
        whole = f"{spec.path}{SIDE_SEPARATOR}{spec.sweep}"
        raise DataError(
            f"no wattlab database at {whole}, nor at {spec.path} (reading it as DB::SWEEP, "
            f"sweep {spec.sweep!r}); check the path."
        )
    with open_store(spec.path, readonly=True) as store:
        runs = store.stored_runs(sweep=spec.sweep, status="ok")
        sweeps = (
            []
            if runs or spec.sweep is None
            else sorted({r.sweep for r in store.stored_runs(status="ok") if r.sweep})
        )
    if not runs:
        if spec.sweep is not None:
            known = ", ".join(sweeps[:8]) or "none"
            raise DataError(
                f"{spec.path} holds no ok run of sweep {spec.sweep!r} (its sweeps: {known})."
            )
        raise DataError(f"{spec.path} holds no ok run to compare.")
    if spec.commit is not None:
        commits = sorted({r.code_commit for r in runs if r.code_commit})
        runs = [r for r in runs if r.code_commit and r.code_commit.startswith(spec.commit)]
        if not runs:
            held = ", ".join(c[:12] for c in commits[:6]) if commits else "none recorded"
            raise DataError(
                f"no ok run of {spec.name} was made at code commit {spec.commit} (commits "
                f"there: {held})."
            )
    if configs:
        runs = [r for r in runs if any(_is_config(r, c) for c in configs)]
        if not runs:
            raise DataError(
                f"no ok run of {spec.name} matches --config {', '.join(configs)} (a config "
                "hash, its prefix, or a label)."
            )
    usable = [r for r in runs if _usable(r)]
    if not usable:
        raise DataError(
            f"none of the {len(runs)} ok run(s) of {spec.name} has an energy, a duration and "
            "samples to compare per sample."
        )
    return Side(spec, tuple(usable), left_out=len(runs) - len(usable))


def _is_config(run: StoredRun, wanted: str) -> bool:
    return run.label == wanted or bool(run.config_hash and run.config_hash.startswith(wanted))


def by_config(runs: Iterable[StoredRun]) -> dict[str, list[StoredRun]]:
    """Runs grouped by config hash, in the order first seen."""
    out: dict[str, list[StoredRun]] = {}
    for run in runs:
        out.setdefault(run.config_hash or "", []).append(run)
    return out


def energy_per_sample_j(run: StoredRun) -> float:
    return float(run.energy_total_j or math.nan) / float(run.samples or math.nan)


def time_per_sample_s(run: StoredRun) -> float:
    return float(run.duration_s or math.nan) / float(run.samples or math.nan)


def energy_resolution(runs: Sequence[StoredRun]) -> float:
    """How far a side's mean energy per sample could be off through its counters' resolution,
    as a fraction: NVML's millijoule read at both ends of the window, per GPU, over the run's
    energy (0 on runs without a GPU counter: RAPL counts finer, a model has no counter)."""
    fractions = [
        2 * NVML_ENERGY_QUANTUM_J * (r.gpus or 0) / float(r.energy_total_j or math.inf)
        for r in runs
    ]
    return statistics.fmean(fractions) if fractions else 0.0


def time_resolution(runs: Sequence[StoredRun]) -> float:
    """The same for time per sample: the clock's resolution at both edges of the window."""
    fractions = [2 * CLOCK_QUANTUM_S / float(r.duration_s or math.inf) for r in runs]
    return statistics.fmean(fractions) if fractions else 0.0


# --- what differs between the sides --------------------------------------------------------
# (StoredRun field, what people call it, whether a difference is one of hardware)
FINGERPRINT: tuple[tuple[str, str, bool], ...] = (
    ("device", "device", True),
    ("gpu_name", "GPU", True),
    ("gpus", "GPUs per run", True),
    ("power_limit_w", "power limit (W)", True),
    ("gpu_uuids", "GPU cards (UUID)", False),
    ("hostname", "host", False),
    ("cpu_model", "CPU", False),
    ("driver", "NVIDIA driver", False),
    ("cuda_version", "CUDA", False),
    ("cudnn_version", "cuDNN", False),
    ("torch_version", "torch", False),
    ("wattlab_version", "wattlab", False),
    ("code_commit", "code commit", False),
    ("code_dirty", "uncommitted changes", False),
)
NOT_RECORDED = "not recorded"


def _shown(field_name: str, value: object) -> str:
    if value is None:
        return NOT_RECORDED
    if field_name == "code_dirty":
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def fingerprint_values(runs: Sequence[StoredRun]) -> dict[str, list[str]]:
    """Each fingerprint field's distinct values over ``runs`` (as shown), sorted."""
    return {
        name: sorted({_shown(name, getattr(r, name)) for r in runs}) for name, _, _ in FINGERPRINT
    }


@dataclass(frozen=True)
class Difference:
    """A fingerprint field whose values differ between the sides."""

    field: str
    label: str
    hardware: bool
    baseline: tuple[str, ...]
    candidate: tuple[str, ...]

    @property
    def mismatch(self) -> bool:
        """A hardware difference both sides recorded (not one side's missing record)."""
        recorded = all(v != (NOT_RECORDED,) for v in (self.baseline, self.candidate))
        return self.hardware and recorded


def differences(baseline: Sequence[StoredRun], candidate: Sequence[StoredRun]) -> list[Difference]:
    """The fingerprint fields whose values differ between the two sides."""
    b, c = fingerprint_values(baseline), fingerprint_values(candidate)
    return [
        Difference(name, label, hardware, tuple(b[name]), tuple(c[name]))
        for name, label, hardware in FINGERPRINT
        if b[name] != c[name]
    ]


def _started(run: StoredRun) -> float | None:
    try:
        return dt.datetime.fromisoformat(str(run.started_at)).timestamp()
    except ValueError:
        return None


def same_session(baseline: Sequence[StoredRun], candidate: Sequence[StoredRun]) -> bool:
    """Whether the two sides ran on the same GPU cards (or none) within SESSION_GAP_S."""
    cards_b = {r.gpu_uuids for r in baseline}
    cards_c = {r.gpu_uuids for r in candidate}
    if cards_b != cards_c:
        return False
    times_b = [t for t in map(_started, baseline) if t is not None]
    times_c = [t for t in map(_started, candidate) if t is not None]
    if not times_b or not times_c:
        return False
    gap = max(min(times_c) - max(times_b), min(times_b) - max(times_c), 0.0)
    return gap <= SESSION_GAP_S


def idle_summary(
    runs: Sequence[StoredRun], others: Sequence[StoredRun] = ()
) -> dict[str, float | int | None]:
    """Mean GPU power (W) and temperature (C) read just before the runs (None when not
    recorded), and how many readings came less than ``SETTLED_AFTER_S`` after another run
    (of ``runs`` or ``others``, on the same host) had ended: the card was not at rest
    (``idle_settle``)."""
    from wattlab.analysis.idle_settle import RunSpan, unsettled_readings

    power = [r.idle_power_w for r in runs if r.idle_power_w is not None]
    temp = [r.idle_temperature_c for r in runs if r.idle_temperature_c is not None]

    def span(run: StoredRun) -> RunSpan:
        return RunSpan(run.hostname, run.started_at, run.finished_at)

    read = [span(r) for r in runs if r.idle_power_w is not None]
    return {
        "idle_power_w": statistics.fmean(power) if power else None,
        "idle_temperature_c": statistics.fmean(temp) if temp else None,
        "idle_readings": len(read),
        "idle_readings_not_at_rest": unsettled_readings(read, [span(r) for r in (*runs, *others)]),
    }


# --- the comparison --------------------------------------------------------------------------
@dataclass(frozen=True)
class ConfigComparison:
    """One configuration (or a pair of configurations) compared on both metrics."""

    label: str
    baseline_hash: str
    candidate_hash: str
    energy: Change  # energy per sample (J)
    time: Change  # time per sample (s)


@dataclass(frozen=True)
class Comparison:
    """Everything ``compare`` says: the sides, each configuration's changes, what differs."""

    baseline: Side
    candidate: Side
    configs: tuple[ConfigComparison, ...]
    differences: tuple[Difference, ...]
    same_session: bool
    session_sd: float
    threshold: float
    confidence: float  # for the whole gate (every configuration together)
    config_confidence: float  # each configuration's (Sidak)
    notes: tuple[str, ...] = field(default=())

    @property
    def exceeds(self) -> bool:
        """The gate fails: some configuration's energy per sample regressed, possibly by the
        threshold or more."""
        return any(c.energy.exceeds for c in self.configs)

    @property
    def hardware_mismatch(self) -> list[Difference]:
        return [d for d in self.differences if d.mismatch]

    @cached_property
    def idle(self) -> tuple[dict[str, float | int | None], dict[str, float | int | None]]:
        """``idle_summary`` of the baseline and of the candidate (each against the other's
        runs too), computed once for the Markdown and the JSON."""
        return (
            idle_summary(self.baseline.runs, self.candidate.runs),
            idle_summary(self.candidate.runs, self.baseline.runs),
        )


def pair(baseline: Side, candidate: Side) -> tuple[list[tuple[str, str]], list[str]]:
    """The (baseline hash, candidate hash) pairs to compare and notes on what is left out."""
    b, c = by_config(baseline.runs), by_config(candidate.runs)
    common = [h for h in b if h in c]
    notes: list[str] = []
    if not common:
        if len(b) == 1 and len(c) == 1:
            (hb,), (hc,) = b, c
            notes.append(
                f"the two sides hold one configuration each, and not the same one "
                f"({b[hb][0].label} against {c[hc][0].label}): they are compared as a pair."
            )
            return [(hb, hc)], notes
        raise DataError(
            f"the baseline ({len(b)} configurations) and the candidate ({len(c)}) share no "
            "configuration; select one on each side (--config) or compare like sweeps."
        )
    only_b = [b[h][0].label or h for h in b if h not in c]
    only_c = [c[h][0].label or h for h in c if h not in b]
    for where, labels in (("baseline", only_b), ("candidate", only_c)):
        if labels:
            shown = ", ".join(str(x) for x in labels[:4]) + (", ..." if len(labels) > 4 else "")
            notes.append(
                f"{len(labels)} configuration(s) only in the {where}, not compared: {shown}."
            )
    return [(h, h) for h in common], notes


def compare_sides(
    baseline: Side,
    candidate: Side,
    *,
    threshold: float = THRESHOLD,
    confidence: float = CONFIDENCE,
    session_sd: float | None = None,
) -> Comparison:
    """Compare ``candidate`` with ``baseline``, configuration by configuration (see the module
    docstring); ``session_sd`` None: SESSION_SD_H200 across sessions, 0 within one."""
    pairs, notes = pair(baseline, candidate)
    b, c = by_config(baseline.runs), by_config(candidate.runs)
    one_session = same_session(baseline.runs, candidate.runs)
    used_sd = session_sd if session_sd is not None else (0.0 if one_session else SESSION_SD_H200)
    each = sidak_confidence(confidence, len(pairs))
    configs = []
    for hb, hc in pairs:
        rb, rc = b[hb], c[hc]
        label = rb[0].label or hb
        if hc != hb:
            label = f"{label} -> {rc[0].label or hc}"
        energy = compare_values(
            [energy_per_sample_j(r) for r in rb],
            [energy_per_sample_j(r) for r in rc],
            resolution=energy_resolution(rb) + energy_resolution(rc),
            threshold=threshold,
            confidence=each,
            session_sd=used_sd,
        )
        time = compare_values(
            [time_per_sample_s(r) for r in rb],
            [time_per_sample_s(r) for r in rc],
            resolution=time_resolution(rb) + time_resolution(rc),
            threshold=threshold,
            confidence=each,
            session_sd=used_sd,
        )
        configs.append(ConfigComparison(label, hb, hc, energy, time))
    for side in (baseline, candidate):
        if side.left_out:
            notes.append(
                f"{side.left_out} ok run(s) of {side.spec.name} without an energy, a duration "
                "or samples are left out."
            )
    return Comparison(
        baseline=baseline,
        candidate=candidate,
        configs=tuple(configs),
        differences=tuple(differences(baseline.runs, candidate.runs)),
        same_session=one_session,
        session_sd=used_sd,
        threshold=threshold,
        confidence=confidence,
        config_confidence=each,
        notes=tuple(notes),
    )
