"""What ``wattlab compare`` compares: the runs of each side, paired by configuration, and what
differs between the two sides (their fingerprints).

A side is a database, optionally one sweep of it (``DB::SWEEP``) and the runs of one code commit
(``--baseline-commit`` / ``--candidate-commit``, a prefix of the stored ``code_commit``); only
ok runs with a finite energy, a duration and samples count. Configurations pair by their
``config_hash``; when the sides share none and each holds exactly one configuration, those two
are compared (a deliberate change of the configuration, said so).

Both sides may also come out of one sweep (``--sides AXIS=BASE,CAND``: the runs whose grid axis
``AXIS`` has one value or the other), best one run in the order ``abba`` (A B, B A, ...): the
configurations then pair by their other axes, and each baseline run pairs with the candidate
run of the same repetition, next to it in time (a paired analysis).

Two sides are one session when their runs share the same GPU cards (or none) and ran
interleaved: each side's runs began while the other's were going on (their spans of start
times overlap). Sides that ran one after the other are not one session, on any device, however
close in time; ``compare`` then adds the between-session term (``analysis.compare``), since
repetitions within a session cannot show a session's offset.
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from wattlab.analysis.compare import (
    CONFIDENCE,
    THRESHOLD,
    Change,
    compare_paired,
    compare_values,
    sidak_confidence,
)
from wattlab.errors import ConfigError, DataError
from wattlab.experiment.db.stored_run import StoredRun

SIDE_SEPARATOR = "::"
# A session's offset in log energy per sample (its standard deviation), measured on H200s:
# bench/compare_power.py, docs/measured/compare-power-2026-12-05.txt ("session sd").
SESSION_SD_H200 = 0.060
NVML_ENERGY_QUANTUM_J = 0.001  # NVML's energy counter counts millijoules
CLOCK_QUANTUM_S = 1e-6  # a window's edges are read from a monotonic clock (finer than this)


@dataclass(frozen=True)
class SideSpec:
    """One side as given: a database, a sweep (None: all of it), a code commit prefix, and
    (``--sides``) the value of the sweep's grid axis that makes this side."""

    path: str
    sweep: str | None = None
    commit: str | None = None
    axis: str | None = None
    value: str | None = None

    @property
    def name(self) -> str:
        text = self.path + (f"{SIDE_SEPARATOR}{self.sweep}" if self.sweep else "")
        text += f" [{self.axis}={self.value}]" if self.axis is not None else ""
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
    """The runs of one side that can be compared, and a note of those left out. ``pair_keys``
    (sides out of one sweep): each run's id -> the values of the sweep's other grid axes, by
    which its configuration pairs with the other side's; ``order``: that sweep's run order."""

    spec: SideSpec
    runs: tuple[StoredRun, ...]
    left_out: int = 0  # ok runs without a finite energy, duration or samples
    pair_keys: dict[int, str] | None = None
    order: str | None = None


def _usable(run: StoredRun) -> bool:
    return all(
        v is not None and math.isfinite(v) and v > 0
        for v in (run.energy_total_j, run.duration_s, run.samples)
    )


def load_side(spec: SideSpec, configs: Sequence[str] = ()) -> Side:
    """The ok runs of ``spec`` (of ``configs`` only, when given: a config hash or its prefix,
    or a label); a DataError in one sentence when it holds none."""
    runs = _selected_runs(spec, configs)
    usable = [r for r in runs if _usable(r)]
    if not usable:
        raise DataError(
            f"none of the {len(runs)} ok run(s) of {spec.name} has an energy, a duration and "
            "samples to compare per sample."
        )
    return Side(spec, tuple(usable), left_out=len(runs) - len(usable))


def _selected_runs(spec: SideSpec, configs: Sequence[str] = ()) -> list[StoredRun]:
    """The ok runs ``spec`` and ``configs`` select, usable or not; a DataError in one sentence
    when there are none."""
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
    return runs


def _is_config(run: StoredRun, wanted: str) -> bool:
    return run.label == wanted or bool(run.config_hash and run.config_hash.startswith(wanted))


def by_config(
    runs: Iterable[StoredRun], keys: dict[int, str] | None = None
) -> dict[str, list[StoredRun]]:
    """Runs grouped by config hash (by ``keys[run id]`` when given), in the order first seen."""
    out: dict[str, list[StoredRun]] = {}
    for run in runs:
        key = keys.get(int(run.id or 0), "") if keys is not None else run.config_hash or ""
        out.setdefault(key, []).append(run)
    return out


# --- two sides out of one sweep (--sides AXIS=BASE,CAND) ------------------------------------
@dataclass(frozen=True)
class SidesSpec:
    """``--sides AXIS=BASE,CAND``: the sweep's grid axis that tells the sides apart, and the
    baseline's and the candidate's values of it (as text)."""

    axis: str
    baseline: str
    candidate: str


def parse_sides(text: str) -> SidesSpec:
    """``AXIS=BASE,CAND`` (or ``AXIS=BASE,AXIS=CAND``) as a SidesSpec; a ConfigError in one
    sentence otherwise."""
    axis, eq, values = text.partition("=")
    parts = values.split(",")
    if len(parts) == 2 and parts[1].startswith(f"{axis.strip()}="):
        parts[1] = parts[1][len(axis.strip()) + 1 :]
    parts = [p.strip() for p in parts]
    if not eq or not axis.strip() or len(parts) != 2 or not all(parts):
        raise ConfigError(
            f"--sides {text!r}: expected AXIS=BASELINE,CANDIDATE, such as side=main,pr (a grid "
            "axis of the sweep and its two values)."
        )
    if parts[0] == parts[1]:
        raise ConfigError(
            f"--sides {text!r} names the same value twice; give the baseline's value and the "
            "candidate's."
        )
    return SidesSpec(axis.strip(), parts[0], parts[1])


def _axis_value(run: StoredRun, axis: str) -> object:
    """The value of grid axis ``axis`` in ``run``'s stored configuration (a command's axes, or
    the trainer's RunConfig field); None when it has none."""
    config = run.config_json or {}
    if config.get("kind") == "command":
        axes = config.get("axes")
        return axes.get(axis) if isinstance(axes, dict) else None
    return config.get(axis)


def _canonical(value: object) -> str:
    """One text for a grid value whatever its stored type: 300, 300.0 and "300" are one."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    try:
        number = float(str(value))
    except ValueError:
        return str(value)
    return f"{number:g}" if math.isfinite(number) else str(value)


def split_sweep(spec: SideSpec, sides: SidesSpec, configs: Sequence[str] = ()) -> tuple[Side, Side]:
    """The two sides held by one sweep: its ok runs whose grid axis ``sides.axis`` has the
    baseline's value, and those with the candidate's; each run keyed by its other grid axes
    (``Side.pair_keys``). A ConfigError or DataError in one sentence when the side is not one
    sweep, the axis is no grid axis of it, or a value is not among the axis's."""
    from wattlab.experiment.db.store import open_store

    if spec.sweep is None:
        raise ConfigError(
            f"--sides needs one sweep: give {spec.path}{SIDE_SEPARATOR}SWEEP as the only side."
        )
    whole = _selected_runs(spec, configs)
    with open_store(spec.path, readonly=True) as store:
        stored = store.sweep_spec(spec.sweep) or {}
    found = stored.get("grid")
    grid: dict[str, Any] = found if isinstance(found, dict) else {}
    if sides.axis not in grid:
        axes = ", ".join(str(a) for a in grid) or "none recorded"
        raise ConfigError(
            f"--sides: {sides.axis!r} is not a grid axis of sweep {spec.sweep!r} (its axes: "
            f"{axes})."
        )
    held = [_canonical(v) for v in grid[sides.axis]]
    for value in (sides.baseline, sides.candidate):
        if _canonical(value) not in held:
            shown = ", ".join(str(v) for v in grid[sides.axis])
            raise ConfigError(
                f"--sides: {value!r} is not a value of grid axis {sides.axis!r} of sweep "
                f"{spec.sweep!r} (its values: {shown})."
            )
    others = [a for a in grid if a != sides.axis]
    order = stored.get("order") if isinstance(stored.get("order"), str) else None

    def side(value: str) -> Side:
        mine = [r for r in whole if _canonical(_axis_value(r, sides.axis)) == _canonical(value)]
        runs = [r for r in mine if _usable(r)]
        if not runs:
            raise DataError(
                f"sweep {spec.sweep!r} of {spec.path} holds no ok run with {sides.axis}={value} "
                f"that has an energy, a duration and samples ({len(mine)} ok run(s) with it)."
            )
        keys = {
            int(r.id or 0): ", ".join(f"{a}={_canonical(_axis_value(r, a))}" for a in others)
            for r in runs
        }
        return Side(
            SideSpec(spec.path, spec.sweep, spec.commit, sides.axis, value),
            tuple(runs),
            left_out=len(mine) - len(runs),
            pair_keys=keys,
            order=order,
        )

    return side(sides.baseline), side(sides.candidate)


def shared_runs(baseline: Side, candidate: Side) -> set[int]:
    """The ids of runs on both sides (the same run of the same database file)."""
    import os

    try:
        same_file = os.path.samefile(baseline.spec.path, candidate.spec.path)
    except OSError:
        same_file = False
    if not same_file:
        return set()
    return {int(r.id or 0) for r in baseline.runs} & {int(r.id or 0) for r in candidate.runs}


def refuse_the_same_runs(baseline: Side, candidate: Side) -> list[str]:
    """A DataError when both sides are the very same runs (a database or sweep compared with
    itself shows nothing); the notes to give when they share only some."""
    shared = shared_runs(baseline, candidate)
    if not shared:
        return []
    ids_b, ids_c = ({int(r.id or 0) for r in side.runs} for side in (baseline, candidate))
    if shared == ids_b == ids_c:
        raise DataError(
            f"both sides are the same {len(shared)} run(s) of {baseline.spec.path}: a comparison "
            "of runs with themselves shows nothing; give two sweeps or commits, or one sweep "
            "with --sides AXIS=BASE,CAND."
        )
    return [
        f"{len(shared)} run(s) are on both sides (the same runs of one database): the two "
        "sides are not independent, and the interval is too narrow."
    ]


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


def started_span(runs: Sequence[StoredRun]) -> tuple[str, str] | None:
    """The first and the last start time (as stored, UTC ISO-8601) of ``runs``; None when none
    is recorded."""
    stamped = sorted(
        ((t, str(r.started_at)) for r in runs if (t := _started(r)) is not None),
        key=lambda pair: pair[0],
    )
    return (stamped[0][1], stamped[-1][1]) if stamped else None


def timing(baseline: Sequence[StoredRun], candidate: Sequence[StoredRun]) -> str:
    """How the sides ran in time: "interleaved" when each side's span of start times overlaps
    the other's (runs of one side began while the other's were going on), "sequential" when
    one side's runs all began after the other's, "unknown" without start times."""
    times_b = [t for t in map(_started, baseline) if t is not None]
    times_c = [t for t in map(_started, candidate) if t is not None]
    if not times_b or not times_c:
        return "unknown"
    if max(times_b) < min(times_c) or max(times_c) < min(times_b):
        return "sequential"
    return "interleaved"


def same_session(baseline: Sequence[StoredRun], candidate: Sequence[StoredRun]) -> bool:
    """Whether the two sides are one session: the same GPU cards (or none on both) and runs
    that interleave in time. Sides run one after the other are two sessions, however close
    (the machine's load or a card's temperature may have changed in between), on any device."""
    cards_b = {r.gpu_uuids for r in baseline}
    cards_c = {r.gpu_uuids for r in candidate}
    if cards_b != cards_c:
        return False
    return timing(baseline, candidate) == "interleaved"


def host_load(runs: Sequence[StoredRun]) -> float | None:
    """The mean 1-minute load average per logical CPU read just before the runs (the sweep's
    previous run included), from ``idle_json``'s ``host`` entry; None when not recorded."""
    loads = []
    for run in runs:
        host = (run.idle_json or {}).get("host")
        if isinstance(host, dict):
            load, cpus = host.get("load_1min"), host.get("cpus")
            if isinstance(load, int | float) and isinstance(cpus, int) and cpus > 0:
                loads.append(float(load) / cpus)
    return statistics.fmean(loads) if loads else None


def estimated_share(runs: Sequence[StoredRun]) -> float:
    """The share of these runs' energy that a model estimated (0 when none was)."""
    from wattlab.analysis.energy_shares import rows_parts

    return rows_parts(runs).shares().get("estimated", 0.0)


def provenance_phrase(runs: Sequence[StoredRun]) -> str:
    """These runs' energy by provenance, by share (``wording.EnergyParts.phrase``)."""
    from wattlab.analysis.energy_shares import rows_parts

    return rows_parts(runs).phrase()


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
    timing: str = "unknown"  # interleaved | sequential | unknown (``timing``)
    one_sweep: bool = False  # both sides out of one sweep (--sides)

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
    """The (baseline hash, candidate hash) pairs to compare and notes on what is left out
    (sides out of one sweep: their pairing keys instead of hashes)."""
    b = by_config(baseline.runs, baseline.pair_keys)
    c = by_config(candidate.runs, candidate.pair_keys)
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
    docstring); ``session_sd`` None: SESSION_SD_H200 across sessions, 0 within one. Sides out
    of one sweep (``split_sweep``) are compared pair by pair (each baseline run with the
    candidate run of the same repetition) where at least 2 such pairs exist."""
    pairs, notes = pair(baseline, candidate)
    notes = refuse_the_same_runs(baseline, candidate) + notes
    b = by_config(baseline.runs, baseline.pair_keys)
    c = by_config(candidate.runs, candidate.pair_keys)
    one_sweep = baseline.pair_keys is not None and candidate.pair_keys is not None
    if one_sweep and baseline.order == "sequential":
        notes.append(
            "the sweep ran in the order sequential: every pass ran the two sides in the same "
            "order, so a steady drift of the machine is not cancelled between them; run it with "
            "order: abba."
        )
    one_session = same_session(baseline.runs, candidate.runs)
    used_sd = session_sd if session_sd is not None else (0.0 if one_session else SESSION_SD_H200)
    each = sidak_confidence(confidence, len(pairs))
    configs = []
    for hb, hc in pairs:
        rb, rc = b[hb], c[hc]
        label = rb[0].label or hb
        if hc != hb or one_sweep:
            label = f"{label} -> {rc[0].label or hc}"
        matched = _by_repetition(rb, rc) if one_sweep else []
        if len(matched) >= 2:
            unmatched = len(rb) + len(rc) - 2 * len(matched)
            if unmatched:
                notes.append(
                    f"{label}: {unmatched} run(s) without a run of the same repetition on the "
                    "other side are left out of the paired analysis."
                )
            rb, rc = [x for x, _ in matched], [y for _, y in matched]
        metric = compare_paired if len(matched) >= 2 else compare_values
        energy = metric(
            [energy_per_sample_j(r) for r in rb],
            [energy_per_sample_j(r) for r in rc],
            resolution=energy_resolution(rb) + energy_resolution(rc),
            threshold=threshold,
            confidence=each,
            session_sd=used_sd,
        )
        time = metric(
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
        timing=timing(baseline.runs, candidate.runs),
        one_sweep=one_sweep,
    )


def _by_repetition(
    baseline: Sequence[StoredRun], candidate: Sequence[StoredRun]
) -> list[tuple[StoredRun, StoredRun]]:
    """Each baseline run with the candidate run of the same repetition (one sweep's runs of
    one repetition ran in the same pass, next to each other under ``order: abba``)."""
    by_rep = {r.repetition: r for r in candidate}
    return [(r, by_rep[r.repetition]) for r in baseline if r.repetition in by_rep]
