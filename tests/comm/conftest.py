"""Paths and hand-made traces for the comm tests."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from diagnose.ingest.profile_data import Profile
from parsers.schema import conform
from parsers.trace import (
    ANNOTATION_SCHEMA,
    CPU_OP_SCHEMA,
    CUDA_SYNC_SCHEMA,
    FLOW_SCHEMA,
    GPU_SCHEMA,
    OTHER_SCHEMA,
    PYTHON_SCHEMA,
    RUNTIME_SCHEMA,
    Trace,
    read_trace,
)

ROOT = Path(__file__).resolve().parents[2]
COMM = ROOT / "fixtures" / "comm"
HTA = COMM / "hta"
SAMPLED = [HTA / "trace_filter_sampled_rank-0.json.gz", HTA / "trace_filter_sampled_rank-1.json.gz"]
DDP_RANK0 = HTA / "nccl_parser_config_nccl_data.json.gz"
GLOO = COMM / "gloo_straggler" / "trace"


def profile_of(*paths) -> Profile:
    """A Profile of real traces, keyed by the rank each trace names (an empty kernels table: no ncu input)."""
    traces = {}
    for p in paths:
        t = read_trace(p)
        traces[t.rank] = t
    return Profile(traces=traces, kernels=pd.DataFrame())


def fake_trace(rank: int, kernels, steps=(), world_size: int | None = None) -> Trace:
    """A hand-made trace: ``kernels`` as (ts_ns, dur_ns, name, stream, kind), ``steps`` as (step, ts_ns, end_ns)."""
    gpu = pd.DataFrame(
        [
            {
                "ts_ns": ts,
                "dur_ns": d,
                "end_ns": ts + d,
                "name": n,
                "stream": s,
                "kind": k,
                "cat": "kernel",
                "device": rank,
                "correlation": i,
                "runtime_index": -1,
            }
            for i, (ts, d, n, s, k) in enumerate(kernels)
        ]
    )
    ann = pd.DataFrame(
        [
            {
                "ts_ns": a,
                "dur_ns": b - a,
                "end_ns": b,
                "name": f"ProfilerStep#{s}",
                "cat": "user_annotation",
                "step": float(s),
            }
            for s, a, b in steps
        ]
    )
    header = {"distributedInfo": {"rank": rank, "world_size": world_size}} if world_size else {}
    return Trace(
        path=f"fake_rank{rank}.json",
        format="kineto",
        rank=rank,
        gpu=conform(gpu, GPU_SCHEMA),
        runtime=RUNTIME_SCHEMA.empty(),
        cuda_sync=CUDA_SYNC_SCHEMA.empty(),
        cpu_ops=CPU_OP_SCHEMA.empty(),
        python=PYTHON_SCHEMA.empty(),
        annotations=conform(ann, ANNOTATION_SCHEMA),
        flows=FLOW_SCHEMA.empty(),
        other=OTHER_SCHEMA.empty(),
        device_properties=pd.DataFrame(),
        metadata={"header": header},
    )


def fake_profile(*traces) -> Profile:
    return Profile(traces={t.rank: t for t in traces}, kernels=pd.DataFrame())
