"""Allocator state: per-step memory_stats records and the caching allocator's history.

``torch.cuda.memory_stats()`` (or JAX ``device.memory_stats()``) is read at a step
boundary at most once per ``GPUDIAG_MEMORY_STATS_INTERVAL_MS`` so that fast steps do not
pay for it every time. The allocator history is recorded from CUDA's first use (torch's
lazy-init queue, so gpudiag never initialises CUDA itself) until the snapshot step, then
written as ``torch.cuda.memory._snapshot()`` in JSON with ``"schema": "gpudiag.snapshot/1"``
and switched off, so steady-state steps do not pay for it either.
"""
from __future__ import annotations

import gzip
import json
import os
import time

# loaded by the bootstrap before this module, so no import of the (heavy) diagnose package happens here
from diagnose.launch.fault_injection import due as _fault_due, write_half_and_die as _die_mid_write

SNAPSHOT_SCHEMA = "gpudiag.snapshot/1"


def torch_memory_stats_record(torch, rank: int, step: int) -> dict:
    return {"kind": "memory_stats", "rank": rank, "step": step, "t_ns": time.time_ns(), "framework": "torch",
            "device": torch.cuda.current_device(), "stats": torch.cuda.memory_stats()}


def jax_memory_stats_record(jax, rank: int, step: int) -> dict | None:
    devices = jax.local_devices()
    if not devices:
        return None
    stats = devices[0].memory_stats()
    if stats is None:  # CPU devices report nothing
        return None
    return {"kind": "memory_stats", "rank": rank, "step": step, "t_ns": time.time_ns(), "framework": "jax",
            "device": devices[0].id, "stats": dict(stats)}


def start_allocator_history(torch, max_entries: int) -> None:
    """Record allocator history with Python stacks (C++ stacks are too slow for training)."""
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python", max_entries=max_entries)


def stop_allocator_history(torch) -> None:
    torch.cuda.memory._record_memory_history(enabled=None)


def write_snapshot(torch, path: str) -> int:
    """Write the allocator snapshot as gzipped JSON, whole or not at all; returns bytes written."""
    snapshot = torch.cuda.memory._snapshot()
    snapshot = dict(snapshot)
    snapshot["schema"] = SNAPSHOT_SCHEMA
    data = gzip.compress(json.dumps(snapshot, default=str, separators=(",", ":")).encode("utf-8"), compresslevel=6)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            if _fault_due("snapshot"):
                _die_mid_write(f.fileno(), data)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return len(data)
