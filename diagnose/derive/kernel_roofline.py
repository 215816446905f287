"""Each kernel on the roofline: its FLOPs and bytes, the GPU's ridge point, and the time it would take at its roofline.

Read from the metrics of ncu's SpeedOfLight_RooflineChart section (in ``--set full``, and in ``gpudiag profile
--ncu``'s sections), the way ncu draws its roofline chart:

- FLOPs: the SASS floating-point instructions executed, ``smsp__sass_thread_inst_executed_op_{f,d,h}{add,mul,fma}
  _pred_on.sum.per_cycle_elapsed`` × ``smsp__cycles_elapsed.avg.per_second`` × the launch's duration; an FMA
  counts 2, a half2 FMA 4, a half2 add or mul 2 (ncu's ``derived__..._x2`` / ``_x4``). Tensor-core work is not
  in these counts, so a kernel that uses the tensor pipe (``tensor_pipe_pct`` at 1 % or more) gets no FLOPs here
  (NaN): its roofline is not known from them.
- peak FLOP/s per precision: ``derived__sm__sass_thread_inst_executed_op_{f,d}fma_pred_on_x2`` (FP32, FP64) and
  ``..._hfma_pred_on_x4`` (FP16) × ``sm__cycles_elapsed.avg.per_second``.
- DRAM bytes: ``dram__bytes_read.sum`` + ``dram__bytes_write.sum``; peak: ``dram__bytes.sum.peak_sustained`` ×
  ``dram__cycles_elapsed.avg.per_second``. The GPU's ridge point is peak FLOP/s ÷ peak DRAM bytes/s, given here
  as bytes per FLOP (``ridge_bytes_per_flop``): a kernel that needs more DRAM bytes per FLOP is DRAM-bound.
- bytes through L2 (``lts__t_sectors.sum`` × 32) and global bytes through L1 (the global load and store sectors
  × 32), per FLOP: where the kernel's traffic is, above DRAM.

``roofline_ns`` is the time the kernel would take at its roofline: per launch, the largest of its FLOPs at peak
FLOP/s, its DRAM bytes at peak bandwidth, and the time its integer work needs (the ALU pipe's share of peak × its
duration, ``sm__pipe_alu_cycles_active``: integer work is in no FLOP count, and an RNG or hashing kernel is made
of it), summed over the launches. It uses the DRAM bytes the kernel moved, which are at least the ones it needs, so the time it saves
(``roofline_saving``, a share of the kernel's own time) is an upper bound on a rewrite's gain only through the
peaks, which no real kernel reaches.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.derive.kernel_access import metric_values
from diagnose.derive.kernel_stats import by_kernel, kernel_groups, per_kernel_sum
from diagnose.derive.table_values import TableValues

SECTOR_BYTES = 32.0
# (precision, [(instruction metric, FLOPs per instruction)], peak metric with its FLOPs per cycle)
PRECISIONS = (
    (
        "FP32",
        (("fadd", 1.0), ("fmul", 1.0), ("ffma", 2.0)),
        "derived__sm__sass_thread_inst_executed_op_ffma_pred_on_x2",
    ),
    (
        "FP64",
        (("dadd", 1.0), ("dmul", 1.0), ("dfma", 2.0)),
        "derived__sm__sass_thread_inst_executed_op_dfma_pred_on_x2",
    ),
    (
        "FP16",
        (("hadd", 2.0), ("hmul", 2.0), ("hfma", 4.0)),
        "derived__sm__sass_thread_inst_executed_op_hfma_pred_on_x4",
    ),
)
INSTRUCTION = "smsp__sass_thread_inst_executed_op_{op}_pred_on.sum.per_cycle_elapsed"
SMSP_HZ = "smsp__cycles_elapsed.avg.per_second"
SM_HZ = "sm__cycles_elapsed.avg.per_second"
DRAM_BYTES = ("dram__bytes_read.sum", "dram__bytes_write.sum")
DRAM_PEAK_PER_CYCLE = "dram__bytes.sum.peak_sustained"
DRAM_HZ = "dram__cycles_elapsed.avg.per_second"
L2_SECTORS = "lts__t_sectors.sum"
L1_GLOBAL_SECTORS = ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum")
SHARED_WAVEFRONTS = "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum"
SHARED_CONFLICTS = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum"
ALU_PIPE_PCT = (
    "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_elapsed",
)
TENSOR_PREFIXES = ("sm__pipe_tensor", "sm__inst_executed_pipe_tensor")
TENSOR_MIN_PCT = 1.0
COLUMNS = [
    "flop",
    "precision",
    "flop_rate_pct",
    "dram_bytes",
    "l2_bytes",
    "l1_global_bytes",
    "dram_bytes_per_flop",
    "l2_bytes_per_flop",
    "l1_bytes_per_flop",
    "ridge_bytes_per_flop",
    "peak_flop_per_s",
    "peak_dram_bytes_per_s",
    "roofline_ns",
    "roofline_bound",
    "roofline_saving",
    "tensor_pipe_pct",
    "shared_wavefronts",
    "shared_conflict_share",
]


def _tensor_pct(kernels: pd.DataFrame) -> np.ndarray:
    """Per launch, the busiest tensor-pipe percentage collected (NaN when none was)."""
    columns = [
        c
        for c in kernels.columns
        if isinstance(c, str) and c.startswith(TENSOR_PREFIXES) and "pct_of_peak_sustained" in c
    ]
    if not columns:
        return np.full(len(kernels), np.nan)
    values = np.column_stack([pd.to_numeric(kernels[c], errors="coerce").to_numpy(dtype=float) for c in columns])
    has = ~np.isnan(values).all(axis=1)
    out = np.full(len(kernels), np.nan)
    out[has] = np.nanmax(values[has], axis=1)
    return out


def launch_roofline(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per launch: FLOPs by precision and in all, peak FLOP/s of its main precision, DRAM bytes and peak bandwidth,
    L2 and L1 global bytes, shared-memory wavefronts and bank conflicts, the tensor pipe, and its roofline time."""
    n = len(kernels)
    seconds = pd.to_numeric(kernels["dur_ns"], errors="coerce").to_numpy(dtype=float) / 1e9
    smsp_hz, sm_hz = metric_values(kernels, SMSP_HZ), metric_values(kernels, SM_HZ)
    flop_by, time_at_peak = {}, np.zeros(n)
    measured = np.zeros(n, dtype=bool)
    for name, ops, peak_metric in PRECISIONS:
        rates = [(metric_values(kernels, INSTRUCTION.format(op=op)), per) for op, per in ops]
        known = np.any([~np.isnan(r) for r, _ in rates], axis=0) if rates else np.zeros(n, dtype=bool)
        per_cycle = np.nansum([r * per for r, per in rates], axis=0)
        flop = np.where(known, per_cycle * smsp_hz * seconds, np.nan)
        peak = metric_values(kernels, peak_metric) * sm_hz
        flop_by[name] = (flop, peak)
        ok = ~np.isnan(flop) & (peak > 0)
        time_at_peak = time_at_peak + np.where(ok, np.nan_to_num(flop) / np.where(ok, peak, 1.0), 0.0)
        measured |= ~np.isnan(flop)
    flop_total = np.where(measured, np.nansum([f for f, _ in flop_by.values()], axis=0), np.nan)
    # the precision with the most FLOPs names the peak a kernel is judged against (FP32 when it has none)
    stacked = np.column_stack([np.nan_to_num(f) for f, _ in flop_by.values()])
    main = np.where(stacked.max(axis=1) > 0, stacked.argmax(axis=1), 0)
    names = np.array([p[0] for p in PRECISIONS], dtype=object)
    peaks = np.column_stack([p for _, p in flop_by.values()])
    tensor = _tensor_pct(kernels)
    uses_tensor = tensor >= TENSOR_MIN_PCT
    flop_total = np.where(uses_tensor, np.nan, flop_total)
    dram = np.nansum([metric_values(kernels, m) for m in DRAM_BYTES], axis=0)
    dram_known = ~np.all([np.isnan(metric_values(kernels, m)) for m in DRAM_BYTES], axis=0)
    dram = np.where(dram_known, dram, np.nan)
    dram_peak = metric_values(kernels, DRAM_PEAK_PER_CYCLE) * metric_values(kernels, DRAM_HZ)
    dram_time = dram / np.where(dram_peak > 0, dram_peak, np.nan)
    compute_time = np.where(np.isnan(flop_total), np.nan, time_at_peak)
    alu = next((v for v in (metric_values(kernels, m + " [%]") for m in ALU_PIPE_PCT) if not np.isnan(v).all()), None)
    alu_time = np.nan_to_num(alu) / 100.0 * seconds if alu is not None else np.zeros(n)
    roofline_s = np.fmax(np.fmax(compute_time, dram_time), alu_time)
    roofline_s = np.where(np.isnan(compute_time) | np.isnan(dram_time), np.nan, roofline_s)
    l1 = np.array([metric_values(kernels, m) for m in L1_GLOBAL_SECTORS])
    return pd.DataFrame(
        {
            "flop": flop_total,
            "precision": names[main],
            "peak_flop_per_s": peaks[np.arange(n), main] if n else np.array([]),
            "flop_time_ns": compute_time * 1e9,
            "dram_bytes": dram,
            "peak_dram_bytes_per_s": dram_peak,
            "dram_time_ns": dram_time * 1e9,
            "alu_time_ns": alu_time * 1e9,
            "l2_bytes": metric_values(kernels, L2_SECTORS) * SECTOR_BYTES,
            "l1_global_bytes": np.where(np.isnan(l1).all(axis=0), np.nan, np.nansum(l1, axis=0)) * SECTOR_BYTES,
            "shared_wavefronts": metric_values(kernels, SHARED_WAVEFRONTS),
            "shared_conflicts": metric_values(kernels, SHARED_CONFLICTS),
            "tensor_pipe_pct": tensor,
            "roofline_ns": roofline_s * 1e9,
            "dur_ns": seconds * 1e9,
        },
        index=kernels.index,
    )


def kernel_roofline(kernels: pd.DataFrame, stats: pd.DataFrame, memo: TableValues | None = None) -> pd.DataFrame:
    """Per kernel of ``stats`` (kernel_stats.per_kernel rows, same order and index): :data:`COLUMNS`. Sums over
    launches; peaks and the tensor pipe as duration-weighted means. NaN where the capture lacks the metrics."""
    per_launch = launch_roofline(kernels)  # worked out once per report: Derived.onchip_bound is its one reader
    codes, keys = kernel_groups(kernels, memo)

    def total(column: str) -> np.ndarray:
        return per_kernel_sum(kernels, per_launch[column], stats, memo).to_numpy(dtype=float)

    def mean(column: str) -> np.ndarray:
        """Duration-weighted over the launches that have the value."""
        v = per_launch[column]
        w = per_launch["dur_ns"].fillna(0.0) + 1e-9
        weight = per_kernel_sum(kernels, w.where(v.notna(), 0.0), stats, memo).to_numpy(dtype=float)
        return per_kernel_sum(kernels, (v * w).fillna(0.0), stats, memo).to_numpy(dtype=float) / np.where(
            weight > 0, weight, np.nan
        )

    precision = by_kernel(pd.Series(per_launch["precision"].to_numpy()).groupby(codes).first(), keys)
    out = pd.DataFrame(index=stats.index)
    out["flop"] = total("flop")
    out["precision"] = stats["kernel_name"].map(precision).to_numpy()
    for c in ("dram_bytes", "l2_bytes", "l1_global_bytes", "shared_wavefronts"):
        out[c] = total(c)
    out["peak_flop_per_s"] = mean("peak_flop_per_s")
    out["peak_dram_bytes_per_s"] = mean("peak_dram_bytes_per_s")
    gpu_ns = stats["gpu_time_ns"].to_numpy(dtype=float)
    flop = out["flop"].to_numpy(dtype=float)
    has_flop = flop > 0
    out["flop_rate_pct"] = np.where(
        has_flop, 100.0 * flop / (gpu_ns / 1e9) / out["peak_flop_per_s"].to_numpy(dtype=float), np.nan
    )
    for level, column in (("dram", "dram_bytes"), ("l2", "l2_bytes"), ("l1", "l1_global_bytes")):
        out[f"{level}_bytes_per_flop"] = np.where(
            has_flop, out[column].to_numpy(dtype=float) / np.where(has_flop, flop, 1.0), np.nan
        )
    out["ridge_bytes_per_flop"] = out["peak_dram_bytes_per_s"] / out["peak_flop_per_s"]
    roofline = total("roofline_ns")
    times = np.column_stack([np.nan_to_num(total(c)) for c in ("flop_time_ns", "dram_time_ns", "alu_time_ns")])
    out["roofline_ns"] = roofline
    out["roofline_bound"] = np.where(
        np.isnan(roofline), None, np.array(["compute", "DRAM", "integer ALU"], dtype=object)[times.argmax(axis=1)]
    )
    out["roofline_saving"] = np.clip(1.0 - roofline / np.where(gpu_ns > 0, gpu_ns, np.nan), 0.0, 1.0)
    out["tensor_pipe_pct"] = mean("tensor_pipe_pct")
    conflicts = total("shared_conflicts")
    wavefronts = out["shared_wavefronts"].to_numpy(dtype=float)
    out["shared_conflict_share"] = np.where(
        wavefronts > 0, conflicts / np.where(wavefronts > 0, wavefronts, 1.0), np.nan
    )
    return out[COLUMNS]
