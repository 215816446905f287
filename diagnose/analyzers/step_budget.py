"""Why a step is slow: the step-time budget judged, a finding per diagnosis.

The budget, worked out once per report by ``Derived.step_budget()`` (diagnose.derive.step_budget_table), splits
each rank's median steady step (and its slow and traced steps) into GPU busy and GPU idle by cause, keeps warm-up,
gpudiag's trace window, later compiles and new input shapes apart, and finds the slow steps that recur
(docs/step-budget.md). This module writes its tables and summary and hands each diagnosis to its judge
(diagnose/judges/step_budget/): a cause that holds a share of the median step (``causes``: input, sync,
launch_bound, allocator, unexplained), recurring slow steps (``periodic``), compiles after warm-up
(``compilation``), new input shapes (``new_shape``); their findings come in that order.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from diagnose.derive import capture_advice
from diagnose.derive.derived import Derived
from diagnose.derive.jit_dispatch_samples import sentence as jit_sentence
from diagnose.findings import Result, not_measured
from diagnose.ingest.profile_data import Profile, run_marks_of
from diagnose.judges.host_sites_words import with_host_sites
from diagnose.judges.step_budget.causes import cause_findings
from diagnose.judges.step_budget.common import NAME, SECTION  # every judge's finding carries them
from diagnose.judges.step_budget.compilation import compile_findings
from diagnose.judges.step_budget.input_stalls import stall_findings
from diagnose.judges.step_budget.new_shape import new_shape_findings
from diagnose.judges.step_budget.periodic import periodic_findings
from diagnose.metrics import LOWER, NEUTRAL, Metric, rank_key
from diagnose.thresholds import Thresholds
from parsers.run_records import EVENTS

ORDER = 45
TITLE = "Step-time budget"
JUDGES = "the step-time budget"
COST_BASIS = "the median step"  # what a finding's cost share is a share of, unless COST_BASIS_BY_ID says otherwise
COST_BASIS_BY_ID = {
    "step_budget.periodic": "the steady steps' time",
    "step_budget.input_stalls": "the steady steps' time",
    "step_budget.compilation": "the time of the steps after warm-up",
    "step_budget.new_shape": "the time of the steps after warm-up",
}
THRESHOLDS = ("step_budget", "steps", "sync", "run_budget")  # the Thresholds groups the budget and its judges read
SUMMARY_METRICS = (  # what analyze() writes into Result.summary, plain for the lowest rank, else rank<N>.<key>
    Metric("step_budget_step_ms", "Median steady step (budget)", "ms", LOWER, 0.001),
    Metric("step_budget_{part}_ms", "Median step budget: {part}", "ms", NEUTRAL, 0.001),
    Metric("step_budget_warmup_steps", "Warm-up steps kept apart", "count", NEUTRAL, 1),
    Metric("step_budget_warmup_ms", "Warm-up steps' total time", "ms", LOWER, 0.001),
    Metric("step_budget_compile_steps", "Steps after warm-up that compiled, kept apart", "count", LOWER, 1),
    Metric("step_budget_compile_ms", "Compilation after warm-up, in all", "ms", LOWER, 0.001),
    Metric("step_budget_new_shape_steps", "Steps after warm-up with a new input shape", "count", LOWER, 1),
    Metric("step_budget_instrumented_steps", "Steps inside gpudiag's trace window", "count", NEUTRAL, 1),
    Metric("step_budget_slow_steps", "Slow steady steps", "count", LOWER, 1),
    Metric("step_budget_period_steps", "Period of recurring slow steps", "count", NEUTRAL, 1),
)


FINDING_IDS = (  # every id this analyzer can produce: `gpudiag check --ignore` validates against them
    "step_budget.allocator",
    "step_budget.compilation",
    "step_budget.input",
    "step_budget.input_stalls",
    "step_budget.launch_bound",
    "step_budget.new_shape",
    "step_budget.not_measured",
    "step_budget.periodic",
    "step_budget.sync",
    "step_budget.unexplained",
)
# leading the verdict, its finding names a cause of the median step: the page shows that step's budget bar
SHOWS_STEP_BUDGET = True
# its findings that name a cause the user can fix: they rank ahead of the symptoms other analyzers see (the step
# budget's launch-bound and sync parts name the idle finding's causes on the median steady step, the basis the budget
# and the verdict share, where the idle finding covers the whole traced span: issue 28)
CAUSE_FINDING_IDS = (
    "step_budget.input",
    "step_budget.input_stalls",
    "step_budget.periodic",
    "step_budget.allocator",
    "step_budget.compilation",
    "step_budget.new_shape",
    "step_budget.launch_bound",
    "step_budget.sync",
)


KEPT_APART_KEYS = (  # meta keys that go into the summary as step_budget_<key>
    "warmup_steps",
    "warmup_ms",
    "compile_steps",
    "compile_ms",
    "new_shape_steps",
    "instrumented_steps",
    "slow_steps",
    "period_steps",
)


def analyze(profile: Profile, derived: Derived, th: Thresholds = Thresholds()) -> Result:
    result = Result(NAME)
    budget = derived.step_budget()
    if not budget.ranks:
        result.findings.append(
            not_measured(
                NAME,
                "The step-time budget",
                capture_advice.advice(
                    profile,
                    "It needs per-step timings: run the script under `gpudiag profile`, or pass a CSV/JSON of step "
                    "timings (docs/step-timings.md).",
                    f"It needs per-step timings. {capture_advice.STEP_RECORDS}",
                    EVENTS.prefix,
                ),
                SECTION,
            )
        )
        return result
    under_ncu = capture_advice.steps_under_ncu(profile, derived.step_table()["step_ms"])
    if under_ncu:  # ncu's step times, not the script's: no budget of them (issue 32)
        result.findings.append(not_measured(NAME, "The step-time budget", under_ncu, SECTION))
        return result
    result.summary.update(summary_of(budget.ranks, budget.budget))
    result.meta["ranks"] = budget.ranks
    if not len(budget.budget):
        result.findings.append(
            not_measured(
                NAME,
                "The step-time budget",
                "Every step was warm-up or inside gpudiag's trace window: run more steps.",
                SECTION,
            )
        )
        return result
    result.tables["budget"] = budget.budget
    result.tables["slow_steps"] = budget.slow_steps
    if budget.traced_steps is not None:
        result.tables["traced_steps"] = budget.traced_steps
    meta, calls = budget.ranks, budget.sync_calls
    causes = cause_findings(profile, budget.budget, meta, calls, budget.traced_by_rank, th)
    causes = [with_dispatch_samples(with_launch_sites(f, derived), derived) for f in causes]
    result.findings.extend(causes)
    median_input = {int(s.name) for f in causes if f.id == "step_budget.input" for s in f.subjects if s.kind == "rank"}
    result.findings.extend(stall_findings(meta, median_input, th))
    named_in_run = {  # the named work the run budget's own findings name: the periodic judge does not name it again
        rank: {
            part
            for part in ("evaluation", "checkpoint")
            if run.part_ms(part) >= th.run_budget.named_work_min_share * run.wall_ms
        }
        for rank, run in derived.run_budget().items()
    }
    result.findings.extend(periodic_findings(meta, calls, th, named_in_run))
    result.findings.extend(compile_findings(meta, th))
    result.findings.extend(new_shape_findings(meta, th))
    return result


def summary_of(ranks: dict[int, dict], budget: pd.DataFrame) -> dict[str, float]:
    """SUMMARY_METRICS of each rank with a budget, in rank order: plain for the lowest rank with step rows, else
    ``rank<N>.<key>``."""
    summary: dict[str, float] = {}
    lowest = min(ranks)
    median_rows = budget[budget["column"] == "median step"] if len(budget) else budget
    for rank, rank_meta in ranks.items():
        median = median_rows[median_rows["rank"] == rank] if len(median_rows) else median_rows
        if not len(median):  # no steady step: no budget
            continue
        summary[rank_key(rank, lowest, "step_budget_step_ms")] = float(median["wall_ms"].iloc[0])
        for r in median.itertuples():
            if np.isfinite(r.ms):
                summary[rank_key(rank, lowest, f"step_budget_{r.part}_ms")] = float(r.ms)
        for k in KEPT_APART_KEYS:
            if rank_meta.get(k) is not None:
                summary[rank_key(rank, lowest, f"step_budget_{k}")] = float(rank_meta[k])
    return summary


def with_launch_sites(finding, derived: Derived):
    """The launch-bound share with the Python code its rank's host ran while the GPU waited (the idle analyzer names
    the same sites): the host's work is the cause, the code is where it is. In a JAX trace the site holding most of
    that idle is named in the title too: its advice is generic (dispatch), the site is the line to change; a torch
    trace's sites stay in the advice (a loop in main() would name main() there)."""
    rank = launch_bound_rank(finding)
    if rank is None or rank not in derived.profile.traces:
        return finding
    jax = getattr(derived.profile.trace_header(rank), "format", None) == "perfetto"
    marks = run_marks_of(derived.profile, rank)
    loop = (marks.get("jit_step_name"), marks.get("jit_step_location")) if marks.get("jit_step_name") else None
    return with_host_sites(finding, derived.host_sites(rank), in_title=jax, loop=loop)


def launch_bound_rank(finding) -> int | None:
    """The one rank a ``step_budget.launch_bound`` finding is about; None for another finding or several ranks."""
    if finding.id != "step_budget.launch_bound":
        return None
    ranks = [int(s.name) for s in finding.subjects if s.kind == "rank" and str(s.name).isdigit()]
    return ranks[0] if len(ranks) == 1 else None


def with_dispatch_samples(finding, derived: Derived):
    """A JAX rank's launch-bound share with what light mode sampled in untraced steps (derive.jit_dispatch_samples):
    the host's dispatch of the step function and the time until its outputs were ready, so the traced steps' share
    (slowed by the profiler) has the script's own steps beside it."""
    rank = launch_bound_rank(finding)
    samples = derived.step_budget().ranks.get(rank, {}).get("jit_dispatch") if rank is not None else None
    if not samples:
        return finding
    step_name = run_marks_of(derived.profile, rank).get("jit_step_name")
    subjects = tuple(
        replace(s, figures={**s.figures, **sample_figures(samples)}) if i == 0 else s
        for i, s in enumerate(finding.subjects)
    )
    return replace(
        finding,
        subjects=subjects,
        recommendation=f"{jit_sentence(samples, step_name)} {finding.recommendation}",
    )


def sample_figures(samples: dict) -> dict:
    """The sampled figures a finding's subject carries (plain numbers)."""
    keys = ("samples", "dispatch_ms", "ready_ms", "device_at_most_share")
    return {f"sampled_{k}": samples[k] for k in keys if samples.get(k) is not None}
