"""Input wait per step from a Kineto trace: the time the loop spent fetching batches from a torch DataLoader.

Every torch DataLoader iterator wraps its ``__next__`` in a ``record_function`` named
``enumerate(DataLoader)#<IteratorClass>.__next__`` (``_SingleProcessDataLoaderIter``,
``_MultiProcessingDataLoaderIter``, or a subclass), so a trace captured anywhere, not only by
gpudiag, says how long each fetch blocked the host. Per step, the union of those ranges (a loader
that reads from another loader is counted once) clipped to the step's host window is its input
wait: the same measure as light mode's ``input_ms`` (diagnose.launch.runtime.input_wait).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from diagnose.trace_timeline import clip_sums, merge, name_mask

DATALOADER_NEXT = re.compile(r"^enumerate\(DataLoader\)#.+\.__next__$")


def dataloader_fetches(trace) -> pd.DataFrame:
    """The ``enumerate(DataLoader)#...__next__`` ranges of the trace (annotations and CPU ops), by start."""
    found = []
    for table in (trace.annotations, trace.cpu_ops):
        if len(table):
            is_fetch = name_mask(table["name"], lambda names: names.str.match(DATALOADER_NEXT))
            found.append(table.loc[is_fetch, ["ts_ns", "end_ns", "tid", "name"]])
    if not found:
        return pd.DataFrame({"ts_ns": pd.Series([], dtype="int64"), "end_ns": pd.Series([], dtype="int64")})
    fetches = pd.concat(found, ignore_index=True)
    # a range Kineto keeps both as an annotation and as a CPU op is one fetch
    fetches = fetches.drop_duplicates(subset=["ts_ns", "end_ns", "tid"])
    return fetches.sort_values("ts_ns", kind="stable").reset_index(drop=True)


def input_wait_per_step(trace, steps: pd.DataFrame) -> pd.Series:
    """Input wait in ms of each step of ``steps`` (``step``, ``cpu_start_ns``, ``cpu_end_ns``, as
    trace_timeline.steps gives), indexed by step: 0 where the step fetched nothing, and every step 0 when
    the trace has no DataLoader range (a loop without a torch DataLoader, or a trace without record_function
    ranges)."""
    fetches = dataloader_fetches(trace)
    starts, ends = merge(fetches["ts_ns"].to_numpy(dtype=np.int64), fetches["end_ns"].to_numpy(dtype=np.int64))
    wait_ns = clip_sums(
        starts,
        ends,
        steps["cpu_start_ns"].to_numpy(dtype=np.int64),
        steps["cpu_end_ns"].to_numpy(dtype=np.int64),
    )
    index = pd.Index(steps["step"].to_numpy(dtype=np.int64), name="step")
    return pd.Series(np.asarray(wait_ns, dtype=np.float64) / 1e6, index=index, name="input_ms")
