"""Does `wattlab compare` keep its promise? A simulation on noise measured on H200s (CPU only).

`wattlab compare` (wattlab/analysis/compare.py) promises: with no change, its gate fails at most
5 % of the time (A/A false alarms); with a change as large as the threshold (5 %) and the
repetitions it recommends, the gate fails at least 80 % of the time (power). This bench draws
repetitions from measured noise and counts, with exactly the function `compare` calls.

Noise, all from stored H200 runs:

- within a session: the pairs of repetitions of one configuration on one card in the reference
  database (`docs/measured/h200-reference-2026-12-03-main.db.gz`, same config_hash and
  gpu_uuids): each pair's log difference d gives two residuals +-d/sqrt(2) (a residual's
  variance is then a run's); a trial's repetitions are drawn from them with replacement.
- between sessions: the log ratio of the same configuration measured on another day (set R,
  `docs/measured/compare-noise-h200-days-apart.csv`) or on another card the same day (the
  repeat database `docs/measured/h200-reference-2026-12-03-repeat.db.gz` against the main one's
  first repetition); a cross-session trial adds one of them, with a random sign, to every
  repetition of the candidate.

The wide grid (`docs/measured/h200-wide-2026-12-04/`) holds one run per configuration, so it has
no repetitions to draw from and is not used.

    python bench/compare_power.py --trials 4000 --seed 1

prints a table and writes `compare-power.json` under $OUT (or bench-out/).
"""

from __future__ import annotations

import argparse
import gzip
import math
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._common import print_table, write_json  # noqa: E402
from wattlab.analysis.compare import (  # noqa: E402
    CONFIDENCE,
    POWER,
    THRESHOLD,
    compare_values,
    reps_needed,
)

MEASURED = ROOT / "docs" / "measured"
MAIN_DB = MEASURED / "h200-reference-2026-12-03-main.db.gz"
REPEAT_DB = MEASURED / "h200-reference-2026-12-03-repeat.db.gz"
DAYS_APART = MEASURED / "compare-noise-h200-days-apart.csv"


@dataclass(frozen=True)
class Noise:
    """Residuals of log energy per sample: within a session (one per run) and between sessions
    (one per pair of sessions)."""

    within: np.ndarray
    between: np.ndarray

    @property
    def spread(self) -> float:
        """A run's standard deviation of log energy per sample within a session."""
        return float(np.sqrt(np.mean(self.within**2)))

    @property
    def session_sd(self) -> float:
        """Each session's offset's standard deviation: the root mean square of the log ratios
        between sessions (their mean shift counted), over sqrt(2), less nothing for the runs'
        own scatter (so it is an upper estimate)."""
        return float(np.sqrt(np.mean(self.between**2) / 2))


def _rows(db_gz: Path, sql: str) -> list[tuple]:
    with tempfile.TemporaryDirectory() as folder:
        plain = Path(folder) / "runs.db"
        with gzip.open(db_gz, "rb") as src, plain.open("wb") as dst:
            shutil.copyfileobj(src, dst)
        conn = sqlite3.connect(plain)
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()


_SQL = (
    "SELECT config_hash, repetition, gpu_uuids, energy_total_j, samples FROM runs "
    "WHERE status = 'ok' AND energy_total_j > 0 AND samples > 0"
)


def load_noise(
    main_db: Path = MAIN_DB, repeat_db: Path = REPEAT_DB, days_apart: Path = DAYS_APART
) -> Noise:
    """The within- and between-session residuals (see the module docstring)."""
    main = _rows(main_db, _SQL)
    by_config: dict[str, list[tuple[int, str, float]]] = {}
    for config, rep, uuids, energy, samples in main:
        by_config.setdefault(config, []).append((rep, uuids, math.log(energy / samples)))
    within: list[float] = []
    first: dict[str, float] = {}
    for config, runs in by_config.items():
        runs.sort()
        first[config] = runs[0][2]
        if len(runs) == 2 and runs[0][1] == runs[1][1]:  # one card
            d = runs[1][2] - runs[0][2]
            within += [d / math.sqrt(2), -d / math.sqrt(2)]
    between = [
        math.log(energy / samples) - first[config]
        for config, _, _, energy, samples in _rows(repeat_db, _SQL)
        if config in first
    ]
    between += _days_apart(days_apart)
    return Noise(np.asarray(within), np.asarray(between))


def _days_apart(path: Path) -> list[float]:
    import csv

    with path.open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(line for line in handle if not line.startswith("#")))
    key = ("model", "precision", "batch_size", "stem", "epochs", "train_size")
    earlier = {tuple(r[k] for k in key): r for r in rows if r["set"] != "R"}
    out = []
    for row in rows:
        before = earlier.get(tuple(row[k] for k in key))
        if row["set"] == "R" and before is not None:
            per = float(row["energy_total_j"]) / float(row["train_size"])
            per_before = float(before["energy_total_j"]) / float(before["train_size"])
            out.append(math.log(per / per_before))
    return out


@dataclass(frozen=True)
class Rate:
    """How often the gate failed in ``trials`` trials, with a 95 % Wilson interval."""

    scenario: str
    reps: int
    true_change: float
    session_sd: float
    trials: int
    gate_failed: int

    @property
    def rate(self) -> float:
        return self.gate_failed / self.trials

    def wilson(self) -> tuple[float, float]:
        z, n, p = 1.959964, self.trials, self.rate
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return centre - half, centre + half


def simulate(
    noise: Noise,
    reps: int,
    *,
    true_change: float = 0.0,
    cross_session: bool = False,
    session_sd: float = 0.0,
    trials: int = 2000,
    seed: int = 1,
    threshold: float = THRESHOLD,
    scenario: str = "",
) -> Rate:
    """Run ``trials`` comparisons of ``reps`` repetitions per side drawn from ``noise``; the
    candidate is ``true_change`` higher (a fraction) and, ``cross_session``, shifted by a
    between-session draw; ``session_sd`` is what `compare` is told of sessions. Counts how often
    its gate failed."""
    rng = np.random.default_rng(seed)
    shift = math.log1p(true_change)
    failed = 0
    for _ in range(trials):
        base = rng.choice(noise.within, reps)
        cand = rng.choice(noise.within, reps) + shift
        if cross_session:
            cand = cand + rng.choice(noise.between) * rng.choice((-1.0, 1.0))
        change = compare_values(
            np.exp(base),
            np.exp(cand),
            threshold=threshold,
            session_sd=session_sd,
            recommend=False,
        )
        failed += change.exceeds
    return Rate(scenario, reps, true_change, session_sd, trials, failed)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threshold", type=float, default=THRESHOLD)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    noise = load_noise()
    recommended = reps_needed(noise.spread, args.threshold)
    cross = reps_needed(noise.spread, args.threshold, session_sd=noise.session_sd)
    if recommended is None:
        raise SystemExit("no number of repetitions reaches the threshold on this noise")
    rates: list[Rate] = []
    for n in sorted({2, 3, 5, 10, recommended}):
        rates.append(
            simulate(noise, n, trials=args.trials, seed=args.seed + n, scenario="A/A, one session")
        )
    for n in sorted({5, 10, recommended}):
        rates.append(
            simulate(
                noise,
                n,
                true_change=args.threshold,
                trials=args.trials,
                seed=args.seed + 100 + n,
                scenario="+threshold, one session",
            )
        )
    rates.append(
        simulate(
            noise,
            recommended,
            cross_session=True,
            trials=args.trials,
            seed=args.seed + 200,
            scenario="A/A, two sessions, told nothing",
        )
    )
    rates.append(
        simulate(
            noise,
            recommended,
            cross_session=True,
            session_sd=noise.session_sd,
            trials=args.trials,
            seed=args.seed + 300,
            scenario="A/A, two sessions, session term",
        )
    )
    big = 4 * args.threshold
    rates.append(
        simulate(
            noise,
            recommended,
            true_change=big,
            cross_session=True,
            session_sd=noise.session_sd,
            trials=args.trials,
            seed=args.seed + 400,
            scenario=f"+{big:.0%}, two sessions, session term",
        )
    )
    rows = [
        [
            r.scenario,
            r.reps,
            f"{r.true_change:+.0%}",
            f"{r.session_sd:.3f}",
            r.trials,
            f"{r.rate:.3f}",
            "[{:.3f}, {:.3f}]".format(*r.wilson()),
        ]
        for r in rates
    ]
    print(
        f"noise: {noise.within.size} within-session residuals (a run's spread "
        f"{noise.spread:.4f} in log energy per sample), {noise.between.size} between-session "
        f"log ratios (session sd {noise.session_sd:.4f}); threshold {args.threshold:.0%}, "
        f"confidence {CONFIDENCE:.0%} one-sided, power {POWER:.0%}"
    )
    print(
        f"compare recommends {recommended} repetitions per side within one session; "
        f"across sessions: {cross if cross is not None else 'none reach it'}"
    )
    print_table(
        "How often the gate failed (exit 1)",
        ["scenario", "reps/side", "true change", "session term", "trials", "rate", "95 % interval"],
        rows,
    )
    path = write_json(
        "compare-power",
        {
            "trials": args.trials,
            "seed": args.seed,
            "threshold": args.threshold,
            "confidence": CONFIDENCE,
            "power": POWER,
            "noise": {
                "within_residuals": noise.within.size,
                "spread_log": noise.spread,
                "between_ratios": noise.between.size,
                "session_sd_log": noise.session_sd,
            },
            "recommended_reps_one_session": recommended,
            "recommended_reps_two_sessions": cross,
            "rates": [
                {
                    "scenario": r.scenario,
                    "reps": r.reps,
                    "true_change": r.true_change,
                    "session_sd": r.session_sd,
                    "trials": r.trials,
                    "gate_failed": r.gate_failed,
                    "rate": r.rate,
                    "wilson95": list(r.wilson()),
                }
                for r in rates
            ],
            "seconds": time.perf_counter() - started,
        },
    )
    print(f"\nwrote {path} in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
