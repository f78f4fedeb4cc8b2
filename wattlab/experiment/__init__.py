"""Experiments: validated run configurations, the runner, sweeps and the SQLite store."""
