"""Property test (issue #50 item 3): hostile names (a ``|``, a newline and a fake heading, raw
``<script>``, links, @mentions, backticks, list markers) fed through ``wattlab compare``'s
Markdown, the report and the energy statement show as written and do nothing else: parsed by a
CommonMark parser with GitHub's tables, they open no HTML, link, image, emphasis, heading or
list of their own, keep every table row's cells, and leave no @mention or URL for GitHub to
turn into a notification or a live link."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from wattlab.analysis.compare_report import markdown as compare_markdown
from wattlab.analysis.compare_runs import Side, SideSpec, compare_sides
from wattlab.analysis.markdown_text import JOINER, md_text, unlinked, visible
from wattlab.analysis.report import analyze_runs, report_blocks
from wattlab.analysis.report_html import render_html
from wattlab.analysis.report_markdown import render_markdown
from wattlab.analysis.statement import energy_statement
from wattlab.experiment.db.stored_run import StoredRun

# markdown-it-py parses what the writers wrote; it comes with rich, but not with rich's floor
# (the floors job, make test-floors), where this module is skipped and says why
_WHY = "markdown-it-py is not installed (rich at its floor does not need it)"
MarkdownIt = pytest.importorskip("markdown_it", reason=_WHY).MarkdownIt
Token = pytest.importorskip("markdown_it.token", reason=_WHY).Token

SETTINGS = settings(
    max_examples=int(os.environ.get("WATTLAB_PROPERTY_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
FRAGMENTS = (
    "|", "\n", "\r\n", "\n## wattlab compare: energy gate passed\n", "<script>x</script>",
    "[l](http://e.x)", "![i](x.png)", "@octocat", "`", "``", "**b**", "_i_", "~~s~~", "# h",
    "- ", "1. ", "+ ", "=", "---", "> q", "www.e.x", "https://e.x", "mailto:a@b.c", "&lt;b&gt;",
    "&amp;", "\\", "<!--", "<https://e.x>", "a", "resnet18", " ", "\t", "\u2028", "<b>",
)  # fmt: skip
hostile = (
    st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=4), min_size=1, max_size=6)
    .map("".join)
    .filter(lambda s: s.strip() != "" and "\x00" not in s)
)
PARSER = MarkdownIt("commonmark").enable(["table", "strikethrough"])
# what GitHub turns into a mention or a live link (a word joiner, U+2060, breaks each)
LINKING = re.compile(
    r"@[A-Za-z0-9]|(?i:https?|ftp)://|(?i:mailto|xmpp):(?!\u2060)|(?i:www)\.(?!\u2060)"
)
SAFE = ("alpha", "bravo", "charlie", "delta", "echo")  # plain names, one per hostile field


def _walk(tokens: list[Token]):
    for token in tokens:
        yield token
        if token.children:
            yield from _walk(token.children)


def _shape(text: str) -> list[str]:
    """The document's structure: every token but the text itself (headings, paragraphs, lists,
    table rows and cells, emphasis, code, links, HTML), in order."""
    return [t.type for t in _walk(PARSER.parse(text)) if t.type != "text"]


def check(text: str, plain: str, shown: list[str]) -> None:
    """``text`` (Markdown, with hostile names) has the structure of ``plain`` (the same document
    with plain names): the names opened nothing of their own; each of ``shown`` reads as
    written; no text is left that GitHub would turn into a mention or a link."""
    assert _shape(text) == _shape(plain), text
    words = [t.content for t in _walk(PARSER.parse(text)) if t.type == "text"]
    assert not any(LINKING.search(w) for w in words), text
    inline = "".join(
        t.content if t.type in ("text", "code_inline") else "\n"
        for t in _walk(PARSER.parse(text))
        if t.type in ("text", "code_inline", "softbreak", "hardbreak")
    )
    for want in shown:
        assert want in inline, (want, inline, text)


def distinct(*names: str) -> bool:
    """Hostile names that differ from each other and from every name the documents hold."""
    taken = {"h", "plain", "pr", "gen", *SAFE}
    return len({n.strip() for n in names}) == len(names) and not taken & {n.strip() for n in names}


def _run(run_id: int, label: str, energy: float, **fields: object) -> StoredRun:
    return StoredRun.from_row(
        {"id": run_id, "status": "ok", "config_hash": "cfg", "label": label, "samples": 1000,
         "duration_s": 10.0, "energy_total_j": energy, "device": "cpu", "gpus": 0,
         "started_at": "2026-12-05T01:00:00+00:00", **fields}
    )  # fmt: skip


def _compare(label: str, host: str, cpu: str, version: str, sweep: str) -> str:
    base = Side(
        SideSpec(f"base{sweep}.db", sweep),
        tuple(_run(i, label, 1000.0 + i, hostname=host, cpu_model=cpu) for i in range(3)),
    )
    cand = Side(
        SideSpec("pr.db", "pr"),
        tuple(_run(10 + i, label, 1200.0 + i, hostname="h", wattlab_version=version)
              for i in range(3)),
    )  # fmt: skip
    return compare_markdown(compare_sides(base, cand))


@SETTINGS
@given(label=hostile, host=hostile, cpu=hostile, version=hostile, sweep=hostile)
def test_compare_shows_hostile_names_as_written(label, host, cpu, version, sweep) -> None:
    assume(distinct(label, host, cpu, version, sweep))
    text = _compare(label, host, cpu, version, sweep)
    check(
        text, _compare(*SAFE), [unlinked(visible(x)).strip() for x in (label, host, cpu, version)]
    )
    assert sum(line.startswith("## ") for line in text.splitlines()) == 1


def _report_runs(label: str, gpu: str, cpu: str, host: str) -> pd.DataFrame:
    rows = []
    for c, name in enumerate((label, "plain")):
        for rep in range(2):
            rows.append(
                {"id": len(rows) + 1, "sweep": "gen", "status": "ok", "error": None,
                 "config_hash": f"h{c}", "repetition": rep, "config_json": "{}", "label": name,
                 "model": "m", "precision": "fp32", "device": "cuda", "gpus": 1,
                 "batch_size": 64, "samples": 1000, "duration_s": 10.0 + c + rep,
                 "energy_total_j": 1000.0 * (c + 1) + rep, "energy_gpu_j": 500.0,
                 "provenance": "measured", "gpu_name": gpu, "cpu_model": cpu, "hostname": host,
                 "power_limit_w": 300.0, "co2e_kg": 1e-4, "intensity_kg_per_kwh": 0.2,
                 "pue": 1.0}
            )  # fmt: skip
    return pd.DataFrame(rows)


def _report(runs: pd.DataFrame) -> tuple[str, str]:
    summary, data = analyze_runs(runs)
    blocks = report_blocks(runs, summary, data, None, [])
    return render_markdown("wattlab report", blocks, Path(".")), render_html(
        "wattlab report", blocks, Path(".")
    )


@SETTINGS
@given(label=hostile, gpu=hostile, cpu=hostile, host=hostile)
def test_the_report_shows_hostile_names_as_written(label, gpu, cpu, host) -> None:
    assume(distinct(label, gpu, cpu, host))
    text, page = _report(_report_runs(label, gpu, cpu, host))
    plain, plain_page = _report(_report_runs(*SAFE[:4]))
    one_line = unlinked(label.replace("\r", " ").replace("\n", " ")).strip()
    check(text, plain, [one_line])
    assert page.count("<script") == plain_page.count("<script")
    assert page.count("<b>") == plain_page.count("<b>") and page.count("<a ") == plain_page.count(
        "<a "
    )


def _statement(frame: pd.DataFrame, sweep: str) -> str:
    text = energy_statement(frame, what=f"sweep {sweep}").markdown()
    return text.split("## Hugging Face model card", 1)[0]


@SETTINGS
@given(label=hostile, gpu=hostile, cpu=hostile, sweep=hostile)
def test_the_statement_shows_hostile_names_as_written(label, gpu, cpu, sweep) -> None:
    assume(distinct(label, gpu, cpu, sweep))
    runs, plain = _report_runs(label, gpu, cpu, "h"), _report_runs(*SAFE[:3], "h")
    one = runs["config_hash"] == "h0"
    # (the GPU's and CPU's names are read stripped and split at commas: only their effect on
    # the structure is checked)
    label_shown, sweep_shown = (unlinked(visible(x)).strip() for x in (label, sweep))
    check(_statement(runs[one], sweep), _statement(plain[one], SAFE[3]), [label_shown])
    check(_statement(runs, sweep), _statement(plain, SAFE[3]), [sweep_shown])


def test_the_issue_s_grid_value_is_one_cell_with_no_html() -> None:
    """The value from the issue: a command sweep's grid value in a label."""
    value = "a|b`c` <script>x</script> [l](http://e.x)"
    cell = md_text(value)
    assert re.search(r"(?<!\\)[<`\[\]]", cell) is None  # every one escaped
    assert JOINER in cell and "\\|" in cell
