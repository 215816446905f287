"""Step rows made from each rank's trace, for a trace captured elsewhere (no run folder, no step records).

The step budget explains the run's steps; a trace that comes without step records still has steps of its own
(ProfilerStep ranges or inferred iterations), and these rows stand in for the step table then, with the columns
the budget reads (diagnose.derive.step_budget_table).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from diagnose.derive import trace_timeline as tl
from diagnose.derive.step_gpu_breakdown import step_gpu_windows
from diagnose.derive.trace_input_wait import input_wait_per_step
from diagnose.thresholds import Thresholds

STEP_ROWS = "step_rows"  # its per-rank part's name (Derived.rank_part)


def trace_step_table(
    traces: dict, source_dirs: list[str], th: Thresholds = Thresholds(), rank_part: Callable | None = None
) -> pd.DataFrame:
    """Step rows made from each rank's trace (``traces``: rank → TraceView; ProfilerStep ranges or inferred
    iterations): host_ms is the step's host window; input_ms the time inside DataLoader fetch ranges and the
    loop's other iterators' fetches (trace_input_wait, frame file names looked for under ``source_dirs``).

    Warm-up: the run's first ``warmup_steps`` iterations, when the trace holds them (ProfilerStep#0-2 of a
    profiler started with the loop, or inferred iterations 0-2), at most half the trace's steps, as the steps
    analyzer does for step records. A profiler schedule that skipped them (steps from #3 on) leaves none out.
    The real convnet trace's step 0 took 995 ms of a 3.8 ms median and had read as a slow, periodic step.

    ``rank_part``: Derived.rank_part, which gives each rank's rows where a cluster's worker worked them out."""
    frames = []
    for rank in sorted(traces):  # one rank at a time: a cluster read holds one rank's tables
        compute = lambda r=rank: rank_step_rows(traces[r], r, source_dirs, th)  # noqa: E731
        rows = rank_part(STEP_ROWS, rank, compute) if rank_part is not None else compute()
        if rows is not None:
            frames.append(rows)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def rank_step_rows(trace, rank: int, source_dirs: list[str], th: Thresholds = Thresholds()) -> pd.DataFrame | None:
    """One rank's step rows from its trace alone (None: the whole trace is no step)."""
    dirs = source_dirs
    trace = tl.analysed(trace)  # the steps the traced budget reads (the last ProfilerStep left out, as HTA does)
    windows = tl.steps(trace)
    if len(windows) < 2:  # the whole trace is no step
        return None
    host_ms = (windows["cpu_end_ns"] - windows["cpu_start_ns"]).to_numpy(dtype=float) / 1e6
    input_ms = input_wait_per_step(trace, windows, dirs).to_numpy()
    numbers = windows["step"].to_numpy(dtype=np.int64)
    warmup = (numbers < th.steps.warmup_steps) & (np.arange(len(numbers)) < len(numbers) // 2)
    # the step's GPU window (idle's, from the previous step's last GPU work to the end of its own): a GPU-bound
    # step lasts that long though its host window only queued the work (sync_free: 5.0 ms busy, 2.8 ms host)
    gwin = step_gpu_windows(trace, windows).set_index("step") if len(trace.gpu) else pd.DataFrame()
    gpu_ms = (
        ((gwin["gpu_end_ns"] - gwin["gpu_start_ns"]) / 1e6).reindex(numbers).to_numpy(dtype=float)
        if len(gwin)
        else np.full(len(numbers), np.nan)
    )
    return pd.DataFrame(
        {
            "rank": int(rank),
            "step": numbers,
            "name": "step",
            "host_ms": host_ms,
            "gpu_ms": gpu_ms,
            "step_ms": host_ms,
            "input_ms": input_ms,
            "warmup": warmup,
            "instrumented": False,
        }
    )
