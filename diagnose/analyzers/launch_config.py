"""Launch configuration: grids too small for the GPU, partial last waves, odd block sizes.

Judged per launch, then summed per kernel (a kernel's grid may change with the batch):

* small grid — fewer blocks than SMs (``sm_count``) leaves ``1 - blocks / SMs`` of the
  SMs idle for the whole launch. With one resident block per SM as the best case, that
  share of the launch's time is the estimated loss.
* tail effect — a grid of a few waves (``waves_per_sm``, ncu's launch__waves_per_multiprocessor,
  else blocks / SMs) whose last wave is partly empty: the last wave takes ``1 / ceil(waves)``
  of the time with ``1 - frac(waves)`` of the GPU idle, so the loss is their product.
* block not a warp multiple — the last warp of every block runs with idle lanes: the
  wasted share of lanes is the loss (an upper bound, for compute-bound kernels).

Only kernels with real GPU time are judged: under ``min_kernel_share`` of GPU time, or
shorter than ``tiny_kernels.max_dur_us`` on average (launch-bound micro-kernels, which a
bigger grid would not help: the tiny_kernels analyzer reports those).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.findings import Evidence, Finding, Result, Severity, Subject
from diagnose.kernel_stats import (
    kernel_subject_name,
    launches_figure,
    most_common,
    per_kernel,
    per_kernel_sum,
    slim,
    sm_count,
)
from diagnose.metrics import LOWER, Metric

NAME = "launch_config"
ORDER = 20
SECTION = "section-launch_config"
SUMMARY_METRICS = (  # what analyze() writes into Result.summary (diagnose.metrics)
    Metric(
        "launch_small_grid_loss_gpu_time_share",
        "GPU time lost to grids too small to fill the SMs",
        "share",
        LOWER,
        0.001,
    ),
    Metric("launch_tail_loss_gpu_time_share", "GPU time lost to partly filled last waves", "share", LOWER, 0.001),
    Metric(
        "launch_lane_loss_gpu_time_share", "GPU time lost to blocks that are not a warp multiple", "share", LOWER, 0.001
    ),
)
FINDING_IDS = (  # every id this analyzer can produce: `gpudiag check --ignore` validates against them
    "launch_config.block_not_warp_multiple",
    "launch_config.small_grid",
    "launch_config.tail_effect",
)
METRICS = ["achieved_occupancy_pct"]


def analyze(profile, th) -> Result:
    t = th.launch_config
    kernels = profile.kernels
    result = Result(NAME)
    if not len(kernels) or kernels["grid_size"].notna().sum() == 0:
        return result
    k = launch_losses(kernels, t)
    stats = per_kernel(kernels, METRICS)
    for col in ("grid_size", "block_size", "sm_count"):
        stats[col] = most_common(kernels, col, stats)
    stats["idle_sm_pct"] = 100.0 * (1.0 - stats["grid_size"] / stats["sm_count"]).clip(lower=0.0)
    stats["waves_per_sm"] = most_common(slim(kernels).assign(waves_per_sm=k["waves"]), "waves_per_sm", stats)
    stats["last_wave_idle_pct"] = most_common(
        slim(kernels).assign(last_wave_idle_pct=k["last_wave_idle_pct"]), "last_wave_idle_pct", stats
    )
    warps = np.ceil(stats["block_size"] / 32.0)
    stats["wasted_lane_pct"] = 100.0 * (warps * 32 - stats["block_size"]) / (warps * 32)
    for col in ("small_grid_loss_ns", "tail_loss_ns", "lane_loss_ns"):
        stats[col] = per_kernel_sum(kernels, k[col], stats).fillna(0.0)
    total = float(kernels["dur_ns"].sum())
    for col in ("small_grid", "tail", "lane"):
        stats[f"{col}_loss_share"] = stats[f"{col}_loss_ns"] / total if total > 0 else np.nan
    result.tables["kernels"] = stats
    result.meta["sm_count"] = sm_count(kernels)

    heavy = stats[
        (stats["share"] >= t.min_kernel_share) & (stats["mean_dur_ns"] >= th.tiny_kernels.max_dur_us * 1000.0)
    ]
    small = heavy[heavy["small_grid_loss_ns"] > 0]
    if len(small):
        result.findings.append(_small_grid(small.sort_values("small_grid_loss_ns", ascending=False), t))
    tail = heavy[heavy["tail_loss_ns"] > 0]
    if len(tail):
        result.findings.append(_tail(tail.sort_values("tail_loss_ns", ascending=False), t))
    odd = heavy[heavy["lane_loss_ns"] > 0]
    if len(odd):
        result.findings.append(_odd_blocks(odd.sort_values("lane_loss_ns", ascending=False)))
    for col in ("small_grid", "tail", "lane"):
        result.summary[f"launch_{col}_loss_gpu_time_share"] = (
            float(heavy[f"{col}_loss_share"].sum()) if total > 0 else 0.0
        )
    return result


def launch_losses(kernels: pd.DataFrame, t) -> pd.DataFrame:
    """Per launch: waves, the idle share of its last wave, and the ns each of the three shapes loses."""
    dur = kernels["dur_ns"].astype(float).fillna(0.0)
    grid = kernels["grid_size"].astype(float)
    sms = kernels["sm_count"].astype(float)
    block = kernels["block_size"].astype(float)
    waves = kernels["waves_per_sm"].astype(float).where(kernels["waves_per_sm"].notna(), grid / sms)
    small = (grid < sms * t.min_waves) & grid.notna() & sms.notna()
    small_loss = np.where(small, dur * (1.0 - grid / sms).clip(lower=0.0), 0.0)
    frac = waves - np.floor(waves)
    in_tail_range = ~small & (waves > 1.0) & (waves <= t.max_waves_for_tail) & (frac > 0)
    idle_pct = np.where(in_tail_range, 100.0 * (1.0 - frac), 0.0)
    tail = in_tail_range & (idle_pct >= t.tail_waste_pct)
    tail_loss = np.where(tail, dur * (idle_pct / 100.0) / np.ceil(waves.fillna(1.0)), 0.0)
    warps = np.ceil(block / 32.0)
    wasted = ((warps * 32 - block) / (warps * 32)).fillna(0.0)
    return pd.DataFrame(
        {
            "waves": waves.to_numpy(),
            "last_wave_idle_pct": np.where(in_tail_range, idle_pct, np.nan),
            "small_grid_loss_ns": small_loss,
            "tail_loss_ns": tail_loss,
            "lane_loss_ns": (dur * wasted).to_numpy(),
        },
        index=kernels.index,
    )


def _small_grid(small: pd.DataFrame, t) -> Finding:
    subjects = []
    for _, r in small.iterrows():
        sev = (
            Severity.CRITICAL
            if r["idle_sm_pct"] >= t.critical_idle_sm_pct and r["share"] >= t.critical_kernel_share
            else Severity.WARNING
        )
        f = launches_figure(r)
        f.update(
            {
                "grid_blocks": int(r["grid_size"]),
                "block_threads": _int(r["block_size"]),
                "sm_count": int(r["sm_count"]),
                "idle_sm_pct": float(r["idle_sm_pct"]),
                "est_loss_share": float(r["small_grid_loss_share"]),
            }
        )
        subjects.append(Subject("kernel", kernel_subject_name(r), sev, f))
    top = small.iloc[0]
    loss = float(small["small_grid_loss_share"].sum())
    n = len(small)
    return Finding(
        id="launch_config.small_grid",
        analyzer=NAME,
        severity=max(s.severity for s in subjects),
        title=(
            f"{top['kernel']} runs {int(top['grid_size'])} blocks on a {int(top['sm_count'])}-SM GPU: "
            f"{top['idle_sm_pct']:.0f} % of SMs idle for {100 * top['share']:.1f} % of GPU time"
            + (f" ({n - 1} more kernel{'s' if n > 2 else ''} with grids under one block per SM)" if n > 1 else "")
        ),
        subjects=tuple(subjects),
        evidence=(
            Evidence("launch__grid_size", float(top["grid_size"]), "blocks", float(top["sm_count"])),
            Evidence("device__attribute_multiprocessor_count", float(top["sm_count"]), "SMs"),
            Evidence("idle_sm_pct", float(top["idle_sm_pct"]), "%", t.critical_idle_sm_pct),
        ),
        cost_share=min(1.0, loss),
        recommendation=(
            "Give the GPU at least one block per SM: split each row or problem across several blocks "
            "(split-K or a two-pass reduction), batch more independent problems into one launch, or "
            "run independent small kernels concurrently on separate streams. For a per-row op on "
            "few, very long rows (softmax, layer norm, reductions), reshape so more rows or "
            "row-chunks run in parallel."
        ),
        section=SECTION,
    )


def _tail(tail: pd.DataFrame, t) -> Finding:
    subjects = []
    for _, r in tail.iterrows():
        f = launches_figure(r)
        f.update(
            {
                "grid_blocks": _int(r["grid_size"]),
                "waves_per_sm": float(r["waves_per_sm"]),
                "last_wave_idle_pct": float(r["last_wave_idle_pct"]),
                "est_loss_share": float(r["tail_loss_share"]),
            }
        )
        subjects.append(Subject("kernel", kernel_subject_name(r), Severity.WARNING, f))
    top = tail.iloc[0]
    return Finding(
        id="launch_config.tail_effect",
        analyzer=NAME,
        severity=Severity.WARNING,
        title=(
            f"{top['kernel']} runs {top['waves_per_sm']:.2f} waves: its last wave leaves "
            f"{top['last_wave_idle_pct']:.0f} % of the GPU idle"
        ),
        subjects=tuple(subjects),
        evidence=(
            Evidence("launch__waves_per_multiprocessor", float(top["waves_per_sm"]), "waves", t.max_waves_for_tail),
            Evidence("last_wave_idle_pct", float(top["last_wave_idle_pct"]), "%", t.tail_waste_pct),
        ),
        cost_share=min(1.0, float(tail["tail_loss_share"].sum())),
        recommendation=(
            "Size the grid to a whole number of waves (blocks = k × SMs × resident blocks per SM), "
            "or use smaller blocks so the partial wave is a small share of the work; for GEMMs, a "
            "persistent or stream-K kernel, or another tile size, removes the tail."
        ),
        section=SECTION,
    )


def _odd_blocks(odd: pd.DataFrame) -> Finding:
    subjects = []
    for _, r in odd.iterrows():
        f = launches_figure(r)
        f.update(
            {
                "block_threads": int(r["block_size"]),
                "wasted_lane_pct": float(r["wasted_lane_pct"]),
                "est_loss_share": float(r["lane_loss_share"]),
            }
        )
        subjects.append(Subject("kernel", kernel_subject_name(r), Severity.WARNING, f))
    top = odd.iloc[0]
    return Finding(
        id="launch_config.block_not_warp_multiple",
        analyzer=NAME,
        severity=Severity.WARNING,
        title=(
            f"{top['kernel']} launches blocks of {int(top['block_size'])} threads, not a multiple of 32: "
            f"{top['wasted_lane_pct']:.0f} % of lanes idle"
        ),
        subjects=tuple(subjects),
        evidence=(
            Evidence("launch__block_size", float(top["block_size"]), "threads"),
            Evidence("wasted_lane_pct", float(top["wasted_lane_pct"]), "%"),
        ),
        cost_share=min(1.0, float(odd["lane_loss_share"].sum())),
        recommendation=(
            "Use a block size that is a multiple of the warp size (32), e.g. round the thread count up "
            "and guard the extra threads: otherwise the last warp of every block runs with idle lanes."
        ),
        section=SECTION,
    )


def _int(v) -> int | None:
    return None if pd.isna(v) else int(v)
