"""Host synchronisations: where they are, what they block, and how much GPU idle each causes.

A sync costs the GPU the gap that follows it: the host waits until the queue drains,
then needs time to launch more work (see :mod:`diagnose.derive.trace_timeline`). Each sync is
attributed to the op that issued it (the outermost CPU op around the runtime call:
``aten::item``, ``aten::nonzero``, ``aten::to`` …) and to the user's innermost Python frame.
Kineto names a frame by the function's *first* line, so with only a trace the location is
the function (module-level code has no line at all: ``file (module level)``, never ``file:0``); the exact
line comes from the sync records ``gpudiag profile`` writes (``profile.sync_records``), matched to the
trace's sync calls by time, or, where the times do not pair, by the function when light mode saw its
syncs at one line only. Where the host fetched the next batch inside that gap (a DataLoader range, the
loop's iterator), that part is the input's, not the sync's.

One definition of a sync's cost serves this analyzer and the step budget: the GPU idle of the gap it leaves,
less the input fetching inside it (``rank_calls`` in diagnose/derive/sync_calls.py); sites are ranked by it
(``group_syncs``) and named by ``where_words`` (diagnose/derive/sync_sites.py), so both name the same
costliest site the same way.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from diagnose.derive import capture_advice
from diagnose.derive import trace_timeline as tl
from diagnose.derive.derived import Derived
from diagnose.derive.sync_calls import MODULE, NO_FRAME, trace_location
from diagnose.derive.sync_sites import advice_for, group_syncs, where_words
from diagnose.derive.untraced_cost import BASIS, untraced_cost
from diagnose.findings import Evidence, Finding, Result, Severity, Subject, not_measured
from diagnose.formatting import ms_human, n_things
from diagnose.ingest.profile_data import Profile
from diagnose.metrics import LOWER, Metric
from diagnose.thresholds import Thresholds
from parsers.run_records import TRACE

NAME = "sync"
ORDER = 21
SECTION = "section-sync"
TITLE = "Host syncs and GPU idle time"  # its report section's heading
JUDGES = "host syncs"  # what "Nothing crossed a threshold: judged ..." names
COST_BASIS = "the traced time"  # what its findings' cost_share is a share of, in the verdict's words
COST_BASIS_BY_ID: dict[str, str] = {}  # no finding's basis differs
# the Thresholds groups it reads (diagnose/thresholds.py); steps and step_budget: the untraced median step its cost
# is put in (Derived.step_budget(), diagnose.derive.untraced_cost)
THRESHOLDS = ("sync", "steps", "step_budget")
SUMMARY_METRICS = (  # what analyze() writes into Result.summary, per key() (diagnose.metrics)
    Metric("sync_count_per_step", "Host synchronisations per step", "count", LOWER, 0.01),
    Metric("sync_host_blocked_ms_per_step", "Host blocked in syncs per step", "ms", LOWER, 0.001),  # 1 us timestamps
    Metric("sync_gpu_idle_ms_per_step", "GPU idle after syncs per step", "ms", LOWER, 0.001),
    # a trace where nothing repeats (no iterations found): totals over the traced span, never per step
    Metric("sync_count_in_span", "Host synchronisations in the traced span", "count", LOWER, 1),
    Metric("sync_host_blocked_ms_in_span", "Host blocked in syncs over the traced span", "ms", LOWER, 0.001),
    Metric("sync_gpu_idle_ms_in_span", "GPU idle after syncs over the traced span", "ms", LOWER, 0.001),
)
FINDING_IDS = (  # every id this analyzer can produce: `gpudiag check --ignore` validates against them
    "sync.host_sync",
    "sync.none",
    "sync.not_measured",
)


def analyze(profile: Profile, derived: Derived, th: Thresholds = Thresholds()) -> Result:
    result = Result(NAME)
    if not derived.traces and not profile.sync_records:
        result.findings.append(
            not_measured(
                NAME,
                "Host synchronisation",
                capture_advice.advice(
                    profile,
                    "Profile with `gpudiag profile` (records the exact line of every sync) or pass a PyTorch "
                    "profiler trace with stacks (with_stack=True).",
                    "Syncs are recorded in the trace window: this run traced no steps (--trace-steps 0, or an --ncu "
                    "run); run it in light mode with --trace-steps 3 or more.",
                    TRACE.prefix,
                ),
                SECTION,
            )
        )
        return result
    lowest = min(list(derived.traces) + list(profile.sync_records))
    calls_all, groups_all, subjects, meta_steps = [], [], [], {}
    total_idle = total_span = 0.0
    unjudged = {}  # rank -> why its trace cannot show a host sync
    for rank in sorted(set(derived.traces) | set(profile.sync_records)):
        records = profile.sync_records.get(rank)
        part = (
            derived.rank_part(NAME, rank, lambda r=rank: rank_part(profile, derived, r, th))
            if rank in derived.traces
            else None
        )
        if part is not None and part["has_gpu"]:
            calls, step_ns, n_steps = part["calls"].copy(), part["step_ns"], part["n_steps"]
            if part["why"] and not len(calls):
                unjudged[rank] = part["why"]
            if rank == lowest:  # the timeline's step: the one rank whose trace the cross-rank step reads
                result.tables.update(representative_step(tl.analysed(derived.traces[rank]), part["calls"]))
        elif records is not None and len(records):
            calls, step_ns, n_steps = record_syncs(records, profile.step_events.get(rank), derived.trace_window())
        else:
            continue
        calls.insert(0, "rank", rank)
        calls_all.append(calls)
        span_only = n_steps == 0
        per = 1 if span_only else n_steps
        groups = group_syncs(calls, per, step_ns)
        groups.insert(0, "rank", rank)
        groups_all.append(groups)
        meta_steps[rank] = {"steps": n_steps, "step_ns": step_ns}
        key = (lambda k: k) if rank == lowest else (lambda k, r=rank: f"rank{r}.{k}")
        unit = "in_span" if span_only else "per_step"
        result.summary[key(f"sync_count_{unit}")] = float(len(calls) / per)
        result.summary[key(f"sync_host_blocked_ms_{unit}")] = float(calls["blocked_ns"].sum() / per / 1e6)
        idle = calls["gpu_idle_ns"].sum(min_count=1)
        if not np.isnan(idle):
            result.summary[key(f"sync_gpu_idle_ms_{unit}")] = float(idle / per / 1e6)
            total_idle += idle
            total_span += step_ns * per
        for g in groups.itertuples():
            subjects.append(subject_of(g, rank, th, span_only))
    span_only = bool(meta_steps) and all(m["steps"] == 0 for m in meta_steps.values())
    result.meta["steps"] = meta_steps
    if not calls_all:
        result.findings.append(
            not_measured(
                NAME,
                "Host synchronisation",
                "The trace has no GPU activity to relate syncs to; profile a run that uses the GPU.",
                SECTION,
            )
        )
        return result
    result.tables["calls"] = pd.concat(calls_all, ignore_index=True)
    if not subjects and unjudged:  # no sync seen where none could be seen: say so, never "the host never waited"
        ranks = sorted(unjudged)
        result.findings.append(
            Finding(
                id="sync.not_measured",
                analyzer=NAME,
                severity=Severity.INFO,
                title="Host syncs could not be judged: "
                + (
                    f"the trace {unjudged[ranks[0]]}"
                    if len(ranks) == 1
                    else f"the traces {unjudged[ranks[0]]}".replace(" links ", " link ", 1)
                ),
                subjects=tuple(Subject("rank", str(r)) for r in ranks),
                recommendation="A host sync shows as a CUDA runtime call that blocks, and its cost as the GPU idle "
                "until the next work it launched: for torch, pass a PyTorch profiler trace with CUDA activity "
                "(ProfilerActivity.CUDA); for JAX, the idle analyzer's breakdown is what the trace can show.",
                section=SECTION,
            )
        )
    elif not subjects:
        result.findings.append(
            Finding(
                id="sync.none",
                analyzer=NAME,
                severity=Severity.INFO,
                title="No host synchronisation in the traced span"
                if span_only
                else "No host synchronisation inside the profiled steps",
                recommendation="Nothing to do: the host never waited for the GPU in the loop.",
                section=SECTION,
            )
        )
    result.tables["locations"] = pd.concat(groups_all, ignore_index=True)
    if subjects:
        subjects.sort(
            key=lambda s: (
                -int(s.severity),
                -(s.figures.get("gpu_idle_ms_per_step") or s.figures.get("gpu_idle_ms") or 0),
                -(s.figures.get("blocked_ms_per_step") or s.figures.get("blocked_ms") or 0),
            )
        )
        overall = total_idle / total_span if total_span else 0.0
        worst = max(
            [s.severity for s in subjects]
            + [Severity.of(overall, warning=th.sync.warning_idle_share, critical=th.sync.critical_idle_share)]
        )
        top = subjects[0]
        exact = bool(top.figures.get("line_exact"))
        where = where_words(
            top.name, top.figures.get("function"), top.figures.get("file"), exact, top.figures.get("library_location")
        )
        if span_only:
            n_per_step = sum(s.figures["count"] for s in subjects)
            title = (
                f"{n_things(n_per_step, 'host sync')} in the traced span (no iterations found in the trace to divide "
                f"by); the costliest, {top.figures['op']} at {where}, idles the GPU "
                f"{fmt_ms(top.figures.get('gpu_idle_ms'))} in all"
            )
        else:
            n_per_step = sum(s.figures["count_per_step"] for s in subjects)
            title = (
                f"{n_things(n_per_step, 'host sync')} per step; the costliest, {top.figures['op']} at {where}, "
                f"idles the GPU {fmt_ms(top.figures.get('gpu_idle_ms_per_step'))} per traced step"
            )
        if not exact:
            title += f" ({no_line_caveat(profile, top)})"
        result.findings.append(
            Finding(
                id="sync.host_sync",
                analyzer=NAME,
                severity=worst,
                title=title,
                subjects=tuple(subjects),
                evidence=(
                    Evidence("sync_count_in_span" if span_only else "sync_count_per_step", n_per_step, "count"),
                    Evidence(
                        "sync_gpu_idle_share",
                        total_idle / total_span if total_span else float("nan"),
                        "share",
                        th.sync.warning_idle_share,
                    ),
                ),
                cost_share=(total_idle / total_span) if total_span else None,
                recommendation=f"At {where}: {top.figures['advice']}.",
                section=SECTION,
            )
        )
        result.findings[-1] = on_untraced_step(result.findings[-1], derived, sorted(meta_steps), th)
    return result


def on_untraced_step(finding: Finding, derived: Derived, ranks: list[int], th: Thresholds) -> Finding:
    """The host-sync finding of a run with untraced step timings: its cost the syncs' part of the median untraced
    step (diagnose.derive.untraced_cost), its severity no higher than that share earns. The traced figures stay in
    its title, subjects and evidence."""
    if not derived.step_table().shape[0]:
        return finding
    cost = untraced_cost(derived.step_budget(), ranks, parts=("sync",))
    if cost is None:
        return finding
    severity = Severity.of(cost.share, warning=th.sync.warning_idle_share, critical=th.sync.critical_idle_share)
    return dataclasses.replace(
        finding,
        severity=min(finding.severity, severity),
        cost_share=cost.share,
        cost_basis=BASIS,
        recommendation=f"{finding.recommendation} {cost.words('host syncs')}",
    )


def fmt_ms(v) -> str:
    return "an unknown time" if v is None or np.isnan(v) else ms_human(v)


def unlinked_why(trace) -> str | None:
    """Why the trace cannot show a host sync's cost (its GPU work is linked to no launch call), or None."""
    ri = trace.gpu["runtime_index"].to_numpy()
    if not len(ri) or (ri >= 0).any():
        return None
    if trace.format == "perfetto":
        return "links none of its GPU work to a launch call (JAX/XLA perfetto traces do not)"
    return "links none of its GPU work to a launch call (it has no correlation ids)"


def no_line_caveat(profile: Profile, subject: Subject) -> str:
    """Why the costliest site is named without its line, and how to get it (never "profile with `gpudiag
    profile`" to a run folder that gpudiag profile wrote)."""
    function = subject.figures.get("function")
    if subject.name == NO_FRAME:  # no frame at all: stacks were not recorded
        what = "the trace has no Python stacks (with_stack=True records them)"
    elif not isinstance(function, str) or not function:
        what = "the trace shows no frame of your code above this sync"
    elif function == MODULE:
        what = "the trace names no line for module-level code"
    else:
        what = "the trace names functions, not the exact line"
    records = profile.sync_records.get(subject.figures.get("rank"))
    if records is not None and len(records):
        return f"{what}, and light mode's sync records hold none for this sync"
    if capture_advice.from_run_folder(profile):
        return f"{what}, and this run folder holds no sync records"
    return f"{what}: profile with `gpudiag profile` for lines"


def record_syncs(
    records: pd.DataFrame, steps: pd.DataFrame | None, window: range | None = None
) -> tuple[pd.DataFrame, float, int]:
    """Sync rows from gpudiag's sync records alone (no trace): host blocking known, GPU idle not.

    Per-step figures divide by the steps the records were captured in (the trace window's steps that
    ran), not by every step of the run: one ``.item()`` a step is one sync a step, whatever the run's length.
    """
    r = records.reset_index(drop=True)
    n_steps = int(pd.to_numeric(r.get("step"), errors="coerce").nunique()) or 1
    step_ns = float("nan")
    if steps is not None and len(steps) and "host_ms" in steps:
        step_ns = float(pd.to_numeric(steps["host_ms"], errors="coerce").mean() * 1e6)
        if window is not None:
            ran = set(pd.to_numeric(steps["step"], errors="coerce").dropna().astype(int))
            n_steps = max(n_steps, len([s for s in window if s in ran]) or len(window))
    line = pd.to_numeric(r["line"], errors="coerce") if "line" in r else pd.Series(np.nan, index=r.index)
    has_line = (line > 0).to_numpy()  # a record with no line (or line 0) names its function, never "file:0"
    file = r["file"] if "file" in r else pd.Series(None, index=r.index, dtype=object)
    function = r["function"] if "function" in r else pd.Series(None, index=r.index, dtype=object)
    loc = [
        f"{f}:{int(ln)}" if ok else trace_location(f, -1, fn)
        for f, ln, fn, ok in zip(file, line.fillna(-1), function, has_line)
    ]
    if "location" in r:  # the writer's own location string, where it names a line
        loc = [
            str(given) if ok and isinstance(given, str) and given else x
            for given, x, ok in zip(r["location"], loc, has_line)
        ]
    calls = pd.DataFrame(
        {
            "ts_ns": pd.to_numeric(r.get("t_ns"), errors="coerce"),
            "blocked_ns": pd.to_numeric(r["dur_ns"], errors="coerce"),
            "gpu_idle_ns": np.nan,
            "call": r.get("op"),
            "sync_kind": None,
            "op": r.get("op"),
            "inner_op": r.get("op"),
            "file": r.get("file"),
            "line": r.get("line"),
            "function": r.get("function"),
            "location": loc,
            "line_exact": has_line,
            "library_location": r["library_location"] if "library_location" in r else None,
            "step": r.get("step"),
            "runtime_index": -1,
        }
    )
    return calls, step_ns, n_steps


def subject_of(g, rank: int, th: Thresholds, span_only: bool = False) -> Subject:
    """One sync location as a finding's subject; ``span_only``: the trace has no iterations, so its figures are
    totals over the traced span (``count``, ``blocked_ms``, ``gpu_idle_ms``, ``share_of_span``), not per step."""
    share = g.share_of_step  # NaN when no GPU idle is known (sync records without a trace): listed, info
    sev = Severity.of(share, warning=th.sync.min_idle_share, critical=th.sync.critical_idle_share)
    subject = Subject(
        "location",
        str(g.location),
        severity=sev,
        figures={
            "rank": rank,
            "op": str(g.op),
            "function": g.function,
            "file": g.file,
            "line_exact": bool(g.line_exact),
            "count_per_step": float(g.count_per_step),
            "blocked_ms_per_step": float(g.blocked_ms_per_step),
            "gpu_idle_ms_per_step": None
            if g.gpu_idle_ms_per_step != g.gpu_idle_ms_per_step
            else float(g.gpu_idle_ms_per_step),
            "share_of_step": None if share != share else float(share),
            "calls": str(g.calls),
            "advice": advice_for(str(g.op), str(g.calls), getattr(g, "library_location", None)),
        },
    )
    library = getattr(g, "library_location", None)
    if isinstance(library, str) and library:  # a library's code made the call from the user's line
        subject.figures["library_location"] = library
    if span_only:
        renamed = {
            "count_per_step": "count",
            "blocked_ms_per_step": "blocked_ms",
            "gpu_idle_ms_per_step": "gpu_idle_ms",
            "share_of_step": "share_of_span",
        }
        subject = dataclasses.replace(subject, figures={renamed.get(k, k): v for k, v in subject.figures.items()})
    return subject


def rank_part(profile: Profile, derived: Derived, rank: int, th: Thresholds, lowest: int | None = None) -> dict:
    """What sync works out from one rank's trace alone: its sync calls with their costs, the mean step and the
    steps, and why its trace cannot show a sync (None: it can). A cluster read works it out on a worker
    (diagnose.cluster)."""
    trace = derived.traces[rank]
    if not len(trace.gpu):
        return {"has_gpu": False}
    trace = tl.analysed(trace)
    calls, step_ns, n_steps = derived.rank_calls(rank)
    return {
        "has_gpu": True,
        "calls": calls,
        "step_ns": step_ns,
        "n_steps": n_steps,
        "why": unlinked_why(trace),
    }


def representative_step(trace, calls: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Busy intervals and sync points of the median-length step (times in ms from its start), for the timeline."""
    windows = tl.steps(trace)
    gwin = tl.gpu_step_windows(trace, windows) if len(windows) else pd.DataFrame()
    if len(gwin):
        length = (gwin["gpu_end_ns"] - gwin["gpu_start_ns"]).to_numpy()
        pick = gwin.iloc[int(np.argsort(length)[len(length) // 2])]
        lo, hi, step = int(pick.gpu_start_ns), int(pick.gpu_end_ns), int(pick.step)
    else:
        lo, hi, step = int(trace.gpu["ts_ns"].min()), int(trace.gpu["end_ns"].max()), -1
    s, e = tl.merge(trace.gpu["ts_ns"].to_numpy(), trace.gpu["end_ns"].to_numpy())
    keep = (e > lo) & (s < hi)
    busy = pd.DataFrame(  # each frame built once, the step included (not assigned after: ~0.2 ms each)
        {
            "start_ms": (np.maximum(s[keep], lo) - lo) / 1e6,
            "end_ms": (np.minimum(e[keep], hi) - lo) / 1e6,
            "step": step,
        }
    )
    c = calls[(calls["ts_ns"] >= lo) & (calls["ts_ns"] < hi)] if len(calls) else calls
    points = pd.DataFrame(
        {
            "t_ms": (c["ts_ns"] - lo) / 1e6,
            "blocked_ms": c["blocked_ns"] / 1e6,
            "gpu_idle_ms": c["gpu_idle_ns"] / 1e6,
            "location": c["location"],
            "op": c["op"],
            "step": step,
        }
    )
    return {"timeline_busy": busy, "timeline_syncs": points.reset_index(drop=True)}
