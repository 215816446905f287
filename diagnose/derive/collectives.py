"""Collectives of a multi-rank run: found per rank, matched across ranks, timed against each other.

Which events are collectives. On the GPU, the NCCL/RCCL kernels (``Trace.gpu`` rows of kind
``comm``: ``ncclKernel_*`` before NCCL 2.19, ``ncclDevKernel_*`` after; the operation is the
word after ``Kernel_``). With the gloo backend there are no kernels: the ``gloo:<op>`` user
annotations (or cpu ops) are the collectives, each lasting from when its worker thread began it until it completed.

How they are matched. A collective is identified on every rank by
``(step, group, op, k)``: the ProfilerStep it was launched in (the same number on every rank),
its process group (Kineto's "Process Group Name" on the kernel when the trace has it, else the
rank's n-th NCCL stream in order of first use), the operation, and its order ``k`` among
collectives with the same step, group and op. Without ProfilerStep annotations ``step`` is -1
and ``k`` counts over the whole trace, so the ranks' profiler windows must then start at
the same collective.

Timing. Every rank's timestamps are taken as one clock: true for ranks on one host (Kineto
writes the host's system clock); across hosts it holds only as far as the hosts' clocks agree
(NTP: often within a millisecond or two, which is the size of the waits measured). The median
spread of the ranks' *end* times of matched collectives is kept as a check: a ring
collective ends on every rank within microseconds, so a spread of milliseconds means skewed
clocks, not a straggler. For one collective, a rank *arrives* when its kernel (or cpu op)
starts; its ``wait`` is the time it spent inside the collective before the last rank arrived,
``min(last_arrival, end) - start``; the last to arrive is the straggler of that collective.

Overlap (the definition of HTA's ``get_comm_comp_overlap``): per rank, the time compute kernels
ran while communication kernels ran (unions of intervals of each) over the time communication
kernels ran.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from diagnose.derive import trace_timeline as tl

P2P_OPS = frozenset({"sendrecv", "send", "recv"})
_KERNEL_OP = re.compile(r"^(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z0-9]+)", re.I)
_CPU_COLLECTIVE = re.compile(r"^gloo:(\w+)$")

OCCURRENCE_COLUMNS = [
    "rank",
    "source",
    "ts_ns",
    "end_ns",
    "dur_ns",
    "op",
    "collective",
    "group",
    "step",
    "k",
    "msg_bytes",
    "name",
]


@dataclass
class RankTimes:
    """Per rank: the step windows and, for GPU traces, the merged compute and GPU-busy intervals."""

    steps: pd.DataFrame  # step, ts_ns, end_ns
    compute: tuple[np.ndarray, np.ndarray]
    busy: tuple[np.ndarray, np.ndarray]
    comm: tuple[np.ndarray, np.ndarray]
    span_ns: int


def kernel_op(name: str) -> str:
    """``ncclDevKernel_AllGather_RING_LL(...)`` → ``allgather``; the lower-cased name when it is not NCCL's."""
    m = _KERNEL_OP.match(name)
    return m.group(1).lower() if m else name.split("(")[0].lower()


def step_windows(trace) -> pd.DataFrame:
    """ProfilerStep#N annotations of the (analysed) trace as ``step, ts_ns, end_ns``."""
    ann = trace.annotations
    if not len(ann):
        return pd.DataFrame(
            {
                "step": pd.Series([], dtype="int64"),
                "ts_ns": pd.Series([], dtype="int64"),
                "end_ns": pd.Series([], dtype="int64"),
            }
        )
    prof = ann[ann["step"].notna() & (ann["cat"].astype(str) == "user_annotation")]
    out = pd.DataFrame({"step": prof["step"].astype("int64"), "ts_ns": prof["ts_ns"], "end_ns": prof["end_ns"]})
    return out.drop_duplicates("step").sort_values("ts_ns").reset_index(drop=True)


def _step_of(times: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """The step whose window holds each time, else -1."""
    out = np.full(len(times), -1, dtype=np.int64)
    if not len(steps) or not len(times):
        return out
    starts, ends = steps["ts_ns"].to_numpy(), steps["end_ns"].to_numpy()
    i = np.searchsorted(starts, times, side="right") - 1
    ok = (i >= 0) & (times < ends[np.maximum(i, 0)])
    out[ok] = steps["step"].to_numpy()[i[ok]]
    return out


def occurrences(trace, rank: int, metadata: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every collective of one rank's trace (GPU kernels, else gloo cpu ops), one row each, with its match key."""
    a = tl.analysed(trace)
    steps = step_windows(a)
    gpu = a.gpu
    comm = gpu[(gpu["kind"] == "comm").to_numpy(dtype=bool, na_value=False)] if len(gpu) else gpu
    if len(comm):
        names = comm["name"].astype(str)
        op = names.map(kernel_op).to_numpy(dtype=object)
        ri = comm["runtime_index"].to_numpy()
        launch = np.where(
            ri >= 0, a.runtime["ts_ns"].to_numpy()[np.maximum(ri, 0)] if len(a.runtime) else 0, comm["ts_ns"].to_numpy()
        )
        ordinal = {s: i for i, s in enumerate(pd.unique(comm["stream"]))}
        group = np.array([f"stream{ordinal[s]}" for s in comm["stream"]], dtype=object)
        collective = op.copy()
        msg = np.full(len(comm), np.nan)
        if metadata is not None and len(metadata):
            kern = metadata[(metadata["source"] == "kernel") & (metadata["correlation"] >= 0)]
            kern = kern.drop_duplicates("correlation", keep=False).set_index("correlation")
            corr = comm["correlation"].to_numpy()
            hit = kern.reindex(corr)
            has = hit["pg_name"].notna().to_numpy()
            group[has] = ("pg" + hit["pg_name"].astype(str)).to_numpy()[has]
            named = hit["collective"].notna().to_numpy()
            collective[named] = hit["collective"].to_numpy()[named]
            msg = hit["msg_bytes"].to_numpy(dtype=float)
        df = pd.DataFrame(
            {
                "rank": rank,
                "source": "kernel",
                "ts_ns": comm["ts_ns"].to_numpy(),
                "end_ns": comm["end_ns"].to_numpy(),
                "dur_ns": comm["dur_ns"].to_numpy(),
                "op": op,
                "collective": collective,
                "group": group,
                "step": _step_of(launch, steps),
                "msg_bytes": msg,
                "name": names.to_numpy(),
            }
        )
    else:
        # gloo's record_function shows up as a user_annotation (torch 2.x) or a cpu_op
        cols = ["ts_ns", "end_ns", "dur_ns", "name"]
        ops = pd.concat([a.cpu_ops[cols], a.annotations[cols]], ignore_index=True)
        if not len(ops):
            return pd.DataFrame(columns=OCCURRENCE_COLUMNS)
        names = ops["name"].astype(str)
        m = names.str.extract(_CPU_COLLECTIVE, expand=False)
        sel = m.notna().to_numpy()
        if not sel.any():
            return pd.DataFrame(columns=OCCURRENCE_COLUMNS)
        cpu = ops[sel]
        op = m[sel].str.lower().to_numpy(dtype=object)
        df = pd.DataFrame(
            {
                "rank": rank,
                "source": "cpu_op",
                "ts_ns": cpu["ts_ns"].to_numpy(),
                "end_ns": cpu["end_ns"].to_numpy(),
                "dur_ns": cpu["dur_ns"].to_numpy(),
                "op": op,
                "collective": op,
                "group": "gloo",
                "step": _step_of(cpu["ts_ns"].to_numpy(), steps),
                "msg_bytes": np.nan,
                "name": names[sel].to_numpy(),
            }
        )
    df = df.sort_values(["ts_ns", "end_ns"], kind="stable").reset_index(drop=True)
    df["k"] = df.groupby(["step", "group", "op"]).cumcount()
    return df[OCCURRENCE_COLUMNS]


class RankTimesByRank(Mapping):
    """rank → RankTimes, where a value may be kept elsewhere (a cluster read keeps each rank's on disk, an object
    with ``load()``): it is read each time it is asked for and not kept, so the cross-rank step holds one rank's
    intervals at a time."""

    def __init__(self, times: dict):
        self._times = dict(times)

    def __getitem__(self, rank: int) -> RankTimes:
        value = self._times[rank]
        return value.load() if hasattr(value, "load") else value

    def __iter__(self):
        return iter(self._times)

    def __len__(self) -> int:
        return len(self._times)


def rank_times(trace) -> RankTimes:
    """Merged compute, busy and communication intervals of one rank's analysed trace, and its steps."""
    a = tl.analysed(trace)
    gpu = a.gpu
    kind = tl.names_at(gpu["kind"], slice(None)) if len(gpu) else np.array([], dtype=object)
    ts, end = gpu["ts_ns"].to_numpy(), gpu["end_ns"].to_numpy()
    span = int(end.max() - ts.min()) if len(gpu) else 0
    return RankTimes(
        step_windows(a),
        tl.merge(ts[kind == "compute"], end[kind == "compute"]),
        tl.merge(ts, end),
        tl.merge(ts[kind == "comm"], end[kind == "comm"]),
        span,
    )


def intersection_ns(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> int:
    """Total time two sets of disjoint sorted intervals overlap (HTA's sweep: both running at once)."""
    (s1, e1), (s2, e2) = a, b
    if not len(s1) or not len(s2):
        return 0
    t = np.concatenate([s1, e1, s2, e2])
    d = np.concatenate([np.ones(len(s1)), -np.ones(len(e1)), 2 * np.ones(len(s2)), -2 * np.ones(len(e2))])
    order = np.lexsort((d, t))  # at equal times, ends (negative) first: no zero-length spurious overlap
    t, running = t[order], np.cumsum(d[order])
    return int(np.sum(np.diff(t)[running[:-1] == 3]))


def clipped_ns(iv: tuple[np.ndarray, np.ndarray], t0: int, t1: int) -> int:
    """Time of disjoint intervals ``iv`` inside ``[t0, t1)``."""
    s, e = iv
    return int(np.clip(np.minimum(e, t1) - np.maximum(s, t0), 0, None).sum()) if len(s) else 0


def overlap(times: RankTimes) -> dict:
    """Comm time, the compute time during it and their ratio (HTA's comp_comm_overlap) for one rank."""
    comm_ns = int((times.comm[1] - times.comm[0]).sum())
    both = intersection_ns(times.comm, times.compute)
    return {
        "comm_ns": comm_ns,
        "overlapped_ns": both,
        "exposed_ns": comm_ns - both,
        "overlap_pct": 100.0 * both / comm_ns if comm_ns else float("nan"),
        "comm_time_share": comm_ns / times.span_ns if times.span_ns else float("nan"),
        "span_ns": times.span_ns,
    }


@dataclass
class TimeFigures:
    """What comm's cross-rank step needs of one rank's RankTimes, worked out with the rank's part: its steps, the
    compute and busy time inside each, its totals and busy span, and its overlap. The intervals themselves are then
    read only for the timeline's one step (a cluster read keeps them on disk)."""

    steps: pd.DataFrame  # step, ts_ns, end_ns
    step_compute_ns: list[int]  # per row of steps: compute time inside [ts_ns, end_ns)
    step_busy_ns: list[int]  # per row of steps: GPU-busy time inside it
    has_busy: bool
    busy_start_ns: int  # the busy intervals' span (0, 0 without any)
    busy_end_ns: int
    compute_total_ns: int
    busy_total_ns: int
    overlap: dict  # overlap(times)


def time_figures(times: RankTimes) -> TimeFigures:
    busy_s, busy_e = times.busy
    has_busy = bool(len(busy_s))
    steps = times.steps
    return TimeFigures(
        steps,
        [clipped_ns(times.compute, int(a), int(b)) for a, b in zip(steps["ts_ns"], steps["end_ns"])],
        [clipped_ns(times.busy, int(a), int(b)) for a, b in zip(steps["ts_ns"], steps["end_ns"])],
        has_busy,
        int(busy_s.min()) if has_busy else 0,
        int(busy_e.max()) if has_busy else 0,
        int((times.compute[1] - times.compute[0]).sum()) if len(times.compute[0]) else 0,
        int((busy_e - busy_s).sum()) if has_busy else 0,
        overlap(times),
    )


def match(occ: pd.DataFrame) -> pd.DataFrame:
    """Rows of collectives found on two or more ranks, with ``cid``, ``last_arrival_ns``, ``wait_ns``, ``is_last``."""
    if not len(occ):
        return occ.assign(cid=pd.Series([], dtype="int64"), wait_ns=pd.Series([], dtype="int64"))
    key = ["step", "group", "op", "k"]
    n = occ.groupby(key)["rank"].transform("nunique")
    m = occ[n >= 2].copy()
    if not len(m):
        return m.assign(cid=pd.Series([], dtype="int64"), wait_ns=pd.Series([], dtype="int64"))
    first = m.groupby(key)["ts_ns"].transform("min")
    m["cid"] = m.groupby(key, sort=False).ngroup()
    order = m.groupby("cid")["ts_ns"].transform("min").rank(method="dense").astype("int64") - 1
    m["cid"] = order.to_numpy()  # numbered in time order of first arrival
    m["first_arrival_ns"] = first
    m["last_arrival_ns"] = m.groupby("cid")["ts_ns"].transform("max")
    m["n_ranks"] = m.groupby("cid")["rank"].transform("nunique")
    m["wait_ns"] = np.clip(np.minimum(m["last_arrival_ns"], m["end_ns"]) - m["ts_ns"], 0, None).astype("int64")
    m["arrival_lag_ns"] = m["ts_ns"] - m["first_arrival_ns"]
    last_rank = m.sort_values(["cid", "ts_ns", "rank"], ascending=[True, False, True]).drop_duplicates("cid")
    m["straggler"] = m["cid"].map(last_rank.set_index("cid")["rank"])
    m.loc[m["last_arrival_ns"] == m["first_arrival_ns"], "straggler"] = -1  # all arrived at once: no straggler
    m["is_last"] = m["rank"] == m["straggler"]
    m["p2p"] = m["op"].isin(P2P_OPS)
    return m.sort_values(["cid", "rank"]).reset_index(drop=True)
