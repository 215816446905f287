"""diagnose.analyzers.steps on hand-made step frames (no real step timings captured yet)."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from diagnose.analysis import run_analyzer
from diagnose.analyzers import steps
from diagnose.findings import Severity
from diagnose.thresholds import Thresholds
from tests.events.conftest import fake_profile, fake_steps

TH = Thresholds()


def ids(result):
    return {f.id: f for f in result.findings}


def test_absent_step_events_say_not_measured():
    result = run_analyzer(steps, fake_profile(), TH)
    assert [f.id for f in result.findings] == ["steps.not_measured"]
    assert result.findings[0].severity == Severity.INFO and result.summary == {}


def test_host_bound_critical_with_warmup_excluded():
    # 3 warm-up steps far slower; then 10 steps of 30 ms host for 10 ms GPU
    profile = fake_profile(step_events={0: fake_steps([900, 500, 400] + [30] * 10, [800, 450, 390] + [10] * 10)})
    result = run_analyzer(steps, profile, TH)
    s = result.summary
    assert s["step_warmup_excluded"] == 3 and s["step_count"] == 10
    assert s["step_time_median_ms"] == 30.0 and s["step_gpu_time_median_ms"] == 10.0
    assert s["step_host_over_gpu_ratio"] == 3.0 and s["step_time_spread_pct"] == 0.0
    found = ids(result)
    assert set(found) == {"steps.host_bound"}
    bound = found["steps.host_bound"]
    assert bound.severity == Severity.CRITICAL
    assert bound.cost_share == pytest.approx(2 / 3)
    assert bound.subjects[0].name == "rank 0" and bound.subjects[0].figures["host_over_gpu_ratio"] == 3.0
    table = result.tables["steps"]
    assert table["warmup"].tolist() == [True] * 3 + [False] * 10


def test_balanced_steady_steps_give_no_finding():
    profile = fake_profile(step_events={0: fake_steps([10.5, 10.2, 10.0] * 5, [10.0, 10.0, 9.9] * 5)})
    result = run_analyzer(steps, profile, TH)
    assert result.findings == []
    assert result.summary["step_host_over_gpu_ratio"] == pytest.approx(10.2 / 10.0)


def test_host_bound_warning_band():
    profile = fake_profile(step_events={0: fake_steps([15.0] * 8, [10.0] * 8)})
    finding = ids(run_analyzer(steps, profile, TH))["steps.host_bound"]
    assert finding.severity == Severity.WARNING and finding.cost_share == pytest.approx(1 / 3)


def test_unstable_steps_list_outliers():
    host = [50, 50, 50] + [10, 11, 10, 30, 10, 12, 10, 25, 10, 11]
    profile = fake_profile(step_events={0: fake_steps(host, host)})
    result = run_analyzer(steps, profile, TH)
    finding = ids(result)["steps.unstable"]
    assert result.summary["step_time_median_ms"] == 10.5
    p10, p90 = result.summary["step_time_p10_ms"], result.summary["step_time_p90_ms"]
    assert (p10, p90) == (10.0, pytest.approx(25.5))
    assert result.summary["step_time_spread_pct"] == pytest.approx(100 * 15.5 / 10.5)
    assert finding.severity == Severity.CRITICAL  # spread 148 % ≥ 100 %
    assert [s.figures["step"] for s in finding.subjects] == [6, 10]  # 30 ms and 25 ms, slowest first
    assert result.summary["step_outlier_count"] == 2
    assert finding.cost_share == pytest.approx((0.5 + 19.5 + 1.5 + 14.5 + 0.5) / 139)  # time above the median


def test_single_outlier_in_steady_run_is_info():
    host = [10.0] * 20
    host[12] = 40.0
    result = run_analyzer(steps, fake_profile(step_events={0: fake_steps(host, [9.5] * 20)}), TH)
    finding = ids(result)["steps.outliers"]
    assert finding.severity == Severity.INFO and finding.subjects[0].figures["step"] == 12
    assert finding.cost_share == pytest.approx(30 / sum(host[3:]))


def test_gpu_only_user_timings_use_gpu_time():
    profile = fake_profile(step_events={0: fake_steps([float("nan")] * 6, [20, 20, 20, 20, 21, 19])})
    result = run_analyzer(steps, profile, TH)
    assert result.summary["step_time_median_ms"] == 20.0
    assert "step_host_over_gpu_ratio" not in result.summary
    assert result.findings == []


def test_warmup_never_more_than_half_and_threshold_override():
    short = fake_profile(step_events={0: fake_steps([30, 30, 30, 30], [10, 10, 10, 10])})
    assert run_analyzer(steps, short, TH).summary["step_warmup_excluded"] == 2
    th = dataclasses.replace(
        TH, steps=dataclasses.replace(TH.steps, warmup_steps=0, host_bound_ratio=5.0, host_bound_critical_ratio=9.0)
    )
    result = run_analyzer(steps, fake_profile(step_events={0: fake_steps([30] * 6, [10] * 6)}), th)
    assert result.summary["step_warmup_excluded"] == 0 and result.findings == []


def test_two_ranks_each_a_subject_and_regions_table():
    events = {0: fake_steps([30] * 6, [10] * 6, rank=0), 1: fake_steps([12] * 6, [10] * 6, rank=1)}
    events[1] = pd.concat([events[1], fake_steps([4] * 6, [4] * 6, rank=1, name="forward")], ignore_index=True)
    result = run_analyzer(steps, fake_profile(step_events=events), TH)
    finding = ids(result)["steps.host_bound"]
    severities = {s.name: s.severity for s in finding.subjects}
    assert severities == {"rank 0": Severity.CRITICAL, "rank 1": Severity.INFO}
    regions = result.tables["regions"]
    assert regions["name"].tolist() == ["forward"] and regions["share_of_step_pct"].iloc[0] == pytest.approx(
        100 * 4 / result.summary["step_time_median_ms"]
    )
    assert result.tables["per_rank"]["host_over_gpu_ratio"].tolist() == [3.0, 1.2]


def test_chart_rows_are_bounded():
    """The analyzer keeps every step; the section draws every 4th of 10,000 (and the 3 warm-up steps)."""
    from reports.sections.steps import chart_rows, render

    n = 10_000
    result = run_analyzer(steps, fake_profile(step_events={0: fake_steps([10.0] * n, [10.0] * n)}), TH)
    assert len(result.tables["steps"]) == n and result.tables["steps"]["step"].tolist() == list(range(n))
    drawn, stride = chart_rows(result.tables["steps"], result.meta["max_chart_steps"])
    assert stride == 4 and len(drawn) == 2_500 + 2 <= TH.steps.max_chart_steps + 3  # warm-up steps 1 and 2
    assert "Every 4th step is drawn" in render(result)


def test_sampled_gpu_time_is_counted_drawn_and_said():
    """Light mode times one step in 9 on the GPU when events are dear: the medians use those steps, the
    chart keeps enough of them to draw the GPU line, and the report says one step in 9."""
    n = 9_000
    gpu = [1.0 if step % 9 == 0 else float("nan") for step in range(n)]
    result = run_analyzer(steps, fake_profile(step_events={0: fake_steps([3.0] * n, gpu)}), TH)
    assert result.summary["step_gpu_timed_count"] == 1_000 - 1  # step 0 is a warm-up step
    assert result.summary["step_gpu_time_median_ms"] == 1.0 and result.meta["gpu_time_every"] == 9
    assert "steps.host_bound" in ids(result)
    from reports.sections.steps import chart_rows, render

    chart, _ = chart_rows(result.tables["steps"], result.meta["max_chart_steps"])
    assert chart["gpu_ms"].notna().sum() >= 500 and len(chart) <= 2 * TH.steps.max_chart_steps + 3

    html = render(result)
    assert "GPU time was measured on one step in 9 (999 of 8,997 measured steps)" in html
    every = run_analyzer(steps, fake_profile(step_events={0: fake_steps([3.0] * 20, [1.0] * 20)}), TH)
    assert every.meta["gpu_time_every"] == 1 and "one step in" not in render(every)


def test_the_report_says_what_ended_the_steps():
    """fixtures/runs/input_bound (H200): light mode's step records say the optimizer ended every step."""
    import diagnose
    from tests.paths import FIXTURES

    result = run_analyzer(steps, diagnose.load(FIXTURES / "runs" / "input_bound"), TH)
    assert result.meta["step_sources"] == {"optimizer": 59}
    assert result.meta["step_source_sentence"] == "Steps were ended by optimizer steps."


def test_time_slices_are_never_read_as_iterations():
    frame = fake_steps([30] * 12, [10] * 12).assign(source="time")
    result = run_analyzer(steps, fake_profile(step_events={0: frame}), TH)
    assert result.meta["step_sources"] == {"time": 12}
    assert "not per iteration" in result.meta["step_source_sentence"]
    (bound,) = result.findings
    assert bound.id == "steps.host_bound" and bound.title.endswith(f"({steps.TIME_SLICE_WORDS})")


def test_the_outliers_say_what_light_mode_saw_run_in_them():
    """A real CPU capture (fixtures/runs/char_gpt_cpu: an evaluation of 40 + 40 batches at char_gpt.py:143 every 200
    iterations): the occasional slow steps are named by the work in them, slowest first, with their line."""
    import diagnose
    from tests.paths import FIXTURES

    result = diagnose.analyze(diagnose.load(FIXTURES / "runs" / "char_gpt_cpu", quiet=True)).results["steps"]
    finding = ids(result)["steps.outliers"]
    said = finding.recommendation.split(". Occasional slow steps")[0]
    assert said.startswith("Step 598 (130 ms) ran an evaluation (model.eval()) at char_gpt.py:143 for 117 ms.")
    assert said.count("ran an evaluation (model.eval()) at char_gpt.py:143") == 3  # the three slowest of the four
    assert [s.figures["step"] for s in finding.subjects][:3] == [598, 199, 399]


def test_outliers_without_work_records_keep_the_general_advice():
    host = [10.0] * 20
    host[12] = 40.0
    result = run_analyzer(steps, fake_profile(step_events={0: fake_steps(host, [9.5] * 20)}), TH)
    assert ids(result)["steps.outliers"].recommendation.startswith("Occasional slow steps are usually periodic work")
