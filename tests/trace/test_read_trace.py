"""parsers.trace on real Kineto traces: schema, exact counts, links between tables, and bad input."""

from __future__ import annotations

import gzip
import shutil

import numpy as np
import pytest

from parsers import trace_stream
from parsers.errors import InputError
from parsers.schema import missing_columns
from parsers.trace import CPU_OP_SCHEMA, GPU_SCHEMA, PYTHON_SCHEMA, RUNTIME_SCHEMA, is_user_file, read_trace
from tests.paths import shared
from tests.trace.helpers import BAD, EVENT_SYNC, SAMPLED_RANK0, TRACE


def test_event_sync_trace_tables_and_links():
    t = read_trace(EVENT_SYNC)
    assert t.format == "kineto" and t.rank == 0
    assert not missing_columns(t.gpu, GPU_SCHEMA) and not missing_columns(t.runtime, RUNTIME_SCHEMA)
    assert not missing_columns(t.cpu_ops, CPU_OP_SCHEMA) and not missing_columns(t.python, PYTHON_SCHEMA)
    assert len(t.gpu) == 5 and len(t.runtime) == 12 and len(t.cpu_ops) == 10 and len(t.cuda_sync) == 4
    assert t.gpu["kind"].astype(str).value_counts().to_dict() == {"compute": 4, "memcpy": 1}
    assert t.device_properties["name"].iloc[0] == "NVIDIA A100-PG509-200"  # written as a Python repr string
    sync = t.runtime.set_index(t.runtime["name"].astype(str))["sync_kind"].astype(object).to_dict()
    assert sync["cudaStreamSynchronize"] == "stream" and sync["cudaDeviceSynchronize"] == "device"
    assert sync["cudaEventSynchronize"] == "event"
    assert sync["cudaMemcpyAsync"] == "memcpy"  # DtoH into pageable memory blocks the host
    memcpy = t.runtime[t.runtime["name"] == "cudaMemcpyAsync"].iloc[0]
    assert memcpy["memcpy_kind"] == "DtoH" and memcpy["host_memory"] == "pageable"
    # the copy of aten::item is launched inside aten::_local_scalar_dense, under aten::is_nonzero
    op = t.cpu_ops.iloc[int(memcpy["cpu_op_index"])]
    assert op["name"] == "aten::_local_scalar_dense"
    assert t.cpu_ops["name"].iloc[int(op["top_index"])] == "aten::is_nonzero"
    launched = t.gpu[t.gpu["runtime_index"] >= 0]
    assert len(launched) == 5
    assert (
        t.runtime["name"].iloc[launched["runtime_index"]].astype(str).isin(["cudaLaunchKernel", "cudaMemcpyAsync"])
    ).all()
    assert t.gpu["ts_ns"].iloc[0] == 1707417525512145000 and t.gpu["dur_ns"].iloc[0] == 1000


def test_sampled_trace_counts_and_categorical_names():
    t = read_trace(SAMPLED_RANK0)
    assert t.rank == 0 and len(t.gpu) == 1204 and len(t.runtime) == 1204 and len(t.cpu_ops) == 2329
    assert t.gpu["name"].dtype == "category" and t.gpu["kind"].dtype == "category"
    assert dict(t.gpu["cat"].value_counts()) == {"kernel": 1154, "gpu_memcpy": 40, "gpu_memset": 10}
    assert int((t.gpu["kind"] == "comm").sum()) > 0  # NCCL kernels of the 128-rank job
    assert (t.gpu["end_ns"] == t.gpu["ts_ns"] + t.gpu["dur_ns"]).all()
    assert t.gpu["ts_ns"].is_monotonic_increasing
    assert len(t.annotations[t.annotations["step"].notna()]) == 2


def test_convnet_python_frames_and_user_code():
    t = read_trace(shared("torch", "convnet.trace.json.gz"))
    assert t.device_properties["name"].iloc[0] == "NVIDIA H200"
    assert len(t.python) == 3128 and len(t.gpu) == 557
    syncs = t.runtime[t.runtime["name"] == "cudaStreamSynchronize"]
    assert len(syncs) == 12
    # each loss.item() sync sits in the script's <module> frame, reached through library frames
    user = t.python["user_index"].to_numpy()[syncs["python_index"].to_numpy()]
    assert (t.python["name"].astype(str).to_numpy()[user] == "starter_torch.py(13): <module>").all()
    assert t.stack(int(syncs["python_index"].iloc[0]))[-1] == "starter_torch.py(13): <module>"


def test_user_file_rule():
    assert is_user_file("train.py") and is_user_file("/home/me/proj/torch_utils/train.py")
    assert not is_user_file("torch/nn/modules/module.py") and not is_user_file("typing.py")
    assert not is_user_file("<built-in method item of Tensor object at 0x7f>")
    assert not is_user_file("/usr/lib/python3.11/site-packages/timm/models/vit.py")


def test_streaming_matches_one_shot_parse(tmp_path, monkeypatch):
    """Cutting the event list into small pieces gives the very same tables as reading it whole."""
    plain = tmp_path / "rank0.json"
    with gzip.open(SAMPLED_RANK0) as f, open(plain, "wb") as out:
        shutil.copyfileobj(f, out)
    whole = read_trace(plain)
    monkeypatch.setattr(trace_stream, "PIECE_BYTES", 4096)
    pieces = read_trace(plain)
    for name in ("gpu", "runtime", "cpu_ops", "annotations"):
        a, b = getattr(whole, name), getattr(pieces, name)
        assert len(a) == len(b)
        assert np.array_equal(a["ts_ns"].to_numpy(), b["ts_ns"].to_numpy())
        assert (a["name"].astype(str).to_numpy() == b["name"].astype(str).to_numpy()).all()


def test_jax_perfetto_layout():
    t = read_trace(TRACE / "fake_jax_perfetto.trace.json")
    assert t.format == "perfetto"
    assert t.gpu["name"].astype(str).tolist() == ["MemcpyH2D", "fusion_1", "ncclAllReduceKernel"]
    assert t.gpu["kind"].astype(str).tolist() == ["memcpy", "compute", "comm"]
    assert t.gpu["stream"].tolist() == [14, 15, 15] and (t.gpu["device"] == 0).all()
    assert t.runtime["name"].astype(str).tolist() == ["cuLaunchKernel"]


@pytest.mark.parametrize(
    "name, expect",
    [
        ("trace_truncated.json.gz", "gzip stream ends early"),
        ("trace_not_a_trace.json", "expected a chrome trace"),
    ],
)
def test_bad_files_raise_input_error(name, expect):
    with pytest.raises(InputError, match=expect):
        read_trace(BAD / name)


def test_truncated_plain_json(tmp_path):
    with gzip.open(SAMPLED_RANK0) as f:
        raw = f.read()
    p = tmp_path / "cut.json"
    p.write_bytes(raw[: len(raw) // 3])
    with pytest.raises(InputError, match="truncated"):
        read_trace(p)


def test_missing_and_negative_durations_are_skipped_and_said():
    t = read_trace(BAD / "trace_fake_bad_durations.json")
    assert t.gpu["name"].astype(str).tolist() == ["fake_kernel", "fake_kernel"]
    assert any("missing or negative duration" in w and w.startswith("2 ") for w in t.warnings)
    assert any("not well-formed" in w and w.startswith("3 ") for w in t.warnings)


def test_unknown_categories_are_named():
    t = read_trace(BAD / "trace_fake_unknown_categories.json")
    assert len(t.gpu) == 2 and len(t.other) == 2
    assert any("'quantum_flux' (2)" in w for w in t.warnings)


def test_nccl_trace_from_shared_data():
    t = read_trace(shared("hta", "nccl_parser_config_nccl_data.json.gz"))
    assert t.rank == 0 and len(t.gpu) == 3774 and len(t.cpu_ops) == 14346
    assert int((t.gpu["kind"] == "comm").sum()) > 0
