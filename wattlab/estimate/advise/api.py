"""``wattlab.advise(...)``: the advisor's Python face, before training or from a stored run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wattlab.errors import DataError
from wattlab.estimate.advise.advisor import Advice
from wattlab.estimate.advise.advisor import advise as advise_before
from wattlab.estimate.advise.stored import advise_from_run


def advise(*, db: str | Path | None = None, run: int | None = None, **options: Any) -> Advice:
    """The ranked configurations as data (``Advice``: iterate it, or ``.rows``; ``rows[0]`` is
    the advice, ``.sentence`` says it, ``.to_dict()`` is what ``--json`` writes).

    Before training: the keywords of ``advisor.advise`` (model or model_factory, gpu_name,
    epochs, train_size, batch_size, precision, gpus, max_slowdown_percent or deadline_s,
    allow, ...). From a stored run: ``db`` and ``run`` (its id), with max_slowdown_percent,
    deadline_s, allow, pre_model / pre_fit and carbon. Bad input raises a WattlabError."""
    if db is None and run is None:
        return advise_before(**options)
    if db is None or run is None:
        raise DataError("give both db and run to start from a stored run.")
    from wattlab.experiment.db.store import open_store

    if not Path(db).exists():
        raise DataError(f"no database at {db}.")
    with open_store(db, create=False, readonly=True) as store:
        tables = store.runs(), store.windows([run]), store.trace([run])
    return advise_from_run(*tables, run, **options)


__all__ = ["advise"]
