"""The per-kernel overview: every kernel of the ncu capture with its time and key metrics.

No findings: this is the sortable table the other ncu analyzers' findings point into.
"""
from __future__ import annotations

from diagnose.findings import Result
from diagnose.kernel_stats import per_kernel, total_gpu_time_ns

NAME = "kernels"
ORDER = 5
COLUMNS = ["l2_hit_pct", "dram_throughput_pct", "memory_throughput_pct", "sm_throughput_pct",
           "achieved_occupancy_pct", "theoretical_occupancy_pct", "grid_size", "block_size", "registers_per_thread"]


def analyze(profile, th) -> Result:
    result = Result(NAME)
    kernels = profile.kernels
    if not len(kernels):
        return result
    result.tables["kernels"] = per_kernel(kernels, COLUMNS)
    result.summary["ncu_kernel_launches"] = float(len(kernels))
    result.summary["ncu_gpu_time_ns"] = total_gpu_time_ns(kernels)
    return result
