"""The cells of the L2 section's kernel × launch-order heatmap, binned from the l2 analyzer's ``launches``.

The analyzer hands over every profiled launch (``launches``: launch order, kernel label, hit rate, duration,
DRAM throughput, grid) and its ``kernels`` table ranked by GPU time × miss rate; drawing them all would be a
cell per launch. Rows are the ``MAX_KERNELS`` costliest kernels; a column is a bin of consecutive launches
(launch order over the whole capture, at most ``MAX_COLUMNS`` bins); a cell is the duration-weighted L2 hit
rate of that kernel's launches in the bin, with the figures the hover shows. Past the mark budget
(``chart_budget.MAX_MARKS``) the section merges neighbouring bins further (``merge_bins``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

MAX_KERNELS = 40
MAX_COLUMNS = 400
CELL_COLUMNS = [
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


def heatmap_cells(
    launches: pd.DataFrame, kernels: pd.DataFrame, max_kernels: int = MAX_KERNELS, max_columns: int = MAX_COLUMNS
) -> tuple[pd.DataFrame, int]:
    """(cells, launches per bin): one row per kernel and bin that holds a launch with a hit rate, costliest
    kernel first (``kernels``' order), then by bin."""
    top = kernels[kernels["l2_hit_pct"].notna()]["kernel"].head(max_kernels).tolist()
    bin_size = max(1, int(np.ceil(len(launches) / max_columns)))
    k = launches[launches["kernel"].isin(top) & launches["l2_hit_pct"].notna()]
    # whole-array reductions over the cells (np.*.reduceat on the launches sorted by cell): 40 kernels × 400
    # bins of 100,000 launches is 16,000 cells; a pandas groupby took 10 s, a Python loop per cell 1 s
    rank_of = {name: i for i, name in enumerate(top)}
    cell_key = k["kernel"].map(rank_of).to_numpy(dtype=np.int64) * (len(k) + 1) + k["launch"].to_numpy() // bin_size
    by_cell = np.argsort(cell_key, kind="stable")  # launches keep their order within each cell
    starts = np.flatnonzero(np.r_[True, np.diff(cell_key[by_cell]) != 0]) if len(by_cell) else by_cell[:0]
    order = k["launch"].to_numpy()[by_cell]
    dur = pd.to_numeric(k["dur_ns"], errors="coerce").to_numpy(dtype=float)[by_cell]
    hit = k["l2_hit_pct"].to_numpy(dtype=float)[by_cell]
    dram = pd.to_numeric(k["dram_throughput_pct"], errors="coerce").to_numpy(dtype=float)[by_cell]
    dims = {c: k[c].to_numpy()[by_cell] for c in ("grid_size", "grid_x", "grid_y", "grid_z") if c in k.columns}
    dur_or_0 = np.where(np.isnan(dur), 0.0, dur)
    longest = _first_max_per_cell(dur_or_0, starts)  # the cell's longest launch gives its grid
    cells_dims = [{c: v[i] for c, v in dims.items()} for i in longest]
    rows = {
        "kernel": k["kernel"].to_numpy(dtype=object)[by_cell][starts],
        "bin": order[starts] // bin_size,
        "first_launch": np.minimum.reduceat(order, starts) if len(starts) else order[:0],
        "last_launch": np.maximum.reduceat(order, starts) if len(starts) else order[:0],
        "launches": np.diff(np.r_[starts, len(order)]),
        "l2_hit_pct": _weighted_means_per_cell(hit, dur, starts),
        "dur_ns": np.add.reduceat(dur_or_0, starts) if len(starts) else dur[:0],
        "dram_throughput_pct": _weighted_means_per_cell(dram, dur, starts),
        "grid_size": np.array([float(d["grid_size"]) for d in cells_dims], dtype=float),
        "grid": [_grid_text(d) for d in cells_dims],
    }
    cells = pd.DataFrame(rows, columns=[c for c in CELL_COLUMNS if c != "kernel_rank"])
    cells = cells.astype({"bin": int, "first_launch": int, "last_launch": int, "launches": int})
    cells.insert(1, "kernel_rank", cells["kernel"].map(rank_of))
    return cells.sort_values(["kernel_rank", "bin"]).reset_index(drop=True), bin_size


def merge_bins(cells: pd.DataFrame, factor: int) -> pd.DataFrame:
    """Heatmap cells with every ``factor`` neighbouring bins of a kernel merged into one: launches and
    durations summed, hit rate and DRAM throughput weighted by duration, grid from the longest cell."""
    c = cells.assign(bin=cells["bin"] // factor)
    w = c["dur_ns"].fillna(0.0)
    c = c.assign(
        _w=w.where(c["l2_hit_pct"].notna(), 0.0),
        _hit=(c["l2_hit_pct"] * w).fillna(0.0),
        _wd=w.where(c["dram_throughput_pct"].notna(), 0.0),
        _dram=(c["dram_throughput_pct"] * w).fillna(0.0),
    )
    g = c.groupby(["kernel", "bin"], sort=False)
    out = g.agg(
        first_launch=("first_launch", "min"),
        last_launch=("last_launch", "max"),
        launches=("launches", "sum"),
        dur_ns=("dur_ns", "sum"),
        _w=("_w", "sum"),
        _hit=("_hit", "sum"),
        _wd=("_wd", "sum"),
        _dram=("_dram", "sum"),
        _hit_mean=("l2_hit_pct", "mean"),
        _dram_mean=("dram_throughput_pct", "mean"),
    )
    # no duration to weigh by: the plain mean, as diagnose.derive.kernel_stats.weighted_mean falls back
    out["l2_hit_pct"] = np.where(out["_w"] > 0, out["_hit"] / out["_w"].where(out["_w"] > 0), out["_hit_mean"])
    out["dram_throughput_pct"] = np.where(
        out["_wd"] > 0, out["_dram"] / out["_wd"].where(out["_wd"] > 0), out["_dram_mean"]
    )
    longest = c.sort_values("dur_ns", ascending=False, kind="stable").drop_duplicates(["kernel", "bin"])
    out = out.join(longest.set_index(["kernel", "bin"])[["grid_size", "grid"]])
    return out.reset_index()[[col for col in cells.columns if col in out.reset_index().columns]]


def _first_max_per_cell(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Index of each cell's first largest value (cells are the runs that begin at ``starts``)."""
    if not len(starts):
        return starts
    cell = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(values)]))
    at_max = np.flatnonzero(values == np.maximum.reduceat(values, starts)[cell])
    return at_max[np.searchsorted(cell[at_max], np.arange(len(starts)))]


def _weighted_means_per_cell(v: np.ndarray, w: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The duration-weighted mean of each cell, for all cells at once, as the analyzers weigh a kernel's
    launches: over the launches with both a value and a duration; with no weight, the plain mean of those;
    with none, of every launch with a value; NaN when no launch has one."""
    if not len(starts):
        return v[:0]
    has_v = ~np.isnan(v)
    ok = has_v & ~np.isnan(w)
    n_ok = np.add.reduceat(ok, starts)
    n_v = np.add.reduceat(has_v, starts)
    w_ok = np.add.reduceat(np.where(ok, w, 0.0), starts)
    vw_ok = np.add.reduceat(np.where(ok, v * np.where(ok, w, 0.0), 0.0), starts)
    v_ok = np.add.reduceat(np.where(ok, v, 0.0), starts)
    v_any = np.add.reduceat(np.where(has_v, v, 0.0), starts)
    with np.errstate(divide="ignore", invalid="ignore"):
        weighted = np.where(w_ok > 0, vw_ok / w_ok, v_ok / n_ok)
        return np.where(n_ok > 0, weighted, np.where(n_v > 0, v_any / n_v, np.nan))


def _grid_text(launch) -> str:
    dims = [launch.get(c) for c in ("grid_x", "grid_y", "grid_z")]
    if all(d is not None and not pd.isna(d) for d in dims):
        return "×".join(str(int(d)) for d in dims)
    g = launch.get("grid_size")
    return "" if g is None or pd.isna(g) else f"{int(g)}"
