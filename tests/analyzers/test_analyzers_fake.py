"""Each ncu analyzer on hand-made frames (fake_ data, not captures): exact findings and numbers."""

import pytest

import diagnose
from diagnose.analysis import run_analyzer
from diagnose.analyzers import kernels as kernels_analyzer
from diagnose.analyzers import l2, launch_config, occupancy, speed_of_light, tiny_kernels
from diagnose.findings import Severity
from diagnose.thresholds import Thresholds
from reports.chart_budget import log_histogram
from reports.l2_heatmap import heatmap_cells
from tests.analyzers.fake_frames import fake_profile, repeat

TH = Thresholds()
NCU_ANALYZERS = [l2, occupancy, launch_config, tiny_kernels, speed_of_light, kernels_analyzer]


def by_id(result):
    return {f.id: f for f in result.findings}


@pytest.mark.parametrize("mod", NCU_ANALYZERS, ids=lambda m: m.NAME)
def test_empty_kernels_table_gives_an_empty_result(mod):
    r = run_analyzer(mod, fake_profile([]), TH)
    assert r.findings == [] and r.tables == {} and r.summary == {}


# --- L2 -------------------------------------------------------------------------------------------


def fake_l2_launches():
    return [
        {"kernel_short": "fake_gather", "dur_ns": 100_000.0, "l2_hit_pct": 20.0, "dram_throughput_pct": 80.0},
        {"kernel_short": "fake_gather", "dur_ns": 300_000.0, "l2_hit_pct": 40.0, "dram_throughput_pct": 80.0},
        {"kernel_short": "fake_scatter", "dur_ns": 100_000.0, "l2_hit_pct": 70.0, "dram_throughput_pct": 10.0},
        {"kernel_short": "fake_gemm", "dur_ns": 500_000.0, "l2_hit_pct": 95.0, "dram_throughput_pct": 30.0},
        *repeat(2, kernel_short="fake_tiny", dur_ns=2_000.0, l2_hit_pct=10.0, dram_throughput_pct=0.1),
        {"kernel_short": "fake_empty", "dur_ns": 1_000.0, "l2_hit_pct": None},  # ncu said > 100 %: NaN
    ]


def test_l2_low_hit_rate_exact():
    r = run_analyzer(l2, fake_profile(fake_l2_launches()), TH)
    assert set(by_id(r)) == {"l2.low_hit_rate", "l2.below_band"}
    below = by_id(r)["l2.below_band"]  # the tiny kernel is under the band too: listed, with why it costs nothing
    assert below.severity == Severity.INFO and below.cost_share is None
    assert [(s.name, s.figures["band"]) for s in below.subjects] == [("fake_tiny", "critical")]
    assert below.subjects[0].figures["why_no_cost"] == "0.40 % of GPU time, under the 0.50 % judged"
    f = by_id(r)["l2.low_hit_rate"]
    assert f.severity == Severity.CRITICAL
    # ranked by time × miss rate; the healthy GEMM, the tiny kernel and the NaN kernel are not subjects
    assert [s.name for s in f.subjects] == ["fake_gather", "fake_scatter"]
    gather, scatter = f.subjects
    assert gather.severity == Severity.CRITICAL and scatter.severity == Severity.WARNING
    assert gather.figures["launches"] == 2 and gather.figures["gpu_time_ns"] == 400_000.0
    assert gather.figures["l2_hit_pct"] == pytest.approx(35.0)  # (20·100 + 40·300) / 400
    assert gather.figures["miss_cost_ns"] == pytest.approx(260_000.0)
    assert gather.figures["dram_bound"] is True and scatter.figures["dram_bound"] is False
    total = 1_005_000.0
    assert gather.figures["share"] == pytest.approx(400_000 / total)
    assert f.cost_share == pytest.approx(400_000 / total * 50 / 65 + 100_000 / total * 15 / 30)
    assert "working set does not fit in L2" in f.recommendation and "fake_gather" in f.recommendation
    assert "latency-bound scattered access" in f.recommendation and "fake_scatter" in f.recommendation
    assert r.summary["l2_hit_time_weighted_pct"] == pytest.approx(
        (20 * 100 + 40 * 300 + 70 * 100 + 95 * 500 + 10 * 4) / 1004
    )
    assert r.summary["l2_low_hit_gpu_time_share"] == pytest.approx(504_000 / total)  # tiny counts in the summary
    ev = {e.metric: e for e in f.evidence}
    assert ev["lts__t_sector_hit_rate.pct"].value == pytest.approx(35.0)
    assert ev["lts__t_sector_hit_rate.pct"].threshold == 62.0


def test_l2_bands_are_thresholds():
    th = TH.with_overrides({"l2": {"warning_pct": 30, "critical_pct": 10}})
    r = run_analyzer(l2, fake_profile(fake_l2_launches()), th)
    assert [f.id for f in r.findings] == ["l2.below_band"]  # only fake_tiny (10 %) is under 30 %: no cost
    assert [s.name for s in r.findings[0].subjects] == ["fake_tiny"]
    th = TH.with_overrides({"l2": {"dram_bound_pct": 5}})
    f = by_id(run_analyzer(l2, fake_profile(fake_l2_launches()), th))["l2.low_hit_rate"]
    assert all(s.figures["dram_bound"] for s in f.subjects)
    assert "latency-bound scattered" not in f.recommendation


def test_l2_heatmap_cells():
    r = run_analyzer(l2, fake_profile(fake_l2_launches()), TH)
    launches = r.tables["launches"]  # every launch, the one without a hit rate too: the section bins them
    assert launches["kernel"].tolist() == [
        "fake_gather",
        "fake_gather",
        "fake_scatter",
        "fake_gemm",
        "fake_tiny",
        "fake_tiny",
        "fake_empty",
    ]
    assert launches["launch"].tolist() == list(range(7)) and launches["l2_hit_pct"].isna().sum() == 1
    cells, bin_size = heatmap_cells(launches, r.tables["kernels"])
    rows = list(dict.fromkeys(cells["kernel"]))  # rows in the order of time × miss rate, costliest first
    assert rows[0] == "fake_gather" and sorted(rows) == ["fake_gather", "fake_gemm", "fake_scatter", "fake_tiny"]
    gather = cells[cells["kernel"] == "fake_gather"]
    assert gather["first_launch"].tolist() == [0, 1] and gather["l2_hit_pct"].tolist() == [20.0, 40.0]
    assert bin_size == 1
    cells, bin_size = heatmap_cells(launches, r.tables["kernels"], max_kernels=1, max_columns=3)
    assert bin_size == 3 and cells["kernel"].tolist() == ["fake_gather"]  # launches 0-1 share bin 0
    assert cells["launches"].tolist() == [2] and cells["l2_hit_pct"].tolist() == [35.0]  # (20·100 + 40·300) / 400


def test_l2_metric_missing_is_not_measured():
    launches = [{"kernel_short": "fake_k", "dur_ns": 10_000.0, "sm_throughput_pct": 50.0}]
    r = run_analyzer(l2, fake_profile(launches), TH)
    assert [f.id for f in r.findings] == ["l2.not_measured"]
    f = r.findings[0]
    assert f.severity == Severity.INFO and f.title == "L2 hit rate was not measured"
    assert "--section MemoryWorkloadAnalysis" in f.recommendation
    assert "lts__t_sector_hit_rate.pct" in f.recommendation


# --- occupancy ------------------------------------------------------------------------------------


def fake_occupancy_launches():
    common = {"sm_count": 132.0, "theoretical_occupancy_pct": 100.0}
    return [
        {
            **common,
            "kernel_short": "fake_imbalanced",
            "dur_ns": 400_000.0,
            "achieved_occupancy_pct": 40.0,
            "occupancy_limit_registers": 8.0,
            "occupancy_limit_shared_mem": 16.0,
            "occupancy_limit_warps": 8.0,
            "occupancy_limit_blocks": 32.0,
            "grid_size": 10_000.0,
            "block_size": 256.0,
        },
        # 16 blocks of 1024 threads on 132 SMs: one block per SM gives 50 %: the grid's, not occupancy's
        {
            **common,
            "kernel_short": "fake_few_blocks",
            "dur_ns": 400_000.0,
            "achieved_occupancy_pct": 50.0,
            "occupancy_limit_registers": 2.0,
            "occupancy_limit_shared_mem": 7.0,
            "occupancy_limit_warps": 2.0,
            "occupancy_limit_blocks": 32.0,
            "grid_size": 16.0,
            "block_size": 1024.0,
        },
        {
            **common,
            "kernel_short": "fake_fine",
            "dur_ns": 200_000.0,
            "achieved_occupancy_pct": 92.0,
            "occupancy_limit_registers": 8.0,
            "occupancy_limit_shared_mem": 8.0,
            "occupancy_limit_warps": 8.0,
            "occupancy_limit_blocks": 32.0,
            "grid_size": 10_000.0,
            "block_size": 256.0,
        },
    ]


def test_occupancy_gap_exact():
    r = run_analyzer(occupancy, fake_profile(fake_occupancy_launches()), TH)
    f = by_id(r)["occupancy.gap"]
    assert [s.name for s in f.subjects] == ["fake_imbalanced"]
    s = f.subjects[0]
    assert s.severity == Severity.CRITICAL and f.severity == Severity.CRITICAL  # 60 points on 40 % of the time
    assert s.figures["gap_pts"] == 60.0 and s.figures["limiter"] == "registers+warps"
    assert f.cost_share == pytest.approx(0.4 * 60 / 100)
    assert "__launch_bounds__" in f.recommendation and "fewer threads per block" in f.recommendation
    assert "imbalance" in f.recommendation
    table = r.tables["kernels"].set_index("kernel")
    assert table.loc["fake_few_blocks", "grid_ceiling_pct"] == 50.0
    assert bool(table.loc["fake_few_blocks", "grid_limited"]) is True
    assert r.summary["achieved_occupancy_time_weighted_pct"] == pytest.approx(0.4 * 40 + 0.4 * 50 + 0.2 * 92)


def test_occupancy_critical_needs_a_heavy_kernel():
    th = TH.with_overrides({"occupancy": {"critical_kernel_share": 0.5}})
    f = by_id(run_analyzer(occupancy, fake_profile(fake_occupancy_launches()), th))["occupancy.gap"]
    assert f.severity == Severity.WARNING


# --- launch configuration -------------------------------------------------------------------------


def test_small_grid_loss_is_summed_per_launch():
    launches = [
        {"kernel_short": "fake_small", "dur_ns": 150_000.0, "grid_size": 33.0, "block_size": 256.0},
        {"kernel_short": "fake_small", "dur_ns": 50_000.0, "grid_size": 66.0, "block_size": 256.0},
        {
            "kernel_short": "fake_big",
            "dur_ns": 800_000.0,
            "grid_size": 1320.0,
            "block_size": 256.0,
            "waves_per_sm": 10.0,
        },
        # a 2 µs one-block kernel: launch-bound, a bigger grid would not help it
        *repeat(3, kernel_short="fake_tiny_one_block", dur_ns=2_000.0, grid_size=1.0, block_size=128.0),
    ]
    r = run_analyzer(launch_config, fake_profile(launches), TH)
    assert set(by_id(r)) == {"launch_config.small_grid"}
    f = by_id(r)["launch_config.small_grid"]
    assert [s.name for s in f.subjects] == ["fake_small"]
    s = f.subjects[0]
    assert s.figures["grid_blocks"] == 33 and s.figures["sm_count"] == 132 and s.figures["idle_sm_pct"] == 75.0
    total = 1_006_000.0
    assert f.cost_share == pytest.approx((150_000 * 0.75 + 50_000 * 0.5) / total)
    assert f.severity == Severity.CRITICAL  # 75 % of SMs idle on 20 % of the time
    assert r.summary["launch_small_grid_loss_gpu_time_share"] == pytest.approx(f.cost_share)


def test_tail_needs_few_waves_and_a_mostly_empty_last_wave():
    launches = [
        {
            "kernel_short": "fake_half_tail",
            "dur_ns": 100_000.0,
            "grid_size": 198.0,
            "block_size": 128.0,
            "waves_per_sm": 1.5,
        },  # 50 % of the last wave idle, 2 waves
        {
            "kernel_short": "fake_full_tail",
            "dur_ns": 100_000.0,
            "grid_size": 260.0,
            "block_size": 128.0,
            "waves_per_sm": 1.97,
        },  # 3 % idle: under the 25 % band
        {
            "kernel_short": "fake_many_waves",
            "dur_ns": 100_000.0,
            "grid_size": 1254.0,
            "block_size": 128.0,
            "waves_per_sm": 9.5,
        },
    ]  # tails do not matter beyond 4 waves
    f = by_id(run_analyzer(launch_config, fake_profile(launches), TH))["launch_config.tail_effect"]
    assert [s.name for s in f.subjects] == ["fake_half_tail"]
    assert f.subjects[0].figures["last_wave_idle_pct"] == pytest.approx(50.0)
    assert f.cost_share == pytest.approx(1 / 3 * 0.5 / 2)


def test_waves_fall_back_to_blocks_per_sm():
    launches = [{"kernel_short": "fake_no_waves", "dur_ns": 100_000.0, "grid_size": 165.0, "block_size": 96.0}]
    r = run_analyzer(launch_config, fake_profile(launches), TH)
    assert set(by_id(r)) == {"launch_config.tail_effect"}  # 96 threads = 3 whole warps
    tail = by_id(r)["launch_config.tail_effect"]
    assert tail.subjects[0].figures["waves_per_sm"] == pytest.approx(165 / 132)
    assert tail.cost_share == pytest.approx(0.75 / 2)


def test_block_not_warp_multiple_exact():
    launches = [
        {
            "kernel_short": "fake_odd",
            "dur_ns": 100_000.0,
            "grid_size": 1320.0,
            "block_size": 100.0,
            "waves_per_sm": 10.0,
        }
    ]
    f = by_id(run_analyzer(launch_config, fake_profile(launches), TH))["launch_config.block_not_warp_multiple"]
    assert f.subjects[0].figures["block_threads"] == 100
    assert f.subjects[0].figures["wasted_lane_pct"] == pytest.approx(100 * 28 / 128)
    assert f.cost_share == pytest.approx(28 / 128)


# --- tiny kernels ---------------------------------------------------------------------------------


def fake_tiny_launches(n_tiny=30):
    return [
        *repeat(n_tiny, kernel_short="fake_add", dur_ns=2_000.0, grid_size=1.0, block_size=128.0),
        *repeat(10, kernel_short="fake_big", dur_ns=1_000_000.0, grid_size=4096.0, block_size=256.0),
    ]


def test_tiny_kernels_launch_bound_exact():
    r = run_analyzer(tiny_kernels, fake_profile(fake_tiny_launches()), TH)
    f = by_id(r)["tiny_kernels.launch_bound"]
    assert f.severity == Severity.CRITICAL  # 30 of 40 = 75 % ≥ 60 %
    assert [(s.name, s.figures["launches"]) for s in f.subjects] == [("fake_add", 30)]
    assert r.summary["tiny_kernel_launches"] == 30 and r.summary["tiny_kernel_launch_share"] == 0.75
    # 5 µs of launch overhead each vs 10 ms of real work
    assert f.cost_share == pytest.approx(30 * 5_000 / (30 * 5_000 + 10 * 1_000_000))
    assert "CUDA graph" in f.recommendation and "torch.compile" in f.recommendation


def test_tiny_kernels_hand_every_timed_launch_to_the_histogram():
    r = run_analyzer(tiny_kernels, fake_profile(fake_tiny_launches()), TH)
    assert len(r.tables["launch_durations"]) == 40 and r.tables["launch_durations"]["dur_ns"].sum() == 10_060_000.0
    hist = log_histogram(r.tables["launch_durations"]["dur_ns"], 10)  # the section's bars: 2 µs and 1 ms
    assert hist["count"].tolist() == [30, 10] and hist["total"].tolist() == [60_000.0, 10_000_000.0]
    assert hist["bin_lo"].tolist() == pytest.approx([10**3.3, 10**6]) and hist["bin_hi"].tolist() == pytest.approx(
        [10**3.4, 10**6.1]
    )


def test_too_few_tiny_launches_are_no_finding():
    r = run_analyzer(tiny_kernels, fake_profile(fake_tiny_launches(n_tiny=19)), TH)
    assert r.findings == [] and r.summary["tiny_kernel_launches"] == 19


# --- speed of light -------------------------------------------------------------------------------


def test_speed_of_light_classes_and_latency_finding():
    launches = [
        {"kernel_short": "fake_latency", "dur_ns": 500_000.0, "sm_throughput_pct": 10.0, "memory_throughput_pct": 20.0},
        {"kernel_short": "fake_mem", "dur_ns": 200_000.0, "sm_throughput_pct": 20.0, "memory_throughput_pct": 80.0},
        {"kernel_short": "fake_comp", "dur_ns": 200_000.0, "sm_throughput_pct": 90.0, "memory_throughput_pct": 30.0},
        {"kernel_short": "fake_bal", "dur_ns": 50_000.0, "sm_throughput_pct": 50.0, "memory_throughput_pct": 45.0},
        {"kernel_short": "fake_dram_only", "dur_ns": 50_000.0, "sm_throughput_pct": 5.0, "dram_throughput_pct": 70.0},
    ]
    r = run_analyzer(speed_of_light, fake_profile(launches), TH)
    bound = dict(zip(r.tables["kernels"]["kernel"], r.tables["kernels"]["bound"]))
    assert bound == {
        "fake_latency": "latency-bound",
        "fake_mem": "memory-bound",
        "fake_comp": "compute-bound",
        "fake_bal": "balanced",
        "fake_dram_only": "memory-bound",
    }
    f = by_id(r)["speed_of_light.latency_bound"]
    assert [s.name for s in f.subjects] == ["fake_latency"] and f.severity == Severity.WARNING
    assert f.cost_share == pytest.approx(0.5 * (1 - 20 / 60))
    assert r.summary["sol_latency_bound_gpu_time_share"] == 0.5
    assert r.summary["sol_memory_bound_gpu_time_share"] == pytest.approx(0.25)


def test_speed_of_light_missing_is_not_measured():
    r = run_analyzer(speed_of_light, fake_profile([{"kernel_short": "fake_k", "dur_ns": 1.0}]), TH)
    assert [f.id for f in r.findings] == ["speed_of_light.not_measured"]
    assert "SpeedOfLight" in r.findings[0].recommendation


# --- the overview and the whole pipeline ------------------------------------------------------------


def test_kernels_overview_table():
    r = run_analyzer(kernels_analyzer, fake_profile(fake_l2_launches()), TH)
    t = r.tables["kernels"]
    assert list(t["kernel"]) == ["fake_gemm", "fake_gather", "fake_scatter", "fake_tiny", "fake_empty"]
    assert r.summary == {"ncu_kernel_launches": 7.0, "ncu_gpu_time_ns": 1_005_000.0, "ncu_distinct_kernels": 5.0}


def test_findings_json_shape_of_a_kernel_subject():
    a = diagnose.analyze(fake_profile(fake_l2_launches()))
    f = next(f for f in a.findings if f.id == "l2.low_hit_rate").to_json()
    s = f["subjects"][0]
    assert s["kind"] == "kernel" and s["name"] == "fake_gather" and s["severity"] == "critical"
    assert {"launches", "gpu_time_ns", "share", "l2_hit_pct", "kernel_name"} <= set(s)
    assert 0.0 <= f["cost_share"] <= 1.0
