"""Where a sweep's runs execute: ``local`` (one after another here, experiment/sweep/plan.py) or
``slurm`` (one task per run in a job array, executors/slurm.py)."""

EXECUTORS = ("local", "slurm")
