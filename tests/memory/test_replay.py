"""Replay vs the allocator's own numbers: the snapshot per segment (exact) and memory_stats per step."""

from __future__ import annotations

import json

import numpy as np
import pytest

from diagnose.derive.memory_replay import agreement, external_fragmentation_pct, replay, round_size
from parsers.snapshot import read_snapshot, snapshot_from_dict
from tests.memory.conftest import SCENARIOS, scenario_result, snapshot_path
from tests.paths import shared

PEAKS = {  # printed by the capture scripts (torch.cuda.max_memory_reserved / max_memory_allocated)
    "churn": (8264876032, 5635085312),
    "expandable": (6524239872, 5634036736),
    "ring": (8264876032, 5635085312),
    "oom": (4278190080, 4278190080),
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_replayed_state_equals_the_snapshot_per_segment(scenario):
    snap = read_snapshot(snapshot_path(scenario))
    r = replay(snap)
    a = agreement(r, snap)
    assert len(a) == len(snap.segments)
    assert (a["replayed_total_size_bytes"] == a["snapshot_total_size_bytes"]).all()
    assert (a["replayed_allocated_bytes"] == a["snapshot_allocated_bytes"]).all()
    assert (a["replayed_active_bytes"] == a["snapshot_active_bytes"]).all()
    assert (a["replayed_requested_bytes"] == a["snapshot_requested_bytes"]).all()
    assert r.meta["mismatches"] == 0
    tl = r.timeline
    assert (tl["reserved_bytes"].max(), tl["allocated_bytes"].max()) == PEAKS[scenario]
    assert (tl["allocated_bytes"] <= tl["active_bytes"]).all() and (tl["active_bytes"] <= tl["reserved_bytes"]).all()
    assert (tl["requested_bytes"] <= tl["allocated_bytes"]).all()


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_replay_agrees_with_memory_stats_on_every_step_in_the_history(scenario):
    result = scenario_result(scenario)
    stats = result.tables["memory_stats_agreement"]
    inside = stats[stats["in_history"]]
    # each capture's last record comes after the history's last entry (0.1-11 ms): not compared, since the
    # history may have stopped by then
    assert len(inside) == {"churn": 29, "expandable": 29, "ring": 22, "oom": 2}[scenario]
    after = stats[~stats["in_history"]]
    assert after["replayed_allocated_bytes"].isna().all() and len(after) == len(stats) - len(inside)
    assert (inside["allocated_diff_bytes"] == 0).all() and (inside["reserved_diff_bytes"] == 0).all()
    assert (inside["replayed_requested_bytes"] == inside["recorded_requested_bytes"]).all()
    assert result.summary["memory_stats_agreement_pct"] == 100.0


def test_ring_buffer_state_before_the_history_is_reconstructed():
    snap = read_snapshot(snapshot_path("ring"))
    r = replay(snap)
    assert r.meta["pre_existing_segments"] == 38 and r.meta["pre_existing_blocks"] == 52
    assert r.meta["estimated_blocks"] == 9
    assert r.initial["reserved_bytes"] == 6142558208
    result = scenario_result("ring")
    cov = result.meta["coverage"]  # state predates the history: steps 0-6 were not recorded
    assert (cov["first_covered_step"], cov["last_covered_step"], cov["covered_steps"], cov["run_steps"]) == (
        7,
        29,
        23,
        30,
    )
    assert cov["not_recorded_before"] and (cov["first_step_before"], cov["last_step_before"]) == (0, 6)
    assert result.summary["history_coverage_pct"] == pytest.approx(76.67, abs=0.01)
    assert cov["time_pct"] == pytest.approx(87.10, abs=0.01)
    assert scenario_result("churn").summary["history_coverage_pct"] == 100.0


def test_expandable_segments_are_mapped_ranges():
    snap = read_snapshot(snapshot_path("expandable"))
    r = replay(snap)
    assert r.segments_final["is_expandable"].all() and len(r.segments_final) == 2
    assert sorted(r.segments_final["total_size_bytes"]) == [2097152, 6522142720]


def test_oom_entries_keep_the_state_then():
    ooms = replay(read_snapshot(snapshot_path("oom"))).ooms
    assert ooms["request_bytes"].tolist() == [5242880, 268435456]
    second = ooms.iloc[1]
    assert second["reserved_bytes"] == 4278190080 and second["allocated_bytes"] == 1069547520
    assert (
        second["largest_free_pool_bytes"] == 15 * 2**20
    )  # three freed 5 MiB blocks merged, one live block pins each segment
    first = ooms.iloc[0]
    assert first["cached_free_bytes"] < first["request_bytes"]


def test_shared_convnet_final_state_matches_its_memory_stats():
    snap = read_snapshot(shared("torch", "convnet.snapshot.pickle.gz"))
    stats = json.loads(shared("torch", "convnet.stats.json").read_text())["memory_stats"]
    r = replay(snap)
    tl = r.timeline
    assert tl["allocated_bytes"].iloc[-1] == stats["allocated_bytes.all.current"] == 69496832
    assert tl["reserved_bytes"].iloc[-1] == stats["reserved_bytes.all.current"]
    assert tl["requested_bytes"].iloc[-1] == stats["requested_bytes.all.current"]
    assert tl["allocated_bytes"].max() == stats["allocated_bytes.all.peak"] == 325091840
    assert agreement(r, snap)["agrees"].all()


def test_round_size_follows_torch():
    assert [round_size(s) for s in (1, 511, 512, 513, 40, 1 << 20)] == [512, 512, 512, 1024, 512, 1 << 20]
    assert round_size(1200 << 20, {"roundup_power2_divisions": {"2048": 4}}) == 1280 << 20


def test_fake_tiny_trace_split_and_merge():
    """Hand-made: a 2 MiB small segment, two 512 B blocks, free both: they merge back into one free block."""
    base = 1 << 30
    entries = [
        ("segment_alloc", base, 2 << 20),
        ("alloc", base, 100),
        ("alloc", base + 512, 600),
        ("free_requested", base, 100),
        ("free_completed", base, 100),
    ]
    snap = snapshot_from_dict(
        {
            "segments": [
                {
                    "address": base,
                    "total_size": 2 << 20,
                    "allocated_size": 1024,
                    "active_size": 1024,
                    "requested_size": 600,
                    "segment_type": "small",
                    "blocks": [],
                }
            ],
            "device_traces": [
                [{"action": a, "addr": ad, "size": s, "time_us": i} for i, (a, ad, s) in enumerate(entries)]
            ],
        },
        "fake",
    )
    r = replay(snap, sample_at=np.arange(5))
    assert r.timeline["allocated_bytes"].tolist() == [0, 512, 1536, 1024, 1024]
    assert r.timeline["requested_bytes"].tolist() == [0, 100, 700, 600, 600]
    assert r.samples["largest_free_small_bytes"].tolist() == [
        2 << 20,
        (2 << 20) - 512,
        (2 << 20) - 1536,
        (2 << 20) - 1536,
        (2 << 20) - 1536,
    ]
    assert r.timeline["free_small_bytes"].iloc[-1] == (2 << 20) - 1024
    assert external_fragmentation_pct([512], [1024]).tolist() == [50.0]
    assert agreement(r, snap)["agrees"].all()


def test_fake_snapshot_listing_one_segment_twice_is_compared_not_crashed():
    """Hand-made bad input: the snapshot lists the same segment address twice (seen while fuzzing)."""
    base = 1 << 30
    segment = {
        "address": base,
        "total_size": 2 << 20,
        "allocated_size": 512,
        "active_size": 512,
        "requested_size": 100,
        "segment_type": "small",
        "blocks": [],
    }
    entries = [("segment_alloc", base, 2 << 20), ("alloc", base, 100)]
    snap = snapshot_from_dict(
        {
            "segments": [segment, dict(segment)],
            "device_traces": [
                [{"action": a, "addr": ad, "size": s, "time_us": i} for i, (a, ad, s) in enumerate(entries)]
            ],
        },
        "fake",
    )
    a = agreement(replay(snap), snap)
    assert len(a) == 1
    assert a["snapshot_total_size_bytes"].iloc[0] == 2 * (2 << 20)  # both listings counted
    assert not a["agrees"].iloc[0]  # and the mismatch is shown
