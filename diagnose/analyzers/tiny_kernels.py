"""Tiny kernels: swarms of launches so short that launching them costs as much as running them.

A kernel launch costs the host a few microseconds (cudaLaunchKernel plus the
framework's dispatch); a kernel shorter than that keeps the GPU waiting for the
next launch. Many such launches mean the step is launch-bound, which ncu alone
cannot see in wall time, so the cost estimate assumes ``LAUNCH_OVERHEAD_US`` per launch
(about what a PyTorch eager op costs to dispatch on a modern CPU).
"""
from __future__ import annotations

from diagnose.findings import Evidence, Finding, Result, Severity, Subject
from diagnose.kernel_stats import launches_figure, per_kernel

NAME = "tiny_kernels"
ORDER = 25
SECTION = "section-tiny_kernels"
LAUNCH_OVERHEAD_US = 5.0


def analyze(profile, th) -> Result:
    t = th.tiny_kernels
    kernels = profile.kernels
    result = Result(NAME)
    if not len(kernels) or kernels["dur_ns"].notna().sum() == 0:
        return result
    limit_ns = t.max_dur_us * 1000.0
    tiny = kernels[kernels["dur_ns"] < limit_ns]
    n_all, n_tiny = len(kernels), len(tiny)
    share = n_tiny / n_all
    stats = per_kernel(tiny, ["grid_size", "block_size"])
    stats["tiny_launch_share"] = stats["launches"] / n_all
    result.tables["kernels"] = stats
    result.summary["tiny_kernel_launch_share"] = share
    result.summary["tiny_kernel_launches"] = float(n_tiny)
    if n_tiny < t.min_launches or share < t.warning_share:
        return result
    severity = Severity.CRITICAL if share >= t.critical_share else Severity.WARNING
    gpu_ns = float(tiny["dur_ns"].sum())
    overhead_ns = n_tiny * LAUNCH_OVERHEAD_US * 1000.0
    # GPU time the launches would leave idle if each waited LAUNCH_OVERHEAD_US for the host
    idle_share = max(0.0, overhead_ns - gpu_ns) / (max(0.0, overhead_ns - gpu_ns) + float(kernels["dur_ns"].sum()))
    subjects = tuple(Subject("kernel", r["kernel"], severity, {**launches_figure(r),
                                                               "tiny_launch_share": r["tiny_launch_share"]})
                     for _, r in stats.iterrows())
    result.findings.append(Finding(
        id="tiny_kernels.launch_bound", analyzer=NAME, severity=severity,
        title=(f"{n_tiny} of {n_all} launches ({100 * share:.0f} %) run under {t.max_dur_us:g} µs "
               f"(mean {tiny['dur_ns'].mean() / 1000:.1f} µs): launch-bound"),
        subjects=subjects,
        evidence=(Evidence("tiny_launch_share", 100 * share, "%", 100 * t.warning_share),
                  Evidence("gpu__time_duration.sum (mean of tiny launches)", float(tiny["dur_ns"].mean()), "ns",
                           limit_ns)),
        cost_share=idle_share,
        recommendation=("Launch fewer, larger kernels: use fused or foreach optimizers "
                        "(torch.optim.AdamW(fused=True) / foreach=True), torch.compile the step so elementwise "
                        "chains fuse, capture the steady-state step in a CUDA graph (torch.cuda.graphs / "
                        "mode='reduce-overhead'), and batch per-parameter loops into one op over a flat buffer."),
        section=SECTION))
    return result
