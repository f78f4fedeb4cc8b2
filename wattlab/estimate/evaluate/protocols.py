"""The protocols of ``estimate evaluate``: which runs a method that learns across runs must not
learn from when it predicts a run (``PROTOCOLS``), and the pass that refits each such method
once per protocol (``held_out_pass``).

A run is held out with its configuration (``loco``), model (``lomo``), precision (``lopo``),
architecture family (``lofo``: ``families.model_family`` of the model name), batch size
(``lobo``: every run at that batch size) or GPU (``logo``: fitted on the other GPUs' runs, so
every prediction is a transfer from them). Methods that do not learn are not refitted: their
predictions hold under every protocol (protocol ``all``).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from wattlab.errors import ConfigError
from wattlab.estimate.baselines import cannot_apply
from wattlab.estimate.evaluate.result import Rows
from wattlab.estimate.families import model_family
from wattlab.estimate.methods.base import EstimationMethod, HeldOut, StoredRuns

# protocol -> (the runs column whose value is held out, what it means)
PROTOCOLS = {
    "loco": ("config_hash", "leave one configuration out"),
    "lomo": ("model", "leave one model out"),
    "lopo": ("precision", "leave one precision out"),
    "lofo": ("family", "leave one architecture family out"),
    "lobo": ("batch_size", "leave one batch size out"),
    "logo": ("gpu_name", "leave one GPU out"),
}
# protocol columns the runs table does not store, derived from the columns it does
DERIVED_COLUMNS = {"family": ("model", model_family)}


def with_derived_columns(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with the protocol columns it lacks derived (``family`` from ``model``)."""
    added = {
        column: runs[source].map(derive)
        for column, (source, derive) in DERIVED_COLUMNS.items()
        if column not in runs and source in runs
    }
    return runs.assign(**added) if added else runs


def parse_protocols(protocols: str | tuple[str, ...] | list[str]) -> list[str]:
    """The protocols asked for, "all" meaning every one; ConfigError for any other name."""
    chosen = [protocols] if isinstance(protocols, str) else list(protocols)
    if chosen == ["all"]:
        return list(PROTOCOLS)
    bad = [p for p in chosen if p not in PROTOCOLS]
    if bad or not chosen:
        raise ConfigError(
            f"the protocol must be one of {', '.join(PROTOCOLS)} or all, got "
            f"{', '.join(map(repr, bad)) or 'none'}."
        )
    return chosen


def held_out(protocol: str) -> HeldOut:
    """What ``protocol`` holds out with each run."""
    column, what = PROTOCOLS[protocol]
    return HeldOut(protocol, column, what)


def held_out_pass(
    stored: StoredRuns,
    learners: Sequence[EstimationMethod],
    protocols: Sequence[str],
    rows: Rows,
) -> None:
    """Each learner's prediction of each run under each protocol, fitted without the run's
    group, recorded in ``rows`` (protocol by protocol, learner by learner, run by run)."""
    for protocol in protocols:
        group = held_out(protocol)
        for method in learners:
            made = method.evaluate(stored, group)
            for index, run in stored.each():
                estimate = made.get(index) or cannot_apply(method.name, "not predicted")
                rows.record(
                    run,
                    run[stored.id_column],
                    protocol,
                    estimate,
                    float(stored.measured.loc[index]),
                )


__all__ = [
    "DERIVED_COLUMNS",
    "PROTOCOLS",
    "held_out",
    "held_out_pass",
    "parse_protocols",
    "with_derived_columns",
]
