"""gpudiag diff past 1,030 steps a side (issue 28 item 1): ``2 / math.comb(n_a + n_b, n_a)`` overflowed a float
there (C(2060, 1030) > 1.8e308), so diff crashed on every real run of that length, a folder against itself too.

The samples are the real step records of fixtures/runs/repeat_a and repeat_b (two captures of one script on the
H200), repeated to the 1,279 and 1,575 steps of the runs that crashed; the p-values are checked against scipy's
Mann-Whitney U. The speed at 100,000 steps a side is measured in benchmarks/diff_scale.py, not here.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from diagnose.comparison.runs import compare, mann_whitney_u, min_two_sided_p, step_samples
from diagnose.ingest.loading import load
from diagnose.ingest.profile_data import Profile
from diagnose.thresholds import Thresholds
from tests.compare.conftest import RUNS, gpudiag

N_A, N_B = 1279, 1575  # the two run folders of the issue


def real_steps(name: str) -> pd.DataFrame:
    """The run's measured step records: warm-up and the steps under the profiler's trace window left out."""
    profile = load(RUNS / name, workers=1, quiet=True)
    measured = step_samples(profile, Thresholds())["step"]
    steps = profile.step_events[0]
    return steps[steps["step"].isin(measured)].reset_index(drop=True)


def repeated(steps: pd.DataFrame, n: int) -> pd.DataFrame:
    """The real step records in order, again and again, renumbered, each starting where the last ended."""
    out = steps.iloc[np.resize(np.arange(len(steps)), n)].reset_index(drop=True)
    dur_ns = np.maximum(out["host_ms"], out["gpu_ms"]).to_numpy() * 1e6
    out["step"] = np.arange(n)
    out["t_start_ns"] = float(steps["t_start_ns"].iloc[0]) + np.concatenate([[0.0], np.cumsum(dur_ns)[:-1]])
    return out


@pytest.fixture(scope="module")
def step_ms():
    th = Thresholds()
    return {
        name: step_samples(load(RUNS / name, workers=1, quiet=True), th)["step_ms"].to_numpy()
        for name in ("repeat_a", "repeat_b")
    }


def test_u_test_on_real_step_times_past_1030_a_side(step_ms):
    scipy_stats = pytest.importorskip("scipy.stats")
    a, b = np.resize(step_ms["repeat_a"], N_A), np.resize(step_ms["repeat_b"], N_B)
    assert len(step_ms["repeat_a"]) == len(step_ms["repeat_b"]) == 52
    t = mann_whitney_u(a, b)
    assert (t.n_a, t.n_b, t.exact) == (N_A, N_B, False)
    assert t.min_p_value == 0.0  # 2 / C(2854, 1279) is below the smallest float
    reference = scipy_stats.mannwhitneyu(a, b, method="asymptotic", use_continuity=True)
    assert t.u == reference.statistic == 923_335.0
    assert t.p_value == pytest.approx(reference.pvalue, rel=1e-9)
    assert t.p_value == pytest.approx(1.2733e-4, rel=1e-3)
    same = mann_whitney_u(a, a)
    assert (same.u, same.p_value) == (N_A * N_A / 2, 1.0)


@pytest.mark.parametrize("n_a,n_b", [(1, 1), (3, 3), (5, 5), (20, 30), (500, 520)])
def test_smallest_p_in_log_space_is_two_over_the_arrangements(n_a, n_b):
    assert min_two_sided_p(n_a, n_b) == pytest.approx(min(1.0, 2.0 / math.comb(n_a + n_b, n_a)), rel=1e-9)


@pytest.mark.parametrize("n", [1030, 1031, 100_000])
def test_smallest_p_past_float_range_is_zero(n):
    assert min_two_sided_p(n, n) == 0.0


def test_compare_runs_of_1279_and_1575_real_steps():
    """The whole comparison, on the step records of repeat_a / repeat_b repeated to the issue's lengths."""
    a = Profile(sources=["repeat_a x25"], step_events={0: repeated(real_steps("repeat_a"), N_A)})
    b = Profile(sources=["repeat_b x30"], step_events={0: repeated(real_steps("repeat_b"), N_B)})
    d = compare(a, b)
    row = d.metrics.set_index("key").loc["step_time_median_ms"]
    warmup = Thresholds().steps.warmup_steps
    assert (row["n_a"], row["n_b"]) == (N_A - warmup, N_B - warmup) == (1276, 1572)
    assert (row["a"], row["b"]) == (1.634377, 1.780509)  # medians of real step times (ms)
    samples = d.tables["step_samples"]
    reference = pytest.importorskip("scipy.stats").mannwhitneyu(
        samples.loc[samples["run"] == "A", "step_ms"],
        samples.loc[samples["run"] == "B", "step_ms"],
        method="asymptotic",
    )
    assert row["p_value"] == pytest.approx(reference.pvalue, rel=1e-9) and row["p_value"] == pytest.approx(
        1.2464e-4, rel=1e-3
    )
    assert row["significant"] is True and row["verdict"] == "worse" and row["p_value"] < 1e-3
    itself = compare(a, a)
    assert set(itself.metrics["verdict"]) == {"unchanged"}
    assert itself.metrics.set_index("key").loc["step_time_median_ms", "p_value"] == 1.0
    json.dumps(d.to_dict())  # counts are integers, p-values floats: plain JSON


def test_diff_of_a_real_run_folder_against_itself(tmp_path):
    out = tmp_path / "d.json"
    r = gpudiag("diff", RUNS / "repeat_a", RUNS / "repeat_a", "--json", out, "--fail-on-regression", "0")
    assert r.returncode == 0, r.stderr
    assert "OK: no regression over 0 %" in r.stdout and "Traceback" not in r.stderr
    m = {x["key"]: x for x in json.loads(out.read_text())["metrics"]}
    step = m["step_time_median_ms"]
    assert (step["n_a"], step["n_b"], step["p_value"], step["verdict"]) == (52, 52, 1.0, "unchanged")
    assert step["a"] == step["b"] == pytest.approx(1.636527)


def test_diff_page_of_3000_steps_a_side_keeps_the_mark_budget():
    """Past 2,000 steps a run, the step chart draws each run's box (diff.tables["step_box"]) and the steps outside
    it, not every step: 6,000 points were over the 5,000-mark budget (a 100,000-step diff drew 200,000)."""
    from reports.chart_budget import MAX_MARKS, figure_marks, figures_in_page
    from reports.diff_html import render_diff_html

    n = 3000
    a = Profile(sources=["repeat_a"], step_events={0: repeated(real_steps("repeat_a"), n)})
    b = Profile(sources=["repeat_b"], step_events={0: repeated(real_steps("repeat_b"), n)})
    d = compare(a, b)
    box = d.tables["step_box"].set_index("run")
    samples = d.tables["step_samples"]
    for run in ("A", "B"):
        x = samples.loc[samples["run"] == run, "step_ms"].to_numpy()
        assert box.loc[run, "steps"] == len(x) == n - Thresholds().steps.warmup_steps
        assert box.loc[run, "median_ms"] == np.median(x)
        assert (box.loc[run, "q1_ms"], box.loc[run, "q3_ms"]) == tuple(np.percentile(x, [25, 75]))
    assert box.loc["A", "median_ms"] == 1.634377 and box.loc["B", "median_ms"] == 1.778584
    (steps_figure,) = [f for f in figures_in_page(render_diff_html(d)) if f["id"] == "diff-steps"]
    assert figure_marks(steps_figure) <= MAX_MARKS
    boxes = [t for t in steps_figure["data"] if t["type"] == "box"]
    assert [t["median"] for t in boxes] == [[1.634377], [1.778584]]


# ---- two real run folders past 1,030 steps (CPU captures: no GPU was lent that day) ---------------------------


def test_diff_of_two_real_runs_of_1300_and_1600_steps(tmp_path):
    """fixtures/runs/diff_long_a and diff_long_b: `gpudiag profile` of examples/train_mlp.py on the CPU, 1,300 steps
    of a 64-wide MLP against 1,600 of a 128-wide one (fixtures/runs/PROVENANCE.md). Before: OverflowError, exit 1."""
    a, b = RUNS / "diff_long_a", RUNS / "diff_long_b"
    out = tmp_path / "d.json"
    r = gpudiag("diff", a, b, "--json", out, "--fail-on-regression", "5")
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr and "REGRESSION step_time_median_ms" in r.stdout
    # the gate's lines in their units and in agreement with their counts (were "0.292015 -> 0.330658", "2 regression(s)")
    assert "REGRESSION step_time_median_ms: 292 µs -> 331 µs (+13.2 %)" in r.stdout.splitlines()
    assert r.stdout.splitlines()[-1] == "FAIL: 2 regressions over 5 %"
    m = {x["key"]: x for x in json.loads(out.read_text())["metrics"]}
    step = m["step_time_median_ms"]
    assert (step["n_a"], step["n_b"]) == (1296, 1596)  # 3 warm-up steps left out, and the step the run ended in
    assert step["a"] == pytest.approx(0.2920145, abs=1e-9) and step["b"] == 0.330658  # ms, medians of real steps
    assert (step["verdict"], step["significant"]) == ("worse", True)
    th = Thresholds()
    xa, xb = (step_samples(load(p, workers=1, quiet=True), th)["step_ms"] for p in (a, b))
    reference = pytest.importorskip("scipy.stats").mannwhitneyu(xa, xb, method="asymptotic")
    assert step["p_value"] == pytest.approx(reference.pvalue, rel=1e-9) and step["p_value"] < 1e-100


@pytest.mark.parametrize("name", ["diff_long_a", "diff_long_b"])
def test_diff_of_a_real_run_past_1030_steps_against_itself(name, tmp_path):
    out = tmp_path / "d.json"
    r = gpudiag("diff", RUNS / name, RUNS / name, "--json", out, "--fail-on-regression", "0", "--include-unknown-noise")
    assert r.returncode == 0, r.stderr
    assert "OK: no regression over 0 %" in r.stdout
    metrics = json.loads(out.read_text())["metrics"]
    assert {x["verdict"] for x in metrics} == {"unchanged"}
    step = next(x for x in metrics if x["key"] == "step_time_median_ms")
    assert step["n_a"] == step["n_b"] == {"diff_long_a": 1296, "diff_long_b": 1596}[name] and step["p_value"] == 1.0
