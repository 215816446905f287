"""Each kernel's data reuse, read from its sectors: what the L2 analyzer splits low hit rates by and what
diagnose.derive.onchip_bound names a kernel's cause by.

Global-load sectors requested at L1 (``reuse_l1``) and at L2 (``reuse_l2``) per DRAM sector read: about 1 when each
byte is read once (a streaming kernel), far more when the same bytes are asked for again and again (a naive GEMM:
1,023 at L1, 126 at L2 on the H200). ``shared_wavefront_share``: the share of the L1 data pipe's wavefronts that are
shared-memory ones (a kernel tiled in shared memory).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.derive.kernel_stats import per_kernel, per_kernel_sum

# global-load sectors at L1 and at L2, DRAM sectors read, and the L1 data pipe's wavefronts (all / shared memory)
L1_GLOBAL_LOAD_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum [sector]"
L2_READ_SECTORS_FROM_L1 = "lts__t_sectors_srcunit_tex_op_read.sum [sector]"
DRAM_READ_SECTORS = "dram__sectors_read.sum [sector]"
LSU_PIPE_PCT = "l1tex__data_pipe_lsu_wavefronts.avg.pct_of_peak_sustained_elapsed [%]"
LSU_SHARED_PIPE_PCT = "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed [%]"


def reuse(kernels: pd.DataFrame, stats: pd.DataFrame, memo=None) -> pd.DataFrame:
    """Per kernel (aligned with ``stats``): global-load sectors requested at L1 and at L2 per DRAM sector read,
    and the share of the L1 data pipe's wavefronts that are shared-memory ones; NaN where not collected."""

    def summed(column: str) -> pd.Series:
        if column not in kernels.columns:
            return pd.Series(np.nan, index=stats.index)
        values = pd.to_numeric(kernels[column], errors="coerce")
        return per_kernel_sum(kernels, values, stats, memo=memo)

    dram = summed(DRAM_READ_SECTORS).where(lambda d: d > 0)
    pipe = per_kernel(kernels, [LSU_PIPE_PCT, LSU_SHARED_PIPE_PCT], memo=memo).set_index("kernel_name")
    pipe = pipe.reindex(stats["kernel_name"]).reset_index(drop=True).set_axis(stats.index)
    return pd.DataFrame(
        {
            "reuse_l1": summed(L1_GLOBAL_LOAD_SECTORS) / dram,
            "reuse_l2": summed(L2_READ_SECTORS_FROM_L1) / dram,
            "shared_wavefront_share": (pipe[LSU_SHARED_PIPE_PCT] / pipe[LSU_PIPE_PCT].where(lambda v: v > 0)).clip(
                upper=1.0
            ),
        },
        index=stats.index,
    )
