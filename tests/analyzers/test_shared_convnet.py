"""The ncu analyzers on the real shared capture (fixtures/shared/ncu: 40 launches of a convnet step, H200).

Numbers checked by hand against the CSV rows.
"""

import pytest

import diagnose
from tests.paths import shared

FORMS = ["convnet_raw.csv", "convnet_raw_base.csv"]


def analysis(form):
    return diagnose.analyze(diagnose.load(shared("ncu", form)))


def by_id(a):
    return {f.id: f for f in a.findings}


@pytest.mark.parametrize("form", FORMS)
def test_convnet_summary(form):
    a = analysis(form)
    assert a.summary["ncu_kernel_launches"] == 40 and a.summary["ncu_distinct_kernels"] == 29
    assert a.summary["ncu_gpu_time_ns"] == 725_952.0
    assert a.summary["l2_hit_time_weighted_pct"] == pytest.approx(58.77, abs=0.01)
    assert a.summary["tiny_kernel_launches"] == 14  # under 5 µs; 14 < 20 launches, so no finding
    assert "tiny_kernels.launch_bound" not in by_id(a)


@pytest.mark.parametrize("form", FORMS)
def test_convnet_l2_ranks_the_sum_reduction_first(form):
    f = by_id(analysis(form))["l2.low_hit_rate"]
    assert f.severity.label == "critical"
    top = f.subjects[0]
    # at::reduce_kernel<512, 1, ReduceOp<float, func_wrapper<…>>>: 23.808 µs at 6.89 %, 23.872 µs at 6.83 %
    assert top.name == "reduce_kernel" and top.figures["launches"] == 2
    assert top.figures["l2_hit_pct"] == pytest.approx((6.889712 * 23808 + 6.832146 * 23872) / 47680, abs=0.01)
    assert top.figures["dram_bound"] is False  # DRAM ≈ 30 % of peak
    assert len(f.subjects) == 14
    # the 1-block micro-kernels (< 5 µs, e.g. FillFunctor at 37 %) are not subjects
    assert all(s.figures["mean_dur_ns"] >= 5000 for s in f.subjects)
    # under 1 % of GPU time to give back: info whatever the band (the last three: 0.82, 0.76 and 0.43 %)
    small = [s for s in f.subjects if s.figures["est_loss_share"] < 0.01]
    assert [s.severity.label for s in small] == ["info"] * 3 and {s.figures["band"] for s in small} == {
        "critical",
        "warning",
    }
    assert all(s.severity.label != "info" for s in f.subjects if s.figures["est_loss_share"] >= 0.01)


def test_convnet_small_grid_names_the_126_block_wgrad():
    f = by_id(analysis(FORMS[0]))["launch_config.small_grid"]
    wgrad = [s for s in f.subjects if s.figures["grid_blocks"] == 126 and "segment_k_on" in s.name]
    assert len(wgrad) == 1
    assert wgrad[0].figures["idle_sm_pct"] == pytest.approx(100 * (1 - 126 / 132))
    assert f.severity.label == "warning"
