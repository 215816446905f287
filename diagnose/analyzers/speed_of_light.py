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

A kernel held back by an on-chip memory unit (the L1/TEX load path or L2 at ``bound_pct`` or more) far from its
roofline is ``speed_of_light.onchip_bound`` (diagnose.derive.onchip_bound): it names the unit, the kernel's bytes
per FLOP at that unit and from DRAM against the GPU's ridge point, the cause read from the capture (bank conflicts,
wasted sectors, reuse missed, shared-memory traffic) and its fix. Its cost is the time above the kernel's roofline,
and its severity follows that cost (``onchip_bound.warning_loss_share`` / ``critical_loss_share``). A streaming
kernel at its DRAM roofline is not one: its limiter is DRAM.
"""

from __future__ import annotations

import numpy as np

from diagnose.derive import onchip_bound as onchip
from diagnose.derive.derived import Derived
from diagnose.derive.kernel_limiter import kernel_limiters, path_of
from diagnose.derive.kernel_roofline import TENSOR_MIN_PCT
from diagnose.derive.kernel_stats import kernel_subject_name, launches_figure, names_list, per_kernel
from diagnose.findings import Evidence, Finding, Result, Severity, Subject, not_measured
from diagnose.formatting import agree, count_human, n_things, ns_human, number_human, pct_human, share_human
from diagnose.metrics import LOWER, NEUTRAL, Metric

NAME = "speed_of_light"
ORDER = 30
SECTION = "section-speed_of_light"
TITLE = "Speed of light"  # its report section's heading
JUDGES = "throughput against peak"  # what "Nothing crossed a threshold: judged ..." names
COST_BASIS = "GPU time"  # its cost_share is a share of the profiled kernels' GPU time, as the verdict says it
COST_BASIS_BY_ID: dict[str, str] = {}  # no finding's basis differs
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
    "speed_of_light.onchip_bound",
)
THRESHOLDS = ("speed_of_light", "onchip_bound", "tiny_kernels", "l2", "memory_access")
ROOFLINE_COLUMNS = (  # diagnose.derive.onchip_bound's figures the section's table shows
    "flop_rate_pct",
    "dram_bytes_per_flop",
    "ridge_bytes_per_flop",
    "roofline_ns",
    "roofline_saving",
)
# what cuts the traffic at the unit, by cause (diagnose.derive.onchip_bound)
FIX = {
    onchip.BANK_CONFLICTS: (
        "pad the shared array by one word a row (tile[32][33] for a 32-wide tile) or swizzle its index, so a "
        "warp's 32 threads hit 32 different banks"
    ),
    onchip.WASTED_SECTORS: (
        "coalesce its global accesses (consecutive threads on consecutive addresses; stage a strided or "
        "transposed access through a shared-memory tile) and use vector loads (float4); memory_access.uncoalesced "
        "has the lines"
    ),
    onchip.REUSE_MISSED: (
        "tile it in shared memory: stage blocks of the operands so each value loaded from global memory feeds "
        "many FMAs (a 32×32 tile cuts global loads about 32×), or call the library routine (cuBLAS, torch.matmul)"
    ),
    onchip.SHARED_TRAFFIC: (
        "tile it in registers as well: each thread computes several outputs (say 8×8) from values it holds in "
        "registers, so each shared-memory load feeds several FMAs; or call cuBLAS / CUTLASS"
    ),
    onchip.UNKNOWN: (
        "ncu's MemoryWorkloadAnalysis tables and source view (--import-source yes) show which instructions fill "
        "that unit"
    ),
}
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
    bound = derived.onchip_bound().set_index("kernel_name")
    for c in ROOFLINE_COLUMNS:
        stats[c] = stats["kernel_name"].map(bound[c]).astype(float) if c in bound.columns else np.nan
    stats = stats.rename(columns={"roofline_saving": "roofline_saving_share"})
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
    flagged = bound[bound["flagged"]].reset_index() if "flagged" in bound.columns else bound.iloc[:0]
    if len(flagged):
        result.findings.append(onchip_finding(flagged, th))
    return result


def onchip_finding(rows, th) -> Finding:
    """Kernels held back by an on-chip memory unit far from their roofline (diagnose.derive.onchip_bound)."""
    t = th.onchip_bound
    rows = rows.sort_values(["est_loss_share", "kernel"], ascending=[False, True], kind="stable")
    subjects = []
    for _, r in rows.iterrows():
        figures = launches_figure(r)
        figures.update(
            {
                "limiter_unit": r["limiter_unit"],
                "limiter_pct": r["limiter_pct"],
                "causes": ", ".join(r["causes"]),
                "saving_share": r["saving"],
                "saving_basis": r["saving_basis"],
                "est_loss_share": r["est_loss_share"],
            }
        )
        for m in (
            "flop_rate_pct",
            "precision",
            "dram_bytes_per_flop",
            "l2_bytes_per_flop",
            "l1_bytes_per_flop",
            "ridge_bytes_per_flop",
            "roofline_ns",
            "shared_conflict_share",
            "reuse_l1",
            "excess_share_pct",
            "l2_hit_pct",
        ):
            if r[m] is not None and r[m] == r[m]:
                figures[m] = r[m]
        severity = Severity.of(r["est_loss_share"], warning=t.warning_loss_share, critical=t.critical_loss_share)
        subjects.append(Subject("kernel", kernel_subject_name(r), severity, figures))
    top = rows.iloc[0]
    share = float(rows["share"].sum())
    unit = f"{top['limiter_unit']} at {pct_human(top['limiter_pct'], 0)} of peak ({_cause_text(top)})"
    title = (
        f"{top['kernel']} is held back by {unit}: {_roofline_clause(top)}"
        if len(rows) == 1
        else f"{n_things(len(rows), 'kernel')} ({share_human(share)} of GPU time) "
        f"{agree(len(rows), 'is', 'are')} held back by on-chip memory traffic, far from "
        f"{agree(len(rows), 'its', 'their')} roofline; costliest: {top['kernel']}, {unit}"
    )
    evidence = [
        Evidence(f"limiter: {top['limiter_unit']}", float(top["limiter_pct"]), "%", th.speed_of_light.bound_pct),
        Evidence(f"time above the roofline ({top['saving_basis']})", float(top["saving"]), "share", t.min_saving),
    ]
    if top["dram_bytes_per_flop"] == top["dram_bytes_per_flop"]:
        evidence.append(
            Evidence(
                "DRAM bytes per FLOP (the ridge: above it DRAM-bound)",
                float(top["dram_bytes_per_flop"]),
                "bytes/FLOP",
                float(top["ridge_bytes_per_flop"]),
            )
        )
    unit_bytes = _unit_bytes_per_flop(top)
    if unit_bytes is not None:
        evidence.append(Evidence(unit_bytes[0], unit_bytes[1], "bytes/FLOP"))
    return Finding(
        id="speed_of_light.onchip_bound",
        analyzer=NAME,
        severity=max(s.severity for s in subjects),
        title=title,
        subjects=tuple(subjects),
        evidence=tuple(evidence),
        cost_share=min(1.0, float(rows["est_loss_share"].sum())),
        recommendation=" ".join(_kernel_advice(r) for _, r in rows.head(3).iterrows())
        + " The saving is the time above each kernel's roofline (its FLOPs at peak, its DRAM bytes at peak "
        "bandwidth): an upper bound, as no kernel reaches the peaks.",
        section=SECTION,
    )


def _cause_text(r) -> str:
    causes = list(r["causes"])
    main = causes[0]
    if main == onchip.BANK_CONFLICTS:
        text = f"shared-memory bank conflicts: {pct_human(100 * r['shared_conflict_share'], 0)} of its shared wavefronts are replays"
    elif main == onchip.WASTED_SECTORS:
        text = f"wasted sectors: {pct_human(r['excess_share_pct'], 0)} of its global sectors are excess"
    elif main == onchip.REUSE_MISSED:
        text = f"reuse missed: each byte requested ~{count_human(round(r['reuse_l1']))}× per DRAM read"
    elif main == onchip.SHARED_TRAFFIC:
        text = "shared-memory traffic: already tiled in shared memory, not in registers"
    else:
        text = "cause not read from the capture"
    return text + (f"; also {', '.join(causes[1:])}" if len(causes) > 1 else "")


def _unit_bytes_per_flop(r) -> tuple[str, float] | None:
    """(label, bytes per FLOP) at the limiting unit's level where the capture has both, else None."""
    level = "l1_bytes_per_flop" if path_of(r["limiter_unit"]) == "load/store path" else "l2_bytes_per_flop"
    value = r[level]
    if value is None or value != value:
        return None
    return ("global bytes through L1 per FLOP" if level.startswith("l1") else "bytes through L2 per FLOP"), float(value)


def _roofline_clause(r) -> str:
    """What its roofline says: bytes per FLOP against the ridge, the time at the roofline, or why it is not known."""
    per_launch = ns_human(r["mean_dur_ns"])
    if r["saving_basis"] != "roofline":
        why = (
            "tensor-core work, which ncu's SASS FLOP counts leave out"
            if r["tensor_pipe_pct"] >= TENSOR_MIN_PCT
            else "no SpeedOfLight_RooflineChart metrics in the capture"
        )
        return (
            f"its roofline was not measured ({why}); off that path its next limit is {r['next_unit']} at "
            f"{pct_human(r['next_pct'], 0)}, so it could take up to {share_human(r['saving'], 0)} less than its "
            f"{per_launch} a launch"
        )
    at_roofline = ns_human(r["roofline_ns"] / max(1, int(r["launches"])))
    limit = {
        "compute": f"its FLOPs at {r['precision']} peak",
        "DRAM": "its DRAM bytes at peak bandwidth",
        "integer ALU": "its integer work at the ALU pipe's peak",
    }[r["roofline_bound"]]
    if not r["flop"] > 0:
        return f"it does no floating-point work; at its roofline ({limit}) it takes {at_roofline} a launch, not {per_launch}"
    unit = _unit_bytes_per_flop(r)
    moved = f"{number_human(unit[1])} {unit[0].replace(' per FLOP', '')} and " if unit else ""
    return (
        f"per FLOP it moves {moved}{number_human(r['dram_bytes_per_flop'])} DRAM bytes, against the GPU's ridge of "
        f"{number_human(r['ridge_bytes_per_flop'])} DRAM bytes per FLOP; at its roofline ({limit}) it takes "
        f"{at_roofline} a launch, not {per_launch} ({pct_human(r['flop_rate_pct'], 1)} of {r['precision']} peak)"
    )


def _kernel_advice(r) -> str:
    fixes = "; ".join(FIX[c] for c in r["causes"])
    return f"{r['kernel']}: {_roofline_clause(r)}. Cause: {_cause_text(r)}. Fix: {fixes}."


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
