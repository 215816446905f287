"""The second per-rank task: what the trace analyzers work out from one rank's trace alone, on a worker.

The analyzers that read traces (idle, sync, launch, comm, and the step budget's traced steps) each split their
work into a per-rank part (their ``rank_part``, asked for through :meth:`diagnose.derive.derived.Derived.rank_part`)
and a cross-rank step that reads only those parts. Here a worker reads the rank's Parquet tables, runs those
analyzers on a Profile of that one rank within the run's context (the parent's Profile without its traces:
manifest, step records, sources), and keeps every part they work out for the rank: the same parts a local read
works out, from the same code. The parent's report then puts them together without reading the rank's tables
(:mod:`diagnose.cluster.cluster_report`).

A comm part's merged intervals (~2 MiB for an 81 MiB rank) stay on the worker's disk as Parquet
(:class:`StoredRankTimes`); the cross-rank step reads them one rank at a time.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from diagnose.cluster.rank_cache import TRACE_DIR

# the analyzers whose per-rank parts a worker works out; the step budget's parts come through its Derived table
PART_ANALYZERS = ("idle", "sync", "launch", "comm", "step_budget")
TIMES_FILE = "comm_times.parquet"
STEPS_FILE = "comm_steps.parquet"


def context_of(profile) -> Any:
    """What a worker needs of the parent's Profile besides the rank's trace: everything but the traces, the
    allocator snapshots and the ncu tables (no trace analyzer's per-rank part reads them), and how it was read."""
    return dataclasses.replace(profile, traces={}, snapshots={}, kernels=None, ncu_rules=None, ingest={})


def analyze_rank(folder: str, rank: int, context, thresholds) -> dict[str, Any]:
    """On a worker: every per-rank part the trace analyzers work out for ``rank`` (its tables under ``folder``)."""
    from diagnose.analyzers import discover
    from diagnose.derive.derived import Derived
    from parsers.trace_parquet import read_trace

    t0 = time.perf_counter()
    profile = dataclasses.replace(context, traces={rank: read_trace(Path(folder) / TRACE_DIR)})
    derived = Derived(profile, thresholds)
    derived.record_parts = True
    for mod in discover():
        if mod.NAME in PART_ANALYZERS:
            mod.analyze(profile, derived, thresholds)
    parts = {key: part for key, part in derived.rank_parts.items() if key[1] == rank}
    comm = parts.get(("comm", rank))
    if comm is not None and comm["times"] is not None:
        parts[("comm", rank)] = dict(comm, times=StoredRankTimes.write(comm["times"], folder))
    return {
        "parts": parts,
        "job_s": time.perf_counter() - t0,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "pid": os.getpid(),
    }


@dataclasses.dataclass(frozen=True)
class StoredRankTimes:
    """A rank's :class:`~diagnose.derive.collectives.RankTimes` kept as Parquet in its cache folder; ``load()``
    reads it back (comm's cross-rank step asks for one rank's at a time, diagnose.derive.collectives)."""

    folder: str
    span_ns: int

    @classmethod
    def write(cls, times, folder: str) -> StoredRankTimes:
        columns = {}
        for name in ("compute", "busy", "comm"):
            starts, ends = getattr(times, name)
            columns[name] = (np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64))
        longest = max((len(s) for s, _ in columns.values()), default=0)
        frame = {}
        for name, (starts, ends) in columns.items():  # one table, each kind padded to the longest with -1
            frame[f"{name}_start_ns"] = np.concatenate([starts, np.full(longest - len(starts), -1, np.int64)])
            frame[f"{name}_end_ns"] = np.concatenate([ends, np.full(longest - len(ends), -1, np.int64)])
            frame[f"{name}_n"] = np.full(longest, len(starts), np.int64)
        pd.DataFrame(frame).to_parquet(Path(folder) / TIMES_FILE, compression="zstd", index=False)
        times.steps.to_parquet(Path(folder) / STEPS_FILE, compression="zstd")  # its index kept
        return cls(str(folder), int(times.span_ns))

    def load(self):
        from diagnose.derive.collectives import RankTimes

        frame = pd.read_parquet(Path(self.folder) / TIMES_FILE)
        steps = pd.read_parquet(Path(self.folder) / STEPS_FILE)
        kinds = {}
        for name in ("compute", "busy", "comm"):
            n = int(frame[f"{name}_n"].iloc[0]) if len(frame) else 0
            kinds[name] = (frame[f"{name}_start_ns"].to_numpy()[:n], frame[f"{name}_end_ns"].to_numpy()[:n])
        return RankTimes(steps, kinds["compute"], kinds["busy"], kinds["comm"], self.span_ns)
