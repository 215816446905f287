"""Per kernel, its global-memory sectors against the ideal: the excess, loads against stores, the source lines
that carry it, the GPU time it may cost, and whether it is flagged.

Shared because the memory_access analyzer judges uncoalesced access by it and ncu_rules sets ncu's own
UncoalescedGlobalAccess and MemoryCacheAccessPattern rules against the same figures; how they are read from
ncu's metrics is said in :mod:`diagnose.analyzers.memory_access`'s docstring and docs/analyzers-ncu.md.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from diagnose.derive.kernel_stats import by_kernel, kernel_groups, kernel_key, per_kernel
from diagnose.formatting import count_human

EXCESS = "derived__memory_l2_theoretical_sectors_global_excessive"
SECTORS = "memory_l2_theoretical_sectors_global"
IDEAL = "memory_l2_theoretical_sectors_global_ideal"
L1_SECTORS = {d: f"l1tex__t_sectors_pipe_lsu_mem_global_op_{d}.sum" for d in ("ld", "st")}
L1_REQUESTS = {d: f"l1tex__t_requests_pipe_lsu_mem_global_op_{d}.sum" for d in ("ld", "st")}
BYTES_PER_SECTOR = {d: f"smsp__sass_average_data_bytes_per_sector_mem_global_op_{d}" for d in ("ld", "st")}
SOURCES = "global_excess_sources"
SECTOR_BYTES = 32.0
# a warp of 32 threads reading 4-byte words needs 4 sectors; fewer per request with few bytes used per
# sector is a broadcast (threads reading one address), which fetches the fewest sectors possible
BROADCAST_SECTORS_PER_REQUEST = 4.0
ACCESS_WORDS = {"load": "loads", "store": "stores", "atomic": "atomics", "reduction": "reductions", "other": "other"}
NAMED_ACCESS_SHARE = 0.25  # an access kind is named when it carries this share of a kernel's excess sectors
COLUMNS = [
    "kernel",
    "launches",
    "gpu_time_ns",
    "share",
    "excess_share_pct",
    "access",
    "top_location",
    "est_loss_share",
    "flagged",
    "excess_sectors",
    "sectors",
    "ideal_sectors",
    "ld_excess_sectors",
    "st_excess_sectors",
    "ld_sectors_per_request",
    "st_sectors_per_request",
    "ld_bytes_per_sector",
    "st_bytes_per_sector",
    "memory_throughput_pct",
    "excess_source",
    "access_source",
    "top_sass",
    "source_lines",
    "judged",
    "mean_dur_ns",
    "kernel_short",
    "kernel_name",
]


def metric_column(kernels: pd.DataFrame, metric: str) -> str | None:
    """The kernels-table column of a raw metric: ``"<metric> [<unit>]"`` or the bare name (docs/contracts.md)."""
    if metric in kernels.columns:
        return metric
    prefix = metric + " ["
    return next((c for c in kernels.columns if isinstance(c, str) and c.startswith(prefix)), None)


def metric_values(kernels: pd.DataFrame, metric: str) -> np.ndarray:
    """A raw metric's per-launch values as floats (its column found by :func:`metric_column`), NaN where absent."""
    col = metric_column(kernels, metric)
    if col is None:
        return np.full(len(kernels), np.nan)
    return pd.to_numeric(kernels[col], errors="coerce").to_numpy(dtype=float)


def _bytes_per_sector(kernels: pd.DataFrame, direction: str) -> np.ndarray:
    """Bytes used per 32-byte sector: the ``.ratio`` form, else ``.pct`` (of 32 bytes)."""
    ratio = metric_values(kernels, BYTES_PER_SECTOR[direction] + ".ratio")
    pct = metric_values(kernels, BYTES_PER_SECTOR[direction] + ".pct") * SECTOR_BYTES / 100.0
    return np.where(np.isnan(ratio), pct, ratio)


def _sum(values: np.ndarray, groups: tuple[np.ndarray, np.ndarray]) -> pd.Series:
    codes, keys = groups
    return by_kernel(pd.Series(values).groupby(codes).sum(min_count=1), keys)


def kernel_access(kernels: pd.DataFrame, th, memo=None) -> pd.DataFrame:
    """Per kernel (kernel_stats.per_kernel rows, same order): sectors, excess, loads vs stores, the source
    lines, the recoverable time and whether it is flagged. Pure: ncu_rules compares with it too."""
    t = th.memory_access
    stats = per_kernel(kernels, ["memory_throughput_pct"], memo)
    if not len(stats):
        return stats.reindex(columns=COLUMNS)
    groups = kernel_groups(kernels, memo)
    names = stats["kernel_name"]

    def per(values: np.ndarray) -> np.ndarray:
        return _sum(values, groups).reindex(names).to_numpy(dtype=float)

    excess, sectors, ideal = (per(metric_values(kernels, m)) for m in (EXCESS, SECTORS, IDEAL))
    # where only the ideal is known with the total (or the excess with one of them), complete the triple
    excess = np.where(np.isnan(excess), np.clip(sectors - ideal, 0, None), excess)
    sectors = np.where(np.isnan(sectors), excess + ideal, sectors)
    l1, req, wasted = {}, {}, {}
    for d in ("ld", "st"):
        s, r, b = (
            metric_values(kernels, L1_SECTORS[d]),
            metric_values(kernels, L1_REQUESTS[d]),
            _bytes_per_sector(kernels, d),
        )
        l1[d], req[d] = per(s), per(r)
        # bytes per sector weighted by the direction's sectors (a launch's mean over its own sectors)
        ok = ~np.isnan(b) & ~np.isnan(s)
        weight = np.asarray(per(np.where(ok, s, np.nan)), dtype=float)
        stats[f"{d}_bytes_per_sector"] = per(np.where(ok, b * s, np.nan)) / np.where(weight > 0, weight, np.nan)
        stats[f"{d}_sectors_per_request"] = l1[d] / np.where(req[d] > 0, req[d], np.nan)
        spr = stats[f"{d}_sectors_per_request"].to_numpy(dtype=float)
        waste = l1[d] * (1.0 - stats[f"{d}_bytes_per_sector"].to_numpy(dtype=float) / SECTOR_BYTES)
        wasted[d] = np.where(
            spr > BROADCAST_SECTORS_PER_REQUEST, np.clip(waste, 0, None), np.where(np.isnan(spr), np.nan, 0.0)
        )
    estimated = np.nansum([wasted["ld"], wasted["st"]], axis=0)
    has_estimate = ~(np.isnan(wasted["ld"]) & np.isnan(wasted["st"]))
    stats["excess_source"] = np.where(
        ~np.isnan(excess), "ncu theoretical sectors", np.where(has_estimate, "estimated from bytes per sector", None)
    )
    l1_total = np.nansum([l1["ld"], l1["st"]], axis=0)
    excess = np.where(np.isnan(excess) & has_estimate, estimated, excess)
    sectors = np.where(np.isnan(sectors) & has_estimate, l1_total, sectors)
    stats["excess_sectors"], stats["sectors"], stats["ideal_sectors"] = excess, sectors, ideal
    stats["excess_share_pct"] = 100.0 * excess / np.where(sectors > 0, sectors, np.nan)
    stats.loc[(stats["excess_sectors"] == 0) & stats["excess_share_pct"].isna(), "excess_share_pct"] = 0.0

    lines = _sources(kernels, kernel_key(kernels, memo).to_numpy(), names)
    split = []
    for i, name in enumerate(names):
        by_access = lines[name]["by_access"] if name in lines else None
        if by_access:
            split.append((by_access.get("load", 0.0), by_access.get("store", 0.0), by_access, "per instruction"))
        elif has_estimate[i] and np.nansum([wasted["ld"][i], wasted["st"][i]]) > 0:
            ld, st = np.nan_to_num(wasted["ld"][i]), np.nan_to_num(wasted["st"][i])
            split.append((ld, st, {"load": ld, "store": st}, "bytes per sector"))
        else:
            split.append((np.nan, np.nan, {}, None))
    stats["ld_excess_sectors"] = [s[0] for s in split]
    stats["st_excess_sectors"] = [s[1] for s in split]
    stats["access"] = [access_label(s[2]) for s in split]
    stats["access_source"] = [s[3] for s in split]
    tops = [lines.get(name, {}).get("lines", []) for name in names]
    stats["top_location"] = [location_of(ls[0]) if ls and ls[0].get("file") else None for ls in tops]
    stats["top_sass"] = [ls[0].get("sass") if ls else None for ls in tops]
    stats["source_lines"] = [lines_text(ls) for ls in tops]
    stats["has_sources"] = [name in lines for name in names]

    mem = stats["memory_throughput_pct"].to_numpy(dtype=float)
    factor = np.where(np.isnan(mem), 1.0, np.clip(mem / 100.0, 0.0, 1.0))
    share = stats["share"].to_numpy(dtype=float)
    stats["est_loss_share"] = (
        np.nan_to_num(share) * np.nan_to_num(stats["excess_share_pct"].to_numpy(dtype=float)) / 100.0 * factor
    )
    tiny_ns = th.tiny_kernels.max_dur_us * 1000.0
    stats["judged"] = (stats["share"] >= t.min_kernel_share) & (stats["mean_dur_ns"] >= tiny_ns)
    stats["flagged"] = stats["judged"] & (stats["excess_share_pct"] >= t.excess_share_pct)
    stats["kernel_short"] = stats["kernel_short"].astype(object)
    return stats


def _sources(kernels: pd.DataFrame, key: np.ndarray, names: pd.Series) -> dict[str, dict]:
    """Per kernel key: the source lines of its launches' ``global_excess_sources`` merged (excess summed per
    file:line and access), most first, and the excess per access kind. Kernels with no per-instruction data
    are absent."""
    if SOURCES not in kernels.columns:
        return {}
    out: dict[str, dict] = {}
    for k, text in zip(key, kernels[SOURCES]):
        if text is None or (isinstance(text, float) and np.isnan(text)):
            continue
        try:
            data = json.loads(text)
        except (TypeError, ValueError):
            continue
        entry = out.setdefault(k, {"lines": {}, "by_access": {}})
        for access, n in (data.get("excess_by_access") or {}).items():
            entry["by_access"][access] = entry["by_access"].get(access, 0.0) + float(n or 0)
        for line in data.get("lines") or []:
            where = (
                line.get("file"),
                line.get("line"),
                line.get("access"),
                None if line.get("file") else line.get("sass"),
            )
            merged = entry["lines"].setdefault(where, {**line, "excess_sectors": 0.0, "sectors": 0.0})
            merged["excess_sectors"] += float(line.get("excess_sectors") or 0)
            merged["sectors"] += float(line.get("sectors") or 0)
    for entry in out.values():
        entry["lines"] = sorted(
            entry["lines"].values(), key=lambda e: (-e["excess_sectors"], str(e.get("file")), e.get("line") or 0)
        )
    return out


def location_of(line: dict) -> str:
    """``path:line`` of a source entry (the contract's location form)."""
    return f"{line.get('file')}:{line.get('line')}"


def lines_text(lines: list[dict], limit: int = 3) -> str | None:
    """``path:43 load 3,670,016 excess of 4,194,304; …`` (the SASS where there is no line info)."""
    if not lines:
        return None
    parts = []
    for e in lines[:limit]:
        where = location_of(e) if e.get("file") else f"SASS `{e.get('sass')}`"
        of = f" of {count_human(round(e['sectors']))}" if e.get("sectors") else ""
        parts.append(f"{where} {e.get('access')} {count_human(round(e['excess_sectors']))} excess{of}")
    return "; ".join(parts)


def access_label(by_access: dict) -> str | None:
    """``loads``, ``stores``, ``loads and stores``…: the access kinds that carry NAMED_ACCESS_SHARE of the excess."""
    total = sum(v for v in by_access.values() if v and v > 0)
    if not total:
        return None
    kinds = [k for k in ACCESS_WORDS if by_access.get(k, 0) and by_access[k] >= NAMED_ACCESS_SHARE * total]
    words = [ACCESS_WORDS[k] for k in kinds]
    return " and ".join([", ".join(words[:-1]), words[-1]] if len(words) > 1 else words)


def access_kinds(label: str | None) -> list[str]:
    """The access kinds (``load``, ``store``…) of an :func:`access_label`."""
    if not isinstance(label, str):
        return []
    return [k for k, word in ACCESS_WORDS.items() if word in label.replace(",", " ").split()]
