"""L2 hit rate: kernels whose working set does not stay in L2, split by why.

From ncu's ``lts__t_sector_hit_rate.pct`` per launch, aggregated per kernel
(duration-weighted). A low hit rate costs most where a kernel is also heavy, so
kernels are ranked by GPU time × miss rate. Why the rate is low decides what helps, and
is read from the data's reuse: global-load sectors requested per DRAM sector read
(``reuse_l1`` at L1, ``reuse_l2`` at L2; thresholds ``l2.streaming_max`` / ``reuse_min``):

- **compulsory** (``l2.compulsory_misses``, info): each byte is read about once — a streaming
  kernel. Its misses are the first touch of each byte; caching or tiling cannot remove them,
  and a streaming kernel at DRAM peak already runs at the memory system's speed. What helps is
  moving fewer bytes: fusing passes, lower precision.
- **reuse missed** (``l2.reuse_missed``): the same bytes are asked for many times and miss
  anyway: tile, reorder, stage in shared memory. Its severity is the band's, and its cost the
  time a hit rate at the warning band would save.

In ``l2.reuse_missed`` and ``l2.low_hit_rate`` a kernel whose recoverable time is under ``info_loss_share`` of
GPU time is an info subject whatever its band (the band stays in its figures).
- otherwise (``l2.low_hit_rate``): scattered access, or the reuse metrics were not collected;
  whether the kernel is DRAM-bound decides the advice (a working set that thrashes L2, or
  scattered latency-bound access).

A kernel held back by the L1/TEX load path or L2 far from its roofline (diagnose.derive.onchip_bound: a naive
GEMM re-reading its operands from cache, whatever its L2 band) is ``speed_of_light.onchip_bound``'s, with its
cause and fix; it is left out of these findings so its time is not counted twice.

The band (85 / 62 %) is shown for every kernel. Every kernel under the warning band that none of the findings
above names is a subject of ``l2.below_band`` (info), with why its misses cost no time a cache could give back:
under ``min_kernel_share`` of GPU time, a launch-bound micro-kernel, SM-saturated with DRAM idle, or
speed_of_light.onchip_bound's. So the L2 section and the JSON list every kernel below 85 %. A ``gpudiag profile --ncu`` run also gives the
timeline of each profiled launch's hit rate with the allocator's segment events
(diagnose.derive.allocator_timeline): whether low-hit launches follow new segments. Kernels under ``min_kernel_share`` of GPU time,
or shorter than ``tiny_kernels.max_dur_us`` on average (a few KB touched: their hit rate is
cold misses), are shown but not flagged. Nor are kernels that keep the SMs busy (SM throughput
at the speed-of-light bound) while DRAM is not saturated: their misses are not what limits them.
On the H200, cuBLAS's Hopper GEMMs (nvjet) run at ~72 % L2 hit from N=2048 to 8192 at 73–93 %
SM throughput (fixtures/ncu/matmul_tiled; capture 2). Launches where ncu reported no hit rate
(or a rate over 100 %, which the parser turns into NaN) are skipped.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.derive.allocator_timeline import allocator_timeline, hit_after_new_segment
from diagnose.derive.derived import Derived
from diagnose.derive.kernel_limiter import kernel_limiters
from diagnose.derive.kernel_reuse import reuse
from diagnose.derive.kernel_stats import (
    kernel_subject_name,
    label_of_launch,
    launches_figure,
    most_common,
    names_list,
    per_kernel,
    slim,
    total_gpu_time_ns,
    weighted_mean,
)
from diagnose.findings import Evidence, Finding, Result, Severity, Subject, band, not_measured
from diagnose.formatting import agree, count_human, n_things, ns_human, pct_human, share_human
from diagnose.metrics import HIGHER, LOWER, Metric

NAME = "l2"
ORDER = 10
SECTION = "section-l2"
TITLE = "L2 cache"  # its report section's heading
JUDGES = "L2 hit rates"  # what "Nothing crossed a threshold: judged ..." names
COST_BASIS = "GPU time"  # its cost_share is a share of the profiled kernels' GPU time, as the verdict says it
COST_BASIS_BY_ID: dict[str, str] = {}  # no finding's basis differs
THRESHOLDS = ("l2", "speed_of_light", "tiny_kernels")  # the Thresholds groups it reads (diagnose/thresholds.py)
SUMMARY_METRICS = (  # what analyze() writes into Result.summary (diagnose.metrics)
    # ncu's details page prints percentages with 2 decimals: 0.01 % is the coarsest form read
    Metric("l2_hit_time_weighted_pct", "L2 hit rate, weighted by kernel time", "%", HIGHER, 0.01),
    # a share of GPU time: 0.001 (0.1 %) is below the launch-to-launch spread of kernel durations
    Metric("l2_low_hit_gpu_time_share", "GPU time in kernels with a low L2 hit rate", "share", LOWER, 0.001),
)
FINDING_IDS = (  # every id this analyzer can produce: `gpudiag check --ignore` validates against them
    "l2.below_band",
    "l2.compulsory_misses",
    "l2.low_hit_rate",
    "l2.not_measured",
    "l2.reuse_missed",
)
HEATMAP_COLUMNS = ("l2_hit_pct", "dram_throughput_pct", "grid_size", "grid_x", "grid_y", "grid_z")  # per launch
METRICS = [
    "l2_hit_pct",
    "l2_read_hit_pct",
    "l2_write_hit_pct",
    "dram_throughput_pct",
    "sm_throughput_pct",
    "memory_throughput_pct",
]
COMPULSORY, REUSE_MISSED, OTHER = "compulsory", "reuse missed", "scattered or unknown"
HOW_TO_MEASURE = (
    "Collect it with ncu's MemoryWorkloadAnalysis section (`ncu --section MemoryWorkloadAnalysis`) "
    "or the metric alone (`ncu --metrics lts__t_sector_hit_rate.pct`); `gpudiag profile --ncu` "
    "collects it by default."
)
REC_DRAM_BOUND = (
    "the working set does not fit in L2 and DRAM is busy: make accesses local — tile or block the "
    "loop so a block reuses data while it is still in L2, sort or bucket gather/scatter indices so "
    "neighbouring threads touch neighbouring rows, fuse passes that re-read the same tensor, keep "
    "hot data resident with an L2 access policy window (cudaAccessPolicyWindow, persisting L2), "
    "and move fewer bytes (bf16/fp8, smaller tables)"
)
REC_REUSE = (
    "the same bytes are requested many times and fetched again instead of being reused: tile or block the "
    "loop so each value loaded feeds many operations (stage tiles in shared memory and registers; for a "
    "GEMM-like loop a 32×32 tile cuts global loads about 32×), reorder the loops so a block reuses what it "
    "just loaded, and keep hot data resident with an L2 access policy window (persisting L2)"
)
REC_COMPULSORY = (
    "each byte is read about once, so these misses are compulsory: no cache, tile or L2 policy removes "
    "them, and at DRAM peak the kernel already runs at the memory system's speed. Move fewer bytes: fuse "
    "it with the kernels that produce or consume the same tensors (one pass instead of several), use "
    "lower precision (bf16/fp8), or skip work"
)
REC_LATENCY = (
    "latency-bound scattered access, DRAM not saturated: each access fetches sectors that are not "
    "reused — coalesce (contiguous addresses per warp, vectorised loads), sort or bucket indices so "
    "sectors are shared, and keep more bytes in flight (more blocks or more independent loads per "
    "thread) to hide the DRAM latency"
)


def analyze(profile, derived: Derived, th) -> Result:
    t = th.l2
    kernels = profile.kernels
    result = Result(NAME)
    if not len(kernels):
        return result
    if kernels["l2_hit_pct"].notna().sum() == 0:
        result.findings.append(not_measured(NAME, "L2 hit rate", HOW_TO_MEASURE, SECTION))
        return result
    stats = per_kernel(kernels, METRICS, memo=derived.kernel_memo)
    stats["grid_size"] = most_common(kernels, "grid_size", stats, memo=derived.kernel_memo)
    stats["miss_rate_pct"] = 100.0 - stats["l2_hit_pct"]
    stats["miss_cost_ns"] = stats["gpu_time_ns"] * stats["miss_rate_pct"] / 100.0
    stats["dram_bound"] = stats["dram_throughput_pct"] >= t.dram_bound_pct
    stats["compute_saturated"] = (stats["sm_throughput_pct"] >= th.speed_of_light.bound_pct) & ~stats["dram_bound"]
    stats["band"] = [(_band_label(band(h, t.warning_pct, t.critical_pct))) for h in stats["l2_hit_pct"]]
    limiters = kernel_limiters(kernels, stats, memo=derived.kernel_memo)
    for c in ("limiter_unit", "limiter_pct", "next_unit", "next_pct"):
        stats[c] = limiters[c].to_numpy()
    stats = stats.join(reuse(kernels, stats, memo=derived.kernel_memo))
    stats["cause"] = [cause_of(r1, r2, t) for r1, r2 in zip(stats["reuse_l1"], stats["reuse_l2"])]
    stats = stats.sort_values(
        ["miss_cost_ns", "kernel"], ascending=[False, True], na_position="last", kind="stable"
    ).reset_index(drop=True)
    result.tables["kernels"] = stats
    # every launch in launch order: the section bins the costliest kernels' launches into its heatmap
    result.tables["launches"] = launches_in_order(kernels, stats, memo=derived.kernel_memo)
    result.meta.update(
        {
            "warning_pct": t.warning_pct,
            "critical_pct": t.critical_pct,
            "streaming_max": t.streaming_max,
            "reuse_min": t.reuse_min,
            "kernels": int(len(stats)),
        }
    )

    snapshot = profile.snapshots.get(0, next(iter(profile.snapshots.values()), None))
    timeline = allocator_timeline(kernels, profile.launch_starts, snapshot)
    if timeline:
        result.tables["timeline_launches"] = timeline["launches"]
        result.tables["timeline_segments"] = timeline["segments"]
        result.meta.update(hit_after_new_segment(timeline["launches"]))

    total = total_gpu_time_ns(kernels)
    measured = stats[stats["l2_hit_pct"].notna()]
    below = measured[measured["l2_hit_pct"] < t.warning_pct]
    result.summary["l2_hit_time_weighted_pct"] = weighted_mean(kernels["l2_hit_pct"], kernels["dur_ns"])
    result.summary["l2_low_hit_gpu_time_share"] = float(below["gpu_time_ns"].sum() / total) if total > 0 else 0.0
    heavy = (stats["share"] >= t.min_kernel_share) & (stats["mean_dur_ns"] >= th.tiny_kernels.max_dur_us * 1000.0)
    onchip = derived.onchip_bound()
    owned = stats["kernel_name"].isin(onchip.loc[onchip["flagged"], "kernel_name"]) if len(onchip) else heavy & False
    # launch-bound micro-kernels touch a few KB: their hit rate is cold misses, and tiny_kernels reports them
    low = below[heavy.loc[below.index] & ~below["compute_saturated"].astype(bool) & ~owned.loc[below.index]]
    compulsory = low[low["cause"] == COMPULSORY]
    reused = low[low["cause"] == REUSE_MISSED]
    other = low[low["cause"] == OTHER]
    if len(other):
        result.findings.append(_low_hit_finding(other, t))
    if len(reused):
        result.findings.append(_reuse_finding(reused, t))
    if len(compulsory):
        result.findings.append(_compulsory_finding(compulsory, t))
    rest = below[~below.index.isin(low.index)]
    if len(rest):
        result.findings.append(_below_band_finding(rest, heavy, owned, t, th))
    return result


def cause_of(reuse_l1: float, reuse_l2: float, t) -> str:
    """Why a kernel misses: compulsory (each byte read about once), reuse missed, or neither / not measured."""
    known = [r for r in (reuse_l1, reuse_l2) if r is not None and np.isfinite(r)]
    if not known:
        return OTHER
    if max(known) <= t.streaming_max:
        return COMPULSORY
    if max(known) >= t.reuse_min:
        return REUSE_MISSED
    return OTHER


def _severity(row: pd.Series, t) -> Severity:
    """A kernel's band, or info when what a better hit rate would give back is under ``info_loss_share`` of GPU time
    (its band is still in its figures)."""
    if row["est_loss_share"] < t.info_loss_share:
        return Severity.INFO
    return band(row["l2_hit_pct"], t.warning_pct, t.critical_pct)


def _band_label(sev) -> str:
    return "ok" if sev is None else sev.label


def recovered_share(hit_pct: pd.Series, target_pct: float) -> pd.Series:
    """Share of a kernel's misses that vanish if its hit rate rises to ``target_pct`` (0 when already there)."""
    miss = (100.0 - hit_pct).clip(lower=1e-9)
    return ((target_pct - hit_pct).clip(lower=0.0) / miss).clip(upper=1.0)


def _subject(row: pd.Series, t, severity: Severity | None) -> Subject:
    figures = launches_figure(row)
    figures.update(
        {
            "l2_hit_pct": row["l2_hit_pct"],
            "band": row["band"],
            "cause": row["cause"],
            "limiter_unit": row["limiter_unit"],
            "limiter_pct": row["limiter_pct"],
            "miss_cost_ns": row["miss_cost_ns"],
            "dram_throughput_pct": row["dram_throughput_pct"],
            "dram_bound": bool(row["dram_bound"]),
            "est_loss_share": row["est_loss_share"],
        }
    )
    for m in ("l2_read_hit_pct", "l2_write_hit_pct", "reuse_l1", "reuse_l2"):
        if not pd.isna(row[m]):
            figures[m] = row[m]
    return Subject("kernel", kernel_subject_name(row), severity, figures)


def _hit_evidence(rows: pd.DataFrame, t) -> list[Evidence]:
    top = rows.iloc[0]
    evidence = [
        Evidence(
            "lts__t_sector_hit_rate.pct",
            float(top["l2_hit_pct"]),
            "%",
            t.critical_pct if top["l2_hit_pct"] < t.critical_pct else t.warning_pct,
        ),
        Evidence(
            "l2_hit_time_weighted_pct (flagged kernels)",
            weighted_mean(rows["l2_hit_pct"], rows["gpu_time_ns"]),
            "%",
            t.warning_pct,
        ),
    ]
    if not np.isnan(top["dram_throughput_pct"]):
        evidence.append(
            Evidence(
                "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                float(top["dram_throughput_pct"]),
                "%",
                t.dram_bound_pct,
            )
        )
    return evidence


def _low_hit_finding(low: pd.DataFrame, t) -> Finding:
    low = low.copy()
    low["est_loss_share"] = low["share"] * recovered_share(low["l2_hit_pct"], t.warning_pct)
    subjects = [_subject(row, t, _severity(row, t)) for _, row in low.iterrows()]
    worst = max(s.severity for s in subjects)
    top = low.iloc[0]  # the largest time × miss rate
    share = float(low["share"].sum())
    n = len(low)
    title = (
        f"{n_things(n, 'kernel')} below {pct_human(t.warning_pct, 0)} L2 hit rate {agree(n, 'takes', 'take')} "
        f"{share_human(share)} of GPU time; costliest: {top['kernel']} at {pct_human(top['l2_hit_pct'])} hit"
    )
    evidence = _hit_evidence(low, t)
    evidence.insert(2, Evidence("l2_low_hit_gpu_time_share", share, "share"))
    bound, scattered = low[low["dram_bound"]], low[~low["dram_bound"]]
    parts = []
    if len(bound):
        parts.append(f"DRAM-bound (≥ {pct_human(t.dram_bound_pct, 0)} of peak) {names_list(bound)}: {REC_DRAM_BOUND}.")
    if len(scattered):
        parts.append(f"Not DRAM-bound {names_list(scattered)}: {REC_LATENCY}.")
    parts.append("Rank by miss_cost_ns (GPU time × miss rate) in the L2 section.")
    return Finding(
        id="l2.low_hit_rate",
        analyzer=NAME,
        severity=worst,
        title=title,
        subjects=tuple(subjects),
        evidence=tuple(evidence),
        cost_share=float(min(1.0, low["est_loss_share"].sum())),
        recommendation=" ".join(parts),
        section=SECTION,
    )


def _reuse_finding(rows: pd.DataFrame, t) -> Finding:
    """Kernels under the warning band whose data has reuse they miss: severity from the band, cost the hits the
    warning band would add."""
    rows = rows.assign(est_loss_share=rows["share"] * recovered_share(rows["l2_hit_pct"], t.warning_pct))
    rows = rows.sort_values(["est_loss_share", "kernel"], ascending=[False, True], kind="stable")
    subjects = [_subject(r, t, _severity(r, t)) for _, r in rows.iterrows()]
    top = rows.iloc[0]
    share = float(rows["share"].sum())
    reuse_text = "; ".join(
        f"{r['kernel']} asks for each byte ~{count_human(round(_reuse_of(r)))}× per DRAM read at "
        f"{pct_human(r['l2_hit_pct'])} L2 hit"
        for _, r in rows.head(3).iterrows()
    )
    return Finding(
        id="l2.reuse_missed",
        analyzer=NAME,
        severity=max(s.severity for s in subjects),
        title=(
            f"{n_things(len(rows), 'kernel')} ({share_human(share)} of GPU time) "
            f"{agree(len(rows), 're-reads', 're-read')} the same data from DRAM instead of reusing it; costliest: "
            f"{top['kernel']} (each byte requested ~{count_human(round(_reuse_of(top)))}× per DRAM read, "
            f"L2 hit {pct_human(top['l2_hit_pct'])})"
        ),
        subjects=tuple(subjects),
        evidence=(
            Evidence(
                "reuse (global-load sectors requested per DRAM sector read)",
                float(_reuse_of(top)),
                "ratio",
                t.reuse_min,
            ),
            Evidence("lts__t_sector_hit_rate.pct", float(top["l2_hit_pct"]), "%", t.warning_pct),
        ),
        cost_share=float(min(1.0, rows["est_loss_share"].sum())),
        recommendation=f"{reuse_text}: {REC_REUSE}.",
        section=SECTION,
    )


def _below_band_finding(rows: pd.DataFrame, heavy: pd.Series, owned: pd.Series, t, th) -> Finding:
    """Kernels under the warning band that no other finding names, each with why it costs no recoverable time."""
    reasons = []
    for i, r in rows.iterrows():
        if owned.loc[i]:
            reasons.append(
                f"limited by {r['limiter_unit']} at {pct_human(r['limiter_pct'], 0)}: speed_of_light.onchip_bound "
                "has its cause and cost"
            )
        elif r["share"] < t.min_kernel_share:
            reasons.append(
                f"{share_human(r['share'], 2)} of GPU time, under the {share_human(t.min_kernel_share, 2)} judged"
            )
        elif not heavy.loc[i]:
            reasons.append(
                f"launches of {ns_human(r['mean_dur_ns'])} on average touch a few KB: cold misses (tiny_kernels judges "
                "them)"
            )
        else:
            reasons.append(
                f"SM at {pct_human(r['sm_throughput_pct'], 0)} of peak with DRAM at "
                f"{pct_human(r['dram_throughput_pct'], 0)}: its misses are not what limits it"
            )
    rows = rows.assign(est_loss_share=0.0, why_no_cost=reasons)
    subjects = []
    for _, r in rows.iterrows():
        subject = _subject(r, t, Severity.INFO)
        subject.figures["why_no_cost"] = r["why_no_cost"]
        subjects.append(subject)
    listed = "; ".join(
        f"{r['kernel']} at {pct_human(r['l2_hit_pct'])} ({r['band']} band): {r['why_no_cost']}"
        for _, r in rows.head(3).iterrows()
    )
    more = f"; {n_things(len(rows) - 3, 'more kernel')} in the L2 section" if len(rows) > 3 else ""
    n = len(rows)
    return Finding(
        id="l2.below_band",
        analyzer=NAME,
        severity=Severity.INFO,
        title=(
            f"{n_things(n, 'more kernel')} below {pct_human(t.warning_pct, 0)} L2 hit rate "
            f"({share_human(float(rows['share'].sum()))} of GPU time) {agree(n, 'costs', 'cost')} no time a cache "
            f"could give back: {rows.iloc[0]['kernel']} at {pct_human(rows.iloc[0]['l2_hit_pct'])}"
        ),
        subjects=tuple(subjects),
        evidence=(Evidence("lts__t_sector_hit_rate.pct", float(rows.iloc[0]["l2_hit_pct"]), "%", t.warning_pct),),
        cost_share=None,
        recommendation=f"{listed}{more}.",
        section=SECTION,
    )


def _reuse_of(row: pd.Series) -> float:
    values = [v for v in (row["reuse_l1"], row["reuse_l2"]) if v == v]
    return max(values) if values else float("nan")


def _compulsory_finding(rows: pd.DataFrame, t) -> Finding:
    """Streaming kernels: info, no cost a cache could recover (their band is still shown)."""
    rows = rows.assign(est_loss_share=0.0)
    subjects = [_subject(r, t, Severity.INFO) for _, r in rows.iterrows()]
    top = rows.iloc[0]
    at_peak = rows[rows["dram_bound"]]
    share = float(rows["share"].sum())
    parts = []
    if len(at_peak):
        busiest = at_peak.iloc[0]  # a kernel of the list it speaks of, not the finding's top one
        parts.append(
            f"{names_list(at_peak)} {agree(len(at_peak), 'is', 'are')} DRAM-bound "
            f"(≥ {pct_human(t.dram_bound_pct, 0)} of peak; {busiest['kernel']} at "
            f"{pct_human(busiest['dram_throughput_pct'], 0)})."
        )
    parts.append(f"{REC_COMPULSORY}.")
    return Finding(
        id="l2.compulsory_misses",
        analyzer=NAME,
        severity=Severity.INFO,
        title=(
            f"{n_things(len(rows), 'streaming kernel')} ({share_human(share)} of GPU time) "
            f"{agree(len(rows), 'reads', 'read')} each byte about once: "
            f"{agree(len(rows), 'its', 'their')} L2 misses are compulsory ({top['kernel']}: "
            f"{pct_human(top['l2_hit_pct'])} hit, {n_things(_reuse_of(top), 'sector')} requested per DRAM sector)"
        ),
        subjects=tuple(subjects),
        evidence=tuple(_hit_evidence(rows, t))
        + (
            Evidence(
                "reuse (global-load sectors requested per DRAM sector read)",
                float(_reuse_of(top)),
                "ratio",
                t.streaming_max,
            ),
        ),
        cost_share=None,
        recommendation=" ".join(parts),
        section=SECTION,
    )


def launches_in_order(kernels: pd.DataFrame, stats: pd.DataFrame, memo=None) -> pd.DataFrame:
    """Every profiled launch in launch order (by ``launch_id`` when every launch has one, else as ncu listed
    them): ``launch`` counts from 0 over the whole capture, ``kernel`` is its kernel's label in ``stats``, then
    the figures the section's kernel × launch-order heatmap shows (hit rate, duration, DRAM throughput, grid)."""
    k = slim(kernels, "launch_id", *HEATMAP_COLUMNS)
    labels = label_of_launch(kernels, stats, memo=memo).to_numpy()  # on the table analyze() grouped (memoized)
    if "launch_id" in k.columns and k["launch_id"].notna().all():
        by_launch = np.argsort(k["launch_id"].to_numpy(), kind="stable")
        k, labels = k.take(by_launch), labels[by_launch]
    out = k[[c for c in ("launch_id", "dur_ns", *HEATMAP_COLUMNS) if c in k.columns]].reset_index(drop=True)
    out.insert(0, "kernel", labels)
    out.insert(0, "launch", np.arange(len(out)))
    return out
