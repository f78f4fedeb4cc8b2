"""`wattlab power restore`: put back the GPU power limits that a killed run left behind, from
the power-limit journal; exit 1 while a journalled GPU cannot be found here."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

power_app = typer.Typer(help="GPU power-limit journal.", no_args_is_help=True)


@power_app.command("restore")
def power_restore(
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Restore even though the journal's process id is alive: for a pid that now "
            "names another program (the session that wrote the journal is gone).",
        ),
    ] = False,
) -> None:
    """Put back the GPU power limits a killed run left behind on this host (its journal)."""
    from wattlab.experiment.runs.runner import restore_pending_limits
    from wattlab.power_limits import default_journal_path

    restored = restore_pending_limits(force=force)
    if not restored:
        print("nothing to restore: no power-limit journal was left behind.")
    for entry in restored:
        print(f"restored {entry}")
    left = [str(e["uuid"]) for e in restored if e.get("status") == "gpu not found"]
    if left:
        print(
            f"wattlab: the journal {default_journal_path()} is kept with the {len(left)} "
            f"GPU limit(s) that could not be put back here ({', '.join(left)} not found).",
            file=sys.stderr,
        )
        raise typer.Exit(1)
