"""Input wait summed over every step, and the stalls in it: the steps that waited far longer than the median wait.

The median step hides input stalls that come every few steps: a DataLoader whose workers cannot keep up hands
out num_workers batches at once (the workers started together and finish together) and then the loop waits for
the next burst, so most steps wait ~0 and one in num_workers waits long. On the H200 a ResNet with 12 workers
waited 20-159 ms in 39 steps, 2.8 s of 46.7 s, with a median wait of 0.17 ms (issue 30). The cost is the sum.

A stall is a step whose wait is ``stall_factor`` x the median wait and at least ``stall_min_ms``; in a trace
captured elsewhere, any iteration whose wait is longer than the median step is one as well. Stalls recur every
num_workers steps when ``stall_period_hit_share`` of them sit on one residue of that period (light mode's
``dataloader`` record gives num_workers; docs/step-budget.md).
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
    every num_workers steps ``every`` (= num_workers) with ``on_period`` stalls; ``loader`` (the DataLoader's
    record: num_workers, prefetch_factor, batch_size, ...) when light mode saw one; ``batch_ms_per_worker``: a
    worker's time per batch, inferred as num_workers x the mean step time over the stalled span (the workers set
    the pace there)."""
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
        "on_period": 0,
        "loader": None,
        "batch_ms_per_worker": None,
    }
    loader = loader_in_use(loaders, rank)
    out["loader"] = loader
    stalls = np.array(out["stall_steps"], dtype=np.int64)
    workers = int(loader["num_workers"]) if loader and loader.get("num_workers") else 0
    if workers >= 2 and len(stalls) >= th.step_budget.period_min_occurrences:
        residues = np.bincount(stalls % workers, minlength=workers)
        if residues.max() >= th.run_budget.stall_period_hit_share * len(stalls):
            out["every"], out["on_period"] = workers, int(residues.max())
            span = measured[(measured["step"] >= stalls.min()) & (measured["step"] <= stalls.max())]
            if len(span):
                out["batch_ms_per_worker"] = workers * float(span["wall_ms"].mean())
    return out


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
