"""Each traced step of one rank split into the step budget's parts: GPU busy by kind (compute, copies and memsets,
collectives) and GPU idle by cause (host syncs, input wait, the allocator's calls, launch-bound host work, waits on
other streams, gpudiag's own trace window).

The budget's parts that only a trace can measure come from here (diagnose.derive.step_budget_table takes their
medians); busy and idle are the idle analyzer's per-step figures (diagnose.derive.step_gpu_breakdown) and a sync's
cost the sync analyzer's (diagnose.derive.sync_calls), so the three agree on the same steps.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from diagnose.derive import trace_timeline as tl
from diagnose.derive.step_gpu_breakdown import step_breakdown, step_gpu_windows
from diagnose.derive.trace_input_wait import input_fetches, input_inside_gaps, input_wait_per_step, iterator_fetches
from diagnose.derive.trace_view import TraceView
from diagnose.thresholds import Thresholds

# a traced step's columns a trace that links no GPU work to its launch calls cannot measure (its GPU idle has no cause)
UNLINKED_PARTS = (
    "sync_ms",
    "sync_raw_ms",
    "launch_bound_ms",
    "allocator_ms",
    "other_wait_ms",
    "trace_window_ms",
)
# the host calls that create and free the allocator's segments (expandable segments map and unmap them)
ALLOCATOR_CALLS = ("cudaMalloc", "cudaFree", "cuMemCreate", "cuMemMap", "cuMemUnmap", "cuMemRelease", "cuMemSetAccess")


def traced_steps(
    trace: TraceView | None,
    rank: int,
    rows: pd.DataFrame,
    input_ms: pd.Series,
    window: range | list | None,
    median_ms: float | None,
    th: Thresholds,
    source_dirs: list[str],
    rank_calls: Callable[[int], tuple[pd.DataFrame, float, int]],
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per traced step (ms): the idle analyzer's busy and idle-by-cause, busy split by kind, allocator calls,
    the input wait of the run step it was, and gpudiag's share; with the sync analyzer's calls of those steps.

    ``trace``: the rank's trace (None: it has none); ``window``: the run steps the traced steps were, in order
    (gpudiag's trace window; None: unknown); ``median_ms``: the steady median, whose excess in a traced step is
    gpudiag's (None: a trace captured elsewhere); ``rank_calls``: the Derived's, the sync calls the sync analyzer
    counts, asked for only when the trace has traced steps."""
    if trace is None:
        return pd.DataFrame(), pd.DataFrame()
    trace = tl.analysed(trace)
    if not len(trace.gpu):
        return pd.DataFrame(), pd.DataFrame()
    windows = tl.steps(trace)
    gwin = step_gpu_windows(trace, windows)
    if not len(gwin):
        return pd.DataFrame(), pd.DataFrame()
    gaps = tl.gaps(trace, th.sync.kernel_gap_us * 1e3, th.sync.sync_slack_us * 1e3)
    per = step_breakdown(trace, gaps, windows)  # the same windows, busy and idle as the idle analyzer
    lo, hi = gwin["gpu_start_ns"].to_numpy(np.int64), gwin["gpu_end_ns"].to_numpy(np.int64)
    gpu = trace.gpu
    kind = tl.names_at(gpu["kind"], slice(None))  # through the categories: not a str per GPU row
    ts, end = gpu["ts_ns"].to_numpy(), gpu["end_ns"].to_numpy()
    comm = kind == "comm"
    not_compute = comm | (kind == "memcpy") | (kind == "memset")
    collective = tl.clip_sums(*tl.merge(ts[comm], end[comm]), lo, hi).astype(float)
    copies_or_comm = tl.clip_sums(*tl.merge(ts[not_compute], end[not_compute]), lo, hi).astype(float)
    # the table's columns as arrays, made a frame once at the end (a column assignment each was ~3 ms a call)
    trace_step = per["step"].to_numpy()
    n = len(trace_step)
    out = {"rank": rank, "trace_step": trace_step}
    run_steps = np.full(n, -1, dtype=np.int64)
    if window is not None and n <= len(window):
        run_steps[:] = list(window)[:n]
    out["run_step"] = run_steps
    out["wall_ms"] = per["step_ns"].to_numpy() / 1e6
    busy = per["busy_ns"].to_numpy()
    out["compute_ms"] = (busy - copies_or_comm) / 1e6
    out["memcpy_ms"] = (copies_or_comm - collective) / 1e6
    out["collective_ms"] = collective / 1e6
    out["sync_ms"] = per["idle_sync_ns"].to_numpy() / 1e6
    # what the trace cannot attribute (no kernel linked to its launch) is neither host work nor a wait on another
    # stream: it is left to the unexplained remainder (a JAX trace's idle)
    out["other_wait_ms"] = per["idle_other_ns"].to_numpy() / 1e6
    out["unlinked_ms"] = per["idle_unlinked_ns"].to_numpy() / 1e6
    host_idle = (per["idle_host_ns"].to_numpy() + per["idle_short_ns"].to_numpy()) / 1e6
    out["allocator_host_ms"] = allocator_host_ms(trace, windows, trace_step)
    by_step = dict(zip(rows["step"].astype(int), input_ms))
    # a list becomes a column as a Series makes it (the dtype pandas infers)
    out["input_ms"] = pd.Series([by_step.get(int(s), np.nan) if s >= 0 else np.nan for s in run_steps]).to_numpy()
    # a run step with no input_ms fetched no batch from a DataLoader: its wait for the loop's own iterator (a
    # generator, a __next__ method) is read from the trace's Python frames instead
    from_trace = pd.isna(out["input_ms"])
    from_loop = "input_from" in rows and (rows["input_from"] == "loop").any()
    fetches = iterator_fetches(trace, windows, source_dirs)
    # the part of a sync's gap in which the host fetched the next batch is input wait, not the sync's (sync.py)
    sync_gaps = gaps[gaps["cause"] == "sync"]
    _, fetch_start, fetch_end = input_inside_gaps(
        sync_gaps["start_ns"].to_numpy(), sync_gaps["end_ns"].to_numpy(), input_fetches(trace, windows, fetches=fetches)
    )
    fetching_in_sync_ms = tl.clip_sums(fetch_start, fetch_end, lo, hi) / 1e6
    out["sync_ms"] = out["sync_ms"] - fetching_in_sync_ms
    host_idle = host_idle + fetching_in_sync_ms
    input_iterator = None
    if from_trace.any() or from_loop:
        if len(fetches):
            if from_trace.any():
                traced_wait = input_wait_per_step(trace, windows, fetches=fetches)
                out["input_ms"] = out["input_ms"].copy()
                out["input_ms"][from_trace] = pd.Series(trace_step[from_trace]).map(traced_wait).to_numpy()
            top = fetches.assign(ms=fetches["end_ns"] - fetches["ts_ns"]).groupby(["file", "line"])["ms"].sum()
            file, line = top.idxmax()
            function = fetches.loc[(fetches["file"] == file) & (fetches["line"] == line), "name"].iloc[0]
            input_iterator = f"{str(function).rsplit(': ', 1)[-1]} at {file}:{int(line)}"
    # GPU idle while the host was busy: first the allocator's calls, then input wait, then gpudiag's excess
    out["allocator_ms"] = np.minimum(out["allocator_host_ms"], host_idle)
    left = host_idle - out["allocator_ms"]
    input_missing = pd.isna(out["input_ms"])
    input_here = np.minimum(np.where(input_missing, 0.0, out["input_ms"]), left)
    # the part of the step's input wait inside its GPU window (the first traced step's window opens at its
    # first GPU work, after its fetch): what the traced budget counts, so its parts stay within the step
    out["input_in_window_ms"] = np.where(input_missing, np.nan, input_here)
    left = left - input_here
    # gpudiag's excess over the steady median slows the host: it shows as launch idle, then as a longer wait
    # for the host to launch again after each sync; it is taken out of those, in that order
    # (median_ms None: a trace captured elsewhere, no step of it is gpudiag's)
    excess = np.maximum(out["wall_ms"] - median_ms, 0.0) if median_ms is not None else np.zeros(n)
    from_launch = np.minimum(excess, left)
    from_sync = np.minimum(excess - from_launch, out["sync_ms"])
    out["trace_window_ms"] = from_launch + from_sync
    out["launch_bound_ms"] = left - from_launch
    out["sync_raw_ms"] = out["sync_ms"]
    out["sync_ms"] = out["sync_raw_ms"] - from_sync
    calls, _, _ = rank_calls(rank)  # the sync analyzer's calls and costs (issue 28)
    step_to_run = dict(zip(trace_step.tolist(), run_steps.tolist()))
    calls = calls[calls["step"].isin(list(step_to_run))].copy()
    calls["run_step"] = calls["step"].map(step_to_run)
    blocked = calls.groupby("step")["blocked_ns"].sum()
    out["sync_blocked_ms"] = pd.Series(trace_step).map(blocked).fillna(0.0).to_numpy() / 1e6
    out = pd.DataFrame(out)
    if gwin.attrs.get("by_time"):  # no GPU work linked to its launch (JAX/XLA): busy by time, idle of no known cause
        out[list(UNLINKED_PARTS)] = np.nan
        out.attrs["by_time"] = True
    if input_iterator is not None:
        out.attrs["input_iterator"] = input_iterator
    return out, calls


def allocator_host_ms(trace, windows: pd.DataFrame, trace_steps: np.ndarray) -> np.ndarray:
    """Host time in cudaMalloc/cudaFree (and the expandable-segment driver calls) inside each step's host window."""
    rt = trace.runtime
    if not len(rt) or not len(windows):
        return np.zeros(len(trace_steps))
    mask = tl.name_mask(rt["name"], lambda names: names.str.startswith(ALLOCATOR_CALLS))
    s, e = tl.merge(rt["ts_ns"].to_numpy()[mask], rt["end_ns"].to_numpy()[mask])
    win = windows.set_index("step").reindex(trace_steps)
    lo = win["cpu_start_ns"].fillna(0).to_numpy(np.int64)
    hi = win["cpu_end_ns"].fillna(0).to_numpy(np.int64)
    return tl.clip_sums(s, e, lo, hi).astype(float) / 1e6
