"""Profiled launches and the allocator's segments on one clock: does a low L2 hit rate follow new segments?

Under ``gpudiag profile --ncu`` two records share the host's wall clock: when ncu began profiling each
launch (``profile.launch_starts``, read from ncu's log) and torch's allocator history (``t_us`` of each
cudaMalloc / cudaFree of a segment, in the snapshot written at exit). Here both are put on seconds since
the first profiled launch, with the bytes the allocator held after each segment event (known exactly
backwards from the segments at the dump) and, per launch, whether a segment was created since the
previous launch. Under kernel replay the application waits while ncu profiles each launch, so the
times give the order of launches and allocations, not their unprofiled durations.

The history covers its first to its last entry only (``diagnose.derive.history_coverage``): a launch outside that
span has ``in_history`` False, and whether a segment was created before it is unknown, so it is counted
in neither group of :func:`hit_after_new_segment`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

SEGMENT_GROWS = ("segment_alloc", "segment_map")
SEGMENT_SHRINKS = ("segment_free", "segment_unmap")
MARGIN_SHARE = 0.05  # segment events this share of the launches' span before the first / after the last are kept
LAUNCH_COLUMNS = ["launch_id", "kernel", "t_s", "l2_hit_pct", "dur_ns", "after_new_segment", "in_history"]
SEGMENT_COLUMNS = ["t_s", "action", "size_bytes", "reserved_bytes", "location"]


def allocator_timeline(kernels: pd.DataFrame, launch_starts: pd.DataFrame, snapshot) -> dict[str, pd.DataFrame]:
    """``{"launches": ..., "segments": ...}`` (LAUNCH_COLUMNS, SEGMENT_COLUMNS); empty dict when the run
    lacks launch times, allocator history, or any launch matching a time."""
    if not len(kernels) or not len(launch_starts) or snapshot is None or not snapshot.has_history:
        return {}
    launches = kernels[["launch_id", "kernel_short", "l2_hit_pct", "dur_ns"]].merge(
        launch_starts[["launch_id", "t_start_ns"]], on="launch_id", how="inner"
    )
    if not len(launches):
        return {}
    launches = launches.sort_values(["t_start_ns", "launch_id"], kind="stable").reset_index(drop=True)
    t0 = int(launches["t_start_ns"].iloc[0])
    span_ns = max(int(launches["t_start_ns"].iloc[-1]) - t0, 1)
    margin_ns = MARGIN_SHARE * span_ns
    segments = _segment_events(snapshot)
    t_ns = segments["t_us"].to_numpy(dtype=float) * 1000.0
    keep = (t_ns >= t0 - margin_ns) & (t_ns <= t0 + span_ns + margin_ns)
    shown = segments[keep]
    seg_out = pd.DataFrame(
        {
            "t_s": (shown["t_us"].to_numpy(dtype=float) * 1000.0 - t0) / 1e9,
            "action": shown["action"].to_numpy(),
            "size_bytes": shown["size_bytes"].to_numpy(),
            "reserved_bytes": shown["reserved_bytes"].to_numpy(),
            "location": shown["location"].to_numpy(),
        },
        columns=SEGMENT_COLUMNS,
    )
    launch_t = launches["t_start_ns"].to_numpy(dtype=float)
    grows = np.sort(t_ns[segments["action"].isin(SEGMENT_GROWS).to_numpy()])
    previous = np.concatenate([[-np.inf], launch_t[:-1]])
    recorded = snapshot.trace["t_us"].to_numpy(dtype=float) * 1000.0
    recorded = recorded[np.isfinite(recorded)]
    in_history = (
        (launch_t >= recorded.min()) & (launch_t <= recorded.max()) if len(recorded) else np.zeros(len(launch_t), bool)
    )
    new_segment = np.searchsorted(grows, launch_t, side="right") > np.searchsorted(grows, previous, side="right")
    new_segment &= in_history
    launch_out = pd.DataFrame(
        {
            "launch_id": launches["launch_id"].to_numpy(),
            "kernel": launches["kernel_short"].astype(object).to_numpy(),
            "t_s": (launch_t - t0) / 1e9,
            "l2_hit_pct": launches["l2_hit_pct"].to_numpy(dtype=float),
            "dur_ns": launches["dur_ns"].to_numpy(dtype=float),
            "after_new_segment": new_segment,
            "in_history": in_history,
        },
        columns=LAUNCH_COLUMNS,
    )
    return {"launches": launch_out, "segments": seg_out}


def _segment_events(snapshot) -> pd.DataFrame:
    """The history's segment events (all devices), oldest first, with the bytes reserved after each:
    the segments at the dump minus what every later event added."""
    trace = snapshot.trace
    events = trace[trace["action"].isin(SEGMENT_GROWS + SEGMENT_SHRINKS)].sort_values("seq", kind="stable")
    size = events["size_bytes"].to_numpy(dtype=float)
    change = np.where(events["action"].isin(SEGMENT_GROWS).to_numpy(), size, -size)
    at_dump = float(snapshot.segments["total_size_bytes"].sum()) if len(snapshot.segments) else 0.0
    after_each = at_dump - (change[::-1].cumsum()[::-1] - change)  # reserved right after event i
    return events.assign(reserved_bytes=after_each).reset_index(drop=True)


def hit_after_new_segment(launches: pd.DataFrame) -> dict[str, float]:
    """Duration-weighted L2 hit rate of the launches that follow a new segment, and of the other launches the
    history saw; launches outside the history are only counted (``launches_outside_history``)."""
    seen = launches["in_history"] if "in_history" in launches else pd.Series(True, index=launches.index)
    out = {"launches_outside_history": int((~seen).sum())}
    for label, rows in (
        ("after_new_segment", launches[launches["after_new_segment"] & seen]),
        ("other", launches[~launches["after_new_segment"] & seen]),
    ):
        ok = rows["l2_hit_pct"].notna() & (rows["dur_ns"] > 0)
        if ok.any():
            out[f"l2_hit_{label}_pct"] = float(np.average(rows.loc[ok, "l2_hit_pct"], weights=rows.loc[ok, "dur_ns"]))
        out[f"launches_{label}"] = int(len(rows))
    return out
