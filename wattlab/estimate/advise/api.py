"""``wattlab.advise(...)``: the advisor's Python face, before training or from a stored run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wattlab.errors import DataError
from wattlab.estimate.advise.advisor import Advice
from wattlab.estimate.advise.advisor import advise as advise_before
from wattlab.estimate.advise.stored import advise_from_run


def advise(
    *,
    db: str | Path | None = None,
    run: int | None = None,
    probe_s: float | None = None,
    **options: Any,
) -> Advice:
    """The ranked configurations as data (``Advice``: iterate it, or ``.rows``; ``rows[0]`` is
    the advice, ``.sentence`` says it, ``.to_dict()`` is what ``--json`` writes).

    Before training: the keywords of ``advisor.advise`` (model or model_factory, gpu_name,
    epochs, train_size, batch_size, precision, gpus, max_slowdown_percent or deadline_s,
    allow, ...). From a stored run: ``db`` and ``run`` (its id), with max_slowdown_percent,
    deadline_s, allow, pre_model / pre_fit and carbon. Bad input raises a WattlabError.

    ``probe_s``: measure the candidates on this machine for about that many seconds
    (``probe.probe``; 60 is a good start) and rank by what was measured; each row's ``source``
    then starts with ``measured`` (``estimated`` on a CPU without an energy counter) or
    ``predicted``, and ``Advice.probe`` says what the probe cost. Its runs are stored as a
    sweep in ``db`` (default ``wattlab.db``); ``dataset``/``data_dir`` choose its data."""
    from wattlab.estimate.advise.probe import Trainee, probe, stored_trainee

    data = {k: options.pop(k) for k in ("dataset", "data_dir") if k in options}
    if probe_s is not None:  # the probe stores its runs: a database it cannot write (a
        from wattlab.experiment.db.store import check_writable_database  # read-only folder, a

        check_writable_database(db or "wattlab.db")  # full disk) is said before any fit
    if run is None:
        if db is not None and probe_s is None:
            raise DataError("give both db and run to start from a stored run.")
        advice = advise_before(**options)
        if probe_s is None:
            return advice
        trainee = Trainee(
            model=options.get("model"),
            model_factory=options.get("model_factory"),
            stem=str(options.get("stem", "cifar")),
            image_size=int(options.get("image_size", 32)),
            **data,
        )
        return probe(advice, trainee, db=str(db or "wattlab.db"), seconds=float(probe_s))
    if db is None:
        raise DataError("give both db and run to start from a stored run.")
    from wattlab.experiment.db.store import open_store

    if not Path(db).exists():
        raise DataError(f"no database at {db}.")
    with open_store(db, create=False, readonly=True) as store:
        tables = store.runs(), store.windows([run]), store.trace([run])
    advice = advise_from_run(*tables, run, **options)
    if probe_s is None:
        return advice
    trainee = stored_trainee(tables[0], run)
    return probe(advice, trainee, db=str(db), seconds=float(probe_s))


__all__ = ["advise"]
