"""Each traced step's GPU window, and the GPU busy and idle by cause inside it.

Shared because the idle analyzer's per-step table and the step budget's busy and idle parts must split the
same steps the same way: one window per step (by its launch calls, or by time for a trace that links no GPU
work to its launch), busy time as the merged GPU intervals inside it, idle by the cause of its gaps
(:func:`diagnose.derive.trace_timeline.gaps`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.derive import trace_timeline as tl


def step_gpu_windows(trace, windows: pd.DataFrame) -> pd.DataFrame:
    """Each step's GPU window (``tl.gpu_step_windows``: by the launch calls), or, for a trace that links no GPU
    work to its launch (JAX/XLA's), the step's host window with the GPU work that started in it.

    Without launch links a step's work can only be placed by time; its GPU busy inside its host window is what
    it spent of the step's wall time either way. Without this the JAX budget read "GPU busy not measured" beside
    an idle finding that measured the compute (issue 28)."""
    win = tl.gpu_step_windows(trace, windows) if len(windows) else pd.DataFrame()
    gpu = trace.gpu
    if len(win) or not len(windows) or not len(gpu) or (gpu["runtime_index"].to_numpy() >= 0).any():
        return win
    lo = windows["cpu_start_ns"].to_numpy(dtype=np.int64)
    hi = windows["cpu_end_ns"].to_numpy(dtype=np.int64)
    starts = np.sort(gpu["ts_ns"].to_numpy(dtype=np.int64))
    kernels = np.searchsorted(starts, hi, side="left") - np.searchsorted(starts, lo, side="left")
    out = pd.DataFrame(
        {"step": windows["step"].to_numpy(dtype=np.int64), "gpu_start_ns": lo, "gpu_end_ns": hi, "kernels": kernels}
    )
    out.attrs["by_time"] = True
    return out


def step_breakdown(trace, gaps: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    """Per step: window length, busy, and idle by cause (all ns); one row "all" when there are no steps."""
    s, e = tl.merge(trace.gpu["ts_ns"].to_numpy(), trace.gpu["end_ns"].to_numpy())
    win = step_gpu_windows(trace, windows)
    if not len(win):
        win = pd.DataFrame(
            {"step": [-1], "gpu_start_ns": [int(s.min())], "gpu_end_ns": [int(e.max())], "kernels": [len(trace.gpu)]}
        )
    g_s, g_e, cause = gaps["start_ns"].to_numpy(), gaps["end_ns"].to_numpy(), gaps["cause"].to_numpy()
    lo, hi = win["gpu_start_ns"].to_numpy(dtype=np.int64), win["gpu_end_ns"].to_numpy(dtype=np.int64)
    columns = {
        "step": win["step"].to_numpy(dtype=np.int64),
        "step_ns": (hi - lo).astype(np.float64),
        "busy_ns": tl.clip_sums(s, e, lo, hi).astype(np.float64),
        "kernels": win["kernels"].to_numpy(dtype=np.int64),
    }
    for c in tl.GAP_CAUSES:
        m = cause == c
        columns[f"idle_{c}_ns"] = tl.clip_sums(g_s[m], g_e[m], lo, hi).astype(np.float64)
    if win.attrs.get("by_time"):  # a host window also holds idle before its first GPU work: no gap, no cause either
        known = sum(columns[f"idle_{c}_ns"] for c in tl.GAP_CAUSES if c != "unlinked")
        columns["idle_unlinked_ns"] = np.maximum(columns["step_ns"] - columns["busy_ns"] - known, 0.0)
    return pd.DataFrame(columns)
