"""The registry of estimation methods: ``METHODS``, one tuple, in the order of every table.

``wattlab estimate evaluate`` scores every registered method (the STEP ones that
``--step-method`` selects), ``wattlab estimate`` lists every one that predicts before training,
and labels, inputs, *covers* and the ``--step-method`` choices are all read from here.

Adding a method is one new module and one line: write ``wattlab/estimate/methods/NAME.py``
defining ``METHOD = EstimationMethod(...)`` (see ``base.EstimationMethod``: its name, label,
inputs, ``evaluate`` and, if it can predict before training, ``predict``), and add
``NAME.METHOD`` to ``METHODS`` below. A new STEP rule is also listed in ``STEP_RULES``, the
order ``--step-method`` offers them in.

Everything here reads ``METHODS`` when called, never a copy made at import. The registry and its
modules import no pandas, numpy or scikit-learn at their top (``tests/estimate/
test_estimate_methods.py`` checks it): the CLI reads it at start-up.
"""

from __future__ import annotations

from wattlab.errors import ConfigError
from wattlab.estimate.methods import (
    flops,
    green_algorithms,
    ml_co2_impact,
    pre,
    step,
    step_marks,
    step_paper,
)
from wattlab.estimate.methods.base import (
    EstimationMethod,
    HeldOut,
    PlannedRun,
    StepRule,
    StoredRuns,
)

METHODS: tuple[EstimationMethod, ...] = (
    ml_co2_impact.METHOD,
    green_algorithms.METHOD,
    flops.METHOD,
    step.METHOD,
    step.POWER_TWIN,
    step_marks.METHOD,
    step_paper.METHOD,
    step_paper.POWER_TWIN,
    pre.METHOD,
)
# the --step-method rules, in the order the CLI offers them; ALL_STEP_RULES selects every one
STEP_RULES: tuple[StepRule, ...] = (step.RULE, step_paper.RULE, step_marks.RULE)
ALL_STEP_RULES = "both"


def names() -> tuple[str, ...]:
    """Every registered method's name, in table order."""
    return tuple(m.name for m in METHODS)


def get(name: str) -> EstimationMethod:
    """The registered method ``name``."""
    for method in METHODS:
        if method.name == name:
            return method
    raise ConfigError(f"no estimation method is called {name!r}; there are {', '.join(names())}.")


def label(name: str) -> str:
    """What people read for method ``name`` (the name itself when none is registered)."""
    return next((m.label for m in METHODS if m.name == name), name)


def step_rule_choices() -> tuple[str, ...]:
    """The ``--step-method`` values: each STEP rule, then ``both``."""
    return (*(rule.name for rule in STEP_RULES), ALL_STEP_RULES)


def step_methods() -> dict[str, tuple[str, ...]]:
    """Each ``--step-method`` value and the STEP methods it scores, in table order."""
    out = {rule.name: tuple(m.name for m in METHODS if m.step_rule == rule) for rule in STEP_RULES}
    out[ALL_STEP_RULES] = tuple(m.name for m in METHODS if m.step_rule is not None)
    return out


def methods_for(step_method: str) -> tuple[str, ...]:
    """The methods an evaluation with ``step_method`` scores, in table order: the STEP methods
    it selects and every method that is not STEP."""
    chosen = step_methods()
    if step_method not in chosen:
        raise ConfigError(
            f"the STEP method must be one of {', '.join(chosen)}, got {step_method!r}."
        )
    return tuple(m.name for m in METHODS if m.step_rule is None or m.name in chosen[step_method])


def reads_trace(step_method: str) -> bool:
    """Whether a method ``step_method`` scores reads the runs' GPU power traces."""
    return any(get(name).reads_trace for name in methods_for(step_method))


def inputs() -> dict[str, tuple[str, ...]]:
    """What each method reads of the run it predicts ("oracle: ..." known only once it ended)."""
    return {m.name: m.inputs for m in METHODS}


def oracle_inputs(name: str) -> list[str]:
    """The oracle inputs method ``name`` is given (empty: none)."""
    return get(name).oracle_inputs


def covers(name: str, target: str) -> str:
    """Which components method ``name``'s prediction includes for ``target``."""
    return get(name).covers(target)


def predicting() -> tuple[EstimationMethod, ...]:
    """The methods ``wattlab estimate`` lists before training, in table order."""
    return tuple(m for m in METHODS if m.predict is not None)


__all__ = [
    "ALL_STEP_RULES",
    "METHODS",
    "STEP_RULES",
    "EstimationMethod",
    "HeldOut",
    "PlannedRun",
    "StepRule",
    "StoredRuns",
    "covers",
    "get",
    "inputs",
    "label",
    "methods_for",
    "names",
    "oracle_inputs",
    "predicting",
    "reads_trace",
    "step_methods",
    "step_rule_choices",
]
