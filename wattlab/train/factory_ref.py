"""A model factory's name (``FILE.py:FUNC`` or ``package.module:FUNC``) as text, without importing
it (nor torch): whether a name is one, whether two name the same, and the sentence said instead
of importing a factory that a database names (``wattlab.train.factory`` imports)."""

from __future__ import annotations

from pathlib import Path


def is_factory(name: str) -> bool:
    """Whether a model name refers to a factory (``FILE.py:FUNC`` / ``module:FUNC``): torchvision
    names never contain a colon."""
    return ":" in name


def same_factory(stored: str, named: str | None) -> bool:
    """Whether ``named`` (what the user gave on the command line) names the factory ``stored``
    (what a database holds): the same function of the same file (resolved) or module."""
    if not named or not is_factory(stored) or not is_factory(named):
        return False
    (a, _, fa), (b, _, fb) = stored.rpartition(":"), named.rpartition(":")
    if fa != fb:
        return False
    if a.endswith(".py") and b.endswith(".py"):
        return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
    return a == b


def factory_not_imported(run_id: int, ref: str) -> str:
    """The sentence said instead of importing the factory a stored run names: importing runs
    the code of a file a database points at, which wattlab does only when the user names it."""
    target = ref.rpartition(":")[0]
    what = f"the code in {target}" if target.endswith(".py") else f"the module {target}"
    return (
        f"run {run_id}'s model is the factory {ref}, which wattlab imports (running {what}) "
        f"only when you name it again: `wattlab advise --db DB --run {run_id} --model-factory "
        f"{ref}`"
    )


__all__ = ["factory_not_imported", "is_factory", "same_factory"]
