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
    probe_s: float | str | None = None,
    **options: Any,
) -> Advice:
    """The ranked configurations as data (``Advice``: iterate it, or ``.rows``; ``rows[0]`` is
    the advice, ``.sentence`` says it, ``.to_dict()`` is what ``--json`` writes).

    Before training: the keywords of ``advisor.advise`` (model or model_factory, gpu_name,
    epochs, train_size, batch_size, precision, gpus, max_slowdown_percent or deadline_s,
    allow, ...). From a stored run: ``db`` and ``run`` (its id), with max_slowdown_percent,
    deadline_s, allow, pre_model / pre_fit and carbon; a model factory the run names is imported
    only when ``model_factory`` names it again. Bad input raises a WattlabError.

    ``probe_s``: measure the candidates on this machine for about that many seconds, or
    ``"auto"`` for the default (the smaller of 30 s and 5 % of the predicted training, or no
    probe where that cannot pay off), in one warm process (``probe.probe``), and rank by what
    was measured; each row's ``source`` then starts with ``measured`` or ``estimated`` (by the
    share of its energy a counter gave) or ``predicted``, and ``Advice.probe`` says what the
    probe cost. Nothing is stored; ``dataset``/``data_dir`` choose its data."""
    from wattlab.estimate.advise.probe import Trainee, probe, stored_trainee

    data = {k: options.pop(k) for k in ("dataset", "data_dir") if k in options}
    if run is None:
        if db is not None:
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
        return probe(advice, trainee, seconds=_seconds(probe_s))
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
    trainee = stored_trainee(tables[0], run, options.get("model_factory"))
    return probe(advice, trainee, seconds=_seconds(probe_s))


def _seconds(probe_s: float | str) -> float | None:
    """None for "auto" (the probe's default length), else the seconds as a number."""
    if probe_s == "auto":
        return None
    try:
        return float(probe_s)
    except (TypeError, ValueError):
        raise DataError(
            f"probe_s must be a number of seconds or 'auto', got {probe_s!r}."
        ) from None


__all__ = ["advise"]
