"""Speed of light: is each kernel bound by memory, by compute, or by neither (latency), and by which unit?

ncu's SOL section gives SM throughput and memory throughput (the busiest of L1, L2
and DRAM; DRAM throughput when only that was collected) as % of peak. Each kernel's
limiter, the unit of its SOL breakdown nearest peak (diagnose.derive.kernel_limiter: the L1/TEX
load path, DRAM, the FMA pipe …) and the next limit off that unit's path, is in the table
and in every finding. A kernel at
``bound_pct`` or more on one is bound by it; a kernel under ``latency_pct`` on both is
latency-bound — it neither moves nor computes at the rate the GPU can, for want of
parallelism or because of dependent accesses — which is where the largest wins hide.
In between it is "balanced". Launch-bound micro-kernels (shorter than
``tiny_kernels.max_dur_us``) are tiny_kernels' business and not flagged here.

Cost estimate: brought up to ``bound_pct`` of its busier unit, a latency-bound kernel
would take ``max(sm, memory) / bound_pct`` of its time; the rest is the estimate.
"""

from __future__ import annotations

import numpy as np

from diagnose.derive.derived import Derived
from diagnose.derive.kernel_limiter import kernel_limiters
from diagnose.derive.kernel_stats import kernel_subject_name, launches_figure, names_list, per_kernel
from diagnose.findings import Evidence, Finding, Result, Severity, Subject, not_measured
from diagnose.formatting import agree, n_things, pct_human, share_human
from diagnose.metrics import LOWER, NEUTRAL, Metric

NAME = "speed_of_light"
ORDER = 30
SECTION = "section-speed_of_light"
TITLE = "Speed of light"  # its report section's heading
JUDGES = "throughput against peak"  # what "Nothing crossed a threshold: judged ..." names
COST_BASIS = "GPU time"  # its cost_share is a share of the profiled kernels' GPU time, as the verdict says it
COST_BASIS_BY_ID: dict[str, str] = {}  # no finding's basis differs
THRESHOLDS = ("speed_of_light", "tiny_kernels")  # the Thresholds groups it reads (diagnose/thresholds.py)
SUMMARY_METRICS = (  # what analyze() writes into Result.summary (diagnose.metrics)
    # moving time between memory- and compute-bound is neither better nor worse; latency-bound uses neither unit
    Metric("sol_memory_bound_gpu_time_share", "GPU time in memory-bound kernels", "share", NEUTRAL, 0.001),
    Metric("sol_compute_bound_gpu_time_share", "GPU time in compute-bound kernels", "share", NEUTRAL, 0.001),
    Metric("sol_balanced_gpu_time_share", "GPU time in balanced kernels", "share", NEUTRAL, 0.001),
    Metric("sol_latency_bound_gpu_time_share", "GPU time in latency-bound kernels", "share", LOWER, 0.001),
    Metric("sol_unknown_gpu_time_share", "GPU time in kernels without throughput metrics", "share", NEUTRAL, 0.001),
)
FINDING_IDS = (  # every id this analyzer can produce: `gpudiag check --ignore` validates against them
    "speed_of_light.latency_bound",
    "speed_of_light.not_measured",
)
CLASSES = ("memory-bound", "compute-bound", "balanced", "latency-bound", "unknown")


def classify(sm_pct: float, mem_pct: float, bound_pct: float, latency_pct: float) -> str:
    if np.isnan(sm_pct) or np.isnan(mem_pct):
        return "unknown"
    if max(sm_pct, mem_pct) >= bound_pct:
        return "memory-bound" if mem_pct >= sm_pct else "compute-bound"
    if max(sm_pct, mem_pct) < latency_pct:
        return "latency-bound"
    return "balanced"


def analyze(profile, derived: Derived, th) -> Result:
    t = th.speed_of_light
    kernels = profile.kernels
    result = Result(NAME)
    if not len(kernels):
        return result
    if kernels["sm_throughput_pct"].notna().sum() == 0:
        result.findings.append(
            not_measured(
                NAME,
                "Speed of light (SM and memory throughput)",
                "Collect ncu's SpeedOfLight section (`ncu --section SpeedOfLight`, metrics "
                "sm__throughput.avg.pct_of_peak_sustained_elapsed and "
                "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed).",
                SECTION,
            )
        )
        return result
    stats = per_kernel(
        kernels, ["sm_throughput_pct", "memory_throughput_pct", "dram_throughput_pct"], memo=derived.kernel_memo
    )
    stats["memory_source"] = np.where(stats["memory_throughput_pct"].notna(), "memory", "dram")
    stats["memory_throughput_pct"] = stats["memory_throughput_pct"].fillna(stats["dram_throughput_pct"])
    stats["bound"] = [
        classify(s, m, t.bound_pct, t.latency_pct)
        for s, m in zip(stats["sm_throughput_pct"], stats["memory_throughput_pct"])
    ]
    stats["peak_unit_pct"] = stats[["sm_throughput_pct", "memory_throughput_pct"]].max(axis=1)
    limiters = kernel_limiters(kernels, stats, memo=derived.kernel_memo)
    for c in ("limiter_unit", "limiter_pct", "limiter_metric", "limiter_source", "next_unit", "next_pct"):
        stats[c] = limiters[c].to_numpy()
    result.tables["kernels"] = stats
    result.meta.update({"bound_pct": t.bound_pct, "latency_pct": t.latency_pct})
    by_class = stats.groupby("bound")["share"].sum()
    for cls in CLASSES:
        result.summary[f"sol_{cls.replace('-', '_')}_gpu_time_share"] = float(by_class.get(cls, 0.0))
    tiny_ns = th.tiny_kernels.max_dur_us * 1000.0
    lat = stats[
        (stats["bound"] == "latency-bound") & (stats["share"] >= t.min_kernel_share) & (stats["mean_dur_ns"] >= tiny_ns)
    ].copy()
    if len(lat):
        result.findings.append(_latency_finding(lat, t))
    return result


def _latency_finding(lat, t) -> Finding:
    lat["est_loss_share"] = lat["share"] * (1.0 - lat["peak_unit_pct"] / t.bound_pct).clip(lower=0.0)
    subjects = []
    for _, r in lat.iterrows():
        f = launches_figure(r)
        f.update(
            {
                "sm_throughput_pct": r["sm_throughput_pct"],
                "memory_throughput_pct": r["memory_throughput_pct"],
                "limiter_unit": r["limiter_unit"],
                "limiter_pct": r["limiter_pct"],
                "est_loss_share": r["est_loss_share"],
            }
        )
        sev = Severity.of(r["share"], warning=t.warning_kernel_share)
        subjects.append(Subject("kernel", kernel_subject_name(r), sev, f))
    top = lat.iloc[0]
    share = float(lat["share"].sum())
    return Finding(
        id="speed_of_light.latency_bound",
        analyzer=NAME,
        severity=max(s.severity for s in subjects),
        title=(
            f"{n_things(len(lat), 'kernel')} ({share_human(share)} of GPU time) {agree(len(lat), 'reaches', 'reach')} "
            f"under {pct_human(t.latency_pct, 0)} of both compute and memory peak; heaviest: {top['kernel']} "
            f"(SM {pct_human(top['sm_throughput_pct'], 0)}, memory {pct_human(top['memory_throughput_pct'], 0)}"
            + (
                f"; busiest unit {top['limiter_unit']} at {pct_human(top['limiter_pct'], 0)})"
                if top["limiter_unit"]
                else ")"
            )
        ),
        subjects=tuple(subjects),
        evidence=(
            Evidence(
                "sm__throughput.avg.pct_of_peak_sustained_elapsed", float(top["sm_throughput_pct"]), "%", t.latency_pct
            ),
            Evidence(
                "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
                float(top["memory_throughput_pct"]),
                "%",
                t.latency_pct,
            ),
            Evidence("latency_bound_gpu_time_share", share, "share"),
        ),
        cost_share=min(1.0, float(lat["est_loss_share"].sum())),
        recommendation=(
            f"{names_list(lat)} leave both the SMs and memory mostly idle: expose more parallelism "
            "(more blocks, more independent work per thread), remove dependent memory accesses and "
            "synchronisation inside the kernel (__syncthreads in loops, atomics on one address), and "
            "check the occupancy and launch-configuration findings for the same kernels."
        ),
        section=SECTION,
    )
