"""Iterations of a trace that has no ``ProfilerStep`` ranges: what repeats at the top.

A trace captured by someone else (``torch.profiler.profile()`` without a schedule or ``prof.step()``,
``jax.profiler.trace``) has no step markers. Treating it as one step gives "per step" figures over
the whole trace (1,460 host syncs per step). What repeats once per iteration is tried instead, in
this order; the first found with enough repeats is used, and the steps' ``source`` says which:

1. ``Optimizer.step#...`` annotations (outermost): an iteration ends at each optimizer step;
2. backward passes, from the Python frames of ``Tensor.backward`` / ``torch.autograd.backward``
   (traces with stacks): an iteration ends at the end of each outermost backward; in traces without
   stacks, from the autograd engine's ``autograd::engine::evaluate_function: ...`` ops. Each carries the
   sequence number of the forward op it differentiates, and a forward numbers its ops after every op of
   the forwards before it, so a pass begins where an engine op's number is above every number seen before
   (the engine runs a pass from its newest node down): this holds whatever thread the engine runs on and
   whatever else runs beside it. Where the trace has no sequence numbers, one pass is a run of engine ops
   that no other top-level op interrupts (the forward and a hand-written update run between passes, on the
   main thread; with CUDA the engine runs on its own thread). When the Python frames show fewer passes than
   the engine ran, the engine's passes are the iterations: one backward pass per iteration, never several
   iterations merged into one step (issue 28: a word-level LM with a hand-written SGD read 13 iterations a
   step);
3. JAX dispatches ``PjitFunction(name)``: the dominant jitted computation, as XProf infers steps
   from the most frequently executed XLA program. Of the functions dispatched at least
   ``MIN_REPEATS`` times, the one dispatched least often (a helper dispatched several times per
   iteration is not the step); on a tie the one whose XLA module runs longest; an iteration runs from
   one dispatch to the next;
4. the outermost repeated user frame (traces with stacks): the shallowest function of the user's
   own code called at least ``MIN_REPEATS`` times, the longest in total on a tie; an iteration runs
   from one call to the next.

Where nothing repeats, there are no steps, and figures are given over the span, never "per step".
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

MIN_REPEATS = 3  # starts-based sources: 3 calls make 2 iterations (call to call)
_BACKWARD_FILES = ("torch/_tensor.py", "torch/autograd/__init__.py")
_PJIT = re.compile(r"^PjitFunction\((.+)\)$")


def infer_iterations(trace, first_host_ns: int) -> tuple[np.ndarray, np.ndarray, str] | None:
    """(starts, ends, source) of the iterations found in ``trace``, or None when nothing repeats."""
    for finder in (_optimizer_steps, _backward_passes, _autograd_engine_passes, _jax_dispatches, _repeated_user_frame):
        found = finder(trace, first_host_ns)
        if found is not None:
            return found
    return None


def outermost(df: pd.DataFrame) -> pd.DataFrame:
    """Rows not inside an earlier row of ``df`` (sorted by start)."""
    if not len(df):
        return df
    df = df.sort_values("ts_ns", kind="stable")
    run_end = np.maximum.accumulate(df["end_ns"].to_numpy())
    keep = np.ones(len(df), dtype=bool)
    keep[1:] = df["ts_ns"].to_numpy()[1:] >= run_end[:-1]
    return df[keep]


def _ends_based(events: pd.DataFrame, first_host_ns: int, source: str):
    if len(events) < 2:
        return None
    ends = events["end_ns"].to_numpy(dtype=np.int64)
    starts = np.r_[min(first_host_ns, int(events["ts_ns"].iloc[0])), ends[:-1]]
    return starts, ends, source


def _starts_based(events: pd.DataFrame, source: str):
    if len(events) < MIN_REPEATS:
        return None
    starts = events["ts_ns"].to_numpy(dtype=np.int64)
    return starts[:-1], starts[1:], source


def _optimizer_steps(trace, first_host_ns: int):
    ann = trace.annotations
    if not len(ann):
        return None
    opt = ann[ann["name"].astype(str).str.startswith("Optimizer.step#") & (ann["cat"].astype(str) == "user_annotation")]
    return _ends_based(outermost(opt), first_host_ns, "Optimizer.step annotations (no ProfilerStep in the trace)")


def _backward_passes(trace, first_host_ns: int):
    py = trace.python
    if not len(py) or "function" not in py:
        return None
    file = py["file"].astype(str)
    is_backward = (py["function"].astype(str) == "backward") & file.str.endswith(_BACKWARD_FILES)
    frames = outermost(py[is_backward])
    if len(frames) < 2:
        return None
    engine = _engine_passes_by_sequence(_top_engine_ops(trace))
    if engine is not None and len(engine) > len(frames):  # frames missing: the engine's passes are the count
        return _ends_based(
            engine,
            first_host_ns,
            f"backward passes of the autograd engine ({len(engine)}; the trace's Python frames show "
            f"{len(frames)}; no ProfilerStep or optimizer in the trace)",
        )
    return _ends_based(frames, first_host_ns, "backward passes (no ProfilerStep or optimizer in the trace)")


_ENGINE_OP = "autograd::engine::evaluate_function:"


def _top_engine_ops(trace) -> pd.DataFrame:
    """The autograd engine's top-level ``evaluate_function`` ops, in time order."""
    ops = trace.cpu_ops
    if not len(ops):
        return ops
    top = ops[ops["parent_index"].to_numpy() < 0]
    names = top["name"]
    if isinstance(names.dtype, pd.CategoricalDtype):  # asked once per name, not once per op (1 GB trace: 1.9 M ops)
        hits = np.flatnonzero(names.cat.categories.astype(str).str.startswith(_ENGINE_OP))
        is_engine = np.isin(names.cat.codes.to_numpy(), hits)
    else:
        is_engine = names.astype(str).str.startswith(_ENGINE_OP).to_numpy()
    return top[is_engine].sort_values("ts_ns", kind="stable")


def _engine_passes_by_sequence(engine: pd.DataFrame) -> pd.DataFrame | None:
    """Backward passes from the engine ops' sequence numbers: a pass begins at an op numbered above every op
    before it (its forward ran after theirs); (ts_ns, end_ns) per pass, or None without numbers."""
    if "sequence_number" not in engine or len(engine) < 2:
        return None
    seq = engine["sequence_number"].to_numpy(dtype=np.int64)
    numbered = seq >= 0  # AccumulateGrad and other nodes of no forward op carry none
    if len(np.unique(seq[numbered])) < 2:  # no numbers (or a table that filled them with one value)
        return None
    seen = np.maximum.accumulate(np.where(numbered, seq, -1))
    begins = numbered & (seq > np.r_[-1, seen[:-1]])
    pass_id = np.cumsum(begins) - 1
    keep = pass_id >= 0  # engine ops before the first numbered one: the tail of a pass begun before the trace
    ends = np.maximum.accumulate(engine["end_ns"].to_numpy(dtype=np.int64))
    return (
        pd.DataFrame({"ts_ns": engine["ts_ns"].to_numpy(dtype=np.int64)[keep], "end_ns": ends[keep]})
        .groupby(pass_id[keep])
        .agg(ts_ns=("ts_ns", "min"), end_ns=("end_ns", "max"))
        .reset_index(drop=True)
    )


def _autograd_engine_passes(trace, first_host_ns: int):
    engine = _top_engine_ops(trace)
    if len(engine) < 2:
        return None
    passes = _engine_passes_by_sequence(engine)
    if passes is None:
        passes = _engine_passes_between_other_ops(trace, engine)
    if len(passes) < MIN_REPEATS:
        return None
    return _ends_based(
        passes,
        first_host_ns,
        "backward passes of the autograd engine (no ProfilerStep, optimizer or stacks in the trace)",
    )


def _engine_passes_between_other_ops(trace, engine: pd.DataFrame) -> pd.DataFrame:
    """The engine's ops grouped into passes where no sequence numbers say them: a pass ends where another
    top-level op interrupts the engine's."""
    top = trace.cpu_ops[trace.cpu_ops["parent_index"].to_numpy() < 0]
    is_engine = top.index.isin(engine.index)
    # what interrupts a pass: top-level ops of the threads the engine does not run on (the main thread,
    # with CUDA); where the engine runs on the main thread (CPU), that thread's other top-level ops
    engine_tids = set(engine["tid"].tolist())
    others = top[~is_engine]
    elsewhere = others[~others["tid"].isin(engine_tids)]
    breakers = np.sort((elsewhere if len(elsewhere) else others)["ts_ns"].to_numpy(dtype=np.int64))
    starts = engine["ts_ns"].to_numpy(dtype=np.int64)
    run_end = np.maximum.accumulate(engine["end_ns"].to_numpy(dtype=np.int64))
    between = np.searchsorted(breakers, starts[1:], side="left") - np.searchsorted(breakers, run_end[:-1], side="left")
    first = np.r_[True, between > 0]
    pass_id = np.cumsum(first) - 1
    return (
        pd.DataFrame({"ts_ns": starts, "end_ns": run_end})
        .groupby(pass_id)
        .agg(ts_ns=("ts_ns", "min"), end_ns=("end_ns", "max"))
    )


def _jax_dispatches(trace, first_host_ns: int):
    ops = trace.cpu_ops
    if not len(ops):
        return None
    names = ops["name"].astype(str)
    pjit = ops[names.str.startswith("PjitFunction(")]
    if not len(pjit):
        return None
    pjit = outermost(pjit)
    fn = pjit["name"].astype(str).str.extract(_PJIT, expand=False)
    stats = pd.DataFrame({"fn": fn, "dur_ns": pjit["dur_ns"].to_numpy()}).groupby("fn")["dur_ns"].agg(["size", "sum"])
    stats = stats[stats["size"] >= MIN_REPEATS]
    if not len(stats):
        return None
    # on a tie, the computation that runs longest: its XLA module's time ("jit_<fn>:XLA GPU module"), then dispatch
    module = ops[names.str.endswith(":XLA GPU module")]
    module_fn = module["name"].astype(str).str.extract(r"^jit_(.+):XLA GPU module$", expand=False)
    stats["module_ns"] = module.groupby(module_fn.to_numpy())["dur_ns"].sum().reindex(stats.index).fillna(0)
    best = stats.sort_values(["size", "module_ns", "sum"], ascending=[True, False, False]).index[0]
    return _starts_based(
        pjit[fn.to_numpy() == best], f"JAX dispatches of PjitFunction({best}) (no step markers in the trace)"
    )


def _repeated_user_frame(trace, first_host_ns: int):
    py = trace.python
    if not len(py) or "is_user" not in py:
        return None
    user = py[py["is_user"].astype(bool)]
    if not len(user):
        return None
    depth = _depths(py["parent_index"].to_numpy())
    user = user.assign(depth=depth[user.index.to_numpy()], key=user["name"].astype(str))
    stats = user.groupby("key").agg(size=("ts_ns", "size"), depth=("depth", "min"), total=("dur_ns", "sum"))
    stats = stats[stats["size"] >= MIN_REPEATS]
    if not len(stats):
        return None
    best = stats.sort_values(["depth", "total"], ascending=[True, False]).index[0]
    calls = outermost(user[user["key"] == best])
    return _starts_based(calls, f"repeated calls of {best} (no step markers in the trace)")


def _depths(parent: np.ndarray, max_depth: int = 10_000) -> np.ndarray:
    """Nesting depth of each row of a parent-index array (roots: 0), one vectorised hop per level."""
    depth = np.zeros(len(parent), dtype=np.int64)
    current = parent.astype(np.int64, copy=True)
    for _ in range(max_depth):
        up = current >= 0
        if not up.any():
            break
        depth[up] += 1
        current[up] = parent[current[up]]
    return depth
