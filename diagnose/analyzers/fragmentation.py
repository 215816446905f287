"""Memory fragmentation: does fragmentation, not real demand, set the peak or cause an OOM?

From the allocator history (torch snapshot) the replay (:mod:`diagnose.derive.memory_replay`)
rebuilds reserved / allocated / requested bytes and the free-block layout; this module
keeps them per entry (``timeline``), reads the free-block set and the segments' occupancy at
bounded points (the fragmentation curve and the heatmap's cells, see ``Memory`` thresholds),
checks them against the snapshot and the per-step ``memory_stats``, and judges:

- ``fragmentation.at_peak``: reserved memory never allocated even at the peak, while the
  allocator grew segments although enough bytes were free (no free block was large enough);
- ``fragmentation.churn``: segments created and released every step (cudaMalloc/cudaFree
  synchronise the device);
- ``fragmentation.oom_from_fragmentation`` / ``fragmentation.oom_demand``: an OOM where
  reserved − allocated exceeded the failed request, or where it did not;
- ``fragmentation.alloc_retries``: cudaMalloc failed and the allocator flushed its cache;
- ``fragmentation.jax_unreported``: what JAX's ``memory_stats`` leaves out.

With only ``memory_stats`` (no history) the peak and churn findings come from the stats.
The device with the largest peak reserved is the one drawn and summarised.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.derive import capture_advice
from diagnose.derive.derived import Derived
from diagnose.derive.history_coverage import Coverage, history_coverage, step_intervals
from diagnose.derive.memory_replay import ReplayResult, agreement, external_fragmentation_pct, occupancy_grid, replay
from diagnose.findings import Evidence, Finding, Result, Severity, Subject, not_measured
from diagnose.formatting import agree, bytes_human, count_human, n_things, pct_human, share_human
from diagnose.ingest.profile_data import Profile
from diagnose.metrics import LOWER, NEUTRAL, Metric
from diagnose.thresholds import Thresholds
from parsers.run_records import SNAPSHOT

NAME = "fragmentation"
ORDER = 60
SECTION = "section-fragmentation"
TITLE = "Memory and fragmentation"  # its report section's heading
JUDGES = "allocator memory"  # what "Nothing crossed a threshold: judged ..." names
COST_BASIS = "step time"  # what its findings' cost_share is a share of, in the verdict's words
COST_BASIS_BY_ID: dict[str, str] = {}  # no finding's basis differs
THRESHOLDS = ("memory",)  # the Thresholds groups it reads (diagnose/thresholds.py)
SUMMARY_METRICS = (  # what _publish() and the stats paths write into Result.summary
    # the snapshot's state depends on when it was dumped: a moment, not an outcome
    Metric("snapshot_reserved_bytes", "Reserved at the snapshot", "bytes", NEUTRAL, 1),
    Metric("snapshot_allocated_bytes", "Allocated at the snapshot", "bytes", NEUTRAL, 1),
    Metric("peak_reserved_bytes", "Peak reserved memory", "bytes", LOWER, 1),
    Metric("peak_allocated_bytes", "Peak allocated memory", "bytes", LOWER, 1),
    Metric("history_coverage_pct", "Allocator history covering the run", "%", NEUTRAL, 0.01),
    Metric("peak_external_fragmentation_pct", "Peak external fragmentation", "%", LOWER, 0.01),
    # agreement of the replay with the snapshot and memory_stats: about gpudiag's reconstruction, not the run
    Metric("snapshot_agreement_pct", "Replay agreeing with the snapshot", "%", NEUTRAL, 0.01),
    Metric("memory_stats_agreement_pct", "Replay agreeing with torch's memory_stats()", "%", NEUTRAL, 0.01),
    Metric("jax_peak_bytes_in_use", "JAX peak bytes in use", "bytes", LOWER, 1),
    Metric("jax_pool_bytes", "JAX BFC pool (preallocated)", "bytes", NEUTRAL, 1),
    Metric("jax_peak_external_fragmentation_pct", "JAX peak external fragmentation", "%", LOWER, 0.01),
)
FINDING_IDS = (  # every id this analyzer can produce: `gpudiag check --ignore` validates against them
    "fragmentation.alloc_retries",
    "fragmentation.at_peak",
    "fragmentation.churn",
    "fragmentation.jax_unreported",
    "fragmentation.not_measured",
    "fragmentation.oom_demand",
    "fragmentation.oom_from_fragmentation",
)
SEGMENT_ACTIONS = ("segment_alloc", "segment_free", "segment_map", "segment_unmap")
GIB = 2**30


def analyze(profile: Profile, derived: Derived, th: Thresholds = Thresholds()) -> Result:
    result = Result(analyzer=NAME)
    if not profile.snapshots and not profile.memory_stats:
        result.findings.append(
            not_measured(
                NAME,
                "Allocator memory (fragmentation)",
                capture_advice.advice(
                    profile,
                    "Run under `gpudiag profile` (it records the allocator history and per-step memory_stats), or "
                    "pass a snapshot from torch.cuda.memory._dump_snapshot() after "
                    "torch.cuda.memory._record_memory_history().",
                    "Light mode records the allocator history and per-step memory_stats of torch on CUDA (JAX: its "
                    "memory_stats): this run used no GPU allocator it could read (a CPU-only run has none).",
                    SNAPSHOT.prefix,
                ),
                section=SECTION,
            )
        )
        return result
    views = []
    for rank, snapshot in sorted(profile.snapshots.items()):
        for warning in snapshot.metadata.get("warnings", []):
            result.meta.setdefault("warnings", []).append(f"rank {rank}: {warning}")
        for device in snapshot.devices:
            views.append(_replay_view(profile, rank, device, snapshot, th))
    views = [v for v in views if v is not None]
    if views:
        primary = max(views, key=lambda v: v["peak_reserved_bytes"])
        _publish(result, primary, views, th)
        for view in views:
            result.findings.extend(_findings_from_replay(view, th))
    stats_ranks = sorted(r for r in profile.memory_stats if r not in {v["rank"] for v in views})
    for rank in sorted(profile.memory_stats):
        stats = profile.memory_stats[rank]
        if len(stats) and (stats["framework"] == "jax").any():
            _jax(result, rank, stats[stats["framework"] == "jax"], th)
    for rank in stats_ranks:
        stats = profile.memory_stats[rank]
        torch_stats = stats[stats["framework"] == "torch"]
        if len(torch_stats):
            _torch_stats_only(result, rank, torch_stats, th)
    if not views and not any(
        len(profile.memory_stats[r]) and (profile.memory_stats[r]["framework"] == "jax").any()
        for r in profile.memory_stats
    ):
        result.findings.append(
            not_measured(
                NAME,
                "The allocator history (fragmentation heatmap)",
                capture_advice.advice(
                    profile,
                    "Only per-step memory_stats were found. Record the history with "
                    "torch.cuda.memory._record_memory_history() and dump a snapshot (gpudiag profile does both) to "
                    "see the heatmap and which lines fragment memory.",
                    "Only per-step memory_stats were found: this run wrote no allocator snapshot (light mode dumps one "
                    "at --snapshot-at, the trace window's end or the exit, for torch on CUDA). Run it in light mode "
                    "with --snapshot-at exit to see the heatmap and which lines fragment memory.",
                    SNAPSHOT.prefix,
                ),
                section=SECTION,
            )
        )
    if any(v["snapshot"].metadata.get("warnings") for v in views) or not views and profile.snapshots:
        empty = [r for r, s in profile.snapshots.items() if not s.has_history]
        if empty:
            result.findings.append(
                not_measured(
                    NAME,
                    f"The allocator history of {'rank' if len(empty) == 1 else 'ranks'} {', '.join(map(str, empty))}",
                    "The snapshot holds no history entries: call torch.cuda.memory._record_memory_history(max_entries=100000) "
                    "before the first CUDA allocation, and dump the snapshot before stopping it.",
                    section=SECTION,
                )
            )
    return _dedupe(result)


# --- the replay, binned ------------------------------------------------------------------------------------

HEATMAP_MAX_CELLS = 4_992  # the report's 5,000-mark chart budget, less the not-recorded band's shape and labels
NICE_WIDTHS = (1.0, 2.0, 2.5, 5.0)  # bucket widths: these times a power of ten, so a bin reads "10 ms", not "9.7 ms"


def _replay_view(profile: Profile, rank: int, device: int, snapshot, th: Thresholds) -> dict | None:
    trace = snapshot.trace_for(device)
    if not len(trace):
        if not len(snapshot.segments_for(device)):
            return None
        return _snapshot_only_view(rank, device, snapshot)
    t_us = trace.sort_values("seq", kind="stable")["t_us"].to_numpy(dtype=float)
    times_known = bool(np.isfinite(t_us).all())
    mem = th.memory
    steps = step_intervals(profile.step_events.get(rank), profile.memory_stats.get(rank)) if times_known else None
    # where the replay reads the free-block set (the fragmentation curve: each read walks every free block, so
    # at most max_timeline_bins of them): the ends of runs of equal numbers of entries (a history is bursts of
    # steps between idle stretches: equal time buckets would leave the bursts a handful of points), the runs the
    # section's timeline chart draws; the heatmap's cells: steps, else equal time buckets
    _, line_bin, _ = _entry_bins(len(t_us), mem.max_timeline_bins)
    if times_known:
        heat_cols = _heatmap_columns(snapshot, device, trace, mem)
        heat = _step_bins(t_us, steps, heat_cols) if len(steps) else None
        if heat is None:
            nbins, entry_bin, width = _time_bins(t_us, heat_cols)
            heat = {"bins": nbins, "entry_bin": entry_bin, "axis": "time", "width_us": width, "steps_per_column": None}
    else:
        nbins, entry_bin, width = _entry_bins(len(t_us), _heatmap_columns(snapshot, device, trace, mem))
        heat = {"bins": nbins, "entry_bin": entry_bin, "axis": "entry", "width_us": None, "steps_per_column": None}
    sample_at = np.unique(np.r_[_bin_ends(line_bin), _bin_ends(heat["entry_bin"])])
    replayed = replay(snapshot, device, sample_at=sample_at)
    coverage = None
    if times_known:
        starts_empty = replayed.meta["pre_existing_segments"] == 0 and replayed.meta["pre_existing_blocks"] == 0
        stats = profile.memory_stats.get(rank)
        stats_us = stats["t_ns"].dropna().to_numpy(dtype=float) / 1e3 if stats is not None and len(stats) else ()
        coverage = history_coverage(t_us, steps, profile.manifest, starts_empty, other_times_us=(stats_us,))
    # seconds since the run began when the run's span is known, else since the first entry; entries when no times
    origin = coverage.run_start_us if coverage is not None and coverage.run_span_known else t_us[0]
    x = t_us if times_known else np.arange(len(t_us), dtype=float)
    t0 = origin if times_known else 0.0
    scale = 1e6 if times_known else 1.0
    view = {
        "rank": rank,
        "device": device,
        "snapshot": snapshot,
        "replay": replayed,
        "coverage": coverage,
        "times_known": times_known,
        "origin_us": origin if times_known else None,
    }
    tl = replayed.timeline
    view["peak_reserved_bytes"] = float(tl["reserved_bytes"].max())
    view["peak_allocated_bytes"] = float(tl["allocated_bytes"].max())
    view["timeline"] = _entry_timeline(tl, x, t0, scale)
    samples = replayed.samples.copy()
    samples["t_s"] = ((samples["t_us"] if times_known else samples["entry"]) - t0) / scale
    view["fragmentation_curve"] = samples
    grid = occupancy_grid(replayed, heat["entry_bin"], heat["bins"], mem.max_heatmap_segment_rows)
    bins_table = _heat_bins_table(heat, x, t0, scale)
    view["heatmap"], view["heatmap_rows"], view["heatmap_bins"] = grid["cells"], grid["rows"], bins_table
    view["heatmap_axis"] = heat["axis"]
    view["heatmap_bin"] = heat["width_us"] / scale if heat["width_us"] is not None else None
    view["heatmap_steps_per_column"] = heat["steps_per_column"]
    view["agreement"] = agreement(replayed, snapshot)
    view["stats_agreement"] = _stats_agreement(profile, rank, tl, x if times_known else None)
    view["per_step"] = _per_step(tl, x, coverage) if coverage is not None else pd.DataFrame()
    if coverage is not None:
        view["coverage_pct"] = coverage.coverage_pct
        view["coverage_spans"] = coverage.spans(origin)
        view["coverage_meta"] = coverage.as_meta(origin)
    else:  # entry order only: the history's span in the run is unknown
        starts_empty = replayed.meta["pre_existing_segments"] == 0 and replayed.meta["pre_existing_blocks"] == 0
        view["coverage_pct"] = 100.0 if starts_empty else float("nan")
    view["largest_allocations"] = _largest_allocations(replayed, th)
    view["locations"] = _locations(replayed, th)
    return view


def _snapshot_only_view(rank: int, device: int, snapshot) -> dict:
    seg = snapshot.segments_for(device)
    return {
        "rank": rank,
        "device": device,
        "snapshot": snapshot,
        "replay": None,
        "peak_reserved_bytes": float(seg["total_size_bytes"].sum()),
        "peak_allocated_bytes": float(seg["allocated_bytes"].sum()),
        "coverage_pct": 0.0,
    }


def _heatmap_columns(snapshot, device: int, trace: pd.DataFrame, mem) -> int:
    """Columns that keep the heatmap within ``HEATMAP_MAX_CELLS`` (and ``max_heatmap_time_bins``). Its rows are
    segments: at most those at the dump plus those the history released (every segment that ever existed is
    one or the other), capped at ``max_heatmap_segment_rows``."""
    released = int(trace["action"].isin(("segment_free", "segment_unmap")).sum())
    rows = max(1, min(len(snapshot.segments_for(device)) + released, mem.max_heatmap_segment_rows))
    return max(1, min(mem.max_heatmap_time_bins, HEATMAP_MAX_CELLS // rows))


def nice_width(span: float, max_bins: int) -> float:
    """The smallest 1, 2, 2.5 or 5 × 10^k that cuts ``span`` into at most ``max_bins`` buckets."""
    if not span > 0 or max_bins < 1:
        return 1.0
    raw = span / max_bins
    exp = int(np.floor(np.log10(raw)))
    for mult in (*NICE_WIDTHS, 10.0):
        width = mult * 10.0**exp
        if width >= raw * (1 - 1e-12) and np.ceil(span / width - 1e-9) <= max_bins:
            return width
    return 10.0 ** (exp + 1)


def _time_bins(x: np.ndarray, max_bins: int) -> tuple[int, np.ndarray, float | None]:
    """Buckets of one nice width from the first entry (µs): (buckets, each entry's bucket, width); one bucket
    per entry (width None) when there are no more entries than buckets."""
    if len(x) <= max_bins:
        return len(x), np.arange(len(x)), None
    span = float(x[-1] - x[0])
    if span <= 0:
        return _entry_bins(len(x), max_bins)
    width = nice_width(span, max_bins)
    b = np.minimum(np.floor((x - x[0]) / width).astype(np.int64), max_bins - 1)
    return int(b[-1]) + 1, np.maximum.accumulate(b), width


def _entry_bins(n: int, max_bins: int) -> tuple[int, np.ndarray, None]:
    """Runs of the same number of entries (the last one shorter), at most ``max_bins`` of them."""
    if n <= max_bins:
        return n, np.arange(n), None
    per = -(-n // max_bins)
    return -(-n // per), np.arange(n) // per, None


def _step_bins(x: np.ndarray, steps: pd.DataFrame, max_cols: int) -> dict | None:
    """Columns of the steps the history covers, from the step holding its first entry to the one holding its
    last (never later: the steps after it were not recorded); consecutive steps share a column when there are
    more than ``max_cols``. Entries before the first step (setup) or after the last one get a column of their
    own. None when the history overlaps no step."""
    starts, ends = steps["start_us"].to_numpy(dtype=float), steps["end_us"].to_numpy(dtype=float)
    numbers = steps["step"].to_numpy()
    pos = np.searchsorted(starts, x, side="right") - 1
    before = pos < 0
    after = (pos == len(starts) - 1) & (x >= ends[-1])
    overlaps = np.flatnonzero((ends > x[0]) & (starts <= x[-1]))  # the covered steps, entries in them or not
    if not len(overlaps):
        return None
    first, last = int(overlaps[0]), int(overlaps[-1])
    extra_before, extra_after = int(before.any()), int(after.any())
    room = max(1, max_cols - extra_before - extra_after)
    size = int(np.ceil((last - first + 1) / room))
    groups = (last - first) // size + 1
    entry_bin = np.where(
        before, 0, np.where(after, extra_before + groups, extra_before + (np.clip(pos, first, last) - first) // size)
    )
    labels, first_steps, last_steps = [], [], []
    if extra_before:
        labels.append(f"before step {numbers[0]}")
        first_steps.append(None)
        last_steps.append(None)
    for g in range(groups):
        lo, hi = first + g * size, min(first + (g + 1) * size - 1, last)
        labels.append(f"step {numbers[lo]}" if lo == hi else f"steps {numbers[lo]}–{numbers[hi]}")
        first_steps.append(int(numbers[lo]))
        last_steps.append(int(numbers[hi]))
    if extra_after:
        labels.append(f"after step {numbers[-1]}")
        first_steps.append(None)
        last_steps.append(None)
    return {
        "bins": len(labels),
        "entry_bin": np.maximum.accumulate(entry_bin.astype(np.int64)),
        "axis": "step",
        "width_us": None,
        "steps_per_column": size,
        "labels": labels,
        "first_step": first_steps,
        "last_step": last_steps,
    }


def _bin_ends(entry_bin: np.ndarray) -> np.ndarray:
    return np.flatnonzero(np.r_[entry_bin[1:] != entry_bin[:-1], True])


def _entry_timeline(tl: pd.DataFrame, x: np.ndarray, t0: float, scale: float) -> pd.DataFrame:
    """The allocator's bytes after each history entry (one row per entry, in order), at its time in seconds
    from the origin (its entry number when entries have no times). The section draws runs of entries."""
    out = {"t_s": (x - t0) / scale}
    for col in ("reserved_bytes", "allocated_bytes", "active_bytes", "requested_bytes"):
        out[col] = tl[col].to_numpy()
    return pd.DataFrame(out)


def _heat_bins_table(heat: dict, x, t0, scale) -> pd.DataFrame:
    """One row per heatmap column: its label, the steps it holds (step axis) and its first and last entry's time."""
    entry_bin, nbins = heat["entry_bin"], heat["bins"]
    last = np.full(nbins, -1, dtype=np.int64)
    idx = np.arange(len(entry_bin))
    np.maximum.at(last, entry_bin, idx)
    rev = np.full(nbins, len(entry_bin), dtype=np.int64)
    np.minimum.at(rev, entry_bin, idx)
    has = last >= 0
    t_start = np.where(has, (x[np.clip(rev, 0, len(x) - 1)] - t0) / scale, np.nan)
    t_end = np.where(has, (x[np.clip(last, 0, None)] - t0) / scale, np.nan)
    labels = heat.get("labels")
    if labels is None:
        labels = [f"{a:.3f}–{b:.3f} s" if np.isfinite(a) else "" for a, b in zip(t_start, t_end)]
        if heat["axis"] == "time" and heat["width_us"] is not None:  # a bucket's own edges, also when empty
            lo = (x[0] - t0) / scale + np.arange(nbins) * heat["width_us"] / scale
            labels = [f"{a:.3f}–{a + heat['width_us'] / scale:.3f} s" for a in lo]
        elif heat["axis"] == "entry":
            labels = [f"entries {a:,}–{b:,}" if h else "" for a, b, h in zip(rev, last, has)]
    table = pd.DataFrame(
        {
            "bin": np.arange(nbins),
            "label": labels[:nbins],
            "t_start_s": t_start,
            "t_end_s": t_end,
            "entries": np.bincount(entry_bin, minlength=nbins),
        }
    )
    if heat["axis"] == "step":
        table["first_step"] = pd.array(heat["first_step"], dtype="Int64")
        table["last_step"] = pd.array(heat["last_step"], dtype="Int64")
    return table


def _state_at(tl: pd.DataFrame, x: np.ndarray, at_us: np.ndarray, col: str) -> np.ndarray:
    pos = np.searchsorted(x, at_us, side="right") - 1
    vals = tl[col].to_numpy().astype(float)
    return np.where(pos >= 0, vals[np.clip(pos, 0, None)], np.nan)


def _stats_agreement(profile: Profile, rank: int, tl: pd.DataFrame, x: np.ndarray | None) -> pd.DataFrame:
    """Replayed vs recorded bytes at each memory_stats record; ``in_history``: the record lies between the history's
    first and last entry (after the last one the history may have been off, so nothing is compared there)."""
    stats = profile.memory_stats.get(rank)
    if stats is None or not len(stats) or x is None:
        return pd.DataFrame()
    s = stats[(stats["framework"] == "torch") & stats["t_ns"].notna()].sort_values("t_ns")
    if not len(s):
        return pd.DataFrame()
    at = s["t_ns"].to_numpy() / 1e3
    inside = (at >= x[0]) & (at <= x[-1])
    out = pd.DataFrame({"step": s["step"].to_numpy(), "t_ns": s["t_ns"].to_numpy(), "in_history": inside})
    for col in ("allocated_bytes", "reserved_bytes", "requested_bytes"):
        out[f"recorded_{col}"] = s[col].to_numpy()
        out[f"replayed_{col}"] = np.where(inside, _state_at(tl, x, at, col), np.nan)
    out["allocated_diff_bytes"] = out["replayed_allocated_bytes"] - out["recorded_allocated_bytes"]
    out["reserved_diff_bytes"] = out["replayed_reserved_bytes"] - out["recorded_reserved_bytes"]
    out["agrees"] = (out["allocated_diff_bytes"] == 0) & (out["reserved_diff_bytes"] == 0)
    return out


def _per_step(tl: pd.DataFrame, x: np.ndarray, coverage: Coverage) -> pd.DataFrame:
    """Allocator work per step the history covers (no row for a step it never saw). A step it saw only in part
    (the first or last) has ``whole_step_recorded`` False and no end-of-step bytes: they were not recorded.
    Entries before the first timed step are a row with step -1, after the last one step -2."""
    steps = coverage.steps
    if not len(steps):
        return pd.DataFrame()
    starts, ends = steps["start_us"].to_numpy(dtype=float), steps["end_us"].to_numpy(dtype=float)
    pos = np.searchsorted(starts, x, side="right") - 1
    after = (pos == len(starts) - 1) & (x >= ends[-1])
    key = np.where(pos < 0, -1, np.where(after, len(starts), pos))  # -1: before, len: after, else the step's row
    covered = np.flatnonzero(steps["covered"].to_numpy())
    order = (
        [k for k in (-1,) if (key == -1).any()]
        + covered.tolist()
        + [k for k in (len(starts),) if (key == len(starts)).any()]
    )
    labels = np.asarray([-1 if k == -1 else -2 if k == len(starts) else int(steps["step"].iloc[k]) for k in order])
    frame = pd.DataFrame({"key": key, "action": tl["action"].to_numpy(), "block_bytes": tl["block_bytes"].to_numpy()})
    counts = pd.crosstab(frame["key"], frame["action"]).reindex(order, fill_value=0)
    out = pd.DataFrame({"step": labels})
    for a in ("alloc", "segment_alloc", "segment_free", "segment_map", "segment_unmap", "oom"):
        out[a if a != "alloc" else "allocs"] = counts[a].to_numpy() if a in counts else 0
    grown = frame[frame["action"].isin(["segment_alloc", "segment_map"])].groupby("key")["block_bytes"].sum()
    released = frame[frame["action"].isin(["segment_free", "segment_unmap"])].groupby("key")["block_bytes"].sum()
    out["segment_grown_bytes"] = grown.reindex(order, fill_value=0).to_numpy()
    out["segment_released_bytes"] = released.reindex(order, fill_value=0).to_numpy()
    safe = np.clip(np.asarray(order), 0, len(starts) - 1)
    whole = (np.asarray(order) >= 0) & (np.asarray(order) < len(starts))
    whole &= (starts[safe] >= x[0]) & (ends[safe] <= x[-1])
    out["whole_step_recorded"] = whole
    last = np.searchsorted(x, ends[safe], side="left") - 1  # the last entry before the step ended
    for col in ("reserved_bytes", "allocated_bytes"):
        vals = tl[col].to_numpy().astype(float)
        out[col.replace("_bytes", "_end_bytes")] = np.where(whole & (last >= 0), vals[np.clip(last, 0, None)], np.nan)
    peak = pd.Series(tl["allocated_bytes"].to_numpy()).groupby(key).max()
    out["allocated_peak_bytes"] = peak.reindex(order).to_numpy()
    out["segment_ops"] = out["segment_alloc"] + out["segment_free"] + out["segment_map"] + out["segment_unmap"]
    return out


def _largest_allocations(r: ReplayResult, th: Thresholds) -> pd.DataFrame:
    a = r.allocations
    if not len(a):
        return pd.DataFrame()
    top = a.sort_values("block_bytes", ascending=False, kind="stable").head(th.memory.top_allocations)
    return pd.DataFrame(
        {
            "address": [f"{v:#x}" for v in top["addr"]],
            "block_bytes": top["block_bytes"].to_numpy(),
            "requested_bytes": top["requested_bytes"].to_numpy(),
            "alloc_entry": top["alloc_entry"].to_numpy(),
            "freed_entry": top["free_requested_entry"].to_numpy(),
            "location": top["location"].fillna("(no Python frame)").to_numpy(),
        }
    )


def _locations(r: ReplayResult, th: Thresholds) -> pd.DataFrame:
    a = r.allocations
    if not len(a):
        return pd.DataFrame()
    g = a.assign(location=a["location"].fillna("(no Python frame)")).groupby("location")
    out = g.agg(
        allocations=("block_bytes", "size"),
        largest_block_bytes=("block_bytes", "max"),
        total_block_bytes=("block_bytes", "sum"),
        distinct_sizes=("requested_bytes", "nunique"),
    ).reset_index()
    return (
        out.sort_values(["largest_block_bytes", "total_block_bytes"], ascending=False)
        .head(th.memory.top_allocations)
        .reset_index(drop=True)
    )


# --- findings from the replay -------------------------------------------------------------------------------


def _fragmented_growth(view: dict) -> pd.DataFrame:
    g = view["replay"].growth
    if not len(g):
        return g
    need = g["next_block_bytes"]
    frag = (g["free_pool_before_bytes"] >= need) & (g["largest_free_pool_before_bytes"] < need) & (need > 0)
    return g[frag]


def _findings_from_replay(view: dict, th: Thresholds) -> list[Finding]:
    if view.get("replay") is None:
        return []
    out = []
    for finding in (_at_peak(view, th), _churn(view, th)):
        if finding is not None:
            out.append(finding)
    out.extend(_ooms(view, th))
    return out


def _where(view: dict) -> str:
    return f"rank {view['rank']} GPU {view['device']}"


def _at_peak(view: dict, th: Thresholds) -> Finding | None:
    mem = th.memory
    peak_res, peak_alloc = view["peak_reserved_bytes"], view["peak_allocated_bytes"]
    if peak_res < mem.min_reserved_bytes or peak_res <= 0:
        return None
    share = (peak_res - peak_alloc) / peak_res
    frag = _fragmented_growth(view)
    if share < mem.frag_warning_share or not len(frag):
        return None
    severity = Severity.of(share, critical=mem.frag_critical_share, otherwise=Severity.WARNING)
    curve = view["fragmentation_curve"]
    peak_ext = (
        float(np.nanmax(curve["external_fragmentation_pct"]))
        if curve["external_fragmentation_pct"].notna().any()
        else float("nan")
    )
    worst = frag.sort_values("free_pool_before_bytes", ascending=False).iloc[0]
    subjects = [
        Subject(
            "segment",
            f"{int(row.segment_address):#x}",
            severity=severity,
            figures={
                "segment_bytes": int(row.segment_bytes),
                "pool": row.pool,
                "free_before_bytes": int(row.free_pool_before_bytes),
                "largest_free_before_bytes": int(row.largest_free_pool_before_bytes),
                "request_bytes": int(row.next_request_bytes),
            },
        )
        for row in _segment_addresses(view, frag)
        .sort_values("segment_bytes", ascending=False)
        .head(mem.top_allocations)
        .itertuples()
    ]
    subjects += _location_subjects(view, th)
    expandable = view["snapshot"].metadata.get("expandable_segments", False)
    fix = (
        "Bucket or pad variable shapes (sequence lengths, batch sizes) to a few fixed sizes so freed blocks fit the "
        "next step's requests"
    )
    if not expandable:
        fix = (
            "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (segments then grow in place instead of new "
            "cudaMalloc segments, so freed space is reused). " + fix
        )
    fix += (
        "; call optimizer.zero_grad(set_to_none=True) so gradients are freed between steps; if large blocks split "
        "into unusable remainders, try max_split_size_mb; call torch.cuda.empty_cache() only between phases "
        "(e.g. after evaluation), never inside the step."
    )
    return Finding(
        id="fragmentation.at_peak",
        analyzer=NAME,
        severity=severity,
        title=(
            f"{_where(view)}: {share_human(share, 0)} of the {bytes_human(peak_res)} reserved was never allocated "
            f"even at the peak ({bytes_human(peak_alloc)}); {n_things(len(frag), 'segment')} "
            f"({bytes_human(frag['segment_bytes'].sum())}) {agree(len(frag), 'was', 'were')} added while enough "
            "memory was free but fragmented"
        ),
        subjects=tuple(subjects),
        evidence=(
            Evidence("reserved_unused_at_peak_pct", 100 * share, "%", 100 * mem.frag_warning_share),
            Evidence("peak_reserved_bytes", peak_res, "bytes"),
            Evidence("peak_allocated_bytes", peak_alloc, "bytes"),
            Evidence("fragmented_growth_bytes", float(frag["segment_bytes"].sum()), "bytes"),
            Evidence("fragmented_growth_segments", float(len(frag)), "segments"),  # the title's count
            Evidence("free_before_worst_growth_bytes", float(worst.free_pool_before_bytes), "bytes"),
            Evidence(
                "largest_free_block_before_worst_growth_bytes", float(worst.largest_free_pool_before_bytes), "bytes"
            ),
            Evidence("request_at_worst_growth_bytes", float(worst.next_request_bytes), "bytes"),
            Evidence("peak_external_fragmentation_pct", peak_ext, "%", mem.ext_frag_warning_pct),
        ),
        cost_share=None,
        recommendation=fix,
        section=SECTION,
    )


def _segment_addresses(view: dict, growth: pd.DataFrame) -> pd.DataFrame:
    """The growth rows with the address of the segment each one created (it lives in the trace)."""
    trace = view["snapshot"].trace_for(view["device"]).sort_values("seq", kind="stable").reset_index(drop=True)
    return growth.assign(segment_address=trace["addr"].to_numpy()[growth["entry"].to_numpy()])


def _location_subjects(view: dict, th: Thresholds) -> list[Subject]:
    locs = view["locations"]
    if not len(locs):
        return []
    return [
        Subject(
            "location",
            row.location,
            figures={
                "largest_block_bytes": int(row.largest_block_bytes),
                "allocations": int(row.allocations),
                "distinct_sizes": int(row.distinct_sizes),
            },
        )
        for row in locs.head(5).itertuples()
        if row.location != "(no Python frame)"
    ]


def _churn(view: dict, th: Thresholds) -> Finding | None:
    per_step = view["per_step"]
    mem = th.memory
    if not len(per_step):
        return None
    steady = per_step[per_step["step"] >= 0].iloc[mem.churn_warmup_steps :]
    if len(steady) < 2:
        return None
    ops = steady["segment_ops"]
    both = ((steady["segment_alloc"] + steady["segment_map"]) > 0) & (
        (steady["segment_free"] + steady["segment_unmap"]) > 0
    )
    median_ops = float(ops.median())
    if median_ops < mem.churn_segments_per_step or both.mean() < 0.5:
        return None
    worst = steady.sort_values("segment_ops", ascending=False).head(mem.top_allocations)
    subjects = [
        Subject(
            "step",
            f"step {int(r.step)}",
            figures={
                "segment_ops": int(r.segment_ops),
                "grown_bytes": int(r.segment_grown_bytes),
                "released_bytes": int(r.segment_released_bytes),
            },
        )
        for r in worst.itertuples()
    ]
    return Finding(
        id="fragmentation.churn",
        analyzer=NAME,
        severity=Severity.WARNING,
        title=(
            f"{_where(view)}: the allocator creates and releases segments every step (median {count_human(median_ops)} "
            f"cudaMalloc/cudaFree per step, both in {share_human(both.mean(), 0)} of steady steps)"
        ),
        subjects=tuple(subjects + _location_subjects(view, th)),
        evidence=(
            Evidence("segment_ops_per_step_median", median_ops, "count", mem.churn_segments_per_step),
            Evidence("steps_with_alloc_and_free_pct", 100 * float(both.mean()), "%", 50.0),
        ),
        recommendation=(
            "Find what releases cached memory inside the loop: a torch.cuda.empty_cache() call per step "
            "(move it out of the step), or memory pressure that makes the allocator free its cache; use "
            "fixed or bucketed shapes and PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True so the cache "
            "can be reused instead of re-created."
        ),
        section=SECTION,
    )


def _ooms(view: dict, th: Thresholds) -> list[Finding]:
    ooms = view["replay"].ooms
    out = []
    if not len(ooms):
        return out
    frag = ooms[ooms["cached_free_bytes"] > ooms["request_bytes"]]
    demand = ooms[ooms["cached_free_bytes"] <= ooms["request_bytes"]]
    if len(frag):
        worst = frag.sort_values("request_bytes", ascending=False).iloc[0]
        subjects = [
            Subject(
                "location",
                str(loc),
                severity=Severity.CRITICAL,
                figures={"request_bytes": int(grp["request_bytes"].max()), "ooms": int(len(grp))},
            )
            for loc, grp in frag.assign(location=frag["location"].fillna("(no Python frame)")).groupby("location")
        ]
        out.append(
            Finding(
                id="fragmentation.oom_from_fragmentation",
                analyzer=NAME,
                severity=Severity.CRITICAL,
                title=(
                    f"{_where(view)}: out of memory for {bytes_human(worst.request_bytes)} although "
                    f"{bytes_human(worst.cached_free_bytes)} was reserved but unallocated; the largest free block "
                    f"was {bytes_human(worst.largest_free_pool_bytes)} (fragmentation, not demand)"
                ),
                subjects=tuple(subjects),
                evidence=(
                    Evidence("oom_request_bytes", float(worst.request_bytes), "bytes"),
                    Evidence(
                        "reserved_unallocated_at_oom_bytes",
                        float(worst.cached_free_bytes),
                        "bytes",
                        float(worst.request_bytes),
                    ),
                    Evidence("largest_free_block_at_oom_bytes", float(worst.largest_free_pool_bytes), "bytes"),
                    Evidence("reserved_at_oom_bytes", float(worst.reserved_bytes), "bytes"),
                    Evidence("allocated_at_oom_bytes", float(worst.allocated_bytes), "bytes"),
                    Evidence("driver_free_at_oom_bytes", float(worst.device_free_bytes), "bytes"),
                ),
                recommendation=(
                    "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True so freed pages can be remapped into "
                    "one large block; free long-lived small tensors that pin segments (or allocate them "
                    "before the large transient ones); keep shapes fixed or bucketed; as a last resort "
                    "max_split_size_mb stops large blocks being split into unusable pieces."
                ),
                section=SECTION,
            )
        )
    if len(demand):
        worst = demand.iloc[0]
        out.append(
            Finding(
                id="fragmentation.oom_demand",
                analyzer=NAME,
                severity=Severity.WARNING,
                title=(
                    f"{_where(view)}: out of memory for {bytes_human(worst.request_bytes)} with only "
                    f"{bytes_human(worst.cached_free_bytes)} reserved but unallocated: the demand itself "
                    f"({bytes_human(worst.allocated_bytes)} allocated) reached the limit"
                ),
                subjects=tuple(
                    Subject("location", str(loc), figures={"request_bytes": int(g["request_bytes"].max())})
                    for loc, g in demand.assign(location=demand["location"].fillna("(no Python frame)")).groupby(
                        "location"
                    )
                ),
                evidence=(
                    Evidence("oom_request_bytes", float(worst.request_bytes), "bytes"),
                    Evidence(
                        "reserved_unallocated_at_oom_bytes",
                        float(worst.cached_free_bytes),
                        "bytes",
                        float(worst.request_bytes),
                    ),
                    Evidence("allocated_at_oom_bytes", float(worst.allocated_bytes), "bytes"),
                    Evidence("driver_free_at_oom_bytes", float(worst.device_free_bytes), "bytes"),
                ),
                recommendation=(
                    "Reduce what is live at once: a smaller batch, activation checkpointing, mixed precision, "
                    "or freeing references (e.g. losses kept with their graph) sooner. If the driver reported "
                    "plenty free, a cap (set_per_process_memory_fraction) or another process set the limit."
                ),
                section=SECTION,
            )
        )
    return out


def _publish(result: Result, view: dict, views: list[dict], th: Thresholds) -> None:
    r: ReplayResult | None = view.get("replay")
    snap = view["snapshot"]
    seg = snap.segments_for(view["device"])
    result.summary.update(
        {
            "snapshot_reserved_bytes": float(seg["total_size_bytes"].sum()),
            "snapshot_allocated_bytes": float(seg["allocated_bytes"].sum()),
            "peak_reserved_bytes": view["peak_reserved_bytes"],
            "peak_allocated_bytes": view["peak_allocated_bytes"],
            "history_coverage_pct": view["coverage_pct"],
        }
    )
    result.meta.update(
        {
            "rank": view["rank"],
            "device": view["device"],
            "devices": [(v["rank"], v["device"]) for v in views],
            "expandable_segments": bool(snap.metadata.get("expandable_segments")),
            "snapshot_format": snap.metadata.get("format"),
        }
    )
    if r is None:
        result.meta["history"] = False
        return
    curve = view["fragmentation_curve"]
    ext = curve["external_fragmentation_pct"]
    result.summary["peak_external_fragmentation_pct"] = float(np.nanmax(ext)) if ext.notna().any() else float("nan")
    agree = view["agreement"]
    result.summary["snapshot_agreement_pct"] = float(100 * agree["agrees"].mean()) if len(agree) else float("nan")
    stats = view["stats_agreement"]
    if len(stats) and stats["in_history"].any():
        result.summary["memory_stats_agreement_pct"] = float(100 * stats.loc[stats["in_history"], "agrees"].mean())
    result.tables.update(
        {
            "timeline": view["timeline"],
            "fragmentation_curve": curve,
            "heatmap": view["heatmap"],
            "heatmap_rows": view["heatmap_rows"],
            "heatmap_bins": view["heatmap_bins"],
            "per_step": view["per_step"],
            "segment_growth": r.growth,
            "ooms": r.ooms,
            "snapshot_agreement": agree,
            "memory_stats_agreement": stats,
            "largest_allocations": view["largest_allocations"],
            "locations": view["locations"],
        }
    )
    result.meta.update(
        {
            "history": True,
            "entries": r.meta["entries"],
            "replay_mismatches": r.meta["mismatches"],
            "estimated_blocks": r.meta["estimated_blocks"],
            "heatmap_axis": view["heatmap_axis"],
            "times_known": view["times_known"],
            "history_coverage_pct": view["coverage_pct"],
            "max_heatmap_cells": HEATMAP_MAX_CELLS,
            "max_timeline_bins": th.memory.max_timeline_bins,  # the fragmentation curve's reads: the timeline's runs
            "heatmap_bin_s": view["heatmap_bin"],
            "heatmap_steps_per_column": view["heatmap_steps_per_column"],
            "time_origin": "run start" if (view.get("coverage_meta") or {}).get("run_span_known") else "first entry",
            "time_origin_us": view.get("origin_us"),  # what the tables' timestamps are shown relative to
        }
    )
    if view.get("coverage_meta") is not None:
        result.meta["coverage"] = view["coverage_meta"]
        result.tables["history_coverage"] = view["coverage_spans"]


# --- memory_stats only (torch) and JAX -----------------------------------------------------------------------


def _torch_stats_only(result: Result, rank: int, stats: pd.DataFrame, th: Thresholds) -> None:
    mem = th.memory
    s = stats.sort_values("step")
    peak_res = float(np.nanmax(s["reserved_peak_bytes"].fillna(s["reserved_bytes"])))
    peak_alloc = float(np.nanmax(s["allocated_peak_bytes"].fillna(s["allocated_bytes"])))
    result.summary.setdefault("peak_reserved_bytes", peak_res)
    result.summary.setdefault("peak_allocated_bytes", peak_alloc)
    table = s[
        [
            "step",
            "allocated_bytes",
            "reserved_bytes",
            "allocated_peak_bytes",
            "reserved_peak_bytes",
            "inactive_split_bytes",
            "num_device_alloc",
            "num_device_free",
            "num_alloc_retries",
            "num_ooms",
        ]
    ].copy()
    table["segment_ops"] = (table["num_device_alloc"].diff() + table["num_device_free"].diff()).fillna(0)
    result.tables.setdefault("stats_per_step", table.reset_index(drop=True))
    if peak_res >= mem.min_reserved_bytes and peak_res > 0:
        share = (peak_res - peak_alloc) / peak_res
        if share >= mem.frag_warning_share:
            sev = Severity.of(share, critical=mem.frag_critical_share, otherwise=Severity.WARNING)
            result.findings.append(
                Finding(
                    id="fragmentation.at_peak",
                    analyzer=NAME,
                    severity=sev,
                    title=f"rank {rank}: {share_human(share, 0)} of the {bytes_human(peak_res)} reserved was never "
                    "allocated even at the peak",
                    subjects=(Subject("rank", f"rank {rank}", severity=sev),),
                    evidence=(
                        Evidence("reserved_unused_at_peak_pct", 100 * share, "%", 100 * mem.frag_warning_share),
                        Evidence("peak_reserved_bytes", peak_res, "bytes"),
                        Evidence("peak_allocated_bytes", peak_alloc, "bytes"),
                    ),
                    recommendation="Record the allocator history to see which lines fragment memory; meanwhile try "
                    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True and fixed or bucketed shapes.",
                    section=SECTION,
                )
            )
    steady = table.iloc[mem.churn_warmup_steps + 1 :]
    if (
        len(steady) >= 2
        and steady["segment_ops"].median() >= mem.churn_segments_per_step
        and steady["num_device_free"].diff().fillna(0).gt(0).mean() >= 0.5
    ):
        result.findings.append(
            Finding(
                id="fragmentation.churn",
                analyzer=NAME,
                severity=Severity.WARNING,
                title=f"rank {rank}: segments are allocated and freed every step "
                f"(median {count_human(round(steady['segment_ops'].median()))} cudaMalloc/cudaFree)",
                subjects=(Subject("rank", f"rank {rank}"),),
                evidence=(
                    Evidence(
                        "segment_ops_per_step_median",
                        float(steady["segment_ops"].median()),
                        "count",
                        mem.churn_segments_per_step,
                    ),
                ),
                recommendation="Move torch.cuda.empty_cache() out of the step; use fixed or bucketed shapes and "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.",
                section=SECTION,
            )
        )
    _retries(result, rank, s)


def _retries(result: Result, rank: int, s: pd.DataFrame) -> None:
    retries = float(np.nanmax(s["num_alloc_retries"])) if s["num_alloc_retries"].notna().any() else 0.0
    if retries > 0:
        result.findings.append(
            Finding(
                id="fragmentation.alloc_retries",
                analyzer=NAME,
                severity=Severity.WARNING,
                title=f"rank {rank}: cudaMalloc failed {n_things(retries, 'time')} and the allocator flushed its cache "
                "to retry",
                subjects=(Subject("rank", f"rank {rank}"),),
                evidence=(Evidence("num_alloc_retries", retries, "count", 0.0),),
                recommendation="Each retry frees every cached block and synchronises the device. Lower peak memory or "
                "fragmentation (expandable_segments:True, bucketed shapes) so the cache is not exhausted.",
                section=SECTION,
            )
        )


JAX_UNREPORTED = ("requested bytes", "active bytes", "segments and blocks", "allocation history with source lines")


def _jax(result: Result, rank: int, stats: pd.DataFrame, th: Thresholds) -> None:
    s = stats.sort_values("step")
    free_in_pool = s["pool_bytes"] - s["allocated_bytes"]
    curve = pd.DataFrame(
        {
            "step": s["step"].to_numpy(),
            "in_use_bytes": s["allocated_bytes"].to_numpy(),
            "in_use_peak_bytes": s["allocated_peak_bytes"].to_numpy(),
            "pool_bytes": s["pool_bytes"].to_numpy(),
            "reserved_bytes": s["reserved_bytes"].to_numpy(),
            "largest_free_block_bytes": s["largest_free_block_bytes"].to_numpy(),
            "limit_bytes": s["limit_bytes"].to_numpy(),
            "external_fragmentation_pct": external_fragmentation_pct(s["largest_free_block_bytes"], free_in_pool),
        }
    )
    result.tables["jax_per_step"] = curve
    missing = [c for c in ("pool_bytes", "largest_free_block_bytes", "reserved_bytes") if s[c].isna().all()]
    reserved_zero = s["reserved_bytes"].notna().all() and (s["reserved_bytes"] == 0).all()
    result.summary.update(
        {
            "jax_peak_bytes_in_use": float(np.nanmax(s["allocated_peak_bytes"])),
            "jax_pool_bytes": float(np.nanmax(s["pool_bytes"])) if s["pool_bytes"].notna().any() else float("nan"),
        }
    )
    if curve["external_fragmentation_pct"].notna().any():
        result.summary["jax_peak_external_fragmentation_pct"] = float(np.nanmax(curve["external_fragmentation_pct"]))
    limit = float(np.nanmax(s["limit_bytes"])) if s["limit_bytes"].notna().any() else float("nan")
    pool = result.summary["jax_pool_bytes"]
    said = [f"JAX (rank {rank}) reported no {', no '.join(JAX_UNREPORTED[:-1])} and no {JAX_UNREPORTED[-1]}"]
    if reserved_zero:
        said.append("bytes_reserved is 0 on every step")
    if np.isfinite(pool) and np.isfinite(limit) and limit > 0:
        said.append(
            f"the BFC pool ({bytes_human(pool)}, {pct_human(100 * pool / limit, 0)} of the {bytes_human(limit)} limit) "
            "was preallocated, so reserved memory is the pool, not the demand"
        )
    if missing:
        said.append(f"keys absent: {', '.join(missing)}")
    result.meta["jax_statement"] = "; ".join(said) + "."
    result.findings.append(
        Finding(
            id="fragmentation.jax_unreported",
            analyzer=NAME,
            severity=Severity.INFO,
            title=f"rank {rank}: JAX's memory_stats give in-use, peak, pool and largest free block only; fragmentation "
            f"is judged from those (peak {pct_human(result.summary.get('jax_peak_external_fragmentation_pct'))})",
            subjects=(Subject("rank", f"rank {rank}"),),
            evidence=tuple(
                Evidence(k, result.summary[k], "bytes" if k.endswith("bytes") or k.endswith("in_use") else "%")
                for k in ("jax_peak_bytes_in_use", "jax_pool_bytes", "jax_peak_external_fragmentation_pct")
                if k in result.summary
            ),
            recommendation=result.meta["jax_statement"] + " Set XLA_PYTHON_CLIENT_PREALLOCATE=false (or "
            "XLA_PYTHON_CLIENT_MEM_FRACTION) to see real growth, and use jax.profiler.save_device_memory_profile "
            "for per-allocation detail.",
            section=SECTION,
        )
    )
    ext = curve["external_fragmentation_pct"]
    if ext.notna().any() and float(np.nanmax(ext)) >= th.memory.ext_frag_warning_pct:
        worst = curve.loc[ext.idxmax()]
        result.findings.append(
            Finding(
                id="fragmentation.at_peak",
                analyzer=NAME,
                severity=Severity.WARNING,
                title=f"rank {rank}: JAX's pool is fragmented: at step {int(worst.step)} the largest free block is "
                f"{bytes_human(worst.largest_free_block_bytes)} of {bytes_human(worst.pool_bytes - worst.in_use_bytes)} free",
                subjects=(Subject("step", f"step {int(worst.step)}"),),
                evidence=(
                    Evidence(
                        "jax_peak_external_fragmentation_pct",
                        float(worst.external_fragmentation_pct),
                        "%",
                        th.memory.ext_frag_warning_pct,
                    ),
                ),
                recommendation="Keep shapes static across steps (pad/bucket) so XLA reuses buffers; donate input buffers "
                "(donate_argnums) so updates happen in place.",
                section=SECTION,
            )
        )


def _dedupe(result: Result) -> Result:
    seen, kept = set(), []
    for f in result.findings:
        key = (f.id, f.title)
        if key not in seen:
            seen.add(key)
            kept.append(f)
    result.findings = kept
    return result
