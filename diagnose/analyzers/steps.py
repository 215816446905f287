"""Step time from CUDA events: does the GPU wait on the host, and is step time steady?

Each step has a host time (wall clock from its start to the next step's) and a
GPU time (between CUDA events recorded at its start and end). When host time
well exceeds GPU time the GPU sits waiting for the host: data loading, Python
overhead or syncs. Warm-up steps are left out of every median (see
``Steps.warmup_steps``); docs/step-timings.md says how the figures are made. When light
mode timed only one step in k, the budget it kept to comes from its own gpu-time-every
records (``steps.attrs["gpu_time_choices"]``, parsers/events.py).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from diagnose.derive import capture_advice, jax_dispatch
from diagnose.derive.derived import Derived
from diagnose.derive.host_cpu_wait import cpu_wait_by_rank
from diagnose.derive.jit_dispatch_samples import sentence as jit_sentence
from diagnose.findings import Evidence, Finding, Result, Severity, Subject, not_measured
from diagnose.formatting import ms_human, n_things
from diagnose.ingest.profile_data import Profile, run_marks_of
from diagnose.judges.step_budget.common import short_location
from diagnose.metrics import LOWER, NEUTRAL, Metric
from diagnose.thresholds import Thresholds
from parsers.run_records import (
    EVENTS,
    WORK_CHECKPOINT,
    WORK_COMPILATION,
    WORK_EVALUATION,
    WORK_GPUDIAG,
    WORK_HOST_CODE,
    WORK_NEW_SHAPE,
)

NAME = "steps"
ORDER = 40
SECTION = "section-steps"
TITLE = "Step timings"  # its report section's heading
JUDGES = "step times"  # what "Nothing crossed a threshold: judged ..." names
COST_BASIS = "step time"  # what its findings' cost_share is a share of, in the verdict's words
COST_BASIS_BY_ID = {  # findings whose cost_share is a share of something else
    "steps.unstable": "the steady steps' time",
    "steps.outliers": "the steady steps' time",
    "steps.host_bound": "the median step's host time",
    "steps.own_overhead": "the median step's host time",
    "steps.cpu_wait": "the time from the first step to the end",
}
# the Thresholds groups it reads (diagnose/thresholds.py); step_budget and sync through the step budget, whose
# steady steps hold a JAX run's sampled dispatch (_jit_host_bound)
THRESHOLDS = ("steps", "step_budget", "sync")
SUMMARY_METRICS = (  # what _summary() writes into Result.summary (diagnose.metrics)
    Metric("step_count", "Measured steps", "count", NEUTRAL, 1),
    Metric("step_warmup_excluded", "Warm-up and profiler trace-window steps left out", "count", NEUTRAL, 1),
    Metric("step_outlier_count", "Outlier steps", "count", LOWER, 1),
    # host times: perf_counter or a trace's microsecond timestamps, so 1 us; GPU times: CUDA events (~0.5 us)
    Metric("step_time_median_ms", "Median step time", "ms", LOWER, 0.001),
    Metric("step_time_p10_ms", "Step time, 10th percentile", "ms", LOWER, 0.001),
    Metric("step_time_p90_ms", "Step time, 90th percentile", "ms", LOWER, 0.001),
    Metric("step_time_spread_pct", "Step time spread (p90 - p10, of the median)", "%", LOWER, 0.01),
    Metric("step_host_time_median_ms", "Median host time per step", "ms", LOWER, 0.001),
    Metric("step_gpu_time_median_ms", "Median GPU time per step", "ms", LOWER, 0.0005),
    Metric("step_gpu_timed_count", "Steps with a GPU time", "count", NEUTRAL, 1),
    Metric("step_host_over_gpu_ratio", "Host time over GPU time per step", "ratio", LOWER, 0.001),
    Metric("gpudiag_overhead_mean_us", "gpudiag's own time per step", "µs", LOWER, 0.1),
    Metric("gpudiag_overhead_pct", "gpudiag's own time, of the host step time", "%", LOWER, 0.01),
)
FINDING_IDS = (  # every id this analyzer can produce: `gpudiag check --ignore` validates against them
    "steps.cpu_wait",
    "steps.host_bound",
    "steps.not_measured",
    "steps.outliers",
    "steps.own_overhead",
    "steps.unstable",
)
STEP_COLUMNS = ["rank", "step", "host_ms", "gpu_ms", "step_ms", "warmup", "instrumented", "outlier"]  # its table
# what the step time looks like, not why: ranks after a cause of the same severity (diagnose.findings.rank_findings)
SYMPTOM_FINDING_IDS = ("steps.unstable",)
# a cause the user can act on: a loop that waits for a CPU makes its steps vary (the symptom ranks after it)
CAUSE_FINDING_IDS = ("steps.cpu_wait",)
MAX_OUTLIER_SUBJECTS = 20


def analyze(profile: Profile, derived: Derived, th: Thresholds = Thresholds()) -> Result:
    result = Result(analyzer=NAME)
    steps = derived.step_table()
    if not len(steps):
        result.findings.append(
            not_measured(
                NAME,
                "Per-step CUDA-event timing",
                capture_advice.advice(
                    profile,
                    "Run the script under `gpudiag profile` (it records CUDA events around each optimizer step), or "
                    "pass a CSV/JSON of step timings (name,step,elapsed_ms; see docs/step-timings.md).",
                    capture_advice.STEP_RECORDS,
                    EVENTS.prefix,
                ),
                section=SECTION,
            )
        )
        return result
    under_ncu = capture_advice.steps_under_ncu(profile, steps["step_ms"])
    if under_ncu:  # ncu's step times, not the script's: nothing to judge (issue 32)
        result.findings.append(not_measured(NAME, "Per-step CUDA-event timing", under_ncu, section=SECTION))
        return result
    measured = steps[~steps["warmup"]]
    medians = measured.groupby("rank")["step_ms"].transform("median")
    steps["outlier"] = False
    steps.loc[measured.index, "outlier"] = measured["step_ms"] > th.steps.outlier_factor * medians
    measured = steps[~steps["warmup"]]

    result.summary.update(_summary(steps, measured))
    result.tables["per_rank"] = _per_rank(steps)
    result.tables["steps"] = steps[STEP_COLUMNS].reset_index(drop=True)  # every step: the section thins its chart
    regions = _regions(profile, steps)
    if len(regions):
        result.tables["regions"] = regions
    result.meta.update(
        {
            "step_name": str(steps["name"].iloc[0]),
            "max_chart_steps": th.steps.max_chart_steps,  # how many steps its chart draws, about
            "warmup_steps_per_rank": th.steps.warmup_steps,
            "warmup_excluded": int(steps["warmup"].sum()),
            "trace_window_excluded": int(steps["instrumented"].sum()),
            "median_step_ms": result.summary.get("step_time_median_ms"),
            "gpu_time_every": gpu_time_every(measured),
            "gpu_time_budget_pct": gpu_time_budget_pct(profile),
        }
    )
    sources = steps["source"].fillna("").astype(str) if "source" in steps else pd.Series([], dtype=object)
    sources = sources[sources != ""]
    if len(sources):
        counts = sources.value_counts(sort=False)
        result.meta["step_sources"] = {str(k): int(v) for k, v in counts.items()}
        result.meta["step_source_sentence"] = source_sentence(list(dict.fromkeys(sources)))
    if len(measured) >= th.steps.min_steps:
        host_bound = _host_bound(measured, th) or _jit_host_bound(profile, derived, th)
        split = {rank: derived.work_split(rank) for rank in profile.work_records}
        extra = {rank: work for rank, (work, _) in split.items()}
        own = {rank: own_code for rank, (_, own_code) in split.items()}
        unstable = _unstable(steps, measured, th, extra, own, cpu_wait_sentence(profile, th))
        found = [
            f
            for f in (
                host_bound,
                unstable,
                _own_overhead(result.summary, th),
                _cpu_wait(profile, th, used_gpu(profile, steps)),
            )
            if f
        ]
        if len(sources) and set(sources) == {"time"}:  # never let a slice read as an iteration
            found = [dataclasses.replace(f, title=f"{f.title} ({TIME_SLICE_WORDS})") for f in found]
        result.findings.extend(found)
    return result


TIME_SLICE_WORDS = "steps here are fixed time slices, not iterations"
# What ended the steps, as the report says it (light mode's step records, docs/profile.md)
STEP_SOURCE_WORDS = {
    "marker": "diagnose.step() markers",
    "optimizer": "optimizer steps",
    "backward": "the end of each backward pass (no optimizer or diagnose.step() was seen)",
    "jit": "dispatches of the jitted function called once per iteration (JAX; no diagnose.step() was seen)",
    "time": "fixed time slices of about 1 s (no optimizer, backward pass, jitted step or diagnose.step() was "
    "seen): figures per step are per slice, not per iteration",
}


def source_sentence(sources: list[str]) -> str:
    """'Steps were ended by …', the sources in the order the run used them."""
    return "Steps were ended by " + ", then ".join(STEP_SOURCE_WORDS.get(s, s) for s in sources) + "."


def _summary(steps: pd.DataFrame, measured: pd.DataFrame) -> dict[str, float]:
    step_ms = measured["step_ms"].dropna()
    out = {
        "step_count": int(len(measured)),
        "step_warmup_excluded": int(steps["warmup"].sum()),
        "step_outlier_count": int(measured["outlier"].sum()),
    }
    if len(step_ms):
        median = float(step_ms.median())
        p10, p90 = (float(v) for v in step_ms.quantile([0.1, 0.9]))
        out.update(
            {
                "step_time_median_ms": median,
                "step_time_p10_ms": p10,
                "step_time_p90_ms": p90,
                "step_time_spread_pct": 100.0 * (p90 - p10) / median if median > 0 else float("nan"),
            }
        )
    host, gpu = measured["host_ms"].dropna(), measured["gpu_ms"].dropna()
    if len(host):
        out["step_host_time_median_ms"] = float(host.median())
    if len(gpu):
        out["step_gpu_time_median_ms"] = float(gpu.median())
        out["step_gpu_timed_count"] = int(len(gpu))
    if len(host) and len(gpu) and gpu.median() > 0:
        out["step_host_over_gpu_ratio"] = float(host.median() / gpu.median())
    own_us = measured["overhead_us"].dropna() if "overhead_us" in measured else pd.Series(dtype=float)
    if len(own_us):
        # the mean, not the median: the step log is written every 100 ms, so a few steps carry most of it
        out["gpudiag_overhead_mean_us"] = own_mean_us = float(own_us.mean())
        if len(host) and host.median() > 0:
            out["gpudiag_overhead_pct"] = 100.0 * own_mean_us / 1000.0 / float(host.median())
    return out


def gpu_time_every(measured: pd.DataFrame) -> int | None:
    """k when only one step in k has a GPU time (light mode samples it when CUDA events cost more than
    0.5 % of a step; docs/step-timings.md), 1 when all have one, None when none has."""
    timed = measured.dropna(subset=["gpu_ms"])
    if not len(timed):
        return None
    if len(timed) == len(measured):
        return 1
    gaps = timed.groupby("rank")["step"].diff().dropna()
    return int(gaps.median()) if len(gaps) else None


def gpu_time_budget_pct(profile: Profile) -> float | None:
    """The share of a step light mode let CUDA events cost when it chose k, from its gpu-time-every records
    (the last one's, by rank and step; every choice of a run carries the same budget); None without any."""
    choices = [c for f in profile.step_events.values() for c in f.attrs.get("gpu_time_choices", ())]
    budgets = [c.budget_pct for c in sorted(choices, key=lambda c: (c.rank, c.from_step)) if np.isfinite(c.budget_pct)]
    return float(budgets[-1]) if budgets else None


def _per_rank(steps: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for rank, group in steps.groupby("rank"):
        measured = group[~group["warmup"]]
        host, gpu = measured["host_ms"].median(), measured["gpu_ms"].median()
        rows.append(
            {
                "rank": int(rank),
                "steps": int(len(measured)),
                "warmup_excluded": int(group["warmup"].sum()),
                "step_median_ms": measured["step_ms"].median(),
                "step_p10_ms": measured["step_ms"].quantile(0.1),
                "step_p90_ms": measured["step_ms"].quantile(0.9),
                "host_median_ms": host,
                "gpu_median_ms": gpu,
                "host_over_gpu_ratio": host / gpu if gpu and gpu > 0 else float("nan"),
                "outliers": int(measured["outlier"].sum()),
            }
        )
    return pd.DataFrame(rows)


def _regions(profile: Profile, steps: pd.DataFrame) -> pd.DataFrame:
    """Median GPU/host time of every other timed name (forward, backward, …) next to the whole step."""
    events = pd.concat([f for f in profile.step_events.values() if len(f)], ignore_index=True)
    step_name = steps["name"].iloc[0]
    others = events[events["name"] != step_name]
    if not len(others):
        return pd.DataFrame()
    median_step = steps.loc[~steps["warmup"], "step_ms"].median()
    table = (
        others.groupby("name")
        .agg(count=("step", "size"), gpu_median_ms=("gpu_ms", "median"), host_median_ms=("host_ms", "median"))
        .reset_index()
    )
    table["share_of_step_pct"] = 100.0 * table["gpu_median_ms"] / median_step if median_step > 0 else np.nan
    return table.sort_values("gpu_median_ms", ascending=False, kind="stable").reset_index(drop=True)


def _host_bound(measured: pd.DataFrame, th: Thresholds) -> Finding | None:
    both = measured.dropna(subset=["host_ms", "gpu_ms"])
    if len(both) < th.steps.min_steps:
        return None
    host, gpu = float(both["host_ms"].median()), float(both["gpu_ms"].median())
    if gpu <= 0:
        return None
    ratio = host / gpu
    if ratio < th.steps.host_bound_ratio:
        return None
    severity = Severity.of(ratio, critical=th.steps.host_bound_critical_ratio, otherwise=Severity.WARNING)
    subjects = []
    for rank, group in both.groupby("rank"):
        rank_ratio = float(group["host_ms"].median() / group["gpu_ms"].median())
        figures = {
            "host_median_ms": float(group["host_ms"].median()),
            "gpu_median_ms": float(group["gpu_ms"].median()),
            "host_over_gpu_ratio": rank_ratio,
        }
        subjects.append(_rank_subject(rank, rank_ratio, figures, th))
    return Finding(
        id="steps.host_bound",
        analyzer=NAME,
        severity=severity,
        title=f"The GPU waits on the host: a step takes {host:,.1f} ms on the host but {gpu:,.1f} ms on the GPU "
        f"({ratio:.2f}x)",
        subjects=tuple(subjects),
        evidence=(
            Evidence("step_host_time_median_ms", host, "ms"),
            Evidence("step_gpu_time_median_ms", gpu, "ms"),
            Evidence("step_host_over_gpu_ratio", ratio, "x", th.steps.host_bound_ratio),
        ),
        cost_share=1.0 - 1.0 / ratio,
        recommendation="Find what the host does between GPU work: load data with DataLoader(num_workers>0, "
        "pin_memory=True, persistent_workers=True) and prefetch the next batch; remove per-step host "
        "syncs (loss.item(), .cpu(), printing tensors; see the sync section); for many small kernels "
        "use torch.compile or CUDA graphs to cut Python and launch overhead.",
        section=SECTION,
    )


def _rank_subject(rank, ratio: float, figures: dict, th: Thresholds) -> Subject:
    """A rank of a host-bound finding, its severity by its own host-over-device ratio."""
    severity = Severity.of(ratio, warning=th.steps.host_bound_ratio, critical=th.steps.host_bound_critical_ratio)
    return Subject("rank", f"rank {int(rank)}", severity=severity, figures=figures)


def _jit_host_bound(profile: Profile, derived: Derived, th: Thresholds) -> Finding | None:
    """A JAX run's host-bound steps from light mode's samples alone (derive.jit_dispatch_samples), for the ranks
    without a trace: with one, the step budget's launch-bound finding says it with the traced sites and the samples
    beside them. JAX has no CUDA events: the samples' readiness is the device's bound."""
    subjects, worst = [], None
    budget_ranks = derived.step_budget().ranks
    for rank, meta in budget_ranks.items():
        samples = meta.get("jit_dispatch")
        if not samples or samples["ready_ms"] is None or rank in profile.traces:
            continue
        ratio = samples["median_step_ms"] / samples["ready_ms"] if samples["ready_ms"] > 0 else None
        if ratio is None or ratio < th.steps.host_bound_ratio:
            continue
        marks = run_marks_of(profile, rank)
        figures = {
            "host_median_ms": samples["median_step_ms"],
            "sampled_ready_ms": samples["ready_ms"],
            "sampled_dispatch_ms": samples["dispatch_ms"],
            "sampled_steps": samples["samples"],
            "host_over_device_ratio": ratio,
        }
        subjects.append(_rank_subject(rank, ratio, figures, th))
        if worst is None or ratio > worst[0]:
            worst = (ratio, samples, marks.get("jit_step_name"))
    if worst is None:
        return None
    ratio, samples, name = worst
    return Finding(
        id="steps.host_bound",
        analyzer=NAME,
        severity=Severity.of(ratio, critical=th.steps.host_bound_critical_ratio, otherwise=Severity.WARNING),
        title=f"The device waits on the host: a step takes {ms_human(samples['median_step_ms'])}, and its device "
        f"work at most {ms_human(samples['ready_ms'])} ({ratio:.2f}x), in steps light mode sampled",
        subjects=tuple(subjects),
        evidence=(
            Evidence("step_host_time_median_ms", samples["median_step_ms"], "ms"),
            Evidence("sampled_ready_median_ms", samples["ready_ms"], "ms"),
            Evidence("sampled_dispatch_median_ms", samples["dispatch_ms"], "ms"),
            Evidence("step_host_over_device_ratio", ratio, "x", th.steps.host_bound_ratio),
        ),
        cost_share=1.0 - 1.0 / ratio,
        recommendation=f"{jit_sentence(samples, name)} {jax_dispatch.FIX}",
        section=SECTION,
    )


def _unstable(
    steps: pd.DataFrame,
    measured: pd.DataFrame,
    th: Thresholds,
    work: dict[int, pd.DataFrame] | None = None,
    own_code: dict[int, pd.DataFrame | None] | None = None,
    waited_words: str = "",
) -> Finding | None:
    step_ms = measured["step_ms"].dropna()
    median = float(step_ms.median())
    if median <= 0:
        return None
    p10, p90 = (float(v) for v in step_ms.quantile([0.1, 0.9]))
    spread_pct = 100.0 * (p90 - p10) / median
    outliers = measured[measured["outlier"]]
    excess_ms = float((step_ms - median).clip(lower=0).sum())
    cost = excess_ms / float(step_ms.sum())
    subjects = tuple(
        Subject(
            "step",
            f"step {int(r.step)}" + (f" (rank {int(r.rank)})" if steps["rank"].nunique() > 1 else ""),
            figures={
                "rank": int(r.rank),
                "step": int(r.step),
                "step_ms": float(r.step_ms),
                "times_median": float(r.step_ms / median),
            },
        )
        for r in outliers.sort_values("step_ms", ascending=False).head(MAX_OUTLIER_SUBJECTS).itertuples()
    )
    slowed, queued_share, slowed_words = own_code_words(own_code, measured[measured["step_ms"] > median], th)
    slowed_words += waited_words
    evidence = (
        Evidence("step_time_spread_pct", spread_pct, "%", th.steps.unstable_spread_pct),
        *((Evidence("steps_slowed_in_own_code", float(slowed), "steps"),) if slowed else ()),
        *((Evidence("slowed_steps_run_queue_pct", 100.0 * queued_share, "%"),) if queued_share is not None else ()),
        Evidence("step_time_median_ms", median, "ms"),
        Evidence("step_time_p10_ms", p10, "ms"),
        Evidence("step_time_p90_ms", p90, "ms"),
        Evidence("step_outlier_count", float(len(outliers)), "steps"),
        Evidence("step_outlier_factor", th.steps.outlier_factor, "x"),  # "over 1.5x the median"
    )
    if spread_pct >= th.steps.unstable_spread_pct:
        severity = Severity.of(spread_pct, critical=th.steps.unstable_critical_spread_pct, otherwise=Severity.WARNING)
        return Finding(
            id="steps.unstable",
            analyzer=NAME,
            severity=severity,
            title=f"Step time varies widely: p10 {ms_human(p10)}, p90 {ms_human(p90)} around a median of {ms_human(median)}",
            subjects=subjects,
            evidence=evidence,
            cost_share=cost,
            recommendation=slowed_words
            + "Steady training steps take the same time. Look for varying input shapes (pad or bucket "
            "sequence lengths; with torch.compile, mark dynamic dims), periodic work inside the loop "
            "(evaluation, checkpointing, logging), a data loader that cannot keep up, or other jobs "
            "on the GPU.",
            section=SECTION,
        )
    if len(outliers):
        ran = outlier_work_words(work, outliers)
        return Finding(
            id="steps.outliers",
            analyzer=NAME,
            severity=Severity.INFO,
            title=f"{n_things(len(outliers), 'step')} took over {th.steps.outlier_factor:g}x the median step time "
            f"({ms_human(median)})",
            subjects=subjects,
            evidence=evidence,
            cost_share=float((outliers["step_ms"] - median).clip(lower=0).sum()) / float(step_ms.sum()),
            recommendation=slowed_words
            + (f"{ran} " if ran else "")
            + "Occasional slow steps are usually periodic work (evaluation, checkpointing, logging) or "
            "a data-loader stall; move it out of the timed loop or make it asynchronous.",
            section=SECTION,
        )
    return None


def own_code_words(
    own_code: dict[int, pd.DataFrame | None] | None, slow: pd.DataFrame, th: Thresholds
) -> tuple[int, float | None, str]:
    """(how many of the ``slow`` steps light mode sampled in the loop's ordinary code, the share of their sampled time
    the main thread waited for a CPU (None where unread), the words that say so): no work of their own ran in them
    (diagnose/derive/step_own_code.py). A Lightning loop on a busy 2-core host read "the host runs
    _AutomaticOptimization.run()" for them as if it were extra work; its main thread had waited on the run queue."""
    said, queued_ms, sampled_ms = [], 0.0, 0.0
    for rank, records in (own_code or {}).items():
        if records is None or not len(records):
            continue
        steps = set(slow.loc[slow["rank"] == rank, "step"].astype(int))
        mine = records[records["step"].astype(int).isin(steps)]
        said += [(int(rank), int(s)) for s in sorted(set(mine["step"].astype(int)))]
        if "run_queue_ms" in mine and "sampled_ms" in mine:
            read = mine.dropna(subset=["run_queue_ms", "sampled_ms"])
            # the kernel adds a wait when the thread next runs, so a wait begun before the first sample can make a
            # step's reading exceed its sampled time: at most all of it
            queued_ms += float(read["run_queue_ms"].clip(upper=read["sampled_ms"]).sum())
            sampled_ms += float(read["sampled_ms"].sum())
    if not said:
        return 0, None, ""
    ranks = {rank for rank, _ in said}
    named = ", ".join(f"{step}" if len(ranks) == 1 else f"{step} (rank {rank})" for rank, step in said[:6])
    more = ", …" if len(said) > 6 else ""
    words = (
        f"Light mode sampled {n_things(len(said), 'slow step')} (step{'s' if len(said) > 1 else ''} {named}{more}) at "
        "the loop lines every step runs: no work of their own ran in them, the step's own code ran slower. "
    )
    share = queued_ms / sampled_ms if sampled_ms > 0 else None
    if share is None:
        words += (
            "That is most often the host's CPUs shared with other processes (other jobs, data-loader workers, a busy "
            "CI machine): check the host's load while it trains. "
        )
    elif 100 * share >= th.steps.busy_host_run_queue_pct:
        words += (
            f"Their main thread waited for a CPU {100 * share:.0f} % of the {ms_human(sampled_ms)} sampled in them "
            "(Linux's run queue): other processes held the host's CPUs (other jobs, data-loader workers, a busy CI "
            "machine). Check the host's load while it trains, or give the job its own cores. "
        )
    else:
        words += (
            f"Their main thread waited for a CPU only {100 * share:.0f} % of the {ms_human(sampled_ms)} sampled in "
            "them (Linux's run queue), so no other process held it off: the time went to the step's own work running "
            "slower (a larger batch, device work queued earlier draining, memory paging). "
        )
    return len(said), share, words


# light mode's work records as the outliers' words say them
OUTLIER_WORK_WORDS = {
    WORK_EVALUATION: "an evaluation (model.eval())",
    WORK_CHECKPOINT: "checkpoint saving (torch.save)",
    WORK_COMPILATION: "compilation",
    WORK_NEW_SHAPE: "the first batch of a new input shape",
    WORK_HOST_CODE: "Python sampled in the long step",
    WORK_GPUDIAG: "gpudiag's own work",
}
MAX_OUTLIERS_SAID = 3


def outlier_work_words(work: dict[int, pd.DataFrame] | None, outliers: pd.DataFrame) -> str | None:
    """``Step 19 (7.57 s) ran an evaluation (model.eval()) at trainer.py:3120 (your line train.py:90) for 3.31 s.``:
    for the slowest outliers, the work light mode recorded in them (the most of it by time), or None where it
    recorded none. Occasional slow steps are most often that work; naming it says which line to move."""
    if not work:
        return None
    said = []
    for r in outliers.sort_values("step_ms", ascending=False).head(MAX_OUTLIERS_SAID).itertuples():
        records = work.get(int(r.rank))
        if records is None or not len(records):
            continue
        mine = records[(records["step"] == r.step) & records["what"].isin(list(OUTLIER_WORK_WORDS))]
        if not len(mine):
            continue
        by_what = mine.groupby("what", sort=False)["ms"].sum().sort_values(ascending=False)
        what, ms = str(by_what.index[0]), float(by_what.iloc[0])
        top = mine[mine["what"] == what].sort_values("ms", ascending=False).iloc[0]
        location, library = top.get("location"), top.get("library_location")
        where = ""
        if isinstance(library, str) and library:
            where = f" at {short_location(library)}" + (
                f" (your line {short_location(location)})" if isinstance(location, str) and location else ""
            )
        elif isinstance(location, str) and location:
            where = f" at {short_location(location)}"
        name = top.get("name")
        named = f" ({name})" if what in (WORK_GPUDIAG, WORK_COMPILATION) and isinstance(name, str) and name else ""
        rank = f" on rank {int(r.rank)}" if outliers["rank"].nunique() > 1 else ""
        said.append(
            f"Step {int(r.step)}{rank} ({ms_human(float(r.step_ms))}) ran {OUTLIER_WORK_WORDS[what]}{named}{where} "
            f"for {ms_human(ms)}."
        )
    return " ".join(said) or None


def cpu_wait_sentence(profile: Profile, th: Thresholds) -> str:
    """What steps.unstable and steps.outliers say of the loop's CPU wait where steps.cpu_wait is made: a step that
    waits runs slower. Without it a DataLoader-fed CPU loop on two busy cores (examples/loader_workers.py) read only
    the generic advice (input shapes, periodic work) above a 9.3 % CPU wait."""
    waits = cpu_wait_by_rank(profile)
    if not waits:
        return ""
    waited_ms, span_ms = max(waits.values(), key=lambda wait: wait[0] / wait[1])
    pct = 100.0 * waited_ms / span_ms
    if pct < th.steps.cpu_wait_min_pct:
        return ""
    return (
        f"The loop's thread waited for a CPU {pct:.1f} % of the run (steps.cpu_wait): a step that waits runs that much "
        "slower, so part of this is other work on the CPUs, not the step's own. "
    )


def used_gpu(profile: Profile, steps: pd.DataFrame) -> bool:
    """Whether the run is seen using a GPU: a step with a GPU time (CUDA events), GPU work in a trace (JAX's, which
    has no step GPU time) or ncu's kernels. NVML samples do not say it: light mode samples a GPU host's GPUs while a
    script runs on its CPU alone (``--device cpu``)."""
    timed = "gpu_ms" in steps and bool(pd.to_numeric(steps["gpu_ms"], errors="coerce").notna().any())
    traced = any(len(getattr(trace, "gpu", ())) for trace in profile.traces.values())
    return timed or traced or bool(len(profile.kernels))


def _cpu_wait(profile: Profile, th: Thresholds, gpu: bool = True) -> Finding | None:
    """``steps.cpu_wait``: the training loop's thread, runnable, waited for a CPU ``cpu_wait_min_pct`` of the time
    from its first step to its end (its rank's worst). No step clock shows it, only slower steps: a host whose CPUs
    DataLoader workers, their intra-op threads or other jobs hold. tests/launch/scripts/busy_host.py (the loop at
    nice 19, two spinners on its core a third of each second) is the real case its test runs."""
    waits = cpu_wait_by_rank(profile)
    if not waits:
        return None
    rank, (waited_ms, span_ms) = max(waits.items(), key=lambda kv: kv[1][0] / kv[1][1])
    pct = 100.0 * waited_ms / span_ms
    severity = Severity.of(
        pct, warning=th.steps.cpu_wait_warning_pct, critical=th.steps.cpu_wait_critical_pct, otherwise=Severity.INFO
    )
    if pct < th.steps.cpu_wait_min_pct:
        return None
    on_rank = f" on rank {rank}" if len(waits) > 1 else ""
    marks = run_marks_of(profile, rank)
    allowed, cpus, threads = marks.get("cpus_allowed"), marks.get("cpus"), marks.get("threads")
    pinned = allowed is not None and cpus is not None and allowed < cpus
    if pinned:  # the host had CPUs to spare: the process's own threads took turns on the few it was given
        why = (
            f"the process could run on only {n_things(allowed, 'CPU')} of the host's {cpus} (its CPU affinity: "
            "taskset, a container's cpuset, the job scheduler's CPU request), where its own threads"
            f"{f' (up to {threads})' if threads else ''} and the child processes that inherit it (DataLoader "
            "workers) took turns with the loop"
        )
    else:
        why = "the host's CPUs were busy with other work"
    advice = (
        "Give the process more CPUs (taskset -c over more cores, a larger cpuset or CPU request), or run fewer "
        "threads on the ones it has: torch.set_num_threads() and OMP_NUM_THREADS at or below them, DataLoader "
        "workers with torch.set_num_threads(1) in worker_init_fn. "
        if pinned
        else ""
    )
    return Finding(
        id="steps.cpu_wait",
        analyzer=NAME,
        severity=severity,
        title=f"The training loop's thread{on_rank} waited for a CPU {pct:.1f} % of the time from its first step to "
        f"its end ({ms_human(waited_ms)} of {ms_human(span_ms)}, Linux's run queue): {why}",
        subjects=tuple(
            Subject("rank", f"rank {r}", figures={"cpu_wait_ms": w, "span_ms": t, "cpu_wait_pct": 100.0 * w / t})
            for r, (w, t) in sorted(waits.items())
        ),
        evidence=(
            Evidence("cpu_wait_pct", pct, "%", th.steps.cpu_wait_min_pct),
            Evidence("cpu_wait_ms", waited_ms, "ms"),
            Evidence("cpu_wait_span_ms", span_ms, "ms"),
            *((Evidence("cpus_allowed", allowed, "count"), Evidence("cpus", cpus, "count")) if pinned else ()),
            *((Evidence("threads", threads, "count"),) if pinned and threads else ()),
        ),
        cost_share=waited_ms / span_ms,
        recommendation="The loop was ready to run and no CPU was free: every step that waited was that much slower"
        + (", and the GPU waited with it" if gpu else "")
        + ". "
        + advice
        + "Count what shares the "
        + ("process's" if pinned else "host's")
        + " cores: DataLoader workers (each with torch's "
        "intra-op threads unless torch.set_num_threads(1) runs in worker_init_fn), OMP_NUM_THREADS or MKL threads "
        "set above the cores, other processes or jobs on the machine. Keep workers plus their threads at or below "
        "the cores the job has, and give the training process its own cores (taskset, the scheduler's CPU request).",
        section=SECTION,
    )


def _own_overhead(summary: dict, th: Thresholds) -> Finding | None:
    """gpudiag's own step-boundary work, when it is a noticeable part of a step (very short steps)."""
    pct = summary.get("gpudiag_overhead_pct")
    if pct is None or not pct >= th.steps.own_overhead_pct:
        return None
    own_us, host_ms = summary["gpudiag_overhead_mean_us"], summary["step_host_time_median_ms"]
    return Finding(
        id="steps.own_overhead",
        analyzer=NAME,
        severity=Severity.INFO,
        title=f"gpudiag's own work at each step boundary is {pct:.1f} % of a step ({own_us:,.0f} µs of "
        f"{host_ms:,.2f} ms): host step times here read about that much high",
        evidence=(
            Evidence("gpudiag_overhead_mean_us", own_us, "µs"),
            Evidence("gpudiag_overhead_pct", pct, "%", th.steps.own_overhead_pct),
            Evidence("step_host_time_median_ms", host_ms, "ms"),
        ),
        cost_share=pct / 100.0,
        recommendation="Read host step times as this much less. Steps this short are dominated by fixed per-step "
        "costs (Python, launches, syncs) of the script too; to make gpudiag record less per step, "
        "raise --memory-stats-interval-ms.",
        section=SECTION,
    )
