"""Why a step is slow: the median and the slow steps' wall time split into GPU busy and GPU idle by cause.

A step's wall time (``step_ms`` of the steps analyzer) is GPU busy (compute, copies and memsets,
collectives) plus GPU idle for a named cause: waiting for input (``input_ms``, the loop blocked in
the DataLoader), host syncs, launch-bound host work, the allocator (cudaMalloc/cudaFree), waiting on
other streams, gpudiag's own trace window; what none of them explains is ``unexplained``, the
remainder, shown. Busy and the idle causes come from the trace (the idle and sync analyzers'
per-step figures over the traced steps); input wait from every step that measured it. Each part
says which steps it was measured in: nothing is scaled from one set of steps to another, unless the parts would not
fit the step they explain; then they keep their shares and are scaled down to fill it, and say so (fit_to_step).

Traced steps run inside gpudiag's profiler and are slower by design: their excess over the steady
median is gpudiag's (it shows in the trace as host-launch idle, and is taken out of that part), never
the script's. Warm-up steps are kept out of every figure and reported on their own, and so are later steps that
compiled (light mode's compilation records: a JAX jit or torch.compile compiling again for a new shape), named
with the function and line (``step_budget.compilation``), and later steps that met a new input shape (light
mode's new-shape records: cuDNN autotuning with cudnn.benchmark, allocator growth), named with the shape when
slow (``step_budget.new_shape``). Slow steps that recur every N steps are named with
what waits there (docs/step-budget.md).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.derive import capture_advice
from diagnose.derive import trace_timeline as tl
from diagnose.derive.derived import Derived
from diagnose.derive.step_gpu_breakdown import step_breakdown, step_gpu_windows
from diagnose.derive.sync_sites import advice_for, group_syncs, where_words
from diagnose.findings import Evidence, Finding, Result, Severity, Subject, not_measured, within
from diagnose.formatting import ms_human, n_things, share_human
from diagnose.ingest.profile_data import Profile
from diagnose.metrics import LOWER, NEUTRAL, Metric, rank_key
from diagnose.thresholds import Thresholds
from parsers.events import WORK_SCHEMA

NAME = "step_budget"
ORDER = 45
SECTION = "section-step_budget"
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
# a traced step's columns a trace that links no GPU work to its launch calls cannot measure (its GPU idle has no cause)
UNLINKED_PARTS = (
    "sync_ms",
    "sync_raw_ms",
    "launch_bound_ms",
    "allocator_ms",
    "other_wait_ms",
    "trace_window_ms",
)
MAX_PERIOD_STEPS = 5000  # longest period looked for (an epoch of 5,000 steps)
HOST_CAUSED_SHARE = 0.5  # traced idle (outside syncs and other streams) this host-caused: the rest is host work
# parts measured in other steps than a budget's own may add up to more than its step; beyond this share of it they
# are scaled down to fit (below it the overshoot is rounding: 0.0005 ms of torchrun_mlp's 2.04 ms median step)
FIT_TOLERANCE_SHARE = 0.001
CAUSES = ("input", "sync", "launch_bound", "allocator")  # the parts that are findings of their own
SUMMARY_METRICS = (  # what analyze() writes into Result.summary, plain for the lowest rank, else rank<N>.<key>
    Metric("step_budget_step_ms", "Median steady step (budget)", "ms", LOWER, 0.001),
    Metric("step_budget_{part}_ms", "Median step budget: {part}", "ms", NEUTRAL, 0.001),
    Metric("step_budget_warmup_steps", "Warm-up steps kept apart", "count", NEUTRAL, 1),
    Metric("step_budget_warmup_ms", "Warm-up steps' total time", "ms", LOWER, 0.001),
    Metric("step_budget_compile_steps", "Steps after warm-up that compiled, kept apart", "count", LOWER, 1),
    Metric("step_budget_compile_ms", "Compilation after warm-up, in all", "ms", LOWER, 0.001),
    Metric("step_budget_new_shape_steps", "Steps after warm-up with a new input shape", "count", LOWER, 1),
    Metric("step_budget_instrumented_steps", "Steps inside gpudiag's trace window", "count", NEUTRAL, 1),
    Metric("step_budget_slow_steps", "Slow steady steps", "count", LOWER, 1),
    Metric("step_budget_period_steps", "Period of recurring slow steps", "count", NEUTRAL, 1),
)
FINDING_IDS = (  # every id this analyzer can produce: `gpudiag check --ignore` validates against them
    "step_budget.allocator",
    "step_budget.compilation",
    "step_budget.input",
    "step_budget.launch_bound",
    "step_budget.new_shape",
    "step_budget.not_measured",
    "step_budget.periodic",
    "step_budget.sync",
    "step_budget.unexplained",
)
ALLOCATOR_CALLS = ("cudaMalloc", "cudaFree", "cuMemCreate", "cuMemMap", "cuMemUnmap", "cuMemRelease", "cuMemSetAccess")
ADVICE = {
    "input": "Feed the GPU faster: DataLoader(num_workers=N) with more workers, pin_memory=True, "
    "persistent_workers=True and a larger prefetch_factor; move augmentation onto the GPU (torchvision.transforms.v2 "
    "on CUDA tensors, DALI) so workers only decode.",
    "launch_bound": "The GPU waits for the host to launch work: capture the step in a CUDA graph "
    "(torch.cuda.graphs, torch.compile(mode='reduce-overhead')), fuse small kernels with torch.compile, or use "
    "larger batches so each launch carries more work.",
    "allocator": "Segments are created and freed inside steps, and each cudaMalloc/cudaFree stalls: set "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, do not call torch.cuda.empty_cache() in the loop, and keep "
    "tensor shapes steady so cached blocks are reused.",
    "input_iterator": "Build batches ahead of the loop instead of in its own thread: wrap the same code in an "
    "IterableDataset and a DataLoader(num_workers=N, pin_memory=True), or fill a queue from a background thread; "
    "move augmentation onto the GPU so the host only decodes.",
    "unexplained": "Part of the step is not explained by anything measured: profile with `gpudiag profile` (it "
    "records input wait and traces some steps), and trace more steps (--trace-steps) to measure GPU busy and idle.",
}
KEPT_APART_KEYS = (  # meta keys that go into the summary as step_budget_<key>
    "warmup_steps",
    "warmup_ms",
    "compile_steps",
    "compile_ms",
    "new_shape_steps",
    "instrumented_steps",
    "slow_steps",
    "period_steps",
)
PERIOD_CANDIDATES = "evaluation, checkpoint saving or logging every N steps"
CHECKPOINT, EVALUATION, COMPILATION, NEW_SHAPE = "checkpoint", "evaluation", "compilation", "new-shape"  # ``what``
ADVICE["compilation"] = (
    "Keep input shapes static so the function compiles once: pad batches to one length or to a few bucket sizes, "
    "drop or pad the last partial batch of an epoch (drop_last=True), and mark arguments that select code paths as "
    "static (jax.jit(static_argnames=...)). To see why it compiled: JAX `jax.config.update('jax_log_compiles', "
    "True)` (or JAX_LOG_COMPILES=1), torch `TORCH_LOGS=recompiles`. With torch.compile, compile once for varying "
    "sizes with torch.compile(dynamic=True) or torch._dynamo.mark_dynamic(tensor, dim)."
)
ADVICE["new_shape"] = (
    "Keep input shapes static so each step reuses what the first ones set up: drop_last=True in the DataLoader "
    "or pad the last batch of an epoch to the batch size, resize or crop images to fixed sizes (or to a few bucket "
    "sizes). When shapes must vary a lot, set torch.backends.cudnn.benchmark = False: cuDNN then picks its "
    "algorithms by heuristics instead of timing them for every new shape."
)
ADVICE["new_shape_no_cudnn"] = (
    "Keep input shapes static so each step reuses what the first ones set up: drop_last=True in the DataLoader "
    "or pad the last batch of an epoch to the batch size, resize or crop images to fixed sizes (or to a few bucket "
    "sizes), so the caching allocator and the kernels chosen for the first shape serve every step."
)
ADVICE["checkpoint"] = (
    "The checkpoint at {where} blocks training while it is written: save less often; save asynchronously "
    "(torch.distributed.checkpoint.async_save, or copy the state to CPU and write it from a background thread); "
    "write to fast local storage and copy it elsewhere afterwards."
)
ADVICE["evaluation"] = (
    "The evaluation that starts at {where} stops training while it runs: evaluate less often or on fewer batches, "
    "or in a separate process on a saved checkpoint; make sure it runs under torch.no_grad() or "
    "torch.inference_mode()."
)


def analyze(profile: Profile, derived: Derived, th: Thresholds = Thresholds()) -> Result:
    result = Result(NAME)
    steps = derived.step_table()
    window = derived.trace_window()
    from_trace = not len(steps) and bool(derived.traces)
    if from_trace:  # a trace captured elsewhere: its own steps are the budget's, and no step is gpudiag's window
        steps, window = trace_step_table(derived, th), None
    if not len(steps):
        result.findings.append(
            not_measured(
                NAME,
                "The step-time budget",
                capture_advice.advice(
                    profile,
                    "It needs per-step timings: run the script under `gpudiag profile`, or pass a CSV/JSON of step "
                    "timings (docs/step-timings.md).",
                    f"It needs per-step timings. {capture_advice.STEP_RECORDS}",
                    "events/",
                ),
                SECTION,
            )
        )
        return result
    lowest = int(steps["rank"].min())
    budgets, slow_tables, traced_tables, meta_ranks, calls_by_rank = [], [], [], {}, {}
    for rank, rows in steps.groupby("rank"):
        rank = int(rank)
        rank_meta, budget, slow, traced, calls = rank_budget(
            profile, derived, rank, rows.reset_index(drop=True), window, th, own_window=not from_trace
        )
        meta_ranks[rank] = rank_meta
        if budget is None:
            continue
        budgets.append(budget)
        slow_tables.append(slow)
        if len(traced):
            traced_tables.append(traced)
        calls_by_rank[rank] = calls
        median = budget[budget["column"] == "median step"]
        result.summary[rank_key(rank, lowest, "step_budget_step_ms")] = float(median["wall_ms"].iloc[0])
        for r in median.itertuples():
            if np.isfinite(r.ms):
                result.summary[rank_key(rank, lowest, f"step_budget_{r.part}_ms")] = float(r.ms)
        for k in KEPT_APART_KEYS:
            if rank_meta.get(k) is not None:
                result.summary[rank_key(rank, lowest, f"step_budget_{k}")] = float(rank_meta[k])
    result.meta["ranks"] = meta_ranks
    if not budgets:
        result.findings.append(
            not_measured(
                NAME,
                "The step-time budget",
                "Every step was warm-up or inside gpudiag's trace window: run more steps.",
                SECTION,
            )
        )
        return result
    budget = pd.concat(budgets, ignore_index=True)
    result.tables["budget"] = budget
    result.tables["slow_steps"] = pd.concat(slow_tables, ignore_index=True)
    if traced_tables:
        result.tables["traced_steps"] = pd.concat(traced_tables, ignore_index=True)
    result.findings.extend(cause_findings(budget, meta_ranks, calls_by_rank, th))
    result.findings.extend(periodic_findings(meta_ranks, calls_by_rank, th))
    result.findings.extend(compile_findings(meta_ranks, th))
    result.findings.extend(new_shape_findings(meta_ranks, th))
    return result


# ---------------------------------------------------------------- one rank


def trace_step_table(derived: Derived, th: Thresholds = Thresholds()) -> pd.DataFrame:
    """Step rows made from each rank's trace (ProfilerStep ranges or inferred iterations): host_ms is the step's
    host window; input_ms the time inside DataLoader fetch ranges and the loop's other iterators' fetches
    (trace_input_wait).

    Warm-up: the run's first ``warmup_steps`` iterations, when the trace holds them (ProfilerStep#0-2 of a
    profiler started with the loop, or inferred iterations 0-2), at most half the trace's steps, as the steps
    analyzer does for step records. A profiler schedule that skipped them (steps from #3 on) leaves none out.
    The real convnet trace's step 0 took 995 ms of a 3.8 ms median and had read as a slow, periodic step."""
    from diagnose.derive.trace_input_wait import input_wait_per_step

    frames, dirs = [], derived.source_dirs()
    for rank, trace in sorted(derived.traces.items()):
        trace = tl.analysed(trace)  # the steps the traced budget reads (the last ProfilerStep left out, as HTA does)
        windows = tl.steps(trace)
        if len(windows) < 2:  # the whole trace is no step
            continue
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
        frames.append(
            pd.DataFrame(
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
        )
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def rank_budget(
    profile: Profile,
    derived: Derived,
    rank: int,
    rows: pd.DataFrame,
    window: range | None,
    th: Thresholds,
    own_window: bool = True,
):
    """(meta, budget rows, slow-step rows, traced-step rows, sync calls) of one rank; budget None without steady steps.

    ``own_window``: the traced steps ran inside gpudiag's trace window (their excess over the median is
    gpudiag's); False for a trace captured elsewhere."""
    rows = rows.assign(wall_ms=budget_wall_ms(rows))
    instrumented = rows["instrumented"].fillna(False).astype(bool) if "instrumented" in rows else rows["warmup"] & False
    warm = rows["warmup"] & ~instrumented
    compiles = work_of(profile.work_records.get(rank), rank, COMPILATION)
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
    add_compile_meta(meta, compiles, rows, warm, compiled)
    meta["new_shape_steps"] = int(new_shaped.sum())
    meta["new_shape_step_numbers"] = [int(s) for s in rows.loc[new_shaped, "step"]]
    meta["new_shape_steps_wall_ms"] = float(rows.loc[new_shaped, "wall_ms"].sum())
    step_ms = steady["wall_ms"].dropna()
    if not len(step_ms):
        return meta, None, None, pd.DataFrame(), pd.DataFrame()
    median_ms = float(step_ms.median())
    meta["median_step_ms"] = median_ms
    meta["steady_total_ms"] = float(step_ms.sum())
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

    traced, calls = traced_steps(
        profile,
        derived,
        rank,
        rows,
        input_ms,
        window if own_window else rows["step"].tolist(),
        median_ms if own_window else None,
        th,
    )
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
    period = find_period(
        steady["step"].to_numpy(dtype=np.int64),
        slow_mask.to_numpy(),
        th,
        excess_ms=(steady["wall_ms"] - median_ms).clip(lower=0).fillna(0).to_numpy(dtype=float),
    )
    slow_rows["on_period"] = False
    if period is not None:
        n, k = period["period"], period["offset"]
        slow_rows["on_period"] = slow_rows["step"] % n == k
        on = slow_rows[slow_rows["on_period"]]
        period["excess_ms"] = float(on["wall_ms"].median() - median_ms)
        period["steps"] = [int(s) for s in on["step"]]
        # the steady steps on the period that were not slow, from its first slow step on (before it: the work had
        # not started); the title names them, never "every N steps" then
        quiet = steady.loc[(steady["step"] % n == k) & ~slow_mask, "step"]
        period["not_slow"] = [int(s) for s in quiet if s > period["steps"][0]]
        period["quiet_before"] = [int(s) for s in quiet if s < period["steps"][0]]
        on_input = on["input_ms"].dropna()
        period["input_ms"] = float(on_input.median()) if len(on_input) else None
        base_input = float(steady_input.median()) if len(steady_input) else 0.0
        period["input_wait"] = bool(
            len(on_input) and on_input.median() - base_input >= th.step_budget.period_input_share * period["excess_ms"]
        )
        seen = traced[traced["run_step"] % n == k] if len(traced) else traced
        period["traced_steps"] = [int(s) for s in seen["run_step"]] if len(seen) else []
        period["work"] = period_work(profile.work_records.get(rank), rank, period["steps"], period["excess_ms"], th)
        meta["period_steps"] = n
    else:
        period = recurring_work(profile.work_records.get(rank), rank, steady, slow_mask, median_ms, th)
        if period is not None:
            slow_rows["on_period"] = slow_rows["step"].isin(period["steps"])
            if period["period"] is not None:
                meta["period_steps"] = period["period"]
    meta["period"] = period
    meta["unexplained_advice"] = unexplained_advice(profile, meta, traced)
    meta["slow_step_numbers"] = [int(s) for s in slow_rows["step"].head(th.step_budget.max_slow_steps)]
    slow_rows = slow_rows.sort_values("wall_ms", ascending=False).head(th.step_budget.max_slow_steps)
    return meta, budget, slow_rows.reset_index(drop=True), traced, calls


def unexplained_advice(profile: Profile, meta: dict, traced: pd.DataFrame) -> str:
    """What would measure the part of the step nothing explains: ``gpudiag profile`` for an input captured
    elsewhere; for a run folder it wrote, what that run lacked (a traced step, input wait) and the option or code
    change that records it (diagnose.derive.capture_advice)."""
    if not capture_advice.from_run_folder(profile):
        return ADVICE["unexplained"]
    fixes = []
    if not len(traced):
        trace_steps = capture_advice.run_option(profile, "trace_steps")
        if trace_steps == 0:
            fixes.append(
                "this run traced no steps (--trace-steps 0; an --ncu run takes no trace): run it in light mode with "
                "--trace-steps 3 or more to measure GPU busy, syncs, launch-bound work and the allocator"
            )
        else:
            why = capture_advice.why_absent(profile, "trace/")
            fixes.append(
                f"no traced step with GPU activity{f' ({why})' if why else ''}: the trace window must hold steps that "
                "run on the GPU (--trace-start after warm-up, --trace-steps 3 or more)"
            )
    elif traced.attrs.get("by_time"):
        fixes.append(
            "the trace links no GPU work to its launch calls (JAX/XLA traces do not), so the GPU's idle time has no "
            "readable cause: mark each iteration with diagnose.step() and read the step timings and slow steps"
        )
    else:
        fixes.append(
            "the traced parts come from a few steps: trace more steps (--trace-steps, and --trace-start after warm-up) "
            "so they stand for the run"
        )
    if not meta.get("input_measured_steps") and not meta.get("input_iterator"):
        fixes.append(
            "input wait is recorded for batches from a torch DataLoader and, on Python 3.12+, for a for loop over an "
            "iterable; this loop used neither, so making a batch inline (a get_batch() call) counts as step work"
        )
    return "Part of the step is not explained by anything measured: " + "; ".join(fixes) + "."


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


def basis_evidence(measured_in: str, rank_meta: dict) -> tuple[Evidence, ...]:
    """The step figures a part's ``measured_in`` names, as evidence: how many steady steps measured it ("measured
    in 92 steady steps"), or how many traced steps and the first and last of them ("traced steps 10–12"), so a
    title that says where a part was measured carries its numbers (issue 28: every number a title shows is in its
    evidence)."""
    out: list[Evidence] = []
    if "steady steps" in measured_in:
        out.append(Evidence("step_budget_input_steps", float(rank_meta.get("input_measured_steps", 0)), "steps"))
    named = rank_meta.get("traced_named_steps") or []
    if "traced steps" in measured_in and named:
        out += [
            Evidence("step_budget_traced_steps", float(len(named)), "steps"),
            Evidence("step_budget_traced_first_step", float(named[0]), "step"),
            Evidence("step_budget_traced_last_step", float(named[-1]), "step"),
        ]
    return tuple(out)


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


# ---------------------------------------------------------------- traced steps


def traced_steps(
    profile: Profile,
    derived: Derived,
    rank: int,
    rows: pd.DataFrame,
    input_ms: pd.Series,
    window: range | list | None,
    median_ms: float | None,
    th: Thresholds,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per traced step (ms): the idle analyzer's busy and idle-by-cause, busy split by kind, allocator calls,
    the input wait of the run step it was, and gpudiag's share; with the sync analyzer's calls of those steps."""
    trace = derived.traces.get(rank)
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
    from diagnose.derive.trace_input_wait import (
        input_fetches,
        input_inside_gaps,
        input_wait_per_step,
        iterator_fetches,
    )

    fetches = iterator_fetches(trace, windows, derived.source_dirs())
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
    calls, _, _ = derived.rank_calls(rank)  # the sync analyzer's calls and costs (issue 28)
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


# ---------------------------------------------------------------- periodic slow steps


def find_period(
    step_numbers: np.ndarray, slow: np.ndarray, th: Thresholds, excess_ms: np.ndarray | None = None
) -> dict | None:
    """The period N and offset k at which slow steps recur (step k + iN), or None.

    ``step_numbers``: the steady steps (warm-up, gpudiag's trace window, compiles and new shapes left out);
    ``slow``: which of them are slow. A (N, k) qualifies when at least ``period_min_occurrences`` slow steps sit
    on it, they hold ``period_min_share`` of the slow steps' time over the median (``excess_ms``; of their count
    without it), and ``period_min_hit_share`` of the steady steps at k mod N are slow. By time, not count: on the
    H200 an epoch boundary stalled one step by ~480 ms and left one to three shorter slow steps after it (workers
    finishing their start one after another), which outnumber the stalls but hold a fraction of the time.
    Every N at which ``period_min_occurrences`` steps fit between the first and the last steady step is searched
    (up to ``MAX_PERIOD_STEPS``): the bound was a third of the steady steps' count, so an evaluation every 200
    steps of a 600-step run (593 steady steps) was never looked for. The best score (share on it x share of its
    steps slow) wins, the shorter N on a tie.
    """
    b = th.step_budget
    slow_steps = step_numbers[slow]
    if len(slow_steps) < b.period_min_occurrences:
        return None
    weights = np.ones(len(slow_steps)) if excess_ms is None else np.asarray(excess_ms, dtype=float)[slow]
    total = float(weights.sum()) or 1.0
    base = int(step_numbers.min())
    slow_at, steps_at = slow_steps - base, step_numbers - base  # residues of non-negative numbers
    span = int(steps_at.max()) + 1
    missing = np.setdiff1d(np.arange(span), steps_at, assume_unique=False)
    best = None
    # every offset of a period at once (bincount): a 100,000-step run is a few hundred ms, not minutes
    for n in range(2, min(MAX_PERIOD_STEPS, longest_period(span, b.period_min_occurrences)) + 1):
        on = np.bincount(slow_at % n, minlength=n)
        weight = np.bincount(slow_at % n, weights=weights, minlength=n)
        # steps 0..span-1 after the base hold span // n of each residue, one more for the first span % n;
        # less the missing ones (warm-up and gpudiag's window are not steady): O(n) per period, not O(steps)
        slots = np.full(n, span // n) + (np.arange(n) < span % n)
        if len(missing):
            slots = slots - np.bincount(missing % n, minlength=n)
        share = weight / total
        hit = np.divide(on, slots, out=np.zeros(n), where=slots > 0)
        ok = (on >= b.period_min_occurrences) & (share >= b.period_min_share) & (hit >= b.period_min_hit_share)
        if not ok.any():
            continue
        score = np.where(ok, share * hit, -1.0)
        k = int(np.argmax(score))
        if best is None or score[k] > best["score"] + 1e-9:
            best = {
                "period": int(n),
                "offset": int((k + base) % n),
                "occurrences": int(on[k]),
                "slots": int(slots[k]),
                "slow_total": int(len(slow_steps)),
                "score": float(score[k]),
            }
    return best


def recurring_work(
    work: pd.DataFrame | None, rank: int, steady: pd.DataFrame, slow_mask: pd.Series, median_ms: float, th: Thresholds
) -> dict | None:
    """Slow steady steps that light mode's work records show running the same checkpoint save or evaluation, when
    no period holds them: at least ``period_min_occurrences`` slow steps whose work of one kind takes
    ``period_work_share`` of their excess over the median. Made like find_period's dict (``by_work`` set, the
    period the gaps between them keep to within a step, else None).

    A loop that evaluates at iterations 0, 200, 400 and its last one (599) is timed in steps 199, 399 and 598 (the
    step in progress when the evaluation began; the first one, before the first step boundary, in none): no period
    holds three of them, yet the same evaluation makes each slow (examples/char_lm_eval.py, fixtures/runs/
    char_lm_eval)."""
    if work is None or not len(work):
        return None
    b = th.step_budget
    slow = steady[slow_mask].set_index("step")
    kinds = work[(work["rank"] == rank) & work["step"].isin(slow.index) & work["what"].isin((CHECKPOINT, EVALUATION))]
    best = None
    for _, of_kind in kinds.groupby("what", sort=True):
        per_step = of_kind.groupby("step")["ms"].sum()
        excess = slow.loc[per_step.index, "wall_ms"] - median_ms
        held = per_step.index[(per_step >= b.period_work_share * excess).to_numpy()]
        if len(held) >= b.period_min_occurrences and (best is None or len(held) > len(best)):
            best = held
    if best is None:
        return None
    steps = sorted(int(s) for s in best)
    gaps = np.diff(steps)
    excess_ms = float(slow.loc[steps, "wall_ms"].median() - median_ms)
    return {
        "period": int(round(float(np.median(gaps)))) if gaps.max() - gaps.min() <= 1 else None,
        "offset": None,
        "by_work": True,
        "occurrences": len(steps),
        "slots": len(steps),
        "slow_total": int(len(slow)),
        "steps": steps,
        "not_slow": [],
        "quiet_before": [],
        "excess_ms": excess_ms,
        "input_ms": None,
        "input_wait": False,
        "traced_steps": [],
        "work": period_work(work, rank, steps, excess_ms, th),
    }


def longest_period(span: int, occurrences: int) -> int:
    """The longest N at which ``occurrences`` steps k, k + N, … fit in ``span`` consecutive steps: N = 200 fits 3
    times in steps 0–599 (0, 200, 400), N = 300 does not (0, 300, 600)."""
    return (span - 1) // max(1, occurrences - 1)


def period_work(
    work: pd.DataFrame | None, rank: int, period_steps: list[int], excess_ms: float, th: Thresholds
) -> list[dict]:
    """What light mode saw run in the period's slow steps (checkpoint saves, evaluation spans), costliest first.

    A work record carries the step in progress when the call began, and a step's time runs from its boundary
    to the next, so the call's time is inside that very step: the slow step itself, not its neighbour (the
    periodic_checkpoint and periodic_evaluation fixtures: every record's step is a slow step, 19, 39, 59, 79).
    One kind of work counts when ``period_min_hit_share`` of the slow steps hold it and its median time in them
    (several records of a step added up) is ``period_work_share`` of their excess over the median.
    """
    if work is None or not len(work) or not period_steps or not excess_ms > 0:
        return []
    b = th.step_budget
    rows = work[(work["rank"] == rank) & work["step"].isin(period_steps)]
    found = []
    for what, of_kind in rows.groupby("what", sort=True):
        per_step = of_kind.groupby("step")["ms"].sum()
        if len(per_step) < b.period_min_hit_share * len(period_steps):
            continue
        ms = float(per_step.median())
        if ms < b.period_work_share * excess_ms:
            continue
        by_line = of_kind.groupby(of_kind["location"].fillna(""))["ms"].agg(["sum", "size"])
        by_line = by_line.sort_values("sum", ascending=False)
        found.append(
            {
                "what": str(what),
                "ms": ms,
                "steps": [int(s) for s in per_step.index],
                "locations": [(str(loc) or None, int(r["size"]), float(r["sum"])) for loc, r in by_line.iterrows()],
            }
        )
    return sorted(found, key=lambda w: -w["ms"])


def short_location(location: str | None) -> str:
    """``train.py:88`` of ``/abs/path/train.py:88``, for titles (subjects keep the full path)."""
    if not location:
        return "an unknown line"
    file, _, line = location.rpartition(":")
    return f"{file.replace(chr(92), '/').rsplit('/', 1)[-1]}:{line}" if file else location


def work_words(work: list[dict]) -> tuple[str, str, list[Subject]]:
    """The title's words, the advice and the location subjects for the work that runs in a period's slow steps."""
    words, advice, subjects = [], [], []
    for w in work:
        top = w["locations"][0][0] if w["locations"] else None
        where = short_location(top)
        if w["what"] == CHECKPOINT:
            words.append(f"checkpoint saving, torch.save at {where} takes {ms_human(w['ms'])}")
            advice.append(ADVICE["checkpoint"].format(where=where))
        elif w["what"] == EVALUATION:
            words.append(f"evaluation (model.eval() at {where}) takes {ms_human(w['ms'])}")
            advice.append(ADVICE["evaluation"].format(where=where))
        else:
            words.append(f"{w['what']} at {where} takes {ms_human(w['ms'])}")
            advice.append(f"{w['what']} at {where} runs in these steps: make it less frequent or asynchronous.")
        subjects += [
            Subject("location", location, figures={"what": w["what"], "calls": calls, "ms": total_ms})
            for location, calls, total_ms in w["locations"]
            if location
        ]
    return "; ".join(words), " ".join(advice), subjects


# ---------------------------------------------------------------- compilation


def work_of(work: pd.DataFrame | None, rank: int, what: str) -> pd.DataFrame:
    """This rank's work records of one kind (``what``: compilation, new-shape, …), maybe empty; the parser's
    WORK_SCHEMA gives every column."""
    if work is None or not len(work):
        return WORK_SCHEMA.empty()
    return work[(work["rank"] == rank) & (work["what"] == what)].reset_index(drop=True)


def add_compile_meta(meta: dict, compiles: pd.DataFrame, rows: pd.DataFrame, warm: pd.Series, compiled: pd.Series):
    """The compiles in the warm-up steps (a note) and after it (the steps kept apart and what compiled there).

    A compile after warm-up is one whose step is neither a warm-up nor an instrumented step: a step that has a
    step record (kept out of the steady figures) or the step the run ended in (no record, nothing to keep out)."""
    meta["compile_steps"] = int(compiled.sum())
    meta["compile_step_numbers"] = [int(s) for s in rows.loc[compiled, "step"]]
    meta["compile_steps_wall_ms"] = float(rows.loc[compiled, "wall_ms"].sum())
    if not len(compiles):
        meta["compile_ms"] = 0.0
        return
    in_warmup = compiles["step"].isin(rows.loc[warm, "step"])
    kept_out = rows.loc[rows["warmup"], "step"]
    after = compiles[~compiles["step"].isin(kept_out)]
    if in_warmup.any():
        warm_ms = float(compiles.loc[in_warmup, "ms"].sum())
        meta["warmup_compile_ms"] = warm_ms
        meta["notes"].append(
            f"of the {n_things(meta['warmup_steps'], 'warm-up step')} ({ms_human(meta['warmup_ms'])}), "
            f"{ms_human(warm_ms)} was compilation ({n_things(int(in_warmup.sum()), 'compile')}; compiles before the "
            "first step are not recorded)"
        )
    meta["compile_ms"] = float(after["ms"].sum())
    meta["compile_count"] = int(len(after))
    if not len(after):
        return
    functions = []
    for name, of_name in after.groupby(after["name"].fillna(""), sort=False):
        by_line = (
            of_name.groupby(of_name["location"].fillna(""))["ms"]
            .agg(["sum", "size"])
            .sort_values("sum", ascending=False)
        )
        functions.append(
            {
                "name": str(name) or None,
                "ms": float(of_name["ms"].sum()),
                "count": int(len(of_name)),
                "steps": sorted({int(s) for s in of_name["step"]}),
                "locations": [(str(loc) or None, int(r["size"]), float(r["sum"])) for loc, r in by_line.iterrows()],
            }
        )
    meta["compile_functions"] = sorted(functions, key=lambda f: -f["ms"])
    per_step = after.groupby("step")["ms"].sum()
    meta["compile_ms_by_step"] = {int(s): float(ms) for s, ms in per_step.items()}
    if meta["compile_steps"]:
        meta["notes"].append(
            f"{n_things(meta['compile_steps'], 'step')} after warm-up compiled ({ms_human(meta['compile_steps_wall_ms'])} "
            f"in all, {ms_human(meta['compile_ms'])} of it compilation) and are kept out of the figures (step_budget.compilation)"
        )


def function_words(name: str | None) -> str:
    """``update (jit)`` of ``jit(update)``, ``forward (torch.compile)`` of ``torch.compile(forward)``."""
    if not name:
        return "A function"
    head, paren, rest = name.partition("(")
    if paren and rest.endswith(")") and head in ("jit", "pjit", "torch.compile"):
        return f"{rest[:-1]} ({head})"
    return name


def compile_findings(meta: dict, th: Thresholds) -> list[Finding]:
    """``step_budget.compilation``: compiles after warm-up that cost ``compile_min_share`` of the run after it."""
    findings = []
    ranks = [(rank, m) for rank, m in sorted(meta.items()) if m.get("compile_functions")]
    for rank, m in ranks:
        after_ms = (m.get("steady_total_ms") or 0.0) + m.get("compile_steps_wall_ms", 0.0)
        total_ms = m["compile_ms"]
        share = min(1.0, total_ms / after_ms) if after_ms > 0 else None
        if share is None or share < th.step_budget.compile_min_share:
            continue
        top = m["compile_functions"][0]
        steps = sorted({s for f in m["compile_functions"] for s in f["steps"]})
        where = short_location(top["locations"][0][0]) if top["locations"] else "an unknown line"
        others = len(m["compile_functions"]) - 1
        title = (
            f"{function_words(top['name'])} compiled again in {n_things(len(top['steps']), 'step')} after warm-up "
            f"(steps {', '.join(str(s) for s in top['steps'][:6])}{', …' if len(top['steps']) > 6 else ''}): "
            f"{ms_human(top['ms'])} in all, {ms_human(top['ms'] / top['count'])} each ({where})"
        )
        if others:
            title += f"; {n_things(others, 'other function')} too, {ms_human(total_ms)} of compilation in all"
        if len(meta) > 1:
            title += f" on rank {rank}"
        title += f", {100 * share:.1f} % of the run after warm-up"
        subjects = [
            Subject(
                "location",
                location,
                figures={"what": COMPILATION, "name": f["name"] or "", "calls": calls, "ms": ms},
            )
            for f in m["compile_functions"]
            for location, calls, ms in f["locations"]
            if location
        ]
        subjects += [
            Subject("step", str(s), figures={"rank": rank, "compile_ms": m["compile_ms_by_step"].get(s, 0.0)})
            for s in steps[: th.step_budget.max_slow_steps]
        ]
        findings.append(
            Finding(
                id="step_budget.compilation",
                analyzer=NAME,
                severity=severity_of(share, th),
                title=title,
                subjects=tuple(subjects),
                evidence=(
                    Evidence("step_budget_compile_ms", total_ms, "ms"),
                    Evidence("step_budget_compile_steps", float(len(steps)), "count"),
                    Evidence("step_budget_compile_each_ms", total_ms / max(1, m["compile_count"]), "ms"),
                    Evidence("step_budget_compile_share", share, "share", th.step_budget.compile_min_share),
                ),
                cost_share=share,
                recommendation=f"At {where}: {ADVICE['compilation']}",
                section=SECTION,
            )
        )
    return findings


# ---------------------------------------------------------------- new input shapes


def add_new_shape_meta(meta: dict, shapes: pd.DataFrame, kept: pd.DataFrame, median_ms: float, th: Thresholds):
    """The kept-apart steps that met a new input shape, each with its shape, wall time and whether it was slow
    (``new_shape_slow_factor`` x the steady median)."""
    if not len(kept):
        return
    first = shapes.drop_duplicates("step").set_index("step")
    steps = []
    for r in kept.itertuples():
        record = first.loc[r.step]
        steps.append(
            {
                "step": int(r.step),
                "shape": str(record["name"]) if isinstance(record["name"], str) else None,
                "cudnn_benchmark": bool(record["cudnn_benchmark"]) if record["cudnn_benchmark"] is not None else False,
                "wall_ms": float(r.wall_ms),
                "over_median_ms": float(r.wall_ms - median_ms),
                "slow": bool(r.wall_ms > th.step_budget.new_shape_slow_factor * median_ms),
            }
        )
    meta["new_shapes"] = steps
    meta["notes"].append(
        f"{n_things(len(steps), 'step')} after warm-up met a new input shape "
        f"({ms_human(meta['new_shape_steps_wall_ms'])} in all, "
        f"{sum(s['slow'] for s in steps)} of them slow) and are kept out of the figures (step_budget.new_shape)"
    )


def new_shape_findings(meta: dict, th: Thresholds) -> list[Finding]:
    """``step_budget.new_shape``: steps after warm-up that met a new input shape and took ``new_shape_slow_factor``
    x the steady median; cost share: their time over the median / the time of every step after warm-up."""
    findings = []
    for rank, m in sorted(meta.items()):
        slow = [s for s in m.get("new_shapes", ()) if s["slow"]]
        if not slow:
            continue
        n, median = len(slow), m["median_step_ms"]
        excess_ms = sum(s["over_median_ms"] for s in slow)
        after_ms = (m.get("steady_total_ms") or 0.0) + m.get("new_shape_steps_wall_ms", 0.0)
        share = min(1.0, max(0.0, excess_ms) / after_ms) if after_ms > 0 else None
        numbers = ", ".join(str(s["step"]) for s in slow[:6]) + (", …" if n > 6 else "")
        shapes = list(dict.fromkeys(s["shape"] or "unknown" for s in slow))
        shape_words = "; ".join(shapes[:2]) + (f"; {len(shapes) - 2} more" if len(shapes) > 2 else "")
        each, each_words = excess_ms / n, " each" if n > 1 else ""
        cost = (  # below the median only when new_shape_slow_factor is set under 1
            f"{ms_human(each)} slower than the median {ms_human(median)}{each_words}"
            if each > 0
            else f"{ms_human(sum(s['wall_ms'] for s in slow) / n)}{each_words} against the median {ms_human(median)}"
        )
        cudnn = any(s["cudnn_benchmark"] for s in slow)
        why = (
            "cudnn.benchmark=True re-tunes convolutions for each new shape"
            if cudnn
            else "a new shape costs allocator growth and new kernels (cudnn.benchmark is off)"
        )
        title = (
            f"{n} step{'s' if n != 1 else ''} met a new input shape after warm-up "
            f"(step{'s' if n != 1 else ''} {numbers}: batch {shape_words}): {cost}"
            + (f" on rank {rank}" if len(meta) > 1 else "")
            + f"; {why}"
        )
        findings.append(
            Finding(
                id="step_budget.new_shape",
                analyzer=NAME,
                severity=severity_of(share, th) if share is not None else Severity.INFO,
                title=title,
                subjects=tuple(
                    Subject(
                        "step",
                        str(s["step"]),
                        figures={
                            "rank": rank,
                            "shape": s["shape"] or "",
                            "wall_ms": s["wall_ms"],
                            "over_median_ms": s["over_median_ms"],
                            "cudnn_benchmark": s["cudnn_benchmark"],
                        },
                    )
                    for s in slow[: th.step_budget.max_slow_steps]
                ),
                evidence=(
                    Evidence("step_budget_new_shape_steps", float(n), "count"),
                    Evidence("step_budget_new_shape_over_median_ms", each, "ms"),
                    Evidence("step_budget_step_ms", median, "ms"),
                    Evidence(
                        "step_budget_new_shape_step_factor",
                        sum(s["wall_ms"] for s in slow) / n / median if median > 0 else float("nan"),
                        "x",
                        th.step_budget.new_shape_slow_factor,
                    ),
                ),
                cost_share=share,
                recommendation=ADVICE["new_shape"] if cudnn else ADVICE["new_shape_no_cudnn"],
                section=SECTION,
            )
        )
    return findings


# ---------------------------------------------------------------- findings


def severity_of(share: float, th: Thresholds) -> Severity:
    if share >= th.step_budget.cause_critical_share:
        return Severity.CRITICAL
    return Severity.WARNING if share >= th.step_budget.cause_warning_share else Severity.INFO


def cause_findings(budget: pd.DataFrame, meta: dict, calls_by_rank: dict, th: Thresholds) -> list[Finding]:
    median = budget[budget["column"] == "median step"]
    findings = []
    # which rows each part keeps, on arrays: a frame is cut only for a part that has some (~3 ms of filters before)
    part_of, share_of = median["part"].to_numpy(), median["share"].to_numpy()
    for part in (*CAUSES, "unexplained"):
        limit = th.step_budget.unexplained_share if part == "unexplained" else th.step_budget.cause_min_share
        keep = (part_of == part) & pd.notna(share_of) & (share_of >= limit)
        if not keep.any():
            continue
        rows = median[keep]
        top = rows.sort_values("share", ascending=False).iloc[0]
        rank, share, ms, wall = int(top["rank"]), float(top["share"]), float(top["ms"]), float(top["wall_ms"])
        subjects = [
            Subject(
                "rank",
                str(int(r.rank)),
                severity=severity_of(r.share, th),
                figures={"ms": float(r.ms), "step_ms": float(r.wall_ms), "share": float(r.share)},
            )
            for r in rows.itertuples()
        ]
        what = f"{ms_human(ms)} of the {ms_human(wall)} median step ({100 * share:.1f} %)"
        measured_in = str(top["measured_in"])
        if measured_in.startswith("inferred: "):  # "…, inferred: the step's GPU idle left after …"
            where = f", {measured_in}"
        else:
            where = f", measured in {measured_in}" if measured_in != "the remainder" else ""
        rank_words = f" on rank {rank}" if budget["rank"].nunique() > 1 else ""
        recommendation = ADVICE.get(part, "")
        if part == "unexplained":
            recommendation = meta.get(rank, {}).get("unexplained_advice") or recommendation
        severity = severity_of(share, th)
        evidence = (
            Evidence(f"step_budget_{part}_ms", ms, "ms"),
            Evidence("step_budget_step_ms", wall, "ms"),
            Evidence(f"step_budget_{part}_share", share, "share", limit),
            *basis_evidence(str(top["measured_in"]), meta.get(rank, {})),
            *((Evidence("step_budget_fit_factor", float(top["fit_factor"]), "x"),) if top["fit_factor"] < 1 else ()),
        )

        def make(
            id: str,
            title: str,
            severity=severity,
            recommendation=recommendation,
            extra=(),
            subjects=tuple(subjects),
            evidence=evidence,
            share=share,
        ) -> Finding:
            return Finding(
                id=id,
                analyzer=NAME,
                severity=severity,
                title=title,
                subjects=within((*subjects, *extra), severity),
                evidence=evidence,
                cost_share=share,
                recommendation=recommendation,
                section=SECTION,
            )

        if part == "sync":
            traced = budget[(budget["rank"] == rank) & (budget["column"] == "traced steps")]["steps"]
            n_traced = int(traced.iloc[0]) if len(traced) else None  # every traced step, not only those with syncs
            title, fix, extra = sync_words(calls_by_rank.get(rank), what, where, rank_words, ms, n_traced)
            findings.append(make(id="step_budget.sync", title=title, recommendation=fix, extra=tuple(extra)))
        elif part == "input":
            iterator = meta.get(rank, {}).get("input_iterator")
            if meta.get(rank, {}).get("input_from_loop"):  # every step timed at the loop's for (Python 3.12+)
                name = iterator if iterator.startswith("its iterator") else f"its iterator {iterator}"
                title = f"The GPU waits for input {what}{rank_words}: the loop waits for {name}{where}"
                findings.append(make(id="step_budget.input", title=title, recommendation=ADVICE["input_iterator"]))
            elif iterator and "steady steps" not in where:
                title = f"The GPU waits for input {what}{rank_words}: the loop waits for its iterator{where}"
                findings.append(make(id="step_budget.input", title=title, recommendation=ADVICE["input_iterator"]))
            else:
                title = f"The GPU waits for input {what}{rank_words}: the loop blocks in the DataLoader{where}"
                findings.append(make(id="step_budget.input", title=title))
        elif part == "launch_bound":
            title = f"The GPU waits for the host to launch work {what}{rank_words}{where}"
            findings.append(make(id="step_budget.launch_bound", title=title))
        elif part == "allocator":
            title = f"The allocator's cudaMalloc/cudaFree hold the GPU idle {what}{rank_words}{where}"
            findings.append(make(id="step_budget.allocator", title=title))
        else:
            missing = [n for n in meta.get(rank, {}).get("notes", ()) if "not measured" in n]
            title = f"{what[0].upper()}{what[1:]}{rank_words} is not explained by any measured cause"
            if missing:
                title += " (" + "; ".join(n.split(":")[0] for n in missing) + ")"
            findings.append(make(id="step_budget.unexplained", title=title, severity=Severity.INFO))
    return findings


def sync_words(
    calls: pd.DataFrame | None,
    what: str,
    where: str,
    rank_words: str,
    whole_ms: float = np.nan,
    n_traced: int | None = None,
) -> tuple[str, str, list[Subject]]:
    """The sync finding's title, fix and location subjects, costliest first.

    The sites are the sync analyzer's, ranked by its cost (rank_calls, group_syncs) over the traced steps
    and named as it names them (where_words); each is given its share of those syncs' GPU idle, and that share
    of this part (``whole_ms``, the median step's): a site never exceeds the whole it is part of (issue 28:
    "1.47 ms of the 17.8 ms median step … the costliest is aten::item at main.py:0 (13.8 ms a step)")."""
    title = f"Host syncs hold the GPU idle {what}{rank_words}{where}"
    if calls is None or not len(calls):
        return title, "Move the synchronising calls out of the step (see the sync section).", []
    n = n_traced or max(1, calls["step"].nunique())
    groups = group_syncs(calls, n, np.nan)  # the sync analyzer's rows per (location, op), costliest first
    idle_ms = np.nan_to_num(groups["gpu_idle_ms"].to_numpy(dtype=float))
    shares = idle_ms / idle_ms.sum() if idle_ms.sum() > 0 else np.full(len(groups), np.nan)
    part_ms = shares * whole_ms if np.isfinite(whole_ms) else np.full(len(groups), np.nan)
    top = groups.iloc[0]
    top_where = where_words(top["location"], top["function"], top["file"], bool(top["line_exact"]))
    if np.isfinite(part_ms[0]):
        title += f"; the costliest, {top['op']} at {top_where}, holds {share_human(shares[0], 0)} of it ({ms_human(part_ms[0])})"
    else:
        title += f"; the costliest is {top['op']} at {top_where}"
    subjects = [
        Subject(
            "location",
            str(g.location),
            figures={
                "op": str(g.op),
                "share_of_sync_idle": None if not np.isfinite(sh) else float(sh),
                # this site's part of the part (its share of the syncs' idle in the traced steps), of the median
                # step; gpu_idle_ms_per_step is the sync analyzer's figure, per traced step, as in its own table
                "median_step_gpu_idle_ms": None if not np.isfinite(pm) else float(pm),
                "gpu_idle_ms_per_step": float(np.nan_to_num(g.gpu_idle_ms_per_step)),
                "blocked_ms_per_step": float(g.blocked_ms_per_step),
                "count_per_step": float(g.count_per_step),
                "line_exact": bool(g.line_exact),
            },
        )
        for g, sh, pm in zip(groups.head(10).itertuples(), shares, part_ms)
    ]
    fix = f"At {top_where}: {advice_for(str(top['op']), str(top['calls']))}."
    return title, fix, subjects


def periodic_findings(meta: dict, calls_by_rank: dict, th: Thresholds) -> list[Finding]:
    findings = []
    for rank, m in sorted(meta.items()):
        p = m.get("period")
        if not p:
            continue
        n, k, median = p["period"], p["offset"], m["median_step_ms"]
        steps_words = f"step {k} + {n}i" if k else f"step {n}i"
        slow_words = f"{step_ranges(p['steps'][:6])}{', …' if len(p['steps']) > 6 else ''}"
        not_slow = p.get("not_slow") or []
        if p.get("by_work"):  # the same work in each, on no exact period (a loop's last iteration, say)
            every = f", about every {n} steps" if n else ""
            title = (
                f"Steps {slow_words} ({len(p['steps'])} steps{every}) are {ms_human(p['excess_ms'])} slower than "
                f"the median {ms_human(median)}"
            )
        elif not_slow:  # some steady steps on the period were not slow: say which, never "every N steps" then
            title = (
                f"{len(p['steps'])} of the {len(p['steps']) + len(not_slow)} steps at {steps_words} from step "
                f"{p['steps'][0]} (steps {slow_words}; not {'step' if len(not_slow) == 1 else 'steps'} "
                f"{step_ranges(not_slow[:6])}{', …' if len(not_slow) > 6 else ''}) are {ms_human(p['excess_ms'])} "
                f"slower than the median {ms_human(median)}"
            )
        elif p.get("quiet_before"):  # the work started later than the period's first steady step
            title = (
                f"Every {n} steps from step {p['steps'][0]} (steps {slow_words}) a step is "
                f"{ms_human(p['excess_ms'])} slower than the median {ms_human(median)}"
            )
        else:
            title = (
                f"Every {n} steps ({steps_words}: steps {slow_words}) a step is {ms_human(p['excess_ms'])} slower "
                f"than the median {ms_human(median)}"
            )
        title += f" on rank {rank}" if len(meta) > 1 else ""
        work = p.get("work") or []
        work_subjects: list[Subject] = []
        if work and (not p.get("input_wait") or work[0]["ms"] >= (p.get("input_ms") or 0.0)):
            words, fix, work_subjects = work_words(work)
            title += f": {words}"
        elif p.get("input_wait") and m.get("input_from_loop"):
            title += f", waiting {ms_human(p['input_ms'])} for input"
            fix = (
                "These steps wait for the loop's iterator: a new one at each epoch boundary is slow to give its first "
                "item (a file or shard opened, a buffer filled). Build the next epoch's iterator ahead, in a "
                "background thread or a DataLoader with persistent workers, or keep one iterator across epochs."
            )
        elif p.get("input_wait"):
            title += f", waiting {ms_human(p['input_ms'])} for input"
            fix = (
                "These steps wait on the data loader: a new DataLoader iterator at an epoch boundary (workers "
                "restart). Use DataLoader(persistent_workers=True) and a prefetch_factor that covers the restart; "
                "keep the epoch's first batches prefetched."
            )
        else:
            fix = (
                f"Something runs every {n} steps: {PERIOD_CANDIDATES}. Make it asynchronous or less frequent"
                if n
                else f"Something runs in these steps: {PERIOD_CANDIDATES}. Make it asynchronous or less frequent"
            )
            calls = calls_by_rank.get(rank)
            seen = (
                calls[calls["run_step"].isin(p.get("traced_steps", []))] if calls is not None and len(calls) else None
            )
            if seen is not None and len(seen):
                worst = seen.sort_values("blocked_ns", ascending=False).iloc[0]
                at = where_words(worst["location"], worst["function"], worst["file"], bool(worst["line_exact"]))
                fix += f"; the trace saw {worst['op']} at {at} block the host in such a step"
            fix += "."
            if p.get("input_ms") is None:
                fix += " Input wait was not measured in these steps."
        # the share of the steady run's time the recurring stalls cost (their time over the median)
        total = m.get("steady_total_ms") or 0.0
        share = min(1.0, p["excess_ms"] * p["occurrences"] / total) if total > 0 else None
        findings.append(
            Finding(
                id="step_budget.periodic",
                analyzer=NAME,
                severity=Severity.CRITICAL
                if share is not None and share >= th.step_budget.cause_critical_share
                else Severity.WARNING,
                title=title,
                subjects=(
                    *work_subjects,
                    *(Subject("step", str(s), figures={"rank": rank}) for s in p["steps"][:20]),
                ),
                evidence=(
                    *((Evidence("step_budget_period_steps", float(n), "count"),) if n else ()),
                    Evidence("step_budget_period_excess_ms", p["excess_ms"], "ms"),
                    Evidence("step_budget_period_occurrences", float(p["occurrences"]), "count"),
                    Evidence("step_budget_step_ms", median, "ms"),  # the median the title compares with
                    *(
                        (Evidence("step_budget_period_input_ms", p["input_ms"], "ms"),)
                        if p.get("input_ms") is not None
                        else ()
                    ),
                    *(
                        Evidence(f"step_budget_period_{w['what']}_ms", w["ms"], "ms")
                        for w in (work if work_subjects else ())
                    ),
                ),
                cost_share=share,
                recommendation=fix,
                section=SECTION,
            )
        )
    return findings
