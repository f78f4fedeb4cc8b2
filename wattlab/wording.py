"""What wattlab says about its numbers, in one place: every rule that turns data into words.

Each rule takes the data a statement is about and returns the words, so a statement can only say
what its data holds:

* **shares** (:func:`share_text`): a fraction as a percentage that never reads "0.0 %" for a
  share above zero nor "100.0 %" for one below one;
* **provenance by share** (:class:`EnergyParts`): "96.2 % measured by GPU counters, 3.8 %
  estimated (CPU, RAM)"; a provenance alone ("estimated (CPU, RAM)") only when it holds all the
  energy, so "estimated" alone means nothing was measured;
* **intervals** (:func:`interval_words`, :func:`interval_legend`): the coverage the repetitions
  give, "min–max of 3 runs (75 % coverage)"; "95 % CI" only for an interval whose coverage is
  at least 95 %;
* **comparisons** (:class:`ImageCounts`, :func:`energy_comparison`): "for the same 2,048 images"
  only when every run of both sides saw the same number of images, else per image with both
  counts stated;
* **chance** (:func:`chance_words`): "no configuration learned beyond chance" instead of a
  target at chance.

Pure functions on numbers and strings (no pandas, no wattlab imports): the measuring core, the
analysis and the CLI all use these words, so `run`, `sweep`, `monitor` and `report` say the same.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

# --------------------------------------------------------------------------- numbers


def and_join(items: Sequence[str]) -> str:
    """ "a", "a and b", "a, b and c"."""
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} and {items[-1]}"


def plural(n: int, word: str, many: str | None = None) -> str:
    """ "1 run", "3 runs" (``many`` for irregular plurals)."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def share_text(share: float) -> str:
    """A fraction (0..1) as a percentage with one decimal: "96.2 %". A share above zero never
    reads "0.0 %" ("< 0.1 %"), one below one never "100.0 %" ("> 99.9 %"); exactly one is
    "100 %" and zero "0 %"."""
    if not math.isfinite(share) or share <= 0:
        return "0 %"
    if share >= 1:
        return "100 %"
    text = f"{share * 100:.1f} %"
    if text == "0.0 %":
        return "< 0.1 %"
    if text == "100.0 %":
        return "> 99.9 %"
    return text


def percent(fraction: float, decimals: int = 1) -> str:
    """A fraction as "11.9 %" (a space before the sign, as every wattlab percentage)."""
    return f"{fraction * 100:.{decimals}f} %"


def coverage_text(coverage: float) -> str:
    """A coverage probability as "75 %", "87.5 %", "93.8 %" (at most one decimal, no trailing
    zero)."""
    text = f"{coverage * 100:.1f}".rstrip("0").rstrip(".")
    return f"{text} %"


# --------------------------------------------------------------------------- provenance

PROVENANCES = ("measured", "sampled", "estimated", "unknown")
MEASURED_PROVENANCES = ("measured", "sampled")  # from a counter or from sampled power
# the words of a component kind; "total" is a run stored without its components
KIND_NAMES = {
    "gpu": "GPU",
    "cpu": "CPU",
    "dram": "DRAM",
    "ram": "RAM",
    "other": "other components",
    "total": "whole-run totals",
}
KIND_ORDER = tuple(KIND_NAMES)


def component_kind(component: object) -> str:
    """The kind of a component name: 'gpu' for 'gpu:0' and for a host-qualified
    'node-a/gpu:0'; 'ram' for the RAM estimate, 'dram' for a DRAM counter; 'total' for a run
    stored without components; 'other' for anything else (a psys zone, ...)."""
    kind = str(component).split(":", 1)[0].rsplit("/", 1)[-1]
    return kind if kind in KIND_NAMES else "other"


def provenance_of(value: object) -> str:
    """A provenance word, 'unknown' for anything else (a number of unknown origin is never
    called measured)."""
    text = getattr(value, "value", value)  # a meters.base.Provenance enum, or its string
    return text if isinstance(text, str) and text in PROVENANCES else "unknown"


def provenances_named(value: object) -> list[str]:
    """The provenances a stored provenance names: ["measured"] for "measured", ["measured",
    "estimated"] for a by-share text "93.1 % measured, 6.9 % estimated"
    (:meth:`EnergyParts.short`); ["unknown"] for anything else."""
    word = provenance_of(value)
    if word != "unknown" or not isinstance(value, str):
        return [word]
    named = []
    for piece in value.split(","):
        last = piece.strip().rsplit(" ", 1)[-1]
        if last in PROVENANCES and last not in named and "%" in piece:
            named.append(last)
    return named or ["unknown"]


@dataclass(frozen=True)
class EnergyParts:
    """Energy (J) by component kind and provenance, summed over any number of runs or windows,
    and its words. Build it with :meth:`of_components`; components kept out of the total (a
    psys zone) and non-finite or negative energies are left out."""

    joules: Mapping[tuple[str, str], float] = field(default_factory=dict)

    @classmethod
    def of_components(cls, components: Iterable[tuple[object, object, float]]) -> EnergyParts:
        """From ``(component name, provenance, energy_j)`` triples."""
        sums: dict[tuple[str, str], float] = {}
        for name, prov, energy_j in components:
            kind = "total" if name == "total" else component_kind(name)
            try:
                joules = float(energy_j)
            except (TypeError, ValueError):
                continue
            if math.isfinite(joules) and joules >= 0:
                key = (kind, provenance_of(prov))
                sums[key] = sums.get(key, 0.0) + joules
        return cls(sums)

    def __add__(self, other: EnergyParts) -> EnergyParts:
        sums = dict(self.joules)
        for key, value in other.joules.items():
            sums[key] = sums.get(key, 0.0) + value
        return EnergyParts(sums)

    @property
    def total_j(self) -> float:
        return sum(self.joules.values())

    def provenance_j(self, provenance: str) -> float:
        return sum(v for (_, p), v in self.joules.items() if p == provenance)

    def shares(self) -> dict[str, float]:
        """{provenance: share of all energy} for every provenance with energy (empty when the
        total is zero)."""
        total = self.total_j
        if total <= 0:
            return {}
        out = {p: self.provenance_j(p) / total for p in PROVENANCES}
        return {p: s for p, s in out.items() if s > 0}

    def measured_share(self) -> float:
        """The share a counter or sampled power gave (0 without energy)."""
        shares = self.shares()
        return sum(shares.get(p, 0.0) for p in MEASURED_PROVENANCES)

    def kinds(self, provenance: str) -> list[str]:
        """The component kinds with energy of ``provenance``, in a fixed order."""
        found = {k for (k, p), v in self.joules.items() if p == provenance and v > 0}
        return [k for k in KIND_ORDER if k in found]

    def _kind_list(self, provenance: str, detail: bool) -> str:
        kinds = self.kinds(provenance)
        if detail and len(kinds) > 1:
            total = self.total_j
            return ", ".join(
                f"{KIND_NAMES[k]} {share_text(self.joules[(k, provenance)] / total)}" for k in kinds
            )
        return ", ".join(KIND_NAMES[k] for k in kinds)

    def _what(self, provenance: str, detail: bool) -> str:
        kinds = self.kinds(provenance)
        named = [KIND_NAMES[k] for k in kinds if k != "total"]
        if provenance == "measured" and not (detail and len(kinds) > 1):
            if not named:
                return "measured by energy counters (whole-run totals)"
            totals = " and whole-run totals" if "total" in kinds else ""
            return f"measured by {and_join(named)} counters{totals}"
        if provenance == "sampled" and not (detail and len(kinds) > 1):
            return f"from sampled {and_join(named)} power" if named else "from sampled power"
        verb = {
            "measured": "measured by counters",
            "sampled": "from sampled power",
            "estimated": "estimated",
            "unknown": "of unknown provenance",
        }[provenance]
        return f"{verb} ({self._kind_list(provenance, detail)})"

    def phrase(self, detail: bool = False) -> str:
        """The provenance of this energy by share: "96.2 % measured by GPU counters, 3.8 %
        estimated (CPU, RAM)"; one provenance alone without a share ("estimated (CPU, RAM)")
        only when it holds all the energy. ``detail`` gives each kind's share where a provenance
        spans several kinds ("3.8 % estimated (CPU 3.1 %, RAM 0.7 %)"). "no energy recorded"
        when there is none."""
        shares = self.shares()
        if not shares:
            return "no energy recorded"
        if len(shares) == 1:
            return self._what(next(iter(shares)), detail)
        return ", ".join(f"{share_text(s)} {self._what(p, detail)}" for p, s in shares.items())

    def short(self) -> str:
        """The compact form for a table cell or a figure: "96.2 % measured, 3.8 % estimated";
        one word when one provenance holds all the energy."""
        shares = self.shares()
        if not shares:
            return "no energy recorded"
        if len(shares) == 1:
            return next(iter(shares))
        return ", ".join(f"{share_text(s)} {p}" for p, s in shares.items())


# --------------------------------------------------------------------------- intervals

CI_WORDS_LEVEL = 0.95  # "95 % CI" is said only of an interval with at least this coverage


@dataclass(frozen=True)
class IntervalKind:
    """How one configuration's interval of the median was made: ``runs`` (its values), its
    ``method`` ("order-statistic", "range", "none") and true ``coverage`` (NaN for none)."""

    runs: int
    method: str
    coverage: float

    @property
    def has_interval(self) -> bool:
        return self.method in ("order-statistic", "range") and math.isfinite(self.coverage)

    @property
    def is_ci(self) -> bool:
        return self.has_interval and self.coverage >= CI_WORDS_LEVEL


def interval_words(kind: IntervalKind) -> str:
    """One configuration's interval in words: "95 % CI of 6 runs", "min–max of 3 runs, 75 %
    coverage", or "1 run, no interval"."""
    if not kind.has_interval:
        return f"{plural(kind.runs, 'run')}, no interval"
    if kind.is_ci:
        return f"95 % CI of {plural(kind.runs, 'run')}"
    if kind.method == "range":
        return f"min–max of {kind.runs} runs, {coverage_text(kind.coverage)} coverage"
    return f"interval of {kind.runs} runs, {coverage_text(kind.coverage)} coverage"


def _runs_span(runs: Sequence[int]) -> str:
    lo, hi = min(runs), max(runs)
    return plural(lo, "run") if lo == hi else f"{lo}–{hi} runs"


def interval_groups(kinds: Iterable[IntervalKind]) -> list[str]:
    """The distinct interval descriptions of a set of configurations, fewest runs first:
    "no interval for 1 run", each range with its own run count and coverage, and every 95 % CI
    as one "95 % CI of 6–8 runs"."""
    kinds = list(kinds)
    out: list[str] = []
    ranges = sorted({k.runs for k in kinds if k.has_interval and not k.is_ci})
    by_runs = {k.runs: k for k in kinds if k.has_interval and not k.is_ci}
    single = sorted({k.runs for k in kinds if not k.has_interval})
    if single:
        out.append(f"no interval for {_runs_span(single)}")
    out += [interval_words(by_runs[n]) for n in ranges]
    ci = sorted({k.runs for k in kinds if k.is_ci})
    if ci:
        out.append(f"95 % CI of {_runs_span(ci)}")
    return out


def interval_legend(kinds: Iterable[IntervalKind]) -> str:
    """The legend of medians drawn with interval bars: "median, 95 % CI" when every
    configuration's interval reaches 95 %, else what the bars are: "median; bars: min–max of 3
    runs, 75 % coverage", "median of 1 run each, no bars"."""
    kinds = list(kinds)
    if kinds and all(k.is_ci for k in kinds):
        return "median, 95 % CI"
    if kinds and not any(k.has_interval for k in kinds):
        return f"median of {_runs_span([k.runs for k in kinds])} each, no bars"
    return "median; bars: " + "; ".join(interval_groups(kinds))


# --------------------------------------------------------------------------- comparisons


@dataclass(frozen=True)
class ImageCounts:
    """The images per run of one configuration: the fewest and most over its runs (None when
    not recorded)."""

    low: int | None
    high: int | None

    @property
    def known(self) -> bool:
        return self.low is not None and self.high is not None and self.low > 0

    @property
    def constant(self) -> bool:
        return self.known and self.low == self.high

    def text(self) -> str:
        if not self.known:
            return "an unrecorded number of"
        if self.constant:
            return f"{self.low:,}"
        return f"{self.low:,}–{self.high:,}"


def same_images(a: ImageCounts, b: ImageCounts) -> bool:
    """Whether every run of both configurations saw the same number of images."""
    return a.constant and b.constant and a.low == b.low


def _times(ratio: float) -> str:
    return f"{ratio:.2f}x" if ratio < 10 else f"{ratio:.1f}x"


TIMES_FROM = 1.5  # ratios from this up read as "N.NNx"; smaller ones as a percentage


def less_text(ratio: float) -> str:
    """A ratio > 1 as "3.98x" from :data:`TIMES_FROM` up, below it as the percentage saved
    ("14.8 %" for 1.174)."""
    return _times(ratio) if ratio >= TIMES_FROM else f"{(1 - 1 / ratio) * 100:.1f} %"


def images_basis(best: ImageCounts, reference: ImageCounts) -> tuple[str, str]:
    """What a comparison of two configurations is per, and the counts it states: ("for the
    same 2,048 images", "") when every run of both saw the same number; else ("per image",
    "480 vs 1,920 images per run"); ("per run", "image counts not recorded") without counts."""
    if same_images(best, reference):
        return f"for the same {best.text()} images", ""
    if best.known and reference.known:
        return "per image", f"{best.text()} vs {reference.text()} images per run"
    return "per run", "image counts not recorded"


def energy_comparison(
    who: str,
    than: str,
    ratio: float,
    best: ImageCounts,
    reference: ImageCounts,
    values: tuple[float, float],
    unit: str,
) -> str:
    """ "A used 3.98x less energy than B for the same 2,048 images (0.2525 vs 1.005 J per
    image)"; with different image counts "A used 14.8 % less energy per image than B (0.003844
    vs 0.004513 J per image; 480 vs 1,920 images per run)". ``ratio`` = reference / best (> 1),
    ``values`` (best, reference) in ``unit`` ("J per image" or "J per run")."""
    basis, counts = images_basis(best, reference)
    numbers = f"{values[0]:#.4g} vs {values[1]:#.4g} {unit}" + (f"; {counts}" if counts else "")
    if basis.startswith("for the same"):
        return f"{who} used {less_text(ratio)} less energy than {than} {basis} ({numbers})"
    return f"{who} used {less_text(ratio)} less energy {basis} than {than} ({numbers})"


def time_comparison(speedup: float, per_image: bool, same: float = 0.01) -> str:
    """The time half of a comparison: " and was 2.48x faster", " but took 49.8 % more time",
    " in about the same time"; "per image" is added when the comparison is per image but the
    image counts differ (``per_image``)."""
    per = " per image" if per_image else ""
    if speedup >= 1 + same:
        if speedup >= TIMES_FROM:
            return f" and was {less_text(speedup)} faster{per}"
        return f" and took {less_text(speedup)} less time{per}"
    if speedup <= 1 / (1 + same):
        slower = 1 / speedup
        if slower >= TIMES_FROM:
            return f" but took {_times(slower)} as long{per}"
        return f" but took {(slower - 1) * 100:.1f} % more time{per}"
    return f" in about the same time{per}"


# --------------------------------------------------------------------------- chance


def chance_words(
    best_accuracy: float,
    chance: float,
    threshold: float,
    test_images: int,
    alpha: float,
    what: str = "best accuracy",
    unit: str = "test image",
) -> str:
    """ "no configuration learned beyond chance (best accuracy 12.1 % on 512 test images;
    chance is 10.0 %, and guessing reaches 14.5 % with probability 0.1 % at most)"; with too
    few test images for any accuracy to count, it says that instead. ``what`` names the
    accuracy ("best per-epoch accuracy" where it is not the final one), ``unit`` what was
    scored ("test sample" for a model that does not see images)."""
    if not math.isfinite(threshold):
        return (
            f"no accuracy can be told from chance on {plural(test_images, unit)} "
            f"(chance is {percent(chance)}; guessing gets even all of them right with "
            f"probability above {coverage_text(alpha)})"
        )
    return (
        f"no configuration learned beyond chance ({what} {percent(best_accuracy)} on "
        f"{plural(test_images, unit)}; chance is {percent(chance)}, and guessing "
        f"reaches {percent(threshold)} with probability {coverage_text(alpha)} at most)"
    )
