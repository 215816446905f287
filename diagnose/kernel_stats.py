"""Per-kernel aggregates of the ncu kernels table, shared by the ncu analyzers.

ncu gives one row per launch; findings speak of kernels. A kernel here is its
short name (``kernel_short``): launches of one name are summed in time and their
metrics averaged weighted by duration, so a 2 ms launch counts 1000 times a 2 µs one.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.findings import Severity


def total_gpu_time_ns(kernels: pd.DataFrame) -> float:
    return float(kernels["dur_ns"].sum(skipna=True)) if len(kernels) else 0.0


def weighted_mean(values: pd.Series, weights: pd.Series) -> float:
    """Duration-weighted mean ignoring NaN values (and their weights); NaN when nothing is left."""
    v = values.to_numpy(dtype=float)
    w = weights.to_numpy(dtype=float)
    ok = ~np.isnan(v) & ~np.isnan(w)
    if not ok.any():
        return float("nan")
    if w[ok].sum() <= 0:
        return float(np.mean(v[ok]))
    return float(np.average(v[ok], weights=w[ok]))


def per_kernel(kernels: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """One row per kernel_short: launches, gpu_time_ns, mean_dur_ns, share, and time-weighted metrics.

    Sorted by GPU time, largest first. Metrics absent from the table come out NaN.
    """
    cols = ["kernel", "launches", "gpu_time_ns", "mean_dur_ns", "share"] + metrics
    if not len(kernels):
        return pd.DataFrame({c: pd.Series([], dtype=object if c == "kernel" else float) for c in cols})
    total = total_gpu_time_ns(kernels)
    rows = []
    for name, g in kernels.groupby("kernel_short", sort=False, dropna=False):
        dur = g["dur_ns"].astype(float)
        row = {"kernel": str(name), "launches": int(len(g)), "gpu_time_ns": float(dur.sum(skipna=True)),
               "mean_dur_ns": float(dur.mean(skipna=True)) if dur.notna().any() else float("nan")}
        row["share"] = row["gpu_time_ns"] / total if total > 0 else float("nan")
        for m in metrics:
            row[m] = weighted_mean(g[m], dur) if m in g.columns else float("nan")
        rows.append(row)
    out = pd.DataFrame(rows, columns=cols)
    return out.sort_values(["gpu_time_ns", "kernel"], ascending=[False, True], kind="stable").reset_index(drop=True)


def band(value: float, warning: float, critical: float, lower_is_worse: bool = True) -> Severity | None:
    """The severity of ``value`` against two bands, or None when it passes (NaN passes)."""
    if value is None or np.isnan(value):
        return None
    if lower_is_worse:
        if value < critical:
            return Severity.CRITICAL
        if value < warning:
            return Severity.WARNING
    else:
        if value > critical:
            return Severity.CRITICAL
        if value > warning:
            return Severity.WARNING
    return None


def sm_count(kernels: pd.DataFrame) -> float:
    """The GPU's SM count from the capture (device attribute), NaN when ncu did not record it."""
    if "sm_count" in kernels and kernels["sm_count"].notna().any():
        return float(kernels["sm_count"].dropna().iloc[0])
    return float("nan")


def launches_figure(row: pd.Series) -> dict:
    """The figures every kernel subject carries."""
    return {"launches": int(row["launches"]), "gpu_time_ns": float(row["gpu_time_ns"]),
            "mean_dur_ns": float(row["mean_dur_ns"]), "share": float(row["share"])}
