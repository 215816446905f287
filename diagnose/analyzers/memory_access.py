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
:data:`~diagnose.derive.kernel_access.BROADCAST_SECTORS_PER_REQUEST` sectors per request (fewer with few bytes
used is a broadcast). Without the theoretical sectors (a capture without SourceCounters) that estimate is the
excess itself. The per-kernel table is :func:`diagnose.derive.kernel_access.kernel_access` (ncu_rules reads it
too).

Cost: if the kernel's time follows its memory traffic, removing the excess sectors gives back
``excess share × memory throughput / 100`` of its time (memory throughput, ncu's SOL figure, as the part
of the time the memory system is the bottleneck; 1 when it was not collected): an upper bound. Severity
follows that recoverable time as a share of all GPU time. Kernels under ``min_kernel_share`` of GPU time
or shorter than ``tiny_kernels.max_dur_us`` are shown but not flagged.
"""

from __future__ import annotations

import pandas as pd

from diagnose.derive import capture_advice
from diagnose.derive.derived import Derived
from diagnose.derive.kernel_access import COLUMNS, EXCESS, access_kinds
from diagnose.derive.kernel_stats import kernel_subject_name, launches_figure, total_gpu_time_ns
from diagnose.findings import Evidence, Finding, Result, Severity, Subject, not_measured
from diagnose.formatting import count_human, n_things, pct_human, share_human
from diagnose.metrics import LOWER, Metric

NAME = "memory_access"
ORDER = 32
SECTION = "section-memory_access"
TITLE = "Memory Access"  # its report section's heading
JUDGES = "global-memory access"  # what "Nothing crossed a threshold: judged ..." names
COST_BASIS = "GPU time"  # its cost_share is a share of the profiled kernels' GPU time, as the verdict says it
COST_BASIS_BY_ID: dict[str, str] = {}  # no finding's basis differs
THRESHOLDS = ("memory_access", "tiny_kernels")  # the Thresholds groups it reads (diagnose/thresholds.py)
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


def analyze(profile, derived: Derived, th) -> Result:
    t = th.memory_access
    kernels = profile.kernels
    result = Result(NAME)
    if not len(kernels):
        return result
    stats = derived.kernel_access()
    measured = stats[stats["excess_source"].notna()]
    if not len(measured):
        result.findings.append(
            not_measured(NAME, "Excess global-memory sectors (coalescing)", how_to_measure(profile), SECTION)
        )
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


def how_to_measure(profile) -> str:
    """HOW_TO_MEASURE for an input captured elsewhere; for a run folder ``gpudiag profile --ncu`` wrote, what its ncu
    was asked for (the manifest's ``ncu_command``) and the option that adds the missing section. On such a run
    (fixtures/runs/ncu_mlp, whose ncu collected four sections without SourceCounters) the advice had said
    "`gpudiag profile --ncu` collects it by default" (issue 28)."""
    sections = capture_advice.ncu_command_values(profile, "--section")
    if sections is None:
        return HOW_TO_MEASURE
    if "SourceCounters" in sections or "full" in (capture_advice.ncu_command_values(profile, "--set") or ()):
        return (
            "This run's ncu was asked for SourceCounters (its manifest's ncu_command), yet no kernel carries its "
            "sector counts: they are read from ncu/raw.csv, else from ncu/report.ncu-rep (with the ncu-report "
            "package); re-export the CSV with `ncu --import ncu/report.ncu-rep --csv --page raw --print-units base`."
        )
    asked = ", ".join(sections) if sections else "none"
    return (
        f"This run's ncu collected the sections {asked} (its manifest's ncu_command): not SourceCounters, which "
        "counts each global access's excess L2 sectors, nor the L1 load/store sector metrics that estimate them. "
        "SourceCounters is one of --ncu's default sections now (13 replay passes per kernel instead of 11 on the "
        "H200): run it again with the default sections, add `--ncu-section SourceCounters` to the sections it "
        "names with `--ncu-section`, or use `--ncu-set full`."
    )


def _finding(flagged: pd.DataFrame, t, notes: list[str]) -> Finding:
    subjects, locations, parts = [], [], []
    for _, r in flagged.iterrows():
        sev = Severity.of(float(r["est_loss_share"]), warning=t.warning_loss_share, critical=t.critical_loss_share)
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
        access = r["access"] if isinstance(r["access"], str) else ""  # NaN where the direction was not collected
        kinds = access_kinds(access) or ["other"]
        what = access or "accesses (loads or stores: not collected)"
        at = f" at {r['top_location']}" if r["top_location"] else ""
        advice = "; ".join(ADVICE[k] for k in kinds)
        parts.append(f"{r['kernel']} — uncoalesced {what}{at}: {advice}.")
    top = flagged.iloc[0]
    share = float(flagged["share"].sum())
    n = len(flagged)
    at = f" at {top['top_location']}" if top["top_location"] else ""
    title = (
        f"{top['kernel']}'s global {top['access'] or 'accesses'} are uncoalesced{at}: "
        f"{pct_human(top['excess_share_pct'], 0)} of its L2 sectors are excess"
        + (
            f"; {n_things(n - 1, 'more kernel')} too ({share_human(share)} of GPU time in the {count_human(n)})"
            if n > 1
            else f" ({share_human(share)} of GPU time)"
        )
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
