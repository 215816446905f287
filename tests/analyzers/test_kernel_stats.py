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


def test_a_second_kernel_of_one_short_name_says_what_tells_it_from_the_first():
    """fixtures/shared/ncu/convnet_raw.csv (H200): three reduce_kernel instantiations, two of the elementwise
    templates; the "#k" labels carry the template arguments and launch shapes that differ."""
    import diagnose
    from diagnose.derive.kernel_stats import per_kernel
    from tests.paths import REPO

    stats = per_kernel(diagnose.load(REPO / "fixtures" / "shared" / "ncu" / "convnet_raw.csv").kernels)
    notes = dict(zip(stats["kernel"], stats["kernel_note"]))
    assert not isinstance(notes["reduce_kernel"], str)  # the first of its name has nothing to be told from
    assert notes["reduce_kernel #3"] == (
        "reduce_kernel #3: another kernel named reduce_kernel (another instantiation of the template); template "
        "argument 1 is 256 where reduce_kernel's is 512; template argument 2 is 2 where reduce_kernel's is 1; its "
        "launches mostly use grid 1 × 128 threads where reduce_kernel's use grid 576 × 512 threads"
    )
    assert "template argument 6 is 2 where nchwToNhwcKernel's is 0" in notes["nchwToNhwcKernel #2"]
    assert "grid" not in notes["nchwToNhwcKernel #2"]  # same launch shape: not said
    assert sum(isinstance(n, str) for n in notes.values()) == sum("#" in k for k in notes)


def test_the_kernel_note_is_on_hover_not_a_column():
    import diagnose
    from reports.figures import table_html
    from tests.paths import REPO

    a = diagnose.analyze(diagnose.load(REPO / "fixtures" / "ncu" / "tiny_kernels" / "raw.csv"))
    table = a.results["tiny_kernels"].tables.get("kernels")
    if table is None or "kernel_note" not in table.columns:
        table = a.results["speed_of_light"].tables["kernels"]
    html = table_html(table, "t")
    assert 'title="kernel_note"' not in html
    assert (
        "template argument 2 is AUnaryFunctor&lt;float, float, float, binary_internal::MulFunctor&lt;float&gt;&gt;"
        in html
    )
