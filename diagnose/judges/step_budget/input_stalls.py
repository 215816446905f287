"""``step_budget.input_stalls``: steps that stall for input every few steps, costed by the summed wait.

The median step's input part (``step_budget.input``, causes.py) sees a wait every step has; a DataLoader whose
workers cannot keep up makes most steps wait ~0 and one in num_workers wait long, so the median shows none of it
(issue 30: 2.8 s of a 46.7 s ResNet run, median wait 0.17 ms). This judge costs input by its sum over the steady
steps (diagnose.derive.input_stalls) and speaks when the median did not: the two never name the same wait twice.

The workers are named as behind when the stalls recur every num_workers steps, in one of two shapes: bursts (most
stalls on one step of the cycle: "N of the M stalls come every W steps, one per DataLoader worker"), or a cycle whose
wait is spread over several of its steps (workers that drifted apart, each with its own slot: "the waits repeat every
W steps, one slot per DataLoader worker", with the R² of the waits on their slot as evidence); otherwise the advice is
the generic one for slow batches.
"""

from __future__ import annotations

from diagnose.findings import Evidence, Finding, Subject
from diagnose.formatting import ms_human, n_things
from diagnose.judges.step_budget.common import NAME, SECTION, severity_of
from diagnose.thresholds import Thresholds

WORKERS_FIX = (
    "Use about {needed} workers "
    "(DataLoader(num_workers={needed}), as many as the host's cores allow), keep them across epochs "
    "(persistent_workers=True), and make each item cheaper: decode smaller images, move augmentation onto the GPU "
    "(torchvision.transforms.v2 on CUDA tensors, DALI). prefetch_factor (now {prefetch}) only evens out the waits: "
    "it does not make the workers faster."
)
WORKERS_BEHIND_ADVICE = (
    "The DataLoader's {workers} workers each take about {batch} to make a batch, while a step takes about {step}: "
    "they hand out {workers} batches at once and the loop then waits for the next round. " + WORKERS_FIX
)
WORKERS_CYCLE_ADVICE = (
    "The DataLoader's {workers} workers each take about {batch} to make a batch, while a step takes about {step}: "
    "the loop takes its batches from the workers in turn, so every {workers} steps it comes back to the same worker "
    "and waits wherever that worker has not finished. " + WORKERS_FIX
)
STALL_ADVICE = (
    "Some steps wait much longer for their batch than the others: find what those batches cost (a file opened, a "
    "shard read, a slow item) and prefetch it, with more DataLoader workers, persistent_workers=True and a larger "
    "prefetch_factor, or a background thread that keeps the next batches ready."
)


def stall_findings(meta: dict, median_input_found: set[int], th: Thresholds) -> list[Finding]:
    """One finding per rank whose summed input wait holds ``cause_min_share`` of its steady steps' time and whose
    median step did not carry it (``median_input_found``: the ranks step_budget.input already named)."""
    findings = []
    for rank, m in sorted(meta.items()):
        stalls = m.get("input_stalls")
        if not stalls or rank in median_input_found or not stalls["stall_steps"]:
            continue
        share = stalls["share"]
        if not share >= th.step_budget.cause_min_share:
            continue
        n = len(stalls["stall_steps"])
        rank_words = f" on rank {rank}" if len(meta) > 1 else ""
        title = (
            f"Steps wait {ms_human(stalls['input_ms'])} for input, {100 * share:.1f} % of the "
            f"{ms_human(stalls['steps_ms'])} of {n_things(stalls['steps'], 'steady step')}{rank_words}: "
            f"{n_things(n, 'stall')} of {ms_human(stalls['stall_min_ms'])}–{ms_human(stalls['stall_max_ms'])} "
            f"hold {ms_human(stalls['stall_ms'])}, while the median wait is {ms_human(stalls['median_input_ms'])}"
        )
        loader = stalls.get("loader") or {}
        evidence = [
            Evidence("step_budget_input_total_ms", stalls["input_ms"], "ms"),
            Evidence("step_budget_input_steps_ms", stalls["steps_ms"], "ms"),
            Evidence("step_budget_input_total_share", share, "share", th.step_budget.cause_min_share),
            Evidence("step_budget_input_steps", float(stalls["steps"]), "count"),
            Evidence("step_budget_input_stalls", float(n), "count"),
            Evidence("step_budget_input_stall_ms", stalls["stall_ms"], "ms"),
            Evidence("step_budget_input_stall_min_ms", stalls["stall_min_ms"], "ms"),
            Evidence("step_budget_input_stall_max_ms", stalls["stall_max_ms"], "ms"),
            Evidence("step_budget_input_median_ms", stalls["median_input_ms"], "ms"),
        ]
        if stalls.get("every"):
            workers, on = stalls["every"], stalls["on_period"]
            batch_ms = stalls["batch_ms_per_worker"]
            step_ms = m.get("median_step_ms") or 0.0
            needed = max(workers + 1, int(-(-batch_ms // step_ms))) if batch_ms and step_ms > 0 else workers * 2
            if stalls.get("every_by") == "cycle":
                title += (
                    f"; the waits repeat every {workers} steps, one slot per DataLoader worker "
                    f"(num_workers={workers}; the step's slot explains {100 * stalls['cycle_r2']:.0f} % of the "
                    "waits' variance): the workers cannot keep up"
                )
                advice = WORKERS_CYCLE_ADVICE
            else:
                title += (
                    f"; {on} of the {n} stalls come every {workers} steps, one per DataLoader worker "
                    f"(num_workers={workers}): the workers cannot keep up"
                )
                advice = WORKERS_BEHIND_ADVICE
            fix = advice.format(
                workers=workers,
                batch=ms_human(batch_ms),
                step=ms_human(step_ms),
                needed=needed,
                prefetch=loader.get("prefetch_factor"),
            )
            evidence += [
                Evidence("step_budget_input_stall_every", float(workers), "steps"),
                Evidence("step_budget_input_stalls_on_period", float(on), "count"),
                Evidence("step_budget_input_worker_batch_ms", batch_ms, "ms"),
                Evidence("step_budget_step_ms", step_ms, "ms"),
            ]
            if stalls.get("every_by") == "cycle":
                evidence.append(
                    Evidence(
                        "step_budget_input_wait_cycle_r2", stalls["cycle_r2"], "share", th.run_budget.stall_cycle_r2
                    )
                )
            if loader.get("prefetch_factor") is not None:
                evidence.append(Evidence("step_budget_input_prefetch_factor", float(loader["prefetch_factor"]), "x"))
        else:
            fix = STALL_ADVICE
        subjects = [Subject("step", str(s), figures={"rank": rank}) for s in stalls["stall_steps"][:20]]
        if loader.get("location"):
            subjects.insert(
                0,
                Subject(
                    "location",
                    str(loader["location"]),
                    figures={
                        "num_workers": loader.get("num_workers"),
                        "prefetch_factor": loader.get("prefetch_factor"),
                        "batch_size": loader.get("batch_size"),
                    },
                ),
            )
        findings.append(
            Finding(
                id="step_budget.input_stalls",
                analyzer=NAME,
                severity=severity_of(share, th),
                title=title,
                subjects=tuple(subjects),
                evidence=tuple(evidence),
                cost_share=share,
                recommendation=fix,
                section=SECTION,
            )
        )
    return findings
