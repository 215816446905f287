"""Slow steady steps that recur: a period N and offset k (slow at step k + iN), or the same checkpoint save or
evaluation in each, and what light mode's work records saw run in them.

The step budget's slow steps (diagnose.derive.step_budget_table) are searched here; the ``step_budget.periodic``
finding names what it finds (docs/step-budget.md).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.thresholds import Thresholds
from parsers.run_records import WORK_CHECKPOINT, WORK_EVALUATION, WORK_HOST_CODE

LARGEST_FACTOR = 3.0  # a period's slowest step is named apart when its excess is over this many times the median's
MAX_PERIOD_STEPS = 5000  # longest period looked for (an epoch of 5,000 steps)
# the ``what`` of light mode's work records of periodic work; host-code: the Python sampled in a long step
CHECKPOINT, EVALUATION, HOST_CODE = WORK_CHECKPOINT, WORK_EVALUATION, WORK_HOST_CODE


def slow_step_period(
    work: pd.DataFrame | None,
    rank: int,
    steady: pd.DataFrame,
    slow_mask: pd.Series,
    slow_rows: pd.DataFrame,
    steady_input: pd.Series,
    traced: pd.DataFrame,
    median_ms: float,
    th: Thresholds,
) -> tuple[dict | None, pd.Series]:
    """The period the slow steady steps recur at (find_period), or the work they share (recurring_work), or None;
    and which of ``slow_rows`` (the slow steps, with their ``input_ms``) are on it.

    Beside find_period's figures, the period says how much slower its steps are than the median (``excess_ms``),
    which steps those are, the steps on it that were not slow, whether they waited for input
    (``period_input_share`` of their excess), the traced steps on it and the work light mode saw in them."""
    period = find_period(
        steady["step"].to_numpy(dtype=np.int64),
        slow_mask.to_numpy(),
        th,
        excess_ms=(steady["wall_ms"] - median_ms).clip(lower=0).fillna(0).to_numpy(dtype=float),
    )
    if period is None:
        period = recurring_work(work, rank, steady, slow_mask, median_ms, th)
        on_period = slow_rows["step"].isin(period["steps"]) if period is not None else False
        return period, on_period
    n, k = period["period"], period["offset"]
    on_period = slow_rows["step"] % n == k
    on = slow_rows[on_period]
    period["excess_ms"] = float(on["wall_ms"].median() - median_ms)
    period["steps"] = [int(s) for s in on["step"]]
    period["largest"] = largest_excess(on["step"], on["wall_ms"], median_ms)
    # the steady steps on the period that were not slow, from its first slow step on (before it: the work had
    # not started); the title names them, never "every N steps" then
    quiet = steady.loc[(steady["step"] % n == k) & ~slow_mask, "step"]
    period["not_slow"] = [int(s) for s in quiet if s > period["steps"][0]]
    period["quiet_before"] = [int(s) for s in quiet if s < period["steps"][0]]
    on_input = on["input_ms"].dropna()
    period["input_ms"] = float(on_input.median()) if len(on_input) else None
    base_input = float(steady_input.median()) if len(steady_input) else 0.0
    period["input_wait"] = bool(
        len(on_input) and on_input.median() - base_input >= th.step_budget.period_input_share * period["excess_ms"]
    )
    seen = traced[traced["run_step"] % n == k] if len(traced) else traced
    period["traced_steps"] = [int(s) for s in seen["run_step"]] if len(seen) else []
    period["work"] = period_work(work, rank, period["steps"], period["excess_ms"], th)
    return period, on_period


def find_period(
    step_numbers: np.ndarray, slow: np.ndarray, th: Thresholds, excess_ms: np.ndarray | None = None
) -> dict | None:
    """The period N and offset k at which slow steps recur (step k + iN), or None.

    ``step_numbers``: the steady steps (warm-up, gpudiag's trace window, compiles and new shapes left out);
    ``slow``: which of them are slow. A (N, k) qualifies when at least ``period_min_occurrences`` slow steps sit
    on it, they hold ``period_min_share`` of the slow steps' time over the median (``excess_ms``; of their count
    without it), and ``period_min_hit_share`` of the steady steps at k mod N are slow. By time, not count: on the
    H200 an epoch boundary stalled one step by ~480 ms and left one to three shorter slow steps after it (workers
    finishing their start one after another), which outnumber the stalls but hold a fraction of the time.
    Every N at which ``period_min_occurrences`` steps fit between the first and the last steady step is searched
    (up to ``MAX_PERIOD_STEPS``): the bound was a third of the steady steps' count, so an evaluation every 200
    steps of a 600-step run (593 steady steps) was never looked for. The best score (share on it x share of its
    steps slow) wins, the shorter N on a tie.
    """
    b = th.step_budget
    slow_steps = step_numbers[slow]
    if len(slow_steps) < b.period_min_occurrences:
        return None
    weights = np.ones(len(slow_steps)) if excess_ms is None else np.asarray(excess_ms, dtype=float)[slow]
    total = float(weights.sum()) or 1.0
    base = int(step_numbers.min())
    slow_at, steps_at = slow_steps - base, step_numbers - base  # residues of non-negative numbers
    span = int(steps_at.max()) + 1
    missing = np.setdiff1d(np.arange(span), steps_at, assume_unique=False)
    best = None
    # every offset of a period at once (bincount): a 100,000-step run is a few hundred ms, not minutes
    for n in range(2, min(MAX_PERIOD_STEPS, longest_period(span, b.period_min_occurrences)) + 1):
        on = np.bincount(slow_at % n, minlength=n)
        weight = np.bincount(slow_at % n, weights=weights, minlength=n)
        # steps 0..span-1 after the base hold span // n of each residue, one more for the first span % n;
        # less the missing ones (warm-up and gpudiag's window are not steady): O(n) per period, not O(steps)
        slots = np.full(n, span // n) + (np.arange(n) < span % n)
        if len(missing):
            slots = slots - np.bincount(missing % n, minlength=n)
        share = weight / total
        # nor may one step carry it: the period must hold its share without its largest step (one 7.3 s evaluation
        # among three steps 48 ms slow made "every 198 steps, 48 ms slower" of a JAX run, issue 34)
        largest = np.zeros(n)
        np.maximum.at(largest, slow_at % n, weights)
        without_largest = (weight - largest) / total
        hit = np.divide(on, slots, out=np.zeros(n), where=slots > 0)
        ok = (
            (on >= b.period_min_occurrences)
            & (share >= b.period_min_share)
            & (without_largest >= b.period_min_share * (on - 1) / np.maximum(on, 1))
            & (hit >= b.period_min_hit_share)
        )
        if not ok.any():
            continue
        score = np.where(ok, share * hit, -1.0)
        k = int(np.argmax(score))
        if best is None or score[k] > best["score"] + 1e-9:
            best = {
                "period": int(n),
                "offset": int((k + base) % n),
                "occurrences": int(on[k]),
                "slots": int(slots[k]),
                "slow_total": int(len(slow_steps)),
                "score": float(score[k]),
            }
    return best


def recurring_work(
    work: pd.DataFrame | None, rank: int, steady: pd.DataFrame, slow_mask: pd.Series, median_ms: float, th: Thresholds
) -> dict | None:
    """Slow steady steps that light mode's work records show running the same checkpoint save or evaluation, when
    no period holds them: at least ``period_min_occurrences`` slow steps whose work of one kind takes
    ``period_work_share`` of their excess over the median. Made like find_period's dict (``by_work`` set, the
    period the gaps between them keep to within a step, else None).

    A loop that evaluates at iterations 0, 200, 400 and its last one (599) is timed in steps 199, 399 and 598 (the
    step in progress when the evaluation began; the first one, before the first step boundary, in none): no period
    holds three of them, yet the same evaluation makes each slow (examples/char_lm_eval.py, fixtures/runs/
    char_lm_eval)."""
    if work is None or not len(work):
        return None
    b = th.step_budget
    slow = steady[slow_mask].set_index("step")
    kinds = work[
        (work["rank"] == rank) & work["step"].isin(slow.index) & work["what"].isin((CHECKPOINT, EVALUATION, HOST_CODE))
    ]
    best = None
    for _, of_kind in kinds.groupby("what", sort=True):
        per_step = of_kind.groupby("step")["ms"].sum()
        excess = slow.loc[per_step.index, "wall_ms"] - median_ms
        held = per_step.index[(per_step >= b.period_work_share * excess).to_numpy()]
        if len(held) >= b.period_min_occurrences and (best is None or len(held) > len(best)):
            best = held
    if best is None:
        return None
    steps = sorted(int(s) for s in best)
    gaps = np.diff(steps)
    excess_ms = float(slow.loc[steps, "wall_ms"].median() - median_ms)
    largest = largest_excess(pd.Series(steps), slow.loc[steps, "wall_ms"].reset_index(drop=True), median_ms)
    return {
        "largest": largest,
        "period": int(round(float(np.median(gaps)))) if gaps.max() - gaps.min() <= 1 else None,
        "offset": None,
        "by_work": True,
        "occurrences": len(steps),
        "slots": len(steps),
        "slow_total": int(len(slow)),
        "steps": steps,
        "not_slow": [],
        "quiet_before": [],
        "excess_ms": excess_ms,
        "input_ms": None,
        "input_wait": False,
        "traced_steps": [],
        "work": period_work(work, rank, steps, excess_ms, th),
    }


def largest_excess(steps: pd.Series, wall_ms: pd.Series, median_ms: float) -> tuple[int, float] | None:
    """The period's first step and its excess over the median, where it is the slowest and over LARGEST_FACTOR times the
    median excess: the first evaluation of a CUDA run (cuBLAS and cuDNN set up for its shapes) took 30 ms where the
    later ones took 3.5 (H100, fixtures/runs/periodic_evaluation_h100), and "steps 19, 39, 59, 79 are 2.13 ms slower"
    alone hides it. A slowest step elsewhere in the period is noise for the title, not a cold start."""
    if len(steps) < 2:
        return None
    excess = wall_ms.to_numpy(dtype=float) - median_ms
    i = int(np.argmax(excess))
    middle = float(np.median(excess))
    if i != int(np.argmin(steps.to_numpy())) or middle <= 0 or excess[i] <= LARGEST_FACTOR * middle:
        return None
    return int(steps.iloc[i]), float(excess[i])


def longest_period(span: int, occurrences: int) -> int:
    """The longest N at which ``occurrences`` steps k, k + N, … fit in ``span`` consecutive steps: N = 200 fits 3
    times in steps 0–599 (0, 200, 400), N = 300 does not (0, 300, 600)."""
    return (span - 1) // max(1, occurrences - 1)


def period_work(
    work: pd.DataFrame | None, rank: int, period_steps: list[int], excess_ms: float, th: Thresholds
) -> list[dict]:
    """What light mode saw run in the period's slow steps (checkpoint saves, evaluation spans), costliest first.

    A work record carries the step in progress when the call began, and a step's time runs from its boundary
    to the next, so the call's time is inside that very step: the slow step itself, not its neighbour (the
    periodic_checkpoint and periodic_evaluation fixtures: every record's step is a slow step, 19, 39, 59, 79).
    One kind of work counts when ``period_min_hit_share`` of the slow steps hold it and its median time in them
    (several records of a step added up) is ``period_work_share`` of their excess over the median.
    """
    if work is None or not len(work) or not period_steps or not excess_ms > 0:
        return []
    b = th.step_budget
    rows = work[(work["rank"] == rank) & work["step"].isin(period_steps)]
    found = []
    for what, of_kind in rows.groupby("what", sort=True):
        per_step = of_kind.groupby("step")["ms"].sum()
        if len(per_step) < b.period_min_hit_share * len(period_steps):
            continue
        ms = float(per_step.median())
        if ms < b.period_work_share * excess_ms:
            continue
        by_line = of_kind.groupby(of_kind["location"].fillna(""))["ms"].agg(["sum", "size"])
        by_line = by_line.sort_values("sum", ascending=False)
        entry = {
            "what": str(what),
            "ms": ms,
            "steps": [int(s) for s in per_step.index],
            "locations": [(str(loc) or None, int(r["size"]), float(r["sum"])) for loc, r in by_line.iterrows()],
        }
        if what == HOST_CODE:  # the function sampled most, and the loop's line that called it
            top = of_kind[of_kind["location"].fillna("") == (entry["locations"][0][0] or "")]
            entry["code"] = {
                key: (str(top[key].mode().iloc[0]) if key in top and top[key].notna().any() else None)
                for key in ("name", "caller", "library_location")
            }
        found.append(entry)
    if any(w["what"] != HOST_CODE for w in found):  # the Python sampled in an evaluation or a save is that work
        found = [w for w in found if w["what"] != HOST_CODE]
    return sorted(found, key=lambda w: -w["ms"])
