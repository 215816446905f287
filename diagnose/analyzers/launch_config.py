"""Launch configuration: grids too small for the GPU, partial last waves, odd block sizes.

A grid of fewer blocks than SMs leaves SMs idle for the whole kernel; a grid of a
few waves whose last wave is mostly empty leaves them idle for its tail; a block
that is not a whole number of warps wastes lanes in its last warp. Each is judged
only on kernels that carry real GPU time; launch-bound micro-kernels (shorter than
the tiny-kernel bound) are the tiny_kernels analyzer's business, since a bigger
grid would not help them.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.findings import Evidence, Finding, Result, Severity, Subject
from diagnose.kernel_stats import launches_figure, per_kernel, sm_count

NAME = "launch_config"
ORDER = 20
SECTION = "section-launch_config"
METRICS = ["grid_size", "block_size", "waves_per_sm", "achieved_occupancy_pct"]


def analyze(profile, th) -> Result:
    t = th.launch_config
    kernels = profile.kernels
    result = Result(NAME)
    if not len(kernels):
        return result
    sms = sm_count(kernels)
    stats = per_kernel(kernels, METRICS)
    # the most common grid and block of each kernel, for display and judgement
    shapes = kernels.groupby("kernel_short")[["grid_size", "block_size"]].agg(
        lambda s: s.mode().iloc[0] if s.notna().any() else np.nan)
    stats["grid_size"] = stats["kernel"].map(shapes["grid_size"])
    stats["block_size"] = stats["kernel"].map(shapes["block_size"])
    stats["sm_count"] = sms
    heavy = stats[(stats["share"] >= t.min_kernel_share)
                  & (stats["mean_dur_ns"] >= th.tiny_kernels.max_dur_us * 1000.0)]
    result.tables["kernels"] = stats
    result.meta["sm_count"] = sms
    if not np.isnan(sms):
        small = heavy[heavy["grid_size"] < sms * t.min_waves].copy()
        if len(small):
            small["idle_sm_share"] = 1.0 - small["grid_size"] / sms
            small["est_loss_share"] = small["share"] * small["idle_sm_share"]
            result.findings.append(_small_grid(small.sort_values("est_loss_share", ascending=False), sms))
        tail = heavy[(heavy["grid_size"] >= sms) & heavy["waves_per_sm"].notna()
                     & (heavy["waves_per_sm"] > 1.0) & (heavy["waves_per_sm"] <= t.max_waves_for_tail)].copy()
        if len(tail):
            frac = tail["waves_per_sm"] - np.floor(tail["waves_per_sm"])
            tail["last_wave_idle_pct"] = np.where(frac > 0, 100.0 * (1.0 - frac), 0.0)
            tail["est_loss_share"] = tail["share"] * (tail["last_wave_idle_pct"] / 100.0) / np.ceil(tail["waves_per_sm"])
            tail = tail[tail["last_wave_idle_pct"] >= t.tail_waste_pct]
            if len(tail):
                result.findings.append(_tail(tail.sort_values("est_loss_share", ascending=False), t))
    odd = heavy[heavy["block_size"].notna() & (heavy["block_size"] % 32 != 0)].copy()
    if len(odd):
        warps = np.ceil(odd["block_size"] / 32.0)
        odd["wasted_lane_pct"] = 100.0 * (warps * 32 - odd["block_size"]) / (warps * 32)
        result.findings.append(_odd_blocks(odd.sort_values("share", ascending=False)))
    return result


def _small_grid(small: pd.DataFrame, sms: float) -> Finding:
    subjects = []
    for _, r in small.iterrows():
        sev = Severity.CRITICAL if r["grid_size"] <= sms / 4 and r["share"] >= 0.1 else Severity.WARNING
        f = launches_figure(r)
        f.update({"grid_blocks": int(r["grid_size"]), "sm_count": int(sms), "idle_sm_pct": 100 * r["idle_sm_share"],
                  "est_loss_share": r["est_loss_share"]})
        subjects.append(Subject("kernel", r["kernel"], sev, f))
    top = small.iloc[0]
    loss = float(small["est_loss_share"].sum())
    return Finding(
        id="launch_config.small_grid", analyzer=NAME, severity=max(s.severity for s in subjects),
        title=(f"{top['kernel']} runs {int(top['grid_size'])} blocks on a {int(sms)}-SM GPU: "
               f"{100 * top['idle_sm_share']:.0f} % of SMs idle for {100 * top['share']:.1f} % of GPU time"),
        subjects=tuple(subjects),
        evidence=(Evidence("launch__grid_size", float(top["grid_size"]), "blocks", float(sms)),
                  Evidence("device__attribute_multiprocessor_count", float(sms), "SMs")),
        cost_share=loss,
        recommendation=("Give the GPU at least one block per SM: split each row/problem across several blocks "
                        "(a split-K or two-pass reduction), batch more independent problems into one launch, or "
                        "run independent small kernels concurrently on separate streams. For a per-row op on "
                        "few, very long rows (softmax, layer norm, reductions), reshape so more rows or "
                        "row-chunks run in parallel."),
        section=SECTION)


def _tail(tail: pd.DataFrame, t) -> Finding:
    subjects = []
    for _, r in tail.iterrows():
        f = launches_figure(r)
        f.update({"waves_per_sm": r["waves_per_sm"], "last_wave_idle_pct": r["last_wave_idle_pct"],
                  "est_loss_share": r["est_loss_share"]})
        subjects.append(Subject("kernel", r["kernel"], Severity.WARNING, f))
    top = tail.iloc[0]
    return Finding(
        id="launch_config.tail_effect", analyzer=NAME, severity=Severity.WARNING,
        title=(f"{top['kernel']} runs {top['waves_per_sm']:.2f} waves: its last wave leaves "
               f"{top['last_wave_idle_pct']:.0f} % of the GPU idle"),
        subjects=tuple(subjects),
        evidence=(Evidence("launch__waves_per_multiprocessor", float(top["waves_per_sm"]), "waves"),
                  Evidence("last_wave_idle_pct", float(top["last_wave_idle_pct"]), "%", t.tail_waste_pct)),
        cost_share=float(tail["est_loss_share"].sum()),
        recommendation=("Size the grid to a whole number of waves (blocks = k × SMs × resident blocks per SM), "
                        "or make blocks smaller so the partial wave is a small share of the work; for GEMMs, a "
                        "persistent/stream-K kernel or a different tile size removes the tail."),
        section=SECTION)


def _odd_blocks(odd: pd.DataFrame) -> Finding:
    subjects = []
    for _, r in odd.iterrows():
        f = launches_figure(r)
        f.update({"block_threads": int(r["block_size"]), "wasted_lane_pct": r["wasted_lane_pct"]})
        subjects.append(Subject("kernel", r["kernel"], Severity.WARNING, f))
    top = odd.iloc[0]
    return Finding(
        id="launch_config.block_not_warp_multiple", analyzer=NAME, severity=Severity.WARNING,
        title=f"{top['kernel']} launches blocks of {int(top['block_size'])} threads, not a multiple of 32",
        subjects=tuple(subjects),
        evidence=(Evidence("launch__block_size", float(top["block_size"]), "threads"),
                  Evidence("wasted_lane_pct", float(top["wasted_lane_pct"]), "%")),
        cost_share=float((odd["share"] * odd["wasted_lane_pct"] / 100.0).sum()),
        recommendation="Use a block size that is a multiple of the warp size (32): the last warp of each block "
                       "otherwise runs with idle lanes.",
        section=SECTION)
