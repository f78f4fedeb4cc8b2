"""What an estimation method is (``EstimationMethod``), and what its two callers hand it:
``StoredRuns`` (``wattlab estimate evaluate``: measured runs to predict, one target) and
``PlannedRun`` (``wattlab estimate``: one checked configuration that has not run).

Light on purpose: the CLI reads the registry at start-up (``--step-method``'s choices), so this
module and every method module import no pandas, numpy, scikit-learn or torch at their top; a
method imports what it computes with inside its functions.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from wattlab.estimate.estimates import register_label
from wattlab.estimate.targets import TARGET_COMPONENTS

if TYPE_CHECKING:
    import pandas as pd

    from wattlab.estimate.estimates import Estimate
    from wattlab.estimate.pre import PreModel
    from wattlab.monitor.carbon import CarbonSettings

T = TypeVar("T")
ORACLE = "oracle: "  # an input known only once the run has finished


def missing(value: Any) -> bool:
    """True for None and NaN (a NULL column of a runs table)."""
    if value is None:
        return True
    import pandas as pd

    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def value_of(run: Mapping[str, Any], name: str) -> Any:
    """A stored run's ``name`` column, None when it is missing (None or NaN)."""
    value = run.get(name)
    return None if missing(value) else value


@dataclass(frozen=True)
class StepRule:
    """A STEP rule: the ``--step-method`` value that selects the methods naming it, and what
    ``--help`` says of it."""

    name: str
    help: str


@dataclass(frozen=True)
class HeldOut:
    """One protocol of ``estimate evaluate``: a method that learns across runs predicts each run
    from the runs outside its group, the runs sharing its value of ``column``."""

    protocol: str  # "loco"
    column: str  # "config_hash"
    what: str  # "leave one configuration out"


@dataclass
class StoredRuns:
    """What ``estimate evaluate`` hands each method: the ok runs with a measured target, their
    epoch windows and GPU power trace, the target and the evaluation's settings (the dict its
    JSON writes: ``step_window_epochs``, ``flops_utilization``, ``pre_search_iter``, ...)."""

    runs: pd.DataFrame  # by index; the protocols' derived columns (family) added
    epochs: pd.DataFrame  # the runs' epoch windows (run_id, epoch, duration_s, energies)
    gpu_trace: pd.DataFrame | None  # run_id, t_s, power_w of gpu:0, or None
    target: str  # a key of ``targets.TARGETS``
    columns: tuple[str, ...]  # the columns that add up to the target
    measured: pd.Series  # the target's measured energy (J), by runs index
    id_column: str  # "id" or "run_id"
    settings: Mapping[str, Any]
    _made: dict[str, Any] = field(default_factory=dict, repr=False)

    def each(self) -> Iterator[tuple[Hashable, dict[str, Any]]]:
        """(runs index, the run as a dict), in the table's order."""
        for index, series in self.runs.iterrows():
            yield index, series.to_dict()

    def run_epochs(self, run_id: Any) -> pd.DataFrame:
        """The epoch windows of run ``run_id`` (empty when it has none)."""
        epochs = self.epochs
        return epochs[epochs["run_id"] == run_id] if len(epochs) else epochs

    def run_trace(self, run_id: Any) -> pd.DataFrame | None:
        """Run ``run_id``'s GPU power trace, or None without traces."""
        if self.gpu_trace is None:
            return None
        return self.gpu_trace[self.gpu_trace["run_id"] == run_id]

    def once(self, key: str, compute: Callable[[], T]) -> T:
        """``compute()``, made once per evaluation: what two methods share (a STEP projection
        and its power-based twin) is computed for the first and kept for the second."""
        if key not in self._made:
            self._made[key] = compute()
        made: T = self._made[key]
        return made


@dataclass
class PlannedRun:
    """What ``wattlab estimate`` hands each method: a configuration before training, checked
    (``predict.estimate_all``), with its model's counted cost. Units: s, W, FLOP."""

    model: str
    gpus: int
    precision: str
    epochs: float
    batch_size: int
    stem: str
    image_size: int
    train_size: int
    samples: float  # the training samples the budget holds
    gpu_name: str | None  # as given
    spec_name: str | None  # the spec table's name for it; None when it is not in the table
    gpu_tdp_w: float | None
    power_limit_w: float | None
    duration_s: float | None  # the expected training time, when given
    ram_gb: float | None
    gpu_utilization_percent: float | None
    forward_flops_per_sample: float
    params: int
    flops_utilization: float
    carbon: CarbonSettings | None
    runs_df: pd.DataFrame | None = None  # measured runs to fit PRE on
    pre_model: PreModel | None = None
    pre_fit: Callable[[], tuple[PreModel | None, str]] | None = None
    cost_source: str = "counted"  # or "from the shipped reference data" (no torch)
    # the registry's lookup (``methods.get``), handed down by whoever made this plan: the
    # registry sits above this module, so it is not imported from here
    method_of: Callable[[str], EstimationMethod] | None = field(default=None, repr=False)
    _made: dict[str, Estimate] = field(default_factory=dict, repr=False)

    def estimate_of(self, name: str) -> Estimate:
        """Registered method ``name``'s prediction of this configuration, made once: a method
        may build on another's (the duration baselines on PRE's predicted duration)."""
        if name not in self._made:
            if self.method_of is None:
                raise ValueError("this PlannedRun was made without the registry (method_of)")
            predict = self.method_of(name).predict
            if predict is None:
                raise ValueError(f"the method {name!r} does not predict before training")
            self._made[name] = predict(self)
        return self._made[name]


def covers_target(target: str) -> str:
    """A method that predicts the whole target covers its components."""
    return TARGET_COMPONENTS[target]


def refuses_nothing(target: str) -> str | None:
    """A method that predicts every target."""
    return None


@dataclass(frozen=True)
class EstimationMethod:
    """One estimation method, all that ``estimate evaluate`` and ``wattlab estimate`` need of it.

    - ``name``: its key in tables and JSON; ``label``: what people read.
    - ``inputs``: what it reads of the very run it predicts; an ``"oracle: ..."`` input is known
      only once that run has finished (its measured duration, its sampled utilisation).
    - ``evaluate(stored, held_out)``: its estimate of each stored run, by runs index (a run left
      out gets ``cannot_apply`` and the reason). A method that ``learns`` across runs is called
      once per protocol, with the ``HeldOut`` group it must not learn from; any other is called
      once with None, and its predictions hold under every protocol.
    - ``how(settings)``: one clause of the table's *How* paragraph.
    - ``covers(target)``: the components its prediction includes (``gpu``, ``gpu+ram``, ...);
      ``refuses(target)``: why it cannot predict ``target`` at all, or None.
    - ``step_rule``: the ``--step-method`` rule that selects it (None: it is always scored).
    - ``reads_trace``: it reads the run's sampled GPU power trace (so the CLI loads traces).
    - ``predict(planned)``: its estimate of a configuration before training, for
      ``wattlab estimate``; None when it cannot predict before training (not listed there).
    """

    name: str
    label: str
    inputs: tuple[str, ...]
    evaluate: Callable[[StoredRuns, HeldOut | None], Mapping[Hashable, Estimate]]
    how: Callable[[Mapping[str, Any]], str]
    learns: bool = False
    covers: Callable[[str], str] = covers_target
    refuses: Callable[[str], str | None] = refuses_nothing
    step_rule: StepRule | None = None
    reads_trace: bool = False
    predict: Callable[[PlannedRun], Estimate] | None = None

    def __post_init__(self) -> None:
        register_label(self.name, self.label)  # so an Estimate of it reads its label

    @property
    def oracle_inputs(self) -> list[str]:
        """The oracle inputs it is given (empty: none)."""
        return [i.removeprefix(ORACLE) for i in self.inputs if i.startswith(ORACLE)]


__all__ = [
    "EstimationMethod",
    "HeldOut",
    "PlannedRun",
    "StepRule",
    "StoredRuns",
    "covers_target",
    "missing",
    "refuses_nothing",
    "value_of",
]
