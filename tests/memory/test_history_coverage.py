"""The memory section says only what the allocator history recorded (issue 19).

fixtures/runs/repeat_a is a default light-mode `gpudiag profile --trace-start 4 --trace-steps 3` run on the
H200: the history runs from CUDA's first use (4.93 s) to the snapshot after step 6 (11.43 s), and the run goes
on to step 58 and 12.88 s. Its heatmap must end at step 6, its curves at 11.43 s, and the rest be a labelled
"not recorded" band, not step 6's state repeated.
"""

from __future__ import annotations

import base64
import re
import warnings
from functools import cache

import numpy as np
import pandas as pd
import pytest

from diagnose.analysis import run_analyzer
from diagnose.analyzers import fragmentation
from diagnose.derive.allocator_timeline import allocator_timeline, hit_after_new_segment
from diagnose.ingest.loading import load_run_folder
from diagnose.thresholds import Thresholds
from reports.chart_budget import MAX_MARKS, figure_marks, figures_in_page
from reports.sections import fragmentation as section
from tests.memory.conftest import scenario_profile
from tests.paths import REPO

RUNS = REPO / "fixtures" / "runs"


def values(array) -> np.ndarray:
    """A plotly data array from a page: a list, or a typed array {"dtype", "bdata"}."""
    if isinstance(array, dict):
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=np.dtype(array["dtype"]))
    return np.asarray(array, dtype=float)


@cache
def run_result(name: str):
    return run_analyzer(fragmentation, load_run_folder(RUNS / name))


# (run, first and last covered step, steps in the run, recorded seconds since the run's start, run seconds)
WINDOW_RUNS = [
    ("repeat_a", 0, 6, 59, (4.926, 11.430), 12.876),
    ("sync_planted", 0, 6, 11, (3.190, 7.608), 8.679),
    ("torchrun_mlp", 0, 12, 29, (6.936, 10.897), 12.530),
]


@pytest.mark.parametrize("name, first, last, run_steps, recorded, run_s", WINDOW_RUNS)
def test_coverage_counts_the_steps_and_seconds_the_history_recorded(name, first, last, run_steps, recorded, run_s):
    result = run_result(name)
    cov = result.meta["coverage"]
    covered = last - first + 1
    assert (cov["first_covered_step"], cov["last_covered_step"]) == (first, last)
    assert (cov["covered_steps"], cov["run_steps"]) == (covered, run_steps)
    assert cov["run_span_source"] == "manifest" and cov["starts_empty"]
    assert (round(cov["recorded_start_s"], 3), round(cov["recorded_end_s"], 3)) == recorded
    assert round(cov["run_s"], 3) == run_s
    assert result.summary["history_coverage_pct"] == pytest.approx(100 * covered / run_steps)
    assert cov["time_pct"] == pytest.approx(100 * (recorded[1] - recorded[0]) / run_s, abs=0.01)
    assert cov["not_recorded_after"] and not cov["not_recorded_before"]
    assert (cov["first_step_after"], cov["last_step_after"]) == (last + 1, run_steps - 1)
    spans = result.tables["history_coverage"]
    assert spans["span"].tolist() == ["recorded", "not recorded"]
    assert spans["steps"].tolist() == [covered, run_steps - covered]
    assert spans["first_step"].iloc[1] == last + 1 and spans["last_step"].iloc[1] == run_steps - 1


def test_repeat_a_heatmap_and_tables_stop_at_the_last_recorded_step():
    result = run_result("repeat_a")
    bins = result.tables["heatmap_bins"]
    assert result.meta["heatmap_axis"] == "step"
    assert bins["label"].tolist() == ["before step 0"] + [f"step {s}" for s in range(7)]
    assert bins["last_step"].iloc[-1] == 6  # the heatmap's last column is the last step the history saw
    assert bins["entries"].tolist() == [84, 94] + [102] * 6
    cov = result.meta["coverage"]
    assert bins["t_end_s"].iloc[-1] == pytest.approx(cov["recorded_end_s"])
    assert result.tables["timeline"]["t_s"].max() == pytest.approx(cov["recorded_end_s"])
    assert result.tables["fragmentation_curve"]["t_s"].max() <= cov["recorded_end_s"] + 1e-9
    per_step = result.tables["per_step"]
    assert per_step["step"].tolist() == [-1, 0, 1, 2, 3, 4, 5, 6]  # no row for steps 7-58, never seen
    # step 6 ends when step 7 starts, after the last entry: its end-of-step bytes were not recorded
    assert per_step["whole_step_recorded"].tolist() == [False] + [True] * 6 + [False]
    assert np.isnan(per_step["reserved_end_bytes"].iloc[-1]) and per_step["reserved_end_bytes"].iloc[-2] == 442499072
    # memory_stats records at steps 0 and 1 lie inside the history; those at steps 8 and 51 after it
    stats = result.tables["memory_stats_agreement"]
    assert stats["step"].tolist() == [0, 1, 8, 51] and stats["in_history"].tolist() == [True, True, False, False]
    assert (
        stats.loc[stats["in_history"], "agrees"].all()
        and stats.loc[~stats["in_history"], "replayed_reserved_bytes"].isna().all()
    )
    assert result.summary["memory_stats_agreement_pct"] == 100.0


def test_section_states_the_coverage_and_draws_the_not_recorded_band():
    result = run_result("repeat_a")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a figure over the mark budget warns (reports/figures.py)
        page = section.render(result)
    caption = re.search(r'id="fragmentation-coverage">(.*?)</p>', page).group(1).replace("&#x27;", "'")
    assert (
        "allocator history covers steps 0–6 (7 of the run's 59 steps, 11.9 %; 4.93–11.43 s of the run's 12.88 s"
        in caption
    )
    assert "not recorded: steps 7–58, 11.43–12.88 s (1.45 s)" in caption
    figures = {f["id"]: f for f in figures_in_page(page)}
    assert set(figures) == {"fragmentation-timeline", "fragmentation-heatmap", "fragmentation-external"}
    for fig in figures.values():
        assert figure_marks(fig) <= MAX_MARKS
        bands = [s for s in fig["layout"]["shapes"] if s["type"] == "rect"]
        labels = [a["text"] for a in fig["layout"]["annotations"]]
        assert len(bands) == 1 and labels == ["not recorded: steps 7–58<br>11.43–12.88 s (1.45 s)"]
    heat = figures["fragmentation-heatmap"]
    assert heat["data"][0]["x"][-1] == "step 6"
    band = heat["layout"]["shapes"][0]
    assert band["x0"] == 7.5 and heat["layout"]["xaxis"]["range"][1] == band["x1"]  # beside the last column
    timeline = figures["fragmentation-timeline"]
    t_band = timeline["layout"]["shapes"][0]
    assert t_band["x0"] == pytest.approx(11.4296105)  # the band starts at the last recorded entry
    assert timeline["layout"]["xaxis"]["ticktext"][-1] == "12.88 (run end)"
    assert max(values(timeline["data"][0]["x"])) == pytest.approx(11.4296105)  # no point after it
    assert "binned: 1 point per 2 entries, 395 bins" in timeline["layout"]["title"]["text"]


def test_a_history_that_covers_every_step_draws_no_step_band():
    result = run_result("mem_churn")  # snapshot at exit: all 29 steps, then 2.77 s of shutdown not recorded
    cov = result.meta["coverage"]
    assert (cov["covered_steps"], cov["run_steps"], cov["steps_not_recorded_after"]) == (29, 29, 0)
    assert result.summary["history_coverage_pct"] == 100.0
    assert cov["recorded_end_s"] == pytest.approx(8.5358065) and cov["run_end_s"] == pytest.approx(11.30679925)
    # the last step's column, then the entries after it (the exit) in one of their own
    assert result.tables["heatmap_bins"]["label"].tolist()[-2:] == ["step 28", "after step 28"]
    page = section.render(result)
    assert "not recorded: no step, 8.54–11.31 s (2.77 s)" in page


def test_heatmap_keeps_the_mark_budget_by_grouping_steps():
    th = Thresholds().with_overrides({"memory": {"max_heatmap_time_bins": 12}})
    result = run_analyzer(fragmentation, scenario_profile("churn"), th)
    bins = result.tables["heatmap_bins"]
    assert result.meta["heatmap_steps_per_column"] == 3  # 30 steps in 10 columns, beside "before step 0"
    assert bins["label"].tolist() == ["before step 0"] + [f"steps {s}–{s + 2}" for s in range(0, 30, 3)]
    assert bins["last_step"].iloc[-1] == 29
    page = section.render(result)
    heat = next(f for f in figures_in_page(page) if f["id"] == "fragmentation-heatmap")
    assert "binned: 1 column per 3 steps, 11 bins" in heat["layout"]["title"]["text"]
    # never more cells than the budget allows, whatever the thresholds ask
    wide = Thresholds().with_overrides({"memory": {"max_heatmap_time_bins": 10_000}})
    r = run_analyzer(fragmentation, scenario_profile("churn", with_stats=False), wide)
    assert len(r.tables["heatmap"]) <= fragmentation.HEATMAP_MAX_CELLS
    assert r.meta["heatmap_bin_s"] == 0.01  # 42 rows: at most 118 columns; the 0.686 s history in 10 ms ones
    assert len(r.tables["heatmap_bins"]) == 69 <= fragmentation.HEATMAP_MAX_CELLS // 42


def fake_starts_past_the_history(snapshot, kernels) -> pd.DataFrame:
    """fake: launch times from the churn history's first entry to twice its span, so the later half of the
    launches come after the history stopped (the captures are real, their clocks are not the same run's)."""
    from parsers.ncu_launch_starts import LAUNCH_STARTS_SCHEMA

    t_us = snapshot.trace["t_us"].to_numpy(dtype=float)
    times = np.linspace(t_us.min(), t_us.min() + 2 * (t_us.max() - t_us.min()), len(kernels)) * 1000.0
    frame = pd.DataFrame(
        {
            "launch_id": kernels["launch_id"].astype("int64"),
            "kernel": kernels["kernel_short"],
            "t_start_ns": times.astype("int64"),
        }
    )
    return frame.astype({c: d for c, d in LAUNCH_STARTS_SCHEMA.columns.items() if c != "kernel"})


def test_launches_after_the_history_are_neither_after_a_new_segment_nor_other():
    from parsers.snapshot import read_snapshot
    from tests.ncu_read import ncu_kernels

    snapshot = read_snapshot(REPO / "fixtures" / "memory" / "churn" / "snapshot.pickle.gz")
    kernels = ncu_kernels(REPO / "fixtures" / "ncu" / "kernel_kinds" / "raw.csv.gz")
    launches = allocator_timeline(kernels, fake_starts_past_the_history(snapshot, kernels), snapshot)["launches"]
    assert launches["in_history"].tolist() == [True] * 12 + [False] * 11  # 23 launches over twice the span
    assert not launches.loc[~launches["in_history"], "after_new_segment"].any()
    figures = hit_after_new_segment(launches)
    assert figures["launches_outside_history"] == 11
    assert figures["launches_after_new_segment"] + figures["launches_other"] == 12


def test_not_recorded_band_renders_in_chromium(tmp_path):
    from diagnose.analysis import Analysis
    from reports.html import render_html
    from tests.browser import external_requests, visit

    result = run_result("repeat_a")
    analysis = Analysis(
        results={"fragmentation": result},
        findings=list(result.findings),
        summary=dict(result.summary),
        source={"paths": ["fixtures/runs/repeat_a"]},
    )
    out = tmp_path / "repeat_a_memory.html"
    out.write_text(render_html(analysis))
    heat = "#fragmentation-heatmap"
    v = visit(
        out,
        evaluate={
            "bands": "['#fragmentation-timeline', '#fragmentation-heatmap', '#fragmentation-external']"
            ".map(id => document.querySelectorAll(id + ' .shapelayer path').length)",
            "labels": f"[...document.querySelectorAll('{heat} .annotation-text')].map(e => e.textContent)",
            "last_column": f"[...document.querySelectorAll('{heat} .xtick text')].map(e => e.textContent).pop()",
        },
    )
    assert v.page_errors == [] and v.console_errors == []
    assert external_requests(v, out.as_uri()) == []
    assert v.rendered_plots == v.figure_divs >= 3
    assert v.evaluated["bands"] == [1, 1, 1]
    assert v.evaluated["labels"] == ["not recorded: steps 7–5811.43–12.88 s (1.45 s)"]  # two lines, one <br>
    assert v.evaluated["last_column"] == "step 6"
