"""The short summaries on a real capture: the terminal lines (cut on a word boundary in a terminal, whole in CI),
the Markdown of `--md`, and the notebook HTML of ``Analysis._repr_html_``."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

import diagnose
from reports.markdown import cell, code
from reports.terminal import ELLIPSIS, MIN_WIDTH, fit, render_terminal
from tests.cli_run import gpudiag
from tests.paths import FIXTURES

TINY = FIXTURES / "ncu" / "tiny_kernels" / "raw.csv"
SYNC_PLANTED = FIXTURES / "runs" / "sync_planted"
TINY_TITLE = "48 of 48 launches (100 %) run under 5 µs (mean 2.17 µs, 2 kernels): launch-bound"
TINY_FIX_START = "Launch fewer, larger kernels (vectorized_elementwise_kernel, vectorized_elementwise_kernel #2)"


@pytest.fixture(scope="module")
def tiny():
    return diagnose.analyze(diagnose.load(TINY))


@pytest.fixture(scope="module")
def sync_planted():
    return diagnose.analyze(diagnose.load(SYNC_PLANTED))


# --- terminal -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "width,expected",
    [
        (24, "48 of 48 launches…"),  # "(100 %)" would end at 25
        (30, "48 of 48 launches (100 %) run…"),
        (40, "48 of 48 launches (100 %) run under…"),  # "5" is not left without its "µs"
        (45, "48 of 48 launches (100 %) run under 5 µs…"),
        (len(TINY_TITLE), TINY_TITLE),
    ],
)
def test_fit_cuts_on_a_word_boundary_never_inside_a_number(width, expected):
    assert fit(TINY_TITLE, width) == expected
    assert len(expected) <= width


def test_fit_keeps_every_word_whole_at_every_width():
    words = TINY_TITLE.split()
    for width in range(1, len(TINY_TITLE) + 1):
        cut = fit(TINY_TITLE, width)
        kept = cut.removesuffix(ELLIPSIS).split()
        assert kept[:-1] == words[: len(kept) - 1], (width, cut)
        assert kept[-1] == words[len(kept) - 1].rstrip(",;:"), (width, cut)  # whole: "2.2" never becomes "2."
        assert kept, width  # a first word longer than the room is kept whole


def test_terminal_line_keeps_severity_cost_and_id_when_cut(tiny):
    text = render_terminal(tiny, width=100)
    line = next(line for line in text.splitlines() if line.startswith("critical"))
    assert line == "critical  48 of 48 launches (100 %) run under 5 µs… (cost 100.0 %)  [tiny_kernels.launch_bound]"
    assert len(line) <= 100
    narrow = render_terminal(tiny, width=10)  # never narrower than MIN_WIDTH
    assert max(len(x) for x in narrow.splitlines() if x.startswith("critical")) <= MIN_WIDTH


def test_terminal_without_width_cuts_nothing(sync_planted):
    text = render_terminal(sync_planted)
    lines = text.splitlines()
    host_sync = next(f for f in sync_planted.findings if f.id == "sync.host_sync")
    assert f" warning  {host_sync.title} (cost 8.9 %)  [sync.host_sync]" in lines  # of the untraced median step
    assert ELLIPSIS not in text.replace("   … and", "")


def test_cli_output_in_ci_is_not_cut_even_with_a_narrow_columns():
    r = gpudiag("report", TINY, "--no-html", env={"COLUMNS": "40"})  # stdout is a pipe, as in CI
    assert r.returncode == 0, r.stderr
    assert f"critical  {TINY_TITLE} (cost 100.0 %)  [tiny_kernels.launch_bound]" in r.stdout.splitlines()


# --- Markdown (--md) ------------------------------------------------------------------------------


def test_report_md_has_verdict_findings_table_and_what_was_not_measured(tmp_path):
    md_path = tmp_path / "summary.md"
    r = gpudiag("report", TINY, "--no-html", "--md", md_path)
    assert r.returncode == 0, r.stderr
    assert f"Wrote {md_path}" in r.stdout
    md = md_path.read_text()
    lines = md.splitlines()
    assert lines[0] == f"## gpudiag: `{TINY}` on NVIDIA H200"
    assert "**Verdict:** 48 of 48 launches (100 %) run under 5 µs (mean 2.17 µs, 2 kernels): launch-bound;" in md
    assert "1 critical, 0 warning, 1 info, 10 not measured" in lines  # the info: l2.below_band
    header = lines.index("| Severity | Id | Finding | Cost | Fix |")
    assert lines[header + 1] == "|---|---|---|---:|---|"
    row = lines[header + 2]
    assert row.startswith(f"| critical | `tiny_kernels.launch_bound` | {TINY_TITLE} | 100.0 % | {TINY_FIX_START}")
    assert row.count(" | ") == 4 and row.endswith(" |")
    nm = lines.index("### Not measured")
    not_measured = [x for x in lines[nm + 1 :] if x.startswith("- ")]
    assert len(not_measured) == 10  # step_budget.not_measured and run_budget.not_measured among them
    assert not_measured[1].startswith("- GPU idle time was not measured: Profile with `gpudiag profile`")
    assert not_measured[1].endswith("(`idle.not_measured`)")


def test_check_md_has_the_gate_line(tmp_path):
    md_path = tmp_path / "gate.md"
    r = gpudiag("check", SYNC_PLANTED, "--fail-on", "warning", "--md", md_path)
    assert r.returncode == 1
    md = md_path.read_text()
    # the idle finding is info: 8.9 % of the untraced median step is idle (28.8 % of the traced steps; issue 31)
    assert "**Gate:** FAIL: 1 finding at or above warning: sync.host_sync" in md
    rows = [x for x in md.splitlines() if x.startswith("| warning |") or x.startswith("| info |")]
    assert [x.split(" | ")[1] for x in rows] == [
        "`sync.host_sync`",
        "`step_budget.sync`",
        "`run_budget.startup`",
        "`idle.gpu_idle`",
        "`launch.launch_bound`",
    ]
    assert "| 8.9 % |" in rows[0] and "| 8.9 % |" in rows[1] and "| 8.9 % |" in rows[3]


def test_markdown_cells_escape_pipes_html_and_newlines():
    assert cell("void gemm<float>(a|b)\n  & more") == "void gemm&lt;float&gt;(a\\|b) &amp; more"
    assert code("a|b`c") == "`a\\|b'c`"


# --- notebook (_repr_html_) -----------------------------------------------------------------------


class _Cells(HTMLParser):
    def __init__(self):
        super().__init__()
        self.rows, self.tags = [], set()

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self.rows[-1].append("")

    def handle_data(self, data):
        if self.rows and self.rows[-1]:
            self.rows[-1][-1] += data.strip("\n")


def test_repr_html_is_a_compact_summary_with_verdict_and_findings(sync_planted):
    html = sync_planted._repr_html_()
    assert len(html) < 20_000  # the full report page is megabytes
    assert "<script" not in html and "plotly" not in html.lower()
    parser = _Cells()
    parser.feed(html)
    assert parser.rows[0] == ["Severity", "Id", "Finding", "Cost", "Fix"]
    body = parser.rows[1:]
    assert [r[1] for r in body] == [
        "sync.host_sync",
        "step_budget.sync",
        "run_budget.startup",
        "idle.gpu_idle",
        "launch.launch_bound",
    ]
    assert [r[3] for r in body] == ["8.9 %", "8.9 %", "–", "8.9 %", "–"]
    assert body[0][2].startswith("5 host syncs per step; the costliest, aten::to at ")
    verdict = re.search(r'<p class="gpudiag-verdict"><b>(.*?)</b></p>', html).group(1)
    assert verdict == sync_planted.verdict.sentence.replace("'", "&#x27;")
    assert "0 critical, 1 warning, 4 info, 0 not measured" in html


def test_every_summary_renders_an_empty_analysis():
    from diagnose.analysis import Analysis
    from reports.markdown import render_markdown
    from reports.notebook import render_notebook_html

    empty = Analysis()
    assert render_terminal(empty, width=80) == "gpudiag: (no input named)\n0 critical, 0 warning, 0 info\n"
    md = render_markdown(empty)
    assert md.splitlines()[:5] == [
        "## gpudiag: (no input named)",
        "",
        "0 critical, 0 warning, 0 info, 0 not measured",
        "",
        "No findings.",
    ]
    html = empty._repr_html_()
    assert html == render_notebook_html(empty) and "<table" not in html
    assert "0 critical, 0 warning, 0 info, 0 not measured" in html
