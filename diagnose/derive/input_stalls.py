"""Input wait summed over every step, and the stalls in it: the steps that waited far longer than the median wait.

The median step hides input stalls that come every few steps: a DataLoader whose workers cannot keep up hands
out num_workers batches at once (the workers started together and finish together) and then the loop waits for
the next burst, so most steps wait ~0 and one in num_workers waits long. On the H200 a ResNet with 12 workers
waited 20-159 ms in 39 steps, 2.8 s of 46.7 s, with a median wait of 0.17 ms (issue 30). The cost is the sum.

Workers that start together do not always stay together: on an H100 (fixtures/runs/loader_workers_h100, 4 workers
of ~97 ms a batch, a ~10 ms step) they drifted apart, and the waits ran 55, 1, 35, 13 | 48, 1, 41, 6 | 52, 1, 41, 7
ms: one slot per worker, the wait spread over three of the four, so no one slot holds most stalls.

A stall is a step whose wait is ``stall_factor`` x the median wait and at least ``stall_min_ms``; in a trace
captured elsewhere, any iteration whose wait is longer than the median step is one as well. Stalls recur every
num_workers steps (light mode's ``dataloader`` record gives num_workers; docs/step-budget.md) when either

- ``stall_period_hit_share`` of them sit on one residue of that period (the workers deliver in bursts), or
- the waits are cyclic with that period: the steady steps are cut into consecutive windows of
  ``stall_cycle_periods`` x num_workers steps, and the share of a window's wait variance that the step's residue mod
  num_workers explains (R² of the per-residue means) has a median of at least ``stall_cycle_r2`` over the windows
  that hold a stall, with at least ``period_min_occurrences`` such windows. Waits without such a cycle give an R²
  near (num_workers - 1) / (window - 1), ~0.08 for windows of 10 periods; the H100 run gives 0.86 at 4 workers and
  0.01 at 3 or 5.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.thresholds import Thresholds


def input_stalls(
    rows: pd.DataFrame, loaders: pd.DataFrame | None, rank: int, median_step_ms: float, th: Thresholds
) -> dict | None:
    """The summed input wait of one rank's steps after warm-up (``rows``: its step rows with ``wall_ms``; the trace
    window's steps left out by the caller) and its stalls, or None when no step measured its wait.

    Returns ``input_ms`` (summed), ``steps_ms`` (those steps' time), ``share``, ``steps``, ``median_input_ms``,
    ``stall_steps``, ``stall_ms`` (their waits summed), ``stall_min_ms``/``stall_max_ms``, and when the stalls recur
    every num_workers steps ``every`` (= num_workers) and ``every_by``: ``"residue"`` when ``on_period`` of them sit
    on one residue, ``"cycle"`` when the waits are cyclic (``on_period`` is then the stalls on the busiest residue,
    and 0 while ``every`` is None); ``cycle_r2``: the median R² of the waits against their residue mod num_workers,
    None where too few windows could be judged; ``loader`` (the DataLoader's record: num_workers, prefetch_factor,
    batch_size, ...) when light mode saw one; ``batch_ms_per_worker``: a worker's time per batch, inferred as
    num_workers x the mean step time over the stalled span (the workers set the pace there)."""
    if "input_ms" not in rows:
        return None
    wait = pd.to_numeric(rows["input_ms"], errors="coerce")
    if not wait.notna().any():
        return None
    measured = rows[wait.notna()]
    wait = wait[wait.notna()]
    steps_ms = float(measured["wall_ms"].sum())
    median_wait = float(wait.median())
    cut = max(th.run_budget.stall_factor * median_wait, th.run_budget.stall_min_ms)
    if median_step_ms > 0:  # a wait longer than the median step is a stall whatever the median wait
        cut = min(cut, median_step_ms)
    stalled = wait > cut
    out = {
        "input_ms": float(wait.sum()),
        "steps_ms": steps_ms,
        "share": float(wait.sum()) / steps_ms if steps_ms > 0 else np.nan,
        "steps": int(len(wait)),
        "median_input_ms": median_wait,
        "stall_cut_ms": cut,
        "stall_steps": [int(s) for s in measured.loc[stalled, "step"]],
        "stall_ms": float(wait[stalled].sum()),
        "stall_min_ms": float(wait[stalled].min()) if stalled.any() else None,
        "stall_max_ms": float(wait[stalled].max()) if stalled.any() else None,
        "every": None,
        "every_by": None,
        "on_period": 0,
        "cycle_r2": None,
        "loader": None,
        "batch_ms_per_worker": None,
    }
    loader = loader_in_use(loaders, rank)
    out["loader"] = loader
    stalls = np.array(out["stall_steps"], dtype=np.int64)
    workers = int(loader["num_workers"]) if loader and loader.get("num_workers") else 0
    if workers >= 2 and len(stalls) >= th.step_budget.period_min_occurrences:
        steps = measured["step"].to_numpy(dtype=np.int64)
        out["cycle_r2"] = cycle_r2(steps, wait.to_numpy(dtype=float), workers, cut, th)
        residues = np.bincount(stalls % workers, minlength=workers)
        if residues.max() >= th.run_budget.stall_period_hit_share * len(stalls):
            out["every_by"] = "residue"
        elif out["cycle_r2"] is not None and out["cycle_r2"] >= th.run_budget.stall_cycle_r2:
            out["every_by"] = "cycle"
        if out["every_by"]:
            out["every"], out["on_period"] = workers, int(residues.max())
            span = measured[(measured["step"] >= stalls.min()) & (measured["step"] <= stalls.max())]
            if len(span):
                out["batch_ms_per_worker"] = workers * float(span["wall_ms"].mean())
    return out


def cycle_r2(steps: np.ndarray, wait_ms: np.ndarray, period: int, cut_ms: float, th: Thresholds) -> float | None:
    """How much of the waits the step's place in a cycle of ``period`` steps explains: the median, over consecutive
    windows of ``stall_cycle_periods`` x period steps (in step order, a partial last window left out) that hold a
    wait above ``cut_ms``, of the R² of the waits against their residue ``step mod period`` (the sum of squares
    between the residues' means over the total). None when fewer than ``period_min_occurrences`` windows were
    judged."""
    size = max(1, th.run_budget.stall_cycle_periods) * period
    r2 = []
    for start in range(0, len(wait_ms) - size + 1, size):
        x = wait_ms[start : start + size]
        total = float(((x - x.mean()) ** 2).sum())
        if not (x > cut_ms).any() or total <= 0:
            continue
        residue = steps[start : start + size] % period
        counts = np.bincount(residue, minlength=period)
        sums = np.bincount(residue, weights=x, minlength=period)
        seen = counts > 0
        between = float((counts[seen] * (sums[seen] / counts[seen] - x.mean()) ** 2).sum())
        r2.append(between / total)
    if len(r2) < th.step_budget.period_min_occurrences:
        return None
    return float(np.median(r2))


def loader_in_use(loaders: pd.DataFrame | None, rank: int) -> dict | None:
    """The DataLoader the training loop drew from: of this rank's ``dataloader`` records, the one seen at the
    latest step before the last (an evaluation loader made once is seen later but feeds few steps: the training
    loader is the one seen first among those with the most workers)."""
    if loaders is None or not len(loaders):
        return None
    mine = loaders[loaders["rank"] == rank] if "rank" in loaders else loaders
    if not len(mine):
        return None
    mine = mine.sort_values(["num_workers", "t_ns"], ascending=[False, True], kind="stable")
    row = mine.iloc[0]
    return {k: (None if pd.isna(v) else (v.item() if hasattr(v, "item") else v)) for k, v in row.items()}
