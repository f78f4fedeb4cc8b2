"""The report's Advice section: the baseline and the configurations off the Pareto front, each
with what the advisor would change and the predicted saving, in Markdown and HTML."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.analysis.test_analysis_report import make_runs
from tests.estimate.test_advise import KnownLaw
from wattlab.analysis.report import analyze_runs
from wattlab.analysis.report_advice import advice_blocks, advice_rows
from wattlab.analysis.report_html import render_html
from wattlab.analysis.report_markdown import render_markdown
from wattlab.estimate.advise.stored import advise_from_run


def _known(runs, windows, trace, run_id, **options):  # type: ignore[no-untyped-def]
    return advise_from_run(runs, windows, trace, run_id, pre_model=KnownLaw(), **options)


def test_the_section_lists_the_baseline_and_what_is_off_the_front(tmp_path: Path) -> None:
    runs = make_runs()
    _, data = analyze_runs(runs)
    rows = advice_rows(runs, None, None, data, advise=_known)
    listed = {c["label"] for c in data["configurations"] if c["is_baseline"] or not c["pareto"]}
    assert {r["label"] for r in rows} == listed and listed
    baseline = next(r for r in rows if r["role"] == "baseline")
    # fp32 on an A40: the known law predicts amp-bf16 at 1/6 of the energy per image
    assert baseline["change"].startswith("precision fp32 -> amp-bf16")
    assert baseline["saving_low"] <= baseline["saving"] <= baseline["saving_high"]
    precision_only = 1 - (1e-4 * 400) / (4e-4 * 600)
    if "power limit" in baseline["change"]:  # the cap law adds its own (smaller) saving
        assert precision_only < baseline["saving"] < precision_only + 0.1
    else:
        assert baseline["saving"] == pytest.approx(precision_only, abs=0.02)
    blocks = advice_blocks(rows)
    markdown = render_markdown("r", blocks, tmp_path)
    html = render_html("r", blocks, tmp_path)
    assert "## Advice" in markdown and "precision fp32 -&gt; amp-bf16" in html
    assert "no GPU setting was changed" in markdown
    assert f"{baseline['saving']:.1%}" in markdown and f"{baseline['saving']:.1%}" in html


def test_a_configuration_that_cannot_be_advised_says_why() -> None:
    runs = make_runs()
    runs.loc[runs["status"] == "ok", "gpu_name"] = None
    _, data = analyze_runs(runs)
    rows = advice_rows(runs, pd.DataFrame(), pd.DataFrame(), data, advise=_known)
    assert rows and all("does not name its GPU" in r["error"] for r in rows)
    table = advice_blocks(rows)[-1]
    assert all(row[3] == "n/a" for row in table.rows)  # type: ignore[union-attr]


def test_the_command_in_the_section_is_code_and_a_users_backtick_stays_a_character(
    tmp_path: Path,
) -> None:
    """Issue 48: the section's command showed as escaped, literal backticks in the HTML."""
    from wattlab.analysis.report_document import Para, Table, code

    blocks = [
        *advice_blocks([]),
        Table(["label"], [["my `odd` label", f"{code('a|b')}"]]),
        Para("a user's stray \x02 marker and `ticks`"),
    ]
    html = render_html("r", blocks, tmp_path)
    assert "<code>wattlab advise --db DB --run ID --max-slowdown 0</code>" in html
    assert "`wattlab advise" not in html
    assert "my `odd` label" in html and "\ufdd0" not in html and "<code>a|b</code>" in html
    md = render_markdown("r", blocks, tmp_path)
    assert "What `wattlab advise --db DB --run ID --max-slowdown 0` would change" in md
    assert "my \\`odd\\` label" in md and "`a\\|b`" in md and "\ufdd0" not in md
