"""The step-time budget: per rank, the median steady step (and the slow steps, and the traced steps) split into
parts that add up to it, with the steps kept apart and the slow steps (docs/step-budget.md).

A step's wall time (``step_ms`` of the step table) is GPU busy (compute, copies and memsets, collectives) plus GPU
idle for a named cause: waiting for input (``input_ms``, the loop blocked in the DataLoader), host syncs,
launch-bound host work, the allocator (cudaMalloc/cudaFree), waiting on other streams, gpudiag's own trace window;
what none of them explains is ``unexplained``, the remainder, shown. Busy and the idle causes come from the trace
(the idle and sync analyzers' per-step figures over the traced steps: diagnose.derive.traced_step_parts); input
wait from every step that measured it. Each part says which steps it was measured in: nothing is scaled from one
set of steps to another, unless the parts would not fit the step they explain; then they keep their shares and are
scaled down to fill it, and say so (fit_to_step).

Traced steps run inside gpudiag's profiler and are slower by design: their excess over the steady median is
gpudiag's (it shows in the trace as host-launch idle, and is taken out of that part), never the script's. Warm-up
steps are kept out of every figure and reported on their own, and so are later steps that compiled or met a new
input shape (diagnose.derive.kept_apart_steps). Slow steps that recur are searched by
diagnose.derive.periodic_work.

The budget is worked out once per report, by ``Derived.step_budget()``; the step_budget analyzer judges it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pandas as pd

from diagnose.derive.host_phases import backward_lines, host_phases
from diagnose.derive.input_stalls import input_stalls
from diagnose.derive.jit_dispatch_samples import jit_dispatch_samples
from diagnose.derive.kept_apart_steps import COMPILATION, NEW_SHAPE, add_compile_meta, add_new_shape_meta, work_of
from diagnose.derive.periodic_work import slow_step_period
from diagnose.derive.trace_step_rows import trace_step_table
from diagnose.derive.trace_view import TraceView
from diagnose.derive.traced_step_parts import traced_steps
from diagnose.ingest.profile_data import Profile, run_marks_of
from diagnose.thresholds import Thresholds

# (part, label, GPU busy?) in the order a budget is shown; the parts of one budget add up to its wall time
PARTS = (
    ("compute", "GPU busy: compute", True),
    ("memcpy", "GPU busy: copies and memsets", True),
    ("collective", "GPU busy: collectives", True),
    ("input", "GPU idle: waiting for input (DataLoader or the loop's iterator)", False),
    ("sync", "GPU idle: held by host syncs", False),
    ("launch_bound", "GPU idle: launch-bound host work", False),
    ("allocator", "GPU idle: allocator (cudaMalloc/cudaFree)", False),
    ("other_wait", "GPU idle: waiting on other streams or events", False),
    ("trace_window", "gpudiag's own trace window", False),
    ("unexplained", "unexplained", False),
)
TRACE_PARTS = ("compute", "memcpy", "collective", "sync", "launch_bound", "allocator", "other_wait")
HOST_CAUSED_SHARE = 0.5  # traced idle (outside syncs and other streams) this host-caused: the rest is host work
# parts measured in other steps than a budget's own may add up to more than its step; beyond this share of it they
# are scaled down to fit (below it the overshoot is rounding: 0.0005 ms of torchrun_mlp's 2.04 ms median step)
FIT_TOLERANCE_SHARE = 0.001


TRACED_STEPS = "traced_steps"  # the per-rank part's name (Derived.rank_part)


class SharedTables(Protocol):
    """What the budget reads from the report's Derived (diagnose.derive.derived, which imports this module)."""

    traces: dict[int, TraceView]

    def step_table(self) -> pd.DataFrame: ...

    def rank_part(self, analyzer: str, rank: int, compute: Callable[[], Any]) -> Any: ...

    def trace_window(self) -> range | None: ...

    def source_dirs(self) -> list[str]: ...

    def rank_calls(self, rank: int) -> tuple[pd.DataFrame, float, int]: ...

    def work_split(self, rank: int) -> tuple[pd.DataFrame | None, pd.DataFrame | None]: ...


@dataclass(frozen=True)
class StepBudget:
    """The budget of every rank that has step rows, as tables and per-rank notes.

    ``ranks``: per rank with step rows, in rank order, what was kept apart (warm-up, gpudiag's trace window,
    compiles, new shapes), the median, the slow steps and their period, which parts were not measured (``notes``):
    the result's meta. ``budget``: a row per (rank, budget, part), empty when no rank has a steady step;
    ``slow_steps``: the slowest steady steps of each rank with a budget; ``traced_steps``: the traced steps' parts
    (None: no rank has any); ``traced_by_rank`` and ``sync_calls``: per rank with a budget, its traced steps (their
    attrs say ``by_time`` and ``input_iterator``) and the sync calls in them."""

    ranks: dict[int, dict] = field(default_factory=dict)
    budget: pd.DataFrame = field(default_factory=pd.DataFrame)
    slow_steps: pd.DataFrame | None = None
    traced_steps: pd.DataFrame | None = None
    traced_by_rank: dict[int, pd.DataFrame] = field(default_factory=dict)
    sync_calls: dict[int, pd.DataFrame] = field(default_factory=dict)

    def copy(self) -> StepBudget:
        """A copy its reader may change: the Derived keeps the original."""
        return StepBudget(
            copy.deepcopy(self.ranks),
            self.budget.copy(),
            None if self.slow_steps is None else self.slow_steps.copy(),
            None if self.traced_steps is None else self.traced_steps.copy(),
            {rank: t.copy() for rank, t in self.traced_by_rank.items()},
            {rank: c.copy() for rank, c in self.sync_calls.items()},
        )


def step_budget(profile: Profile, derived: SharedTables, th: Thresholds = Thresholds()) -> StepBudget:
    """Every rank's budget, from the run's step rows (gpudiag's step records, or a CSV/JSON of step timings) and its
    traced steps; a trace captured elsewhere, with no step rows, gets a budget from its own steps, and none of them
    is gpudiag's trace window. No step rows at all: an empty StepBudget."""
    steps = derived.step_table()
    window = derived.trace_window()
    from_trace = not len(steps) and bool(derived.traces)
    if from_trace:  # a trace captured elsewhere: its own steps are the budget's, and no step is gpudiag's window
        steps, window = trace_step_table(derived.traces, derived.source_dirs(), th, derived.rank_part), None
    if not len(steps):
        return StepBudget()
    ranks, budgets, slow_tables, traced_tables, traced_by_rank, calls_by_rank = {}, [], [], [], {}, {}
    for rank, rows in steps.groupby("rank"):
        rank = int(rank)
        rank_meta, budget, slow, traced, calls = rank_budget(
            profile, derived, rank, rows.reset_index(drop=True), window, th, own_window=not from_trace
        )
        ranks[rank] = rank_meta
        if budget is None:
            continue
        budgets.append(budget)
        slow_tables.append(slow)
        if len(traced):
            traced_tables.append(traced)
        traced_by_rank[rank] = traced
        calls_by_rank[rank] = calls
    if not budgets:
        return StepBudget(ranks)
    return StepBudget(
        ranks,
        pd.concat(budgets, ignore_index=True),
        pd.concat(slow_tables, ignore_index=True),
        pd.concat(traced_tables, ignore_index=True) if traced_tables else None,
        traced_by_rank,
        calls_by_rank,
    )


def rank_budget(
    profile: Profile,
    derived: SharedTables,
    rank: int,
    rows: pd.DataFrame,
    window: range | None,
    th: Thresholds,
    own_window: bool = True,
):
    """(meta, budget rows, slow-step rows, traced-step rows, sync calls) of one rank; budget None without steady steps.

    ``rows``: the rank's step rows (the step table's, or trace_step_table's); ``window``: the steps gpudiag's trace
    window covered.

    ``own_window``: the traced steps ran inside gpudiag's trace window (their excess over the median is
    gpudiag's); False for a trace captured elsewhere."""
    rows = rows.assign(wall_ms=budget_wall_ms(rows))
    instrumented = rows["instrumented"].fillna(False).astype(bool) if "instrumented" in rows else rows["warmup"] & False
    warm = rows["warmup"] & ~instrumented
    every_compile = work_of(profile.work_records.get(rank), rank, COMPILATION)
    compiles = every_compile[every_compile["step"] >= rows["step"].min()]  # before the first step: the run budget's
    compiled_before = set(every_compile.loc[every_compile["step"] < rows["step"].min(), "name"].dropna())
    compiled = rows["step"].isin(compiles["step"]) & ~rows["warmup"]  # compiled after warm-up: kept apart too
    shapes = work_of(profile.work_records.get(rank), rank, NEW_SHAPE)
    new_shaped = rows["step"].isin(shapes["step"]) & ~rows["warmup"] & ~compiled  # a compile explains it first
    steady = rows[~rows["warmup"] & ~compiled & ~new_shaped]
    meta = {
        "warmup_steps": int(warm.sum()),
        "warmup_ms": float(rows.loc[warm, "wall_ms"].sum()),
        "warmup_step_numbers": [int(s) for s in rows.loc[warm, "step"]],
        "instrumented_steps": int(instrumented.sum()),
        "instrumented_ms": float(rows.loc[instrumented, "wall_ms"].sum()),
        "instrumented_step_numbers": [int(s) for s in rows.loc[instrumented, "step"]],
        "steady_steps": int(len(steady)),
        "notes": [],
    }
    add_compile_meta(meta, compiles, rows, warm, compiled, compiled_before)
    meta["new_shape_steps"] = int(new_shaped.sum())
    meta["new_shape_step_numbers"] = [int(s) for s in rows.loc[new_shaped, "step"]]
    meta["new_shape_steps_wall_ms"] = float(rows.loc[new_shaped, "wall_ms"].sum())
    step_ms = steady["wall_ms"].dropna()
    if not len(step_ms):
        return meta, None, None, pd.DataFrame(), pd.DataFrame()
    median_ms = float(step_ms.median())
    meta["median_step_ms"] = median_ms
    meta["steady_total_ms"] = float(step_ms.sum())
    meta["input_stalls"] = input_stalls(steady, getattr(profile, "loaders", None), rank, median_ms, th)
    meta["jit_dispatch"] = jit_dispatch_samples(steady)  # JAX: sampled dispatch and readiness (issue 34); None: none
    # "perfetto": XLA's trace (JAX), whose host work is dispatch; read from the header a cluster read keeps light
    meta["trace_format"] = getattr(profile.trace_header(rank), "format", None) if rank in profile.traces else None
    add_new_shape_meta(meta, shapes, rows[new_shaped], median_ms, th)
    input_ms = pd.to_numeric(rows["input_ms"], errors="coerce") if "input_ms" in rows else pd.Series(np.nan, rows.index)
    steady_input = input_ms[steady.index].dropna()
    meta["input_measured_steps"] = int(len(steady_input))
    if not len(steady_input):
        meta["notes"].append(
            "input wait not measured: the step timings carry no `input_ms` (time the loop blocked in the "
            "DataLoader); it is not taken as 0: it stays in the unexplained part, or in the host work inferred "
            "from the traced steps"
        )

    def traced_of_rank():
        return traced_steps(
            derived.traces.get(rank),
            rank,
            rows,
            input_ms,
            window if own_window else rows["step"].tolist(),
            median_ms if own_window else None,
            th,
            derived.source_dirs(),
            derived.rank_calls,
        )

    # from the rank's trace alone (its step rows are its own): a cluster's worker works it out (diagnose.cluster)
    traced, calls = (
        derived.rank_part(TRACED_STEPS, rank, traced_of_rank) if rank in derived.traces else traced_of_rank()
    )
    traced, calls = traced.copy(), calls.copy()
    if len(traced) and not own_window:  # a trace's own warm-up steps are kept out of its traced parts too
        traced = traced[~traced["run_step"].isin(meta["warmup_step_numbers"])].reset_index(drop=True)
        calls = calls[~calls["run_step"].isin(meta["warmup_step_numbers"])] if len(calls) else calls
    typical = {p: float(traced[f"{p}_ms"].median()) for p in TRACE_PARTS} if len(traced) else {}
    host_share = traced_host_share(traced) if len(traced) else None
    traced_where = describe_steps(traced) if len(traced) else None
    meta["traced_named_steps"] = named_steps(traced) if len(traced) else []
    if not len(traced):
        meta["notes"].append(
            "GPU busy, syncs, launch-bound work and the allocator were not measured: no trace with GPU activity "
            "and step marks for this rank"
        )
    elif traced.attrs.get("by_time"):
        meta["notes"].append(
            "syncs, launch-bound work, the allocator and waits on other streams were not measured: the trace links "
            "no GPU work to its launch calls (JAX/XLA traces do not), so its GPU idle has no readable cause; GPU "
            "busy is the GPU work inside each traced step's host window"
        )

    slow_mask = steady["wall_ms"] > th.step_budget.slow_factor * median_ms
    slow = steady[slow_mask]
    meta["slow_steps"] = int(len(slow))
    seg_counts = segment_events_per_step(profile, rank, rows)

    median_input = float(steady_input.median()) if len(steady_input) else np.nan
    median_input_where = f"{len(steady_input)} steady steps" if len(steady_input) else None
    # the host's typical step by phase (issue 31; None: not measured), its input the budget's median input
    meta["host_phases"] = phases = host_phases(steady, median_input if len(steady_input) else None)
    if phases is not None and phases.get("backward_passes", 1) > 1:  # accumulation, or backward() from several lines
        phases["backward_lines"] = backward_lines(run_marks_of(profile, rank).get("phase_sites"))
    iterator = traced.attrs.get("input_iterator") if len(traced) else None
    from_loop = "input_from" in rows and bool((rows.loc[steady.index, "input_from"] == "loop").any())
    if from_loop:  # light mode timed the loop's for statement (Python 3.12+): no DataLoader
        meta["input_from_loop"] = True
        meta["input_iterator"] = iterator or "its iterator (the training loop's for statement)"
    if iterator and not from_loop:  # no DataLoader: the loop's own iterator, timed in the traced steps' Python frames
        meta["input_iterator"] = iterator
        meta["notes"] = [n for n in meta["notes"] if not n.startswith("input wait not measured")]
        if not len(steady_input):
            meta["notes"].append(
                f"input wait measured in the traced steps only: the loop fetches its batches from {iterator}, "
                "not from a torch DataLoader, whose fetches light mode times in every step"
            )
        traced_input = traced["input_in_window_ms"].dropna()
        if not len(steady_input) and len(traced_input):
            median_input = float(traced_input.median())
            median_input_where = f"{traced_where}, in the loop's iterator {iterator}"
    out = []
    out += budget_column(
        rank,
        "median step",
        median_ms,
        int(len(step_ms)),
        median_input,
        median_input_where,
        typical,
        traced_where,
        0.0,
        host_share,
    )
    if len(slow):
        slow_input = input_ms[slow.index].dropna()
        out += budget_column(
            rank,
            "slow steps",
            float(slow["wall_ms"].median()),
            int(len(slow)),
            float(slow_input.median()) if len(slow_input) else np.nan,
            f"{len(slow_input)} slow steps" if len(slow_input) else None,
            typical,
            traced_where + ", not in the slow steps" if traced_where else None,
            0.0,
            host_share,
        )
    if len(traced):
        traced_input = traced["input_in_window_ms"].dropna()
        out += budget_column(
            rank,
            "traced steps",
            float(traced["wall_ms"].median()),
            int(len(traced)),
            float(traced_input.median()) if len(traced_input) else np.nan,
            traced_where if len(traced_input) else None,
            typical,
            traced_where,
            float(traced["trace_window_ms"].median()),
        )
    budget = pd.DataFrame(out)
    factor = float(budget.loc[budget["column"] == "median step", "fit_factor"].iloc[0])
    if factor < 1 and len(traced):
        busy = sum(typical.get(p, 0.0) for p in ("compute", "memcpy", "collective"))
        why = (
            f"their GPU busy alone ({busy:,.3f} ms) is longer than it: they did more work than the median step "
            "(a larger batch, say)"
            if busy > median_ms
            else "their idle parts read high inside gpudiag's profiler"
        )
        meta["notes"].append(
            f"the parts measured in {traced_where} add up to more than the median steady step ({median_ms:,.3f} ms): "
            f"{why}; they are scaled by {factor:.3f} to fill it, each keeping its share of what was measured"
        )

    slow_rows = slow[["rank", "step", "host_ms", "gpu_ms", "wall_ms"]].copy()
    slow_rows["over_median_ms"] = slow_rows["wall_ms"] - median_ms
    slow_rows["input_ms"] = input_ms[slow.index].to_numpy()
    slow_rows["segment_events"] = slow_rows["step"].map(seg_counts).fillna(0).astype(int) if seg_counts else 0
    period, slow_rows["on_period"] = slow_step_period(
        derived.work_split(rank)[0],
        rank,
        steady,
        slow_mask,
        slow_rows,
        steady_input,
        traced,
        median_ms,
        th,
    )
    if period is not None and period["period"] is not None:
        meta["period_steps"] = period["period"]
    meta["period"] = period
    meta["slow_step_numbers"] = [int(s) for s in slow_rows["step"].head(th.step_budget.max_slow_steps)]
    slow_rows = slow_rows.sort_values("wall_ms", ascending=False).head(th.step_budget.max_slow_steps)
    return meta, budget, slow_rows.reset_index(drop=True), traced, calls


def budget_wall_ms(rows: pd.DataFrame) -> pd.Series:
    """A step's cost on the critical path: the longer of its host time and its GPU time (CUDA events).

    A GPU-bound step's host time only queues work (the host runs ahead), a host-bound step's GPU time
    waits on the host: the longer one is what the step costs, and what GPU busy plus GPU idle add up to.
    """
    host = pd.to_numeric(rows["host_ms"], errors="coerce")
    gpu = pd.to_numeric(rows["gpu_ms"], errors="coerce")
    return pd.Series(np.fmax(host.to_numpy(), gpu.to_numpy()), index=rows.index).fillna(rows["step_ms"])


def budget_column(
    rank: int,
    column: str,
    wall_ms: float,
    steps: int,
    input_ms: float,
    input_where: str | None,
    typical: dict,
    traced_where: str | None,
    trace_window_ms: float,
    host_share: float | None = None,
) -> list[dict]:
    """One budget: a row per part whose ``ms`` add up to ``wall_ms`` (unexplained is the remainder).

    ``host_share``: of the traced steps' GPU idle outside syncs and other streams, the share during which the
    GPU waited for the host (host-gap idle). When it is most of it, the GPU idle this budget's step has left
    after its measured causes is host work too (launch calls, Python, CPU ops between the loader and the
    launches), and is counted as launch-bound host work rather than unexplained: the traced steps measure
    its cause, not its size, which varies step to step (a traced step's own launch-bound time is the
    traced column's)."""
    values = {p: typical.get(p, np.nan) for p in TRACE_PARTS}
    values["input"] = input_ms
    values["trace_window"] = trace_window_ms
    where = {p: traced_where for p in TRACE_PARTS}
    where["input"] = input_where
    where["trace_window"] = traced_where if column == "traced steps" else "not in these steps (not traced)"
    known = sum(v for v in values.values() if np.isfinite(v))
    if host_share is not None and host_share >= HOST_CAUSED_SHARE and column != "traced steps" and wall_ms > known:
        values["launch_bound"] = (values["launch_bound"] if np.isfinite(values["launch_bound"]) else 0.0) + (
            wall_ms - known
        )
        where["launch_bound"] = (
            f"inferred: the step's GPU idle left after the measured causes, host-caused as in {traced_where}"
        )
        known = wall_ms
    fit_factor = 1.0
    if wall_ms > 0 and known > wall_ms * (1 + FIT_TOLERANCE_SHARE):
        fit_factor = fit_to_step(values, where, wall_ms)
        known = wall_ms
    values["unexplained"] = wall_ms - known
    where["unexplained"] = "the remainder"
    rows = []
    for part, label, busy in PARTS:
        ms = values[part]
        rows.append(
            {
                "rank": rank,
                "column": column,
                "wall_ms": wall_ms,
                "steps": steps,
                "part": part,
                "label": label,
                "gpu_busy": busy,
                "ms": ms,
                "shown_ms": max(ms, 0.0) if np.isfinite(ms) else np.nan,
                "share": ms / wall_ms if np.isfinite(ms) and wall_ms > 0 else np.nan,
                "measured_in": (where[part] if np.isfinite(ms) else None) or "not measured",
                "fit_factor": fit_factor,
            }
        )
    return rows


def fit_to_step(values: dict, where: dict, wall_ms: float) -> float:
    """Scale the parts down so they fill ``wall_ms``, in place; the factor, which says so in ``where``.

    Parts taken as medians over other steps (the traced ones) need not fit the step a budget explains: in
    fixtures/runs/mem_churn every step trains on a batch of another length (10 lengths in turn), and the two traced
    steps' GPU busy alone, 31.94 ms, is longer than the 27.6 ms median steady step. The traced steps then tell the
    step's mix, not its size: each part keeps its share of what was measured. An input wait measured in the
    budget's own steps is kept as it is when it fits; the other parts share the rest."""
    keep_input = bool(np.isfinite(values["input"]) and 0 <= values["input"] <= wall_ms)
    scaled = [p for p, v in values.items() if np.isfinite(v) and not (p == "input" and keep_input)]
    room = wall_ms - (values["input"] if keep_input else 0.0)
    total = sum(values[p] for p in scaled)
    factor = room / total if total > 0 else 0.0
    for p in scaled:
        if values[p] > 0:
            where[p] = f"{where[p]}, scaled down to fit the step"
        values[p] *= factor
    return factor


def traced_host_share(traced: pd.DataFrame) -> float | None:
    """Of the traced steps' GPU idle outside syncs and other streams' waits, the share that was host-caused
    (the GPU waited for the host: input, allocator calls, launches, gpudiag's excess)."""
    busy = traced["compute_ms"] + traced["memcpy_ms"] + traced["collective_ms"]
    idle = (traced["wall_ms"] - busy - traced["sync_raw_ms"] - traced["other_wait_ms"]).clip(lower=0).sum()
    host = (traced["allocator_ms"] + traced["trace_window_ms"] + traced["launch_bound_ms"]).sum()
    host += np.minimum(traced["input_ms"].fillna(0.0), traced["wall_ms"]).sum()
    return float(min(host / idle, 1.0)) if idle > 0 else None


def describe_steps(traced: pd.DataFrame) -> str:
    mapped = traced["run_step"][traced["run_step"] >= 0]
    if len(mapped) == len(traced):
        return "traced steps " + step_ranges(mapped.tolist())
    return f"{len(traced)} traced steps (trace numbering {step_ranges(traced['trace_step'].tolist())})"


def named_steps(traced: pd.DataFrame) -> list[int]:
    """The step numbers describe_steps names: the run's, or the trace's own when some traced step has no run step."""
    mapped = traced["run_step"][traced["run_step"] >= 0]
    numbers = mapped if len(mapped) == len(traced) else traced["trace_step"]
    return sorted(int(n) for n in numbers)


def step_ranges(numbers: list[int]) -> str:
    """[4, 5, 6, 9] as '4–6, 9'."""
    out, run = [], []
    for n in sorted(int(x) for x in numbers):
        if run and n == run[-1] + 1:
            run.append(n)
            continue
        if run:
            out.append(f"{run[0]}–{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [n]
    if run:
        out.append(f"{run[0]}–{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(out)


def segment_events_per_step(profile: Profile, rank: int, rows: pd.DataFrame) -> dict[int, int]:
    """Segment allocations/frees the allocator history saw inside each step (by time), {} without a history."""
    snap = profile.snapshots.get(rank)
    if snap is None or not len(getattr(snap, "trace", ())) or "t_start_ns" not in rows:
        return {}
    hist = snap.trace
    seg = hist[hist["action"].astype(str).str.startswith(("segment_", "empty_cache"))]
    starts = pd.to_numeric(rows["t_start_ns"], errors="coerce").to_numpy(dtype=float)
    ends = starts + rows["wall_ms"].to_numpy(dtype=float) * 1e6
    if not len(seg) or not np.isfinite(starts).any():
        return {}
    t_ns = pd.to_numeric(seg["t_us"], errors="coerce").to_numpy(dtype=float) * 1e3
    order = np.argsort(starts)
    k = np.searchsorted(starts[order], t_ns, side="right") - 1
    counts: dict[int, int] = {}
    for t, kk in zip(t_ns, k):
        if kk < 0 or not np.isfinite(t):
            continue
        i = order[kk]
        if t < ends[i]:
            step = int(rows["step"].iloc[i])
            counts[step] = counts.get(step, 0) + 1
    return counts
