"""L2 hit rate: kernels whose working set does not stay in L2.

From ncu's ``lts__t_sector_hit_rate.pct`` per launch, aggregated per kernel
(duration-weighted). A low hit rate costs most where a kernel is also heavy, so
kernels are ranked by GPU time × miss rate; whether the kernel is DRAM-bound
decides the advice (a thrashing working set vs scattered, latency-bound access).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.findings import Evidence, Finding, Result, Severity, Subject, not_measured
from diagnose.kernel_stats import band, launches_figure, per_kernel, weighted_mean

NAME = "l2"
ORDER = 10
HEATMAP_MAX_KERNELS = 40
HEATMAP_MAX_COLUMNS = 400
METRICS = ["l2_hit_pct", "l2_read_hit_pct", "l2_write_hit_pct", "dram_throughput_pct", "grid_size"]
SECTION = "section-l2"


def analyze(profile, th) -> Result:
    t = th.l2
    kernels = profile.kernels
    result = Result(NAME)
    if not len(kernels):
        return result
    if kernels["l2_hit_pct"].notna().sum() == 0:
        result.findings.append(not_measured(
            NAME, "L2 hit rate",
            "Collect it with ncu's MemoryWorkloadAnalysis section (`--section MemoryWorkloadAnalysis`) or the "
            "metric alone (`--metrics lts__t_sector_hit_rate.pct`); `gpudiag profile --ncu` collects it by default.",
            SECTION))
        return result
    stats = per_kernel(kernels, METRICS)
    stats["miss_cost_ns"] = stats["gpu_time_ns"] * (100.0 - stats["l2_hit_pct"]) / 100.0
    stats["dram_bound"] = stats["dram_throughput_pct"] >= t.dram_bound_pct
    result.tables["kernels"] = stats
    result.tables["heatmap"] = heatmap_cells(kernels, stats)
    weighted = weighted_mean(kernels["l2_hit_pct"], kernels["dur_ns"])
    measured = stats[stats["l2_hit_pct"].notna()]
    low = measured[(measured["l2_hit_pct"] < t.warning_pct) & (measured["share"] >= t.min_kernel_share)]
    total_measured = measured["gpu_time_ns"].sum()
    result.summary["l2_hit_time_weighted_pct"] = weighted
    result.summary["l2_low_hit_gpu_time_share"] = (float(low["gpu_time_ns"].sum() / total_measured)
                                                   if total_measured > 0 else 0.0)
    if len(low):
        result.findings.append(_low_hit_finding(low.sort_values("miss_cost_ns", ascending=False), t))
    return result


def _low_hit_finding(low: pd.DataFrame, t) -> Finding:
    subjects = []
    for _, row in low.iterrows():
        sev = band(row["l2_hit_pct"], t.warning_pct, t.critical_pct)
        figures = launches_figure(row)
        figures.update({"l2_hit_pct": row["l2_hit_pct"], "dram_throughput_pct": row["dram_throughput_pct"],
                        "dram_bound": bool(row["dram_bound"])})
        for m in ("l2_read_hit_pct", "l2_write_hit_pct"):
            if not np.isnan(row[m]):
                figures[m] = row[m]
        subjects.append(Subject("kernel", row["kernel"], sev, figures))
    worst = max(s.severity for s in subjects)
    top = low.iloc[0]
    share = float(low["share"].sum())
    n = len(low)
    title = (f"{n} kernel{'s' if n != 1 else ''} with a low L2 hit rate take {100 * share:.1f} % of GPU time; "
             f"worst: {top['kernel']} at {top['l2_hit_pct']:.1f} %")
    evidence = [Evidence("lts__t_sector_hit_rate.pct", float(top["l2_hit_pct"]), "%",
                         t.critical_pct if worst == Severity.CRITICAL else t.warning_pct)]
    if not np.isnan(top["dram_throughput_pct"]):
        evidence.append(Evidence("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                                 float(top["dram_throughput_pct"]), "%", t.dram_bound_pct))
    if top["dram_bound"]:
        rec = (f"{top['kernel']} misses L2 and keeps DRAM busy ({top['dram_throughput_pct']:.0f} % of peak): its "
               "working set does not fit in L2. Make accesses local: sort or bucket gather/scatter indices so "
               "neighbouring threads touch neighbouring rows, tile the loop so a block reuses data while it is in "
               "L2, fuse passes that re-read the same tensor, keep hot data in L2 with an access policy window "
               "(cudaAccessPolicyWindow / persisting L2), or move fewer bytes (bf16/fp8, smaller tables).")
    else:
        rec = (f"{top['kernel']} misses L2 without saturating DRAM ({top['dram_throughput_pct']:.0f} % of peak): "
               "scattered, latency-bound access. Coalesce accesses (contiguous per warp, vectorised loads), keep "
               "more independent loads in flight (more blocks or more work per thread), and sort or bucket "
               "indices so sectors are reused.")
    return Finding(id="l2.low_hit_rate", analyzer=NAME, severity=worst, title=title, subjects=tuple(subjects),
                   evidence=tuple(evidence), cost_share=share, recommendation=rec, section=SECTION)


def heatmap_cells(kernels: pd.DataFrame, stats: pd.DataFrame) -> pd.DataFrame:
    """Cells of the kernel × launch-order heatmap, binned to at most HEATMAP_MAX_COLUMNS columns.

    Rows are the HEATMAP_MAX_KERNELS heaviest kernels; a column is a bin of consecutive launches
    (in launch order over the whole capture); a cell is the duration-weighted L2 hit rate of that
    kernel's launches in the bin, with the figures the hover shows.
    """
    top = stats["kernel"].head(HEATMAP_MAX_KERNELS).tolist()
    k = kernels.sort_values("launch_id", kind="stable").reset_index(drop=True)
    k["order"] = np.arange(len(k))
    bin_size = max(1, int(np.ceil(len(k) / HEATMAP_MAX_COLUMNS)))
    k = k[k["kernel_short"].isin(top)].copy()
    k["bin"] = k["order"] // bin_size
    rows = []
    for (name, b), g in k.groupby(["kernel_short", "bin"], sort=False):
        w = g["dur_ns"]
        rows.append({"kernel": name, "bin": int(b), "first_launch": int(g["order"].min()),
                     "last_launch": int(g["order"].max()), "launches": int(len(g)),
                     "l2_hit_pct": weighted_mean(g["l2_hit_pct"], w), "dur_ns": float(w.sum()),
                     "dram_throughput_pct": weighted_mean(g["dram_throughput_pct"], w),
                     "grid_size": float(g["grid_size"].iloc[0]) if g["grid_size"].notna().any() else float("nan")})
    cells = pd.DataFrame(rows, columns=["kernel", "bin", "first_launch", "last_launch", "launches", "l2_hit_pct",
                                        "dur_ns", "dram_throughput_pct", "grid_size"])
    order = {name: i for i, name in enumerate(top)}
    cells["kernel_rank"] = cells["kernel"].map(order)
    cells.attrs["bin_size"] = bin_size
    return cells.sort_values(["kernel_rank", "bin"]).reset_index(drop=True)
