"""Tests that need an optional extra (torch, CodeCarbon, pyarrow, ...).

Every run but one has every extra installed (``make test``'s .venv) and runs every test: there, a
test that cannot import an extra's package FAILS, even one that asks ``pytest.importorskip``, so
a missing package never passes for a skipped test.

The exception is the lowest-direct job of ``make test`` (``--without-extras``): the package alone
at the floors pyproject.toml declares, no extra. There a test that needs an extra that is not
installed is skipped with a reason naming the extra: a test says so with
``@pytest.mark.extra("train")`` (or ``pytestmark`` for its whole module), a module that imports
an extra's package at its top is skipped whole, and ``pytest.importorskip`` skips as usual. A
test that needs an extra without saying so fails there, which is how a test learns to say so.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator

import pytest

from wattlab.extras import EXTRA_OF_MODULE

WITHOUT_EXTRAS = "--without-extras"
# how Python and pytest say a package is missing (``None in sys.modules``: hidden on purpose)
_NO_MODULE = re.compile(
    r"(?:No module named|could not import) '([\w.]+)'|import of ([\w.]+) halted"
)


# Set by the process that made the session's cache folder (the controller under xdist), so that
# only it removes the folder.
_SESSION_CACHE_OWNER = "WATTLAB_TEST_SESSION_CACHE_OWNER"


def pytest_configure(config: pytest.Config) -> None:
    _one_cache_for_the_session()
    _threads_per_worker()


def pytest_unconfigure(config: pytest.Config) -> None:
    if os.environ.get(_SESSION_CACHE_OWNER) == str(os.getpid()):
        shutil.rmtree(os.environ["WATTLAB_CACHE_DIR"], ignore_errors=True)


def _one_cache_for_the_session() -> None:
    """Every test and every process it starts shares one cache folder, made for this session
    (xdist's workers inherit it) and removed after it: PRE's fit of the shipped runs (~25 s of
    CPU) and the generated data are made once, not once per test, and no test reads or writes
    the user's ~/.cache/wattlab. A test of the cache itself sets its own folder. A
    WATTLAB_CACHE_DIR the caller set is kept."""
    if "WATTLAB_CACHE_DIR" in os.environ:
        return
    os.environ["WATTLAB_CACHE_DIR"] = tempfile.mkdtemp(prefix="wattlab-test-cache-")
    os.environ[_SESSION_CACHE_OWNER] = str(os.getpid())


def _threads_per_worker() -> None:
    """Under pytest-xdist, each worker (and every process it starts) trains with its share of the
    cores: N workers of torch's default one thread per core oversubscribe the machine, and
    OpenMP's spinning threads then ran a quickstart sweep 3-6x slower than alone (issue 39).
    An OMP_NUM_THREADS the caller set is kept."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers is None or "OMP_NUM_THREADS" in os.environ:
        return
    share = max(1, (os.cpu_count() or 1) // max(1, int(workers)))
    os.environ["OMP_NUM_THREADS"] = str(share)
    if "torch" in sys.modules:  # imported before this hook ran: tell it too
        sys.modules["torch"].set_num_threads(share)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        WITHOUT_EXTRAS,
        action="store_true",
        help="skip the tests that need an optional extra that is not installed (the floors job)",
    )


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing_extras(extras: tuple[str, ...]) -> list[str]:
    """The extras among ``extras`` that are not (wholly) installed here."""
    unknown = sorted(set(extras) - set(EXTRA_OF_MODULE.values()))
    if unknown:
        raise pytest.UsageError(f"@pytest.mark.extra names no extra of pyproject.toml: {unknown}")
    return [
        extra
        for extra in extras
        if not all(_installed(m) for m, e in EXTRA_OF_MODULE.items() if e == extra)
    ]


def _missing_extra_in(text: str) -> str | None:
    """The extra whose package ``text`` (an error or a skip reason) says could not be imported,
    when that package is indeed not installed here."""
    for found in _NO_MODULE.finditer(text):
        top = (found.group(1) or found.group(2)).split(".")[0]
        if top in EXTRA_OF_MODULE and not _installed(top):
            return EXTRA_OF_MODULE[top]
    return None


def _reason(extra: str) -> str:
    return f"needs wattlab's {extra!r} extra, not installed in this {WITHOUT_EXTRAS} run"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption(WITHOUT_EXTRAS):
        return
    for item in items:
        wanted = tuple(e for mark in item.iter_markers("extra") for e in mark.args)
        missing = missing_extras(wanted)
        if missing:
            item.add_marker(pytest.mark.skip(reason=_reason(", ".join(missing))))


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    without = collector.config.getoption(WITHOUT_EXTRAS)
    if without and report.failed:  # a module that imports an extra's package at its top
        extra = _missing_extra_in(str(report.longrepr))
        if extra is not None:
            report.outcome = "skipped"
            report.longrepr = (str(collector.path), 0, _reason(extra))
    elif not without and report.skipped:
        _fail_a_skip_for_a_missing_extra(report)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not item.config.getoption(WITHOUT_EXTRAS):
        _fail_a_skip_for_a_missing_extra(report)


def _fail_a_skip_for_a_missing_extra(report: pytest.CollectReport | pytest.TestReport) -> None:
    """Outside the floors job a skip because an extra's package is missing is a failure."""
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    extra = _missing_extra_in(reason)
    if extra is None:
        return
    report.outcome = "failed"
    report.longrepr = (
        f"{reason}: this run has no {extra!r} extra, and only a {WITHOUT_EXTRAS} run may skip "
        f"for that (install the dev set: make install)"
    )
