"""Sync sites: a rank's sync calls grouped per (location, op) and ranked by cost, how a sentence names a site,
and what fixes the op there.

Shared because the sync analyzer and the step budget name the same costliest site the same way, with the same
advice: a site is named by its exact ``file:line`` when known, else by its function (or the module-level code)
and file, never by a line the sync is not on.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.derive.library_sync_sites import library_fix
from diagnose.derive.sync_calls import MODULE

ADVICE = [
    (
        ("item", "_local_scalar_dense", "is_nonzero", "tolist"),
        "keep the value on the GPU: accumulate losses/metrics in a device tensor and read it every N steps "
        "(or at the end of the epoch) instead of calling .item()/.tolist()/if tensor: each step",
    ),
    (
        ("nonzero", "index", "masked_select", "unique", "repeat_interleave"),
        "data-dependent shapes (boolean masking, nonzero, unique) must read the count back: use torch.where or "
        "multiply by the mask so shapes stay static",
    ),
    (
        ("to", "_to_copy", "copy_", "cpu", "Memcpy"),
        "a device-to-host copy waits for the GPU: copy with non_blocking=True into pinned memory and read it later, "
        "or move the metric computation onto the GPU",
    ),
    (
        ("cudaDeviceSynchronize", "cudaStreamSynchronize", "synchronize"),
        "an explicit synchronize in the loop: time with torch.cuda.Event(enable_timing=True) and read elapsed_time "
        "after the step, or drop the call",
    ),
    (
        ("cudaEventSynchronize", "Event"),
        "an event wait on the host: query the event later (event.query()) or wait on the GPU with stream.wait_event",
    ),
]


def advice_for(op: str, call: str, library_location: str | None = None) -> str:
    """What fixes ``op`` at a site: a known library's setting where a library made the call (library_sync_sites),
    else the advice for the op."""
    fix = library_fix(library_location, op)
    if fix is not None:
        return fix
    text = f"{op} {call}"
    for keys, advice in ADVICE:
        if any(k in text for k in keys):
            return advice
    return "move the synchronising call out of the step, or do it every N steps"


def where_words(location: str, function, file, line_exact: bool, library=None) -> str:
    """How a sentence names a sync site: the exact ``file:line`` when known, else the function (or the module-level
    code) and its file, never a line the sync is not on; with ``library`` (a library's ``file:line`` that made the
    call, light mode's ``library_location``), that line first, inside the call at the user's."""
    if line_exact or not function or not file:
        where = str(location)
    elif function == MODULE:
        where = f"the module-level code of {file}"
    else:
        where = f"{function}() in {file}"
    if isinstance(library, str) and library:
        return f"{library} (inside the call at {where})"
    return where


def group_syncs(calls: pd.DataFrame, n_steps: int, step_ns: float) -> pd.DataFrame:
    """One row per (location, op, library_location): counts and costs per step, costliest first."""
    cols = [
        "location",
        "op",
        "function",
        "file",
        "line",
        "line_exact",
        "library_location",
        "calls",
        "count",
        "count_per_step",
        "blocked_ms_per_step",
        "gpu_idle_ms_per_step",
        "share_of_step",
        "blocked_ms",
        "gpu_idle_ms",
    ]
    if not len(calls):
        return pd.DataFrame(columns=cols)
    grouped = _grouped_by_location_op(calls)
    # the figures as arrays and one frame (six column assignments cost ~2 ms on a few rows)
    count = grouped["count"].to_numpy()
    blocked_ns, gpu_idle_ns = grouped["blocked_ns"].to_numpy(), grouped["gpu_idle_ns"].to_numpy()
    blocked_ms, gpu_idle_ms = blocked_ns / 1e6, gpu_idle_ns / 1e6
    figures = {
        "count_per_step": count / n_steps,
        "blocked_ms_per_step": blocked_ms / n_steps,
        "gpu_idle_ms_per_step": gpu_idle_ms / n_steps,
        "share_of_step": gpu_idle_ns / n_steps / step_ns if step_ns and step_ns == step_ns else np.nan,
        "blocked_ms": blocked_ms,
        "gpu_idle_ms": gpu_idle_ms,
    }
    out = pd.DataFrame({c: figures[c] if c in figures else grouped[c] for c in cols})
    out = out.sort_values(["gpu_idle_ms_per_step", "blocked_ms_per_step"], ascending=False, na_position="last")
    return out.reset_index(drop=True)


def _grouped_by_location_op(calls: pd.DataFrame) -> dict[str, pd.Series]:
    """``group_syncs``' aggregation per (location, op, library location), groups in order of first appearance: the same columns and
    values as a two-key ``groupby(...).agg(...)``, through one integer group code and a groupby per column
    (~1 ms instead of ~5 ms of named aggregation on a dozen rows)."""
    loc, _ = pd.factorize(calls["location"], use_na_sentinel=False)  # a missing key is a group, as dropna=False
    op, _ = pd.factorize(calls["op"], use_na_sentinel=False)
    # a library's line beside the user's is a site of its own: HF Trainer's loss check and the model's mask check
    # both sync with is_nonzero inside the one trainer.train() line, and each has its own fix
    lib = (
        pd.factorize(calls["library_location"], use_na_sentinel=False)[0]
        if "library_location" in calls
        else np.zeros(len(calls), dtype=np.int64)
    )
    key = (loc.astype(np.int64) * (int(op.max()) + 1) + op) * (int(lib.max()) + 1) + lib
    _, first_row, inverse = np.unique(key, return_index=True, return_inverse=True)
    rank = np.empty(len(first_row), dtype=np.int64)
    rank[np.argsort(first_row, kind="stable")] = np.arange(len(first_row))
    group = rank[inverse.reshape(-1)]  # 0, 1, ... in order of first appearance, as groupby(sort=False) orders
    first_row = np.sort(first_row)

    def by_group(column: str):
        return calls[column].groupby(group, sort=True)

    out = {
        # the keys as groupby gives them: an index built from the first row's values (object strings infer str)
        "location": pd.Series(pd.Index(calls["location"].to_numpy()[first_row])),
        "op": pd.Series(pd.Index(calls["op"].to_numpy()[first_row])),
        "function": by_group("function").first(),
        "file": by_group("file").first(),
        "line": by_group("line").first(),
        "line_exact": by_group("line_exact").all(),
        "library_location": (
            by_group("library_location").first()
            if "library_location" in calls
            else pd.Series([None] * len(first_row), dtype=object)
        ),
        "calls": by_group("call").agg(lambda s: ", ".join(dict.fromkeys(map(str, s)))),
        "count": by_group("call").size(),
        "blocked_ns": by_group("blocked_ns").sum(),
        "gpu_idle_ns": by_group("gpu_idle_ns").agg(lambda s: s.sum(min_count=1)),
    }
    return {k: v.reset_index(drop=True) for k, v in out.items()}
