"""The GPU temperature each stored run started at (``idle_temperature_c``), against the pause
before it: what a sweep's cool-down buys (docs/engine.md, "Cool-down between runs").

    python bench/idle_temperatures.py docs/measured/h200-*.db.gz

Reads wattlab databases (gzipped or not) and prints, per database, the ok runs' starting
temperatures, their run times and the pauses between runs, then the runs that followed a pause
of more than 5 minutes.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table  # noqa: E402

LONG_PAUSE_S = 300.0


def runs_of(path: Path) -> pd.DataFrame:
    """The ok runs of one database in the order they started, with the pause before each."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "w.db"
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as source, open(db, "wb") as target:
            shutil.copyfileobj(source, target)
        with sqlite3.connect(db) as conn:
            runs = pd.read_sql(
                "SELECT started_at, finished_at, wall_s, idle_temperature_c, idle_power_w "
                "FROM runs WHERE status = 'ok' ORDER BY started_at",
                conn,
            )
    start = pd.to_datetime(runs["started_at"])
    end = pd.to_datetime(runs["finished_at"])
    runs["pause_s"] = (start - end.shift()).dt.total_seconds()
    runs["database"] = path.name
    return runs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("databases", nargs="+", type=Path)
    args = parser.parse_args()
    runs = pd.concat([runs_of(p) for p in args.databases], ignore_index=True)
    rows = []
    for name, part in runs.groupby("database", sort=True):
        t = part["idle_temperature_c"]
        rows.append([name, len(part), f"{t.min():g}-{t.max():g}", f"{t.median():g}",
                     f"{part['wall_s'].min():.1f}-{part['wall_s'].max():.1f}",
                     f"{part['pause_s'].median():.2f}"])  # fmt: skip
    t = runs["idle_temperature_c"]
    rows.append(["all", len(runs), f"{t.min():g}-{t.max():g}", f"{t.median():g}",
                 f"{runs['wall_s'].min():.1f}-{runs['wall_s'].max():.1f}",
                 f"{runs['pause_s'].median():.2f}"])  # fmt: skip
    print_table(
        "ok runs: GPU temperature at the start (C), run wall time (s), pause before (s)",
        ["database", "runs", "start C", "median C", "wall s", "median pause s"],
        rows,
    )
    long = runs[runs["pause_s"] > LONG_PAUSE_S]
    print_table(
        f"runs after a pause of more than {LONG_PAUSE_S:g} s",
        ["database", "pause s", "start C", "idle W"],
        [
            [r.database, f"{r.pause_s:.0f}", f"{r.idle_temperature_c:g}", f"{r.idle_power_w:.0f}"]
            for r in long.itertuples()
        ],  # fmt: skip
    )


if __name__ == "__main__":
    main()
