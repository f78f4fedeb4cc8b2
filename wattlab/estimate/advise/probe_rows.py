"""The probe's arithmetic: which candidates to measure, and ranked rows from what was measured.
No torch, no GPU: ``probe`` runs the candidates; this module decides and reads.

Choosing (``choose_candidates``). PRE's prediction of each candidate orders them (least predicted
energy first) and prunes those it is sure lose: a candidate whose predicted energy interval lies
wholly above the interval of the candidate predicted best is left out, unless it is the current
configuration (always measured: every saving is against it). CUDA graphs have no prediction
(the reference set has no graphs runs); a graphs candidate is ordered with its eager twin and
kept whenever the twin is. The probe sets the candidates up in PRE's order while its time
allows (``probe.py``): the candidates PRE puts first are where the advice is decided, and a new
shape's cuDNN autotuning can take half a minute (fp32 at batch 768 on the H200,
docs/advise.md), so the current configuration is not put first; when it is left unmeasured,
savings are against PRE's scaled prediction of it.

Reading (``measured_rows``). A measured candidate has several short windows, interleaved with
the other candidates' in rounds. Its energy and time per image are the medians over its
windows; the interval is the range of its windows, each widened by its counter resolution
(the window's ``uncertainty_j``). The advice's totals are per image x the advice's images
(energy and time grow with the images trained). The provenance is by share, summed over the
windows (``wording.EnergyParts``).

Ranking measured and predicted rows together (``combined``). PRE's rows of the candidates the
probe did not measure are scaled by the probe's own measured/predicted ratio (the median over
the measured candidates that PRE predicted), so that they speak of this machine's energy and
are comparable with the measured rows; they stay marked "predicted". A predicted row may lead
only when it is predicted to use at least ``MIN_PREDICTED_SAVING`` less than the best measured
row: a measured row beats an equally good prediction. Measured changes within
``MIN_MEASURED_SAVING`` of the leading one are a tie (their windows cannot tell them apart), and
the tie goes to the one PRE predicts least energy for. A change leads the current configuration
when it saves ``MIN_MEASURED_SAVING`` against a measured current configuration, and
``MIN_PREDICTED_SAVING`` against a predicted one.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from wattlab.estimate.advise.ranking import Limit, Option, Setting, rank
from wattlab.wording import EnergyParts

# A candidate's set-up before any was timed (cuDNN's autotuning of a new shape and dtype in one
# warm process; docs/advise.md); later ones expect the median of those timed so far.
SETUP_GUESS_S = {"cuda": 3.0, "cpu": 1.0}
# a measured saving leads when it is at least this share: interleaved windows of one
# configuration agree within ~2 % (docs/advise.md)
MIN_MEASURED_SAVING = 0.02
# a predicted (unmeasured) row leads only when it beats the best measured row by this share
MIN_PREDICTED_SAVING = 0.05
GRAPHS_PRECISIONS = ("fp32", "tf32", "amp-bf16")  # what --cuda-graphs supports (one GPU)


@dataclass(frozen=True)
class Candidate:
    """A setting to measure, with PRE's prediction of it (None for CUDA graphs)."""

    setting: Setting
    predicted: Option | None
    reason: str = ""  # why it is measured (or, for a pruned one, why not)


@dataclass(frozen=True)
class Choice:
    measure: list[Candidate]
    pruned: list[Candidate]  # PRE is sure they lose
    unmeasured: list[Candidate]  # no time left for them


def _key(option: Option | None) -> tuple[float, float]:
    if option is None:
        return (math.inf, math.inf)
    return (option.energy_j, option.duration_s)


def choose_candidates(
    predicted: Sequence[Option],
    current: Setting,
    *,
    graphs: bool,
) -> Choice:
    """The candidates to measure, in the order to set them up (see the module docstring).
    ``predicted``: PRE's rows of the non-graph settings (the advisor's); ``graphs``: add a
    CUDA-graphs twin of every setting whose precision supports it (one GPU, no power limit).
    ``unmeasured`` is left empty: the probe moves there what its time did not reach. The
    current configuration is never pruned."""
    by_setting = {o.setting: o for o in predicted}
    if current not in by_setting:
        raise ValueError("the current configuration must be among the predicted rows")
    best = min(predicted, key=lambda o: o.energy_high_j)
    keep: list[Candidate] = []
    pruned: list[Candidate] = []
    for option in sorted(predicted, key=lambda o: (o.energy_j, o.duration_s)):
        twin_ok = (
            graphs
            and option.setting.precision in GRAPHS_PRECISIONS
            and option.setting.gpus == 1
            and option.setting.power_limit_w is None
        )
        twins = [Setting(**{**option.setting.__dict__, "cuda_graphs": True})] if twin_ok else []
        if option.setting != current and option.energy_low_j > best.energy_high_j:
            why = (
                f"PRE is sure it loses: at least {option.energy_low_j / 1e3:.3g} kJ against at "
                f"most {best.energy_high_j / 1e3:.3g} kJ for {best.setting.changes_from(current)}"
            )
            pruned.append(Candidate(option.setting, option, why))
            pruned += [Candidate(t, None, why + " (its eager twin)") for t in twins]
            continue
        keep.append(Candidate(option.setting, option, "PRE cannot rule it out"))
        keep += [Candidate(t, None, "CUDA graphs: no prediction, measured") for t in twins]
    return Choice(keep, pruned, [])


@dataclass(frozen=True)
class Measured:
    """One measured window of a candidate: its images, energy (J), duration (s), the counter
    resolution of its energy (J) and its energy by kind and provenance."""

    setting: Setting
    samples: float
    energy_j: float
    duration_s: float
    uncertainty_j: float = 0.0
    parts: EnergyParts | None = None


def windows_parts(windows: Iterable[Measured]) -> EnergyParts:
    """The windows' energy by kind and provenance, summed."""
    total = EnergyParts({})
    for window in windows:
        if window.parts is not None:
            total = total + window.parts
    return total


def provenance_word(parts: EnergyParts) -> str:
    """'measured' when counters or sampled power gave most of the energy, else 'estimated'."""
    return "measured" if parts.total_j > 0 and parts.measured_share() >= 0.5 else "estimated"


def measured_rows(runs: Iterable[Measured], samples: float) -> dict[Setting, Option]:
    """One row per measured setting, scaled to ``samples`` images (see the module docstring)."""
    by_setting: dict[Setting, list[Measured]] = {}
    for run in runs:
        if run.samples > 0 and math.isfinite(run.energy_j) and math.isfinite(run.duration_s):
            by_setting.setdefault(run.setting, []).append(run)
    out = {}
    for setting, items in by_setting.items():
        energy = [r.energy_j / r.samples for r in items]
        time = [r.duration_s / r.samples for r in items]
        resolution = [r.uncertainty_j / r.samples for r in items]
        low = min(e - u for e, u in zip(energy, resolution, strict=True))
        high = max(e + u for e, u in zip(energy, resolution, strict=True))
        n = len(items)
        parts = windows_parts(items)
        phrase = parts.phrase() if parts.total_j > 0 else "provenance unknown"
        source = f"{provenance_word(parts)} (probe, {n} window{'s' if n > 1 else ''}: {phrase})"
        spread = (
            "the counter's resolution"
            if n == 1
            else f"the range of {n} interleaved windows and the counter's resolution"
        )
        out[setting] = Option(
            setting=setting,
            energy_j=statistics.median(energy) * samples,
            duration_s=statistics.median(time) * samples,
            energy_low_j=max(0.0, low) * samples,
            energy_high_j=high * samples,
            duration_low_s=min(time) * samples,
            duration_high_s=max(time) * samples,
            source=source,
            notes=f"interval: {spread}",
            extra={"windows": n},
        )
    return out


@dataclass(frozen=True)
class Scale:
    """The probe's measured/predicted ratios (energy, time): the median over the measured
    candidates PRE predicted, and how many that is (0: no ratio, 1.0 used)."""

    energy: float = 1.0
    time: float = 1.0
    count: int = 0


def scale_of(predicted: Sequence[Option], measured: dict[Setting, Option]) -> Scale:
    pairs = [(measured[o.setting], o) for o in predicted if o.setting in measured]
    pairs = [(m, p) for m, p in pairs if p.energy_j > 0 and p.duration_s > 0]
    if not pairs:
        return Scale()
    return Scale(
        statistics.median(m.energy_j / p.energy_j for m, p in pairs),
        statistics.median(m.duration_s / p.duration_s for m, p in pairs),
        len(pairs),
    )


def scaled(option: Option, scale: Scale) -> Option:
    """PRE's row for this machine: energy and time x the probe's ratios, still 'predicted'."""
    if scale.count == 0:
        return option
    e, t = scale.energy, scale.time
    return option.scaled(
        e, t, f"predicted (PRE x{e:.3g} energy, x{t:.3g} time: the probe's measured/predicted)"
    )


def _ties_to_pre(
    ranked: list[Option],
    measured: dict[Setting, Option],
    predicted: Sequence[Option],
    floor: float,
) -> list[Option]:
    """When the leading measured change is within ``MIN_MEASURED_SAVING`` of other measured
    changes (a difference under the windows' own spread), the tie goes to the one PRE
    predicts least energy for: the measurement cannot tell them apart, the prior can."""
    first = ranked[0]
    if first.setting not in measured or first.is_current:
        return ranked
    ties = [
        o
        for o in ranked
        if o.setting in measured
        and o.meets_limit
        and not o.is_current
        and o.saving >= floor
        and o.energy_j <= first.energy_j * (1.0 + MIN_MEASURED_SAVING)
    ]
    prior = {o.setting: o.energy_j for o in predicted}
    pick = min(ties, key=lambda o: (prior.get(o.setting, math.inf), o.energy_j))
    return [pick, *(o for o in ranked if o is not pick)] if pick is not first else ranked


def combined(
    predicted: Sequence[Option],
    measured: dict[Setting, Option],
    current: Setting,
    limit: Limit,
) -> list[Option]:
    """Measured rows and the scaled predictions of the rest, ranked together (see the module
    docstring); ``current`` must be among them, measured or predicted."""
    scale = scale_of(predicted, measured)
    rest = [scaled(o, scale) for o in predicted if o.setting not in measured]
    floor = MIN_MEASURED_SAVING if current in measured else MIN_PREDICTED_SAVING
    ranked = rank([*measured.values(), *rest], current, limit, floor)
    ranked = _ties_to_pre(ranked, measured, predicted, floor)
    first = ranked[0]
    if first.setting not in measured and first.meets_limit and not first.is_current:
        best = next((o for o in ranked if o.setting in measured and o.meets_limit), None)
        if best is not None and first.energy_j > best.energy_j * (1.0 - MIN_PREDICTED_SAVING):
            ranked = [best, *(o for o in ranked if o is not best)]
    return [replace(o, rank=i + 1) for i, o in enumerate(ranked)]


def describe_choice(choice: Choice) -> list[str]:
    """What was measured, pruned and left out, one sentence each."""
    lines = []
    if choice.pruned:
        lines.append(
            f"{len(choice.pruned)} candidate(s) pruned by PRE (sure to lose): "
            + "; ".join(c.setting.describe() for c in choice.pruned)
        )
    if choice.unmeasured:
        lines.append(
            f"{len(choice.unmeasured)} candidate(s) not measured (the probe's time ran out): "
            + "; ".join(c.setting.describe() for c in choice.unmeasured)
        )
    return lines


__all__ = [
    "GRAPHS_PRECISIONS",
    "MIN_MEASURED_SAVING",
    "MIN_PREDICTED_SAVING",
    "SETUP_GUESS_S",
    "Candidate",
    "Choice",
    "Measured",
    "Scale",
    "choose_candidates",
    "combined",
    "describe_choice",
    "measured_rows",
    "provenance_word",
    "scale_of",
    "scaled",
    "windows_parts",
]
