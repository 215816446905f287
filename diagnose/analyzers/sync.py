"""Host synchronisations: where they are, what they block, and how much GPU idle each causes.

A sync costs the GPU the gap that follows it: the host waits until the queue drains,
then needs time to launch more work (see :mod:`diagnose.trace_timeline`). Each sync is
attributed to the op that issued it (the outermost CPU op around the runtime call:
``aten::item``, ``aten::nonzero``, ``aten::to`` …) and to the user's innermost Python frame.
Kineto names a frame by the function's *first* line, so with only a trace the location is
the function (module-level code has no line at all: ``file (module level)``, never ``file:0``); the exact
line comes from the sync records ``gpudiag profile`` writes (``profile.sync_records``), matched to the
trace's sync calls by time, or, where the times do not pair, by the function when light mode saw its
syncs at one line only. Where the host fetched the next batch inside that gap (a DataLoader range, the
loop's iterator), that part is the input's, not the sync's.

One definition of a sync's cost serves this analyzer and the step budget (:func:`rank_calls`): the GPU idle
of the gap it leaves, less the input fetching inside it; sites are ranked by it (:func:`group_syncs`) and
named by :func:`where_words`, so both name the same costliest site the same way.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from diagnose import capture_advice
from diagnose import trace_timeline as tl
from diagnose.findings import Evidence, Finding, Result, Severity, Subject, not_measured
from diagnose.formatting import ms_human, n_things
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
                capture_advice.advice(
                    profile,
                    "Profile with `gpudiag profile` (records the exact line of every sync) or pass a PyTorch "
                    "profiler trace with stacks (with_stack=True).",
                    "Syncs are recorded in the trace window: this run traced no steps (--trace-steps 0, or an --ncu "
                    "run); run it in light mode with --trace-steps 3 or more.",
                    "trace/",
                ),
                SECTION,
            )
        )
        return result
    lowest = min(list(profile.traces) + list(profile.sync_records))
    calls_all, groups_all, subjects, meta_steps = [], [], [], {}
    total_idle = total_span = 0.0
    unjudged = {}  # rank -> why its trace cannot show a host sync
    for rank in sorted(set(profile.traces) | set(profile.sync_records)):
        records = profile.sync_records.get(rank)
        trace = profile.traces.get(rank)
        if trace is not None and len(trace.gpu):
            trace = tl.analysed(trace)
            calls, step_ns, n_steps = rank_calls(profile, rank, trace, th)
            why = unlinked_why(trace)
            if why and not len(calls):
                unjudged[rank] = why
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
        where = where_words(top.name, top.figures.get("function"), top.figures.get("file"), exact)
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
                f"idles the GPU {fmt_ms(top.figures.get('gpu_idle_ms_per_step'))} per step"
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
    return result


def fmt_ms(v) -> str:
    return "an unknown time" if v is None or np.isnan(v) else ms_human(v)


def rank_calls(profile: Profile, rank: int, trace, th: Thresholds) -> tuple[pd.DataFrame, float, int]:
    """One rank's sync calls as this analyzer and the step budget both count them (``trace`` as analysed): each
    sync's cost is the GPU idle of the gap it leaves less the input fetching inside it, and its location the exact
    line of the sync record made with it when ``gpudiag profile`` wrote one. (calls, mean step ns, steps)."""
    fetches = input_fetches(trace, tl.steps(trace), source_dirs_of(profile))
    calls, step_ns, n_steps = trace_syncs(trace, th, fetches)
    records = profile.sync_records.get(rank)
    if records is not None and len(records):
        calls = apply_records(calls, records, trace)
    return calls, step_ns, n_steps


def unlinked_why(trace) -> str | None:
    """Why the trace cannot show a host sync's cost (its GPU work is linked to no launch call), or None."""
    ri = trace.gpu["runtime_index"].to_numpy()
    if not len(ri) or (ri >= 0).any():
        return None
    if trace.format == "perfetto":
        return "links none of its GPU work to a launch call (JAX/XLA perfetto traces do not)"
    return "links none of its GPU work to a launch call (it has no correlation ids)"


MODULE = "<module>"  # Kineto's name of module-level code's frame


def trace_location(file, line, function) -> str:
    """A location from a trace frame: ``file:line`` with the function's first line; module-level code has no line
    (Kineto gives its frame the line it was at when profiling began, or 0), nor has a frame of unknown line."""
    if function == MODULE:
        return f"{file} (module level)"
    if isinstance(line, (int, np.integer)) and line > 0:
        return f"{file}:{int(line)}"
    return f"{function}() in {file}" if function else str(file)


def where_words(location: str, function, file, line_exact: bool) -> str:
    """How a sentence names a sync site: the exact ``file:line`` when known, else the function (or the module-level
    code) and its file, never a line the sync is not on."""
    if line_exact or not function or not file:
        return str(location)
    if function == MODULE:
        return f"the module-level code of {file}"
    return f"{function}() in {file}"


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
    fn_all = py["function"].astype(object).to_numpy()
    file[ok], func[ok] = f_all[user[ok]], fn_all[user[ok]]
    # the function's first line: the least line any of its frames has (Kineto names a frame open when profiling
    # began by the line it was at, a frame entered later by its def line), none for module-level code
    first = first_lines(py, np.unique(user[ok]), f_all, fn_all)
    line[ok] = [-1 if fn == MODULE else first.get((f, fn), -1) for f, fn in zip(file[ok], func[ok])]
    where[ok] = [trace_location(f, ln, fn) for f, ln, fn in zip(file[ok], line[ok], func[ok])]
    lib = ~ok & (py_i >= 0)  # only library frames above it: name the innermost one
    if lib.any():
        nm = py["name"].astype(object).to_numpy()
        where[lib] = [f"(library) {x}" for x in nm[py_i[lib]]]
    return file, line, func, where


def first_lines(py: pd.DataFrame, rows: np.ndarray, f_all: np.ndarray, fn_all: np.ndarray) -> dict:
    """{(file, function): least positive line} over the Python frames of the functions of ``rows`` (``f_all``,
    ``fn_all``: the frames' files and functions as objects)."""
    if not len(rows):
        return {}
    file_codes = py["file"].cat.codes.to_numpy() if hasattr(py["file"], "cat") else pd.factorize(py["file"])[0]
    func_codes = (
        py["function"].cat.codes.to_numpy() if hasattr(py["function"], "cat") else pd.factorize(py["function"])[0]
    )
    key = file_codes.astype(np.int64) * (int(func_codes.max()) + 2) + func_codes
    lines = py["line"].to_numpy()
    same = np.isin(key, np.unique(key[rows])) & (lines > 0)
    if not same.any():
        return {}
    least = pd.Series(lines[same]).groupby(key[same]).min()
    first_row = pd.Series(np.flatnonzero(same)).groupby(key[same]).first()
    return {(f_all[r], fn_all[r]): int(least[k]) for k, r in first_row.items()}


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
    """Give trace syncs the exact file:line of the sync record made with them.

    By time first. The two clocks differ by a steady offset, read where most records sit (the densest
    ``OFFSET_BIN_NS`` of record-minus-nearest-call differences, nearest zero on a tie: a record with no call in the
    trace, such as gpudiag's own synchronize, must not pull it). A record is made while or just after its call
    blocks, so its distance to a call is to the call's whole span, not to its start; the closest pairs are taken
    first, one record per call (a record 0.1 ms after a long ``nonzero`` wait belongs to it, not to the ``.item()``
    that starts 0.2 ms later and has its own record). Records whose op is ``cuda_sync`` come from torch's sync-debug
    warnings, which fire for syncs inside aten ops only: they pair with syncs inside an op, so an explicit
    torch.cuda.synchronize() (a bare runtime call) keeps its trace attribution. Other records' op names are not
    relied on: light mode pairs warnings with the profiler's syncs by position, which one extra warning shifts.

    Then by place: a sync inside an op that no record paired in time takes the line of the records of its function
    (same file and function) when they all name one line, as a module-level loop's one ``.item()`` does.
    """
    base = trace.metadata.get("header", {}).get("baseTimeNanoseconds")
    if not len(calls) or "t_ns" not in records:
        return calls
    start = calls["ts_ns"].to_numpy().astype(np.int64) + (int(base) if isinstance(base, (int, float)) else 0)
    end = start + np.nan_to_num(calls["blocked_ns"].to_numpy(dtype=float)).astype(np.int64)
    rec_t = pd.to_numeric(records["t_ns"], errors="coerce").to_numpy()
    good = np.isfinite(rec_t)
    if not good.any():
        return calls
    recs = records[good].reset_index(drop=True)
    rec_t = rec_t[good].astype(np.int64)
    in_op = calls["op"].astype(str).to_numpy() != calls["call"].astype(str).to_numpy()
    from_debug = recs["op"].astype(str).to_numpy() == "cuda_sync" if "op" in recs else np.zeros(len(recs), bool)
    rows_for = {}  # the calls each kind of record may pair with, by start
    for debug, ok in ((True, in_op), (False, np.ones(len(calls), bool))):
        rows = np.flatnonzero(ok)
        rows_for[debug] = rows[np.argsort(start[rows], kind="stable")]
    offset = _clock_offset(rec_t, from_debug, start, rows_for)
    if offset is None:
        return calls
    t = rec_t - offset
    longest = int((end - start).max())
    pairs = []  # (distance to the call's span, record row, call row)
    for r in range(len(t)):
        rows = rows_for[bool(from_debug[r])]
        lo = np.searchsorted(start[rows], t[r] - MATCH_TOLERANCE_NS - longest, side="left")
        hi = np.searchsorted(start[rows], t[r] + MATCH_TOLERANCE_NS, side="right")
        for c in rows[lo:hi]:
            d = max(0, int(start[c]) - int(t[r]), int(t[r]) - int(end[c]))
            if d <= MATCH_TOLERANCE_NS:
                pairs.append((d, r, int(c)))
    paired: dict[int, int] = {}  # call row → record row
    used: set[int] = set()
    for _, r, c in sorted(pairs):
        if c not in paired and r not in used:
            paired[c] = r
            used.add(r)
    calls = calls.copy()
    cols = {c: calls.columns.get_loc(c) for c in ("location", "line", "file", "function", "line_exact")}

    def take(row: int, rec) -> None:
        line = pd.to_numeric(rec.get("line"), errors="coerce")
        if not (np.isfinite(line) and line > 0):
            return  # a record with no line gives none
        calls.iat[row, cols["location"]] = str(rec.get("location") or f"{rec.get('file')}:{int(line)}")
        calls.iat[row, cols["line"]] = int(line)
        calls.iat[row, cols["file"]] = rec.get("file")
        calls.iat[row, cols["function"]] = rec.get("function")
        calls.iat[row, cols["line_exact"]] = True

    for row, r in paired.items():
        take(row, recs.iloc[r])
    for row, r in _line_by_place(calls, recs, in_op).items():
        if not calls.iat[row, cols["line_exact"]]:
            take(row, recs.iloc[r])
    return calls


OFFSET_BIN_NS = 100_000  # record-minus-call differences this close are one clock offset


def _clock_offset(rec_t: np.ndarray, from_debug: np.ndarray, start: np.ndarray, rows_for: dict) -> int | None:
    """The records' clock minus the trace's: the median of the differences (record to its nearest call start) in
    the densest OFFSET_BIN_NS, the one nearest zero on a tie; None when no record has a call to pair with."""
    diffs = []
    for r, t_r in enumerate(rec_t):
        rows = rows_for[bool(from_debug[r])]
        if not len(rows):
            continue
        k = int(np.searchsorted(start[rows], t_r))
        diffs.append(min((int(t_r) - int(start[rows[j]]) for j in (k - 1, k) if 0 <= j < len(rows)), key=abs))
    if not diffs:
        return None
    d = np.sort(np.asarray(diffs, dtype=np.int64))
    inside = np.searchsorted(d, d + OFFSET_BIN_NS, side="right") - np.arange(len(d))  # diffs in [d_i, d_i + bin]
    best = np.flatnonzero(inside == inside.max())
    i = int(min(best, key=lambda j: abs(int(d[j]) + OFFSET_BIN_NS // 2)))
    return int(np.median(d[i : i + inside[i]]))


def _line_by_place(calls: pd.DataFrame, recs: pd.DataFrame, in_op: np.ndarray) -> dict:
    """{call row: record row} for syncs inside an op, not paired in time, whose function (file and function) the
    records saw at one line only."""
    if not {"file", "function", "line"} <= set(recs.columns):
        return {}
    rec_file = recs["file"].astype(str).str.replace("\\", "/", regex=False).to_numpy()
    rec_fn = recs["function"].astype(str).to_numpy()
    rec_line = pd.to_numeric(recs["line"], errors="coerce").to_numpy()
    out = {}
    for row in np.flatnonzero(~calls["line_exact"].to_numpy(bool) & in_op):
        file, function = calls["file"].iat[row], calls["function"].iat[row]
        if not isinstance(file, str) or not isinstance(function, str):
            continue
        tail = "/" + file.replace("\\", "/").lstrip("./")
        same = (rec_fn == function) & np.array([f == file or f.endswith(tail) for f in rec_file], dtype=bool)
        lines = np.unique(rec_line[same & np.isfinite(rec_line) & (rec_line > 0)])
        if len(lines) == 1:
            out[int(row)] = int(np.flatnonzero(same & (rec_line == lines[0]))[0])
    return out


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
