"""The GPU timeline of one trace: busy intervals, gaps and why, steps. Shared by sync, idle and launch.

Definitions (same as HTA's temporal and idle-time breakdowns, so numbers compare):
the span runs from the first GPU activity's start to the last one's end; GPU
activity is kernels, memcpy and memset (not ``cuda_sync`` records); busy time is
the union of their intervals, compute time the union of compute kernels, and
communication and memory work is non-compute.

A gap of the merged timeline gets one cause:
``short``  under ``kernel_gap_us``: back-to-back launch latency;
``sync``   the host was blocked in a synchronising call when the GPU ran dry, so the
           queue stayed empty until the host came back and launched more;
``host``   the next work's launch call began after the gap opened: the GPU waited for
           the CPU (launch-bound Python, data loading, CPU work);
``other``  the next work was queued yet did not start (cross-stream or event waits);
``unlinked`` the work that closed the gap has no launch call in the trace (JAX/XLA's perfetto traces
           link no kernel to its launch), so the trace cannot say why the GPU waited.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from diagnose.derive.trace_iterations import infer_iterations
from diagnose.derive.trace_view import TraceView, once_per_trace
from parsers.run_records import is_profiler_file

HOST_BLOCKING_SYNCS = ("stream", "event", "device", "memcpy")
GAP_CAUSES = ("sync", "host", "short", "other", "unlinked")


def analysed(trace):
    """The trace as analysed: with two or more ProfilerStep annotations, the last step is left out.

    HTA does the same (``include_last_profiler_step=False``): Kineto's last step usually ends
    while the profiler stops and flushes. Only GPU work launched before the last step's start
    is kept (work with no launch call is dropped then, as HTA drops it). A :class:`TraceView` makes its
    analysed view once and keeps it; a trace already cut (its metadata says so) is returned as it is.
    """
    if isinstance(trace, TraceView):
        if trace.is_analysed:
            return trace
        return trace.once(
            "analysed", None, lambda: TraceView(_without_last_step(trace.trace), is_analysed=True, root=trace)
        )
    if "left_out_from_ns" in trace.metadata:
        return trace
    return _without_last_step(trace)


def _without_last_step(trace):
    out = trace
    ann = trace.annotations
    prof = ann[ann["step"].notna() & (ann["cat"].astype(str) == "user_annotation")] if len(ann) else ann
    if len(prof) >= 2 and len(trace.gpu) and len(trace.runtime):
        cut = int(prof["ts_ns"].max())
        ri = trace.gpu["runtime_index"].to_numpy()
        launch = np.where(ri >= 0, trace.runtime["ts_ns"].to_numpy()[np.maximum(ri, 0)], np.iinfo(np.int64).max)
        keep = (ri >= 0) & (launch < cut)
        new_row = np.full(len(keep), -1, dtype=np.int64)
        new_row[keep] = np.arange(int(keep.sum()))
        gi = trace.runtime["gpu_index"].to_numpy()
        # assign(): with pandas' copy-on-write only this column is new (a copy of the whole table was 95 MB)
        rt = trace.runtime.assign(gpu_index=np.where(gi >= 0, new_row[np.maximum(gi, 0)], -1))
        steps_kept = trace.annotations[
            ~(
                trace.annotations["step"].notna()
                & (trace.annotations["cat"].astype(str) == "user_annotation")
                & (trace.annotations["ts_ns"] >= cut)
            )
        ].reset_index(drop=True)
        out = dataclasses.replace(trace, gpu=trace.gpu[keep].reset_index(drop=True), runtime=rt, annotations=steps_kept)
        out.metadata = {**trace.metadata, "left_out_from_ns": cut, "left_out": "the last profiler step, as HTA does"}
    return out


def merge(ts: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals as sorted, disjoint (starts, ends)."""
    if not len(ts):
        return np.array([], dtype=np.int64), np.array([], dtype=np.int64)
    order = np.argsort(ts, kind="stable")
    s, e = ts[order], end[order]
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run_end[:-1]
    starts = s[new]
    group = np.cumsum(new) - 1
    ends = np.zeros(len(starts), dtype=np.int64)
    np.maximum.at(ends, group, e)
    return starts, ends


def temporal_breakdown(gpu: pd.DataFrame) -> dict[str, float]:
    """span, busy, compute, non-compute and idle ns over the span of GPU activity."""
    if not len(gpu):
        return {"span_ns": 0.0, "busy_ns": 0.0, "compute_ns": 0.0, "non_compute_ns": 0.0, "idle_ns": 0.0}
    ts, end = gpu["ts_ns"].to_numpy(), gpu["end_ns"].to_numpy()
    s, e = merge(ts, end)
    comp = (gpu["kind"] == "compute").to_numpy()
    cs, ce = merge(ts[comp], end[comp])
    span = float(e.max() - s.min())
    busy = float((e - s).sum())
    compute = float((ce - cs).sum())
    return {
        "span_ns": span,
        "busy_ns": busy,
        "compute_ns": compute,
        "non_compute_ns": busy - compute,
        "idle_ns": span - busy,
    }


def stream_idle(trace, kernel_wait_ns: float) -> pd.DataFrame:
    """Per stream, idle time before each kernel split as HTA does: host_wait, kernel_wait, other."""
    gpu = trace.gpu
    rows = []
    if not len(gpu):
        return pd.DataFrame(columns=["stream", "idle_category", "idle_ns", "idle_ratio"])
    rt_ts = trace.runtime["ts_ns"].to_numpy()
    ri = gpu["runtime_index"].to_numpy()
    launch_ts = np.where(ri >= 0, rt_ts[np.maximum(ri, 0)] if len(rt_ts) else 0, -1).astype(np.float64)
    launch_ts[ri < 0] = np.nan
    for stream, idx in gpu.groupby("stream", sort=True).indices.items():
        idx = idx[np.argsort(gpu["ts_ns"].to_numpy()[idx], kind="stable")]
        ts = gpu["ts_ns"].to_numpy()[idx].astype(np.float64)
        prev_end = np.r_[np.nan, gpu["end_ns"].to_numpy()[idx][:-1].astype(np.float64)]
        gap = ts - prev_end
        host = launch_ts[idx] > prev_end
        kernel = ~host & (gap < kernel_wait_ns)
        total = np.nansum(gap)
        for cat, mask in (("host_wait", host), ("kernel_wait", kernel), ("other", ~host & ~kernel)):
            ns = float(np.nansum(gap[mask]))
            rows.append(
                {
                    "stream": int(stream),
                    "idle_category": cat,
                    "idle_ns": ns,
                    "idle_ratio": ns / total if total > 0 else np.nan,
                }
            )
    return pd.DataFrame(rows)


def gaps(trace, kernel_gap_ns: float, sync_slack_ns: float = 2000.0) -> pd.DataFrame:
    """Every gap of the merged GPU timeline with its cause, the step it falls in and the sync behind it.

    Worked out once per trace and thresholds (idle, sync and launch all ask; 0.4 s each on a 1 GB trace);
    each caller gets its own copy.
    """
    key = (float(kernel_gap_ns), float(sync_slack_ns))
    return once_per_trace(trace, "gaps", key, lambda: _gaps(trace, kernel_gap_ns, sync_slack_ns)).copy()


def name_mask(names: pd.Series, test) -> np.ndarray:
    """``test(names as str)`` as a boolean array, worked out on the categories of a categorical column (a
    1 GB trace's 5 M names as Python strings cost 0.15-0.4 s per question)."""
    if isinstance(names.dtype, pd.CategoricalDtype):
        hits = np.flatnonzero(np.asarray(test(names.cat.categories.astype(str).to_series()), dtype=bool))
        return np.isin(names.cat.codes.to_numpy(), hits)
    return np.asarray(test(names.astype(str)), dtype=bool)


def names_at(names: pd.Series, rows: np.ndarray) -> np.ndarray:
    """``names.astype(object).to_numpy()[rows]`` through the categories, NaN where a name is missing.

    Not a Python string per row of the whole table: for the 1.9 M cpu ops of a 1 GB trace that took
    2 s and 190 MB, to look up a few hundred thousand rows.
    """
    names = names.astype("category")
    per_code = np.append(np.asarray(names.cat.categories.astype(object)), np.nan)  # code -1 (missing): NaN
    return per_code[names.cat.codes.to_numpy()[rows]]


def _gaps(trace, kernel_gap_ns: float, sync_slack_ns: float) -> pd.DataFrame:
    cols = ["start_ns", "end_ns", "dur_ns", "cause", "next_gpu_index", "sync_index"]
    gpu = trace.gpu
    if len(gpu) < 2:
        return pd.DataFrame({c: pd.Series([], dtype="int64" if c != "cause" else object) for c in cols})
    ts, end = gpu["ts_ns"].to_numpy(), gpu["end_ns"].to_numpy()
    s, e = merge(ts, end)
    g_start, g_end = e[:-1], s[1:]
    # the GPU work that closes each gap: the first one starting at the next busy interval
    first_at = np.searchsorted(ts, g_end, side="left")  # gpu is sorted by ts
    ri = gpu["runtime_index"].to_numpy()[first_at]
    rt = trace.runtime
    launch = np.where(ri >= 0, rt["ts_ns"].to_numpy()[np.maximum(ri, 0)] if len(rt) else -1, -1)
    cause = np.full(len(g_start), "other", dtype=object)
    host = (ri >= 0) & (launch > g_start)
    cause[host] = "host"
    cause[ri < 0] = "unlinked"
    sync_index = host_sync_covering(trace, g_start, int(sync_slack_ns))
    cause[sync_index >= 0] = "sync"
    dur = g_end - g_start
    cause[dur < kernel_gap_ns] = "short"
    sync_index[dur < kernel_gap_ns] = -1
    return pd.DataFrame(
        {
            "start_ns": g_start,
            "end_ns": g_end,
            "dur_ns": dur,
            "cause": cause,
            "next_gpu_index": first_at,
            "sync_index": sync_index,
        }
    )


def host_syncs(trace) -> np.ndarray:
    """Rows of runtime that block the host (not the profiler's own), in time order (worked out once per trace:
    gaps and the sync analyzer ask, and the step budget through it)."""
    return once_per_trace(trace, "host_syncs", None, lambda: _host_syncs(trace)).copy()


def _host_syncs(trace) -> np.ndarray:
    rt = trace.runtime
    if not len(rt):
        return np.array([], dtype=np.int64)
    mask = rt["sync_kind"].isin(HOST_BLOCKING_SYNCS).to_numpy(copy=True)  # by category: no object per call
    py = rt["python_index"].to_numpy()
    if mask.any() and len(trace.python):
        mask &= ~profiler_internal(trace, py)
    stop = profiler_stop_sync(rt)
    if stop is not None:
        mask[stop] = False
    idx = np.nonzero(mask)[0]
    return idx[np.argsort(rt["ts_ns"].to_numpy()[idx], kind="stable")]


def profiler_stop_sync(rt: pd.DataFrame) -> int | None:
    """Row of torch.profiler's own synchronize as it stops, in a trace without Python frames; None otherwise.

    ``profile.__exit__`` calls ``torch.cuda.synchronize()`` (torch/autograd/profiler.py), recorded as the trace's
    last runtime call: a cudaDeviceSynchronize under no CPU op, with no Python frame to show whose it is. With
    frames, :func:`profiler_internal` finds it by its stack. Without them it was counted as the script's: on the
    H200, the word LM traced with_stack=False read 25 syncs for its 24 loss.item() calls (2026-12-05)."""
    if not len(rt):
        return None
    last = int(np.argmax(rt["ts_ns"].to_numpy()))
    row = rt.iloc[last]
    if (
        row["sync_kind"] == "device"
        and int(row["python_index"]) < 0
        and int(row["cpu_op_index"]) < 0
        and int(row["gpu_index"]) < 0
    ):
        return last
    return None


def profiler_internal(trace, python_index: np.ndarray) -> np.ndarray:
    """True where the Python stack passes through the profiler itself (its start/stop syncs)."""
    parent = trace.python["parent_index"].to_numpy()
    is_prof = once_per_trace(trace, "profiler_frames", None, lambda: _profiler_frames(trace.python["file"]))
    hit = np.zeros(len(python_index), dtype=bool)
    cur = python_index.copy()
    for _ in range(256):
        live = cur >= 0
        if not live.any():
            break
        hit[live] |= is_prof[cur[live]]
        cur[live] = parent[cur[live]]
    return hit


def _profiler_frames(files: pd.Series) -> np.ndarray:
    """True for the frames whose file is the profiler's own; a categorical column is tested once per file name."""

    def is_profiler(f) -> bool:
        return isinstance(f, str) and is_profiler_file(f)

    if isinstance(files.dtype, pd.CategoricalDtype):
        hits = [i for i, f in enumerate(files.cat.categories.astype(object)) if is_profiler(f)]
        return np.isin(files.cat.codes.to_numpy(), hits)  # code -1 (no file): never the profiler's
    return np.array([is_profiler(f) for f in files.astype(object).to_numpy()], dtype=bool)


def host_sync_covering(trace, t_ns: np.ndarray, slack_ns: int = 2000) -> np.ndarray:
    """For each time, the host-blocking sync call in progress then (row of runtime), or -1."""
    out = np.full(len(t_ns), -1, dtype=np.int64)
    idx = host_syncs(trace)
    if not idx.size:
        return out
    rt = trace.runtime
    s = rt["ts_ns"].to_numpy()[idx]
    e = rt["end_ns"].to_numpy()[idx]
    k = np.searchsorted(s, t_ns + slack_ns, side="right") - 1
    ok = k >= 0
    ok[ok] &= e[k[ok]] + slack_ns >= t_ns[ok]
    out[ok] = idx[k[ok]]
    return out


def steps(trace) -> pd.DataFrame:
    """Step windows on the host: ProfilerStep#N, else what repeats once per iteration (diagnose.derive.trace_iterations),
    else none: ``attrs["source"]`` is then "whole trace" and figures are over the span, not per step.

    Worked out once per trace; each caller gets its own copy."""
    return once_per_trace(trace, "steps", None, lambda: _steps(trace)).copy()


def _steps(trace) -> pd.DataFrame:
    ann = trace.annotations
    cols = {"step": [], "cpu_start_ns": [], "cpu_end_ns": []}
    source = "whole trace"
    if len(ann):
        prof = ann[ann["step"].notna() & (ann["cat"].astype(str) == "user_annotation")]
        if len(prof):
            prof = prof.sort_values("ts_ns")
            cols = {
                "step": prof["step"].astype(int).tolist(),
                "cpu_start_ns": prof["ts_ns"].tolist(),
                "cpu_end_ns": prof["end_ns"].tolist(),
            }
            source = "ProfilerStep annotations"
    if source == "whole trace":
        found = infer_iterations(trace, _first_host_ns(trace))
        if found is not None:
            starts, ends, source = found
            cols = {"step": list(range(len(starts))), "cpu_start_ns": starts.tolist(), "cpu_end_ns": ends.tolist()}
    df = (
        pd.DataFrame(cols, dtype="int64")
        if cols["step"]
        else pd.DataFrame(
            {
                "step": pd.Series([], dtype="int64"),
                "cpu_start_ns": pd.Series([], dtype="int64"),
                "cpu_end_ns": pd.Series([], dtype="int64"),
            }
        )
    )
    df.attrs["source"] = source
    return df


def _first_host_ns(trace) -> int:
    firsts = [int(t["ts_ns"].min()) for t in (trace.cpu_ops, trace.runtime) if len(t)]
    return min(firsts) if firsts else 0


def gpu_step_of(trace, step_windows: pd.DataFrame) -> np.ndarray:
    """Step of each GPU row: the host step whose window holds its launch call (-1 when outside or unlaunched)."""
    gpu = trace.gpu
    out = np.full(len(gpu), -1, dtype=np.int64)
    if not len(step_windows) or not len(gpu) or not len(trace.runtime):
        return out
    ri = gpu["runtime_index"].to_numpy()
    launch = np.where(ri >= 0, trace.runtime["ts_ns"].to_numpy()[np.maximum(ri, 0)], -1)
    starts = step_windows["cpu_start_ns"].to_numpy()
    ends = step_windows["cpu_end_ns"].to_numpy()
    k = np.searchsorted(starts, launch, side="right") - 1
    ok = (ri >= 0) & (k >= 0)
    ok[ok] &= launch[ok] < ends[k[ok]]
    out[ok] = step_windows["step"].to_numpy()[k[ok]]
    return out


def gpu_step_windows(trace, step_windows: pd.DataFrame) -> pd.DataFrame:
    """GPU window of each step: from the end of the previous step's last GPU work to the end of its own.

    A gap is charged to the step whose work it delays (the work after it), as HTA charges idle
    time to the kernel that follows it. Worked out once per trace and step windows; each caller gets its own copy.
    """
    columns = [step_windows[c].to_numpy() for c in ("step", "cpu_start_ns", "cpu_end_ns") if c in step_windows]
    if len(columns) < 3 or any(c.dtype.kind not in "iuf" for c in columns):
        return _gpu_step_windows(trace, step_windows)
    key = tuple((c.dtype.str, c.tobytes()) for c in columns)
    return once_per_trace(trace, "gpu_step_windows", key, lambda: _gpu_step_windows(trace, step_windows)).copy()


def _gpu_step_windows(trace, step_windows: pd.DataFrame) -> pd.DataFrame:
    step_of = gpu_step_of(trace, step_windows)
    gpu = trace.gpu
    launched = step_of >= 0
    # per step of the launched work: first start, last end, count (a groupby-agg was ~8 ms on a small trace)
    steps_seen, inverse = np.unique(step_of[launched], return_inverse=True)
    ts = gpu["ts_ns"].to_numpy()[launched]
    end = gpu["end_ns"].to_numpy()[launched]
    first = np.full(len(steps_seen), np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(len(steps_seen), np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(first, inverse, ts)
    np.maximum.at(last, inverse, end)
    counts = np.bincount(inverse, minlength=len(steps_seen))
    at = {int(s): k for k, s in enumerate(steps_seen)}
    rows = []
    prev_end = None
    for step in step_windows["step"].tolist():
        k = at.get(step)
        if k is None:
            continue
        first_ns, last_ns = int(first[k]), int(last[k])
        start = first_ns if prev_end is None else min(prev_end, first_ns)
        rows.append((step, start, last_ns, int(counts[k])))
        prev_end = last_ns
    columns = ["step", "gpu_start_ns", "gpu_end_ns", "kernels"]
    if not rows:
        return pd.DataFrame([], columns=columns)
    return pd.DataFrame(np.array(rows, dtype=np.int64), columns=columns)


def clip_sum(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> float:
    """Total length of intervals clipped to [lo, hi)."""
    s = np.clip(starts, lo, hi)
    e = np.clip(ends, lo, hi)
    return float(np.maximum(e - s, 0).sum())


def clip_sums(starts: np.ndarray, ends: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """:func:`clip_sum` of sorted, disjoint intervals (what :func:`merge` gives, or its gaps) for many windows.

    One prefix sum and two binary searches instead of a pass over every interval per window: the
    per-step breakdown of a 1 GB trace (400 steps, 500 k intervals) took 14 s the other way.
    """
    starts, ends = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
    lo, hi = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
    if not len(starts):
        return np.zeros(len(lo), dtype=np.int64)
    cum = np.concatenate(([0], np.cumsum(ends - starts)))
    first = np.searchsorted(ends, lo, side="right")  # the first interval that ends after lo
    stop = np.searchsorted(starts, hi, side="left")  # intervals before it start before hi
    inside = stop > first
    total = cum[np.maximum(stop, first)] - cum[first]
    last = len(starts) - 1
    total -= np.where(inside, np.maximum(lo - starts[np.minimum(first, last)], 0), 0)  # the first one's part before lo
    total -= np.where(inside, np.maximum(ends[np.maximum(stop - 1, 0)] - hi, 0), 0)  # the last one's part after hi
    return np.where(hi > lo, total, 0)
