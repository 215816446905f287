"""Memory fragmentation: does fragmentation, not real demand, set the peak or cause an OOM?

From the allocator history (torch snapshot) the replay (:mod:`diagnose.memory_replay`)
rebuilds reserved / allocated / requested bytes and the free-block layout; this module
bins them for the report (bounded cells, see ``Memory`` thresholds), checks them against
the snapshot and the per-step ``memory_stats``, and judges:

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

from diagnose.findings import Evidence, Finding, Result, Severity, Subject, not_measured
from diagnose.memory_replay import ReplayResult, agreement, external_fragmentation_pct, occupancy_grid, replay
from diagnose.profile_data import Profile
from diagnose.thresholds import Thresholds

NAME = "fragmentation"
ORDER = 60
SECTION = "section-fragmentation"
SEGMENT_ACTIONS = ("segment_alloc", "segment_free", "segment_map", "segment_unmap")
GIB = 2**30


def analyze(profile: Profile, th: Thresholds = Thresholds()) -> Result:
    result = Result(analyzer=NAME)
    if not profile.snapshots and not profile.memory_stats:
        result.findings.append(
            not_measured(
                NAME,
                "Allocator memory (fragmentation)",
                "Run under `gpudiag profile` (it records the allocator history and per-step memory_stats), or pass a "
                "snapshot from torch.cuda.memory._dump_snapshot() after torch.cuda.memory._record_memory_history().",
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
                "Only per-step memory_stats were found. Record the history with torch.cuda.memory._record_memory_history() "
                "and dump a snapshot (gpudiag profile does both) to see the heatmap and which lines fragment memory.",
                section=SECTION,
            )
        )
    if any(v["snapshot"].metadata.get("warnings") for v in views) or not views and profile.snapshots:
        empty = [r for r, s in profile.snapshots.items() if not s.has_history]
        if empty:
            result.findings.append(
                not_measured(
                    NAME,
                    f"The allocator history of rank(s) {', '.join(map(str, empty))}",
                    "The snapshot holds no history entries: call torch.cuda.memory._record_memory_history(max_entries=100000) "
                    "before the first CUDA allocation, and dump the snapshot before stopping it.",
                    section=SECTION,
                )
            )
    return _dedupe(result)


# --- the replay, binned ------------------------------------------------------------------------------------


def _replay_view(profile: Profile, rank: int, device: int, snapshot, th: Thresholds) -> dict | None:
    trace = snapshot.trace_for(device)
    if not len(trace):
        if not len(snapshot.segments_for(device)):
            return None
        return _snapshot_only_view(rank, device, snapshot)
    t_us = trace.sort_values("seq", kind="stable")["t_us"].to_numpy(dtype=float)
    times_known = np.isfinite(t_us).all()
    x = t_us if times_known else np.arange(len(t_us), dtype=float)
    steps = _step_edges(profile, rank)
    mem = th.memory
    line_bins, line_bin = _time_bins(x, mem.max_timeline_bins)
    if steps is not None and len(steps) <= mem.max_heatmap_time_bins and times_known:
        heat_bins, heat_bin, heat_labels = _step_bins(x, steps)
        heat_axis = "step"
    else:
        heat_bins, heat_bin = _time_bins(x, mem.max_heatmap_time_bins)
        heat_labels, heat_axis = None, "time" if times_known else "entry"
    sample_at = np.unique(np.r_[_bin_ends(line_bin), _bin_ends(heat_bin)])
    replayed = replay(snapshot, device, sample_at=sample_at)
    t0 = x[0]
    scale = 1e6 if times_known else 1.0
    view = {
        "rank": rank,
        "device": device,
        "snapshot": snapshot,
        "replay": replayed,
        "steps": steps,
        "times_known": times_known,
        "t0_us": t0,
    }
    tl = replayed.timeline
    view["peak_reserved_bytes"] = float(tl["reserved_bytes"].max())
    view["peak_allocated_bytes"] = float(tl["allocated_bytes"].max())
    view["timeline"] = _binned_timeline(tl, line_bin, line_bins, x, t0, scale)
    samples = replayed.samples.copy()
    samples["t_s"] = ((samples["t_us"] if times_known else samples["entry"]) - t0) / scale
    view["fragmentation_curve"] = samples
    grid = occupancy_grid(replayed, heat_bin, heat_bins, mem.max_heatmap_segment_rows)
    bins_table = _heat_bins_table(heat_bin, heat_bins, x, t0, scale, heat_labels)
    view["heatmap"], view["heatmap_rows"], view["heatmap_bins"] = grid["cells"], grid["rows"], bins_table
    view["heatmap_axis"] = heat_axis
    view["agreement"] = agreement(replayed, snapshot)
    view["stats_agreement"] = _stats_agreement(profile, rank, tl, x if times_known else None)
    view["per_step"] = _per_step(tl, x if times_known else None, steps)
    view["coverage_pct"] = _coverage_pct(profile, rank, replayed, x if times_known else None)
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


def _step_edges(profile: Profile, rank: int) -> pd.DataFrame | None:
    """Step boundaries in unix µs: (step, end_us) from memory_stats, else (step, start_us) from step events."""
    stats = profile.memory_stats.get(rank)
    if stats is not None and len(stats) and stats["t_ns"].notna().all():
        s = stats.sort_values("t_ns")
        return pd.DataFrame({"step": s["step"].to_numpy(), "end_us": s["t_ns"].to_numpy() / 1e3})
    events = profile.step_events.get(rank)
    if events is not None and len(events) and "t_start_ns" in events and events["t_start_ns"].notna().all():
        e = events.sort_values("t_start_ns")
        starts = e["t_start_ns"].to_numpy() / 1e3
        return pd.DataFrame({"step": e["step"].to_numpy(), "end_us": np.r_[starts[1:], np.inf], "start_us": starts})
    return None


def _time_bins(x: np.ndarray, max_bins: int) -> tuple[int, np.ndarray]:
    if len(x) <= max_bins:
        return len(x), np.arange(len(x))
    span = x[-1] - x[0]
    if span <= 0:
        return max_bins, (np.arange(len(x)) * max_bins) // len(x)
    b = np.floor((x - x[0]) / span * max_bins).astype(np.int64)
    return max_bins, np.maximum.accumulate(np.clip(b, 0, max_bins - 1))


def _step_bins(x: np.ndarray, steps: pd.DataFrame) -> tuple[int, np.ndarray, list[str]]:
    """One bin per step (entries after the last recorded step get their own bin)."""
    ends = steps["end_us"].to_numpy()
    b = np.searchsorted(ends, x, side="left")
    labels = [f"step {s}" for s in steps["step"].tolist()]
    if (b >= len(ends)).any():
        labels.append("after the last step")
    nbins = len(labels)
    return nbins, np.maximum.accumulate(np.clip(b, 0, nbins - 1)), labels


def _bin_ends(entry_bin: np.ndarray) -> np.ndarray:
    return np.flatnonzero(np.r_[entry_bin[1:] != entry_bin[:-1], True])


def _binned_timeline(
    tl: pd.DataFrame, entry_bin: np.ndarray, nbins: int, x: np.ndarray, t0: float, scale: float
) -> pd.DataFrame:
    starts = np.flatnonzero(np.r_[True, entry_bin[1:] != entry_bin[:-1]])
    ends = np.r_[starts[1:] - 1, len(tl) - 1]
    out = {"t_s": (x[ends] - t0) / scale, "entries": ends - starts + 1}
    for col in ("reserved_bytes", "allocated_bytes", "active_bytes", "requested_bytes"):
        out[col] = np.maximum.reduceat(tl[col].to_numpy(), starts)
        out[col.replace("_bytes", "_end_bytes")] = tl[col].to_numpy()[ends]
    return pd.DataFrame(out)


def _heat_bins_table(entry_bin, nbins, x, t0, scale, labels) -> pd.DataFrame:
    last = np.full(nbins, -1, dtype=np.int64)
    idx = np.arange(len(entry_bin))
    np.maximum.at(last, entry_bin, idx)
    rev = np.full(nbins, len(entry_bin), dtype=np.int64)
    np.minimum.at(rev, entry_bin, idx)
    has = last >= 0
    t_start = np.where(has, (x[np.clip(rev, 0, len(x) - 1)] - t0) / scale, np.nan)
    t_end = np.where(has, (x[np.clip(last, 0, None)] - t0) / scale, np.nan)
    if labels is None:
        labels = [f"{a:.3f}–{b:.3f} s" if np.isfinite(a) else "" for a, b in zip(t_start, t_end)]
    return pd.DataFrame(
        {
            "bin": np.arange(nbins),
            "label": labels[:nbins],
            "t_start_s": t_start,
            "t_end_s": t_end,
            "entries": np.bincount(entry_bin, minlength=nbins),
        }
    )


def _state_at(tl: pd.DataFrame, x: np.ndarray, at_us: np.ndarray, col: str) -> np.ndarray:
    pos = np.searchsorted(x, at_us, side="right") - 1
    vals = tl[col].to_numpy().astype(float)
    return np.where(pos >= 0, vals[np.clip(pos, 0, None)], np.nan)


def _stats_agreement(profile: Profile, rank: int, tl: pd.DataFrame, x: np.ndarray | None) -> pd.DataFrame:
    stats = profile.memory_stats.get(rank)
    if stats is None or not len(stats) or x is None:
        return pd.DataFrame()
    s = stats[(stats["framework"] == "torch") & stats["t_ns"].notna()].sort_values("t_ns")
    if not len(s):
        return pd.DataFrame()
    at = s["t_ns"].to_numpy() / 1e3
    out = pd.DataFrame({"step": s["step"].to_numpy(), "t_ns": s["t_ns"].to_numpy(), "in_history": at >= x[0]})
    for col in ("allocated_bytes", "reserved_bytes", "requested_bytes"):
        out[f"recorded_{col}"] = s[col].to_numpy()
        out[f"replayed_{col}"] = _state_at(tl, x, at, col)
    out["allocated_diff_bytes"] = out["replayed_allocated_bytes"] - out["recorded_allocated_bytes"]
    out["reserved_diff_bytes"] = out["replayed_reserved_bytes"] - out["recorded_reserved_bytes"]
    out["agrees"] = (out["allocated_diff_bytes"] == 0) & (out["reserved_diff_bytes"] == 0)
    return out


def _per_step(tl: pd.DataFrame, x: np.ndarray | None, steps: pd.DataFrame | None) -> pd.DataFrame:
    if steps is None or x is None:
        return pd.DataFrame()
    ends = steps["end_us"].to_numpy()
    b = np.clip(np.searchsorted(ends, x, side="left"), 0, len(ends))
    labels = np.r_[steps["step"].to_numpy(), -1]  # -1: after the last recorded step
    action = tl["action"].to_numpy()
    frame = pd.DataFrame({"bin": b, "action": action, "block_bytes": tl["block_bytes"].to_numpy()})
    counts = pd.crosstab(frame["bin"], frame["action"]).reindex(range(len(labels)), fill_value=0)
    out = pd.DataFrame({"step": labels})
    for a in ("alloc", "segment_alloc", "segment_free", "segment_map", "segment_unmap", "oom"):
        out[a if a != "alloc" else "allocs"] = counts[a].to_numpy() if a in counts else 0
    grown = frame[frame["action"].isin(["segment_alloc", "segment_map"])].groupby("bin")["block_bytes"].sum()
    released = frame[frame["action"].isin(["segment_free", "segment_unmap"])].groupby("bin")["block_bytes"].sum()
    out["segment_grown_bytes"] = grown.reindex(range(len(labels)), fill_value=0).to_numpy()
    out["segment_released_bytes"] = released.reindex(range(len(labels)), fill_value=0).to_numpy()
    last = np.searchsorted(x, np.r_[ends, np.inf], side="right") - 1
    for col in ("reserved_bytes", "allocated_bytes"):
        vals = tl[col].to_numpy().astype(float)
        out[f"{col.replace('_bytes', '_end_bytes')}"] = np.where(last >= 0, vals[np.clip(last, 0, None)], np.nan)
    peak = pd.Series(tl["allocated_bytes"].to_numpy()).groupby(b).max()
    out["allocated_peak_bytes"] = peak.reindex(range(len(labels))).to_numpy()
    out["segment_ops"] = out["segment_alloc"] + out["segment_free"] + out["segment_map"] + out["segment_unmap"]
    keep = (out["step"] >= 0) | (out[["allocs", "segment_ops"]].sum(axis=1) > 0)
    return out[keep].reset_index(drop=True)


def _coverage_pct(profile: Profile, rank: int, r: ReplayResult, x: np.ndarray | None) -> float:
    """Share of the run (first step's start to the snapshot) the history covers, in %."""
    starts_empty = r.meta["pre_existing_segments"] == 0 and r.meta["pre_existing_blocks"] == 0
    run_start = None
    steps = _step_edges(profile, rank)
    if steps is not None and "start_us" in steps:
        run_start = float(steps["start_us"].min())
    elif steps is not None and len(steps) >= 2:
        ends = steps["end_us"].to_numpy()
        run_start = float(ends[0] - np.median(np.diff(ends)))
    elif steps is not None and len(steps) == 1:
        run_start = float(steps["end_us"].iloc[0])
    if x is None or run_start is None:
        return 100.0 if starts_empty else float("nan")
    end = max(float(x[-1]), float(steps["end_us"].replace(np.inf, np.nan).max()))
    if end <= run_start or x[0] <= run_start or starts_empty:
        return 100.0
    return float(np.clip(100.0 * (end - x[0]) / (end - run_start), 0.0, 100.0))


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
    severity = Severity.CRITICAL if share >= mem.frag_critical_share else Severity.WARNING
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
            f"{_where(view)}: {share:.0%} of the {peak_res / GIB:.2f} GiB reserved was never allocated even at the "
            f"peak ({peak_alloc / GIB:.2f} GiB); {len(frag)} segment(s) ({frag['segment_bytes'].sum() / GIB:.2f} GiB) "
            f"were added while enough memory was free but fragmented"
        ),
        subjects=tuple(subjects),
        evidence=(
            Evidence("reserved_unused_at_peak_pct", 100 * share, "%", 100 * mem.frag_warning_share),
            Evidence("peak_reserved_bytes", peak_res, "bytes"),
            Evidence("peak_allocated_bytes", peak_alloc, "bytes"),
            Evidence("fragmented_growth_bytes", float(frag["segment_bytes"].sum()), "bytes"),
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
            f"{_where(view)}: the allocator creates and releases segments every step (median {median_ops:.0f} "
            f"cudaMalloc/cudaFree per step, both in {both.mean():.0%} of steady steps)"
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
                    f"{_where(view)}: out of memory for {worst.request_bytes / 2**20:,.0f} MiB although "
                    f"{worst.cached_free_bytes / GIB:.2f} GiB was reserved but unallocated; the largest free block "
                    f"was {worst.largest_free_pool_bytes / 2**20:,.0f} MiB (fragmentation, not demand)"
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
                    f"{_where(view)}: out of memory for {worst.request_bytes / 2**20:,.1f} MiB with only "
                    f"{worst.cached_free_bytes / 2**20:,.1f} MiB reserved but unallocated: the demand itself "
                    f"({worst.allocated_bytes / GIB:.2f} GiB allocated) reached the limit"
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
            "max_heatmap_cells": th.memory.max_heatmap_time_bins * th.memory.max_heatmap_segment_rows,
            "max_timeline_bins": th.memory.max_timeline_bins,
        }
    )


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
            sev = Severity.CRITICAL if share >= mem.frag_critical_share else Severity.WARNING
            result.findings.append(
                Finding(
                    id="fragmentation.at_peak",
                    analyzer=NAME,
                    severity=sev,
                    title=f"rank {rank}: {share:.0%} of the {peak_res / GIB:.2f} GiB reserved was never allocated even at the peak",
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
                title=f"rank {rank}: segments are allocated and freed every step (median {steady['segment_ops'].median():.0f} cudaMalloc/cudaFree)",
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
                title=f"rank {rank}: cudaMalloc failed {retries:.0f} time(s) and the allocator flushed its cache to retry",
                subjects=(Subject("rank", f"rank {rank}"),),
                evidence=(Evidence("num_alloc_retries", retries, "count", 0.0),),
                recommendation="Each retry frees every cached block and synchronises the device. Lower peak memory or "
                "fragmentation (expandable_segments:True, bucketed shapes) so the cache is not exhausted.",
                section=SECTION,
            )
        )


JAX_UNREPORTED = ("requested bytes", "active bytes", "segments and blocks", "an allocation history with source lines")


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
    said = [f"JAX (rank {rank}) reported no {', no '.join(JAX_UNREPORTED)}"]
    if reserved_zero:
        said.append("bytes_reserved is 0 on every step")
    if np.isfinite(pool) and np.isfinite(limit) and limit > 0:
        said.append(
            f"the BFC pool ({pool / GIB:.1f} GiB, {100 * pool / limit:.0f} % of the {limit / GIB:.1f} GiB limit) "
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
            f"is judged from those (peak {result.summary.get('jax_peak_external_fragmentation_pct', float('nan')):.1f} %)",
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
                f"{worst.largest_free_block_bytes / GIB:.2f} GiB of {(worst.pool_bytes - worst.in_use_bytes) / GIB:.2f} GiB free",
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
