"""Mann-Whitney U, declared directions of metrics, and the verdict of one number (tiny hand-made samples)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from diagnose.analysis import declared_metrics
from diagnose.comparison.runs import HIGHER, LOWER, NEUTRAL, DiffOptions, change_pct, judge, mann_whitney_u
from diagnose.metrics import describe


def test_exact_p_fully_separated_small_samples():
    t = mann_whitney_u([1, 2, 3], [4, 5, 6])
    assert t.exact and t.u == 0
    assert t.p_value == pytest.approx(0.1)  # 2 / C(6, 3)
    assert t.min_p_value == pytest.approx(0.1)
    t = mann_whitney_u([1, 2, 3, 4, 5], [6, 7, 8, 9, 10])
    assert t.p_value == pytest.approx(2 / 252)


def test_exact_p_partial_overlap():
    # a=[1,3,5], b=[2,4,6]: U_a = 3; P(U <= 3) = 7/20 for n=3,3 → two-sided 0.7
    t = mann_whitney_u([1, 3, 5], [2, 4, 6])
    assert t.u == 3 and t.p_value == pytest.approx(0.7)


def test_symmetric_and_identical():
    rng = np.random.default_rng(0)
    a, b = rng.normal(10, 1, 40), rng.normal(10.5, 1, 40)
    assert mann_whitney_u(a, b).p_value == pytest.approx(mann_whitney_u(b, a).p_value)
    same = mann_whitney_u([5.0] * 10, [5.0] * 10)
    assert same.p_value == 1.0
    assert mann_whitney_u(a, a).p_value > 0.9


def test_normal_approximation_close_to_exact():
    rng = np.random.default_rng(1)
    a, b = rng.normal(0, 1, 20), rng.normal(0.8, 1, 20)
    exact = mann_whitney_u(a, b)
    approx = mann_whitney_u(np.round(a, 1), np.round(b, 1))  # rounding makes ties → normal approximation
    assert exact.exact and not approx.exact
    assert abs(exact.p_value - approx.p_value) < 0.03
    assert exact.p_value < 0.05


def test_empty_sample_gives_no_test():
    assert mann_whitney_u([], [1.0, 2.0]) is None
    assert mann_whitney_u([float("nan")], [1.0]) is None


@pytest.mark.parametrize(
    "key,expected",
    [
        ("step_time_median_ms", LOWER),
        ("gpu_idle_pct", LOWER),
        ("rank3.gpu_idle_pct", LOWER),
        ("peak_reserved_bytes", LOWER),
        ("sync_gpu_idle_ms_per_step", LOWER),
        ("sync_count_per_step", LOWER),
        ("step_host_over_gpu_ratio", LOWER),
        ("l2_low_hit_gpu_time_share", LOWER),  # more time in low-L2 kernels is worse, whatever "hit" suggests
        ("l2_hit_time_weighted_pct", HIGHER),
        ("nvml_gpu_util_mean_pct", HIGHER),
        ("achieved_occupancy_time_weighted_pct", HIGHER),
        ("comm_overlap_pct", HIGHER),
        ("step_count", NEUTRAL),
        ("launch_rate_per_s", NEUTRAL),
        ("nvml_sm_clock_median_mhz", NEUTRAL),
        ("nvml_mem_util_mean_pct", NEUTRAL),
        ("nvml_sample_count", NEUTRAL),
        ("gpu_idle_stream7_host_wait_pct", NEUTRAL),
    ],
)
def test_declared_direction(key, expected):
    assert describe(key, declared_metrics()).direction == expected


def test_undeclared_key_has_no_declaration():
    """Names are not guessed: a key no analyzer declares (even one that looks like a throughput) has none."""
    assert describe("samples_per_s", declared_metrics()) is None
    assert describe("something_new_pct", declared_metrics()) is None


def test_change_pct():
    assert change_pct(100.0, 110.0) == pytest.approx(10.0)
    assert change_pct(-2.0, -1.0) == pytest.approx(50.0)
    assert change_pct(0.0, 0.0) == 0.0
    assert math.isinf(change_pct(0.0, 3.0))
    assert math.isnan(change_pct(float("nan"), 1.0))


def test_judge_outcomes():
    opt = DiffOptions(alpha=0.01)
    sep = mann_whitney_u(np.arange(10.0), np.arange(10.0) + 100)
    assert judge(5.0, 105.0, LOWER, sep, opt, True)[:2] == ("worse", True)
    assert judge(5.0, 105.0, HIGHER, sep, opt, True)[:2] == ("better", True)
    overlap = mann_whitney_u([1, 3, 5, 7, 9, 11], [2, 4, 6, 8, 10, 12])
    assert judge(6.0, 7.0, LOWER, overlap, opt, True)[:2] == ("within_noise", False)
    tiny = mann_whitney_u([1, 2, 3], [4, 5, 6])  # min p 0.1 > alpha: cannot tell
    verdict, sig, noise = judge(2.0, 5.0, LOWER, tiny, opt, True)
    assert (verdict, sig) == ("worse", None) and "too few samples" in noise
    verdict, sig, noise = judge(2.0, 5.0, LOWER, None, opt, False)
    assert (verdict, sig, noise) == ("worse", None, "unknown (single numbers)")
    assert judge(2.0, 2.0, LOWER, None, opt, False)[0] == "unchanged"
    assert judge(2.0, 3.0, NEUTRAL, None, opt, False)[0] == "changed"


def test_judge_change_below_resolution_is_unchanged():
    opt = DiffOptions()
    # the -0.003 % of two exports of one capture: below ncu's 0.01 % print resolution
    assert judge(58.76789, 58.76839, HIGHER, None, opt, False, resolution=0.01)[0] == "unchanged"
    assert judge(58.76789, 58.76839, HIGHER, None, opt, False)[0] == "better"  # no resolution: any change counts
    assert judge(58.76, 58.78, HIGHER, None, opt, False, resolution=0.01)[0] == "better"  # 0.02 is not below
    assert judge(3.0, 4.0, LOWER, None, opt, False, resolution=1)[0] == "worse"  # one more count is a change
    # a tested sample below resolution is unchanged too, not "significant"
    sep = mann_whitney_u(np.arange(10.0), np.arange(10.0) + 0.0001)
    assert judge(5.0, 5.0001, LOWER, sep, opt, True, resolution=0.001)[:2] == ("unchanged", False)
