"""Steps after warm-up kept out of the step budget's figures: those that compiled (light mode's compilation
records: a JAX jit or torch.compile compiling again) and those that met a new input shape (its new-shape records:
cuDNN autotuning with cudnn.benchmark, allocator growth), with what compiled and which shapes, for the meta the
``step_budget.compilation`` and ``step_budget.new_shape`` findings judge (docs/step-budget.md).
"""

from __future__ import annotations

import pandas as pd

from diagnose.formatting import ms_human, n_things
from diagnose.thresholds import Thresholds
from parsers.events import WORK_SCHEMA
from parsers.run_records import WORK_COMPILATION, WORK_NEW_SHAPE

COMPILATION, NEW_SHAPE = WORK_COMPILATION, WORK_NEW_SHAPE  # the ``what`` of light mode's work records of these steps


def work_of(work: pd.DataFrame | None, rank: int, what: str) -> pd.DataFrame:
    """This rank's work records of one kind (``what``: compilation, new-shape, …), maybe empty; the parser's
    WORK_SCHEMA gives every column."""
    if work is None or not len(work):
        return WORK_SCHEMA.empty()
    return work[(work["rank"] == rank) & (work["what"] == what)].reset_index(drop=True)


def add_compile_meta(
    meta: dict,
    compiles: pd.DataFrame,
    rows: pd.DataFrame,
    warm: pd.Series,
    compiled: pd.Series,
    compiled_before: set | frozenset = frozenset(),
):
    """The compiles in the warm-up steps (a note) and after it (the steps kept apart and what compiled there).

    A compile after warm-up is one whose step is neither a warm-up nor an instrumented step: a step that has a
    step record (kept out of the steady figures) or the step the run ended in (no record, nothing to keep out).
    Each function compiled after warm-up says whether that was its first compile (``first_step``: its step, for a
    function that compiled once after warm-up and never before, neither in ``compiled_before`` (the names compiled
    before the first step) nor in an earlier step; None otherwise), ``once_step`` (its step when all its compiles after
    warm-up were in one step, first or not) and its ``recompiles``: JAX compiles jnp
    operations run outside jit one by one the first time they run, which is not a recompile (issue 34)."""
    meta["compile_steps"] = int(compiled.sum())
    meta["compile_step_numbers"] = [int(s) for s in rows.loc[compiled, "step"]]
    meta["compile_steps_wall_ms"] = float(rows.loc[compiled, "wall_ms"].sum())
    if not len(compiles):
        meta["compile_ms"] = 0.0
        return
    in_warmup = compiles["step"].isin(rows.loc[warm, "step"])
    kept_out = rows.loc[rows["warmup"], "step"]
    after = compiles[~compiles["step"].isin(kept_out)]
    if in_warmup.any():
        warm_ms = float(compiles.loc[in_warmup, "ms"].sum())
        meta["warmup_compile_ms"] = warm_ms
        meta["notes"].append(
            f"of the {n_things(meta['warmup_steps'], 'warm-up step')} ({ms_human(meta['warmup_ms'])}), "
            f"{ms_human(warm_ms)} was compilation ({n_things(int(in_warmup.sum()), 'compile')}; compiles before the "
            "first step are in the run budget)"
        )
    meta["compile_ms"] = float(after["ms"].sum())
    meta["compile_count"] = int(len(after))
    if not len(after):
        return
    functions = []
    for name, of_name in after.groupby(after["name"].fillna(""), sort=False):
        by_line = (
            of_name.groupby(of_name["location"].fillna(""))["ms"]
            .agg(["sum", "size"])
            .sort_values("sum", ascending=False)
        )
        steps = sorted({int(s) for s in of_name["step"]})
        earlier = compiles.loc[compiles["step"] < steps[0], "name"]
        # a function that compiled more than once after warm-up is recompiling for new shapes; its first compile may
        # predate the records (a jitted step function's first call starts the first step, before any record)
        first = bool(name) and len(of_name) == 1 and name not in compiled_before and not (earlier == name).any()
        functions.append(
            {
                "name": str(name) or None,
                "ms": float(of_name["ms"].sum()),
                "count": int(len(of_name)),
                "steps": steps,
                "locations": [(str(loc) or None, int(r["size"]), float(r["sum"])) for loc, r in by_line.iterrows()],
                "first_step": steps[0] if first else None,
                # compiled in one step only after warm-up (first or for shapes it had not met: an evaluation's eager
                # ops, one executable per shape): one-off work, not a function that keeps compiling
                "once_step": steps[0] if len(steps) == 1 else None,
                "recompiles": int(len(of_name)) - (1 if first else 0),
            }
        )
    meta["compile_functions"] = sorted(functions, key=lambda f: -f["ms"])
    per_step = after.groupby("step")["ms"].sum()
    meta["compile_ms_by_step"] = {int(s): float(ms) for s, ms in per_step.items()}
    if meta["compile_steps"]:
        meta["notes"].append(
            f"{n_things(meta['compile_steps'], 'step')} after warm-up compiled ({ms_human(meta['compile_steps_wall_ms'])} "
            f"in all, {ms_human(meta['compile_ms'])} of it compilation) and are kept out of the figures (step_budget.compilation)"
        )


def add_new_shape_meta(meta: dict, shapes: pd.DataFrame, kept: pd.DataFrame, median_ms: float, th: Thresholds):
    """The kept-apart steps that met a new input shape, each with its shape, wall time and whether it was slow
    (``new_shape_slow_factor`` x the steady median)."""
    if not len(kept):
        return
    first = shapes.drop_duplicates("step").set_index("step")
    steps = []
    for r in kept.itertuples():
        record = first.loc[r.step]
        steps.append(
            {
                "step": int(r.step),
                "shape": str(record["name"]) if isinstance(record["name"], str) else None,
                "cudnn_benchmark": bool(record["cudnn_benchmark"]) if record["cudnn_benchmark"] is not None else False,
                "wall_ms": float(r.wall_ms),
                "over_median_ms": float(r.wall_ms - median_ms),
                "slow": bool(r.wall_ms > th.step_budget.new_shape_slow_factor * median_ms),
            }
        )
    meta["new_shapes"] = steps
    meta["notes"].append(
        f"{n_things(len(steps), 'step')} after warm-up met a new input shape "
        f"({ms_human(meta['new_shape_steps_wall_ms'])} in all, "
        f"{sum(s['slow'] for s in steps)} of them slow) and are kept out of the figures (step_budget.new_shape)"
    )
