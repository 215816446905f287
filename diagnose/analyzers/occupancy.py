"""Occupancy: warps that could be resident but are not, and what limits how many can be.

Theoretical occupancy is set by the tightest of four per-SM limits (registers,
shared memory, warps, blocks: ncu's ``launch__occupancy_limit_*``, in blocks per SM).
Achieved occupancy well under theoretical means warps are not there when they
could be: load imbalance, a partial last wave, or kernels too short to fill the
SMs. Hopper's warp-specialised GEMMs run one large block per SM by design, so a
low theoretical occupancy alone is not flagged: only the achieved-vs-theoretical gap.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.findings import Evidence, Finding, Result, Severity, Subject
from diagnose.kernel_stats import launches_figure, per_kernel

NAME = "occupancy"
ORDER = 15
SECTION = "section-occupancy"
LIMITS = {"registers": "occupancy_limit_registers", "shared_mem": "occupancy_limit_shared_mem",
          "warps": "occupancy_limit_warps", "blocks": "occupancy_limit_blocks"}
ADVICE = {
    "registers": "registers per thread limit residency: cap them with __launch_bounds__ / -maxrregcount, "
                 "or move per-thread arrays to shared memory",
    "shared_mem": "shared memory per block limits residency: use smaller tiles, fewer pipeline stages, or raise "
                  "the shared-memory carveout (cudaFuncAttributePreferredSharedMemoryCarveout)",
    "warps": "threads per block limit residency: the SM's warp slots are full with few blocks; smaller blocks "
             "let the scheduler balance better",
    "blocks": "the per-SM block limit binds: blocks are too small; use larger blocks (more threads per block)",
}


def analyze(profile, th) -> Result:
    t = th.occupancy
    kernels = profile.kernels
    result = Result(NAME)
    if not len(kernels) or kernels["achieved_occupancy_pct"].notna().sum() == 0:
        return result
    stats = per_kernel(kernels, ["achieved_occupancy_pct", "theoretical_occupancy_pct", "registers_per_thread",
                                 "shared_mem_per_block_bytes", *LIMITS.values()])
    limits = stats[list(LIMITS.values())]
    stats["limiter"] = [
        (min(((k, row[c]) for k, c in LIMITS.items() if not np.isnan(row[c])), key=lambda kv: kv[1])[0]
         if row.notna().any() else None)
        for _, row in limits.iterrows()]
    stats["gap_pts"] = stats["theoretical_occupancy_pct"] - stats["achieved_occupancy_pct"]
    result.tables["kernels"] = stats
    tiny_ns = th.tiny_kernels.max_dur_us * 1000.0
    gap = stats[(stats["gap_pts"] > t.gap_pts) & (stats["share"] >= t.min_kernel_share)
                & (stats["mean_dur_ns"] >= tiny_ns)].copy()
    result.summary["achieved_occupancy_time_weighted_pct"] = float(
        np.average(stats["achieved_occupancy_pct"].fillna(0), weights=stats["gpu_time_ns"].fillna(0))
        if stats["gpu_time_ns"].sum() > 0 else np.nan)
    if len(gap):
        result.findings.append(_gap_finding(gap.sort_values("gpu_time_ns", ascending=False), t))
    return result


def _gap_finding(gap: pd.DataFrame, t) -> Finding:
    subjects = []
    for _, r in gap.iterrows():
        sev = Severity.CRITICAL if r["gap_pts"] > t.critical_gap_pts and r["share"] >= 0.1 else Severity.WARNING
        f = launches_figure(r)
        f.update({"achieved_occupancy_pct": r["achieved_occupancy_pct"],
                  "theoretical_occupancy_pct": r["theoretical_occupancy_pct"], "gap_pts": r["gap_pts"],
                  "limiter": r["limiter"]})
        subjects.append(Subject("kernel", r["kernel"], sev, f))
    top = gap.iloc[0]
    # the lost share: time × (1 - achieved/theoretical), an upper bound on what filling the slots could win
    lost = float((gap["share"] * (gap["gap_pts"] / gap["theoretical_occupancy_pct"].replace(0, np.nan))).sum())
    limiter = top["limiter"]
    rec = ("Achieved occupancy far below theoretical means resident-warp slots sit empty: look for load imbalance "
           "between blocks, a partial last wave (see launch configuration), or kernels too short to ramp up.")
    if limiter in ADVICE:
        rec += f" Theoretical occupancy itself is bounded by {limiter.replace('_', ' ')}: {ADVICE[limiter]}."
    return Finding(
        id="occupancy.gap", analyzer=NAME, severity=max(s.severity for s in subjects),
        title=(f"{top['kernel']} reaches {top['achieved_occupancy_pct']:.0f} % occupancy of a possible "
               f"{top['theoretical_occupancy_pct']:.0f} % ({top['gap_pts']:.0f} points lost)"),
        subjects=tuple(subjects),
        evidence=(Evidence("sm__warps_active.avg.pct_of_peak_sustained_active", float(top["achieved_occupancy_pct"]), "%"),
                  Evidence("sm__maximum_warps_per_active_cycle_pct", float(top["theoretical_occupancy_pct"]), "%"),
                  Evidence("occupancy_gap", float(top["gap_pts"]), "points", t.gap_pts)),
        cost_share=lost if not np.isnan(lost) else None, recommendation=rec, section=SECTION)
