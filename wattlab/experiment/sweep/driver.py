"""The one sweep loop, for every run kind: plan, claim, run, store, resume.

A *run kind* says how one point of a sweep runs: the built-in trainer (``plan.TrainerKind``), a
user's command (``command_plan.CommandKind``), and the short measured windows of
``wattlab advise --probe`` (the trainer kind with a deadline). Everything else is the same for
every kind and lives here once:

- **planning** (``build_plan``): the sweep is registered in the store (its order seed drawn
  once and kept, so a resumed sweep runs in the same order) or, for a dry run, read without
  writing; every expanded point becomes a ``PlanEntry``: *done* when stored ok already, *skip*
  with the kind's reason, else *run* with the expected duration from earlier runs;
- **running** (``drive``): the sweep's lock (a second sweep of the same name on the same
  database is refused), runs a dead sweep left 'running' marked abandoned (they run again), the
  untimed warm-up runs, then every *run* entry in order: the database is checked to be the very
  file the sweep opened, an entry stored ok meanwhile is skipped, the cool-down pause comes
  between runs, and the progress callbacks see each run start and finish. With ``stop_at`` (a
  ``time.monotonic()`` deadline) no run starts once the deadline has passed or the entry's
  expected duration would cross it; the plan's notes say how many runs it left.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import pandas as pd

    from wattlab.experiment.db.store import Store


@dataclass
class PlanEntry:
    order: int  # position in the run order (1-based)
    config: Any  # a RunConfig (trainer), a CommandPoint (a user's command)
    repetition: int
    label: str
    config_hash: str
    action: str  # 'run' | 'done' | 'skip'
    reason: str = ""
    expected_s: float | None = None


@dataclass
class SweepPlan:
    name: str
    entries: list[PlanEntry]
    order_seed: int | None
    warmup_runs: int
    cooldown_s: float
    notes: list[str] = field(default_factory=list)
    cooldown_until_c: float | None = None

    @property
    def to_run(self) -> list[PlanEntry]:
        return [e for e in self.entries if e.action == "run"]

    @property
    def expected_s(self) -> float | None:
        runs = self.to_run
        known = [e.expected_s for e in runs if e.expected_s is not None]
        if not runs:
            return 0.0
        if len(known) < len(runs):
            return None
        return sum(known) + self.cooldown_s * max(len(runs) - 1, 0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "sweep": self.name,
            "order_seed": self.order_seed,
            "warmup_runs": self.warmup_runs,
            "cooldown_s": self.cooldown_s,
            "cooldown_until_c": self.cooldown_until_c,
            "expected_s": self.expected_s,
            "runs": [
                {
                    "order": e.order,
                    "label": e.label,
                    "repetition": e.repetition,
                    "config_hash": e.config_hash,
                    "action": e.action,
                    "reason": e.reason,
                    "expected_s": e.expected_s,
                }
                for e in self.entries
            ],
            "notes": self.notes,
        }


class PlannedPoint(Protocol):
    """One expanded point of a spec, as both spec shapes expand them."""

    @property
    def config(self) -> Any: ...
    @property
    def repetition(self) -> int: ...
    @property
    def label(self) -> str: ...
    @property
    def config_hash(self) -> str: ...


class Spec(Protocol):
    """What planning reads of a sweep spec (both spec shapes have it)."""

    @property
    def name(self) -> str: ...
    @property
    def order(self) -> str: ...
    @property
    def order_seed(self) -> int | None: ...
    @property
    def warmup_runs(self) -> int: ...
    @property
    def cooldown_s(self) -> float: ...
    @property
    def cooldown_until_c(self) -> float | None: ...

    def spec_hash(self) -> str: ...


class PlanRules(Protocol):
    """A run kind's part of planning: its checks, what it stores of the spec, which of its
    points it cannot run here, and how long one is expected to take."""

    def check(self, *, open_files: bool) -> None: ...
    def spec_dict(self) -> dict[str, Any]: ...
    def expand(self, order_seed: int | None) -> Iterable[PlannedPoint]: ...
    def history(self, store: Store) -> pd.DataFrame | None: ...
    def skip_reason(self, point: PlannedPoint) -> str: ...
    def run_reason(self, point: PlannedPoint) -> str: ...
    def expected_s(self, point: PlannedPoint, history: pd.DataFrame | None) -> float | None: ...


class RunKind(Protocol):
    """A run kind's part of running: entered once for the sweep (a warm worker, say), it
    checks what must hold before any run, takes the untimed warm-up runs and runs one entry
    (claim, measure, store) to its ``RunOutcome``."""

    def __enter__(self) -> RunKind: ...
    def __exit__(self, *exc: object) -> None: ...
    def prepare(self, todo: list[PlanEntry]) -> None: ...
    def warm_up(self, entry: PlanEntry) -> None: ...
    def run(self, entry: PlanEntry, sweep: str, identity: tuple[int, int] | None) -> Any: ...


def dry_run_seed(spec: Spec, store: Store | None, notes: list[str]) -> int | None:
    """The order seed a dry run shows, read from the store without writing to it."""
    record = store.sweep_record(spec.name) if store is not None else None
    if record is not None and record[0] == spec.spec_hash():
        return record[1]
    if record is not None:
        notes.append(
            f"the database already holds sweep {spec.name!r} with a different spec, so the "
            "sweep itself would be refused; use another --db or rename the sweep"
        )
    if spec.order_seed is None and spec.order == "random":
        from wattlab.experiment.specs.base import draw_order_seed

        notes.append(
            "the random order shown uses a seed drawn for this dry run; the sweep draws and "
            "records its own"
        )
        return draw_order_seed()
    return spec.order_seed


def build_plan(
    spec: Spec, store: Store | None, rules: PlanRules, *, register: bool = True
) -> SweepPlan:
    """The whole sweep, in run order, with what will run, what is done and what is skipped.

    The kind's checks come first (a ConfigError before anything is stored). ``register``
    records the sweep in the store (a real sweep); without it (a dry run) nothing is written,
    no data file is opened, and ``store`` may be None (no database yet).
    """
    rules.check(open_files=register)
    notes: list[str] = []
    if register:
        if store is None:
            raise ValueError("registering a sweep needs a store")
        order_seed = store.register_sweep(
            spec.name, rules.spec_dict(), spec.spec_hash(), spec.order_seed
        )
    else:
        order_seed = dry_run_seed(spec, store, notes)
    done = store.completed_keys(spec.name) if store is not None else set()
    history = rules.history(store) if store is not None else None
    entries = []
    for i, point in enumerate(rules.expand(order_seed), start=1):
        reason = rules.skip_reason(point)
        if (point.config_hash, point.repetition) in done:
            action, reason = "done", "already stored as ok"
        elif reason:
            action = "skip"
        else:
            action, reason = "run", rules.run_reason(point)
        entries.append(
            PlanEntry(
                order=i,
                config=point.config,
                repetition=point.repetition,
                label=point.label,
                config_hash=point.config_hash,
                action=action,
                reason=reason,
                expected_s=rules.expected_s(point, history) if action == "run" else None,
            )
        )
    return SweepPlan(
        name=spec.name,
        entries=entries,
        order_seed=order_seed,
        warmup_runs=spec.warmup_runs,
        cooldown_s=float(spec.cooldown_s),
        notes=notes,
        cooldown_until_c=spec.cooldown_until_c,
    )


COOLDOWN_POLL_S = 1.0


def cool_down(
    seconds: float,
    until_c: float | None,
    *,
    hottest_c: Callable[[], float | None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> float:
    """Pause ``seconds``; with ``until_c``, end early once the hottest GPU is at or below it
    (without a reading the whole pause is taken). Returns the seconds paused."""
    if seconds <= 0:
        return 0.0
    start = clock()
    if until_c is None:
        sleep(seconds)
        return clock() - start
    if hottest_c is None:
        from wattlab.meters.idle import hottest_gpu_c

        hottest_c = hottest_gpu_c
    while True:
        left = seconds - (clock() - start)
        if left <= 0:
            break
        temperature = hottest_c()
        if temperature is not None and temperature <= until_c:
            break
        sleep(min(COOLDOWN_POLL_S, left))
    return clock() - start


def check_still_there(db_path: str | Path, identity: tuple[int, int] | None = None) -> None:
    """Between a sweep's runs: the database is still there, and (given its ``identity``,
    ``store.file_identity`` when the sweep opened it) still the same file: a sweep never
    silently starts a new database, nor goes on in another file put in its place."""
    from wattlab.errors import WorkStopped
    from wattlab.experiment.db.store import check_identity

    if not Path(db_path).expanduser().is_file():
        raise WorkStopped(
            f"the database {db_path} vanished during the sweep (removed or moved), so the "
            "sweep stops here; put it back and run the sweep again to resume."
        )
    check_identity(Path(db_path).expanduser(), identity)


def drive(
    plan: SweepPlan,
    kind: RunKind,
    db_path: str,
    *,
    on_start: Callable[[PlanEntry], None] | None = None,
    on_finish: Callable[[PlanEntry, Any], None] | None = None,
    stop_at: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> list[tuple[PlanEntry, Any]]:
    """Run the plan's 'run' entries in order with ``kind``, holding the sweep's lock (see the
    module). Returns each run entry with its outcome, in the order run."""
    from wattlab import stop_signals
    from wattlab.experiment.db.store import open_store, pinned
    from wattlab.experiment.sweep.lock import SweepLock

    db = Path(db_path).expanduser()
    with SweepLock(db_path, plan.name), pinned(db) as pin, kind:
        with open_store(db_path) as store:
            opened = [i for i, sweep in store.abandoned_at_open if sweep == plan.name]
            abandoned = opened + store.abandon_running(plan.name)
            identity = pin or store.identity  # every later run must find this very file
        if abandoned:
            plan.notes.append(
                f"{len(abandoned)} run(s) left running by a dead process marked abandoned "
                f"(ids {', '.join(map(str, abandoned))}); they run again."
            )
        todo = plan.to_run
        outcomes: list[tuple[PlanEntry, Any]] = []
        if not todo:
            return outcomes
        kind.prepare(todo)
        for _ in range(plan.warmup_runs):
            stop_signals.raise_if_swallowed()  # a Ctrl-C a library ate
            kind.warm_up(todo[0])
        for i, entry in enumerate(todo):
            stop_signals.raise_if_swallowed()  # a Ctrl-C a library ate
            if _past_deadline(entry, stop_at, clock):
                left = len(todo) - i
                plan.notes.append(
                    f"the time limit ended the sweep: {left} of {len(todo)} run(s) not started "
                    "(they run when the sweep is run again)"
                )
                break
            check_still_there(db_path, identity)
            with open_store(db_path, create=False) as store:
                if (entry.config_hash, entry.repetition) in store.completed_keys(plan.name):
                    continue  # stored ok since the plan was made
            if i > 0:
                pause_s = plan.cooldown_s
                if stop_at is not None:
                    pause_s = min(pause_s, max(stop_at - clock(), 0.0))
                cool_down(pause_s, plan.cooldown_until_c)
            if on_start:
                on_start(entry)
            outcome = kind.run(entry, plan.name, identity)
            outcomes.append((entry, outcome))
            if on_finish:
                on_finish(entry, outcome)
        if outcomes and not getattr(outcomes[-1][1], "stored", True):
            check_still_there(db_path, identity)  # the last run was lost with its database
        return outcomes


def _past_deadline(entry: PlanEntry, stop_at: float | None, clock: Callable[[], float]) -> bool:
    """Whether ``entry`` may no longer start: the deadline has passed, or its expected
    duration (when known) would run past it."""
    if stop_at is None:
        return False
    now = clock()
    return now >= stop_at or (entry.expected_s is not None and now + entry.expected_s > stop_at)


__all__ = [
    "PlanEntry",
    "PlanRules",
    "RunKind",
    "SweepPlan",
    "build_plan",
    "check_still_there",
    "cool_down",
    "drive",
    "dry_run_seed",
]
