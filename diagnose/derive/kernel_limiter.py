"""Each kernel's limiter: the hardware unit nearest its peak, named from ncu's own SOL breakdown.

ncu's SpeedOfLight section summarises a launch in two throughputs, SM (``sm__throughput``) and memory
(``gpu__compute_memory_throughput``), each the highest of a breakdown of per-unit metrics: issue slots,
the FMA / ALU / tensor / FP64 pipes, the LSU and MIO queues on the SM side; DRAM, L2 (lts), the L1/TEX
data pipes and the L1-L2 crossbar on the memory side. Judging by "SM vs DRAM" misnames kernels: a naive
GEMM that re-reads its operands from L1 shows SM 65 %, DRAM 0.3 % and memory 97 %, and what is at 97 %
is the L1/TEX LSU data pipe (``l1tex__data_pipe_lsu_wavefronts``); its FMA pipe is at 25 %. So the
limiter here is the breakdown metric with the highest value, and its unit.

The breakdown's members are the report's own where it lists them (a ``.ncu-rep`` stores them as
``breakdown:...``, kept in the kernels table as ``sol_breakdown_sm`` / ``sol_breakdown_memory``); the
CSV pages do not export those lists, so there the members are :data:`BREAKDOWN_SM` and
:data:`BREAKDOWN_MEMORY`, the lists ncu 2025.3 stores for an H200 (GH100), restricted to the columns
the capture has. A capture without any breakdown metric (only the SOL summary collected) falls back to
the two summary throughputs and says so (``limiter_source``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.derive.kernel_stats import by_kernel, kernel_groups
from diagnose.derive.table_values import TableValues, values_of

SUFFIX = ".avg.pct_of_peak_sustained_elapsed"

# ncu 2025.3's breakdown lists on GH100 (H200), read from a .ncu-rep of fixtures/ncu/kernel_kinds
BREAKDOWN_SM = tuple(
    f"{m}{SUFFIX}"
    for m in (
        "idc__request_cycles_active",
        "sm__inst_executed",
        "sm__inst_executed_pipe_adu",
        "sm__inst_executed_pipe_cbu_pred_on_any",
        "sm__inst_executed_pipe_ipa",
        "sm__inst_executed_pipe_lsu",
        "sm__inst_executed_pipe_tex",
        "sm__inst_executed_pipe_uniform",
        "sm__inst_executed_pipe_xu",
        "sm__instruction_throughput_internal_activity",
        "sm__issue_active",
        "sm__memory_throughput_internal_activity",
        "sm__mio2rf_writeback_active",
        "sm__mio_inst_issued",
        "sm__mio_pq_read_cycles_active",
        "sm__mio_pq_write_cycles_active",
        "sm__pipe_alu_cycles_active",
        "sm__pipe_fma_cycles_active",
        "sm__pipe_fmaheavy_cycles_active",
        "sm__pipe_fp64_cycles_active",
        "sm__pipe_shared_cycles_active",
        "sm__pipe_tensor_cycles_active",
        "sm__pipe_tensor_op_dmma_cycles_active",
        "sm__pipe_tensor_type_hmma_hgmma_qgmma_imma_igmma_bmma_bgmma_cycles_active",
        "sm__pipe_tma_cycles_active",
    )
)
BREAKDOWN_MEMORY = tuple(
    f"{m}{SUFFIX}"
    for m in (
        "dram__cycles_active",
        "fbpa__dram_sectors",
        "gpu__compute_memory_access_throughput_internal_activity",
        "gpu__compute_memory_request_throughput_internal_activity",
        "l1tex__data_bank_reads",
        "l1tex__data_bank_writes",
        "l1tex__data_pipe_lsu_wavefronts",
        "l1tex__data_pipe_tex_wavefronts",
        "l1tex__f_wavefronts",
        "l1tex__lsu_writeback_active",
        "l1tex__lsuin_requests",
        "l1tex__m_l1tex2xbar_req_cycles_active",
        "l1tex__m_xbar2l1tex_read_sectors",
        "l1tex__m_xbar2l1tex_read_sectors_mem_dshared",
        "l1tex__tex_writeback_active",
        "l1tex__texin_sm2tex_req_cycles_active",
        "l1tex__tmain_requests",
        "lts__d_atomic_input_cycles_active",
        "lts__d_decomp_input_sectors",
        "lts__d_sectors",
        "lts__d_sectors_fill_device",
        "lts__d_sectors_fill_sysmem",
        "lts__lts2xbar_cycles_active",
        "lts__t_sectors",
        "lts__t_tag_requests",
        "lts__xbar2lts_cycles_active",
    )
)

# unit of a breakdown metric, by the start of its name (first match wins); the unit is what a reader acts on
UNITS = (
    ("dram__", "DRAM"),
    ("fbpa__", "DRAM"),
    ("lts__xbar2lts", "L2 (crossbar in)"),
    ("lts__lts2xbar", "L2 (crossbar out)"),
    ("lts__", "L2"),
    ("l1tex__m_", "L1-L2 crossbar"),
    ("l1tex__data_pipe_tex", "L1/TEX (texture)"),
    ("l1tex__tex", "L1/TEX (texture)"),
    ("l1tex__", "L1/TEX (LSU)"),
    ("gpu__compute_memory", "memory (all units)"),
    ("sm__inst_executed_pipe_lsu", "LSU pipe"),
    ("sm__mio", "MIO (memory instruction queue)"),
    ("sm__memory_throughput", "LSU pipe"),
    ("sm__pipe_shared", "shared pipe (FMA + FP64 + tensor)"),
    ("sm__pipe_fma", "FMA pipe"),
    ("sm__pipe_alu", "ALU pipe"),
    ("sm__pipe_fp64", "FP64 pipe"),
    ("sm__pipe_tensor_op_dmma", "FP64 tensor pipe"),
    ("sm__pipe_tensor", "tensor pipe"),
    ("sm__pipe_tma", "TMA"),
    ("sm__inst_executed_pipe_xu", "XU pipe (transcendentals, conversions)"),
    ("sm__inst_executed_pipe_adu", "ADU pipe (branches, address divergence)"),
    ("sm__inst_executed_pipe_cbu", "CBU pipe (branches)"),
    ("sm__inst_executed_pipe_uniform", "uniform pipe"),
    ("sm__inst_executed_pipe_ipa", "IPA pipe"),
    ("sm__inst_executed_pipe_tex", "TEX pipe"),
    ("idc__", "constant cache (IDC)"),
    ("sm__", "instruction issue"),
)
MEMORY_SIDE = ("dram__", "fbpa__", "lts__", "l1tex__", "gpu__compute_memory")
# units on one path: when the limiter is one of them, the next limit is off that path (what the kernel would
# reach if the path stopped limiting); an aggregate ("memory (all units)") is never the next limit
PATHS = {
    "L1/TEX (LSU)": "load/store path",
    "LSU pipe": "load/store path",
    "MIO (memory instruction queue)": "load/store path",
    "DRAM": "DRAM",
    "L2": "L2",
    "L2 (crossbar in)": "L2",
    "L2 (crossbar out)": "L2",
}
AGGREGATE_UNITS = ("memory (all units)",)
LIMITER_COLUMNS = [
    "limiter_metric",
    "limiter_unit",
    "limiter_pct",
    "limiter_side",
    "limiter_source",
    "next_unit",
    "next_pct",
]


def unit_of(metric: str) -> str:
    for prefix, unit in UNITS:
        if metric.startswith(prefix):
            return unit
    return metric.split("__", 1)[0]


def side_of(metric: str) -> str:
    return "memory" if metric.startswith(MEMORY_SIDE) else "compute"


def column_of(metric: str) -> str:
    """The kernels table's column of a percentage metric (parsers.ncu_units.column_name's form)."""
    return f"{metric} [%]"


def _members(kernels: pd.DataFrame) -> list[str]:
    """Every breakdown metric any launch lists (its report's lists, else the catalogue), that has a column."""
    names: dict[str, None] = {}
    for listed in ("sol_breakdown_sm", "sol_breakdown_memory"):
        if listed in kernels.columns:
            for text in kernels[listed].dropna().unique():
                names.update(dict.fromkeys(str(text).split(",")))
    names.update(dict.fromkeys(BREAKDOWN_SM + BREAKDOWN_MEMORY))
    return [m for m in names if column_of(m) in kernels.columns]


def _listed_mask(kernels: pd.DataFrame, members: list[str]) -> np.ndarray:
    """(launches × members): True where the metric is in the launch's own breakdown lists, or in the
    catalogue for a launch whose report lists none. One row is built per distinct pair of lists (a capture
    has a handful), so a 100,000-launch report costs no per-launch Python loop."""
    n = len(kernels)
    columns = [
        kernels[c].to_numpy(dtype=object) if c in kernels.columns else np.full(n, None, dtype=object)
        for c in ("sol_breakdown_sm", "sol_breakdown_memory")
    ]
    (sm_codes, sm_lists), (mem_codes, mem_lists) = (pd.factorize(c) for c in columns)  # missing: code -1
    pair_codes, pairs = pd.factorize(sm_codes.astype(np.int64) * (len(mem_lists) + 1) + (mem_codes + 1))
    catalogue = set(BREAKDOWN_SM + BREAKDOWN_MEMORY)
    rows = []
    for pair in pairs:
        sm, mem = divmod(int(pair), len(mem_lists) + 1)
        key = ",".join(str(lists[i]) for lists, i in ((sm_lists, sm), (mem_lists, mem - 1)) if i >= 0)
        listed = set(key.split(",")) if key else catalogue
        rows.append([m in listed for m in members])
    return np.array(rows, dtype=bool).reshape(len(pairs), len(members))[pair_codes]


def path_of(unit: str | None) -> str | None:
    return PATHS.get(unit, unit) if unit is not None else None


def limiter_frame(values: np.ndarray, members: list[str], fallback: pd.DataFrame) -> pd.DataFrame:
    """The limiter of each row of ``values`` (rows × members, NaN where not a member), or of ``fallback``'s
    SOL summary (``sm_throughput_pct``, ``memory_throughput_pct``) where a row has no breakdown value;
    ``next_unit`` / ``next_pct``: the highest unit off the limiter's path (see PATHS)."""
    n = len(values)
    out = {
        c: np.full(n, None, dtype=object)
        for c in ("limiter_metric", "limiter_unit", "limiter_side", "limiter_source", "next_unit")
    }
    pct, next_pct = np.full(n, np.nan), np.full(n, np.nan)
    has = ~np.isnan(values).all(axis=1) if values.size else np.zeros(n, dtype=bool)
    if has.any():
        best = np.nanargmax(np.where(np.isnan(values[has]), -np.inf, values[has]), axis=1)
        names = np.array(members, dtype=object)[best]
        pct[has] = values[has][np.arange(has.sum()), best]
        out["limiter_metric"][has] = names
        out["limiter_unit"][has] = [unit_of(m) for m in names]
        out["limiter_side"][has] = [side_of(m) for m in names]
        out["limiter_source"][has] = "ncu SOL breakdown"
        _next_off_path(values, members, has, out, next_pct)
    sm, mem = (
        pd.to_numeric(fallback[c], errors="coerce").to_numpy(dtype=float) if c in fallback else np.full(n, np.nan)
        for c in ("sm_throughput_pct", "memory_throughput_pct")
    )
    summary = ~has & ~(np.isnan(sm) & np.isnan(mem))
    for i in np.flatnonzero(summary):
        memory_wins = np.nan_to_num(mem[i], nan=-1.0) >= np.nan_to_num(sm[i], nan=-1.0)
        pct[i] = mem[i] if memory_wins else sm[i]
        out["limiter_metric"][i] = ("gpu__compute_memory_throughput" if memory_wins else "sm__throughput") + SUFFIX
        out["limiter_unit"][i] = "memory (no breakdown collected)" if memory_wins else "SM (no breakdown collected)"
        out["limiter_side"][i] = "memory" if memory_wins else "compute"
        out["limiter_source"][i] = "SOL summary only"
    frame = pd.DataFrame(out)
    frame["limiter_pct"] = pct
    frame["next_pct"] = next_pct
    return frame[LIMITER_COLUMNS]


def _next_off_path(values: np.ndarray, members: list[str], has: np.ndarray, out: dict, next_pct: np.ndarray) -> None:
    """Fill ``next_unit`` / ``next_pct``: per row, the highest member off the limiter's path (no aggregate), one
    vectorised pass per distinct limiter path; among equal values the unit last in name order wins."""
    units = np.array([unit_of(m) for m in members], dtype=object)
    order = np.argsort(units, kind="stable")[::-1]  # nanargmax takes the first of equal values
    paths = np.array([path_of(u) for u in units[order]], dtype=object)
    aggregate = np.isin(units[order], AGGREGATE_UNITS)
    limiter_paths = np.array([path_of(u) for u in out["limiter_unit"]], dtype=object)
    for path in pd.unique(limiter_paths[has]):
        rows = np.flatnonzero(has & (limiter_paths == path))
        columns = order[(paths != path) & ~aggregate]
        if not len(columns):
            continue
        sub = values[np.ix_(rows, columns)]
        found = ~np.isnan(sub).all(axis=1)
        best = np.nanargmax(np.where(np.isnan(sub[found]), -np.inf, sub[found]), axis=1)
        hit = rows[found]
        next_pct[hit] = sub[found][np.arange(len(hit)), best]
        out["next_unit"][hit] = units[columns[best]]


def kernel_limiters(kernels: pd.DataFrame, stats: pd.DataFrame, memo: TableValues | None = None) -> pd.DataFrame:
    """The limiter of each kernel of ``stats`` (kernel_stats.per_kernel rows, same order): the breakdown's
    duration-weighted means over its launches, then their highest."""
    members = _members(kernels)
    if members:
        depends_on = ("kernel_name", "kernel_short", "dur_ns", "sol_breakdown_sm", "sol_breakdown_memory")
        means = values_of(
            memo,
            kernels,
            "kernel_limiter_means",
            depends_on + tuple(column_of(m) for m in members),
            lambda: _breakdown_means(kernels, members, memo),
        )
        values = means.reindex(stats["kernel_name"]).to_numpy(dtype=float)
    else:
        values = np.empty((len(stats), 0))
    frame = limiter_frame(values, members, stats)
    frame.index = stats.index
    return frame


def _breakdown_means(kernels: pd.DataFrame, members: list[str], memo: TableValues | None) -> pd.DataFrame:
    """Per kernel key (rows) × member (columns): the duration-weighted mean of each listed breakdown metric."""
    codes, keys = kernel_groups(kernels, memo)
    w = pd.to_numeric(kernels["dur_ns"], errors="coerce").fillna(0.0).to_numpy()
    raw = np.column_stack(
        [pd.to_numeric(kernels[column_of(m)], errors="coerce").to_numpy(dtype=float) for m in members]
    )
    raw = np.where(_listed_mask(kernels, members), raw, np.nan)
    ok = ~np.isnan(raw)
    num = pd.DataFrame(np.where(ok, raw * w[:, None], 0.0)).groupby(codes).sum()
    den = pd.DataFrame(np.where(ok, w[:, None], 0.0)).groupby(codes).sum()
    plain = pd.DataFrame(raw).groupby(codes).mean()
    return by_kernel((num / den.where(den > 0)).where(den > 0, plain), keys)
