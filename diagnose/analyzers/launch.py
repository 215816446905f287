"""Launch statistics: kernels per step, launch rate, kernels shorter than their launch, launch queues.

A kernel that runs for less time than the ``cudaLaunchKernel`` that issued it cannot keep
the GPU busy: the host is the bottleneck. The finding names the ops (outermost CPU op
around the launches) with most such kernels per step: candidates to fuse
(``torch.compile``) or to capture in a CUDA graph.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.derive import jax_dispatch
from diagnose.derive import trace_timeline as tl
from diagnose.derive.derived import Derived
from diagnose.derive.trace_input_wait import input_fetches, input_idle_by_cause
from diagnose.findings import Evidence, Finding, Result, Severity, Subject, not_measured
from diagnose.ingest.profile_data import Profile
from diagnose.metrics import LOWER, NEUTRAL, Metric
from diagnose.thresholds import Thresholds

NAME = "launch"
ORDER = 22
SECTION = "section-launch"
TITLE = "Launch statistics"  # its report section's heading
JUDGES = "launch overhead"  # what "Nothing crossed a threshold: judged ..." names
COST_BASIS = "the traced time"  # what its findings' cost_share is a share of, in the verdict's words
COST_BASIS_BY_ID: dict[str, str] = {}  # no finding's basis differs
THRESHOLDS = ("sync",)  # the Thresholds groups it reads (diagnose/thresholds.py)
SUMMARY_METRICS = (  # what analyze() writes into Result.summary, per key() (diagnose.metrics)
    Metric("launch_kernels_per_step", "Kernel launches per step", "count", LOWER, 0.01),
    Metric("launch_kernels_in_span", "Kernel launches in the traced span (no iterations found)", "count", LOWER, 1),
    # the launch rate falls when kernels are fused: step time, not the rate, says whether that helped
    Metric("launch_rate_per_s", "Kernel launch rate", "/s", NEUTRAL, 1),
    Metric("launch_shorter_than_launch_pct", "Kernels shorter than their launch call", "%", LOWER, 0.01),
    # launch call to kernel start: how far the host runs ahead of the GPU, not a cost in itself
    Metric("launch_queue_median_ns", "Launch queue time, median", "ns", NEUTRAL, 1000),  # Kineto: 1 us
)
FINDING_IDS = (  # every id this analyzer can produce: `gpudiag check --ignore` validates against them
    "launch.launch_bound",
    "launch.not_measured",
)
# what the trace looks like, not why: ranks after a cause of the same severity (diagnose.findings.rank_findings)
SYMPTOM_FINDING_IDS = ("launch.launch_bound",)
TOP_QUEUES = 20


def analyze(profile: Profile, derived: Derived, th: Thresholds = Thresholds()) -> Result:
    result = Result(NAME)
    parts = {
        r: derived.rank_part(NAME, r, lambda r=r: rank_part(profile, derived, r, th)) for r in sorted(derived.traces)
    }
    ranks = [r for r, part in parts.items() if part["has_gpu"]]
    if not ranks:
        result.findings.append(
            not_measured(
                NAME,
                "Kernel launch statistics",
                "Pass a PyTorch profiler trace with CUDA activity (ProfilerActivity.CUDA).",
                SECTION,
                plural=True,
            )
        )
        return result
    lowest = min(ranks)
    per_op_all, queues_all, stats_rows = [], [], []
    for rank in ranks:
        part = parts[rank]
        stats = part["stats"]
        if stats is None:
            continue
        stats_rows.append(stats)
        key = (lambda k: k) if rank == lowest else (lambda k, r=rank: f"rank{r}.{k}")
        if stats["steps"]:
            result.summary[key("launch_kernels_per_step")] = float(stats["kernels_per_step"])
        else:
            result.summary[key("launch_kernels_in_span")] = float(stats["kernels"])
        result.summary[key("launch_rate_per_s")] = float(stats["launch_rate_per_s"])
        result.summary[key("launch_shorter_than_launch_pct")] = float(stats["shorter_than_launch_pct"])
        result.summary[key("launch_queue_median_ns")] = stats["queue_median_ns"]
        per_op_all.append(part["ops"])
        queues_all.append(part["queues"])
        result.findings.extend(part["findings"])
    if not stats_rows:
        result.findings.append(
            not_measured(
                NAME,
                "Kernel launch statistics",
                "The trace does not link GPU work to its "
                "launch calls (correlation ids); JAX perfetto traces are not linked yet.",
                SECTION,
                plural=True,
            )
        )
    else:
        result.tables["stats"] = pd.DataFrame(stats_rows)
        result.tables["ops"] = pd.concat(per_op_all, ignore_index=True)
        result.tables["queues"] = pd.concat(queues_all, ignore_index=True)
    return result


def rank_part(profile: Profile, derived: Derived, rank: int, th: Thresholds, lowest: int | None = None) -> dict:
    """What launch works out from one rank's trace alone: whether it has GPU work, its stats row, per-op and
    longest-queue tables and its finding. A cluster read works it out on a worker (diagnose.cluster)."""
    part = {"has_gpu": bool(len(derived.traces[rank].gpu)), "stats": None, "findings": []}
    if not part["has_gpu"]:
        return part
    trace = tl.analysed(derived.traces[rank])
    launches = launch_table(trace)
    if not len(launches):
        return part
    windows = tl.steps(trace)
    gwin = tl.gpu_step_windows(trace, windows) if len(windows) else pd.DataFrame()
    n_steps = len(gwin)  # 0: nothing repeats in the trace, figures are totals over the span (never "per step")
    per = max(n_steps, 1)
    host_span_ns = float(launches["launch_ts_ns"].max() - launches["launch_ts_ns"].min()) or float("nan")
    short_share = float(launches["shorter_than_launch"].mean())
    stats = part["stats"] = {
        "rank": rank,
        "kernels": len(launches),
        "steps": n_steps,
        "kernels_per_step": len(launches) / n_steps if n_steps else float("nan"),
        "launch_rate_per_s": len(launches) / (host_span_ns / 1e9),
        "shorter_than_launch_pct": 100 * short_share,
        "queue_median_ns": float(launches["queue_ns"].median()),
        "queue_max_ns": float(launches["queue_ns"].max()),
        "launch_median_ns": float(launches["launch_ns"].median()),
        "kernel_median_ns": float(launches["dur_ns"].median()),
    }
    per_op = ops_table(launches, per)
    per_op.insert(0, "rank", rank)
    part["ops"] = per_op
    q = launches.nlargest(TOP_QUEUES, "queue_ns")[
        ["kernel", "op", "launch_ts_ns", "queue_ns", "launch_ns", "dur_ns", "stream"]
    ].copy()
    q.insert(0, "rank", rank)
    part["queues"] = q

    gaps = tl.gaps(trace, th.sync.kernel_gap_us * 1e3, th.sync.sync_slack_us * 1e3)
    span = tl.temporal_breakdown(trace.gpu)["span_ns"]
    host_wait_ns = float(gaps.loc[gaps["cause"] == "host", "dur_ns"].sum())
    # waiting while the host fetched the next batch is input, not launch overhead (the idle analyzer's split)
    fetches = input_fetches(trace, tl.steps(trace), derived.source_dirs())
    host_wait_ns -= input_idle_by_cause(gaps, fetches).get("host", 0.0) if len(fetches) else 0.0
    host_wait_pct = 100 * host_wait_ns / span if span else 0.0
    finding = launch_finding(rank, stats, per_op, host_wait_pct, th, jax=trace.format == "perfetto")
    if finding:
        part["findings"].append(finding)
    return part


def launch_table(trace) -> pd.DataFrame:
    """One row per kernel with a launch call: its launch duration, queue time (call start → kernel start), op."""
    gpu, rt, ops = trace.gpu, trace.runtime, trace.cpu_ops
    kern = gpu[gpu["kind"].isin(["compute", "comm"]).to_numpy() & (gpu["runtime_index"].to_numpy() >= 0)]
    if not len(kern) or not len(rt):
        return pd.DataFrame()
    ri = kern["runtime_index"].to_numpy()
    launch_ts = rt["ts_ns"].to_numpy()[ri]
    launch_ns = rt["dur_ns"].to_numpy()[ri]
    op_i = rt["cpu_op_index"].to_numpy()[ri]
    if len(ops):
        top = np.where(op_i >= 0, ops["top_index"].to_numpy()[np.maximum(op_i, 0)], -1)
        op = np.where(top >= 0, tl.names_at(ops["name"], np.maximum(top, 0)), "(no CPU op)")
    else:
        op = np.full(len(kern), "(no CPU op)", dtype=object)
    dur = kern["dur_ns"].to_numpy()
    return pd.DataFrame(
        {  # names stay object columns (parsers.schema.STR): pandas 3 would copy them into Arrow strings
            "kernel": pd.Series(tl.names_at(kern["name"], np.arange(len(kern))), dtype=object),
            "op": pd.Series(op, dtype=object),
            "stream": kern["stream"].to_numpy(),
            "launch_ts_ns": launch_ts,
            "launch_ns": launch_ns,
            "dur_ns": dur,
            "queue_ns": kern["ts_ns"].to_numpy() - launch_ts,
            "shorter_than_launch": dur < launch_ns,
        }
    )


def ops_table(launches: pd.DataFrame, n_steps: int) -> pd.DataFrame:
    """Per op: kernels per step, how many run shorter than their launch, launch and kernel time per step."""
    out = _per_op(launches[launches["op"].notna()], n_steps)  # a kernel of no op is in no op's row
    return out.sort_values(["short_kernels_per_step", "launch_us_per_step"], ascending=False).reset_index(drop=True)


_PER_OP_COLUMNS = (
    "op",
    "kernels_per_step",
    "short_kernels_per_step",
    "launch_us_per_step",
    "kernel_us_per_step",
    "median_kernel_us",
    "median_launch_us",
    "short_share",
)


def _per_op(launches: pd.DataFrame, n_steps: int) -> pd.DataFrame:
    """``ops_table``'s figures before its sort, on plain arrays (a groupby with six aggregations was ~2 ms on a few
    hundred kernels): ops in order of first appearance, as ``groupby(sort=False)`` gives them; sums of whole ns
    are exact, and a median is the middle value or the mean of the two middle ones, as pandas takes it."""
    if not len(launches):
        return pd.DataFrame({c: pd.Series(dtype=object if c == "op" else float) for c in _PER_OP_COLUMNS})
    codes, ops = pd.factorize(launches["op"].to_numpy())
    n_ops = len(ops)
    kernels = np.bincount(codes, minlength=n_ops)

    def summed(column: str) -> np.ndarray:
        total = np.zeros(n_ops, dtype=np.int64)
        np.add.at(total, codes, launches[column].to_numpy().astype(np.int64))
        return total

    first = np.concatenate(([0], np.cumsum(kernels)[:-1]))
    lower, upper = first + (kernels - 1) // 2, first + kernels // 2

    def median(column: str) -> np.ndarray:
        values = launches[column].to_numpy().astype(np.float64)
        values = values[np.lexsort((values, codes))]  # op by op, each op's values ascending
        return (values[upper] + values[lower]) / 2

    out = pd.DataFrame(
        {
            "op": pd.Index(ops),  # as groupby gives its keys: object strings become pandas' str dtype
            "kernels_per_step": kernels / n_steps,
            "short_kernels_per_step": summed("shorter_than_launch") / n_steps,
            "launch_us_per_step": summed("launch_ns") / n_steps / 1e3,
            "kernel_us_per_step": summed("dur_ns") / n_steps / 1e3,
            "median_kernel_us": median("dur_ns") / 1e3,
            "median_launch_us": median("launch_ns") / 1e3,
        }
    )
    out["short_share"] = out["short_kernels_per_step"] / out["kernels_per_step"]
    return out


JAX_ADVICE = (
    "XLA already launches a jitted step's kernels together (a CUDA graph: one cuGraphLaunch for many kernels); the "
    f"host's time is dispatching each jitted call from Python and the Python between calls. {jax_dispatch.FIX}"
)


def launch_finding(
    rank: int, stats: dict, per_op: pd.DataFrame, host_wait_pct: float, th: Thresholds, jax: bool = False
) -> Finding | None:
    """``jax``: the trace is XLA's (perfetto): its advice is about dispatch, not torch's launches."""
    short = stats["shorter_than_launch_pct"] / 100
    top = per_op[per_op["short_kernels_per_step"] > 0].head(th.sync.launch_top_ops)
    # without steps the op figures are totals over the traced span (ops_table divided by 1): named so, never per step
    basis = "per_step" if stats["steps"] else "in_span"
    if not len(top):
        return None
    # launch-bound (a warning) only when both the short kernels' share and the host wait reach theirs
    sev = min(
        Severity.of(short, warning=th.sync.launch_bound_share),
        Severity.of(host_wait_pct, warning=th.sync.launch_bound_host_wait_pct),
    )
    bound = sev == Severity.WARNING
    names = ", ".join(str(o) for o in top["op"].head(5))
    subjects = tuple(
        Subject(
            "op",
            str(r.op),
            figures={
                f"kernels_{basis}": float(r.kernels_per_step),
                f"short_kernels_{basis}": float(r.short_kernels_per_step),
                "median_kernel_us": float(r.median_kernel_us),
                "median_launch_us": float(r.median_launch_us),
            },
        )
        for r in top.itertuples()
    )
    # without steps it is said of the trace's GPU work: a trace with no step marks has no "step" to call launch-bound
    verdict = "launch overhead is visible"
    if bound:
        verdict = "the step is launch-bound" if stats["steps"] else "the GPU work is launch-bound"
    return Finding(
        id="launch.launch_bound",
        analyzer=NAME,
        severity=sev,
        title=f"{100 * short:.0f} % of kernels on rank {rank} run shorter than their launch call and the GPU waits for "
        f"the host {host_wait_pct:.0f} % of the time: {verdict}",
        subjects=subjects,
        evidence=(
            Evidence("launch_shorter_than_launch_pct", 100 * short, "%", 100 * th.sync.launch_bound_share),
            Evidence("idle_host_pct", host_wait_pct, "%", th.sync.launch_bound_host_wait_pct),
            Evidence("launch_kernels_per_step", stats["kernels_per_step"], "count")
            if stats["steps"]
            else Evidence("launch_kernels_in_span", float(stats["kernels"]), "count"),
            Evidence("launch_rate_per_s", stats["launch_rate_per_s"], "1/s"),
        ),
        cost_share=(host_wait_pct / 100) if bound else None,
        recommendation=f"The ops that issue most tiny kernels: {names}. {JAX_ADVICE}"
        if jax
        else f"Fuse or graph-capture the ops that issue most tiny kernels ({names}): torch.compile "
        f"(mode='reduce-overhead' also uses CUDA graphs), torch.cuda.graphs for a static step, "
        f"fused optimizers (foreach=True / fused=True), or larger batches per launch.",
        section=SECTION,
    )
