"""`wattlab compare BASELINE CANDIDATE`: an energy regression gate a CI job can run.

Each side is a database, or one sweep of it (``DB::SWEEP``), optionally only the runs of one
code commit; or both sides come out of one sweep (``DB::SWEEP --sides AXIS=BASE,CAND``). For
every configuration on both sides it gives the change in energy and in time per sample with
its interval, a verdict and the smallest change the data could have detected
(``wattlab.analysis.compare``); it prints Markdown (a PR comment), writes it and JSON when
asked, and exits 1 when the energy per sample regressed by possibly the threshold or more, 0
otherwise, 2 on bad input (docs/compare.md).
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from wattlab.cli.options import bounded, output_file
from wattlab.errors import ConfigError


def compare(
    baseline: Annotated[
        str, typer.Argument(help="The baseline: a database, or DB::SWEEP for one sweep of it.")
    ],
    candidate: Annotated[
        Optional[str],
        typer.Argument(
            help="The candidate: a database, or DB::SWEEP for one sweep of it (none with "
            "--sides: both sides come out of the baseline's sweep)."
        ),
    ] = None,
    sides: Annotated[
        Optional[str],
        typer.Option(
            "--sides",
            help="AXIS=BASE,CAND: both sides out of one sweep (DB::SWEEP), told apart by a grid "
            "axis; best run with order: abba, then compared pair by pair.",
        ),
    ] = None,
    baseline_commit: Annotated[
        Optional[str],
        typer.Option("--baseline-commit", help="Only the baseline's runs of this code commit."),
    ] = None,
    candidate_commit: Annotated[
        Optional[str],
        typer.Option("--candidate-commit", help="Only the candidate's runs of this code commit."),
    ] = None,
    config: Annotated[
        Optional[list[str]],
        typer.Option("--config", help="Only this configuration (hash, its prefix, or label)."),
    ] = None,
    threshold_percent: Annotated[
        float,
        typer.Option(
            "--threshold",
            help="Fail (exit 1) on an energy-per-sample regression that may reach this, in %.",
            callback=bounded("--threshold", "compare_threshold_percent"),
        ),
    ] = 5.0,
    confidence: Annotated[
        float,
        typer.Option(
            "--confidence",
            help="Confidence of the gate over all configurations (one-sided).",
            callback=bounded("--confidence", "compare_confidence"),
        ),
    ] = 0.95,
    session_noise_percent: Annotated[
        Optional[float],
        typer.Option(
            "--session-noise",
            help="Between-session spread per side, in % (default: 6 across sessions, measured "
            "on H200s; 0 within one session).",
            callback=bounded("--session-noise", "session_noise_percent"),
        ),
    ] = None,
    allow_hardware_mismatch: Annotated[
        bool,
        typer.Option(
            "--allow-hardware-mismatch",
            help="Compare sides measured on different GPUs, GPU counts or power limits.",
        ),
    ] = False,
    markdown_out: Annotated[
        Optional[str],
        typer.Option("--markdown", help="Write the Markdown here too.", callback=output_file),
    ] = None,
    json_out: Annotated[
        Optional[str],
        typer.Option(
            "--json", help="Write the result as JSON here ('-' = stdout).", callback=output_file
        ),
    ] = None,
) -> None:
    """Compare a candidate's energy and time per sample with a baseline's; exit 1 on an energy
    regression that may reach --threshold."""
    from wattlab.analysis.compare_report import as_json, markdown
    from wattlab.analysis.compare_runs import (
        compare_sides,
        load_side,
        parse_side,
        parse_sides,
        split_sweep,
    )
    from wattlab.jsonio import dump_json, write_text_atomic

    if markdown_out is not None and markdown_out == json_out:
        raise ConfigError("--markdown and --json name the same file; give two files.")
    if sides is not None:
        if candidate is not None:
            raise ConfigError(
                "--sides takes both sides out of one sweep: give DB::SWEEP alone, without a "
                "candidate."
            )
        if candidate_commit is not None:
            raise ConfigError(
                "--candidate-commit does not go with --sides; give --baseline-commit."
            )
        split = parse_sides(sides)
        base, cand = split_sweep(parse_side(baseline, baseline_commit), split, config or ())
    elif candidate is None:
        raise ConfigError(
            "give a candidate (a database, or DB::SWEEP), or --sides AXIS=BASE,CAND to take "
            "both sides out of one sweep."
        )
    else:
        base = load_side(parse_side(baseline, baseline_commit), config or ())
        cand = load_side(parse_side(candidate, candidate_commit), config or ())
    comparison = compare_sides(
        base,
        cand,
        threshold=threshold_percent / 100,
        confidence=confidence,
        session_sd=None if session_noise_percent is None else session_noise_percent / 100,
    )
    mismatch = comparison.hardware_mismatch
    if mismatch and not allow_hardware_mismatch:
        shown = "; ".join(
            f"{d.label} {', '.join(d.baseline)} against {', '.join(d.candidate)}" for d in mismatch
        )
        raise ConfigError(
            f"the baseline and the candidate were measured on different hardware ({shown}); "
            "pass --allow-hardware-mismatch to compare them anyway."
        )
    text = markdown(comparison)
    if json_out != "-":
        print(text)
    if markdown_out is not None:
        write_text_atomic(markdown_out, text + "\n")
    if json_out is not None:
        dump_json(as_json(comparison), json_out)
    if comparison.exceeds:
        raise typer.Exit(1)
