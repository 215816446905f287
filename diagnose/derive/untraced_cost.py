"""What a trace-measured cause costs the untraced median step: the bound on "could save" (issue 31).

The idle and sync analyzers measure in the traced steps, which the profiler slows: a char-level GPT's traced steps
took about 49 ms against a 19.85 ms median untraced step, so "86 % idle, fixing it could save ~86 %" overstated what
the script would gain. Where the run also has untraced step timings, the step budget (diagnose.derive.
step_budget_table) puts the traced causes into the median untraced step: its GPU busy, and its idle by cause, each
part fitted to that step. What removing some causes could save is then their part of the median step, which is never
more than the step less its GPU busy. This module reads that bound for the analyzers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from diagnose.formatting import ms_human, share_human

MEDIAN_STEP = "median step"  # the budget's column of the median untraced steady step
TRACED_STEPS = "traced steps"  # its column of the traced steps
BUSY_PARTS = ("compute", "memcpy", "collective")
IDLE_PARTS = ("input", "sync", "launch_bound", "allocator", "other_wait")  # the idle with a named cause
BASIS = "the median step"


@dataclass(frozen=True)
class UntracedCost:
    """``parts``' milliseconds in the median untraced step of one or more ranks, with the figures that bound it."""

    parts_ms: float
    median_ms: float
    busy_ms: float
    traced_ms: float | None  # the traced steps' mean wall time (None: no traced column)
    by_cause: bool = True  # False: no part was measured, parts_ms is all of the step's idle (the step less busy)

    @property
    def share(self) -> float:
        return self.parts_ms / self.median_ms if self.median_ms > 0 else float("nan")

    def words(self, what: str) -> str:
        """``Untraced, the median step is 5.56 ms with 5.06 ms of GPU busy: <what> hold 494 µs of it (8.9 %), what
        removing them can save; the traced steps ran 6.17 ms, slowed by the profiler.``"""
        slower = (
            f"; the traced steps ran {ms_human(self.traced_ms)}, slowed by the profiler"
            if self.traced_ms is not None and self.traced_ms > self.median_ms
            else ""
        )
        what = what if self.by_cause else "its idle time, whose causes the trace cannot tell apart,"
        return (
            f"Untraced, the median step is {ms_human(self.median_ms)} with {ms_human(self.busy_ms)} of GPU busy: "
            f"{what} hold {ms_human(self.parts_ms)} of it ({share_human(self.share)}), what removing them can "
            f"save{slower}."
        )


def untraced_cost(
    step_budget, ranks, parts: tuple[str, ...] = IDLE_PARTS, whole_idle: bool = False
) -> UntracedCost | None:
    """``parts`` summed over ``ranks``' median untraced steps (Derived.step_budget()), never more than the steps less
    their GPU busy (the parts are fitted to the step, to rounding); None where a rank has no median-step budget, or its
    GPU busy was not measured there, or none of ``parts`` was and not ``whole_idle`` (then: all of the step's idle,
    ``by_cause`` False: a JAX trace links no GPU work to a launch, so its idle has no cause)."""
    table = step_budget.budget
    if table is None or not len(table):
        return None
    parts_ms = median_ms = busy_ms = traced_ms = 0.0
    traced_n = 0
    by_cause = True
    for rank in ranks:
        rows = table[(table["rank"] == rank) & (table["column"] == MEDIAN_STEP)]
        if not len(rows):
            return None
        by_part = dict(zip(rows["part"], rows["ms"]))
        busy = [by_part.get(p, np.nan) for p in BUSY_PARTS]
        mine = [by_part.get(p, np.nan) for p in parts]
        if np.isnan(busy).all() or (np.isnan(mine).all() and not whole_idle):
            return None
        wall = float(rows["wall_ms"].iloc[0])
        idle = max(0.0, wall - float(np.nansum(busy)))
        if np.isnan(mine).all():
            by_cause = False
            parts_ms += idle
        else:
            parts_ms += min(float(np.nansum(mine)), idle)
        busy_ms += float(np.nansum(busy))
        median_ms += wall
        traced = table[(table["rank"] == rank) & (table["column"] == TRACED_STEPS)]
        if len(traced):
            traced_ms += float(traced["wall_ms"].iloc[0])
            traced_n += 1
    if median_ms <= 0:
        return None
    return UntracedCost(parts_ms, median_ms, busy_ms, traced_ms if traced_n == len(ranks) else None, by_cause)
