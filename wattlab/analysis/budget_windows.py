"""What a run's budget window holds, for runs of a command sweep: the block the script marked
with ``wattlab.budget``, or (without a mark) the whole process, start-up, imports and data
loading included. The report says so in one sentence; built-in runs have no such column."""

from __future__ import annotations

from typing import Any

import pandas as pd

from wattlab.analysis.runs_table import ok_runs

MARKED = "marked"
WHOLE_PROCESS = "whole process"


def budget_windows(runs: pd.DataFrame) -> dict[str, Any] | None:
    """``{"marked": n, "whole_process": n, "labels_whole_process": [...], "sentence": str}``
    over the ok runs of a command sweep; None when no run came from a command."""
    if "budget_window" not in runs.columns:
        return None
    ok = ok_runs(runs)
    kinds = ok["budget_window"].astype("object")
    known = ok[kinds.notna()]
    if known.empty:
        return None
    whole = known[known["budget_window"].astype("object") == WHOLE_PROCESS]
    marked = len(known) - len(whole)
    labels = sorted({str(x) for x in whole["label"]}) if "label" in whole else []
    if whole.empty:
        sentence = (
            f"Budget window: all {marked} command run(s) marked it with wattlab.budget; "
            "start-up, imports and data loading are outside it."
        )
    elif marked == 0:
        sentence = (
            f"Budget window: none of the {len(whole)} command run(s) marked it with "
            "wattlab.budget, so each window is the whole process (interpreter start-up, "
            "imports and data loading included)."
        )
    else:
        sentence = (
            f"Budget window: {marked} command run(s) marked it with wattlab.budget; "
            f"{len(whole)} did not, so their window is the whole process (start-up and data "
            f"loading included): {', '.join(labels)}. Compare them with care."
        )
    return {
        "marked": int(marked),
        "whole_process": int(len(whole)),
        "labels_whole_process": labels,
        "sentence": sentence,
    }
