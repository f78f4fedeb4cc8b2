"""Everything that prints for people: the typer app, tables, progress, the sweep view."""

from __future__ import annotations


def main() -> None:
    """Entry point of the `wattlab` command (imports the app only when called)."""
    from wattlab.cli.app import main as _main

    _main()
