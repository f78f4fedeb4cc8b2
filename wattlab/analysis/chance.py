"""Whether an accuracy is beyond chance: what guessing reaches on a test set of a given size.

A classifier that guesses gets each of n test images right with probability ``1 / classes``,
so its correct count is Binomial(n, 1/classes). An accuracy is **beyond chance** when it is at
least the smallest k / n that guessing reaches with probability at most :data:`CHANCE_ALPHA`
(0.1 %): ``P(Binomial(n, 1/classes) >= k) <= alpha``. On 512 test images of 10 classes that
is 14.5 %; on 10 000, 10.9 %. A run's own accuracy below that bound says it learned
nothing that guessing would not show; the report marks it "(chance)", and when no
configuration is beyond chance it says so and names no energy-to-accuracy target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

CHANCE_ALPHA = 0.001


def chance_threshold(classes: int, test_images: int, alpha: float = CHANCE_ALPHA) -> float:
    """The smallest accuracy (a fraction) that guessing among ``classes`` reaches on
    ``test_images`` images with probability at most ``alpha``; infinite when even a perfect
    score is that likely (too few images to tell anything from chance)."""
    if classes < 2 or test_images < 1:
        raise ValueError(f"need >= 2 classes and >= 1 image, got {classes} and {test_images}.")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be a fraction in (0, 1), got {alpha}.")
    n, p = int(test_images), 1.0 / classes
    log_p, log_q = math.log(p), math.log1p(-p)
    tail = 0.0  # P(X >= k), summed from k = n down
    for k in range(n, -1, -1):
        log_pmf = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
        log_pmf += k * log_p + (n - k) * log_q
        if tail + math.exp(log_pmf) > alpha:
            return (k + 1) / n if k < n else math.inf  # even all n right is too likely
        tail += math.exp(log_pmf)
    return 0.0  # not reached: P(X >= 0) = 1 > alpha


@dataclass(frozen=True)
class Chance:
    """Chance for one set of runs: ``classes``, the ``test_images`` the accuracy was measured
    on, ``chance`` (1 / classes), ``threshold`` (:func:`chance_threshold` at ``alpha``)."""

    classes: int
    test_images: int
    chance: float
    threshold: float
    alpha: float = CHANCE_ALPHA
    unit: str = "test image"  # "test sample" for a task that is not one of wattlab's images

    @classmethod
    def of(
        cls, classes: int, test_images: int, alpha: float = CHANCE_ALPHA, unit: str = "test image"
    ) -> Chance:
        threshold = chance_threshold(classes, test_images, alpha)
        return cls(classes, test_images, 1.0 / classes, threshold, alpha, unit)

    def beyond(self, accuracy: float | None) -> bool:
        """Whether ``accuracy`` is beyond what guessing reaches (False for a missing one)."""
        return accuracy is not None and math.isfinite(accuracy) and accuracy >= self.threshold


def classes_of(dataset: object) -> int | None:
    """How many classes a wattlab dataset has (None for an unknown one: a callback's or a
    command's run, whose task wattlab does not know)."""
    from wattlab.train.config import NUM_CLASSES

    return NUM_CLASSES.get(dataset) if isinstance(dataset, str) else None


def classes_of_run(dataset: object, config: object) -> int | None:
    """How many classes a run's task has: its wattlab dataset's, else what its stored
    configuration says (a Hugging Face model's ``id2label`` or ``num_labels``, a config's
    ``num_classes``); None when neither says."""
    import json

    known = classes_of(dataset)
    if known is not None:
        return known
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except ValueError:
            return None
    if not isinstance(config, dict):
        return None
    model_config = config.get("model_config")
    for holder in (model_config, config):
        if not isinstance(holder, dict):
            continue
        labels = holder.get("id2label")
        if isinstance(labels, dict) and len(labels) >= 2:
            return len(labels)
        for key in ("num_labels", "num_classes"):
            value = holder.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 2:
                return value
    return None


def chance_of(
    dataset: object, test_images: object, alpha: float = CHANCE_ALPHA, classes: object = None
) -> Chance | None:
    """Chance for accuracies measured on ``test_images`` samples of ``dataset`` (or of a task
    with ``classes`` classes, when the dataset is not one wattlab knows); None when either is
    unknown."""
    classes = classes_of(dataset) or _whole(classes)
    try:
        n = int(float(test_images))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    if classes is None or n < 1:
        return None
    unit = "test image" if classes_of(dataset) is not None else "test sample"
    return Chance.of(classes, n, alpha, unit)


@dataclass(frozen=True)
class ChanceVerdict:
    """Whether any configuration learned beyond chance: ``judged`` is False unless every
    configuration with an accuracy has a known chance; ``beyond`` lists the labels beyond it;
    ``best_accuracy`` is the highest median accuracy and ``chance`` the Chance of the
    configuration that has it."""

    judged: bool
    beyond: tuple[str, ...]
    best_accuracy: float
    chance: Chance | None

    @property
    def none_beyond(self) -> bool:
        return self.judged and not self.beyond

    def to_dict(self) -> dict[str, object]:
        """The verdict for summary.json: ``judged``, ``learned_beyond_chance`` (labels),
        ``none_beyond``, ``best_accuracy``, ``chance``, ``threshold``, ``test_images``,
        ``classes``, ``alpha`` (None where unknown) and ``sentence`` ("" unless none did)."""
        c = self.chance
        return {
            "judged": self.judged,
            "learned_beyond_chance": list(self.beyond),
            "none_beyond": self.none_beyond,
            "best_accuracy": self.best_accuracy,
            "chance": c.chance if c else None,
            "threshold": c.threshold if c else None,
            "test_images": c.test_images if c else None,
            "classes": c.classes if c else None,
            "alpha": c.alpha if c else None,
            "sentence": self.sentence(),
        }

    def sentence(self) -> str:
        """ "No configuration learned beyond chance (...)." (only when none did)."""
        from wattlab.wording import chance_words

        if not self.none_beyond or self.chance is None:
            return ""
        c = self.chance
        text = chance_words(
            self.best_accuracy, c.chance, c.threshold, c.test_images, c.alpha, unit=c.unit
        )
        return text[0].upper() + text[1:] + "."


def _whole(value: object) -> int | None:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return int(number) if math.isfinite(number) and number >= 2 else None


def summary_verdict(summary: Any) -> ChanceVerdict:
    """The verdict over a summary table's configurations (their dataset or classes, median
    test_size and median accuracy)."""
    if "accuracy" not in summary.columns:
        return ChanceVerdict(False, (), math.nan, None)
    return verdict(
        [
            (
                str(row["label"]),
                row.get("dataset"),
                row.get("test_size"),
                row.get("accuracy"),
                row.get("classes"),
            )
            for _, row in summary.iterrows()
        ]
    )


def verdict(rows: list[tuple[Any, ...]]) -> ChanceVerdict:
    """The verdict over ``(label, dataset, test_images, accuracy[, classes])`` rows, one per
    configuration (rows without an accuracy are skipped)."""
    judged, beyond, best, best_chance = True, [], -math.inf, None
    seen = False
    for label, dataset, test_images, accuracy, *rest in rows:
        classes = rest[0] if rest else None
        try:
            acc = float(accuracy)
        except (TypeError, ValueError):
            continue
        if not math.isfinite(acc):
            continue
        seen = True
        chance = chance_of(dataset, test_images, classes=classes)
        if chance is None:
            judged = False
            continue
        if chance.beyond(acc):
            beyond.append(label)
        if acc > best:
            best, best_chance = acc, chance
    return ChanceVerdict(judged and seen, tuple(beyond), best if seen else math.nan, best_chance)
