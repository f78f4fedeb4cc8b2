"""The probe's arithmetic: which candidates to measure, and ranked rows from what was measured.
No torch, no GPU: ``probe`` runs the candidates; this module decides and reads.

Choosing (``choose_candidates``). PRE's prediction of each candidate orders them (least predicted
energy first) and prunes those it is sure lose: a candidate whose predicted energy interval lies
wholly above the interval of the candidate predicted best is left out, unless it is the current
configuration (always measured: every saving is against it). CUDA graphs have no prediction
(the reference set has no graphs runs); a graphs candidate is ordered with its eager twin and
kept whenever the twin is. Then the budget: a candidate's probe costs its warm-up (autotuning)
plus its window, so candidates are taken in order while their estimated cost fits the seconds
given; the rest are "not measured (the probe's time ran out)".

Reading (``measured_rows``). Each measured candidate's energy and time per image are the
median of its runs' (energy / images, duration / images); the interval is the range over its
runs widened by each run's counter resolution (its stored ``energy_uncertainty_j``), so one run
gets a resolution-wide interval and two get their spread: the coverage of such an interval is
what the repetitions give, and the rows say how many runs each rests on. The advice's totals
are per image x the advice's images (energy and time grow with the images trained).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from wattlab.estimate.advise.ranking import Option, Setting

# A candidate's probe cost before anything was measured: a warm-up (cuDNN's autotuning of every
# new shape: 0.1-26 s on the H200, median ~5 s, docs/measured/h200-wide-2026-12-04) plus its
# window. On the CPU there is no autotuning.
WARMUP_GUESS_S = {"cuda": 8.0, "cpu": 2.0}
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
    seconds: float,
    window_s: float,
    device: str = "cuda",
    warmup_s: float | None = None,
) -> Choice:
    """The candidates to measure (see the module docstring). ``predicted``: PRE's rows of the
    non-graph settings (the advisor's); ``graphs``: add a CUDA-graphs twin of every setting
    whose precision supports it (one GPU, no power limit)."""
    by_setting = {o.setting: o for o in predicted}
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
    if current not in by_setting:
        raise ValueError("the current configuration must be among the predicted rows")
    # the current configuration first, then by PRE's order; the budget takes them in turn
    keep.sort(key=lambda c: c.setting != current)
    cost = (WARMUP_GUESS_S[device] if warmup_s is None else warmup_s) + window_s
    room = max(1, int(seconds // cost))
    return Choice(
        keep[:room],
        pruned,
        [replace(c, reason="not measured: the probe's time ran out") for c in keep[room:]],
    )


@dataclass(frozen=True)
class Measured:
    """One stored probe run of a candidate: its images, energy (J), duration (s) and the
    counter resolution of its energy (J)."""

    setting: Setting
    samples: float
    energy_j: float
    duration_s: float
    uncertainty_j: float = 0.0
    provenance: str = "measured"


def measured_rows(
    runs: Iterable[Measured], samples: float, *, estimated_note: str = ""
) -> dict[Setting, Option]:
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
        what = "estimated (modelled CPU energy)" if estimated_note else "measured"
        source = f"{what} (probe, {n} run{'s' if n > 1 else ''})"
        spread = (
            "the counter's resolution"
            if n == 1
            else f"the range of {n} runs and the counter's resolution"
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
            notes=f"interval: {spread}" + (f"; {estimated_note}" if estimated_note else ""),
        )
    return out


def merged(predicted: Sequence[Option], measured: dict[Setting, Option]) -> list[Option]:
    """PRE's rows with every measured setting's row in place of its prediction, and the
    measured settings PRE has no row for (CUDA graphs) added."""
    out = [measured.get(o.setting, o) for o in predicted]
    seen = {o.setting for o in predicted}
    out += [row for setting, row in measured.items() if setting not in seen]
    return out


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
    "WARMUP_GUESS_S",
    "Candidate",
    "Choice",
    "Measured",
    "choose_candidates",
    "describe_choice",
    "measured_rows",
    "merged",
]
