"""Which interval encloses which, on one thread: the call tree of a trace, vectorised.

Profiler events of one thread nest (a Python frame holds an aten op, which holds a
``cudaLaunchKernel``). Kineto gives no parent link for ops, so the tree is rebuilt
from times: an interval's parent is the innermost earlier-starting interval of the
same thread that ends no earlier. Both functions work on whole arrays with pointer
jumping (a few numpy passes), never one Python step per event.
"""

from __future__ import annotations

import numpy as np


def thread_key(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """One int64 per (pid, tid), so one array groups events by thread."""
    return (pid.astype(np.int64) << 32) ^ (tid.astype(np.int64) & 0xFFFFFFFF)


def nesting_order(ts: np.ndarray, end: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Rows by group, then start, then the longer first: an interval comes after every one that holds it.

    Both functions below need it; a caller that runs both on the same intervals sorts them once.
    """
    return np.lexsort((-end, ts, group))


def parents(
    ts: np.ndarray, end: np.ndarray, group: np.ndarray, tol: int = 0, order: np.ndarray | None = None
) -> np.ndarray:
    """Row index of each interval's innermost enclosing interval in the same group, or -1."""
    n = len(ts)
    out = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return out
    if order is None:
        order = nesting_order(ts, end, group)
    est = np.arange(-1, n - 1, dtype=np.int64)
    s_g = group[order]
    est[1:][s_g[1:] != s_g[:-1]] = -1
    del s_g  # temporaries go as soon as they are used: a 1 GB trace's 1.9 M ops make each one 15 MB
    s_end = end[order]
    active = np.flatnonzero(est >= 0)
    while active.size:
        reach = s_end[est[active]]
        reach += tol
        bad = active[reach < s_end[active]]
        del reach
        if not bad.size:
            break
        est[bad] = est[est[bad]]
        active = bad[est[bad] >= 0]
    del s_end, active
    found = np.flatnonzero(est >= 0)
    out[order[found]] = order[est[found]]
    return out


def enclosing(
    ts: np.ndarray,
    end: np.ndarray,
    group: np.ndarray,
    parent: np.ndarray,
    q_ts: np.ndarray,
    q_end: np.ndarray,
    q_group: np.ndarray,
    tol: int = 0,
    order: np.ndarray | None = None,
) -> np.ndarray:
    """For each query interval, the row of the innermost interval (of ``ts``/``end``) holding it, or -1.

    ``parent`` is what :func:`parents` gave for the same intervals (``order``: their :func:`nesting_order`).
    """
    out = np.full(len(q_ts), -1, dtype=np.int64)
    if not len(ts) or not len(q_ts):
        return out
    if order is None:
        order = nesting_order(ts, end, group)
    s_ts, s_g = ts[order], group[order]
    rank_of_row = np.empty(len(order), dtype=np.int64)
    rank_of_row[order] = np.arange(len(order))
    s_parent = np.where(parent[order] >= 0, rank_of_row[np.maximum(parent[order], 0)], -1)
    s_end = end[order]
    starts = np.concatenate(([0], np.flatnonzero(s_g[1:] != s_g[:-1]) + 1))  # s_g is sorted: no np.unique
    groups, stops = s_g[starts], np.append(starts[1:], len(s_g))
    cand = np.full(len(q_ts), -1, dtype=np.int64)
    for g, lo, hi in zip(groups, starts, stops):
        qi = np.nonzero(q_group == g)[0]
        if qi.size:
            cand[qi] = lo + np.searchsorted(s_ts[lo:hi], q_ts[qi], side="right") - 1
            cand[qi[cand[qi] < lo]] = -1
    active = np.nonzero(cand >= 0)[0]
    while active.size:
        bad = active[s_end[cand[active]] + tol < q_end[active]]
        if not bad.size:
            break
        cand[bad] = s_parent[cand[bad]]
        active = bad[cand[bad] >= 0]
    found = cand >= 0
    out[found] = order[cand[found]]
    return out
