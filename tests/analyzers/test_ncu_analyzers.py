"""The ncu analyzers on the real H200 captures of planted problems (fixtures/ncu/, see its PROVENANCE.md)."""

from __future__ import annotations

import pandas as pd
import pytest

import diagnose
from diagnose.findings import Severity
from tests.paths import FIXTURES

NCU = FIXTURES / "ncu"


def analysis_of(scenario: str, form: str = "raw.csv", **overrides):
    th = diagnose.Thresholds()
    if overrides:
        th = th.with_overrides(overrides)
    return diagnose.analyze(diagnose.load(NCU / scenario / form), th)


def ids(analysis):
    return {f.id: f for f in analysis.findings}


@pytest.mark.parametrize("form", ["raw.csv", "raw_base.csv"])
def test_random_gather_is_critical_low_l2(form):
    a = analysis_of("l2_random_gather", form)
    f = ids(a)["l2.low_hit_rate"]
    assert f.severity == Severity.CRITICAL
    assert [s.name for s in f.subjects] == ["_scatter_gather_elementwise_kernel"]
    s = f.subjects[0]
    assert s.figures["launches"] == 3
    assert s.figures["l2_hit_pct"] == pytest.approx(17.14, abs=0.05)  # 17.12 / 17.16 / 17.13, duration-weighted
    assert s.figures["dram_bound"] is False  # DRAM ≈ 53 % < 60 % band
    # misses removed by reaching the 85 % band: (85 - 17.13) / (100 - 17.13) of all the GPU time
    assert f.cost_share == pytest.approx((85 - s.figures["l2_hit_pct"]) / (100 - s.figures["l2_hit_pct"]))
    assert f.cost_share == pytest.approx(0.819, abs=0.001)
    assert a.summary["l2_hit_time_weighted_pct"] == pytest.approx(17.14, abs=0.05)
    assert a.summary["l2_low_hit_gpu_time_share"] == pytest.approx(1.0)
    assert "latency-bound scattered" in f.recommendation or "scattered" in f.recommendation


def test_dram_band_changes_the_advice():
    a = analysis_of("l2_random_gather", **{"l2": {"dram_bound_pct": 50}})
    f = ids(a)["l2.low_hit_rate"]
    assert f.subjects[0].figures["dram_bound"] is True
    assert "working set does not fit in L2" in f.recommendation


def test_small_grid_softmax_is_found():
    a = analysis_of("small_grid")
    f = ids(a)["launch_config.small_grid"]
    s = f.subjects[0]
    assert s.name == "cunn_SoftMaxForward"
    assert s.figures["grid_blocks"] == 16 and s.figures["sm_count"] == 132
    assert s.figures["idle_sm_pct"] == pytest.approx(100 * (1 - 16 / 132))
    assert f.cost_share == pytest.approx(1 - 16 / 132, abs=1e-6)
    assert f.severity == Severity.CRITICAL  # 16 ≤ 132/4 and it is all of the GPU time


def test_tiny_kernels_are_launch_bound_and_not_small_grid():
    a = analysis_of("tiny_kernels")
    got = ids(a)
    f = got["tiny_kernels.launch_bound"]
    assert f.severity == Severity.CRITICAL  # 48 of 48 launches under 5 µs
    assert a.summary["tiny_kernel_launches"] == 48
    assert a.summary["tiny_kernel_launch_share"] == 1.0
    assert sum(s.figures["launches"] for s in f.subjects) == 48
    assert "launch_config.small_grid" not in got  # 1-block grids, but a bigger grid would not help them
    assert "occupancy.gap" not in got


def test_matmul_has_no_launch_or_occupancy_findings():
    a = analysis_of("matmul_tiled")
    got = ids(a)
    for fid in (
        "launch_config.small_grid",
        "launch_config.tail_effect",
        "launch_config.block_not_warp_multiple",
        "occupancy.gap",
        "tiny_kernels.launch_bound",
        "speed_of_light.latency_bound",
    ):
        assert fid not in got, fid
    # 8192³ bf16: L2 hit ≈ 71.5 % but SM throughput ≈ 93 % and DRAM ≈ 20 %: misses do not limit it
    assert "l2.low_hit_rate" not in got
    table = a.results["l2"].tables["kernels"]
    row = table.iloc[0]
    assert row["compute_saturated"] and 70 < row["l2_hit_pct"] < 74


def test_missing_l2_metric_says_not_measured():
    profile = diagnose.load(NCU / "small_grid" / "raw.csv")
    profile.kernels = profile.kernels.assign(l2_hit_pct=float("nan"))
    a = diagnose.analyze(profile)
    f = ids(a)["l2.not_measured"]
    assert f.severity == Severity.INFO and "MemoryWorkloadAnalysis" in f.recommendation


def test_empty_profile_gives_no_ncu_findings():
    a = diagnose.analyze(diagnose.Profile())
    ncu = {name for name, d in a.analyzers.items() if d.cost_basis == "GPU time"}  # shares of the kernels' GPU time
    assert len(ncu) == 8 and {"l2", "kernels", "ncu_rules"} <= ncu
    assert not [f for f in a.findings if f.analyzer in ncu]


def test_fake_odd_block_and_tail_frames():
    """Hand-made frame (not a capture): a 100-thread block and a 1.25-wave grid."""
    from parsers.ncu_kernels import KERNELS_SCHEMA
    from parsers.schema import conform

    rows = pd.DataFrame(
        {
            "launch_id": [0, 1],
            "kernel_short": ["fake_odd", "fake_tail"],
            "kernel_name": ["fake_odd", "fake_tail"],
            "dur_ns": [50_000.0, 50_000.0],
            "grid_size": [1000.0, 165.0],
            "block_size": [100.0, 256.0],
            "waves_per_sm": [2.0, 1.25],
            "sm_count": [132.0, 132.0],
        }
    )
    profile = diagnose.Profile(kernels=conform(rows, KERNELS_SCHEMA))
    got = ids(diagnose.analyze(profile))
    odd = got["launch_config.block_not_warp_multiple"]
    assert odd.subjects[0].name == "fake_odd"
    assert odd.subjects[0].figures["wasted_lane_pct"] == pytest.approx(100 * 28 / 128)
    tail = got["launch_config.tail_effect"]
    assert tail.subjects[0].name == "fake_tail"
    assert tail.subjects[0].figures["last_wave_idle_pct"] == pytest.approx(75.0)
    assert tail.cost_share == pytest.approx(0.5 * 0.75 / 2)
