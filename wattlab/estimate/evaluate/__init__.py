"""Every estimation method scored against measured runs: one target, one set of runs, the
protocols (``evaluate_methods``, ``evaluation_markdown``, ``write_evaluation``).

The methods are the registry's (``wattlab.estimate.methods``); this package scores them, in
one module per job:

- ``engine``: ``evaluate_methods``: checks the runs, hands every method the same
  ``StoredRuns`` and records what the methods that do not learn predict, once.
- ``protocols``: ``PROTOCOLS``, which runs are held out, and the pass that refits each method
  that learns across runs once per protocol.
- ``scoring``: ``score``, ``coverage_interval`` and the per-protocol tables.
- ``result``: ``EvaluationResult`` and its JSON.
- ``tables``: ``evaluation_markdown``, ``equal_information_markdown``, ``write_evaluation``.

- **Target** (``TARGETS``): the energy every method predicts *and* is measured against:
  ``total`` (every measured component), ``gpu`` (the GPUs), or ``paper`` (GPU + RAM, the
  reference paper's target). STEP projects the target's own per-epoch energies; PRE is fitted on
  the target; Green Algorithms drops its RAM term for ``gpu``. ML CO2 Impact and the FLOPs
  estimate model the GPU only, whatever the target (``covers`` says what each prediction
  includes).
- **Protocols** (``PROTOCOLS``): PRE, which learns from other runs, is fitted without the
  held-out run's configuration (``loco``), model (``lomo``), precision (``lopo``),
  architecture family (``lofo``: ``families.model_family`` of the model name) or batch size
  (``lobo``: every run at that batch size); so is the
  calibrated interval of step-level STEP (``step-marks``), whose point estimate does not learn.
  The other methods do not learn across runs, so their predictions are the same under every
  protocol, and they are scored on the same rows as PRE.
- **Common runs**: each protocol's headline metrics are over the runs that every method with
  at least one prediction could handle, and the count is reported. Each method's metrics over
  all the runs it could handle are kept beside them ("own").
- **STEP**: ``step_method`` "wattlab" (default: ``wattlab.step.epochs``' rule),
  "paper" (``wattlab.step.paper``: s and w as published), "marks" (the live
  step-level rule replayed from stored marks after ``marks_fraction`` of the budget,
  ``wattlab.estimate.step_marks``) or "both" (all of them). The epoch rules have their
  power-based twin, the paper's formula: window mean power of the target x the run's measured
  duration.

Metrics: RMSE (J), MAPE, median APE and mean signed error (bias) in %, and the coverage of the
stated interval (the share of runs with an interval whose measured value lies inside it).
Runs a method cannot handle are listed with the reason, never silently dropped.
"""

from __future__ import annotations

from typing import Any

from wattlab.estimate import methods as _registry
from wattlab.estimate.evaluate.engine import evaluate_methods
from wattlab.estimate.evaluate.protocols import (
    DERIVED_COLUMNS,
    PROTOCOLS,
    parse_protocols,
    with_derived_columns,
)
from wattlab.estimate.evaluate.result import ONLINE, EvaluationResult
from wattlab.estimate.evaluate.scoring import coverage_interval, protocol_table, score
from wattlab.estimate.evaluate.tables import (
    equal_information_markdown,
    evaluation_markdown,
    write_evaluation,
)
from wattlab.estimate.methods import covers, methods_for, oracle_inputs
from wattlab.estimate.targets import TARGETS

# read from the registry when asked for, so a method registered later is in them too
_FROM_REGISTRY = {
    "EVALUATED_METHODS": _registry.names,  # every method, in table order
    "METHOD_INPUTS": _registry.inputs,  # what each reads of the run it predicts
    "STEP_METHODS": _registry.step_methods,  # each --step-method and the methods it scores
}


def __getattr__(name: str) -> Any:
    if name in _FROM_REGISTRY:
        return _FROM_REGISTRY[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DERIVED_COLUMNS",
    "EVALUATED_METHODS",
    "METHOD_INPUTS",
    "ONLINE",
    "PROTOCOLS",
    "STEP_METHODS",
    "TARGETS",
    "EvaluationResult",
    "covers",
    "coverage_interval",
    "equal_information_markdown",
    "evaluate_methods",
    "evaluation_markdown",
    "methods_for",
    "oracle_inputs",
    "parse_protocols",
    "protocol_table",
    "score",
    "with_derived_columns",
    "write_evaluation",
]
