"""NVML utilisation over the run, aligned to training steps.

NVML says, per ~100 ms sample, the share of time a kernel ran (GPU util) and the
share of time device memory was read or written (memory util). Both are judged
over the training window (first measured step start to last step end, unix ns on
both sides) when step events exist, so model set-up and teardown do not drag the
averages down; otherwise over every sample. GPUs that never ran a kernel (other
devices of the node) are left out of the judgement.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.derive import capture_advice
from diagnose.derive.derived import Derived
from diagnose.findings import Evidence, Finding, Result, Severity, Subject, not_measured
from diagnose.ingest.profile_data import Profile
from diagnose.metrics import HIGHER, LOWER, NEUTRAL, Metric
from diagnose.thresholds import Thresholds
from parsers.run_records import NVML_CSV

NAME = "utilization"
ORDER = 45
SECTION = "section-utilization"
TITLE = "NVML utilisation"  # its report section's heading
JUDGES = "NVML utilisation"  # what "Nothing crossed a threshold: judged ..." names
COST_BASIS = "the sampled time (NVML)"  # what its findings' cost_share is a share of, in the verdict's words
COST_BASIS_BY_ID: dict[str, str] = {}  # no finding's basis differs
THRESHOLDS = ("utilization", "steps")  # the Thresholds groups it reads (diagnose/thresholds.py)
SUMMARY_METRICS = (  # what _summary() writes into Result.summary (diagnose.metrics)
    Metric("nvml_sample_count", "NVML samples", "count", NEUTRAL, 1),
    Metric("nvml_window_s", "NVML window judged", "s", NEUTRAL, 0.001),
    Metric("nvml_sample_interval_median_ms", "NVML sampling interval", "ms", NEUTRAL, 0.001),
    # NVML reports utilisation in whole percent
    Metric("nvml_gpu_util_mean_pct", "NVML GPU utilisation, mean", "%", HIGHER, 1),
    # memory-controller busy time: more is neither better nor worse on its own
    Metric("nvml_mem_util_mean_pct", "NVML memory utilisation, mean", "%", NEUTRAL, 1),
    Metric("nvml_mem_util_peak_pct", "NVML memory utilisation, peak", "%", NEUTRAL, 1),
    Metric("nvml_mem_util_swing_pct", "NVML memory utilisation swing (p90 - p10)", "%", LOWER, 1),
    Metric("nvml_mem_used_peak_bytes", "Device memory used, peak (NVML)", "bytes", LOWER, 2**20),  # MiB pages
    Metric("nvml_sm_clock_median_mhz", "SM clock, median", "MHz", NEUTRAL, 1),
    Metric("nvml_power_mean_w", "Board power, mean", "W", NEUTRAL, 0.001),  # NVML reports milliwatts
)
FINDING_IDS = (  # every id this analyzer can produce: `gpudiag check --ignore` validates against them
    "utilization.low_gpu_util",
    "utilization.mem_util_swing",
    "utilization.not_measured",
)
# what the GPU looks like, not why: ranks after a cause of the same severity (diagnose.findings.rank_findings)
SYMPTOM_FINDING_IDS = ("utilization.low_gpu_util",)
TIMELINE_COLUMNS = ["gpu_util_pct", "mem_util_pct", "mem_used_gib", "sm_clock_mhz", "power_w"]


def analyze(profile: Profile, derived: Derived, th: Thresholds = Thresholds()) -> Result:
    result = Result(analyzer=NAME)
    incomplete = ((profile.manifest or {}).get("incomplete") or {}).get(NVML_CSV)
    if incomplete:  # said again beside the NVML timeline it cuts short (e.g. NVML stopped mid-run)
        result.meta["input_note"] = f"nvml.csv is incomplete: {incomplete}"
    samples = profile.nvml
    if samples is None or not len(samples):
        result.findings.append(
            not_measured(
                NAME,
                "GPU utilisation (NVML)",
                capture_advice.advice(
                    profile,
                    "Run the script under `gpudiag profile`; it samples NVML (utilisation, memory, clocks, power) "
                    "about ten times a second into nvml.csv.",
                    "NVML is sampled into nvml.csv where an NVIDIA driver and nvidia-ml-py are present and the run "
                    "was not given --no-nvml (an --ncu run does not sample it).",
                    NVML_CSV,
                ),
                section=SECTION,
            )
        )
        return result
    samples = samples.sort_values(["t_ns", "gpu"], kind="stable").reset_index(drop=True)
    steps = derived.step_table()
    steps = steps[steps["t_start_ns"].notna()] if len(steps) else steps
    window, in_window = _training_window(samples, steps, th)
    judged = samples[in_window]
    # NVML lost before the measured steps (e.g. during warm-up) leaves none inside the window: the
    # timeline still shows what was sampled, and nothing is judged
    active = _active_gpus(judged if len(judged) else samples)
    judged = judged[judged["gpu"].isin(active)]

    per_gpu = _per_gpu(judged)
    result.tables["per_gpu"] = per_gpu
    result.summary.update(_summary(judged, per_gpu))
    t0_ns = float(min(samples["t_ns"].min(), steps["t_start_ns"].min() if len(steps) else np.inf))
    result.tables["timeline"], stride = _timeline(samples[samples["gpu"].isin(active)], t0_ns, th)
    if len(steps):
        result.tables["step_marks"], mark_stride = _step_marks(steps, t0_ns, th)
        result.tables["per_step"] = _per_step(judged, steps)
    else:
        mark_stride = 0
    result.meta.update(
        {
            "t0_ns": t0_ns,
            "timeline_stride": stride,
            "step_mark_stride": mark_stride,
            "window": "training steps" if window else "all samples",
            "window_start_s": (window[0] - t0_ns) / 1e9 if window else None,
            "window_end_s": (window[1] - t0_ns) / 1e9 if window else None,
            "gpus_judged": [int(g) for g in active] if len(judged) else [],
            "samples_in_window": int(len(judged)),
            "gpus_sampled": sorted(int(g) for g in samples["gpu"].unique()),
            # (x0_s, x1_s, side) of the run's steps that no sample covers: the chart draws them as not recorded
            "not_recorded": not_recorded(result.tables["timeline"], result.tables.get("step_marks")),
        }
    )
    for row in per_gpu.itertuples():
        if row.samples < th.utilization.min_samples:
            continue
        for finding in (_low_gpu_util(row, th), _bursty_memory(row, th)):
            if finding:
                result.findings.append(finding)
    return _merge_per_gpu(result)


def _training_window(samples: pd.DataFrame, steps: pd.DataFrame, th: Thresholds):
    """(start_ns, end_ns) of the measured steps and the mask of samples inside it; all samples when too few."""
    measured = steps[~steps["warmup"]] if len(steps) else steps
    if not len(measured):
        return None, pd.Series(True, index=samples.index)
    start = float(measured["t_start_ns"].min())
    end = float((measured["t_start_ns"] + measured["step_ms"].fillna(0) * 1e6).max())
    mask = (samples["t_ns"] >= start) & (samples["t_ns"] <= end)
    if mask.groupby(samples["gpu"]).sum().max() < th.utilization.min_samples:
        # the steps were too short for the sampling rate: judging the samples around them (start-up,
        # compilation, teardown) would blame the training for idle time that is not its own
        return (start, end), mask
    return (start, end), mask


def _active_gpus(samples: pd.DataFrame) -> list[int]:
    busy = samples.groupby("gpu")["gpu_util_pct"].max()
    active = sorted(int(g) for g in busy[busy > 0].index)
    return active or sorted(int(g) for g in samples["gpu"].unique())


def _per_gpu(samples: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for gpu, s in samples.groupby("gpu"):
        mem = s["mem_util_pct"].dropna()
        rows.append(
            {
                "gpu": int(gpu),
                "samples": int(len(s)),
                "gpu_util_mean_pct": s["gpu_util_pct"].mean(),
                "mem_util_mean_pct": mem.mean(),
                "mem_util_p10_pct": mem.quantile(0.1) if len(mem) else np.nan,
                "mem_util_p90_pct": mem.quantile(0.9) if len(mem) else np.nan,
                "mem_util_peak_pct": mem.max(),
                "mem_used_peak_bytes": s["mem_used_bytes"].max(),
                "mem_total_bytes": s["mem_total_bytes"].max(),
                "sm_clock_median_mhz": s["sm_clock_mhz"].median(),
                "power_mean_w": s["power_w"].mean(),
                "power_peak_w": s["power_w"].max(),
            }
        )
    table = pd.DataFrame(rows)
    if len(table):
        table["mem_util_swing_pct"] = table["mem_util_p90_pct"] - table["mem_util_p10_pct"]
    return table


def _summary(samples: pd.DataFrame, per_gpu: pd.DataFrame) -> dict[str, float]:
    if not len(samples):
        return {}
    interval = samples.groupby("gpu")["t_ns"].diff().dropna()
    out = {
        "nvml_sample_count": int(len(samples)),
        "nvml_window_s": float((samples["t_ns"].max() - samples["t_ns"].min()) / 1e9),
        "nvml_sample_interval_median_ms": float(interval.median() / 1e6) if len(interval) else float("nan"),
        "nvml_gpu_util_mean_pct": float(samples["gpu_util_pct"].mean()),
        "nvml_mem_util_mean_pct": float(samples["mem_util_pct"].mean()),
        "nvml_mem_util_peak_pct": float(samples["mem_util_pct"].max()),
        "nvml_mem_util_swing_pct": float(per_gpu["mem_util_swing_pct"].max()),
        "nvml_mem_used_peak_bytes": float(samples["mem_used_bytes"].max()),
        "nvml_sm_clock_median_mhz": float(samples["sm_clock_mhz"].median()),
        "nvml_power_mean_w": float(samples["power_w"].mean()),
    }
    return {k: v for k, v in out.items() if not (isinstance(v, float) and np.isnan(v))}


def _timeline(samples: pd.DataFrame, t0_ns: float, th: Thresholds) -> tuple[pd.DataFrame, int]:
    """Every k-th sample per GPU, so all GPUs together stay under ``max_timeline_points``.

    Decimation keeps real samples (a bucket mean would smooth away the very swings judged here).
    """
    gpus = max(1, samples["gpu"].nunique())
    per_gpu_budget = max(1, th.utilization.max_timeline_points // gpus)
    longest = int(samples.groupby("gpu").size().max()) if len(samples) else 0
    stride = max(1, int(np.ceil(longest / per_gpu_budget)))
    kept = samples[samples.groupby("gpu").cumcount() % stride == 0]
    table = pd.DataFrame(
        {
            "gpu": kept["gpu"].astype(int),
            "t_s": (kept["t_ns"] - t0_ns) / 1e9,
            "gpu_util_pct": kept["gpu_util_pct"],
            "mem_util_pct": kept["mem_util_pct"],
            "mem_used_gib": kept["mem_used_bytes"] / 2**30,
            "sm_clock_mhz": kept["sm_clock_mhz"],
            "power_w": kept["power_w"],
        }
    )
    return table.reset_index(drop=True), stride


def _step_marks(steps: pd.DataFrame, t0_ns: float, th: Thresholds) -> tuple[pd.DataFrame, int]:
    """Step start times of the lowest rank, every k-th so at most ``max_step_marks`` lines are drawn."""
    first_rank = steps[steps["rank"] == steps["rank"].min()]
    stride = max(1, int(np.ceil(len(first_rank) / th.utilization.max_step_marks)))
    kept = first_rank.iloc[::stride]
    return pd.DataFrame(
        {
            "step": kept["step"].astype(int).to_numpy(),
            "t_s": ((kept["t_start_ns"] - t0_ns) / 1e9).to_numpy(),
            "warmup": kept["warmup"].to_numpy(),
        }
    ), stride


def _per_step(samples: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Mean NVML readings of the samples that fall inside each step (lowest rank, first judged GPU)."""
    if not len(samples):
        return pd.DataFrame()
    first_rank = steps[steps["rank"] == steps["rank"].min()].sort_values("t_start_ns")
    gpu = samples[samples["gpu"] == samples["gpu"].min()].sort_values("t_ns")
    starts = first_rank["t_start_ns"].to_numpy()
    ends = starts + first_rank["step_ms"].fillna(0).to_numpy() * 1e6
    index = np.searchsorted(starts, gpu["t_ns"].to_numpy(), side="right") - 1
    inside = (index >= 0) & (gpu["t_ns"].to_numpy() <= ends[np.clip(index, 0, None)])
    tagged = gpu[inside].assign(step=first_rank["step"].to_numpy()[index[inside]])
    if not len(tagged):
        return pd.DataFrame()
    return (
        tagged.groupby("step")
        .agg(
            samples=("t_ns", "size"),
            gpu_util_mean_pct=("gpu_util_pct", "mean"),
            mem_util_mean_pct=("mem_util_pct", "mean"),
        )
        .reset_index()
    )


def _low_gpu_util(row, th: Thresholds) -> Finding | None:
    util = float(row.gpu_util_mean_pct)
    if np.isnan(util) or util >= th.utilization.gpu_util_low_pct:
        return None
    severity = Severity.of(
        util,
        critical=th.utilization.gpu_util_critical_pct,
        lower_is_worse=True,
        strict=True,
        otherwise=Severity.WARNING,
    )
    return Finding(
        id="utilization.low_gpu_util",
        analyzer=NAME,
        severity=severity,
        title=f"GPU {row.gpu} ran kernels only {util:.0f} % of the time (NVML)",
        subjects=(
            Subject(
                "gpu",
                f"GPU {row.gpu}",
                severity=severity,
                figures={"gpu_util_mean_pct": util, "samples": int(row.samples)},
            ),
        ),
        evidence=(Evidence("nvml_gpu_util_mean_pct", util, "%", th.utilization.gpu_util_low_pct),),
        cost_share=1.0 - util / 100.0,
        recommendation="The GPU is idle between kernels for much of the run. See the steps and sync sections for "
        "why (host-bound steps, data loading, host syncs); raise the batch size if memory allows.",
        section=SECTION,
    )


def _bursty_memory(row, th: Thresholds) -> Finding | None:
    swing, peak = float(row.mem_util_swing_pct), float(row.mem_util_peak_pct)
    if np.isnan(swing) or swing < th.utilization.mem_util_swing_pct or peak >= th.utilization.mem_util_peak_pct:
        return None
    return Finding(
        id="utilization.mem_util_swing",
        analyzer=NAME,
        severity=Severity.WARNING,
        title=f"GPU {row.gpu} memory traffic comes in bursts: memory utilisation swings {swing:.0f} points "
        f"(p10 {row.mem_util_p10_pct:.0f} % → p90 {row.mem_util_p90_pct:.0f} %) and never passes {peak:.0f} %",
        subjects=(
            Subject(
                "gpu",
                f"GPU {row.gpu}",
                severity=Severity.WARNING,
                figures={
                    "mem_util_p10_pct": float(row.mem_util_p10_pct),
                    "mem_util_p90_pct": float(row.mem_util_p90_pct),
                    "mem_util_peak_pct": peak,
                },
            ),
        ),
        evidence=(
            Evidence("nvml_mem_util_swing_pct", swing, "%", th.utilization.mem_util_swing_pct),
            Evidence("nvml_mem_util_peak_pct", peak, "%", th.utilization.mem_util_peak_pct),
        ),
        cost_share=None,
        recommendation="A workload that keeps the GPU fed holds memory utilisation steady. Bursts under 50 % point "
        "to work that arrives in fits (input stalls, host syncs between phases) or is split into many "
        "small kernels; overlap data loading, remove syncs, fuse small ops (torch.compile).",
        section=SECTION,
    )


def _merge_per_gpu(result: Result) -> Result:
    """One finding per id, with one subject per GPU, at the worst GPU's severity, cost and title."""
    by_id: dict[str, list[Finding]] = {}
    for f in result.findings:
        by_id.setdefault(f.id, []).append(f)
    merged = []
    for group in by_id.values():
        worst = max(group, key=lambda f: (f.severity, f.cost_share or 0.0))
        if len(group) == 1:
            merged.append(worst)
            continue
        merged.append(
            Finding(
                id=worst.id,
                analyzer=NAME,
                severity=worst.severity,
                title=f"{worst.title} (worst of {len(group)} GPUs)",
                subjects=tuple(s for f in group for s in f.subjects),
                evidence=worst.evidence,
                cost_share=worst.cost_share,
                recommendation=worst.recommendation,
                section=SECTION,
            )
        )
    result.findings = merged
    return result


def not_recorded(timeline: pd.DataFrame, marks: pd.DataFrame | None) -> list[tuple[float, float, str]]:
    """Spans of the run's steps with no NVML sample (before the first, after the last): drawn as not recorded,
    not as the last values seen. A gap under two sampling intervals is sampling, not a gap."""
    if marks is None or not len(marks) or len(timeline) < 2:
        return []
    t = timeline["t_s"].to_numpy(dtype=float)
    step = float(np.nanmedian(np.diff(np.unique(t)))) if len(np.unique(t)) > 1 else 0.0
    first, last = float(np.nanmin(t)), float(np.nanmax(t))
    lo, hi = float(marks["t_s"].min()), float(marks["t_s"].max())
    spans = []
    if first - lo > 2 * step:
        spans.append((lo, first, "before the first sample"))
    if hi - last > 2 * step:
        spans.append((last, hi, "after the last sample"))
    return spans
