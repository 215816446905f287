"""The kernels table every Nsight Compute reader fills: its schema, its standard columns, and the
common end of each reader (derived columns, invalid hit rates, schema order and dtypes).

:mod:`parsers.ncu_csv` and :mod:`parsers.ncu_rep` read the forms; :mod:`parsers.registry` picks between
them from the content. Formats: docs/ncu-formats.md.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from parsers.errors import InputError
from parsers.schema import F64, STR, Schema, conform

KERNELS_SCHEMA = Schema(
    "ncu.kernels",
    {
        "launch_id": F64,
        "process_id": F64,
        "process_name": STR,
        "host": STR,
        "device": F64,
        "context": F64,
        "stream": F64,
        "kernel_name": STR,
        "kernel_short": STR,
        "kernel_mangled": STR,
        "grid_x": F64,
        "grid_y": F64,
        "grid_z": F64,
        "block_x": F64,
        "block_y": F64,
        "block_z": F64,
        "grid_size": F64,
        "block_size": F64,
        "cc": STR,
        "nvtx_range": STR,
        "dur_ns": F64,
        "l2_hit_pct": F64,
        "l2_read_hit_pct": F64,
        "l2_write_hit_pct": F64,
        "dram_throughput_pct": F64,
        "memory_throughput_pct": F64,
        "sm_throughput_pct": F64,
        "achieved_occupancy_pct": F64,
        "theoretical_occupancy_pct": F64,
        "occupancy_limit_registers": F64,
        "occupancy_limit_shared_mem": F64,
        "occupancy_limit_warps": F64,
        "occupancy_limit_blocks": F64,
        "registers_per_thread": F64,
        "shared_mem_per_block_bytes": F64,
        "waves_per_sm": F64,
        "sm_count": F64,
        "dram_bytes": F64,
        "sol_breakdown_sm": STR,
        "sol_breakdown_memory": STR,
        "global_excess_sources": STR,
    },
    {
        "launch_id": "ncu's ID of the launch in the report",
        "sol_breakdown_sm": "the metrics sm__throughput is the highest of (comma-separated; .ncu-rep only, the CSV "
        "pages do not export the lists)",
        "sol_breakdown_memory": "the same for gpu__compute_memory_throughput",
        "global_excess_sources": "JSON: the source lines whose global accesses fetch the most sectors beyond the ideal "
        "(derived__memory_l2_theoretical_sectors_global_excessive per instruction, SourceCounters), "
        '{"lines": [{"file", "line", "access", "excess_sectors", "sectors", "sass"}, ...] (most first, at most '
        'EXCESS_SOURCES_MAX), "excess_by_access": {"load": n, "store": n, ...}}; "[]"-like empty lists when measured '
        "and none is excessive; None without per-instruction data (CSV pages, no SourceCounters). file/line are "
        "None for code built without -lineinfo (the SASS instruction still says which)",
        "grid_size": "blocks in the grid",
        "block_size": "threads per block",
        "kernel_short": "function base name (no namespace, templates, args)",
        "l2_hit_pct": "lts__t_sector_hit_rate.pct; NaN where ncu reports > 101 % (not a rate), 100 where 100-101 %",
    },
)

# the rule rows both readers build, before finish_rules names and types them (RULES_SCHEMA)
RULES_COLUMNS = [
    "launch_id",
    "kernel_name",
    "section",
    "rule_name",
    "rule_type",
    "description",
    "speedup_type",
    "estimated_speedup_pct",
]

RULES_SCHEMA = Schema(
    "ncu.rules",
    {
        "launch_id": F64,
        "kernel_short": STR,
        "kernel_name": STR,
        "section": STR,
        "rule": STR,
        "type": STR,
        "description": STR,
        "estimated_speedup_pct": F64,
        "speedup_type": STR,
    },
    {
        "section": "section the rule belongs to: its identifier ('SpeedOfLight') as the details page prints it",
        "rule": "rule identifier ('SOLBottleneck', 'AchievedOccupancy')",
        "type": "OPT / WRN / INF / ERR",
        "speedup_type": "'global' (the estimate is a share of this launch's duration) or 'local' (a gain in "
        "the efficiency of the unit the rule is about, not a time)",
        "estimated_speedup_pct": "ncu's estimated speedup, %",
    },
)
EXCESS_SOURCES_MAX = 5  # source lines kept per launch in global_excess_sources


def finish_rules(rules: pd.DataFrame) -> pd.DataFrame:
    """A reader's rule rows (``rule_name``/``rule_type`` as the readers name them) → :data:`RULES_SCHEMA`."""
    rules = rules.rename(columns={"rule_name": "rule", "rule_type": "type"})
    names = rules["kernel_name"].astype(object) if "kernel_name" in rules else pd.Series([], dtype=object)
    rules["kernel_short"] = names.map({n: short_name(n) for n in pd.unique(names)})
    return conform(rules, RULES_SCHEMA)


# standard column ← raw metric names, first present wins (values already in base units)
STANDARD_METRICS = {
    "dur_ns": ["gpu__time_duration.sum"],
    "l2_hit_pct": ["lts__t_sector_hit_rate.pct"],
    "l2_read_hit_pct": ["lts__t_sector_op_read_hit_rate.pct"],
    "l2_write_hit_pct": ["lts__t_sector_op_write_hit_rate.pct"],
    "dram_throughput_pct": [
        "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
        "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    ],
    "memory_throughput_pct": ["gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"],
    "sm_throughput_pct": ["sm__throughput.avg.pct_of_peak_sustained_elapsed"],
    "achieved_occupancy_pct": ["sm__warps_active.avg.pct_of_peak_sustained_active"],
    "theoretical_occupancy_pct": ["sm__maximum_warps_per_active_cycle_pct"],
    "occupancy_limit_registers": ["launch__occupancy_limit_registers"],
    "occupancy_limit_shared_mem": ["launch__occupancy_limit_shared_mem"],
    "occupancy_limit_warps": ["launch__occupancy_limit_warps"],
    "occupancy_limit_blocks": ["launch__occupancy_limit_blocks"],
    "registers_per_thread": ["launch__registers_per_thread"],
    "shared_mem_per_block_bytes": ["launch__shared_mem_per_block"],
    "waves_per_sm": ["launch__waves_per_multiprocessor"],
    "sm_count": ["device__attribute_multiprocessor_count", "launch__sm_count"],
    "dram_bytes": ["dram__bytes.sum"],
    "grid_size": ["launch__grid_size"],
    "block_size": ["launch__block_size"],
}
HIT_RATE_COLUMNS = ("l2_hit_pct", "l2_read_hit_pct", "l2_write_hit_pct")
# ncu reports hit rates above 100 %. Two cases, seen on the H200 captures:
# - a near-empty kernel: 209.94 % for a 1.8 µs fill kernel (convnet_metrics_stdout.csv), 182 % for
#   2 µs kernels: the counters hold too few sectors to make a rate. NaN in the standard column.
# - a saturated rate with counter noise: 100.33 % write hits on a 496 µs gather (l2_random_gather):
#   up to HIT_PCT_NOISE over 100 is clipped to 100.
# The raw metric column always keeps ncu's value. Clipping the first case to 100 would claim a
# perfect hit rate that was never measured; dropping the second would lose a good measurement.
MAX_VALID_HIT_PCT = 100.0
HIT_PCT_NOISE = 1.0

# the columns every CSV page starts with
ID_COLUMNS = {
    "ID": "launch_id",
    "Process ID": "process_id",
    "Process Name": "process_name",
    "Host Name": "host",
    "Kernel Name": "kernel_name",
    "Context": "context",
    "Stream": "stream",
    "Device": "device",
    "CC": "cc",
}


_TEMPLATE_OR_ARGS = re.compile(r"[<(]")


def short_name(name: str | None) -> str | None:
    """``void at::native::(anonymous namespace)::foo<float, 4>(T1 *, int)`` → ``foo``.

    Works on ncu's demangled names, including the ones whose ``<unnamed>`` lost its ``<``
    in CSV exports (``void unnamed>::cunn_SoftMaxForward<…>``), and on plain names.
    """
    if name is None or (isinstance(name, float) and np.isnan(name)):
        return None
    s = str(name).strip()
    s = s.replace("(anonymous namespace)", "anon").replace("<unnamed>", "anon").replace("unnamed>", "anon")
    # drop template arguments and parameter lists, innermost first, respecting nesting
    out, depth = [], 0
    for ch in s:
        if ch in "<(":
            depth += 1
            continue
        if ch in ">)":
            depth = max(0, depth - 1)
            continue
        if depth == 0:
            out.append(ch)
    base = "".join(out).strip()
    base = base.split(" ")[-1] if " " in base else base  # drop the return type ("void ")
    base = base.split("::")[-1]
    return base or s


def parse_dims(text) -> tuple[float, float, float]:
    """``"(16, 1, 1)"`` → (16.0, 1.0, 1.0); NaNs when absent."""
    if text is None or (isinstance(text, float) and np.isnan(text)):
        return (np.nan, np.nan, np.nan)
    nums = re.findall(r"\d+", str(text).replace(",", " "))
    if len(nums) != 3:
        return (np.nan, np.nan, np.nan)
    return tuple(float(n) for n in nums)  # type: ignore[return-value]


def finish(df: pd.DataFrame, path) -> pd.DataFrame:
    """Common end of every reader: derived columns, invalid hit rates, schema order and dtypes.

    The declared columns are conformed on their own and the metric columns joined after them
    without a copy (a 100,000-launch raw page has ~600 columns: copying it twice costs more
    than parsing it).
    """
    if not len(df):
        raise InputError(
            path,
            "holds no profiled kernel launches (no kernel rows); "
            "check that ncu's window matched kernels (--launch-skip/--launch-count, --nvtx-include)",
        )
    declared = {c: df[c] for c in KERNELS_SCHEMA.columns if c in df.columns}
    if "kernel_short" not in declared or declared["kernel_short"].isna().all():
        # one short name per distinct name, kept as object: a str per row otherwise (~8 MB at 100,000 launches)
        codes, names = pd.factorize(df["kernel_name"].to_numpy(dtype=object))
        shorts = np.array([short_name(n) for n in names] + [None], dtype=object)
        declared["kernel_short"] = pd.Series(shorts[codes], index=df.index, dtype=object)
    for axis in ("grid", "block"):
        xs = [declared.get(f"{axis}_{a}") for a in "xyz"]
        size = declared.get(f"{axis}_size")
        if (size is None or size.isna().all()) and all(x is not None for x in xs):
            declared[f"{axis}_size"] = xs[0] * xs[1] * xs[2]
    for col in HIT_RATE_COLUMNS:
        if col in declared:
            v = pd.to_numeric(declared[col], errors="coerce")
            v = v.where(~(v > MAX_VALID_HIT_PCT + HIT_PCT_NOISE))
            declared[col] = v.clip(upper=MAX_VALID_HIT_PCT)
    head = conform(pd.DataFrame(declared, index=df.index), KERNELS_SCHEMA)
    extras = [c for c in df.columns if c not in KERNELS_SCHEMA.columns]
    if not extras:
        return head
    tail = df[extras]
    tail.index = head.index
    # the same dtypes whichever reader built the frame: text as object, an all-missing metric as float
    fix = {}
    for c, dtype in zip(extras, tail.dtypes):  # dtypes in one call: looking up each column of a wide page costs
        if dtype == np.float64:
            continue
        col = tail[c]
        if col.isna().all():
            fix[c] = col.astype(np.float64)
        elif isinstance(col.dtype, pd.StringDtype):
            fix[c] = col.astype(object).where(col.notna(), None)
    if fix:
        tail = tail.assign(**fix)
    out = pd.concat([head, tail], axis=1)  # copy-on-write: no copy of the metric columns
    out.attrs = dict(df.attrs)
    return out
