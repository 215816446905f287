"""Every figure of a finding comes from the same launches, when one kernel runs at several grid sizes (issue 28).

fixtures/runs/ncu_churn (H200, `gpudiag profile --ncu`, 52 launches of one training step) has kernels whose
launches differ in shape: the GeluBackward ``vectorized_elementwise_kernel`` runs 22,400 blocks (10.61 waves) in
two launches and 5,600 blocks (2.65 waves) in one; ``reduce_kernel<128, 4>`` runs 704 and 2,112 blocks; the
``CUDAFunctor_add`` elementwise kernel runs 4,096 blocks in 4 launches and 1 or 4 blocks in 4 launches of ~2 µs.
Before, a subject took its waves from one shape and its idle share from another ("10.61 waves, 35 % of the last
wave idle"), and a title read "runs 4096 blocks on a 132-SM GPU: 0 % of SMs idle".
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import diagnose
from tests.paths import FIXTURES

CHURN = FIXTURES / "runs" / "ncu_churn"
GELU_BACKWARD = "GeluBackwardCUDAKernelImpl"


@pytest.fixture(scope="module")
def churn():
    profile = diagnose.load(CHURN, quiet=True)
    return profile, diagnose.analyze(profile)


def by_id(analysis):
    return {f.id: f for f in analysis.findings}


def launches_of(profile, full_name_part: str):
    k = profile.kernels
    return k[k["kernel_name"].str.contains(full_name_part, regex=False)]


def test_tail_subject_states_the_waves_and_idle_share_of_the_same_launches(churn):
    profile, a = churn
    tail = by_id(a)["launch_config.tail_effect"]
    [gelu] = [s for s in tail.subjects if GELU_BACKWARD in s.figures["kernel_name"]]
    f = gelu.figures
    assert f["launches"] == 3
    assert f["grid_blocks"] == 5600 and f["waves_per_sm"] == pytest.approx(2.65)
    assert f["last_wave_idle_pct"] == pytest.approx(35.0)  # 1 - frac(2.65): the same launch
    assert f["config_launches"] == 1
    # the launch it speaks of, read from the capture itself
    raw = launches_of(profile, GELU_BACKWARD)
    same = raw[raw["grid_size"] == f["grid_blocks"]]
    assert len(same) == f["config_launches"]
    assert same["waves_per_sm"].iloc[0] == pytest.approx(f["waves_per_sm"])
    total = float(profile.kernels["dur_ns"].sum())
    assert f["config_share"] == pytest.approx(float(same["dur_ns"].sum()) / total)  # 17,216 ns of 12.06 ms
    assert f["config_share"] == pytest.approx(0.001427, abs=1e-6)


def test_kernel_table_row_keeps_its_typical_shape_and_that_shapes_idle_share(churn):
    _, a = churn
    table = a.results["launch_config"].tables["kernels"]
    [row] = [r for _, r in table.iterrows() if GELU_BACKWARD in r["kernel_name"]]
    assert row["grid_size"] == 22400 and row["waves_per_sm"] == pytest.approx(10.61)
    assert math.isnan(row["last_wave_idle_pct"])  # 10.61 waves: no tail; before, 35 % from the 2.65-wave launch
    assert row["configs"] == 2


def test_small_grid_title_figures_describe_small_launches_only(churn):
    _, a = churn
    found = by_id(a)
    # CUDAFunctor_add's 1- and 4-block launches take 2.2 µs: launch-bound, not a grid to widen; its 4,096-block
    # launches fill the GPU. Before, the finding read "runs 4096 blocks on a 132-SM GPU: 0 % of SMs idle".
    assert "launch_config.small_grid" not in found
    assert a.summary["launch_small_grid_loss_gpu_time_share"] == 0.0
    for f in a.findings:
        assert not ("runs 4096 blocks" in f.title or "0 % of SMs idle" in f.title), f.title


def test_tail_title_names_the_shape_and_counts_its_launches(churn):
    _, a = churn
    tail = by_id(a)["launch_config.tail_effect"]
    top = tail.subjects[0]
    assert top.figures["config_launches"] == top.figures["launches"] == 2
    assert tail.title == (
        "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_"
        "kernel__5x_cublas runs 2.67 waves: its last wave leaves 33 % of the GPU idle (2 more kernels with a partly "
        "empty last wave)"
    )


def test_occupancy_gap_is_judged_on_the_launches_the_grid_does_not_cap(churn):
    profile, a = churn
    table = a.results["occupancy"].tables["kernels"]
    [reduce] = [r for _, r in table.iterrows() if r["kernel_name"].startswith("void at::reduce_kernel<128, 4")]
    # 704-block launches: 6 blocks an SM of the 9 it could hold, ceiling 37.5 %, achieved 32.3 %; 2,112-block
    # launches: ceiling 56.25 %, achieved 49.6 %. Neither has a gap over 10 points; their blend did (12.3).
    assert reduce["gap_pts"] == pytest.approx(12.32, abs=0.01)
    assert reduce["grid_limited_launches"] == 4 and reduce["judged_launches"] == 0
    gap = by_id(a)["occupancy.gap"]
    assert all(not s.figures["kernel_name"].startswith("void at::reduce_kernel<128, 4") for s in gap.subjects)
    assert not gap.title.startswith("reduce_kernel reaches 44 %")
    # every subject's figures are its judged launches': achieved and theoretical are their duration-weighted means
    k = profile.kernels
    for s in gap.subjects:
        raw = k[k["kernel_name"] == s.figures["kernel_name"]]
        ceiling = raw["theoretical_occupancy_pct"] * np.minimum(
            1.0,
            np.ceil(raw["grid_size"] / raw["sm_count"])
            / raw[
                [
                    "occupancy_limit_registers",
                    "occupancy_limit_shared_mem",
                    "occupancy_limit_warps",
                    "occupancy_limit_blocks",
                ]
            ].min(axis=1),
        )
        judged = raw[(ceiling - raw["achieved_occupancy_pct"]) > 10.0]
        assert len(judged) == s.figures["judged_launches"]
        achieved = np.average(judged["achieved_occupancy_pct"], weights=judged["dur_ns"])
        assert s.figures["achieved_occupancy_pct"] == pytest.approx(achieved)
        assert s.figures["gap_pts"] == pytest.approx(
            np.average(judged["theoretical_occupancy_pct"], weights=judged["dur_ns"]) - achieved
        )
