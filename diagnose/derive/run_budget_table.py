"""The run budget: the run's wall time, from the process's start to its exit, cut into parts that add up to it.

The step budget (step_budget_table) explains the median step; the seconds that cost the most are often outside it:
an evaluation and a checkpoint every N steps, compiling before the first step, imports, a DataLoader that stalls
every few steps, gpudiag's own trace export. Here every instant of the run is given to exactly one part:

1. work light mode timed (its work records), by precedence where they overlap: gpudiag's own work (trace export,
   snapshot dump), then compilation (torch.compile/dynamo, JAX), then named work (evaluation, checkpoints), then
   the imports it timed before the first step;
2. what is left of each span: before the runtime was installed (``interpreter``), before the first step
   (``imports`` not timed one by one, then ``setup``), each step (its input wait, then warm-up, gpudiag's trace
   window over the median, steady time up to the median, and the excess of slow steps by cause), and after the last
   step (``teardown``).

So the parts add up to the wall time by construction; what a test checks is that the wall time is the run's
(the manifest's child_start_ns to child_end_ns, the parent's clock around the process) and that each part equals
the time a clock around that code measures. A step's time here is its host time (boundary to boundary): the
run's wall clock, not the step budget's longer of host and GPU time. docs/run-budget.md describes the parts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from diagnose.ingest.profile_data import Profile, run_marks_of
from diagnose.thresholds import Thresholds
from parsers.run_records import (
    WORK_CHECKPOINT,
    WORK_COMPILATION,
    WORK_EVALUATION,
    WORK_GPUDIAG,
    WORK_HOST_CODE,
    WORK_IMPORT,
    WORK_NEW_SHAPE,
)

# (part, label), in the order the bar shows them; every part of one rank's budget adds up to its wall time
RUN_PARTS = (
    ("interpreter", "interpreter start"),
    ("imports", "imports"),
    ("setup", "setup before the first step"),
    ("compilation", "compilation"),
    ("warmup", "warm-up steps"),
    ("steady", "steady steps"),
    ("input", "waiting for input"),
    ("slow_new_shape", "slow steps: new input shapes"),
    ("slow_unexplained", "slow steps: unexplained"),
    ("evaluation", "evaluation"),
    ("checkpoint", "checkpoints"),
    ("host_code", "long steps' sampled Python"),
    ("gpudiag", "gpudiag's own cost"),
    ("teardown", "teardown after the last step"),
)
PART_LABELS = dict(RUN_PARTS)
# the part each kind of timed work goes to, and its precedence where two overlap (lower wins)
WORK_PARTS = {
    WORK_GPUDIAG: ("gpudiag", 0),
    WORK_COMPILATION: ("compilation", 1),
    WORK_EVALUATION: ("evaluation", 2),
    WORK_CHECKPOINT: ("checkpoint", 2),
    WORK_IMPORT: ("imports", 3),
    WORK_HOST_CODE: ("host_code", 4),  # sampled: what no hook timed (long_step_code), after every timed kind
}
OTHER_IMPORTS = "(other imports)"  # the record of every import shorter than the runtime's cut-off, summed
# where a piece of work ran, by the span it began in
BEFORE_FIRST_STEP, IN_WARMUP, IN_STEPS, AFTER_LAST_STEP = (
    "before the first step",
    "in the warm-up steps",
    "in the steps",
    "after the last step",
)


@dataclass(frozen=True)
class RankRunBudget:
    """One rank's run budget: its wall time, the parts (``parts``: rank, part, label, ms, share, detail, location,
    library_location) and the timed work each part holds (``work``: one row per work record, with the ms it
    counts after overlaps); ``meta``: the figures the parts were cut with (median steady time, slow steps, ...)."""

    rank: int
    wall_ms: float
    parts: pd.DataFrame
    work: pd.DataFrame
    meta: dict = field(default_factory=dict)

    def part_ms(self, part: str) -> float:
        """Milliseconds of one part (0 when the run has none)."""
        row = self.parts[self.parts["part"] == part]
        return float(row["ms"].iloc[0]) if len(row) else 0.0


def wall_span_ns(profile: Profile) -> tuple[int, int, str] | None:
    """(start, end, what) of the run's wall time: the child process's spawn to its exit, as the parent clocked it
    (``child_start_ns``, ``child_end_ns``); a manifest older than those gives the parent's own start and end."""
    m = profile.manifest or {}
    start, end = m.get("child_start_ns"), m.get("child_end_ns")
    if isinstance(start, int) and isinstance(end, int) and end > start:
        return start, end, "the process's start to its exit"
    start, end = m.get("start_ns"), m.get("end_ns")
    if isinstance(start, int) and isinstance(end, int) and end > start:
        return start, end, "gpudiag's start to its end (this run folder predates the process's own clock)"
    return None


def run_budget(
    profile: Profile, steps: pd.DataFrame, window: range | None, th: Thresholds, work_split: Callable
) -> dict:
    """Every rank's RankRunBudget, by rank; {} when the run's wall time is unknown (a trace or a table read alone,
    no manifest) or the run ran under Nsight Compute (its steps are slowed by the profiler: no time of them holds).
    ``steps``: the step table (diagnose.derive.step_table); ``work_split``: ``Derived.work_split``."""
    span = wall_span_ns(profile)
    if span is None or (profile.manifest or {}).get("mode") == "ncu" or not len(steps):
        return {}
    out = {}
    for rank, rows in steps.groupby("rank"):
        rank = int(rank)
        rows = rows.dropna(subset=["t_start_ns"]).sort_values("t_start_ns", kind="stable").reset_index(drop=True)
        if not len(rows):
            continue
        marks = run_marks_of(profile, rank)
        work = work_split(rank)[0]  # a long step's own code is not work of its own
        out[rank] = rank_run_budget(rank, rows, work, marks, span, window, th)
    return out


def rank_run_budget(
    rank: int,
    rows: pd.DataFrame,
    work: pd.DataFrame | None,
    marks: dict,
    span: tuple[int, int, str],
    window: range | None,
    th: Thresholds,
) -> RankRunBudget:
    """One rank's budget (the module docstring's steps); ``rows``: its step rows in time order; ``marks``: its run
    records' times (``install_ns``, ``start_ns``, ``end_ns``; any may be missing)."""
    starts = rows["t_start_ns"].to_numpy(dtype=float)
    host_ns = pd.to_numeric(rows["host_ms"], errors="coerce").fillna(rows["step_ms"]).to_numpy(dtype=float) * 1e6
    ends = np.append(starts[1:], starts[-1] + np.nan_to_num(host_ns[-1]))
    ends = np.maximum(ends, starts)
    first_ns, last_end_ns = float(starts[0]), float(ends[-1])
    span_start, span_end = float(min(span[0], first_ns)), float(max(span[1], last_end_ns))
    install = marks.get("install_ns")
    install_ns = float(install) if isinstance(install, (int, float)) and span_start <= install <= first_ns else None

    work = work[work["rank"] == rank] if work is not None and len(work) else None
    pieces, items = claimed_pieces(work, span_start, span_end)
    parts = dict.fromkeys(PART_LABELS, 0.0)

    def carve(a: np.ndarray, b: np.ndarray, skip: tuple[str, ...] = ()) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """What of each span [a, b) no timed work holds, and what each part's work holds of it (ns); the parts in
        ``skip`` are left for the caller to place."""
        held = {part: covered(p, a, b) for part, p in pieces.items() if part not in skip}
        rest = (b - a) - sum(held.values(), np.zeros(len(a)))
        for part, ns in held.items():
            parts[part] += float(ns.sum())
        return np.maximum(rest, 0.0), held

    # before the runtime was installed: the interpreter's start (and the sitecustomize)
    pre_start = span_start
    if install_ns is not None:
        rest, _ = carve(np.array([span_start]), np.array([install_ns]))
        parts["interpreter"] += float(rest.sum())
        pre_start = install_ns
    # from there to the first step: imports not timed one by one, then setup (data, model, optimizer, ...)
    rest, _ = carve(np.array([pre_start]), np.array([first_ns]))
    other_imports_ns = 0.0
    if work is not None and len(work):
        other = work[(work["what"] == WORK_IMPORT) & (work["name"] == OTHER_IMPORTS)]
        other_imports_ns = min(float(other["ms"].sum()) * 1e6, float(rest.sum()))
    parts["imports"] += other_imports_ns
    parts["setup"] += float(rest.sum()) - other_imports_ns
    # the steps: the timed work, then the input wait, then the Python sampled in long steps, which may be the wait
    # itself (a DataLoader's __next__, a generator the loop waits on): the measured wait comes first
    rest, _ = carve(starts, ends, skip=("host_code",))
    input_ns = pd.to_numeric(rows.get("input_ms"), errors="coerce").fillna(0).to_numpy(dtype=float) * 1e6
    input_ns = np.minimum(input_ns, rest)
    parts["input"] += float(input_ns.sum())
    rest = rest - input_ns
    if "host_code" in pieces:
        host_ns = np.minimum(covered(pieces["host_code"], starts, ends), rest)
        parts["host_code"] += float(host_ns.sum())
        rest = rest - host_ns
    instrumented = rows["instrumented"].fillna(False).astype(bool).to_numpy() if "instrumented" in rows else None
    if instrumented is None:
        instrumented = np.zeros(len(rows), dtype=bool)
    if window is not None:
        instrumented = instrumented | rows["step"].isin(window).to_numpy()
    warm = rows["warmup"].fillna(False).astype(bool).to_numpy() & ~instrumented
    steady = ~warm & ~instrumented
    parts["warmup"] += float(rest[warm].sum())
    median_ns = float(np.median(rest[steady])) if steady.any() else 0.0
    slow = steady & (rest > th.step_budget.slow_factor * median_ns) if median_ns > 0 else np.zeros(len(rows), bool)
    new_shape_steps = set()
    if work is not None and len(work):
        new_shape_steps = {int(s) for s in work.loc[work["what"] == WORK_NEW_SHAPE, "step"]}
    new_shaped = rows["step"].isin(new_shape_steps).to_numpy()
    excess = np.where(slow, rest - median_ns, 0.0)
    parts["steady"] += float(np.where(slow, median_ns, rest)[steady].sum())
    parts["slow_new_shape"] += float(excess[slow & new_shaped].sum())
    parts["slow_unexplained"] += float(excess[slow & ~new_shaped].sum())
    window_base = np.minimum(rest[instrumented], median_ns) if median_ns > 0 else rest[instrumented]
    parts["steady"] += float(window_base.sum())
    parts["gpudiag"] += float((rest[instrumented] - window_base).sum())
    # after the last step: the script's end, the interpreter's exit
    rest, _ = carve(np.array([last_end_ns]), np.array([span_end]))
    parts["teardown"] += float(rest.sum())

    wall_ns = span_end - span_start
    items = place_work(items, first_ns, last_end_ns, rows, warm)
    table = parts_table(rank, parts, wall_ns, items)
    meta = {
        "wall_ms": wall_ns / 1e6,
        "wall_of": span[2],
        "start_ns": int(span_start),
        "end_ns": int(span_end),
        "first_step_ns": int(first_ns),
        "last_step_end_ns": int(last_end_ns),
        "install_ns": int(install_ns) if install_ns is not None else None,
        "steps": int(len(rows)),
        "steady_steps": int(steady.sum()),
        "steady_median_ms": median_ns / 1e6,
        "slow_steps": [int(s) for s in rows.loc[slow, "step"]],
        "steps_ms": float((ends - starts).sum()) / 1e6,
        "steps_after_warmup_ms": float((ends - starts)[~warm].sum()) / 1e6,
        "notes": notes_of(install_ns, span, work),
    }
    return RankRunBudget(rank, wall_ns / 1e6, table, items, meta)


def claimed_pieces(work: pd.DataFrame | None, lo: float, hi: float) -> tuple[dict[str, np.ndarray], pd.DataFrame]:
    """Each part's timed work as disjoint (start, end) ns pieces within [lo, hi), overlaps given to the record of
    lower precedence number (WORK_PARTS); and the records with the ns each one counts (``counted_ms``).

    The "(other imports)" record is a sum, not a span (its t_ns is the first short import's start): it is counted
    as an amount of the time before the first step instead (rank_run_budget)."""
    columns = ["what", "name", "step", "t_ns", "ms", "location", "library_location", "caller", "part", "counted_ms"]
    if work is None or not len(work):
        return {}, pd.DataFrame(columns=columns)
    w = work[work["what"].isin(WORK_PARTS)].copy()
    if "name" not in w:
        w["name"] = None
    for optional in ("library_location", "caller"):
        if optional not in w:
            w[optional] = None
    summed = (w["what"] == WORK_IMPORT) & (w["name"] == OTHER_IMPORTS)
    w["part"] = w["what"].map(lambda what: WORK_PARTS[what][0])
    w["priority"] = w["what"].map(lambda what: WORK_PARTS[what][1])
    w["a"] = np.clip(pd.to_numeric(w["t_ns"], errors="coerce").to_numpy(dtype=float), lo, hi)
    w["b"] = np.clip(w["a"] + pd.to_numeric(w["ms"], errors="coerce").fillna(0).to_numpy(dtype=float) * 1e6, lo, hi)
    w["counted_ms"] = np.where(summed, w["ms"], 0.0)
    claimed: list[tuple[float, float]] = []  # disjoint, sorted
    by_part: dict[str, list[tuple[float, float]]] = {}
    order = w[~summed].sort_values(["priority", "a"], kind="stable")
    for index, r in order.iterrows():
        free = subtract(float(r["a"]), float(r["b"]), claimed)
        if not free:
            continue
        w.at[index, "counted_ms"] = sum(b - a for a, b in free) / 1e6
        by_part.setdefault(r["part"], []).extend(free)
        claimed = merge(claimed + free)
    pieces = {part: np.array(sorted(p), dtype=float).reshape(-1, 2) for part, p in by_part.items()}
    return pieces, w[columns].reset_index(drop=True)


def subtract(a: float, b: float, claimed: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """What of [a, b) none of the disjoint, sorted ``claimed`` spans covers."""
    free, at = [], a
    for ca, cb in claimed:
        if cb <= at:
            continue
        if ca >= b:
            break
        if ca > at:
            free.append((at, ca))
        at = max(at, cb)
        if at >= b:
            break
    if at < b:
        free.append((at, b))
    return [(x, y) for x, y in free if y > x]


def merge(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted, disjoint spans covering the same time as ``spans``."""
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def covered(pieces: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How much of each span [a_i, b_i) the disjoint, sorted ``pieces`` (n x 2, ns) cover: the covered length up to
    b less that up to a, from the pieces' running total (one searchsorted per end, not a loop over spans)."""
    if not len(pieces):
        return np.zeros(len(a))
    starts, ends = pieces[:, 0], pieces[:, 1]
    before = np.concatenate([[0.0], np.cumsum(ends - starts)])

    def up_to(x: np.ndarray) -> np.ndarray:
        i = np.searchsorted(starts, x, side="right")  # pieces starting at or before x
        inside = np.where(i > 0, np.clip(x - starts[np.maximum(i - 1, 0)], 0, None), 0.0)
        inside = np.minimum(inside, np.where(i > 0, ends[np.maximum(i - 1, 0)] - starts[np.maximum(i - 1, 0)], 0.0))
        return before[np.maximum(i - 1, 0)] * (i > 0) + inside

    return np.maximum(up_to(b) - up_to(a), 0.0)


def place_work(items: pd.DataFrame, first_ns: float, last_end_ns: float, rows: pd.DataFrame, warm) -> pd.DataFrame:
    """Each work record's ``phase``: before the first step, in the warm-up steps, in the steps, after the last."""
    if not len(items):
        return items.assign(phase=pd.Series(dtype=object))
    warm_steps = set(rows.loc[warm, "step"].astype(int))
    t = pd.to_numeric(items["t_ns"], errors="coerce")
    phase = np.where(
        t < first_ns,
        BEFORE_FIRST_STEP,
        np.where(t >= last_end_ns, AFTER_LAST_STEP, np.where(items["step"].isin(warm_steps), IN_WARMUP, IN_STEPS)),
    )
    return items.assign(phase=phase)


def parts_table(rank: int, parts: dict[str, float], wall_ns: float, items: pd.DataFrame) -> pd.DataFrame:
    """One row per part with time: its ms, share of the wall time, the line that holds most of it and the library
    frame beside it (timed work only), and a short detail (how many records, where they ran)."""
    out = []
    for part, label in RUN_PARTS:
        ns = parts.get(part, 0.0)
        if ns <= 0:
            continue
        location = library = None
        detail = ""
        of_part = items[(items["part"] == part) & (items["counted_ms"] > 0)] if len(items) else items
        if len(of_part):
            top = of_part.groupby(of_part["location"].fillna(""), sort=False)["counted_ms"].sum().idxmax()
            location = top or None
            at = of_part[of_part["location"].fillna("") == top]
            libraries = at["library_location"].dropna()
            library = str(libraries.mode().iloc[0]) if len(libraries) else None
            phases = of_part.groupby("phase")["counted_ms"].sum().sort_values(ascending=False)
            detail = f"{len(of_part)} timed; " + ", ".join(f"{ms / 1e3:,.2f} s {p}" for p, ms in phases.items())
        out.append(
            {
                "rank": rank,
                "part": part,
                "label": label,
                "ms": ns / 1e6,
                "share": ns / wall_ns if wall_ns > 0 else np.nan,
                "location": location,
                "library_location": library,
                "detail": detail,
            }
        )
    return pd.DataFrame(out, columns=["rank", "part", "label", "ms", "share", "location", "library_location", "detail"])


def notes_of(install_ns: float | None, span: tuple[int, int, str], work: pd.DataFrame | None) -> list[str]:
    """What the budget could not split, said once."""
    notes = []
    if install_ns is None:
        notes.append(
            "the interpreter's start is not told apart from the setup: this run's records predate the runtime's "
            "install time"
        )
    if work is None or not len(work) or not (work["what"] == WORK_IMPORT).any():
        notes.append("imports were not timed in this run: they are part of the setup before the first step")
    return notes
