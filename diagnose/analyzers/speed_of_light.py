"""Speed of light: is each kernel bound by memory, by compute, or by neither (latency)?

ncu's SOL section gives SM and memory throughput as % of peak. A kernel near the
peak of one is bound by it; a kernel far from both is latency-bound — it neither
moves nor computes at the rate the GPU can, usually for want of parallelism or
because of dependent accesses — which is where the largest wins hide.
"""
from __future__ import annotations

import numpy as np

from diagnose.findings import Evidence, Finding, Result, Severity, Subject
from diagnose.kernel_stats import launches_figure, per_kernel

NAME = "speed_of_light"
ORDER = 30
SECTION = "section-speed_of_light"


def classify(sm_pct: float, mem_pct: float, bound_pct: float, latency_pct: float) -> str:
    if np.isnan(sm_pct) or np.isnan(mem_pct):
        return "unknown"
    if max(sm_pct, mem_pct) >= bound_pct:
        return "memory-bound" if mem_pct >= sm_pct else "compute-bound"
    if max(sm_pct, mem_pct) < latency_pct:
        return "latency-bound"
    return "balanced"


def analyze(profile, th) -> Result:
    t = th.speed_of_light
    kernels = profile.kernels
    result = Result(NAME)
    if not len(kernels) or kernels["sm_throughput_pct"].notna().sum() == 0:
        return result
    stats = per_kernel(kernels, ["sm_throughput_pct", "memory_throughput_pct", "dram_throughput_pct"])
    stats["bound"] = [classify(s, m, t.bound_pct, t.latency_pct)
                      for s, m in zip(stats["sm_throughput_pct"], stats["memory_throughput_pct"])]
    result.tables["kernels"] = stats
    by_class = stats.groupby("bound")["share"].sum()
    for cls, share in by_class.items():
        result.summary[f"sol_{cls.replace('-', '_')}_gpu_time_share"] = float(share)
    tiny_ns = th.tiny_kernels.max_dur_us * 1000.0
    lat = stats[(stats["bound"] == "latency-bound") & (stats["share"] >= t.min_kernel_share)
                & (stats["mean_dur_ns"] >= tiny_ns)]
    if len(lat):
        subjects = []
        for _, r in lat.iterrows():
            f = launches_figure(r)
            f.update({"sm_throughput_pct": r["sm_throughput_pct"], "memory_throughput_pct": r["memory_throughput_pct"]})
            sev = Severity.WARNING if r["share"] >= 0.05 else Severity.INFO
            subjects.append(Subject("kernel", r["kernel"], sev, f))
        top = lat.iloc[0]
        share = float(lat["share"].sum())
        result.findings.append(Finding(
            id="speed_of_light.latency_bound", analyzer=NAME, severity=max(s.severity for s in subjects),
            title=(f"{len(lat)} kernel{'s' if len(lat) != 1 else ''} ({100 * share:.1f} % of GPU time) reach under "
                   f"{t.latency_pct:g} % of both compute and memory peak; heaviest: {top['kernel']} "
                   f"(SM {top['sm_throughput_pct']:.0f} %, memory {top['memory_throughput_pct']:.0f} %)"),
            subjects=tuple(subjects),
            evidence=(Evidence("sm__throughput.avg.pct_of_peak_sustained_elapsed", float(top["sm_throughput_pct"]), "%",
                               t.latency_pct),
                      Evidence("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
                               float(top["memory_throughput_pct"]), "%", t.latency_pct)),
            cost_share=share,
            recommendation=("These kernels leave both the SMs and memory mostly idle: expose more parallelism "
                            "(more blocks, more independent work per thread), remove dependent memory accesses "
                            "and synchronisation inside the kernel, and check the launch configuration and "
                            "occupancy findings for the same kernels."),
            section=SECTION))
    return result
