"""The step-time budget on real run folders: parts that add up, named causes, warm-up apart, periodic slow steps."""

import numpy as np
import pandas as pd
import pytest

import diagnose
from diagnose.analysis import run_analyzer
from diagnose.analyzers import step_budget
from diagnose.thresholds import Thresholds
from tests.paths import FIXTURES

RUNS = FIXTURES / "runs"


def budget_of(result, column="median step", rank=0):
    b = result.tables["budget"]
    return b[(b["column"] == column) & (b["rank"] == rank)].set_index("part")


@pytest.fixture(scope="module")
def planted():
    return run_analyzer(step_budget, diagnose.load(RUNS / "sync_planted"), Thresholds())


def test_sync_planted_names_the_sync_line_and_its_share(planted):
    median = budget_of(planted)
    assert median["wall_ms"].iloc[0] == pytest.approx(5.556, abs=0.001)  # steady steps 3, 8, 9, 10
    assert median.loc["compute", "ms"] == pytest.approx(5.051, abs=0.001)
    assert median.loc["sync", "ms"] == pytest.approx(0.494, abs=0.001)
    assert median.loc["sync", "share"] == pytest.approx(0.0889, abs=0.001)
    assert median.loc["sync", "measured_in"] == "traced steps 4–6"
    # the parts measured in traced steps 4–6 explain the steady median to within 1 %
    assert abs(median.loc["unexplained", "ms"]) < 0.01 * median["wall_ms"].iloc[0]
    assert median["ms"].sum() == pytest.approx(median["wall_ms"].iloc[0], rel=1e-9)
    (f,) = [f for f in planted.findings if f.id == "step_budget.sync"]
    assert f.cost_share == pytest.approx(0.0889, abs=0.001)
    assert "sync_planted.py:22" in f.title and "aten::to" in f.title
    assert f.recommendation.startswith("At /work/main/examples/sync_planted.py:22: a device-to-host copy")
    assert f.subjects[1].name.endswith("sync_planted.py:22")


def test_traced_steps_excess_is_gpudiags_own(planted):
    traced = budget_of(planted, "traced steps")
    assert traced["wall_ms"].iloc[0] == pytest.approx(6.171, abs=0.001)
    assert traced.loc["trace_window", "ms"] == pytest.approx(0.615, abs=0.001)  # 6.171 - 5.556
    assert abs(traced.loc["unexplained", "ms"]) < 0.01 * traced["wall_ms"].iloc[0]
    steps = planted.tables["traced_steps"]
    assert steps["run_step"].tolist() == [4, 5, 6]
    assert steps["sync_raw_ms"].round(3).tolist() == [0.755, 0.621, 0.655]  # the idle analyzer's idle_sync


def test_warmup_and_instrumented_steps_are_kept_apart(planted):
    meta = planted.meta["ranks"][0]
    assert meta["warmup_step_numbers"] == [0, 1, 2]
    assert meta["warmup_ms"] == pytest.approx(73.42, abs=0.01)
    assert meta["instrumented_step_numbers"] == [4, 5, 6, 7]
    assert meta["steady_steps"] == 4
    assert planted.summary["step_budget_warmup_steps"] == 3
    assert planted.summary["step_budget_instrumented_steps"] == 4


def test_sync_free_has_no_sync_cause():
    r = run_analyzer(step_budget, diagnose.load(RUNS / "sync_free"), Thresholds())
    median = budget_of(r)
    assert median.loc["sync", "ms"] == 0.0
    assert median.loc["compute", "share"] == pytest.approx(0.993, abs=0.001)
    assert abs(median.loc["unexplained", "ms"]) < 0.01 * median["wall_ms"].iloc[0]
    assert not [f for f in r.findings if f.id in ("step_budget.sync", "step_budget.launch_bound")]


def test_absent_input_ms_is_not_measured_never_zero(planted):
    median = budget_of(planted)
    assert np.isnan(median.loc["input", "ms"])
    assert median.loc["input", "measured_in"] == "not measured"
    assert any(n.startswith("input wait not measured") for n in planted.meta["ranks"][0]["notes"])
    assert "step_budget_input_ms" not in planted.summary


def fake_with_steps(run: str, change) -> diagnose.Profile:
    """A real run folder whose step table ``change`` edits (named fake: the planted figures are ours)."""
    profile = diagnose.load(RUNS / run)
    profile.step_events[0] = change(profile.step_events[0].copy())
    return profile


def test_fake_input_wait_on_every_steady_step_is_the_input_cause():
    def plant(steps):
        steps["input_ms"] = np.where(steps["instrumented"], np.nan, 2.0)
        steps["host_ms"] = steps["host_ms"] + 2.0
        steps["gpu_ms"] = steps["gpu_ms"] + 2.0
        return steps

    r = run_analyzer(step_budget, fake_with_steps("sync_free", plant), Thresholds())
    median = budget_of(r)
    assert median["wall_ms"].iloc[0] == pytest.approx(7.083, abs=0.001)
    assert median.loc["input", "ms"] == 2.0
    assert median.loc["input", "measured_in"] == "4 steady steps"
    (f,) = [f for f in r.findings if f.id == "step_budget.input"]
    assert f.cost_share == pytest.approx(2.0 / 7.083, abs=0.001)
    assert "persistent_workers=True" in f.recommendation


def fake_every_tenth_step_slow(steps: pd.DataFrame, with_input: bool) -> pd.DataFrame:
    slow = (steps["step"] % 10 == 3) & (steps["step"] > 10)  # steps 13, 23, 33, 43, 53: steady ones
    steps.loc[slow, ["host_ms", "gpu_ms"]] += 20.0
    steps["input_ms"] = np.where(slow, 19.5, 0.1) if with_input else np.nan
    return steps


def test_fake_periodic_slow_steps_are_found_with_their_period():
    r = run_analyzer(
        step_budget, fake_with_steps("repeat_a", lambda s: fake_every_tenth_step_slow(s, False)), Thresholds()
    )
    period = r.meta["ranks"][0]["period"]
    assert (period["period"], period["offset"], period["occurrences"]) == (10, 3, 5)
    assert period["slow_total"] == 6  # step 9 of the capture is slow on its own (16.6 ms)
    assert period["excess_ms"] == pytest.approx(20.0, abs=0.1)
    (f,) = [f for f in r.findings if f.id == "step_budget.periodic"]
    # step 3, steady and on the period, is not slow: the period starts at step 13, not "step 3 + 10i" (issue 28)
    assert f.title.startswith("Every 10 steps from step 13 (steps 13, 23, 33, 43, 53) a step is 20")
    assert "evaluation, checkpoint saving or logging" in f.recommendation
    assert "Input wait was not measured" in f.recommendation


def test_fake_periodic_input_wait_names_the_epoch_boundary():
    r = run_analyzer(
        step_budget, fake_with_steps("repeat_a", lambda s: fake_every_tenth_step_slow(s, True)), Thresholds()
    )
    (f,) = [f for f in r.findings if f.id == "step_budget.periodic"]
    assert "waiting 19.5 ms for input" in f.title
    assert "new DataLoader iterator at an epoch boundary" in f.recommendation
    assert "persistent_workers=True" in f.recommendation


def test_no_period_in_the_real_capture():
    r = run_analyzer(step_budget, diagnose.load(RUNS / "repeat_a"), Thresholds())
    assert r.meta["ranks"][0]["period"] is None
    assert r.meta["ranks"][0]["slow_step_numbers"] == [9]


def test_no_step_timings_is_not_measured():
    r = run_analyzer(step_budget, diagnose.load(RUNS / "ncu_kinds"), Thresholds())
    assert [f.id for f in r.findings] == ["step_budget.not_measured"]


def test_section_renders_an_empty_result_and_a_real_one(planted):
    from diagnose.findings import Result
    from reports.sections import step_budget as section

    assert "No step-time budget" in section.render(Result("step_budget"))
    html = section.render(planted)
    assert 'id="fig-step-budget"' in html and "traced steps 4–6" in html


def test_loop_input_from_the_for_statement_is_named_as_the_loops_iterator():
    """fixtures/runs/loop_input: Python 3.12 light mode timed a generator-fed loop at its for statement."""
    result = run_analyzer(step_budget, diagnose.load(RUNS / "loop_input"), Thresholds())
    median = budget_of(result)
    wall = median["wall_ms"].iloc[0]
    assert median.loc["input", "ms"] == pytest.approx(20.15, abs=0.1)
    assert median.loc["input", "share"] == pytest.approx(median.loc["input", "ms"] / wall)
    assert median.loc["input", "measured_in"].endswith("steady steps")
    top = result.findings[0]
    assert top.id == "step_budget.input" and 0.7 < top.cost_share < 0.85
    assert "the loop waits for its iterator" in top.title and "DataLoader" not in top.title
    assert top.recommendation.startswith("Build batches ahead of the loop")


def test_a_generator_loops_epoch_starts_are_a_periodic_input_wait():
    """fixtures/runs/loop_epochs: Python 3.12 light mode timed each epoch's new iterator (a 300 ms shard open)."""
    result = run_analyzer(step_budget, diagnose.load(RUNS / "loop_epochs"), Thresholds())
    (periodic,) = [f for f in result.findings if f.id == "step_budget.periodic"]
    assert periodic.title.startswith("Every 20 steps (step 19 + 20i: steps 19, 39, 59, 79)")
    assert "waiting 305 ms for input" in periodic.title
    assert periodic.recommendation.startswith("These steps wait for the loop's iterator")
    (waiting,) = [f for f in result.findings if f.id == "step_budget.input"]
    assert 0.85 < waiting.cost_share < 0.95 and "the loop waits for its iterator" in waiting.title
