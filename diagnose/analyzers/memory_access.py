"""Uncoalesced global accesses: kernels whose warps fetch more L2 sectors than their accesses need.

A warp's global load or store touches 32-byte sectors; when its 32 threads read consecutive 4-byte
words it needs 4, when each thread reads a word 128 bytes from its neighbour's it needs 32, and 28 of
them carry nothing any thread asked for. ncu's SourceCounters section counts, per instruction, the
sectors each access touched (``memory_l2_theoretical_sectors_global``) and the ideal for its size and
active threads (``..._ideal``); the difference is ``derived__memory_l2_theoretical_sectors_global_excessive``.
The kernel's excess share is its excess over all its sectors. Broadcasts (many threads, one address)
fetch no more sectors than the ideal and are not excess, although few bytes of each sector are used.

Loads or stores: from the report's per-instruction data (``global_excess_sources``: the SASS opcode of
each instruction with excess sectors, and its file:line where the code has line info), else from the
L1 global load/store sectors, requests and bytes used per sector (``l1tex__t_sectors_pipe_lsu_mem_global_op_{ld,st}``,
``smsp__sass_average_data_bytes_per_sector_mem_global_op_{ld,st}``): a direction's sectors times the share of
their bytes no thread used, counted only where it fetches more than
:data:`BROADCAST_SECTORS_PER_REQUEST` sectors per request (fewer with few bytes used is a broadcast).
Without the theoretical sectors (a capture without SourceCounters) that estimate is the excess itself.

Cost: if the kernel's time follows its memory traffic, removing the excess sectors gives back
``excess share × memory throughput / 100`` of its time (memory throughput, ncu's SOL figure, as the part
of the time the memory system is the bottleneck; 1 when it was not collected): an upper bound. Severity
follows that recoverable time as a share of all GPU time. Kernels under ``min_kernel_share`` of GPU time
or shorter than ``tiny_kernels.max_dur_us`` are shown but not flagged.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from diagnose.findings import Evidence, Finding, Result, Severity, Subject, not_measured
from diagnose.kernel_stats import (
    by_kernel,
    kernel_groups,
    kernel_key,
    kernel_subject_name,
    launches_figure,
    per_kernel,
    total_gpu_time_ns,
)
from diagnose.metrics import LOWER, Metric

NAME = "memory_access"
ORDER = 32
SECTION = "section-memory_access"
SUMMARY_METRICS = (  # what analyze() writes into Result.summary (diagnose.metrics)
    Metric(
        "uncoalesced_excess_sector_share", "Global-memory sectors beyond the ideal (uncoalesced)", "share", LOWER, 0.001
    ),
    Metric("uncoalesced_gpu_time_share", "GPU time in kernels with uncoalesced access", "share", LOWER, 0.001),
    Metric("uncoalesced_est_loss_share", "Estimated GPU time lost to uncoalesced access", "share", LOWER, 0.001),
)
FINDING_IDS = (  # every id this analyzer can produce: `gpudiag check --ignore` validates against them
    "memory_access.not_measured",
    "memory_access.uncoalesced",
)

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
HOW_TO_MEASURE = (
    "`gpudiag profile --ncu` collects it by default (ncu's SourceCounters section, 13 replay passes per kernel "
    "instead of 11 on the H200). With ncu directly add `--section SourceCounters` (or use `--set full`); "
    "`--metrics l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,"
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio` (and the same for _st) tell loads from stores."
)
NEEDS_REPORT = (
    "The source line needs the .ncu-rep: ncu's per-instruction counters are not in its CSV pages "
    "(`gpudiag report` on ncu/report.ncu-rep, with the ncu-report package installed)."
)
NEEDS_LINEINFO = (
    "ncu has the instructions but no source lines for {kernels}: build with line info (nvcc -lineinfo; CuPy "
    "RawModule(options=('-lineinfo',)); Triton and torch.compile kernels carry it)."
)
ADVICE = {
    "load": "make consecutive threads (threadIdx.x) read consecutive addresses; a field read with a stride from "
    "an array of structs is better stored as a structure of arrays; a strided or transposed tile is better "
    "loaded coalesced into shared memory and read from there; threads that each read neighbouring elements "
    "can use 8- or 16-byte vectorised loads (float2/float4)",
    "store": "make consecutive threads write consecutive addresses: stage a transposed tile in shared memory "
    "(read it coalesced, __syncthreads(), write it with threadIdx.x along the output's contiguous axis; pad "
    "the tile by one column against bank conflicts), or swap the index mapping so threadIdx.x walks the "
    "output's contiguous axis, or write a structure of arrays",
    "atomic": "scattered atomics: combine per warp or per block in shared memory before the global atomic, "
    "or sort the indices so a warp's atomics share sectors",
    "reduction": "scattered reductions: combine per warp or per block in shared memory first, or sort the "
    "indices so a warp's updates share sectors",
    "other": "make the threads of a warp touch consecutive addresses",
}
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


def _values(kernels: pd.DataFrame, metric: str) -> np.ndarray:
    col = metric_column(kernels, metric)
    if col is None:
        return np.full(len(kernels), np.nan)
    return pd.to_numeric(kernels[col], errors="coerce").to_numpy(dtype=float)


def _bytes_per_sector(kernels: pd.DataFrame, direction: str) -> np.ndarray:
    """Bytes used per 32-byte sector: the ``.ratio`` form, else ``.pct`` (of 32 bytes)."""
    ratio = _values(kernels, BYTES_PER_SECTOR[direction] + ".ratio")
    pct = _values(kernels, BYTES_PER_SECTOR[direction] + ".pct") * SECTOR_BYTES / 100.0
    return np.where(np.isnan(ratio), pct, ratio)


def _sum(values: np.ndarray, groups: tuple[np.ndarray, np.ndarray]) -> pd.Series:
    codes, keys = groups
    return by_kernel(pd.Series(values).groupby(codes).sum(min_count=1), keys)


def kernel_access(kernels: pd.DataFrame, th) -> pd.DataFrame:
    """Per kernel (kernel_stats.per_kernel rows, same order): sectors, excess, loads vs stores, the source
    lines, the recoverable time and whether it is flagged. Pure: ncu_rules compares with it too."""
    t = th.memory_access
    stats = per_kernel(kernels, ["memory_throughput_pct"])
    if not len(stats):
        return stats.reindex(columns=COLUMNS)
    groups = kernel_groups(kernels)
    names = stats["kernel_name"]

    def per(values: np.ndarray) -> np.ndarray:
        return _sum(values, groups).reindex(names).to_numpy(dtype=float)

    excess, sectors, ideal = (per(_values(kernels, m)) for m in (EXCESS, SECTORS, IDEAL))
    # where only the ideal is known with the total (or the excess with one of them), complete the triple
    excess = np.where(np.isnan(excess), np.clip(sectors - ideal, 0, None), excess)
    sectors = np.where(np.isnan(sectors), excess + ideal, sectors)
    l1, req, wasted = {}, {}, {}
    for d in ("ld", "st"):
        s, r, b = _values(kernels, L1_SECTORS[d]), _values(kernels, L1_REQUESTS[d]), _bytes_per_sector(kernels, d)
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

    lines = _sources(kernels, kernel_key(kernels).to_numpy(), names)
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
        of = f" of {e['sectors']:,.0f}" if e.get("sectors") else ""
        parts.append(f"{where} {e.get('access')} {e['excess_sectors']:,.0f} excess{of}")
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


def analyze(profile, th) -> Result:
    t = th.memory_access
    kernels = profile.kernels
    result = Result(NAME)
    if not len(kernels):
        return result
    stats = kernel_access(kernels, th)
    measured = stats[stats["excess_source"].notna()]
    if not len(measured):
        result.findings.append(not_measured(NAME, "Excess global-memory sectors (coalescing)", HOW_TO_MEASURE, SECTION))
        return result
    stats = stats.sort_values(
        ["est_loss_share", "gpu_time_ns", "kernel"], ascending=[False, False, True], kind="stable"
    ).reset_index(drop=True)
    result.tables["kernels"] = stats[COLUMNS]
    total = total_gpu_time_ns(kernels)
    over = measured[measured["excess_share_pct"] >= t.excess_share_pct]
    sectors = float(measured["sectors"].sum())
    result.summary["uncoalesced_excess_sector_share"] = (
        float(measured["excess_sectors"].sum() / sectors) if sectors > 0 else 0.0
    )
    result.summary["uncoalesced_gpu_time_share"] = float(over["gpu_time_ns"].sum() / total) if total > 0 else 0.0
    flagged = stats[stats["flagged"]]
    result.summary["uncoalesced_est_loss_share"] = float(min(1.0, flagged["est_loss_share"].sum()))
    notes = []
    if len(flagged) and not flagged["has_sources"].any():
        notes.append(NEEDS_REPORT)
    no_lines = flagged[flagged["has_sources"] & flagged["top_location"].isna()]
    if len(no_lines):
        notes.append(NEEDS_LINEINFO.format(kernels=", ".join(no_lines["kernel"].head(3))))
    result.meta.update(
        {
            "excess_share_pct": t.excess_share_pct,
            "warning_loss_share": t.warning_loss_share,
            "critical_loss_share": t.critical_loss_share,
            "notes": notes,
            "kernels_measured": int(len(measured)),
        }
    )
    if len(flagged):
        result.findings.append(_finding(flagged, t, notes))
    return result


def severity_of(loss_share: float, t) -> Severity:
    if loss_share >= t.critical_loss_share:
        return Severity.CRITICAL
    if loss_share >= t.warning_loss_share:
        return Severity.WARNING
    return Severity.INFO


def _finding(flagged: pd.DataFrame, t, notes: list[str]) -> Finding:
    subjects, locations, parts = [], [], []
    for _, r in flagged.iterrows():
        sev = severity_of(float(r["est_loss_share"]), t)
        f = launches_figure(r)
        f.update(
            {
                "excess_share_pct": r["excess_share_pct"],
                "excess_sectors": r["excess_sectors"],
                "sectors": r["sectors"],
                "access": r["access"],
                "ld_excess_sectors": r["ld_excess_sectors"],
                "st_excess_sectors": r["st_excess_sectors"],
                "ld_bytes_per_sector": r["ld_bytes_per_sector"],
                "st_bytes_per_sector": r["st_bytes_per_sector"],
                "memory_throughput_pct": r["memory_throughput_pct"],
                "top_location": r["top_location"],
                "top_sass": r["top_sass"],
                "excess_source": r["excess_source"],
                "est_loss_share": r["est_loss_share"],
            }
        )
        subjects.append(Subject("kernel", kernel_subject_name(r), sev, f))
        if r["top_location"]:
            locations.append(
                Subject(
                    "location",
                    r["top_location"],
                    sev,
                    {
                        "kernel": kernel_subject_name(r),
                        "access": r["access"],
                        "sass": r["top_sass"],
                        "lines": r["source_lines"],
                    },
                )
            )
        kinds = access_kinds(r["access"]) or ["other"]
        what = r["access"] or "accesses (loads or stores: not collected)"
        at = f" at {r['top_location']}" if r["top_location"] else ""
        advice = "; ".join(ADVICE[k] for k in kinds)
        parts.append(f"{r['kernel']} — uncoalesced {what}{at}: {advice}.")
    top = flagged.iloc[0]
    share = float(flagged["share"].sum())
    n = len(flagged)
    at = f" at {top['top_location']}" if top["top_location"] else ""
    title = (
        f"{top['kernel']}'s global {top['access'] or 'accesses'} are uncoalesced{at}: "
        f"{top['excess_share_pct']:.0f} % of its L2 sectors are excess"
        + (f"; {n - 1} more kernel{'s' if n > 2 else ''}" if n > 1 else "")
        + f" ({100 * share:.1f} % of GPU time)"
    )
    evidence = (
        Evidence(EXCESS, float(top["excess_sectors"]), "sector"),
        Evidence("excess_share_pct", float(top["excess_share_pct"]), "%", t.excess_share_pct),
        Evidence("uncoalesced_est_loss_share", float(flagged["est_loss_share"].sum()), "share", t.warning_loss_share),
    )
    return Finding(
        id="memory_access.uncoalesced",
        analyzer=NAME,
        severity=max(s.severity for s in subjects),
        title=title,
        subjects=tuple(subjects + locations),
        evidence=evidence,
        cost_share=float(min(1.0, flagged["est_loss_share"].sum())),
        recommendation=" ".join(parts + notes),
        section=SECTION,
    )
