"""diagnose.analyzers.utilization on the real capture-1 NVML samples and on hand-made ones."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from diagnose.analysis import run_analyzer
from diagnose.analyzers import utilization
from diagnose.findings import Severity
from diagnose.thresholds import Thresholds
from parsers.nvml import NVML_SCHEMA, read_nvml
from parsers.schema import conform
from tests.events.conftest import NVML_CAPTURE, fake_profile, fake_steps

TH = Thresholds()


def fake_samples(gpu_util, mem_util, gpu=0, t0_ns=1.7e18, interval_ms=100.0) -> pd.DataFrame:
    n = len(gpu_util)
    return conform(
        pd.DataFrame(
            {
                "t_ns": t0_ns + np.arange(n) * interval_ms * 1e6,
                "gpu": gpu,
                "gpu_util_pct": gpu_util,
                "mem_util_pct": mem_util,
                "mem_used_bytes": 2**30 * (1 + np.arange(n) % 3),
                "mem_total_bytes": 2**34,
                "sm_clock_mhz": 1980.0,
                "mem_clock_mhz": 3201.0,
                "power_w": 300.0,
            }
        ),
        NVML_SCHEMA,
    )


def by_id(result):
    return {f.id: f for f in result.findings}


def test_no_samples_say_not_measured():
    result = run_analyzer(utilization, fake_profile(nvml=NVML_SCHEMA.empty()), TH)
    assert [f.id for f in result.findings] == ["utilization.not_measured"]


def test_real_capture_low_util_and_no_swing():
    result = run_analyzer(utilization, fake_profile(nvml=read_nvml(NVML_CAPTURE)), TH)
    s = result.summary
    assert s["nvml_sample_count"] == 239
    assert s["nvml_gpu_util_mean_pct"] == pytest.approx(244 / 239)
    assert s["nvml_mem_util_peak_pct"] == 8.0 and s["nvml_mem_util_swing_pct"] == 0.0
    assert s["nvml_mem_used_peak_bytes"] == 113889902592.0
    assert s["nvml_sample_interval_median_ms"] == pytest.approx(92.07, abs=0.01)
    found = by_id(result)
    assert set(found) == {"utilization.low_gpu_util"}
    assert found["utilization.low_gpu_util"].severity == Severity.CRITICAL
    assert found["utilization.low_gpu_util"].cost_share == pytest.approx(1 - 244 / 239 / 100)
    assert result.meta["window"] == "all samples" and len(result.tables["timeline"]) == 239


def test_bursty_memory_under_half_is_flagged():
    mem = [5, 40, 8, 45, 2, 38] * 10
    result = run_analyzer(utilization, fake_profile(nvml=fake_samples([90] * 60, mem)), TH)
    found = by_id(result)
    assert set(found) == {"utilization.mem_util_swing"}
    row = result.tables["per_gpu"].iloc[0]
    assert row["mem_util_peak_pct"] == 45.0
    assert row["mem_util_swing_pct"] == pytest.approx(np.quantile(mem, 0.9) - np.quantile(mem, 0.1))
    assert found["utilization.mem_util_swing"].evidence[1].value == 45.0


def test_swing_that_reaches_over_half_or_steady_is_not_flagged():
    wide_high = run_analyzer(utilization, fake_profile(nvml=fake_samples([90] * 60, [5, 80] * 30)), TH)
    steady_low = run_analyzer(utilization, fake_profile(nvml=fake_samples([90] * 60, [30, 32] * 30)), TH)
    assert by_id(wide_high) == {} and by_id(steady_low) == {}


def test_window_follows_measured_steps_and_idle_gpus_are_left_out():
    # GPU 0: idle 0 % for 2 s of set-up, then 95 % while 20 steps of 100 ms run; GPU 1 never runs a kernel
    util = [0] * 20 + [95] * 20 + [0] * 10
    samples = pd.concat([fake_samples(util, [50] * 50, gpu=0), fake_samples([0] * 50, [0] * 50, gpu=1)])
    steps = fake_steps([100.0] * 23, [95.0] * 23, t0_ns=1.7e18 + 1.7e9)  # 3 warm-up steps from 1.7 s
    result = run_analyzer(utilization, fake_profile(nvml=samples, step_events={0: steps}), TH)
    assert result.meta["window"] == "training steps"
    assert result.meta["window_start_s"] == pytest.approx(2.0) and result.meta["window_end_s"] == pytest.approx(4.0)
    assert result.meta["gpus_judged"] == [0] and result.meta["gpus_sampled"] == [0, 1]
    assert result.summary["nvml_gpu_util_mean_pct"] == pytest.approx(95 * 20 / 21)  # sample at 4.0 s is idle
    assert by_id(result) == {}  # the whole-run mean (38 %) would have been flagged
    marks = result.tables["step_marks"]
    assert len(marks) == 23 and marks["warmup"].sum() == 3
    per_step = result.tables["per_step"]
    assert per_step["step"].iloc[0] == 3 and per_step["gpu_util_mean_pct"].iloc[0] == 95.0


def test_two_busy_gpus_merge_into_one_finding():
    samples = pd.concat([fake_samples([20] * 30, [10] * 30, gpu=0), fake_samples([50] * 30, [10] * 30, gpu=1)])
    finding = by_id(run_analyzer(utilization, fake_profile(nvml=samples), TH))["utilization.low_gpu_util"]
    assert finding.severity == Severity.CRITICAL and "worst of 2 GPUs" in finding.title
    assert [(s.name, s.severity) for s in finding.subjects] == [
        ("GPU 0", Severity.CRITICAL),
        ("GPU 1", Severity.WARNING),
    ]


def test_timeline_is_bounded():
    n = 20_000
    samples = fake_samples([90] * n, [50] * n, interval_ms=10)
    result = run_analyzer(utilization, fake_profile(nvml=samples), TH)
    assert len(result.tables["timeline"]) <= TH.utilization.max_timeline_points
    assert result.meta["timeline_stride"] == 7
    assert result.summary["nvml_sample_count"] == n  # judged on every sample, drawn on a few


def test_too_few_samples_give_no_finding():
    result = run_analyzer(utilization, fake_profile(nvml=fake_samples([1] * 5, [1] * 5)), TH)
    assert result.findings == [] and result.summary["nvml_gpu_util_mean_pct"] == 1.0
