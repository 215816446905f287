"""The run budget in the HTML report: the verdict's run bar above the step bar, and the run budget's section.

Real run folders rendered and opened in Chromium: the bar's parts fill it and add to 100 %, each legend entry gives the
part's time, share and line; the section's table adds to the run's wall time. A trace alone has no run budget, so no
bar. Tiny hand-made results (names ``fake_``) cover what no fixture holds: a library frame, two ranks, 250 work rows.
"""

from __future__ import annotations

import dataclasses
import re

import pandas as pd
import pytest

import diagnose
from diagnose.derive.run_budget_table import RUN_PARTS
from diagnose.findings import Result
from diagnose.verdict import RunBudgetBar, RunPart
from reports.chart_budget import figure_marks, figures_in_page
from reports.figures import CAUSE_COLORS, RUN_PART_COLORS, UNKNOWN_CAUSE_COLOR, run_part_color
from reports.html import render_html, run_budget_view
from reports.sections import run_budget as section
from tests.browser import external_requests, visit
from tests.paths import FIXTURES

CHAR_LM = FIXTURES / "runs" / "char_lm_eval"
INPUT_BOUND = FIXTURES / "runs" / "input_bound"
PERIODIC_CHECKPOINT = FIXTURES / "runs" / "periodic_checkpoint"
TRACE_ONLY = FIXTURES / "trace" / "sync_planted" / "trace.json.gz"

# what the tests read from the live page, in one visit
PAGE_JS = {
    "run_bar": "!!document.getElementById('run-budget')",
    "step_bar": "!!document.getElementById('step-budget')",
    "run_before_step": """(() => {
        const run = document.getElementById('run-budget'), step = document.getElementById('step-budget');
        return !!(run && step && (run.compareDocumentPosition(step) & Node.DOCUMENT_POSITION_FOLLOWING));
    })()""",
    "run_bar_in_verdict": "!!document.querySelector('#verdict #run-budget')",
    "caption": "document.querySelector('#run-budget > .muted') ? document.querySelector('#run-budget > .muted').innerText : ''",
    "style_widths": "[...document.querySelectorAll('#run-budget .part')].map(p => parseFloat(p.style.width))",
    "px_widths": "[...document.querySelectorAll('#run-budget .part')].map(p => p.getBoundingClientRect().width)",
    "bar_px": "document.querySelector('#run-budget .bar') ? document.querySelector('#run-budget .bar').clientWidth : 0",
    "part_titles": "Object.fromEntries([...document.querySelectorAll('#run-budget .part')].map(p => [p.dataset.part, p.title]))",
    "legend": "Object.fromEntries([...document.querySelectorAll('#run-budget .legend li')].map(l => [l.dataset.part, l.innerText]))",
    "parts_rows": """[...document.querySelectorAll('#run-budget-parts tbody tr')].map(tr => {
        const cells = [...tr.cells], heads = [...document.querySelectorAll('#run-budget-parts thead th')].map(h => h.title);
        return Object.fromEntries(heads.map((h, i) => [h, cells[i].dataset.v !== undefined ? parseFloat(cells[i].dataset.v) : cells[i].innerText]));
    })""",
    "work_counted": """(() => {
        const t = document.getElementById('run-budget-work');
        if (!t) return [];
        const i = [...t.querySelectorAll('thead th')].map(h => h.title).indexOf('counted_ms');
        return [...t.querySelectorAll('tbody tr')].map(tr => parseFloat(tr.cells[i].dataset.v));
    })()""",
    "section_plot_drawn": "!!document.querySelector('#fig-run-budget .main-svg')",
}


def analysed(path):
    return diagnose.analyze(diagnose.load(path))


@pytest.fixture(scope="module")
def char_lm():
    return analysed(CHAR_LM)


def test_every_run_part_has_its_own_colour_and_shared_meanings_share_the_cause_colour():
    assert list(RUN_PART_COLORS) == [part for part, _ in RUN_PARTS]
    assert len(set(RUN_PART_COLORS.values())) == len(RUN_PARTS)
    assert run_part_color("input") == CAUSE_COLORS["input"] == "#b279a2"
    assert run_part_color("gpudiag") == CAUSE_COLORS["trace_window"] == "#eeca3b"
    assert run_part_color("slow_unexplained") == CAUSE_COLORS["unexplained"] == "#e8e8e8"
    assert run_part_color("fake_part") == UNKNOWN_CAUSE_COLOR
    # the other parts are told apart from every cause of the step bar drawn under them
    own = {p: c for p, c in RUN_PART_COLORS.items() if p not in ("input", "gpudiag", "slow_unexplained")}
    assert set(own.values()).isdisjoint(CAUSE_COLORS.values())


def test_run_bar_view_on_char_lm_eval(char_lm):
    run = char_lm.verdict.run
    view = run_budget_view(run)
    assert (
        view["basis"]
        == run.basis()
        == ("rank 0, 9.33 s, gpudiag's start to its end (this run folder predates the process's own clock)")
    )
    parts = {p["part"]: p for p in view["parts"]}
    assert list(parts) == [
        "setup",
        "warmup",
        "steady",
        "slow_unexplained",
        "evaluation",
        "checkpoint",
        "gpudiag",
        "teardown",
    ]
    ev = parts["evaluation"]
    assert (ev["ms"], ev["pct"], ev["location"], ev["library_location"]) == (
        "250 ms",
        "2.7 %",
        "char_lm_eval.py:56",
        "",
    )
    assert ev["title"] == "evaluation: 250 ms, 2.7 % of the run at char_lm_eval.py:56"
    assert parts["checkpoint"]["title"] == "checkpoints: 18.7 ms, 0.2 % of the run at char_lm_eval.py:68"
    assert parts["setup"]["title"] == "setup before the first step: 5.79 s, 62.0 % of the run"
    assert sum(float(p["width"]) for p in view["parts"]) == pytest.approx(100.0, abs=0.1)
    assert run_budget_view(None) is None


def test_run_bar_names_the_library_frame_beside_the_users_line():
    fake = RunBudgetBar(
        0,
        1000.0,
        "the process's start to its exit",
        (
            RunPart("setup", "setup before the first step", 700.0, 0.7),
            RunPart(
                "checkpoint",
                "checkpoints",
                300.0,
                0.3,
                "/home/u/fake_train<b>.py:88",
                "/venv/lib/python3.12/site-packages/torch/serialization.py:652",
            ),
        ),
    )
    view = run_budget_view(fake)
    ckpt = view["parts"][1]
    assert (ckpt["location"], ckpt["library_location"]) == ("fake_train<b>.py:88", "torch/serialization.py:652")
    assert ckpt["title"] == (
        "checkpoints: 300 ms, 30.0 % of the run at fake_train<b>.py:88 (in torch/serialization.py:652)"
    )
    a = diagnose.analyze(diagnose.Profile())
    a.verdict = dataclasses.replace(a.verdict, run=fake)
    page = render_html(a)
    bar = page[page.index('id="run-budget"') : page.index("</ul>", page.index('id="run-budget"'))]
    assert "Where the run's time goes (rank 0, 1 s, the process&#39;s start to its exit)" in bar
    assert "fake_train&lt;b&gt;.py:88" in bar and "fake_train<b>" not in bar  # user text escaped
    assert '<span class="mono where">(in torch/serialization.py:652)</span>' in bar
    assert re.findall(r'style="width: ([0-9.]+)%', bar) == ["70.000", "30.000"]


def fake_parts(rank: int, wall_ms: float) -> pd.DataFrame:
    rows = [("setup", 0.5), ("steady", 0.3), ("evaluation", 0.2)]
    labels = dict(RUN_PARTS)
    return pd.DataFrame(
        {
            "rank": rank,
            "part": [p for p, _ in rows],
            "label": [labels[p] for p, _ in rows],
            "ms": [s * wall_ms for _, s in rows],
            "share": [s for _, s in rows],
            "location": [None, None, "/x/fake_train.py:56"],
            "library_location": [None, None, None],
            "detail": ["", "", "3 timed"],
        }
    )


def fake_work(n: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "what": "evaluation",
            "name": None,
            "step": range(n),
            "t_ns": [1e18 + i for i in range(n)],
            "ms": [float(i % 97) for i in range(n)],
            "location": "/x/fake_train.py:56",
            "library_location": None,
            "part": "evaluation",
            "counted_ms": [float(i % 97) for i in range(n)],
            "phase": "in the steps",
            "rank": 0,
        }
    )


def test_section_draws_a_bar_per_rank_and_caps_the_work_table():
    result = Result("run_budget")
    result.tables["parts"] = pd.concat([fake_parts(0, 2000.0), fake_parts(1, 4000.0)], ignore_index=True)
    result.tables["work"] = fake_work(250)
    result.meta["parts"] = [p for p, _ in RUN_PARTS]
    result.meta["ranks"] = {
        0: {"wall_ms": 2000.0, "wall_of": "the process's start to its exit", "notes": ["fake note"]},
        1: {"wall_ms": 4000.0, "wall_of": "the process's start to its exit", "notes": []},
    }
    page = section.render(result)
    [fig] = figures_in_page(page)
    assert [t["name"] for t in fig["data"]] == ["setup before the first step", "steady steps", "evaluation"]
    assert [list(t["y"]) for t in fig["data"]] == [["rank 0", "rank 1"]] * 3
    assert figure_marks(fig) == 6
    assert "Rank 0: 2 s, the process&#x27;s start to its exit. Note: fake note." in page
    assert "Rank 1: 4 s, the process&#x27;s start to its exit.</p>" in page
    work = page[page.index('id="run-budget-work"') :]
    counted = [float(v) for v in re.findall(r'<td class="num" data-v="([0-9.e+-]+)">', work)[2::3]]
    assert len(counted) == 200 and counted == sorted(counted, reverse=True) and counted[0] == 96.0
    assert "Timed work, most costly first (250 records)" in page
    assert "50 more timed pieces of work, each shorter than those shown, are left out here." in page


def test_section_without_a_run_budget_says_so():
    assert section.render(Result("run_budget")) == '<p class="muted">No run budget for this input.</p>'


@pytest.mark.browser
def test_char_lm_eval_page_shows_the_run_bar_and_its_section(char_lm, tmp_path):
    a = char_lm
    out = tmp_path / "report.html"
    out.write_text(render_html(a))
    v = visit(out, evaluate=PAGE_JS)
    e = v.evaluated
    assert v.page_errors == [] and v.console_errors == [] and external_requests(v, out.as_uri()) == []
    assert v.rendered_plots == v.figure_divs and e["section_plot_drawn"]
    assert e["run_bar"] and e["run_bar_in_verdict"]
    # the caption says what 100 % is
    assert e["caption"] == f"Where the run's time goes ({a.verdict.run.basis()})"
    # the parts fill the bar: their widths add to 100 %, and in pixels to the bar's width
    assert len(e["style_widths"]) == len(a.verdict.run.parts) == 8
    assert sum(e["style_widths"]) == pytest.approx(100.0, abs=0.1)
    assert sum(e["px_widths"]) == pytest.approx(e["bar_px"], abs=1.0)
    # each part: label, time, share and line in its tooltip and its legend entry
    assert e["part_titles"]["evaluation"] == "evaluation: 250 ms, 2.7 % of the run at char_lm_eval.py:56"
    assert e["legend"]["evaluation"] == "evaluation 2.7 % 250 ms char_lm_eval.py:56"
    assert e["legend"]["checkpoint"] == "checkpoints 0.2 % 18.7 ms char_lm_eval.py:68"
    assert e["legend"]["gpudiag"] == "gpudiag's own cost 2.2 % 202 ms"
    # the section's table: every part, adding up to the rank's wall time
    rows = e["parts_rows"]
    parts = a.results["run_budget"].tables["parts"]
    assert [r["label"] for r in rows] == list(parts["label"])
    wall_ms = a.results["run_budget"].meta["ranks"][0]["wall_ms"]
    assert wall_ms == pytest.approx(9334.06, abs=0.01)
    assert sum(r["wall_ms"] for r in rows) == pytest.approx(wall_ms, rel=0.005)
    assert sum(r["share_of_run"] for r in rows) == pytest.approx(1.0, abs=0.005)
    evaluation = next(r for r in rows if r["label"] == "evaluation")
    assert evaluation["wall_ms"] == pytest.approx(250.48, abs=0.01)
    assert evaluation["location"].endswith("examples/char_lm_eval.py:56")
    # the timed work: 3 evaluations and 3 saves, most costly first
    assert e["work_counted"] == sorted(e["work_counted"], reverse=True) and len(e["work_counted"]) == 6
    assert sum(e["work_counted"]) == pytest.approx(250.48 + 18.70, abs=0.01)


@pytest.mark.browser
@pytest.mark.parametrize("path", [PERIODIC_CHECKPOINT, INPUT_BOUND], ids=lambda p: p.name)
def test_run_bar_sits_above_the_step_bar(path, tmp_path):
    a = analysed(path)
    assert a.verdict.run is not None and a.verdict.budget is not None
    out = tmp_path / "report.html"
    out.write_text(render_html(a))
    v = visit(out, evaluate=PAGE_JS)
    e = v.evaluated
    assert v.page_errors == [] and v.console_errors == []
    assert e["run_bar"] and e["step_bar"] and e["run_before_step"]
    assert sum(e["style_widths"]) == pytest.approx(100.0, abs=0.1)
    wall_ms = a.results["run_budget"].meta["ranks"][0]["wall_ms"]
    assert sum(r["wall_ms"] for r in e["parts_rows"]) == pytest.approx(wall_ms, rel=0.005)
    assert e["legend"]["gpudiag"].startswith("gpudiag's own cost ")


def test_a_trace_alone_has_no_run_budget():
    a = analysed(TRACE_ONLY)
    assert a.verdict.run is None and a.verdict.budget is not None
    page = render_html(a)
    assert 'id="run-budget"' not in page and 'id="section-run_budget"' not in page
    assert 'id="step-budget"' in page
