"""Snapshot parser on real H200 captures: tables, frames, both file forms, several devices."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from diagnose.derive.memory_replay import agreement, replay
from parsers.restricted_pickle import loads_plain
from parsers.schema import missing_columns
from parsers.snapshot import (
    BLOCKS_SCHEMA,
    SEGMENTS_SCHEMA,
    STACKS_SCHEMA,
    TRACE_SCHEMA,
    read_snapshot,
    snapshot_from_dict,
)
from tests.memory.conftest import snapshot_path
from tests.paths import shared

COUNTS = {  # scenario: (entries, segments, blocks, action counts)
    "churn": (4026, 42, 105, {"alloc": 1369, "free_requested": 1310, "free_completed": 1310, "segment_alloc": 37}),
    "expandable": (4027, 2, 92, {"alloc": 1369, "free_requested": 1310, "free_completed": 1310, "segment_map": 38}),
    "oom": (
        2246,
        204,
        408,
        {"alloc": 816, "free_requested": 612, "free_completed": 612, "segment_alloc": 204, "oom": 2},
    ),
    "ring": (3000, 42, 105, {"alloc": 1009, "free_requested": 993, "free_completed": 994, "segment_alloc": 4}),
}


@pytest.mark.parametrize("scenario", sorted(COUNTS))
def test_tables_and_counts(scenario):
    snap = read_snapshot(snapshot_path(scenario))
    entries, segments, blocks, actions = COUNTS[scenario]
    assert len(snap.trace) == entries and len(snap.segments) == segments and len(snap.blocks) == blocks
    assert snap.trace["action"].value_counts().to_dict() == actions
    for df, schema in (
        (snap.trace, TRACE_SCHEMA),
        (snap.segments, SEGMENTS_SCHEMA),
        (snap.blocks, BLOCKS_SCHEMA),
        (snap.stacks, STACKS_SCHEMA),
    ):
        assert missing_columns(df, schema) == []
    assert snap.devices == [0]
    assert snap.metadata["format"] == "torch-pickle"
    assert snap.metadata["warnings"] == []
    assert (snap.trace["seq"].to_numpy() == np.arange(entries)).all()
    assert snap.trace["t_us"].is_monotonic_increasing
    assert snap.metadata["expandable_segments"] is (scenario == "expandable")


def test_frames_are_interned_and_user_lines_found():
    snap = read_snapshot(snapshot_path("churn"))
    assert len(snap.stacks) == 32 and len(snap.stack_frames) == 32  # 4026 entries share 32 distinct stacks
    counts = snap.trace["location"].value_counts()
    assert counts["/work/main/examples/mem_churn.py:45"] == 736
    assert counts["/work/main/examples/mem_churn.py:43"] == 536
    assert all(loc.endswith(".py:" + loc.rsplit(":", 1)[1]) for loc in counts.index)
    # backward-thread allocations have only C++ frames: no user line, but the stack is kept
    assert snap.trace["location"].isna().sum() == 2485
    assert (snap.trace.loc[snap.trace["location"].isna(), "stack_id"] >= 0).all()


def test_oom_entries_carry_driver_free_memory():
    snap = read_snapshot(snapshot_path("oom"))
    ooms = snap.trace[snap.trace["action"] == "oom"]
    assert ooms["size_bytes"].tolist() == [5242880, 268435456]
    assert ooms["device_free_bytes"].tolist() == [145279287296.0, 145279287296.0]
    assert ooms["location"].tolist() == ["/work/main/examples/mem_oom.py:34", "/work/main/examples/mem_oom.py:42"]


def _raw(scenario):
    return loads_plain(gzip.decompress(snapshot_path(scenario).read_bytes()), "fixture")


@pytest.mark.parametrize("compress", [False, True])
def test_gpudiag_json_form_reads_the_same(tmp_path, compress):
    raw = _raw("expandable")
    raw["schema"] = "gpudiag.snapshot/1"
    text = json.dumps(raw).encode()
    path = tmp_path / ("rank0.snapshot.json.gz" if compress else "rank0.snapshot.json")
    path.write_bytes(gzip.compress(text) if compress else text)
    from_json = read_snapshot(path)
    from_pickle = read_snapshot(snapshot_path("expandable"))
    assert from_json.metadata["format"] == "gpudiag-json"
    for name in ("trace", "segments", "blocks", "stacks"):
        a, b = getattr(from_json, name), getattr(from_pickle, name)
        assert a.equals(b), name


def test_several_devices(tmp_path):
    """The churn and oom captures side by side as devices 0 and 1 of one (hand-assembled) snapshot."""
    churn, oom = _raw("churn"), _raw("oom")
    for seg in oom["segments"]:
        seg["device"] = 1
    both = {
        "segments": churn["segments"] + oom["segments"],
        "device_traces": [churn["device_traces"][0], oom["device_traces"][0]],
        "allocator_settings": churn["allocator_settings"],
    }
    snap = snapshot_from_dict(both, "fake_two_devices")
    assert snap.devices == [0, 1]
    assert len(snap.trace_for(1)) == 2246 and len(snap.segments_for(1)) == 204
    for device in (0, 1):
        assert agreement(replay(snap, device), snap)["agrees"].all()


def test_shared_convnet_snapshot():
    snap = read_snapshot(shared("torch", "convnet.snapshot.pickle.gz"))
    assert len(snap.trace) == 1105 and len(snap.segments) == 20
    assert int(snap.segments["total_size_bytes"].sum()) == 895483904
