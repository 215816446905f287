"""parsers.trace_collectives: the collective args Kineto writes on NCCL kernels and record_param_comms."""

import gzip
import json

from parsers.trace_collectives import read_collectives
from tests.comm.conftest import DDP_RANK0, SAMPLED


def test_ddp_trace_metadata_per_kernel():
    meta = read_collectives(DDP_RANK0)
    kern = meta[meta["source"] == "kernel"]
    assert kern["collective"].value_counts().to_dict() == {"allreduce": 15, "broadcast": 6}
    assert set(kern["pg_name"]) == {"0"} and set(kern["pg_ranks"]) == {"[0, 1]"}
    assert (kern["group_size"] == 2).all() and (kern["correlation"] >= 0).all()
    first = kern[kern["correlation"] == 60047].iloc[0]  # the kernel printed in the trace: 6637568 float elements
    assert first["in_nelems"] == 6637568 and first["msg_bytes"] == 6637568 * 4
    cpu = meta[meta["source"] == "cpu_op"]
    assert cpu["collective"].value_counts().to_dict() == {"allreduce": 15, "broadcast": 6, "wait": 6}


def test_trace_without_collective_args_gives_typed_empty_frame():
    meta = read_collectives(SAMPLED[0])  # old Kineto: NCCL kernels, no "Collective name"
    assert len(meta) == 0 and "msg_bytes" in meta.columns


def test_fake_non_nccl_kernel_args_are_ignored(tmp_path):
    events = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": "gemm_kernel",
            "ts": 1.0,
            "dur": 2.0,
            "args": {"Collective name": "allreduce", "correlation": 1},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "ts": 5.5,
            "dur": 2.0,
            "args": {
                "Collective name": "_allgather_base",
                "correlation": 7,
                "dtype": "BFloat16",
                "In msg nelems": 10,
                "Out msg nelems": 40,
                "Process Group Name": "3",
            },
        },
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_Broadcast", "ts": 9.0, "dur": 1.0, "args": "garbage"},
    ]
    path = tmp_path / "fake_trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    meta = read_collectives(path)
    assert len(meta) == 1
    row = meta.iloc[0]
    assert row["ts_ns"] == 5500 and row["correlation"] == 7 and row["pg_name"] == "3"
    assert row["msg_bytes"] == 80  # max(in, out) = 40 elements x 2 bytes


def test_read_trace_keeps_the_collectives_of_its_one_pass():
    """Trace.collectives (gathered while read_trace buckets the events) holds exactly what a pass of
    its own over the file finds, so the comm analyzer never reads a trace twice."""
    import pandas as pd

    from parsers.trace import read_trace

    keys = ["source", "ts_ns", "correlation", "external_id"]
    for path in (DDP_RANK0, *SAMPLED):
        one_pass = read_trace(path).collectives.sort_values(keys).reset_index(drop=True)
        second = read_collectives(path).sort_values(keys).reset_index(drop=True)
        pd.testing.assert_frame_equal(one_pass, second)
    ddp = read_trace(DDP_RANK0).collectives
    assert ddp["collective"].value_counts().to_dict() == {"allreduce": 30, "broadcast": 12, "wait": 6}
