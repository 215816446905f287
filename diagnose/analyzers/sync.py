"""Host synchronisations: where they are, what they block, and how much GPU idle each causes.

A sync costs the GPU the gap that follows it: the host waits until the queue drains,
then needs time to launch more work (see :mod:`diagnose.trace_timeline`). Each sync is
attributed to the op that issued it (the outermost CPU op around the runtime call:
``aten::item``, ``aten::nonzero``, ``aten::to`` …) and to the user's innermost Python frame.
Kineto names a frame by the function's *first* line, so with only a trace the location is
the function; the exact line comes from the sync records ``gpudiag profile`` writes
(``profile.sync_records``), matched to the trace's sync calls by time. Where the host fetched the next
batch inside that gap (a DataLoader range, the loop's iterator), that part is the input's, not the sync's.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from diagnose import trace_timeline as tl
from diagnose.findings import Evidence, Finding, Result, Severity, Subject, not_measured
from diagnose.metrics import LOWER, Metric
from diagnose.profile_data import Profile
from diagnose.thresholds import Thresholds
from diagnose.trace_input_wait import input_fetches, input_inside_gaps, source_dirs_of

NAME = "sync"
ORDER = 21
SECTION = "section-sync"
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
NO_FRAME = "(no Python frame in the trace)"
MATCH_TOLERANCE_NS = 2_000_000

ADVICE = [
    (
        ("item", "_local_scalar_dense", "is_nonzero", "tolist"),
        "keep the value on the GPU: accumulate losses/metrics in a device tensor and read it every N steps "
        "(or at the end of the epoch) instead of calling .item()/.tolist()/if tensor: each step",
    ),
    (
        ("nonzero", "index", "masked_select", "unique", "repeat_interleave"),
        "data-dependent shapes (boolean masking, nonzero, unique) must read the count back: use torch.where or "
        "multiply by the mask so shapes stay static",
    ),
    (
        ("to", "_to_copy", "copy_", "cpu", "Memcpy"),
        "a device-to-host copy waits for the GPU: copy with non_blocking=True into pinned memory and read it later, "
        "or move the metric computation onto the GPU",
    ),
    (
        ("cudaDeviceSynchronize", "cudaStreamSynchronize", "synchronize"),
        "an explicit synchronize in the loop: time with torch.cuda.Event(enable_timing=True) and read elapsed_time "
        "after the step, or drop the call",
    ),
    (
        ("cudaEventSynchronize", "Event"),
        "an event wait on the host: query the event later (event.query()) or wait on the GPU with stream.wait_event",
    ),
]


def advice_for(op: str, call: str) -> str:
    text = f"{op} {call}"
    for keys, advice in ADVICE:
        if any(k in text for k in keys):
            return advice
    return "move the synchronising call out of the step, or do it every N steps"


def analyze(profile: Profile, th: Thresholds = Thresholds()) -> Result:
    result = Result(NAME)
    if not profile.traces and not profile.sync_records:
        result.findings.append(
            not_measured(
                NAME,
                "Host synchronisation",
                "Profile with `gpudiag profile` (records the "
                "exact line of every sync) or pass a PyTorch profiler trace with stacks "
                "(with_stack=True).",
                SECTION,
            )
        )
        return result
    lowest = min(list(profile.traces) + list(profile.sync_records))
    calls_all, groups_all, subjects, meta_steps = [], [], [], {}
    total_idle = total_span = 0.0
    for rank in sorted(set(profile.traces) | set(profile.sync_records)):
        records = profile.sync_records.get(rank)
        trace = profile.traces.get(rank)
        if trace is not None and len(trace.gpu):
            trace = tl.analysed(trace)
            fetches = input_fetches(trace, tl.steps(trace), source_dirs_of(profile))
            calls, step_ns, n_steps = trace_syncs(trace, th, fetches)
            if records is not None and len(records):
                calls = apply_records(calls, records, trace)
        elif records is not None and len(records):
            calls, step_ns, n_steps = record_syncs(records, profile.step_events.get(rank), window_of(profile.manifest))
        else:
            continue
        if rank == lowest and trace is not None and len(trace.gpu):
            result.tables.update(representative_step(trace, calls))
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
    if not subjects:
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
            + [
                Severity.CRITICAL
                if overall >= th.sync.critical_idle_share
                else Severity.WARNING
                if overall >= th.sync.warning_idle_share
                else Severity.INFO
            ]
        )
        top = subjects[0]
        exact = bool(top.figures.get("line_exact"))
        if exact or not top.figures.get("function"):
            where = top.name
        else:
            where = f"{top.figures.get('function')}() in {top.figures.get('file')}"
        if span_only:
            n_per_step = sum(s.figures["count"] for s in subjects)
            title = (
                f"{n_per_step:.3g} host syncs in the traced span (no iterations found in the trace to divide "
                f"by); the costliest, {top.figures['op']} at {where}, idles the GPU "
                f"{fmt_ms(top.figures.get('gpu_idle_ms'))} in all"
            )
        else:
            n_per_step = sum(s.figures["count_per_step"] for s in subjects)
            title = (
                f"{n_per_step:.3g} host syncs per step; the costliest, {top.figures['op']} at {where}, "
                f"idles the GPU {fmt_ms(top.figures.get('gpu_idle_ms_per_step'))} per step"
            )
        if not exact and any(not s.figures.get("line_exact") for s in subjects):
            title += " (the trace names functions, not the exact line: profile with `gpudiag profile` for lines)"
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
    return result


def fmt_ms(v) -> str:
    return "an unknown time" if v is None or np.isnan(v) else f"{v:.3g} ms"


def trace_syncs(trace, th: Thresholds, fetches: pd.DataFrame | None = None) -> tuple[pd.DataFrame, float, int]:
    """One row per host-blocking sync call of the trace, with its op, frame, step and caused GPU idle.

    ``fetches``: the input fetches the trace shows (trace_input_wait.input_fetches). The part of a sync's gap
    during which the host was fetching the next batch is the input's: it is not the sync's GPU idle."""
    rt, ops, py = trace.runtime, trace.cpu_ops, trace.python
    idx = tl.host_syncs(trace)
    gaps = tl.gaps(trace, th.sync.kernel_gap_us * 1e3, th.sync.sync_slack_us * 1e3)
    gaps = gaps[gaps["sync_index"] >= 0]
    if fetches is not None and len(fetches) and len(gaps):
        inside, start, end = input_inside_gaps(gaps["start_ns"].to_numpy(), gaps["end_ns"].to_numpy(), fetches)
        fetching = np.bincount(inside, weights=end - start, minlength=len(gaps))
        gaps = gaps.assign(dur_ns=gaps["dur_ns"].to_numpy() - fetching)
    idle_by_sync = gaps.groupby("sync_index")["dur_ns"].sum()
    windows = tl.steps(trace)
    gwin = tl.gpu_step_windows(trace, windows) if len(windows) else pd.DataFrame()
    if len(gwin):
        n_steps = len(gwin)
        step_ns = float((gwin["gpu_end_ns"] - gwin["gpu_start_ns"]).mean())
    else:  # nothing repeats in the trace (diagnose.trace_iterations): figures over the span, never "per step"
        n_steps = 0
        step_ns = float(tl.temporal_breakdown(trace.gpu)["span_ns"])
    cut = trace.metadata.get("left_out_from_ns")
    if cut is not None and idx.size:  # the last profiler step was left out of the GPU timeline: its syncs too
        idx = idx[rt["ts_ns"].to_numpy()[idx] < cut]
    sub = rt.iloc[idx]
    op_i = sub["cpu_op_index"].to_numpy()
    top_i = np.where(op_i >= 0, ops["top_index"].to_numpy()[np.maximum(op_i, 0)] if len(ops) else -1, -1)
    call = sub["name"].astype(str).to_numpy()
    op = np.where(top_i >= 0, tl.names_at(ops["name"], np.maximum(top_i, 0)) if len(ops) else "", call)
    inner = np.where(op_i >= 0, tl.names_at(ops["name"], np.maximum(op_i, 0)) if len(ops) else "", call)
    py_i = sub["python_index"].to_numpy()
    if len(py_i) and len(ops):  # ops on threads without frames: use the op's own frame
        op_py = np.where(top_i >= 0, ops["python_index"].to_numpy()[np.maximum(top_i, 0)], -1)
        py_i = np.where(py_i >= 0, py_i, op_py)
    file, line, func, where = frames(py, py_i)
    step = step_of_times(windows, sub["ts_ns"].to_numpy())
    columns = {
        "ts_ns": sub["ts_ns"].to_numpy(),
        "blocked_ns": sub["dur_ns"].to_numpy().astype(float),
        "gpu_idle_ns": idle_by_sync.reindex(idx).fillna(0.0).to_numpy(),
        "call": call,
        "sync_kind": sub["sync_kind"].astype(str).to_numpy(),
        "op": op,
        "inner_op": inner,
        "file": file,
        "line": line,
        "function": func,
        "location": where,
        "line_exact": False,
        "step": step,
        "runtime_index": idx,
    }
    # one op (aten::item → cudaMemcpyAsync + cudaStreamSynchronize) is one sync, not two
    instance = np.where(top_i >= 0, top_i, -1 - np.arange(len(idx)))
    if len(np.unique(instance)) == len(instance):
        calls = pd.DataFrame(columns)
    else:
        calls = _one_row_per_instance(columns, instance)
    calls = calls.sort_values("ts_ns").reset_index(drop=True)
    return calls, step_ns, n_steps


def _one_row_per_instance(columns: dict, instance: np.ndarray) -> pd.DataFrame:
    """One row per op instance: the first non-missing value of each column, blocked and idle summed, the calls
    joined; groups in order of first appearance."""
    calls = pd.DataFrame(columns)
    calls["instance"] = instance
    first = calls.groupby("instance", sort=False).first()
    first["blocked_ns"] = calls.groupby("instance", sort=False)["blocked_ns"].sum()
    first["gpu_idle_ns"] = calls.groupby("instance", sort=False)["gpu_idle_ns"].sum()
    first["call"] = calls.groupby("instance", sort=False)["call"].agg(lambda c: " + ".join(dict.fromkeys(c)))
    return first.reset_index().drop(columns=["instance"])


def frames(py: pd.DataFrame, py_i: np.ndarray):
    """(file, first line, function, location) of the user's innermost frame for each Python row index."""
    n = len(py_i)
    file = np.full(n, None, dtype=object)
    line = np.full(n, -1, dtype=np.int64)
    func = np.full(n, None, dtype=object)
    where = np.full(n, NO_FRAME, dtype=object)
    if not len(py) or not n:
        return file, line, func, where
    user = np.where(py_i >= 0, py["user_index"].to_numpy()[np.maximum(py_i, 0)], -1)
    ok = user >= 0
    f_all = py["file"].astype(object).to_numpy()
    l_all = py["line"].to_numpy()
    fn_all = py["function"].astype(object).to_numpy()
    file[ok], line[ok], func[ok] = f_all[user[ok]], l_all[user[ok]], fn_all[user[ok]]
    where[ok] = [f"{f}:{ln}" for f, ln in zip(file[ok], line[ok])]
    lib = ~ok & (py_i >= 0)  # only library frames above it: name the innermost one
    if lib.any():
        nm = py["name"].astype(object).to_numpy()
        where[lib] = [f"(library) {x}" for x in nm[py_i[lib]]]
    return file, line, func, where


def step_of_times(windows: pd.DataFrame, t_ns: np.ndarray) -> np.ndarray:
    out = np.full(len(t_ns), -1, dtype=np.int64)
    if not len(windows):
        return out
    k = np.searchsorted(windows["cpu_start_ns"].to_numpy(), t_ns, side="right") - 1
    ok = k >= 0
    ok[ok] &= t_ns[ok] < windows["cpu_end_ns"].to_numpy()[k[ok]]
    out[ok] = windows["step"].to_numpy()[k[ok]]
    return out


def apply_records(calls: pd.DataFrame, records: pd.DataFrame, trace) -> pd.DataFrame:
    """Give trace syncs the exact file:line of the sync record made at the same moment.

    Records whose op is ``cuda_sync`` come from torch's sync-debug warnings, which fire for syncs
    inside aten ops only: they are matched to trace syncs inside an op, so an explicit
    torch.cuda.synchronize() (a bare runtime call, no enclosing op) keeps its trace attribution
    instead of taking a neighbour's line. Records naming an explicit call match any trace sync.
    """
    base = trace.metadata.get("header", {}).get("baseTimeNanoseconds")
    if not len(calls) or "t_ns" not in records:
        return calls
    t_trace = calls["ts_ns"].to_numpy().astype(np.int64) + (int(base) if isinstance(base, (int, float)) else 0)
    rec_t = pd.to_numeric(records["t_ns"], errors="coerce").to_numpy()
    good = np.isfinite(rec_t)
    if not good.any():
        return calls
    recs = records[good].reset_index(drop=True)
    rec_t = rec_t[good].astype(np.int64)
    in_op = calls["op"].astype(str).to_numpy() != calls["call"].astype(str).to_numpy()
    from_debug = recs["op"].astype(str).to_numpy() == "cuda_sync" if "op" in recs else np.zeros(len(recs), bool)

    def nearest(t, t_sorted):
        if len(t_sorted) == 1:
            return np.zeros(len(t), int)
        k = np.clip(np.searchsorted(t_sorted, t), 1, len(t_sorted) - 1)
        left, right = t_sorted[k - 1], t_sorted[k]
        return np.where(np.abs(t - left) <= np.abs(t - right), k - 1, k)

    all_order = np.argsort(t_trace)
    all_sorted = t_trace[all_order]
    offset = int(np.median(rec_t - all_sorted[nearest(rec_t, all_sorted)]))  # the two clocks may differ a bit
    best: dict[int, tuple[int, int]] = {}  # call row → (record row, error)
    for rec_mask, cand in ((from_debug, np.flatnonzero(in_op)), (~from_debug, np.arange(len(calls)))):
        if not rec_mask.any() or not cand.size:
            continue
        order = cand[np.argsort(t_trace[cand])]
        t_sorted = t_trace[order]
        r_idx = np.flatnonzero(rec_mask)
        k = nearest(rec_t[r_idx] - offset, t_sorted)
        err = np.abs(rec_t[r_idx] - offset - t_sorted[k])
        for r, kk, e in zip(r_idx, k, err):
            row = int(order[kk])
            if e <= MATCH_TOLERANCE_NS and (row not in best or e < best[row][1]):
                best[row] = (int(r), int(e))
    calls = calls.copy()
    cols = {c: calls.columns.get_loc(c) for c in ("location", "line", "file", "function", "line_exact")}
    for row, (r, _) in best.items():
        rec = recs.iloc[r]
        calls.iat[row, cols["location"]] = str(rec.get("location") or f"{rec.get('file')}:{rec.get('line')}")
        calls.iat[row, cols["line"]] = int(rec["line"]) if pd.notna(rec.get("line")) else -1
        calls.iat[row, cols["file"]] = rec.get("file")
        calls.iat[row, cols["function"]] = rec.get("function")
        calls.iat[row, cols["line_exact"]] = True
    return calls


def window_of(manifest: dict | None) -> range | None:
    """The steps gpudiag's trace window covered (sync records are captured only there), from the manifest."""
    child = ((manifest or {}).get("options") or {}).get("child") or {}
    start, count = child.get("trace_start"), child.get("trace_steps")
    if isinstance(start, int) and isinstance(count, int) and count > 0:
        return range(start, start + count)
    return None


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
    loc = r["location"] if "location" in r else r["file"].astype(str) + ":" + r["line"].astype(str)
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
            "line_exact": True,
            "step": r.get("step"),
            "runtime_index": -1,
        }
    )
    return calls, step_ns, n_steps


def group_syncs(calls: pd.DataFrame, n_steps: int, step_ns: float) -> pd.DataFrame:
    """One row per (location, op): counts and costs per step, costliest first."""
    cols = [
        "location",
        "op",
        "function",
        "file",
        "line",
        "line_exact",
        "calls",
        "count",
        "count_per_step",
        "blocked_ms_per_step",
        "gpu_idle_ms_per_step",
        "share_of_step",
        "blocked_ms",
        "gpu_idle_ms",
    ]
    if not len(calls):
        return pd.DataFrame(columns=cols)
    grouped = _grouped_by_location_op(calls)
    # the figures as arrays and one frame (six column assignments cost ~2 ms on a few rows)
    count = grouped["count"].to_numpy()
    blocked_ns, gpu_idle_ns = grouped["blocked_ns"].to_numpy(), grouped["gpu_idle_ns"].to_numpy()
    blocked_ms, gpu_idle_ms = blocked_ns / 1e6, gpu_idle_ns / 1e6
    figures = {
        "count_per_step": count / n_steps,
        "blocked_ms_per_step": blocked_ms / n_steps,
        "gpu_idle_ms_per_step": gpu_idle_ms / n_steps,
        "share_of_step": gpu_idle_ns / n_steps / step_ns if step_ns and step_ns == step_ns else np.nan,
        "blocked_ms": blocked_ms,
        "gpu_idle_ms": gpu_idle_ms,
    }
    out = pd.DataFrame({c: figures[c] if c in figures else grouped[c] for c in cols})
    out = out.sort_values(["gpu_idle_ms_per_step", "blocked_ms_per_step"], ascending=False, na_position="last")
    return out.reset_index(drop=True)


def _grouped_by_location_op(calls: pd.DataFrame) -> dict[str, pd.Series]:
    """``group_syncs``' aggregation per (location, op), groups in order of first appearance: the same columns and
    values as a two-key ``groupby(...).agg(...)``, through one integer group code and a groupby per column
    (~1 ms instead of ~5 ms of named aggregation on a dozen rows)."""
    loc, _ = pd.factorize(calls["location"], use_na_sentinel=False)  # a missing key is a group, as dropna=False
    op, _ = pd.factorize(calls["op"], use_na_sentinel=False)
    _, first_row, inverse = np.unique(
        loc.astype(np.int64) * (int(op.max()) + 1) + op, return_index=True, return_inverse=True
    )
    rank = np.empty(len(first_row), dtype=np.int64)
    rank[np.argsort(first_row, kind="stable")] = np.arange(len(first_row))
    group = rank[inverse.reshape(-1)]  # 0, 1, ... in order of first appearance, as groupby(sort=False) orders
    first_row = np.sort(first_row)

    def by_group(column: str):
        return calls[column].groupby(group, sort=True)

    out = {
        # the keys as groupby gives them: an index built from the first row's values (object strings infer str)
        "location": pd.Series(pd.Index(calls["location"].to_numpy()[first_row])),
        "op": pd.Series(pd.Index(calls["op"].to_numpy()[first_row])),
        "function": by_group("function").first(),
        "file": by_group("file").first(),
        "line": by_group("line").first(),
        "line_exact": by_group("line_exact").all(),
        "calls": by_group("call").agg(lambda s: ", ".join(dict.fromkeys(map(str, s)))),
        "count": by_group("call").size(),
        "blocked_ns": by_group("blocked_ns").sum(),
        "gpu_idle_ns": by_group("gpu_idle_ns").agg(lambda s: s.sum(min_count=1)),
    }
    return {k: v.reset_index(drop=True) for k, v in out.items()}


def subject_of(g, rank: int, th: Thresholds, span_only: bool = False) -> Subject:
    """One sync location as a finding's subject; ``span_only``: the trace has no iterations, so its figures are
    totals over the traced span (``count``, ``blocked_ms``, ``gpu_idle_ms``, ``share_of_span``), not per step."""
    share = g.share_of_step
    if share != share:  # no GPU idle known (sync records without a trace): listed, not judged
        sev = Severity.INFO
    elif share >= th.sync.critical_idle_share:
        sev = Severity.CRITICAL
    elif share >= th.sync.min_idle_share:
        sev = Severity.WARNING
    else:
        sev = Severity.INFO
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
            "advice": advice_for(str(g.op), str(g.calls)),
        },
    )
    if span_only:
        renamed = {
            "count_per_step": "count",
            "blocked_ms_per_step": "blocked_ms",
            "gpu_idle_ms_per_step": "gpu_idle_ms",
            "share_of_step": "share_of_span",
        }
        subject = dataclasses.replace(subject, figures={renamed.get(k, k): v for k, v in subject.figures.items()})
    return subject


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
