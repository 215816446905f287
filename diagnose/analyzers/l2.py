"""L2 hit rate: kernels whose working set does not stay in L2.

From ncu's ``lts__t_sector_hit_rate.pct`` per launch, aggregated per kernel
(duration-weighted). A low hit rate costs most where a kernel is also heavy, so
kernels are ranked by GPU time × miss rate; whether the kernel is DRAM-bound
decides the advice: a working set that thrashes L2 (DRAM busy) or scattered,
latency-bound access (DRAM not busy, sectors fetched and not reused).

Cost estimate: a miss costs a DRAM access, so if a kernel's time follows its
misses, raising its hit rate from h to the warning band w removes (w - h) / (100 - h)
of them; that fraction of the kernel's time is the estimate (an upper bound,
reached when the kernel is bound by that traffic). Kernels under ``min_kernel_share``
of GPU time, or shorter than ``tiny_kernels.max_dur_us`` on average (a few KB touched:
their hit rate is cold misses), are shown but not flagged. Nor are kernels that keep the
SMs busy (SM throughput at the speed-of-light bound) while DRAM is not saturated: their
misses are not what limits them. On the H200, cuBLAS's Hopper GEMMs (nvjet) run at ~72 %
L2 hit from N=2048 to 8192 at 73–93 % SM throughput (fixtures/ncu/matmul_tiled; capture 2). Launches where ncu reported no
hit rate (or a rate over 100 %, which the parser turns into NaN) are skipped.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.findings import Evidence, Finding, Result, Subject, not_measured
from diagnose.kernel_stats import (
    band,
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

NAME = "l2"
ORDER = 10
SECTION = "section-l2"
HEATMAP_MAX_KERNELS = 40
HEATMAP_MAX_COLUMNS = 400
METRICS = ["l2_hit_pct", "l2_read_hit_pct", "l2_write_hit_pct", "dram_throughput_pct", "sm_throughput_pct"]
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
REC_LATENCY = (
    "latency-bound scattered access, DRAM not saturated: each access fetches sectors that are not "
    "reused — coalesce (contiguous addresses per warp, vectorised loads), sort or bucket indices so "
    "sectors are shared, and keep more bytes in flight (more blocks or more independent loads per "
    "thread) to hide the DRAM latency"
)


def analyze(profile, th) -> Result:
    t = th.l2
    kernels = profile.kernels
    result = Result(NAME)
    if not len(kernels):
        return result
    if kernels["l2_hit_pct"].notna().sum() == 0:
        result.findings.append(not_measured(NAME, "L2 hit rate", HOW_TO_MEASURE, SECTION))
        return result
    stats = per_kernel(kernels, METRICS)
    stats["grid_size"] = most_common(kernels, "grid_size", stats)
    stats["miss_rate_pct"] = 100.0 - stats["l2_hit_pct"]
    stats["miss_cost_ns"] = stats["gpu_time_ns"] * stats["miss_rate_pct"] / 100.0
    stats["dram_bound"] = stats["dram_throughput_pct"] >= t.dram_bound_pct
    stats["compute_saturated"] = (stats["sm_throughput_pct"] >= th.speed_of_light.bound_pct) & ~stats["dram_bound"]
    stats["band"] = [(_band_label(band(h, t.warning_pct, t.critical_pct))) for h in stats["l2_hit_pct"]]
    stats = stats.sort_values(
        ["miss_cost_ns", "kernel"], ascending=[False, True], na_position="last", kind="stable"
    ).reset_index(drop=True)
    result.tables["kernels"] = stats
    result.tables["heatmap"] = heatmap_cells(kernels, stats)
    result.meta.update(
        {
            "warning_pct": t.warning_pct,
            "critical_pct": t.critical_pct,
            "heatmap_bin_size": int(result.tables["heatmap"].attrs.get("bin_size", 1)),
            "heatmap_kernels_shown": int(result.tables["heatmap"]["kernel"].nunique()),
            "kernels": int(len(stats)),
        }
    )

    total = total_gpu_time_ns(kernels)
    measured = stats[stats["l2_hit_pct"].notna()]
    below = measured[measured["l2_hit_pct"] < t.warning_pct]
    result.summary["l2_hit_time_weighted_pct"] = weighted_mean(kernels["l2_hit_pct"], kernels["dur_ns"])
    result.summary["l2_low_hit_gpu_time_share"] = float(below["gpu_time_ns"].sum() / total) if total > 0 else 0.0
    # launch-bound micro-kernels touch a few KB: their hit rate is cold misses, and tiny_kernels reports them
    low = below[
        (below["share"] >= t.min_kernel_share)
        & (below["mean_dur_ns"] >= th.tiny_kernels.max_dur_us * 1000.0)
        & ~below["compute_saturated"].astype(bool)
    ]
    if len(low):
        result.findings.append(_low_hit_finding(low, t))
    return result


def _band_label(sev) -> str:
    return "ok" if sev is None else sev.label


def recovered_share(hit_pct: pd.Series, target_pct: float) -> pd.Series:
    """Share of a kernel's misses that vanish if its hit rate rises to ``target_pct`` (0 when already there)."""
    miss = (100.0 - hit_pct).clip(lower=1e-9)
    return ((target_pct - hit_pct).clip(lower=0.0) / miss).clip(upper=1.0)


def _low_hit_finding(low: pd.DataFrame, t) -> Finding:
    low = low.copy()
    low["est_loss_share"] = low["share"] * recovered_share(low["l2_hit_pct"], t.warning_pct)
    subjects = []
    for _, row in low.iterrows():
        figures = launches_figure(row)
        figures.update(
            {
                "l2_hit_pct": row["l2_hit_pct"],
                "miss_cost_ns": row["miss_cost_ns"],
                "dram_throughput_pct": row["dram_throughput_pct"],
                "dram_bound": bool(row["dram_bound"]),
                "est_loss_share": row["est_loss_share"],
            }
        )
        for m in ("l2_read_hit_pct", "l2_write_hit_pct"):
            if not np.isnan(row[m]):
                figures[m] = row[m]
        subjects.append(
            Subject("kernel", kernel_subject_name(row), band(row["l2_hit_pct"], t.warning_pct, t.critical_pct), figures)
        )
    worst = max(s.severity for s in subjects)
    top = low.iloc[0]  # the largest time × miss rate
    share = float(low["share"].sum())
    n = len(low)
    title = (
        f"{n} kernel{'s' if n != 1 else ''} below {t.warning_pct:g} % L2 hit rate take {100 * share:.1f} % "
        f"of GPU time; costliest: {top['kernel']} at {top['l2_hit_pct']:.1f} % hit"
    )
    evidence = [
        Evidence(
            "lts__t_sector_hit_rate.pct",
            float(top["l2_hit_pct"]),
            "%",
            t.critical_pct if top["l2_hit_pct"] < t.critical_pct else t.warning_pct,
        ),
        Evidence(
            "l2_hit_time_weighted_pct (flagged kernels)",
            weighted_mean(low["l2_hit_pct"], low["gpu_time_ns"]),
            "%",
            t.warning_pct,
        ),
        Evidence("l2_low_hit_gpu_time_share", share, "share"),
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
    bound, scattered = low[low["dram_bound"]], low[~low["dram_bound"]]
    parts = []
    if len(bound):
        parts.append(f"DRAM-bound (≥ {t.dram_bound_pct:g} % of peak) {names_list(bound)}: {REC_DRAM_BOUND}.")
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


def heatmap_cells(kernels: pd.DataFrame, stats: pd.DataFrame) -> pd.DataFrame:
    """Cells of the kernel × launch-order heatmap, binned to at most HEATMAP_MAX_COLUMNS columns.

    Rows are the HEATMAP_MAX_KERNELS kernels costliest in time × miss rate; a column is a bin of
    consecutive launches (launch order over the whole capture); a cell is the duration-weighted
    L2 hit rate of that kernel's launches in the bin, with the figures the hover shows.
    """
    columns = [
        "kernel",
        "kernel_rank",
        "bin",
        "first_launch",
        "last_launch",
        "launches",
        "l2_hit_pct",
        "dur_ns",
        "dram_throughput_pct",
        "grid_size",
        "grid",
    ]
    top = stats[stats["l2_hit_pct"].notna()]["kernel"].head(HEATMAP_MAX_KERNELS).tolist()
    order_cols = [c for c in ("launch_id",) if c in kernels.columns and kernels[c].notna().all()]
    k = slim(kernels, "launch_id", "l2_hit_pct", "dram_throughput_pct", "grid_size", "grid_x", "grid_y", "grid_z")
    k = k.sort_values(order_cols, kind="stable") if order_cols else k
    k = k.reset_index(drop=True).assign(label=lambda d: label_of_launch(d, stats).to_numpy())
    k["order"] = np.arange(len(k))
    bin_size = max(1, int(np.ceil(len(k) / HEATMAP_MAX_COLUMNS)))
    k = k[k["label"].isin(top) & k["l2_hit_pct"].notna()].copy()
    k["bin"] = k["order"] // bin_size
    rows = []
    for (label, b), g in k.groupby(["label", "bin"], sort=False):
        w = g["dur_ns"]
        first = g.iloc[int(np.argmax(w.fillna(0).to_numpy()))]
        rows.append(
            {
                "kernel": label,
                "bin": int(b),
                "first_launch": int(g["order"].min()),
                "last_launch": int(g["order"].max()),
                "launches": int(len(g)),
                "l2_hit_pct": weighted_mean(g["l2_hit_pct"], w),
                "dur_ns": float(w.sum()),
                "dram_throughput_pct": weighted_mean(g["dram_throughput_pct"], w),
                "grid_size": float(first["grid_size"]),
                "grid": _grid_text(first),
            }
        )
    cells = pd.DataFrame(rows, columns=[c for c in columns if c != "kernel_rank"])
    cells.insert(1, "kernel_rank", cells["kernel"].map({name: i for i, name in enumerate(top)}))
    cells = cells.sort_values(["kernel_rank", "bin"]).reset_index(drop=True)
    cells.attrs["bin_size"] = bin_size
    return cells


def _grid_text(launch: pd.Series) -> str:
    dims = [launch.get(c) for c in ("grid_x", "grid_y", "grid_z")]
    if all(d is not None and not pd.isna(d) for d in dims):
        return "×".join(str(int(d)) for d in dims)
    g = launch.get("grid_size")
    return "" if g is None or pd.isna(g) else f"{int(g)}"
