"""The kernel analyzers on a real H200 capture of kernels of known kinds (fixtures/ncu/kernel_kinds,
examples/ncu_kernel_kinds.py): each kernel's limiter, and the L2 findings split by cause."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import diagnose
from diagnose.analysis import run_analyzer
from diagnose.derive.kernel_limiter import BREAKDOWN_MEMORY, BREAKDOWN_SM, column_of, kernel_limiters
from diagnose.derive.kernel_roofline import kernel_roofline
from diagnose.derive.kernel_stats import per_kernel
from diagnose.thresholds import Thresholds
from tests.ncu_read import ncu_kernels
from tests.paths import REPO

KINDS = REPO / "fixtures" / "ncu" / "kernel_kinds"
RAW = KINDS / "raw.csv.gz"


@pytest.fixture(scope="module")
def analysis():
    return diagnose.analyze(diagnose.load(RAW))


def by_id(analysis):
    return {f.id: f for f in analysis.findings}


def test_each_kernels_limiter_is_its_sol_breakdowns_top_unit():
    kernels = ncu_kernels(RAW)
    stats = per_kernel(kernels, ["sm_throughput_pct", "memory_throughput_pct"])
    lim = kernel_limiters(kernels, stats).assign(kernel=stats["kernel"]).set_index("kernel")
    expected = {
        "naive_gemm": ("L1/TEX (LSU)", 97.2, "instruction issue"),
        "tiled_gemm": ("L1/TEX (LSU)", 91.3, "instruction issue"),
        "stream_add": ("DRAM", 74.6, "L2"),
        "strided_copy": ("DRAM", 78.9, "L2"),
        "transpose_naive": ("L2 (crossbar in)", 84.3, "L1-L2 crossbar"),
    }
    for kernel, (unit, pct, next_unit) in expected.items():
        row = lim.loc[kernel]
        assert (row["limiter_unit"], round(row["limiter_pct"], 1), row["next_unit"]) == (unit, pct, next_unit), kernel
        assert row["limiter_source"] == "ncu SOL breakdown"
    # the naive GEMM's SM vs DRAM view (SM 65 %, DRAM 0.3 %) would call it compute-ish; its limiter is the L1 path
    naive = stats.set_index("kernel").loc["naive_gemm"]
    assert round(naive["sm_throughput_pct"], 1) == 64.8 and lim.loc["naive_gemm", "limiter_pct"] > 97


def test_each_kernels_limiter_is_the_argmax_of_its_duration_weighted_breakdown():
    kernels = ncu_kernels(RAW)
    stats = per_kernel(kernels)
    lim = kernel_limiters(kernels, stats)
    members = [m for m in BREAKDOWN_SM + BREAKDOWN_MEMORY if column_of(m) in kernels.columns]
    values = kernels[[column_of(m) for m in members]].astype(float)
    weights = values.notna().mul(kernels["dur_ns"], axis=0)  # a launch weighs its duration, where it has the value
    by_name = kernels["kernel_name"]
    means = values.mul(kernels["dur_ns"], axis=0).groupby(by_name).sum() / weights.groupby(by_name).sum()
    expected = [members[i] for i in np.nanargmax(means.loc[stats["kernel_name"]].to_numpy(), axis=1)]
    assert list(lim["limiter_metric"]) == expected
    assert len(set(expected)) > 1  # the capture's kernels are limited by different units


def limiter_of_each_launch(kernels: pd.DataFrame) -> list[str]:
    """The limiter metric of each launch, in launch order, through kernel_limiters (what the analyzers use): each
    launch is named as a kernel of its own, and a kernel's duration-weighted mean over one launch is its value."""
    one_each = kernels.assign(kernel_name=[f"launch {i:06d}" for i in range(len(kernels))])
    stats = per_kernel(one_each)
    lim = kernel_limiters(one_each, stats).set_axis(stats["kernel_name"].to_numpy())
    return list(lim.loc[one_each["kernel_name"], "limiter_metric"])


def report_limiters(path: str) -> tuple[list[str], list[str], bool]:
    """(each launch's limiter metric, the highest metric of the launch's own breakdown lists, whether every launch
    has its lists), read from a .ncu-rep (in a fresh process: see tests/analyzers/ncu_isolated.py)."""
    rep = ncu_kernels(path)
    has_lists = bool(rep["sol_breakdown_sm"].notna().all() and rep["sol_breakdown_memory"].notna().all())
    truth = []  # without kernel_limiter: the report's lists and the launch's values only
    for _, row in rep.iterrows():
        listed = str(row["sol_breakdown_sm"]).split(",") + str(row["sol_breakdown_memory"]).split(",")
        values = {m: row[column_of(m)] for m in listed if column_of(m) in rep.columns}
        truth.append(max(values, key=values.get))
    return limiter_of_each_launch(rep), truth, has_lists


@pytest.mark.parametrize("scenario", ["l2_random_gather", "matmul_tiled", "small_grid", "tiny_kernels"])
def test_limiter_from_the_reports_own_breakdown_lists_matches_the_csv(scenario):
    """On the project's own reports (the kinds capture's report is not committed: tests/analyzers/ncu_isolated.py)."""
    from tests.analyzers.ncu_isolated import FIXTURE_REPORTS, in_fresh_process

    pytest.importorskip("ncu_report")
    limiters, truth, has_lists = in_fresh_process(report_limiters, str(FIXTURE_REPORTS[scenario]))
    assert has_lists and limiters == truth
    assert limiter_of_each_launch(ncu_kernels(FIXTURE_REPORTS[scenario].with_name("raw.csv"))) == truth


def test_roofline_figures_are_ncus_own_counts():
    kernels = ncu_kernels(RAW)
    stats = per_kernel(kernels)
    roof = kernel_roofline(kernels, stats).set_axis(stats["kernel"])
    naive = roof.loc["naive_gemm"]
    # 2 launches of a 2048³ FP32 GEMM: 2 × 2 × 2048³ FLOPs, counted from ncu's FFMA rate, clock and duration
    assert naive["flop"] == pytest.approx(2 * 2 * 2048**3, rel=1e-3) and naive["precision"] == "FP32"
    # H200: 132 SMs × 128 FFMA a cycle × 2 at 1.97 GHz; 1,504 DRAM bytes a cycle at 3.2 GHz
    assert naive["peak_flop_per_s"] == pytest.approx(66.76e12, rel=0.01)
    assert naive["peak_dram_bytes_per_s"] == pytest.approx(4.812e12, rel=0.01)
    assert round(naive["ridge_bytes_per_flop"], 4) == 0.0721
    assert round(naive["dram_bytes_per_flop"], 4) == 0.0027 and round(naive["l1_bytes_per_flop"], 2) == 2.0
    assert naive["roofline_bound"] == "compute" and naive["roofline_ns"] / 2 == pytest.approx(257_500, rel=0.01)
    assert round(naive["flop_rate_pct"], 1) == 8.1
    # a transpose does no FP work: its roofline is its DRAM bytes at peak bandwidth
    transpose = roof.loc["transpose_naive"]
    assert transpose["flop"] == 0 and transpose["roofline_bound"] == "DRAM"
    assert transpose["roofline_ns"] == pytest.approx(transpose["dram_bytes"] / transpose["peak_dram_bytes_per_s"] * 1e9)
    # CuPy's RNG init is integer work (ALU pipe 65 %): its roofline is that, not its few DRAM bytes
    assert roof.loc["init_curand", "roofline_bound"] == "integer ALU"


def test_kernels_held_back_on_chip_get_their_unit_cause_fix_and_roofline(analysis):
    f = by_id(analysis)["speed_of_light.onchip_bound"]
    subjects = {s.name: s for s in f.subjects}
    assert list(subjects) == ["naive_gemm", "tiled_gemm", "transpose_naive", "init_curand"]  # by cost
    naive, tiled, transpose = subjects["naive_gemm"], subjects["tiled_gemm"], subjects["transpose_naive"]
    assert naive.figures["causes"] == "reuse missed" and naive.figures["limiter_unit"] == "L1/TEX (LSU)"
    assert naive.figures["saving_basis"] == "roofline" and round(naive.figures["saving_share"], 2) == 0.92
    assert naive.severity == diagnose.Severity.CRITICAL and round(naive.figures["est_loss_share"], 3) == 0.42
    # the tiled GEMM: shared memory carries its L1 pipe, so the fix is register tiling, and it costs less
    assert tiled.figures["causes"] == "shared-memory traffic"
    assert tiled.figures["est_loss_share"] < naive.figures["est_loss_share"] / 1.8
    # the naive transpose's L2 crossbar: its stores waste 78 % of their sectors
    assert transpose.figures["causes"] == "wasted sectors" and transpose.figures["limiter_unit"] == "L2 (crossbar in)"
    assert transpose.severity == diagnose.Severity.WARNING
    assert "stream_add" not in subjects and "strided_copy" not in subjects  # DRAM-limited: at their roofline
    assert f.title.startswith("4 kernels (90.8 % of GPU time) are held back by on-chip memory traffic")
    text = f.recommendation
    assert (
        "naive_gemm: per FLOP it moves 2 global bytes through L1 and 0.0027 DRAM bytes, against the GPU's ridge "
        in text
    )
    assert "257 µs a launch, not 3.18 ms (8.1 % of FP32 peak)" in text
    assert (
        "tile it in shared memory" in text and "tile it in registers" in text and "coalesce its global accesses" in text
    )
    assert round(f.cost_share, 3) == 0.794
    # l2 leaves them to it: no reuse finding counts the GEMMs' time again
    assert "l2.reuse_missed" not in by_id(analysis)
    table = analysis.results["speed_of_light"].tables["kernels"].set_index("kernel")
    assert round(table.loc["naive_gemm", "roofline_saving_share"], 2) == 0.92


def test_streaming_kernels_are_compulsory_not_critical_and_get_no_caching_advice(analysis):
    got = by_id(analysis)
    f = got["l2.compulsory_misses"]
    assert f.severity == diagnose.Severity.INFO and f.cost_share is None
    subjects = {s.name: s for s in f.subjects}
    assert set(subjects) == {"stream_add", "strided_copy"}
    assert subjects["stream_add"].figures["limiter_unit"] == "DRAM" and subjects["stream_add"].figures["dram_bound"]
    assert round(subjects["stream_add"].figures["reuse_l1"], 2) == 1.0
    assert "DRAM-bound" in f.recommendation and "compulsory" in f.recommendation
    for advice in ("tile or block the loop", "persisting L2", "sort or bucket"):  # the caching advice
        assert advice not in f.recommendation
    assert "l2.low_hit_rate" not in got  # before the split: critical, 70 % loss, "tile ... persisting L2"
    table = analysis.results["l2"].tables["kernels"].set_index("kernel")
    assert table.loc["stream_add", "band"] == "critical"  # the band is still shown for every kernel


def test_old_captures_without_reuse_metrics_keep_the_low_hit_finding():
    a = diagnose.analyze(diagnose.load(REPO / "fixtures" / "ncu" / "l2_random_gather" / "raw.csv"))
    f = by_id(a)["l2.low_hit_rate"]
    assert f.severity == diagnose.Severity.CRITICAL
    assert a.results["l2"].tables["kernels"]["cause"].iloc[0] == "scattered or unknown"


def test_occupancy_gap_at_a_units_peak_is_info(tmp_path):
    """fake: the kinds capture with stream_add's occupancy lowered by 30 points: it sits at 75 % of DRAM peak
    (under saturated_unit_pct, so still a warning); with the threshold at 70 % it is info and costs nothing."""
    from diagnose.analyzers import occupancy
    from diagnose.ingest.profile_data import Profile

    kernels = ncu_kernels(RAW)
    is_stream = kernels["kernel_short"] == "stream_add"
    kernels.loc[is_stream, "achieved_occupancy_pct"] = kernels.loc[is_stream, "theoretical_occupancy_pct"] - 30
    profile = Profile(kernels=kernels)
    warn = {s.name: s for f in run_analyzer(occupancy, profile, Thresholds()).findings for s in f.subjects}
    assert warn["stream_add"].severity == diagnose.Severity.WARNING
    th = Thresholds().with_overrides({"occupancy": {"saturated_unit_pct": 70.0}})
    info = {s.name: s for f in run_analyzer(occupancy, profile, th).findings for s in f.subjects}
    assert info["stream_add"].severity == diagnose.Severity.INFO
    assert info["stream_add"].figures["est_loss_share"] == 0.0
    assert info["stream_add"].figures["sol_limiter_unit"] == "DRAM"


def test_summary_only_capture_falls_back_to_the_sol_summary():
    """fake: no breakdown metric at all — the limiter says so rather than guessing a unit."""
    kernels = ncu_kernels(RAW)
    members = [column_of(m) for m in BREAKDOWN_SM + BREAKDOWN_MEMORY]
    slim = kernels.drop(columns=[c for c in members if c in kernels.columns])
    stats = per_kernel(slim, ["sm_throughput_pct", "memory_throughput_pct"])
    lim = kernel_limiters(slim, stats)
    assert set(lim["limiter_source"]) == {"SOL summary only"}
    row = lim[stats["kernel_short"].eq("naive_gemm").to_numpy()].iloc[0]
    naive = stats.set_index("kernel_short").loc["naive_gemm"]
    assert row["limiter_unit"] == "memory (no breakdown collected)" and round(row["limiter_pct"], 1) == 97.2
    assert row["limiter_pct"] == naive["memory_throughput_pct"] > naive["sm_throughput_pct"]
    assert pd.isna(row["next_pct"])


def test_gpudiags_own_default_ncu_capture_has_what_the_split_needs():
    """fixtures/runs/ncu_kinds: `gpudiag profile --ncu --launch-skip 0 --launch-count 40` of the same script, with
    gpudiag's default sections and metrics (15 replay passes per launch): the same verdicts as the full set."""
    a = diagnose.analyze(diagnose.load(REPO / "fixtures" / "runs" / "ncu_kinds"))
    got = by_id(a)
    onchip = {s.name: s for s in got["speed_of_light.onchip_bound"].subjects}
    naive, tiled = onchip["naive_gemm"], onchip["tiled_gemm"]
    # gpudiag's default sections hold no roofline metrics: the saving is the time down to the next limit
    assert naive.figures["saving_basis"] == "next limit" and round(naive.figures["saving_share"], 2) == 0.62
    assert naive.severity == diagnose.Severity.CRITICAL and tiled.severity == diagnose.Severity.WARNING
    assert naive.figures["causes"] == "reuse missed" and round(naive.figures["reuse_l1"]) == 1022
    assert tiled.figures["causes"] == "shared-memory traffic"
    assert (
        "its roofline was not measured (no SpeedOfLight_RooflineChart metrics"
        in got["speed_of_light.onchip_bound"].recommendation
    )
    assert {s.name for s in got["l2.compulsory_misses"].subjects} == {"stream_add", "strided_copy"}
    uncoalesced = {s.name: s for s in got["memory_access.uncoalesced"].subjects}
    assert set(uncoalesced) == {"transpose_naive", "strided_copy"}
    table = a.results["speed_of_light"].tables["kernels"].set_index("kernel")
    assert (
        table.loc["naive_gemm", "limiter_unit"] == "L1/TEX (LSU)" and table.loc["stream_add", "limiter_unit"] == "DRAM"
    )
