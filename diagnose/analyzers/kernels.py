"""The per-kernel overview: every kernel of the ncu capture with its time and key metrics.

No findings: this is the sortable table the other ncu analyzers' findings point into.
Launches are summed and metrics weighted by duration (``diagnose.derive.kernel_stats``); grid
and block are the shape that carries most of the kernel's time.
"""

from __future__ import annotations

from diagnose.derive.derived import Derived
from diagnose.derive.kernel_stats import most_common, per_kernel, per_kernel_sum, total_gpu_time_ns
from diagnose.findings import Result
from diagnose.metrics import LOWER, NEUTRAL, Metric

NAME = "kernels"
ORDER = 5
SECTION = "section-kernels"
TITLE = "Kernels"  # its report section's heading
JUDGES = "per-kernel metrics"  # what "Nothing crossed a threshold: judged ..." names
COST_BASIS = "GPU time"  # its cost_share is a share of the profiled kernels' GPU time, as the verdict says it
COST_BASIS_BY_ID: dict[str, str] = {}  # no finding's basis differs
THRESHOLDS = ()  # the Thresholds groups it reads (diagnose/thresholds.py)
SUMMARY_METRICS = (  # what analyze() writes into Result.summary (diagnose.metrics)
    Metric("ncu_kernel_launches", "Kernel launches profiled by ncu", "count", NEUTRAL, 1),
    # raw exports give ns (1 ns); the details page rounds each launch to 3 significant digits
    Metric("ncu_gpu_time_ns", "GPU time of the profiled kernels", "ns", LOWER, 1),
    Metric("ncu_distinct_kernels", "Distinct kernels profiled by ncu", "count", NEUTRAL, 1),
)
FINDING_IDS: tuple[str, ...] = ()  # produces no findings: its tables feed the report
METRICS = [
    "l2_hit_pct",
    "dram_throughput_pct",
    "memory_throughput_pct",
    "sm_throughput_pct",
    "achieved_occupancy_pct",
    "theoretical_occupancy_pct",
    "registers_per_thread",
    "shared_mem_per_block_bytes",
    "waves_per_sm",
]
SHAPES = ["grid_size", "block_size"]


def analyze(profile, derived: Derived, th) -> Result:
    result = Result(NAME)
    kernels = profile.kernels
    if not len(kernels):
        return result
    stats = per_kernel(kernels, METRICS, memo=derived.kernel_memo)
    for col in SHAPES:
        stats[col] = most_common(kernels, col, stats, memo=derived.kernel_memo)
    stats["dram_bytes"] = per_kernel_sum(
        kernels, kernels["dram_bytes"], stats, memo=derived.kernel_memo
    )  # summed over launches
    front = [
        "kernel",
        "launches",
        "gpu_time_ns",
        "share",
        "mean_dur_ns",
        *SHAPES,
        *METRICS,
        "dram_bytes",
        "kernel_short",
        "kernel_name",
    ]
    result.tables["kernels"] = stats[front]
    result.summary["ncu_kernel_launches"] = float(len(kernels))
    result.summary["ncu_gpu_time_ns"] = total_gpu_time_ns(kernels)
    result.summary["ncu_distinct_kernels"] = float(len(stats))
    return result
