"""Everything that prints for people: the typer app, tables, progress, the sweep view."""

from __future__ import annotations


def main() -> None:
    """Entry point of the `wattlab` command (imports the app only when called). A stop signal
    at any moment, the imports included, ends it with one line and 128 + N (130 for Ctrl-C);
    see ``wattlab.stop_signals``."""
    from wattlab import stop_signals

    # the start-up handlers (installed by wattlab/__init__) stay while the app is imported: a
    # signal there leaves at once with its line; the app's main installs the raising ones
    try:
        from wattlab.cli.app import main as _main

        _main()
    except SystemExit:
        raise
    except BaseException:
        if stop_signals.RECEIVED:
            stop_signals.exit_stopped(stop_signals.RECEIVED[0])
        raise
