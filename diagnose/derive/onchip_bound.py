"""Kernels held back by an on-chip memory unit (the L1/TEX load path or L2), far from their roofline: why, and
what a kernel at its roofline would save.

A kernel whose limiter (diagnose.derive.kernel_limiter) is the L1/TEX load path or L2 at ``bound_pct`` of peak or
more moves its bytes through a unit above DRAM many times: its DRAM traffic may be small (a naive GEMM needs
0.003 bytes per FLOP from DRAM on the H200, under the ridge of 0.072), so the roofline says it should run at the
FMA pipe's speed, yet it runs at a few percent of it. What cuts the traffic at that unit depends on where it
comes from, read from the capture (first that applies, then the others):

- ``bank conflicts``: most shared-memory wavefronts are bank-conflict replays
  (``l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum`` / ``l1tex__data_pipe_lsu_wavefronts_mem_shared.sum`` ≥
  ``conflict_share_min``): pad or swizzle the shared array;
- ``wasted sectors``: the global accesses fetch sectors they do not use (diagnose.derive.kernel_access's excess
  at ``memory_access.excess_share_pct`` or more): coalesce, vectorise;
- ``reuse missed``: global loads ask for each byte many times per DRAM read (the L2 analyzer's ``reuse_l1`` at
  ``l2.reuse_min`` or more) and shared memory carries little of the pipe: tile in shared memory;
- ``shared-memory traffic``: shared memory already carries most of the pipe's wavefronts, without conflicts (a
  tiled kernel): tile in registers, so each shared load feeds more FMAs;
- otherwise ``unknown``.

The saving is the time above the kernel's roofline (diagnose.derive.kernel_roofline): its FLOPs at peak and its
DRAM bytes at peak bandwidth. Where the capture lacks the roofline's metrics, or the kernel uses tensor cores
(whose FLOPs ncu's SASS counters leave out), it is the time down to the kernel's next limit off that path
(``saving_basis``). A kernel is flagged when it has ``min_kernel_share`` of GPU time, is not a launch-bound
micro-kernel, and would save ``min_saving`` of its time or more: a kernel near its roofline is not one. Without a
measured roofline a kernel must also have a known cause.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.derive.kernel_limiter import kernel_limiters, path_of
from diagnose.derive.kernel_reuse import reuse
from diagnose.derive.kernel_roofline import kernel_roofline
from diagnose.derive.kernel_stats import per_kernel

ON_CHIP_PATHS = ("load/store path", "L2")
BANK_CONFLICTS, WASTED_SECTORS, REUSE_MISSED, SHARED_TRAFFIC, UNKNOWN = (
    "bank conflicts",
    "wasted sectors",
    "reuse missed",
    "shared-memory traffic",
    "unknown",
)
METRICS = ["sm_throughput_pct", "memory_throughput_pct", "dram_throughput_pct", "l2_hit_pct"]


def onchip_bound(kernels: pd.DataFrame, access: pd.DataFrame, th, memo=None) -> pd.DataFrame:
    """One row per kernel (kernel_stats.per_kernel order): its limiter, roofline figures, ``causes`` (a list, the
    first the main one), ``saving`` (share of its own time), ``saving_basis``, ``est_loss_share`` (share of all
    GPU time) and ``flagged``. ``access``: diagnose.derive.kernel_access's table of the same kernels."""
    t, sol = th.onchip_bound, th.speed_of_light
    stats = per_kernel(kernels, METRICS, memo=memo)
    if not len(stats):
        return stats
    limiters = kernel_limiters(kernels, stats, memo=memo)
    for c in ("limiter_unit", "limiter_pct", "next_unit", "next_pct"):
        stats[c] = limiters[c].to_numpy()
    stats = stats.join(kernel_roofline(kernels, stats, memo=memo))
    stats = stats.join(reuse(kernels, stats, memo=memo)[["reuse_l1", "shared_wavefront_share"]])
    excess = access.set_index("kernel_name")["excess_share_pct"] if len(access) else pd.Series(dtype=float)
    stats["excess_share_pct"] = stats["kernel_name"].map(excess).astype(float)
    stats["causes"] = [_causes(r, th) for _, r in stats.iterrows()]
    next_ratio = (stats["next_pct"] / stats["limiter_pct"]).clip(upper=1.0)
    by_roofline = stats["roofline_saving"].notna()
    stats["saving"] = np.where(by_roofline, stats["roofline_saving"], (1.0 - next_ratio).fillna(0.0))
    stats["saving_basis"] = np.where(by_roofline, "roofline", "next limit")
    stats["est_loss_share"] = stats["share"] * stats["saving"]
    on_chip = stats["limiter_unit"].map(path_of).isin(ON_CHIP_PATHS) & (stats["limiter_pct"] >= sol.bound_pct)
    heavy = (stats["share"] >= sol.min_kernel_share) & (stats["mean_dur_ns"] >= th.tiny_kernels.max_dur_us * 1000.0)
    # a kernel whose cause the capture does not show is flagged only on its measured roofline: the next-limit
    # estimate alone says too little to act on (a cuDNN convolution on the tensor pipe, say)
    known = (stats["saving_basis"] == "roofline") | stats["causes"].map(lambda c: c != [UNKNOWN])
    stats["flagged"] = on_chip & heavy & known & (stats["saving"] >= t.min_saving)
    return stats


def _causes(row: pd.Series, th) -> list[str]:
    t = th.onchip_bound
    shared = row["shared_wavefront_share"] if row["shared_wavefront_share"] == row["shared_wavefront_share"] else 0.0
    causes = []
    if row["shared_conflict_share"] >= t.conflict_share_min and shared >= th.l2.shared_wavefront_share_max:
        causes.append(BANK_CONFLICTS)
    if row["excess_share_pct"] >= th.memory_access.excess_share_pct:
        causes.append(WASTED_SECTORS)
    if row["reuse_l1"] >= th.l2.reuse_min and shared < th.l2.shared_wavefront_share_max:
        causes.append(REUSE_MISSED)
    if shared >= th.l2.shared_wavefront_share_max and BANK_CONFLICTS not in causes:
        causes.append(SHARED_TRAFFIC)
    return causes or [UNKNOWN]
