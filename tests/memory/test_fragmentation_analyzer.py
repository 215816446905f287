"""The planted problems of each H200 capture are found; the fixed run is not flagged."""

from __future__ import annotations

import pytest

from diagnose.analysis import run_analyzer
from diagnose.analyzers import fragmentation
from diagnose.findings import Severity
from diagnose.thresholds import Thresholds
from tests.memory.conftest import MEMORY, fake_profile, profile_of, scenario_profile, scenario_result, stats_path


def _ids(result):
    return sorted(f.id for f in result.findings)


def _one(result, fid):
    found = [f for f in result.findings if f.id == fid]
    assert len(found) == 1, _ids(result)
    return found[0]


def test_churn_fragmentation_at_peak():
    result = scenario_result("churn")
    assert _ids(result) == ["fragmentation.at_peak"]
    f = _one(result, "fragmentation.at_peak")
    assert f.severity == Severity.WARNING
    ev = {e.metric: e.value for e in f.evidence}
    assert ev["reserved_unused_at_peak_pct"] == pytest.approx(100 * (8264876032 - 5635085312) / 8264876032)
    assert ev["peak_reserved_bytes"] == 8264876032 and ev["peak_allocated_bytes"] == 5635085312
    assert ev["fragmented_growth_bytes"] == pytest.approx(5.65 * 2**30, rel=0.01)
    assert (
        ev["largest_free_block_before_worst_growth_bytes"]
        < ev["request_at_worst_growth_bytes"]
        <= ev["free_before_worst_growth_bytes"]
    )
    segs = [s for s in f.subjects if s.kind == "segment"]
    locs = [s.name for s in f.subjects if s.kind == "location"]
    assert len(segs) == 10 and all(s.name.startswith("0x") for s in segs)
    assert "/work/main/examples/mem_churn.py:43" in locs
    assert "expandable_segments:True" in f.recommendation and "zero_grad(set_to_none=True)" in f.recommendation
    s = result.summary
    assert s["snapshot_reserved_bytes"] == 8264876032 and s["snapshot_allocated_bytes"] == 2697101312
    assert s["peak_reserved_bytes"] == 8264876032 and s["peak_allocated_bytes"] == 5635085312
    assert s["history_coverage_pct"] == 100.0
    assert s["peak_external_fragmentation_pct"] == pytest.approx(91.26, abs=0.01)


def test_expandable_segments_run_is_not_flagged():
    result = scenario_result("expandable")
    assert _ids(result) == []
    assert result.meta["expandable_segments"] is True
    assert result.summary["peak_reserved_bytes"] == 6524239872


def test_lower_threshold_flags_it_and_drops_the_expandable_advice():
    th = Thresholds().with_overrides({"memory": {"frag_warning_share": 0.1}})
    result = run_analyzer(fragmentation, scenario_profile("expandable"), th)
    f = _one(result, "fragmentation.at_peak")
    assert "set PYTORCH_CUDA_ALLOC_CONF" not in f.recommendation.lower()
    assert "Bucket or pad" in f.recommendation


def test_ring_is_flagged_with_partial_coverage():
    result = scenario_result("ring")
    assert _ids(result) == ["fragmentation.at_peak"]
    assert result.summary["history_coverage_pct"] == pytest.approx(100 * 23 / 30)  # steps 7-29 of 0-29


def test_oom_from_fragmentation_and_from_demand():
    result = scenario_result("oom")
    assert _ids(result) == ["fragmentation.oom_demand", "fragmentation.oom_from_fragmentation"]
    frag = _one(result, "fragmentation.oom_from_fragmentation")
    assert frag.severity == Severity.CRITICAL
    ev = {e.metric: e.value for e in frag.evidence}
    assert ev["oom_request_bytes"] == 256 * 2**20
    assert ev["reserved_unallocated_at_oom_bytes"] == 4278190080 - 1069547520  # oom.json: reserved − allocated
    assert ev["largest_free_block_at_oom_bytes"] == 15 * 2**20
    assert ev["driver_free_at_oom_bytes"] == 145279287296
    assert [s.name for s in frag.subjects] == ["/work/main/examples/mem_oom.py:42"]
    demand = _one(result, "fragmentation.oom_demand")
    assert {e.metric: e.value for e in demand.evidence}["oom_request_bytes"] == 5 * 2**20


def test_churn_finding_on_a_trace_that_frees_segments_every_step():
    """Hand-made: the real oom trace is one step; here steps are forced so each has cudaMalloc and cudaFree."""
    import pandas as pd

    from parsers.snapshot import snapshot_from_dict

    base, seg = 1 << 32, 20 << 20
    entries, stats = [], []
    for step in range(8):
        t = step * 100
        entries += [
            ("segment_alloc", base, seg, t),
            ("alloc", base, seg, t + 1),
            ("free_requested", base, seg, t + 2),
            ("free_completed", base, seg, t + 3),
            ("segment_free", base, seg, t + 4),
        ]
        stats.append({"step": step, "t_ns": (t + 50) * 1000.0})
    snap = snapshot_from_dict(
        {
            "segments": [],
            "device_traces": [[{"action": a, "addr": ad, "size": s, "time_us": t} for a, ad, s, t in entries]],
        },
        "fake_churn",
    )
    profile = fake_profile()
    profile.snapshots[0] = snap
    profile.memory_stats[0] = pd.DataFrame(
        {
            "rank": 0,
            "step": [s["step"] for s in stats],
            "t_ns": [s["t_ns"] for s in stats],
            "framework": "torch",
            "allocated_bytes": 0.0,
            "reserved_bytes": 0.0,
            "requested_bytes": 0.0,
        }
    )
    th = Thresholds().with_overrides({"memory": {"min_reserved_bytes": 0}})
    result = run_analyzer(fragmentation, profile, th)
    f = _one(result, "fragmentation.churn")
    assert {e.metric: e.value for e in f.evidence}["segment_ops_per_step_median"] == 2
    assert result.tables["per_step"]["segment_ops"].tolist()[:8] == [2] * 8


def test_stats_only_torch():
    profile = profile_of(stats_path("churn"))
    result = run_analyzer(fragmentation, profile)
    assert _ids(result) == ["fragmentation.at_peak", "fragmentation.not_measured"]
    assert result.summary["peak_reserved_bytes"] == 8264876032


def test_jax_stats_statement():
    profile = profile_of(MEMORY / "jax" / "stats.jsonl.gz")
    result = run_analyzer(fragmentation, profile)
    assert _ids(result) == ["fragmentation.jax_unreported"]
    statement = result.meta["jax_statement"]
    assert "bytes_reserved is 0" in statement and "100 % of the 105 GiB limit" in statement
    assert "no segments and blocks and no allocation history with source lines" in statement
    assert "no requested bytes" in statement
    assert result.summary["jax_pool_bytes"] == 112583507968
    assert result.summary["jax_peak_external_fragmentation_pct"] < 0.1
    assert len(result.tables["jax_per_step"]) == 5


def test_nothing_captured():
    result = run_analyzer(fragmentation, fake_profile())
    assert _ids(result) == ["fragmentation.not_measured"]


def test_heatmap_and_curves_are_bounded():
    th = Thresholds()
    result = scenario_result("churn")
    cells, rows, bins = result.tables["heatmap"], result.tables["heatmap_rows"], result.tables["heatmap_bins"]
    # one column per step, and one for the 161 entries before step 0's (estimated) start: building the model
    assert len(bins) == 31 and result.meta["heatmap_axis"] == "step"
    assert bins["label"].iloc[0] == "before step 0" and bins["label"].iloc[-1] == "step 29"
    assert len(rows) == 42 and len(cells) == 31 * 42
    assert cells["fraction_allocated"].dropna().between(0, 1).all()
    # the timeline is every entry's bytes (the section draws runs of them); the free-block set is read only at the
    # ends of those runs (at most max_timeline_bins), of the heatmap's columns and at OOMs
    assert len(result.tables["timeline"]) == result.meta["entries"] == 4026
    curve_reads = th.memory.max_timeline_bins + len(bins) + len(result.tables["ooms"])
    assert len(result.tables["fragmentation_curve"]) == 475 <= curve_reads
    assert result.tables["timeline"]["reserved_bytes"].max() == 8264876032
    small = Thresholds().with_overrides({"memory": {"max_heatmap_segment_rows": 8, "max_heatmap_time_bins": 10}})
    r = run_analyzer(fragmentation, scenario_profile("churn", with_stats=False), small)
    assert len(r.tables["heatmap_rows"]) == 8 and r.tables["heatmap_rows"]["segments"].sum() == 42
    # no step timings: buckets of one round width (0.1 s: the 0.686 s history in at most 10), the last one
    # ending with the last entry
    assert r.meta["heatmap_axis"] == "time" and r.meta["heatmap_bin_s"] == 0.1
    assert len(r.tables["heatmap_bins"]) == 7 and r.tables["heatmap_bins"]["label"].iloc[-1] == "0.600–0.700 s"
