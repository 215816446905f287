"""Shared helpers of the trace tests: fixture paths and a Profile around one trace."""

from __future__ import annotations

import pandas as pd

from diagnose.ingest.profile_data import Profile
from parsers.trace import read_trace
from tests.paths import FIXTURES

TRACE = FIXTURES / "trace"
BAD = FIXTURES / "bad"
EVENT_SYNC = TRACE / "hta" / "critical_path_cuda_event_sync_event_sync_trace.json.gz"
SAMPLED_RANK0 = TRACE / "hta" / "trace_filter_sampled_rank-0.json.gz"
SYNC_PLANTED = TRACE / "sync_planted" / "trace.json.gz"
SYNC_FREE = TRACE / "sync_free" / "trace.json.gz"


def profile_of(*paths, sync_records: dict | None = None) -> Profile:
    """A Profile holding the traces at ``paths`` (rank from the trace, else its position)."""
    traces = {}
    for i, p in enumerate(paths):
        t = read_trace(p)
        traces[t.rank if t.rank is not None else i] = t
    # kernels/nvml given so Profile does not import the ncu/nvml parsers these tests do not need
    return Profile(
        sources=[str(p) for p in paths],
        kernels=pd.DataFrame(),
        nvml=pd.DataFrame(),
        traces=traces,
        sync_records=sync_records or {},
    )
