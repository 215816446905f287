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
bigger grid would not help: the tiny_kernels analyzer reports those); nor are single launches
shorter than that bound, whatever their kernel's average.

A kernel's launches can differ in shape (one elementwise kernel runs 22,400 blocks for the
activations and 5,600 for a bias). Every figure of a sentence or a table row comes from the
same launches: a finding names the launch configuration (grid, block, waves) that loses the
most time, with how many of the kernel's launches run it and their share of GPU time; the table
shows per kernel the configuration that carries the most GPU time, its idle shares worked out
from that configuration alone.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.derive.derived import Derived
from diagnose.derive.kernel_stats import (
    kernel_groups,
    kernel_subject_name,
    launches_figure,
    per_kernel,
    per_kernel_sum,
    sm_count,
)
from diagnose.findings import Evidence, Finding, Result, Severity, Subject
from diagnose.formatting import count_human, n_things, number_human, pct_human, share_human
from diagnose.metrics import LOWER, Metric

NAME = "launch_config"
ORDER = 20
SECTION = "section-launch_config"
TITLE = "Launch configuration"  # its report section's heading
JUDGES = "launch configurations"  # what "Nothing crossed a threshold: judged ..." names
COST_BASIS = "GPU time"  # its cost_share is a share of the profiled kernels' GPU time, as the verdict says it
COST_BASIS_BY_ID: dict[str, str] = {}  # no finding's basis differs
THRESHOLDS = ("launch_config", "tiny_kernels")  # the Thresholds groups it reads (diagnose/thresholds.py)
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


def analyze(profile, derived: Derived, th) -> Result:
    t = th.launch_config
    kernels = profile.kernels
    result = Result(NAME)
    if not len(kernels) or kernels["grid_size"].notna().sum() == 0:
        return result
    k = launch_losses(kernels, t, min_dur_ns=th.tiny_kernels.max_dur_us * 1000.0)
    stats = per_kernel(kernels, METRICS, memo=derived.kernel_memo)
    # the shape carrying most GPU time (each launch counts a little, so a capture without durations still has one)
    typical = launch_config_of(
        kernels,
        k,
        pd.to_numeric(kernels["dur_ns"], errors="coerce").fillna(0.0) + 1e-9,
        stats,
        memo=derived.kernel_memo,
    )
    for col in ("grid_size", "block_size", "sm_count", "waves_per_sm", "idle_sm_pct", "last_wave_idle_pct"):
        stats[col] = typical[col].to_numpy()
    stats["configs"] = typical["configs"].to_numpy()
    warps = np.ceil(stats["block_size"] / 32.0)
    stats["wasted_lane_pct"] = 100.0 * (warps * 32 - stats["block_size"]) / (warps * 32)
    for col in ("small_grid_loss_ns", "tail_loss_ns", "lane_loss_ns"):
        stats[col] = per_kernel_sum(kernels, k[col], stats, memo=derived.kernel_memo).fillna(0.0)
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
        small = _with_lossy_config(small, kernels, k, "small_grid_loss_ns", total, memo=derived.kernel_memo)
        result.findings.append(_small_grid(small.sort_values("small_grid_loss_ns", ascending=False), t))
    tail = heavy[heavy["tail_loss_ns"] > 0]
    if len(tail):
        tail = _with_lossy_config(tail, kernels, k, "tail_loss_ns", total, memo=derived.kernel_memo)
        result.findings.append(_tail(tail.sort_values("tail_loss_ns", ascending=False), t))
    odd = heavy[heavy["lane_loss_ns"] > 0]
    if len(odd):
        odd = _with_lossy_config(odd, kernels, k, "lane_loss_ns", total, memo=derived.kernel_memo)
        result.findings.append(_odd_blocks(odd.sort_values("lane_loss_ns", ascending=False)))
    for col in ("small_grid", "tail", "lane"):
        result.summary[f"launch_{col}_loss_gpu_time_share"] = (
            float(heavy[f"{col}_loss_share"].sum()) if total > 0 else 0.0
        )
    return result


CONFIG_COLUMNS = ["grid_size", "block_size", "sm_count", "waves_per_sm"]


def launch_config_of(
    kernels: pd.DataFrame, k: pd.DataFrame, weight: pd.Series, stats: pd.DataFrame, memo=None
) -> pd.DataFrame:
    """Per kernel (aligned with ``stats``): the launch configuration (grid, block, SMs, waves) carrying the most
    ``weight`` (a per-launch quantity: its duration, or the ns a shape loses), with that configuration's
    launches, GPU time, idle shares, and how many configurations the kernel ran. Launches of zero weight are
    left out, so a kernel with no weight at all has NaN figures."""
    codes, keys = kernel_groups(kernels, memo=memo)
    frame = pd.DataFrame(
        {
            "key": codes,
            "grid_size": pd.to_numeric(kernels["grid_size"], errors="coerce").to_numpy(dtype=float),
            "block_size": pd.to_numeric(kernels["block_size"], errors="coerce").to_numpy(dtype=float),
            "sm_count": pd.to_numeric(kernels["sm_count"], errors="coerce").to_numpy(dtype=float),
            "waves_per_sm": k["waves"].to_numpy(dtype=float),
            "last_wave_idle_pct": k["last_wave_idle_pct"].to_numpy(dtype=float),
            "dur": pd.to_numeric(kernels["dur_ns"], errors="coerce").fillna(0.0).to_numpy(dtype=float),
            "w": pd.to_numeric(weight, errors="coerce").fillna(0.0).to_numpy(dtype=float),
        }
    )
    configs = frame.groupby("key")[CONFIG_COLUMNS].apply(lambda g: len(g.drop_duplicates())).rename("configs")
    weighted = frame[frame["w"] > 0] if (frame["w"] > 0).any() else frame.iloc[:0]
    out = pd.DataFrame(index=stats.index, columns=[*CONFIG_COLUMNS, "last_wave_idle_pct"], dtype=float)
    out["config_launches"], out["config_gpu_time_ns"] = np.nan, np.nan
    if len(weighted):
        groups = weighted.groupby(["key", *CONFIG_COLUMNS], dropna=False).agg(
            w=("w", "sum"),
            config_launches=("w", "size"),
            config_gpu_time_ns=("dur", "sum"),
            last_wave_idle_pct=("last_wave_idle_pct", "first"),
        )
        top = (
            groups.reset_index()
            .sort_values(["key", "w", "grid_size"], ascending=[True, False, False], kind="stable")
            .drop_duplicates("key")
        )
        top.index = keys[top["key"].to_numpy()]
        by_name = top.reindex(stats["kernel_name"].to_numpy())
        for col in [*CONFIG_COLUMNS, "last_wave_idle_pct", "config_launches", "config_gpu_time_ns"]:
            out[col] = by_name[col].to_numpy(dtype=float)
    out["configs"] = stats["kernel_name"].map(pd.Series(configs.to_numpy(), index=keys[configs.index])).to_numpy()
    out["idle_sm_pct"] = 100.0 * (1.0 - out["grid_size"] / out["sm_count"]).clip(lower=0.0)
    return out


def _with_lossy_config(
    rows: pd.DataFrame, kernels: pd.DataFrame, k: pd.DataFrame, loss: str, total_ns: float, memo=None
):
    """``rows`` with the figures of the configuration that loses the most ``loss`` in place of the typical one's,
    and ``config_launches`` / ``config_share``: how many launches run it, and their share of all GPU time."""
    lossy = launch_config_of(kernels, k, k[loss], rows, memo=memo)
    rows = rows.copy()
    for col in [*CONFIG_COLUMNS, "idle_sm_pct", "last_wave_idle_pct", "config_launches"]:
        rows[col] = lossy[col].to_numpy()
    rows["config_share"] = lossy["config_gpu_time_ns"].to_numpy() / total_ns if total_ns > 0 else np.nan
    warps = np.ceil(rows["block_size"] / 32.0)
    rows["wasted_lane_pct"] = 100.0 * (warps * 32 - rows["block_size"]) / (warps * 32)
    return rows


def _in_launches(r: pd.Series) -> str:
    """`` in 1 of its 3 launches`` when the configuration is not all of the kernel's launches, else nothing."""
    if r["config_launches"] >= r["launches"]:
        return ""
    return f" in {count_human(r['config_launches'])} of its {n_things(r['launches'], 'launch')}"


def _config_figures(r: pd.Series) -> dict:
    return {"config_launches": int(r["config_launches"]), "config_share": float(r["config_share"])}


def launch_losses(kernels: pd.DataFrame, t, min_dur_ns: float = 0.0) -> pd.DataFrame:
    """Per launch: waves, the idle share of its last wave, and the ns each of the three shapes loses.

    Launches shorter than ``min_dur_ns`` (the tiny-kernel bound) lose nothing to their shape: they are
    launch-bound, and a kernel's 2 µs one-block launches must not lend their idle SMs to its long ones.
    """
    dur = kernels["dur_ns"].astype(float).fillna(0.0)
    dur = dur.where(dur >= min_dur_ns, 0.0)
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
        sev = min(  # critical only when both the idle SMs and the kernel's share reach theirs
            Severity.of(r["idle_sm_pct"], critical=t.critical_idle_sm_pct, otherwise=Severity.WARNING),
            Severity.of(r["config_share"], critical=t.critical_kernel_share, otherwise=Severity.WARNING),
        )
        f = launches_figure(r)
        f.update(
            {
                "grid_blocks": int(r["grid_size"]),
                "block_threads": _int(r["block_size"]),
                "sm_count": int(r["sm_count"]),
                "idle_sm_pct": float(r["idle_sm_pct"]),
                **_config_figures(r),
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
            f"{top['kernel']} runs {n_things(top['grid_size'], 'block')} on a {count_human(top['sm_count'])}-SM GPU"
            f"{_in_launches(top)}: {pct_human(top['idle_sm_pct'], 0)} of SMs idle for "
            f"{share_human(top['config_share'])} of GPU time"
            + (f" ({n_things(n - 1, 'more kernel')} with grids under one block per SM)" if n > 1 else "")
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
                **_config_figures(r),
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
            f"{top['kernel']} runs {number_human(top['waves_per_sm'])} waves{_in_launches(top)}: its last wave "
            f"leaves {pct_human(top['last_wave_idle_pct'], 0)} of the GPU idle"
            + (f" ({n_things(len(tail) - 1, 'more kernel')} with a partly empty last wave)" if len(tail) > 1 else "")
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
                **_config_figures(r),
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
            f"{top['kernel']} launches blocks of {n_things(top['block_size'], 'thread')}{_in_launches(top)}, "
            f"not a multiple of 32: {pct_human(top['wasted_lane_pct'], 0)} of lanes idle"
            + (f" ({n_things(len(odd) - 1, 'more kernel')} with such blocks)" if len(odd) > 1 else "")
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
