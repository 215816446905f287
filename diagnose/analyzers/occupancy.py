"""Occupancy: warp slots that could be filled but are not, and what bounds how many there are.

Theoretical occupancy is set by the tightest of four per-SM limits (registers,
shared memory, warps, blocks: ncu's ``launch__occupancy_limit_*``, in blocks per SM);
that one is the *limiter*. Achieved occupancy well under theoretical means warps are
missing when they could be resident: load imbalance between blocks, a partial last
wave, or kernels too short to ramp up. The finding is that gap, over ``gap_pts``.

Two cases are left to other analyzers: a grid with too few blocks to fill the slots
(achieved is then capped at ``grid_ceiling_pct``: the blocks an SM actually gets ×
warps per block; launch_config reports the grid), and launch-bound micro-kernels
shorter than ``tiny_kernels.max_dur_us`` (tiny_kernels reports them). The grid's cap is judged
per launch (a kernel's launches can differ in grid): a finding's figures (achieved, theoretical,
the gap, the share of GPU time) are those of the kernel's launches the grid does not cap, and it
says how many of the kernel's launches they are. Hopper's
warp-specialised GEMMs run one large block per SM by design, so a low theoretical
occupancy alone is not flagged; the limiter is shown so the advice fits.

Cost estimate: a latency-bound kernel's time goes with its resident warps, so filling
the slots would save ``gap / theoretical`` of its time (an upper bound). A kernel whose SOL
limiter (diagnose.derive.kernel_limiter) is already at ``saturated_unit_pct`` of that unit's peak —
a streaming kernel at DRAM peak — would not run faster with more warps: its gap is shown as
info, with no cost.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.derive.derived import Derived
from diagnose.derive.kernel_limiter import kernel_limiters
from diagnose.derive.kernel_stats import (
    kernel_subject_name,
    launches_figure,
    most_common,
    per_kernel,
    per_kernel_sum,
    total_gpu_time_ns,
)
from diagnose.derive.occupancy_limits import LIMITS, grid_ceiling_pct, limiter
from diagnose.findings import Evidence, Finding, Result, Severity, Subject
from diagnose.formatting import count_human, n_things, pct_human
from diagnose.metrics import HIGHER, Metric

NAME = "occupancy"
ORDER = 15
SECTION = "section-occupancy"
TITLE = "Occupancy"  # its report section's heading
JUDGES = "occupancy"  # what "Nothing crossed a threshold: judged ..." names
COST_BASIS = "GPU time"  # its cost_share is a share of the profiled kernels' GPU time, as the verdict says it
COST_BASIS_BY_ID: dict[str, str] = {}  # no finding's basis differs
THRESHOLDS = ("occupancy", "tiny_kernels")  # the Thresholds groups it reads (diagnose/thresholds.py)
SUMMARY_METRICS = (  # what analyze() writes into Result.summary (diagnose.metrics)
    Metric(
        "achieved_occupancy_time_weighted_pct", "Achieved occupancy, weighted by kernel time", "%", HIGHER, 0.01
    ),  # ncu percentages: 2 decimals on the details page
)
FINDING_IDS = (  # every id this analyzer can produce: `gpudiag check --ignore` validates against them
    "occupancy.gap",
)
ADVICE = {
    "registers": "registers per thread bound residency: cap them with __launch_bounds__(threads, minBlocksPerSM) "
    "or -maxrregcount (watch for spills), or keep per-thread arrays in shared memory",
    "shared_mem": "shared memory per block bounds residency: use smaller tiles or fewer pipeline stages, or raise "
    "the carveout (cudaFuncAttributePreferredSharedMemoryCarveout / MaxDynamicSharedMemorySize)",
    "warps": "the SM's warp slots fill with few, large blocks: use fewer threads per block so more, smaller "
    "blocks can be resident and balance",
    "blocks": "the per-SM block limit binds before the warp slots fill: blocks are too small; use bigger blocks "
    "(more threads per block)",
}
GAP_ADVICE = (
    "Achieved occupancy far under theoretical means resident-warp slots sit empty while the kernel "
    "runs: look for load imbalance between blocks (uneven work per block or row), a partial last "
    "wave (see the launch-configuration findings), or kernels too short for the SMs to fill."
)


def analyze(profile, derived: Derived, th) -> Result:
    t = th.occupancy
    kernels = profile.kernels
    result = Result(NAME)
    if not len(kernels) or kernels["achieved_occupancy_pct"].notna().sum() == 0:
        return result
    stats = per_kernel(
        kernels,
        [
            "achieved_occupancy_pct",
            "theoretical_occupancy_pct",
            "registers_per_thread",
            "shared_mem_per_block_bytes",
            "waves_per_sm",
            "sm_count",
            "sm_throughput_pct",
            "memory_throughput_pct",
            *LIMITS.values(),
        ],
        memo=derived.kernel_memo,
    )
    units = kernel_limiters(kernels, stats, memo=derived.kernel_memo)
    stats["sol_limiter_unit"] = units["limiter_unit"].to_numpy()
    stats["sol_limiter_pct"] = units["limiter_pct"].to_numpy()
    for col in ("grid_size", "block_size"):
        stats[col] = most_common(kernels, col, stats, memo=derived.kernel_memo)
    stats["limiter"] = [limiter(row) for _, row in stats[list(LIMITS.values())].iterrows()]
    stats["blocks_per_sm"] = stats[list(LIMITS.values())].min(axis=1, skipna=True)
    stats["gap_pts"] = stats["theoretical_occupancy_pct"] - stats["achieved_occupancy_pct"]
    launch = launch_ceilings(kernels, t.gap_pts)
    dur = pd.to_numeric(kernels["dur_ns"], errors="coerce").fillna(0.0)
    stats["grid_ceiling_pct"] = _weighted_per_kernel(
        kernels, launch["grid_ceiling_pct"], dur, stats, memo=derived.kernel_memo
    )
    stats["grid_limited_launches"] = per_kernel_sum(
        kernels, launch["grid_limited"].astype(float), stats, memo=derived.kernel_memo
    ).fillna(0)
    # the launches the grid does not cap: what a finding judges and states
    judged = ~launch["grid_limited"] & pd.to_numeric(kernels["achieved_occupancy_pct"], errors="coerce").notna()
    weight = dur.where(judged, 0.0)
    stats["judged_launches"] = (
        per_kernel_sum(kernels, judged.astype(float), stats, memo=derived.kernel_memo).fillna(0).astype(int)
    )
    total = total_gpu_time_ns(kernels)
    stats["judged_share"] = (
        per_kernel_sum(kernels, weight, stats, memo=derived.kernel_memo).fillna(0.0) / total if total > 0 else np.nan
    )
    for col in ("achieved_occupancy_pct", "theoretical_occupancy_pct"):
        values = pd.to_numeric(kernels[col], errors="coerce").where(judged)
        stats[f"judged_{col}"] = _weighted_per_kernel(kernels, values, dur, stats, memo=derived.kernel_memo)
    stats["judged_gap_pts"] = stats["judged_theoretical_occupancy_pct"] - stats["judged_achieved_occupancy_pct"]
    stats["grid_limited"] = stats["judged_launches"] == 0
    result.tables["kernels"] = stats
    weights = stats["gpu_time_ns"].where(stats["achieved_occupancy_pct"].notna(), 0.0)
    if weights.sum() > 0:
        result.summary["achieved_occupancy_time_weighted_pct"] = float(
            np.average(stats["achieved_occupancy_pct"].fillna(0.0), weights=weights)
        )
    tiny_ns = th.tiny_kernels.max_dur_us * 1000.0
    gap = stats[
        (stats["judged_gap_pts"] > t.gap_pts)
        & (stats["share"] >= t.min_kernel_share)
        & (stats["mean_dur_ns"] >= tiny_ns)
        & ~stats["grid_limited"]
    ]
    if len(gap):
        result.findings.append(_gap_finding(gap, t))
    return result


def launch_ceilings(kernels: pd.DataFrame, gap_pts: float) -> pd.DataFrame:
    """Per launch: the blocks an SM can hold, the occupancy its grid allows, and whether that cap explains
    its gap (achieved within ``gap_pts`` of it)."""
    frame = pd.DataFrame(
        {c: pd.to_numeric(kernels[c], errors="coerce") for c in ("grid_size", "sm_count", "theoretical_occupancy_pct")}
    )
    limits = pd.DataFrame({c: pd.to_numeric(kernels[c], errors="coerce") for c in LIMITS.values()})
    frame["blocks_per_sm"] = limits.min(axis=1, skipna=True)
    ceiling = grid_ceiling_pct(frame)
    achieved = pd.to_numeric(kernels["achieved_occupancy_pct"], errors="coerce")
    return pd.DataFrame({"grid_ceiling_pct": ceiling, "grid_limited": (ceiling - achieved) <= gap_pts})


def _weighted_per_kernel(kernels: pd.DataFrame, values: pd.Series, weights: pd.Series, stats: pd.DataFrame, memo=None):
    """Per kernel (aligned with ``stats``): ``values``' mean weighted by ``weights``, launches without a value left
    out; the plain mean where their weights sum to 0."""
    v = pd.to_numeric(values, errors="coerce")
    ok = v.notna()
    w = weights.where(ok, 0.0)
    num = per_kernel_sum(kernels, (v * w).where(ok, 0.0), stats, memo=memo)
    den = per_kernel_sum(kernels, w, stats, memo=memo)
    plain = per_kernel_sum(kernels, v.where(ok, 0.0), stats, memo=memo) / per_kernel_sum(
        kernels, ok.astype(float), stats, memo=memo
    )
    return (num / den).where(den > 0, plain)


def _gap_finding(gap: pd.DataFrame, t) -> Finding:
    gap = gap.copy()
    for col in ("achieved_occupancy_pct", "theoretical_occupancy_pct", "gap_pts"):  # the launches judged, only
        gap[col] = gap[f"judged_{col}"]
    saturated = (gap["sol_limiter_pct"] >= t.saturated_unit_pct).to_numpy()
    gap["est_loss_share"] = gap["judged_share"] * (gap["gap_pts"] / gap["theoretical_occupancy_pct"].replace(0, np.nan))
    gap.loc[saturated, "est_loss_share"] = 0.0
    gap = gap.sort_values(["est_loss_share", "kernel"], ascending=[False, True], kind="stable")
    subjects = []
    for _, r in gap.iterrows():
        if r["sol_limiter_pct"] >= t.saturated_unit_pct:
            sev = Severity.INFO  # already at a unit's peak: more warps would not help
        else:  # critical only when both the gap (beyond its cut-off) and the kernel's share reach theirs
            sev = min(
                Severity.of(r["gap_pts"], critical=t.critical_gap_pts, strict=True, otherwise=Severity.WARNING),
                Severity.of(r["judged_share"], critical=t.critical_kernel_share, otherwise=Severity.WARNING),
            )
        f = launches_figure(r)
        f.update(
            {
                "achieved_occupancy_pct": r["achieved_occupancy_pct"],
                "theoretical_occupancy_pct": r["theoretical_occupancy_pct"],
                "gap_pts": r["gap_pts"],
                "judged_launches": int(r["judged_launches"]),
                "limiter": r["limiter"],
                "sol_limiter_unit": r["sol_limiter_unit"],
                "sol_limiter_pct": r["sol_limiter_pct"],
                "blocks_per_sm": r["blocks_per_sm"],
                "registers_per_thread": r["registers_per_thread"],
                "shared_mem_per_block_bytes": r["shared_mem_per_block_bytes"],
                "est_loss_share": r["est_loss_share"],
            }
        )
        subjects.append(Subject("kernel", kernel_subject_name(r), sev, f))
    top = gap.iloc[0]
    lost = float(gap["est_loss_share"].sum(min_count=1))
    limiters = []
    for lim in gap["limiter"].dropna():
        for part in lim.split("+"):
            if part not in limiters:
                limiters.append(part)
    rec = GAP_ADVICE
    at_peak = gap[gap["sol_limiter_pct"] >= t.saturated_unit_pct]
    if len(at_peak):
        rec += (
            f" Not worth it for {', '.join(at_peak['kernel'].head(3))}: "
            + "; ".join(
                f"{r['kernel']} is at {pct_human(r['sol_limiter_pct'], 0)} of its {r['sol_limiter_unit']} peak"
                for _, r in at_peak.head(3).iterrows()
            )
            + ", so more resident warps would not make it faster."
        )
    if limiters:
        per = "; ".join(f"{name.replace('_', ' ')} ({_kernels_with(gap, name)}): {ADVICE[name]}" for name in limiters)
        rec += f" Theoretical occupancy itself is bounded by the limiter of each kernel — {per}."
    return Finding(
        id="occupancy.gap",
        analyzer=NAME,
        severity=max(s.severity for s in subjects),
        title=(
            f"{top['kernel']} reaches {pct_human(top['achieved_occupancy_pct'], 0)} occupancy of a possible "
            f"{pct_human(top['theoretical_occupancy_pct'], 0)} ({n_things(round(top['gap_pts']), 'point')} lost"
            + (
                f" in the {count_human(top['judged_launches'])} of its {n_things(top['launches'], 'launch')} "
                "its grid does not cap)"
                if top["judged_launches"] < top["launches"]
                else ")"
            )
            + (f"; {n_things(len(gap) - 1, 'more kernel')}" if len(gap) > 1 else "")
        ),
        subjects=tuple(subjects),
        evidence=(
            Evidence("sm__warps_active.avg.pct_of_peak_sustained_active", float(top["achieved_occupancy_pct"]), "%"),
            Evidence("sm__maximum_warps_per_active_cycle_pct", float(top["theoretical_occupancy_pct"]), "%"),
            Evidence("occupancy_gap_pts", float(top["gap_pts"]), "points", t.gap_pts),
        ),
        cost_share=None if np.isnan(lost) else min(1.0, lost),
        recommendation=rec,
        section=SECTION,
    )


def _kernels_with(gap: pd.DataFrame, name: str) -> str:
    rows = gap[gap["limiter"].fillna("").str.split("+").apply(lambda parts: name in parts)]
    names = list(rows["kernel"])
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
