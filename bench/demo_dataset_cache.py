"""How much disk the demo's cached synthetic dataset takes (issue 48): the demo-cpu preset's data
built into the cache folder (``$WATTLAB_CACHE_DIR``; give an empty one), then ``du`` of it.

    WATTLAB_CACHE_DIR=/tmp/cache PYTHONPATH=$PWD .venv/bin/python bench/demo_dataset_cache.py
"""

from __future__ import annotations

import subprocess

from wattlab.experiment.specs.load import load_sweep_spec
from wattlab.train.config import RunConfig
from wattlab.train.data import default_cache_dir, load_dataset


def main() -> None:
    spec = load_sweep_spec("demo-cpu")
    cfg = RunConfig(**{**dict(spec.base), "batch_size": 16})  # the data is the grid's for both
    folder = default_cache_dir()
    print("cache folder:", folder)
    keys = ("model", "stem", "image_size", "dataset", "train_samples", "test_samples")
    print("config:", {k: getattr(cfg, k) for k in keys})
    load_dataset(cfg, cache_dir=folder)
    for argv in (["du", "-sh", "--apparent-size"], ["du", "-sh"], ["ls", "-la"]):
        done = subprocess.run([*argv, str(folder)], capture_output=True, text=True, check=False)
        print(done.stdout.strip())


if __name__ == "__main__":
    main()
