"""diagnose.derive.kernel_stats on hand-made frames: grouping by full name, duration weights, NaN handling."""

import math

import pytest

from diagnose.derive.kernel_stats import most_common, per_kernel, per_kernel_sum, weighted_mean
from tests.analyzers.fake_frames import fake_kernels

FILL = "void vectorized_elementwise_kernel<4, FillFunctor<float>>(int, T2, T3)"
CLAMP = "void vectorized_elementwise_kernel<4, clamp_lambda>(int, T2, T3)"


def fake_two_instances():
    return fake_kernels(
        [
            {
                "kernel_short": "vectorized_elementwise_kernel",
                "kernel_name": FILL,
                "dur_ns": 1000.0,
                "l2_hit_pct": 40.0,
                "grid_size": 1.0,
            },
            {
                "kernel_short": "vectorized_elementwise_kernel",
                "kernel_name": CLAMP,
                "dur_ns": 30000.0,
                "l2_hit_pct": 50.0,
                "grid_size": 8192.0,
            },
            {
                "kernel_short": "vectorized_elementwise_kernel",
                "kernel_name": CLAMP,
                "dur_ns": 10000.0,
                "l2_hit_pct": 90.0,
                "grid_size": 4096.0,
            },
            {
                "kernel_short": "vectorized_elementwise_kernel",
                "kernel_name": CLAMP,
                "dur_ns": 9000.0,
                "l2_hit_pct": None,
                "grid_size": 4096.0,
            },
        ]
    )


def test_same_short_name_different_instances_stay_apart():
    stats = per_kernel(fake_two_instances(), ["l2_hit_pct"])
    assert list(stats["kernel"]) == ["vectorized_elementwise_kernel", "vectorized_elementwise_kernel #2"]
    assert list(stats["kernel_name"]) == [CLAMP, FILL]
    assert list(stats["launches"]) == [3, 1]
    assert list(stats["gpu_time_ns"]) == [49000.0, 1000.0]
    assert stats["share"].tolist() == pytest.approx([0.98, 0.02])
    # the NaN launch is left out of the mean and of its weights: (50·30000 + 90·10000) / 40000
    assert stats["l2_hit_pct"][0] == pytest.approx(60.0)
    assert stats["mean_dur_ns"][0] == pytest.approx(49000.0 / 3)


def test_most_common_is_the_shape_carrying_most_time_and_sums_align():
    k = fake_two_instances()
    stats = per_kernel(k, [])
    assert most_common(k, "grid_size", stats).tolist() == [8192.0, 1.0]  # 30 µs at 8192 beats 19 µs at 4096
    assert per_kernel_sum(k, k["dur_ns"] * 2, stats).tolist() == [98000.0, 2000.0]


def test_weighted_mean_without_durations_is_the_plain_mean():
    import pandas as pd

    assert weighted_mean(pd.Series([10.0, 20.0]), pd.Series([float("nan")] * 2)) == 15.0
    assert weighted_mean(pd.Series([10.0, 30.0]), pd.Series([0.0, 0.0])) == 20.0
    assert math.isnan(weighted_mean(pd.Series([float("nan")]), pd.Series([5.0])))


def test_empty_table_gives_typed_empty_stats():
    stats = per_kernel(fake_kernels([]), ["l2_hit_pct"])
    assert len(stats) == 0 and "l2_hit_pct" in stats.columns and "kernel" in stats.columns
