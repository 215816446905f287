"""GPU idle time per step and why: busy, waiting for the host to launch, held by syncs, launch gaps.

Whole-trace figures follow HTA's temporal breakdown (see :mod:`diagnose.derive.trace_timeline`)
and go to the findings JSON summary per rank: plain keys for the lowest rank
(``gpu_idle_pct``), ``rank<N>.gpu_idle_pct`` for the others; per-stream idle
categories as ``gpu_idle_stream<S>_<category>_pct`` (HTA's idle-time breakdown,
share of that stream's idle time). ``docs/traces.md`` lists every key.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from diagnose.derive import capture_advice, jax_dispatch
from diagnose.derive import trace_timeline as tl
from diagnose.derive import untraced_cost as untraced_cost_module
from diagnose.derive.derived import Derived
from diagnose.derive.host_phases import with_phases
from diagnose.derive.step_gpu_breakdown import step_breakdown
from diagnose.derive.trace_input_wait import input_fetches, input_idle_by_cause
from diagnose.derive.untraced_cost import untraced_cost
from diagnose.findings import Evidence, Finding, Result, Severity, Subject, not_measured
from diagnose.formatting import ms_human
from diagnose.ingest.profile_data import Profile
from diagnose.judges.host_sites_words import with_host_sites
from diagnose.metrics import HIGHER, LOWER, NEUTRAL, Metric, rank_key
from diagnose.thresholds import Thresholds
from parsers.run_records import TRACE

NAME = "idle"
ORDER = 20
SECTION = "section-idle"
TITLE = "GPU idle time"  # its report section's heading
JUDGES = "GPU idle time"  # what "Nothing crossed a threshold: judged ..." names
COST_BASIS = "the traced time"  # what its findings' cost_share is a share of, in the verdict's words
COST_BASIS_BY_ID: dict[str, str] = {}  # no finding's basis differs
# the Thresholds groups it reads (diagnose/thresholds.py); steps and step_budget: the untraced median step its cost
# is put in (Derived.step_budget(), diagnose.derive.untraced_cost)
THRESHOLDS = ("sync", "steps", "step_budget")
SUMMARY_METRICS = (  # what analyze() writes into Result.summary, per rank_key (diagnose.metrics)
    # shares of the trace span; trace timestamps are microseconds (Kineto) or ns (nsys): 0.01 % of a span
    Metric("gpu_idle_pct", "GPU idle", "%", LOWER, 0.01),
    Metric("gpu_compute_pct", "GPU computing (kernels)", "%", HIGHER, 0.01),
    Metric("gpu_non_compute_pct", "GPU in copies and memsets", "%", LOWER, 0.01),
    Metric("gpu_span_ns", "Traced GPU span", "ns", NEUTRAL, 1000),  # Kineto timestamps: 1 us
    # how a stream's idle time splits (host_wait, kernel_wait, other): which way is better depends on the cause
    Metric(
        "gpu_idle_stream{stream}_{category}_pct", "Stream {stream}: {category} share of idle time", "%", NEUTRAL, 0.01
    ),
)
FINDING_IDS = (  # every id this analyzer can produce: `gpudiag check --ignore` validates against them
    "idle.gpu_idle",
    "idle.no_gpu_activity",
    "idle.not_measured",
    "idle.trace_warning",
)
# what the GPU looks like, not why: ranks after a cause of the same severity (diagnose.findings.rank_findings)
SYMPTOM_FINDING_IDS = ("idle.gpu_idle",)

CAUSE_ADVICE = {
    "input": "The GPU waits while the host fetches the next batch: see the step budget's input finding for the "
    "iterator and its share of the step. Prepare batches ahead (DataLoader num_workers, pin_memory, prefetch, or "
    "a background thread for a hand-written iterator) and keep per-batch work off the training thread.",
    "sync": "The GPU sits idle after host synchronisations: see the sync table for the lines that block and "
    "keep values on the GPU (log them every N steps, use non_blocking copies into pinned memory).",
    "host": "The GPU waits for the host to launch work: the step is launch-bound or blocked by CPU work "
    "(data loading, Python overhead). Overlap input loading (DataLoader num_workers, pin_memory, "
    "prefetch), and cut launches with torch.compile or CUDA graphs (see launch statistics).",
    "host_jax": "The GPU waits for the host to dispatch work: each jitted call (or each op run outside jit) is "
    f"dispatched from Python, and the Python between steps runs while the GPU waits. {jax_dispatch.FIX}",
    "other": "Queued work waits on other streams or events: check cross-stream dependencies "
    "(cudaStreamWaitEvent) and collectives that wait for other ranks.",
    "short": "Idle time is made of many short gaps between kernels: fuse small kernels (torch.compile) "
    "or capture the step in a CUDA graph.",
    "unlinked": "The trace does not link kernels to their launch calls (JAX/XLA's traces do not), so it cannot "
    "say why the GPU waited. Run the script under `gpudiag profile`: its step timings measure how long each "
    "step takes on the host and the loop's waits.",
}
# the same for a run folder of `gpudiag profile`, which holds those step timings already (diagnose.derive.capture_advice)
UNLINKED_IN_RUN_FOLDER = (
    "The trace does not link kernels to their launch calls (JAX/XLA's traces do not), so it cannot say why the GPU "
    "waited. This run's step timings (the steps and step budget sections) say how long each step takes on the host, "
    "its slow steps and, where recorded, the loop's waits."
)


def analyze(profile: Profile, derived: Derived, th: Thresholds = Thresholds()) -> Result:
    result = Result(NAME)
    if not derived.traces:
        result.findings.append(
            not_measured(
                NAME,
                "GPU idle time",
                capture_advice.advice(
                    profile,
                    "Profile with `gpudiag profile` or pass a PyTorch profiler / JAX trace to `gpudiag report`.",
                    "This run holds no trace: light mode traces --trace-steps steps (3 by default) from --trace-start; "
                    "an --ncu run and --trace-steps 0 take none.",
                    TRACE.prefix,
                ),
                SECTION,
            )
        )
        return result
    lowest = min(derived.traces)
    breakdown_rows, step_tables, stream_tables = [], [], []
    for rank in sorted(derived.traces):
        part = derived.rank_part(NAME, rank, lambda r=rank: rank_part(profile, derived, r, th, lowest))
        result.findings.extend(
            on_untraced_step(with_host_phases(f, derived, rank), derived, rank) for f in part["findings"]
        )
        if part["breakdown"] is None:
            continue
        result.summary.update({rank_key(rank, lowest, k): v for k, v in part["summary"].items()})
        stream_tables.append(part["streams"])
        breakdown_rows.append(part["breakdown"])
        result.meta.setdefault("step_source", {})[rank] = part["step_source"]
        step_tables.append(part["per_step"])
    if breakdown_rows:
        result.tables["breakdown"] = pd.DataFrame(breakdown_rows)
        result.tables["per_step"] = pd.concat(step_tables, ignore_index=True)
        result.tables["per_stream"] = pd.concat(stream_tables, ignore_index=True)
    return result


def on_untraced_step(finding: Finding, derived: Derived, rank: int) -> Finding:
    """An idle finding of a run with untraced step timings, its cost the idle with a named cause in the median
    untraced step (diagnose.derive.untraced_cost): never more than that step less its GPU busy; its severity no
    higher than that share earns. The traced share stays in its title and evidence."""
    if finding.id != "idle.gpu_idle" or not derived.step_table().shape[0]:
        return finding
    cost = untraced_cost(derived.step_budget(), [rank], whole_idle=True)
    if cost is None:
        return finding
    th = derived.thresholds.sync
    severity = Severity.of(100 * cost.share, warning=th.gpu_idle_warning_pct, critical=th.gpu_idle_critical_pct)
    return replace(
        finding,
        severity=min(finding.severity, severity),  # judged on the steps the script runs, not the profiler's
        cost_share=cost.share,
        cost_basis=untraced_cost_module.BASIS,
        recommendation=f"{cost.words('the idle causes')} {finding.recommendation}",
    )


def with_host_phases(finding: Finding, derived: Derived, rank: int) -> Finding:
    """An idle finding whose main cause is the host, with where the host's typical untraced step goes by phase
    (diagnose.derive.host_phases, from light mode's step records): backward, optimizer, input, forward and the rest."""
    if finding.id != "idle.gpu_idle" or not finding.subjects or finding.subjects[0].figures.get("main_cause") != "host":
        return finding
    phases = derived.step_budget().ranks.get(rank, {}).get("host_phases")
    if not phases:
        return finding
    rank_subject = finding.subjects[0]
    figures = {**rank_subject.figures, **{f"host_{k}": v for k, v in phases.items()}}
    subjects = (replace(rank_subject, figures=figures), *finding.subjects[1:])
    return replace(
        finding,
        subjects=subjects,
        recommendation=with_phases(finding.recommendation, phases),
    )


def rank_part(profile: Profile, derived: Derived, rank: int, th: Thresholds, lowest: int) -> dict:
    """What idle works out from one rank's trace alone: its findings, summary (plain keys), breakdown row, per-step
    and per-stream tables. A cluster read works it out on a worker (diagnose.cluster); ``analyze`` puts the ranks
    together (``lowest`` only names the summary keys there)."""
    trace = tl.analysed(derived.traces[rank])
    part = {"findings": [], "summary": {}, "breakdown": None}
    for w in trace.warnings:
        part["findings"].append(
            Finding(
                id="idle.trace_warning",
                analyzer=NAME,
                severity=Severity.INFO,
                title=f"Trace of rank {rank}: {w}",
                subjects=(Subject("rank", str(rank)),),
                recommendation="Nothing to do unless the numbers look wrong; the trace may come from a newer or "
                "modified profiler.",
                section=SECTION,
            )
        )
    if not len(trace.gpu):
        part["findings"].append(
            Finding(
                id="idle.no_gpu_activity",
                analyzer=NAME,
                severity=Severity.INFO,
                title=f"No GPU activity in the trace of rank {rank}",
                subjects=(Subject("rank", str(rank)),),
                recommendation="The trace holds no kernels, copies or memsets: the run used only the CPU, or the "
                "profiler ran without ProfilerActivity.CUDA.",
                section=SECTION,
            )
        )
        return part
    b = tl.temporal_breakdown(trace.gpu)
    span = b["span_ns"] or float("nan")
    idle_pct, compute_pct, non_pct = (100 * b[k] / span for k in ("idle_ns", "compute_ns", "non_compute_ns"))
    for key, value in (
        ("gpu_idle_pct", idle_pct),
        ("gpu_compute_pct", compute_pct),
        ("gpu_non_compute_pct", non_pct),
        ("gpu_span_ns", b["span_ns"]),
    ):
        part["summary"][key] = float(value)
    streams = tl.stream_idle(trace, th.sync.stream_kernel_wait_us * 1e3)
    for rec in streams.itertuples():
        if not np.isnan(rec.idle_ratio):
            part["summary"][f"gpu_idle_stream{rec.stream}_{rec.idle_category}_pct"] = float(100 * rec.idle_ratio)
    streams.insert(0, "rank", rank)
    part["streams"] = streams

    gaps = tl.gaps(trace, th.sync.kernel_gap_us * 1e3, th.sync.sync_slack_us * 1e3)
    gap_cause, gap_ns = gaps["cause"].to_numpy(), gaps["dur_ns"].to_numpy()
    by_cause = {c: float(gap_ns[gap_cause == c].sum()) for c in tl.GAP_CAUSES}  # int64 ns: exact in any order
    # the host fetching the next batch (a DataLoader range, the loop's iterator) is the cause of that idle,
    # whatever gap it falls in (after a sync, before a launch): said as input, taken out of the others
    fetches = input_fetches(trace, tl.steps(trace), derived.source_dirs())
    input_by_cause = input_idle_by_cause(gaps, fetches) if len(fetches) else {}
    part["breakdown"] = {
        "rank": rank,
        **b,
        "idle_pct": idle_pct,
        "compute_pct": compute_pct,
        "non_compute_pct": non_pct,
        **{f"idle_{c}_ns": by_cause[c] for c in tl.GAP_CAUSES},
        "idle_input_ns": sum(input_by_cause.values()),
    }
    windows = tl.steps(trace)
    part["step_source"] = windows.attrs.get("source")
    per_step = step_breakdown(trace, gaps, windows)
    columns = {"rank": rank, **{c: per_step[c].to_numpy() for c in per_step.columns}}  # one frame, not 8 inserts
    for col in ("step_ns", "busy_ns", *(f"idle_{c}_ns" for c in tl.GAP_CAUSES)):
        columns[col.replace("_ns", "_ms")] = columns[col] / 1e6
    per_step = pd.DataFrame(columns)
    part["per_step"] = per_step

    shown = host_activity_words(trace) if by_cause["unlinked"] > 0 else ""
    by_cause = {c: by_cause[c] - input_by_cause.get(c, 0.0) for c in tl.GAP_CAUSES}
    by_cause["input"] = sum(input_by_cause.values())
    finding = idle_finding(
        rank, b, by_cause, per_step, th, shown, capture_advice.from_run_folder(profile), trace.format == "perfetto"
    )
    if finding is not None and finding.subjects[0].figures.get("main_cause") == "host":
        finding = with_host_sites(finding, derived.host_sites(rank))
    if finding:
        part["findings"].append(finding)
    return part


def idle_finding(
    rank: int,
    b: dict,
    by_cause: dict,
    per_step: pd.DataFrame,
    th: Thresholds,
    shown: str = "",
    run_folder: bool = False,
    jax: bool = False,
) -> Finding | None:
    """``shown``: what the trace shows of the host (host_activity_words), said when the cause cannot be read;
    ``run_folder``: the input is a run folder of ``gpudiag profile``, whose advice never sends the user back to it;
    ``jax``: the trace is XLA's (perfetto), whose host work is dispatching jitted executables."""
    span = b["span_ns"]
    if span <= 0:
        return None
    idle_pct = 100 * b["idle_ns"] / span
    sev = Severity.of(idle_pct, warning=th.sync.gpu_idle_warning_pct, critical=th.sync.gpu_idle_critical_pct)
    main = max(("input", *tl.GAP_CAUSES), key=lambda c: by_cause.get(c, 0.0))
    labels = {
        "input": "waiting for input (the host fetching the next batch)",
        "sync": "held by host syncs",
        "host": "waiting for the host to launch work",
        "short": "in short kernel-to-kernel gaps",
        "other": "waiting on other streams or events",
        "unlinked": "for a cause the trace cannot show",
    }
    evidence = [
        Evidence("gpu_idle_pct", idle_pct, "%", th.sync.gpu_idle_warning_pct),
        Evidence("gpu_compute_pct", 100 * b["compute_ns"] / span, "%"),
        Evidence("gpu_non_compute_pct", 100 * b["non_compute_ns"] / span, "%"),
    ]
    evidence += [Evidence(f"idle_{c}_pct", 100 * by_cause.get(c, 0.0) / span, "%") for c in ("input", *tl.GAP_CAUSES)]
    steps = per_step[per_step["step"] >= 0]
    subjects = [Subject("rank", str(rank), figures={"main_cause": main})]
    if len(steps):
        # the five idlest steps: the same order as sorting the frame by idle (one Series sort, not a frame's)
        idle_ns = steps["step_ns"] - steps["busy_ns"]
        worst = idle_ns.sort_values(ascending=False).head(5).index
        step_no, step_ns, busy_ns = (steps[c].loc[worst].tolist() for c in ("step", "step_ns", "busy_ns"))
        subjects += [
            Subject("step", str(int(n)), figures={"idle_ms": (sn - bn) / 1e6, "step_ms": sn / 1e6})
            for n, sn, bn in zip(step_no, step_ns, busy_ns)
        ]
    title = (
        f"GPU idle {idle_pct:.1f} % of the time on rank {rank}, mostly {labels[main]} "
        f"({100 * by_cause[main] / span:.1f} % of the span)"
    )
    advice = UNLINKED_IN_RUN_FOLDER if main == "unlinked" and run_folder else CAUSE_ADVICE[main]
    if main == "host" and jax:  # XLA's trace: the host dispatches jitted executables, no torch launch to cut
        advice = CAUSE_ADVICE["host_jax"]
    if main == "unlinked":  # say plainly what cannot be attributed, and what the trace does show
        title = (
            f"GPU idle {idle_pct:.1f} % of the time on rank {rank}; the trace links no kernel to its launch, so "
            f"{100 * by_cause[main] / span:.1f} % of the span cannot be attributed to a cause"
        )
        if shown:
            advice = f"What the trace shows: {shown}. {advice}"
    return Finding(
        id="idle.gpu_idle",
        analyzer=NAME,
        severity=sev,
        title=title,
        subjects=tuple(subjects),
        evidence=tuple(evidence),
        cost_share=b["idle_ns"] / span,
        recommendation=advice,
        section=SECTION,
    )


def host_activity_words(trace) -> str:
    """What a trace without launch links still shows of the host: JAX dispatches and host transfers."""
    words = []
    ops = trace.cpu_ops
    if len(ops):
        names = ops["name"].astype(str)
        is_pjit = names.str.startswith("PjitFunction(")
        if is_pjit.any():  # the longest-dispatched first: the step function, not jax.random's helpers
            pjit = (
                ops[is_pjit].groupby(names[is_pjit])["dur_ns"].agg(["size", "sum"]).sort_values("sum", ascending=False)
            )
            top = ", ".join(
                f"{name} {int(r['size']):,}x, {ms_human(r['sum'] / 1e6)}" for name, r in pjit.head(3).iterrows()
            )
            words.append(f"{int(pjit['size'].sum()):,} jitted dispatches on the host ({top})")
    gpu = trace.gpu
    if len(gpu) and "name" in gpu:
        copies = gpu[(gpu["kind"] == "memcpy").to_numpy(dtype=bool, na_value=False)]
        names = copies["name"].astype(str)
        for tag, what in (("D2H", "device-to-host"), ("H2D", "host-to-device")):
            mine = copies[names.str.contains(tag, regex=False)]
            if len(mine):
                words.append(f"{len(mine):,} {what} copies ({ms_human(mine['dur_ns'].sum() / 1e6)})")
    return "; ".join(words)
