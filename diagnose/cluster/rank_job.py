"""The per-rank task a cluster worker runs: parse one rank's trace, keep its tables as Parquet, return a summary.

``read_rank(source, folder)`` is a plain function of paths to a small dict, so it crosses to a Dask worker and
back as a few hundred bytes whatever the trace's size: the tables stay on the worker's disk (shared with the
parent: the traces' folder or ``--cache``), and the parent reads them one rank at a time
(:mod:`diagnose.cluster.parquet_traces`). The parse is :func:`diagnose.ingest.parallel.read_artifact`'s, the
one a local read runs, so a rank's tables are the same wherever they were read.

Bad input never raises: the summary's ``error`` carries the same text a local read gives. A worker that dies
(its memory cap) is the scheduler's to retry (:mod:`diagnose.cluster.cluster_read`).
"""

from __future__ import annotations

import os
import resource
import shutil
import socket
import time
from pathlib import Path
from typing import Any

from diagnose.cluster.rank_cache import TRACE_DIR, source_key, write_summary
from diagnose.ingest.parallel import read_artifact
from parsers import run_folder
from parsers.reader import TRACES


def read_rank(source: str, folder: str, kind: str | None = None) -> dict[str, Any]:
    """Parse ``source`` (a rank's trace), write its tables under ``folder``; the rank's summary (also written
    there as ``rank.json``, last)."""
    t0 = time.perf_counter()
    summary: dict[str, Any] = {"path": source, "folder": folder, "host": socket.gethostname(), "pid": os.getpid()}
    try:
        summary["key"] = source_key(source)
    except OSError as e:
        summary["error"] = f"cannot be read: {e.strerror or e}"
        return _finished(summary, t0)
    read = read_artifact(source, kind)
    summary["read_s"] = read.read_s
    summary["warnings"] = read.warnings
    if read.error is not None:
        summary["error"] = read.error
        return _finished(summary, t0)
    if read.table != TRACES:
        summary["error"] = "is not a profiler trace: only rank traces are read on the cluster"
        return _finished(summary, t0)
    trace = read.value
    summary["rank"] = trace.rank if trace.rank is not None else run_folder.rank_of(source)
    summary["rank_in_trace"] = trace.rank is not None
    out = Path(folder)
    if out.exists():
        shutil.rmtree(out)  # what an older gpudiag or an older file left: never mixed with the new tables
    t1 = time.perf_counter()
    from parsers.trace_parquet import frames_of, write_trace

    summary["parquet_bytes"] = write_trace(trace, out / TRACE_DIR)
    summary["write_s"] = time.perf_counter() - t1
    summary["rows"] = {name: int(len(frame)) for name, frame in frames_of(trace).items()}
    del trace, read
    _finished(summary, t0)
    write_summary(out, summary)
    return summary


def _finished(summary: dict[str, Any], t0: float) -> dict[str, Any]:
    summary["job_s"] = time.perf_counter() - t0
    summary["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return summary
