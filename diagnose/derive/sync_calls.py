"""One rank's host syncs as a table: each blocking sync call of the trace, its op, its user frame, its step, and
the GPU idle it causes.

Shared because the sync analyzer and the step budget must count and cost the same syncs (issue 28): a sync's cost
is the GPU idle of the gap it leaves, less the input fetching inside it (:func:`rank_calls`), and its location the
exact line of the sync record ``gpudiag profile`` made with it (:func:`apply_records`), else the trace's frame.
Kineto names a frame by the function's *first* line, so with only a trace the location is the function
(module-level code has no line at all: ``file (module level)``, never ``file:0``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.derive import trace_timeline as tl
from diagnose.derive.trace_input_wait import input_fetches, input_inside_gaps, source_dirs_of
from diagnose.ingest.profile_data import Profile
from diagnose.thresholds import Thresholds

NO_FRAME = "(no Python frame in the trace)"
MATCH_TOLERANCE_NS = 2_000_000
MODULE = "<module>"  # Kineto's name of module-level code's frame


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


def trace_location(file, line, function) -> str:
    """A location from a trace frame: ``file:line`` with the function's first line; module-level code has no line
    (Kineto gives its frame the line it was at when profiling began, or 0), nor has a frame of unknown line."""
    if function == MODULE:
        return f"{file} (module level)"
    if isinstance(line, (int, np.integer)) and line > 0:
        return f"{file}:{int(line)}"
    return f"{function}() in {file}" if function else str(file)


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
    else:  # nothing repeats in the trace (diagnose.derive.trace_iterations): figures over the span, never "per step"
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
        "library_location": None,  # a light-mode record's library frame, where a library made the call
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
    if "library_location" not in calls:
        calls["library_location"] = None
    calls["library_location"] = calls["library_location"].astype(object)
    cols = {
        c: calls.columns.get_loc(c) for c in ("location", "line", "file", "function", "line_exact", "library_location")
    }

    def take(row: int, rec) -> None:
        line = pd.to_numeric(rec.get("line"), errors="coerce")
        if not (np.isfinite(line) and line > 0):
            return  # a record with no line gives none
        calls.iat[row, cols["location"]] = str(rec.get("location") or f"{rec.get('file')}:{int(line)}")
        calls.iat[row, cols["line"]] = int(line)
        calls.iat[row, cols["file"]] = rec.get("file")
        calls.iat[row, cols["function"]] = rec.get("function")
        calls.iat[row, cols["line_exact"]] = True
        library = rec.get("library_location")
        calls.iat[row, cols["library_location"]] = library if isinstance(library, str) and library else None

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
