"""Communication across ranks: who arrives last at collectives, how long the others wait, overlap.

Definitions are in :mod:`diagnose.derive.collectives` (matching, wait, clock assumption, overlap) and
``docs/comm.md``. Point-to-point kernels (SendRecv) pair a rank with its peer, not with every
rank, so they count in comm time and overlap but not in waits or stragglers. A trace with no
collectives gives an empty result (no finding noise).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.derive import collectives as col
from diagnose.derive.derived import Derived
from diagnose.findings import Evidence, Finding, Result, Severity, Subject
from diagnose.formatting import ms_human, n_things, pct_human, share_human
from diagnose.ingest.profile_data import Profile
from diagnose.metrics import HIGHER, LOWER, NEUTRAL, Metric
from diagnose.thresholds import Thresholds

NAME = "comm"
ORDER = 40
SECTION = "section-comm"
TITLE = "Collectives across ranks"  # its report section's heading
JUDGES = "collectives"  # what "Nothing crossed a threshold: judged ..." names
COST_BASIS = "the step time"  # what its findings' cost_share is a share of, in the verdict's words
COST_BASIS_BY_ID = {  # findings whose cost_share is a share of something else
    "comm.low_overlap": "the traced time",
}
THRESHOLDS = ("comm",)  # the Thresholds groups it reads (diagnose/thresholds.py)
SUMMARY_METRICS = (  # what analyze() writes into Result.summary, also as rank<N>.<key> (diagnose.metrics)
    Metric("comm_overlap_pct", "Communication overlapped with compute", "%", HIGHER, 0.01),
    Metric("comm_time_share", "Time in communication", "share", LOWER, 0.001),
    Metric("comm_wait_ms_per_step", "Wait for other ranks per step", "ms", LOWER, 0.001),  # 1 us timestamps
    Metric("comm_wait_step_share", "Step time waiting for other ranks", "share", LOWER, 0.001),
    Metric("comm_collectives_matched", "Collectives matched across ranks", "count", NEUTRAL, 1),
)
FINDING_IDS = (  # every id this analyzer can produce: `gpudiag check --ignore` validates against them
    "comm.low_overlap",
    "comm.single_rank",
    "comm.straggler",
    "comm.wait_dominates",
)
MIN_COLLECTIVES = 3  # fewer matched collectives say nothing about a persistent straggler
MAX_TIMELINE_ROWS = 6000


def analyze(profile: Profile, derived: Derived, th: Thresholds = Thresholds()) -> Result:
    result = Result(NAME)
    occ, times, figures, worlds = [], {}, {}, []
    for rank in sorted(derived.traces):
        part = derived.rank_part(NAME, rank, lambda r=rank: rank_part(profile, derived, r, th))
        worlds.append(part["world_size"])
        if len(part["occurrences"]):
            occ.append(part["occurrences"])
            times[rank] = part["times"]
            figures[rank] = part["figures"]
    times = col.RankTimesByRank(times)  # a cluster read's are on disk: read (for the timeline) one rank at a time
    if not occ:
        return result
    occ = pd.concat(occ, ignore_index=True)
    on_gpu = bool((occ["source"] == "kernel").any())
    ranks = sorted(figures)
    world = next((w for w in worlds if w is not None), None)
    result.meta.update(
        {
            "ranks": ranks,
            "world_size": world,
            "source": "NCCL kernels" if on_gpu else "gloo cpu ops",
            "clock": "one clock for all ranks (same host); see docs/comm.md",
        }
    )

    overlap = _overlap_table(figures) if on_gpu else pd.DataFrame()
    result.tables["overlap"] = overlap
    if len(overlap):
        tot = overlap["comm_ms"].sum()
        result.summary["comm_overlap_pct"] = (
            float(100.0 * overlap["overlapped_ms"].sum() / tot) if tot else float("nan")
        )
        result.summary["comm_time_share"] = float(overlap["comm_ms"].sum() / overlap["span_ms"].sum())
        for r in overlap.itertuples():
            result.summary[f"rank{r.rank}.comm_overlap_pct"] = float(r.overlap_pct)
            result.summary[f"rank{r.rank}.comm_time_share"] = float(r.comm_time_share)
        result.findings.extend(_low_overlap(overlap, th))

    matched = col.match(occ[~occ["op"].isin(col.P2P_OPS)]) if len(ranks) >= 2 else col.match(occ.iloc[:0])
    p2p = col.match(occ[occ["op"].isin(col.P2P_OPS)]) if len(ranks) >= 2 else matched
    result.tables["waits"] = _wait_table(pd.concat([matched, p2p], ignore_index=True))
    if len(ranks) < 2:
        result.findings.append(
            Finding(
                id="comm.single_rank",
                analyzer=NAME,
                severity=Severity.INFO,
                title=f"Collectives found on one rank only (rank {ranks[0]}): waits and stragglers need two or more ranks",
                subjects=(Subject("rank", f"rank {ranks[0]}"),),
                evidence=(Evidence("collectives", float(len(occ)), "count"),),
                recommendation="Profile every rank (`gpudiag profile -- torchrun --nproc-per-node N train.py` writes "
                "trace/rank<N>.json.gz for each) and report the run folder.",
                section=SECTION,
            )
        )
        result.tables["timeline"] = _timeline(occ, col.match(occ.iloc[:0]), times, figures, None)
        return result

    per_step = _per_step(matched, figures)
    result.tables["per_step"] = per_step
    rank_table = _rank_table(matched, per_step, overlap, ranks)
    result.tables["ranks"] = rank_table
    if len(matched):
        spread = matched.groupby("cid")["end_ns"].agg(lambda s: s.max() - s.min())
        result.meta["end_spread_us_median"] = float(spread.median() / 1e3)
        result.summary["comm_wait_ms_per_step"] = float(rank_table["wait_ms_per_step"].mean())
        result.summary["comm_wait_step_share"] = float(rank_table["wait_step_share"].mean())
        for r in rank_table.itertuples():
            result.summary[f"rank{r.rank}.comm_wait_ms_per_step"] = float(r.wait_ms_per_step)
        result.summary["comm_collectives_matched"] = float(matched["cid"].nunique())
        result.findings.extend(_straggler(matched, per_step, rank_table, times, th, on_gpu, world))
        result.findings.extend(_wait_dominates(matched, rank_table, th))
    step = _timeline_step(per_step)
    result.meta["timeline_step"] = step
    result.tables["timeline"] = _timeline(occ, pd.concat([matched, p2p], ignore_index=True), times, figures, step)
    return result


def rank_part(profile: Profile, derived: Derived, rank: int, th: Thresholds, lowest: int | None = None) -> dict:
    """What comm works out from one rank's trace alone: its collectives (one row per occurrence), its merged
    compute, busy and communication intervals (None without collectives) and the world size its trace states.
    A cluster read works it out on a worker and keeps the intervals on disk (diagnose.cluster)."""
    trace = derived.traces[rank]
    gpu = trace.gpu
    has_comm = len(gpu) and bool((gpu["kind"] == "comm").any())
    o = col.occurrences(trace, rank, trace.collectives if has_comm else None)
    info = (trace.metadata.get("header") or {}).get("distributedInfo")
    world = int(info["world_size"]) if isinstance(info, dict) and isinstance(info.get("world_size"), int) else None
    times = col.rank_times(trace) if len(o) else None
    return {
        "occurrences": o,
        "times": times,
        "figures": col.time_figures(times) if times is not None else None,
        "world_size": world,
    }


def _overlap_table(figures: dict) -> pd.DataFrame:
    rows = []
    for rank, f in figures.items():
        o = f.overlap
        rows.append(
            {
                "rank": rank,
                "comm_ms": o["comm_ns"] / 1e6,
                "overlapped_ms": o["overlapped_ns"] / 1e6,
                "exposed_ms": o["exposed_ns"] / 1e6,
                "overlap_pct": o["overlap_pct"],
                "comm_time_share": o["comm_time_share"],
                "span_ms": o["span_ns"] / 1e6,
            }
        )
    return pd.DataFrame(rows)


def _per_step(m: pd.DataFrame, figures: dict) -> pd.DataFrame:
    """Per rank and step: wait, time in collectives, the step's length, GPU compute and idle in it."""
    rows = []
    for rank, f in figures.items():
        mine = m[m["rank"] == rank] if len(m) else m
        if len(f.steps):
            windows = [
                (int(s), int(a), int(b), c, u)
                for s, a, b, c, u in zip(
                    f.steps["step"], f.steps["ts_ns"], f.steps["end_ns"], f.step_compute_ns, f.step_busy_ns
                )
            ]
        else:  # no steps: the whole busy span, widened to the rank's matched collectives; it holds every interval
            t0, t1 = (f.busy_start_ns, f.busy_end_ns) if f.has_busy else (0, 0)
            if len(mine):
                t0, t1 = (
                    min(t0, int(mine["ts_ns"].min())) if t1 else int(mine["ts_ns"].min()),
                    max(t1, int(mine["end_ns"].max())),
                )
            windows = [(-1, t0, t1, f.compute_total_ns, f.busy_total_ns)]
        for step, t0, t1, compute_ns, busy_ns in windows:
            in_step = mine[mine["step"] == step] if len(mine) else mine
            rows.append(
                {
                    "rank": rank,
                    "step": step,
                    "step_ms": (t1 - t0) / 1e6,
                    "wait_ms": _union_ms(in_step["ts_ns"], in_step["ts_ns"] + in_step["wait_ns"]),
                    "collective_ms": float(in_step["dur_ns"].sum()) / 1e6 if len(in_step) else 0.0,
                    "last_count": int(in_step["is_last"].sum()) if len(in_step) else 0,
                    "collectives": int(len(in_step)),
                    "compute_ms": compute_ns / 1e6,
                    "gpu_idle_ms": ((t1 - t0) - busy_ns) / 1e6 if f.has_busy else float("nan"),
                    "t0_ns": t0,
                }
            )
    df = pd.DataFrame(rows)
    if len(m) and (m["step"] >= 0).any():
        df = df[df["step"].isin(set(m["step"]))]  # steps that hold matched collectives
    return df.reset_index(drop=True)


def _union_ms(ts: pd.Series, end: pd.Series) -> float:
    """Time spent waiting in at least one collective: concurrent collectives (gloo's worker threads) count once."""
    if not len(ts):
        return 0.0
    s, e = col.tl.merge(ts.to_numpy(dtype="int64"), end.to_numpy(dtype="int64"))
    return float((e - s).sum()) / 1e6


def _rank_table(m: pd.DataFrame, per_step: pd.DataFrame, overlap: pd.DataFrame, ranks: list[int]) -> pd.DataFrame:
    rows = []
    n_coll = m["cid"].nunique() if len(m) else 0
    for rank in ranks:
        ps = per_step[per_step["rank"] == rank]
        mine = m[m["rank"] == rank] if len(m) else m
        step_ms = ps["step_ms"].mean() if len(ps) else float("nan")
        wait = ps["wait_ms"].mean() if len(ps) else float("nan")
        rows.append(
            {
                "rank": rank,
                "steps": int(len(ps)),
                "collectives": int(len(mine)),
                "last_share": float(mine["is_last"].sum() / n_coll) if n_coll else float("nan"),
                "arrival_lag_ms_mean": float(mine["arrival_lag_ns"].mean() / 1e6) if len(mine) else float("nan"),
                "wait_ms_per_step": float(wait),
                "step_ms": float(step_ms),
                "wait_step_share": float(wait / step_ms) if step_ms else float("nan"),
                "compute_ms_per_step": float(ps["compute_ms"].mean()) if len(ps) else float("nan"),
                "gpu_idle_ms_per_step": float(ps["gpu_idle_ms"].mean()) if len(ps) else float("nan"),
            }
        )
    out = pd.DataFrame(rows)
    if len(overlap):
        out = out.merge(overlap[["rank", "overlap_pct"]], on="rank", how="left")
    return out


def _wait_table(m: pd.DataFrame) -> pd.DataFrame:
    """One row per matched collective, display-ready (ms from the first arrival)."""
    if not len(m):
        return pd.DataFrame(
            columns=[
                "collective",
                "step",
                "op",
                "group",
                "ranks",
                "straggler",
                "arrival_spread_ms",
                "max_wait_ms",
                "mean_wait_ms",
                "after_last_ms",
                "msg_mb",
                "p2p",
            ]
        )
    g = m.groupby(["cid", "p2p"], sort=True)
    rows = []
    for (cid, p2p), c in g:
        after = (c["end_ns"] - c["last_arrival_ns"]).clip(lower=0)
        rows.append(
            {
                "collective": f"#{cid}" + (" p2p" if p2p else ""),
                "step": int(c["step"].iloc[0]),
                "op": str(c["collective"].iloc[0]),
                "group": str(c["group"].iloc[0]),
                "ranks": int(len(c)),
                "straggler": f"rank {int(c['straggler'].iloc[0])}" if c["straggler"].iloc[0] >= 0 else "none",
                "arrival_spread_ms": float((c["ts_ns"].max() - c["ts_ns"].min()) / 1e6),
                "max_wait_ms": float(c["wait_ns"].max() / 1e6),
                "mean_wait_ms": float(c["wait_ns"].mean() / 1e6),
                "after_last_ms": float(after.min() / 1e6),
                "msg_mb": float(c["msg_bytes"].max() / 2**20),
                "p2p": bool(p2p),
            }
        )
    return pd.DataFrame(rows).sort_values(["p2p", "max_wait_ms"], ascending=[True, False]).reset_index(drop=True)


def _timeline_step(per_step: pd.DataFrame) -> int | None:
    """The step with the most wait over all ranks (the one that shows the problem)."""
    if not len(per_step):
        return None
    tot = per_step.groupby("step")["wait_ms"].sum()
    return int(tot.idxmax())


def _timeline(occ: pd.DataFrame, m: pd.DataFrame, times, figures: dict, step: int | None) -> pd.DataFrame:
    """Bars of one step per rank: merged compute, and each collective split into wait and the rest (ms)."""
    sel = occ if step is None else occ[occ["step"] == step]
    if not len(sel):
        return pd.DataFrame(columns=["rank", "lane", "start_ms", "end_ms", "label"])
    waits = m.set_index(["rank", "ts_ns"])["wait_ns"] if len(m) else pd.Series(dtype="int64")
    t0 = int(sel["ts_ns"].min())
    t1 = int(sel["end_ns"].max())
    for f in figures.values():
        if step is not None and len(f.steps) and (f.steps["step"] == step).any():
            w = f.steps[f.steps["step"] == step].iloc[0]
            t0, t1 = min(t0, int(w.ts_ns)), max(t1, int(w.end_ns))
    rows = []  # at most MAX_TIMELINE_ROWS are drawn: stop building there (a whole 1 GB trace has 500 k bars)
    for rank in times:  # each rank's intervals read only while there is room (a cluster read keeps them on disk)
        room = MAX_TIMELINE_ROWS - len(rows)
        if room <= 0:
            break
        s, e = times[rank].compute
        keep = (e > t0) & (s < t1)
        starts_ms = ((np.maximum(s[keep], t0)[:room] - t0) / 1e6).tolist()
        ends_ms = ((np.minimum(e[keep], t1)[:room] - t0) / 1e6).tolist()
        rows += [(rank, "compute", a, b, "compute kernels") for a, b in zip(starts_ms, ends_ms)]
    for r in sel.itertuples():
        if len(rows) >= MAX_TIMELINE_ROWS:
            break
        w = int(waits.get((r.rank, r.ts_ns), 0)) if len(waits) else 0
        if w > 0:
            rows.append((r.rank, "wait", (r.ts_ns - t0) / 1e6, (r.ts_ns + w - t0) / 1e6, f"{r.collective}: waiting"))
        rows.append((r.rank, "collective", (r.ts_ns + w - t0) / 1e6, (r.end_ns - t0) / 1e6, str(r.collective)))
    df = pd.DataFrame(rows[:MAX_TIMELINE_ROWS], columns=["rank", "lane", "start_ms", "end_ms", "label"])
    return df


def _low_overlap(overlap: pd.DataFrame, th: Thresholds) -> list[Finding]:
    c = th.comm
    low = overlap[(overlap["overlap_pct"] < c.overlap_low_pct) & (overlap["comm_time_share"] >= c.min_comm_share)]
    if not len(low):
        return []
    exposed_share = (low["exposed_ms"] / low["span_ms"]).to_numpy()
    worst = float(exposed_share.max())
    sev = Severity.of(worst, critical=c.exposed_critical_share, otherwise=Severity.WARNING)
    subjects = tuple(
        Subject(
            "rank",
            f"rank {int(r.rank)}",
            severity=Severity.of(e, critical=c.exposed_critical_share, otherwise=Severity.WARNING),
            figures={
                "overlap_pct": float(r.overlap_pct),
                "comm_ms": float(r.comm_ms),
                "exposed_comm_ms": float(r.exposed_ms),
                "exposed_share": float(e),
            },
        )
        for r, e in zip(low.itertuples(), exposed_share)
    )
    pooled = 100.0 * low["overlapped_ms"].sum() / low["comm_ms"].sum()
    return [
        Finding(
            id="comm.low_overlap",
            analyzer=NAME,
            severity=sev,
            title=f"Communication overlaps compute only {pct_human(pooled, 0)} of the time on "
            f"{n_things(len(low), 'rank')}; exposed communication is up to {share_human(worst, 0)} of the trace",
            subjects=subjects,
            evidence=(
                Evidence("comm_overlap_pct", float(pooled), "%", c.overlap_low_pct),
                Evidence("comm_time_share", float(low["comm_time_share"].max()), "share", c.min_comm_share),
                Evidence("exposed_comm_share", worst, "share", c.exposed_critical_share),
            ),
            cost_share=worst,
            recommendation="Start gradient communication while the backward still computes. DDP: lower bucket_cap_mb "
            "(default 25) so the first buckets are ready sooner, keep gradient_as_bucket_view=True and "
            "find_unused_parameters=False; with gradient accumulation wrap the non-final micro-steps in "
            "`model.no_sync()` so only one all-reduce per optimizer step is exposed. FSDP: "
            "backward_prefetch=BACKWARD_PRE and forward_prefetch=True. Keep host syncs (.item(), "
            ".cpu()) out of the backward: they stop the CPU from queueing the compute that should overlap.",
            section=SECTION,
        )
    ]


def _straggler(m, per_step, rank_table, times, th, on_gpu, world) -> list[Finding]:
    c = th.comm
    n = m["cid"].nunique()
    if n < MIN_COLLECTIVES:
        return []
    top = rank_table.sort_values("last_share", ascending=False).iloc[0]
    if not top["last_share"] > c.straggler_share:
        return []
    rank = int(top["rank"])
    mine = m[m["is_last"] & (m["rank"] == rank)]
    lag_ms = float((mine["ts_ns"].to_numpy() - mine["first_arrival_ns"].to_numpy()).mean() / 1e6)
    caused_ms = float(per_step[per_step["rank"] != rank].groupby("rank")["wait_ms"].mean().mean())
    step_ms = float(rank_table["step_ms"].mean())
    share = caused_ms / step_ms if step_ms else None
    cause, advice = _cause(rank, rank_table, lag_ms, on_gpu)
    sev = Severity.of(share, critical=c.wait_share_critical, otherwise=Severity.WARNING)  # None: warning
    partial = f" (among the {len(rank_table)} of {world} ranks traced)" if world and world > len(rank_table) else ""
    return [
        Finding(
            id="comm.straggler",
            analyzer=NAME,
            severity=sev,
            title=f"Rank {rank} is the last to arrive at {share_human(top['last_share'], 0)} of collectives{partial}, "
            f"{ms_human(lag_ms)} behind the first; the other ranks wait {ms_human(caused_ms)} per step for it ({cause})",
            subjects=(
                Subject(
                    "rank",
                    f"rank {rank}",
                    severity=sev,
                    figures={
                        "rank": rank,
                        "last_share": float(top["last_share"]),
                        "arrival_lag_ms": lag_ms,
                        "caused_wait_ms_per_step": caused_ms,
                        "compute_ms_per_step": float(top["compute_ms_per_step"]),
                        "gpu_idle_ms_per_step": float(top["gpu_idle_ms_per_step"]),
                        "cause": cause,
                    },
                ),
            ),
            evidence=(
                Evidence("straggler_last_share", float(top["last_share"]), "share", c.straggler_share),
                Evidence("straggler_arrival_lag_ms", lag_ms, "ms"),
                Evidence("caused_wait_ms_per_step", caused_ms, "ms"),
                Evidence(
                    "caused_wait_step_share",
                    share if share is not None else float("nan"),
                    "share",
                    c.wait_share_critical,
                ),
            ),
            cost_share=share,
            recommendation=advice,
            section=SECTION,
        )
    ]


def _cause(rank: int, rank_table: pd.DataFrame, lag_ms: float, on_gpu: bool) -> tuple[str, str]:
    """Why the straggler is late: more GPU compute per step than the others, or an idle GPU (the host was late)."""
    if not on_gpu:
        return (
            "cause not visible in a CPU-only trace",
            f"Look at what rank {rank} does before its collectives (data loading, extra work, a host sync) and "
            "even it out across ranks.",
        )
    me = rank_table[rank_table["rank"] == rank].iloc[0]
    rest = rank_table[rank_table["rank"] != rank]
    extra_compute = float(me["compute_ms_per_step"] - rest["compute_ms_per_step"].median())
    extra_idle = float(me["gpu_idle_ms_per_step"] - rest["gpu_idle_ms_per_step"].median())
    if extra_compute >= 0.5 * lag_ms and extra_compute >= extra_idle:
        return (
            f"{ms_human(extra_compute)} more GPU compute per step than the others",
            f"Rank {rank} computes more per step: balance the work, e.g. the same number of samples and tokens "
            "per rank (a length-bucketed or padded DistributedSampler, drop_last=True), and the same model "
            "partition size (FSDP/pipeline stages).",
        )
    if extra_idle >= 0.5 * lag_ms:
        return (
            f"its GPU idles {ms_human(extra_idle)} more per step: the host is late",
            f"Rank {rank}'s GPU runs dry before the collective because its host launches late: find the host "
            "sync (.item(), .cpu(), torch.cuda.synchronize), data loading stall or CPU work on that rank (see "
            "the sync and idle sections), move it after the backward or off the critical path, and give the "
            "DataLoader enough workers with pin_memory=True.",
        )
    return (
        "cause unclear from the GPU timeline",
        f"Compare rank {rank}'s step with the others in the timeline: its collectives start later although its "
        "GPU compute and idle time are close to theirs; check its input data and host-side work.",
    )


def _wait_dominates(m: pd.DataFrame, rank_table: pd.DataFrame, th: Thresholds) -> list[Finding]:
    c = th.comm
    bad = rank_table[rank_table["wait_step_share"] >= c.wait_share_warning]
    if not len(bad):
        return []
    worst = float(bad["wait_step_share"].max())
    sev = Severity.of(worst, critical=c.wait_share_critical, otherwise=Severity.WARNING)
    subjects = [
        Subject(
            "rank",
            f"rank {int(r.rank)}",
            severity=Severity.of(r.wait_step_share, critical=c.wait_share_critical, otherwise=Severity.WARNING),
            figures={
                "wait_ms_per_step": float(r.wait_ms_per_step),
                "step_ms": float(r.step_ms),
                "wait_step_share": float(r.wait_step_share),
            },
        )
        for r in bad.itertuples()
    ]
    by = (
        m.groupby("cid")
        .agg(
            wait_ns=("wait_ns", "sum"),
            op=("collective", "first"),
            step=("step", "first"),
            straggler=("straggler", "first"),
        )
        .sort_values("wait_ns", ascending=False)
        .head(5)
    )
    subjects += [
        Subject(
            "collective",
            f"#{cid} {r.op} (step {int(r.step)})",
            figures={"wait_ms": float(r.wait_ns / 1e6), "straggler_rank": int(r.straggler)},
        )
        for cid, r in by.iterrows()
    ]
    return [
        Finding(
            id="comm.wait_dominates",
            analyzer=NAME,
            severity=sev,
            title=f"Ranks wait for each other in collectives {share_human(worst, 0)} of the step "
            f"({ms_human(float(bad['wait_ms_per_step'].max()))} per step on the worst rank)",
            subjects=tuple(subjects),
            evidence=(
                Evidence("comm_wait_step_share", worst, "share", c.wait_share_warning),
                Evidence("comm_wait_ms_per_step", float(bad["wait_ms_per_step"].max()), "ms"),
            ),
            cost_share=worst,
            recommendation="Waiting in a collective is time lost to the slowest rank. Remove the cause of lateness "
            "(see comm.straggler: unequal data or work, a host sync or data loading on one rank); with no "
            "persistent straggler, cut how often ranks synchronise: `model.no_sync()` for the non-final "
            "micro-steps of gradient accumulation, fewer and larger buckets (bucket_cap_mb), and no "
            "host sync between forward and backward.",
            section=SECTION,
        )
    ]
