"""Tiny kernels: swarms of launches so short that launching them costs as much as running them.

A launch costs the host a few microseconds (cudaLaunchKernel plus the framework's
dispatch: ``tiny_kernels.launch_overhead_us``); a kernel shorter than that keeps
the GPU waiting for the next one, so the step is launch-bound. ncu serialises
kernels and cannot see that wait, so the cost is estimated: on a timeline where
each launch takes at least the launch overhead, tiny launches occupy
``sum(max(dur, overhead))`` of ``sum over all launches of max(dur, overhead)``;
that share is what fusing them away could win. Grouped by kernel name.
"""

from __future__ import annotations

import numpy as np

from diagnose.derive.derived import Derived
from diagnose.derive.kernel_stats import kernel_subject_name, launches_figure, most_common, names_list, per_kernel, slim
from diagnose.findings import Evidence, Finding, Result, Severity, Subject
from diagnose.formatting import agree, count_human, n_things, ns_human, pct_human, us_human
from diagnose.metrics import LOWER, Metric

NAME = "tiny_kernels"
ORDER = 25
SECTION = "section-tiny_kernels"
TITLE = "Tiny kernels"  # its report section's heading
JUDGES = "kernel durations"  # what "Nothing crossed a threshold: judged ..." names
COST_BASIS = "GPU time"  # its cost_share is a share of the profiled kernels' GPU time, as the verdict says it
COST_BASIS_BY_ID: dict[str, str] = {}  # no finding's basis differs
THRESHOLDS = ("tiny_kernels",)  # the Thresholds groups it reads (diagnose/thresholds.py)
SUMMARY_METRICS = (  # what analyze() writes into Result.summary (diagnose.metrics)
    Metric("tiny_kernel_launch_share", "Launches of tiny kernels", "share", LOWER, 0.001),
    Metric("tiny_kernel_launches", "Tiny kernel launches", "count", LOWER, 1),
    Metric("tiny_kernel_est_timeline_share", "Estimated timeline taken by tiny kernels", "share", LOWER, 0.001),
)
FINDING_IDS = (  # every id this analyzer can produce: `gpudiag check --ignore` validates against them
    "tiny_kernels.launch_bound",
)


def analyze(profile, derived: Derived, th) -> Result:
    t = th.tiny_kernels
    kernels = profile.kernels
    result = Result(NAME)
    if not len(kernels) or kernels["dur_ns"].notna().sum() == 0:
        return result
    timed = slim(kernels, "grid_size", "block_size")  # not the hundreds of other metric columns, per filter
    timed = timed[timed["dur_ns"].notna()]
    limit_ns = t.max_dur_us * 1000.0
    overhead_ns = t.launch_overhead_us * 1000.0
    tiny = timed[timed["dur_ns"] < limit_ns]
    n_all, n_tiny = len(timed), len(tiny)
    share = n_tiny / n_all
    timeline_ns = float(np.maximum(timed["dur_ns"], overhead_ns).sum())
    tiny_timeline_ns = float(np.maximum(tiny["dur_ns"], overhead_ns).sum())
    cost = tiny_timeline_ns / timeline_ns if timeline_ns > 0 else 0.0
    stats = per_kernel(tiny, [], memo=derived.kernel_memo)
    for col in ("grid_size", "block_size"):
        stats[col] = most_common(tiny, col, stats, memo=derived.kernel_memo)
    stats["launch_share"] = stats["launches"] / n_all
    stats["share_of_all_gpu_time"] = stats["gpu_time_ns"] / float(timed["dur_ns"].sum())
    result.tables["kernels"] = stats
    # every timed launch's duration: the section bins them into its chart's histogram
    result.tables["launch_durations"] = timed[["dur_ns"]].reset_index(drop=True)
    result.meta.update({"max_dur_ns": limit_ns, "launch_overhead_ns": overhead_ns, "launches": n_all})
    result.summary["tiny_kernel_launch_share"] = share
    result.summary["tiny_kernel_launches"] = float(n_tiny)
    result.summary["tiny_kernel_est_timeline_share"] = cost
    if n_tiny < t.min_launches or share < t.warning_share:
        return result
    severity = Severity.of(share, critical=t.critical_share, otherwise=Severity.WARNING)
    subjects = tuple(
        Subject(
            "kernel",
            kernel_subject_name(r),
            severity,
            {
                **launches_figure(r),
                "launch_share": float(r["launch_share"]),
                "grid_blocks": None if np.isnan(r["grid_size"]) else int(r["grid_size"]),
            },
        )
        for _, r in stats.sort_values(["launches", "kernel"], ascending=[False, True]).iterrows()
    )
    result.findings.append(
        Finding(
            id="tiny_kernels.launch_bound",
            analyzer=NAME,
            severity=severity,
            title=(
                f"{count_human(n_tiny)} of {n_things(n_all, 'launch')} ({pct_human(100 * share, 0)}) "
                f"{agree(n_tiny, 'runs', 'run')} under {us_human(t.max_dur_us)} "
                f"(mean {ns_human(tiny['dur_ns'].mean())}, {n_things(len(stats), 'kernel')}): launch-bound"
            ),
            subjects=subjects,
            evidence=(
                Evidence("tiny_launch_share", 100 * share, "%", 100 * t.warning_share),
                Evidence("tiny_launches", float(n_tiny), "launches", float(t.min_launches)),
                Evidence("launches", float(n_all), "launches"),  # all the profiled launches the title counts
                Evidence(
                    "gpu__time_duration.sum (mean of tiny launches)", float(tiny["dur_ns"].mean()), "ns", limit_ns
                ),
            ),
            cost_share=cost,
            recommendation=(
                f"Launch fewer, larger kernels ({names_list(stats)}): use fused or foreach optimizers "
                "(torch.optim.AdamW(fused=True) or foreach=True), torch.compile the step so elementwise "
                "chains fuse into one kernel, capture the steady-state step in a CUDA graph "
                "(torch.cuda.CUDAGraph, or torch.compile(mode='reduce-overhead')), and replace "
                "per-parameter Python loops with one op over a flat buffer (torch._foreach_*)."
            ),
            section=SECTION,
        )
    )
    return result
