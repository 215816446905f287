"""Allocator state: per-step memory_stats records and the caching allocator's history.

``torch.cuda.memory_stats()`` (or JAX ``device.memory_stats()``) is read at a step
boundary at most once per ``GPUDIAG_MEMORY_STATS_INTERVAL_MS`` so that fast steps do not
pay for it every time. The allocator history is recorded from CUDA's first use (torch's
lazy-init queue, so gpudiag never initialises CUDA itself) until the snapshot step, then
written as ``torch.cuda.memory._snapshot()`` in JSON with ``"schema": "gpudiag.snapshot/1"``
and switched off, so steady-state steps do not pay for it either. ``MemoryCapture`` is the
runtime's part that does all three; the functions below it are the framework calls. The snapshot's
dump is gpudiag's own cost: a ``{"kind": "work", "what": "gpudiag", "name": "snapshot dump"}`` record,
written as it ends (at exit before the run's end record).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import sys
import time

from diagnose.launch.event_log import JsonlAppender
from diagnose.launch.fault_injection import due as _fault_due
from diagnose.launch.fault_injection import write_half_and_die as _die_mid_write
from parsers.run_records import GPUDIAG_SNAPSHOT_DUMP, MEMORY_STATS, MEMORY_STATS_RECORD, SNAPSHOT, WORK_GPUDIAG, record

SNAPSHOT_SCHEMA = "gpudiag.snapshot/1"


class MemoryCapture:
    """The allocator side of one Runtime: memory_stats records (with a GPU), the history and its snapshot.

    The step boundary calls ``maybe_stats`` every step and reads ``history_on`` (True only until the snapshot)."""

    def __init__(self, runtime):
        self._runtime = runtime
        self.stats = None  # memory/rank<N>.stats.jsonl, opened at the first boundary when a GPU is in use
        self._interval_ns = runtime.config.memory_stats_interval_ms * 1e6
        self._last_stats_perf_ns = None
        self._snapshot_step = runtime.config.snapshot_step
        self.history_on = False
        self.snapshot_written = False

    def record_history_from_cuda_init(self, torch) -> None:
        """Queue the history's start on torch's CUDA lazy init: it starts with CUDA's first use, never before."""
        config = self._runtime.config
        if config.history_max_entries > 0:  # every mode: under ncu it is drawn against the profiled launches
            try:
                torch.cuda._lazy_call(self._start_history_safely)
            except Exception:
                pass

    def _start_history_safely(self) -> None:
        # runs inside torch's CUDA lazy init: it must never raise
        runtime = self._runtime
        try:
            if runtime.disabled or runtime.pid != os.getpid():
                return
            start_allocator_history(sys.modules["torch"], runtime.config.history_max_entries)
            self.history_on = True
        except Exception as e:
            runtime.faults.log_once("history", f"allocator history not recorded ({type(e).__name__}: {e})")

    def open_stats(self) -> None:
        runtime = self._runtime
        self.stats = JsonlAppender(runtime.in_run_dir(runtime.artifact(MEMORY_STATS)))
        runtime.expect(runtime.artifact(MEMORY_STATS))

    def maybe_stats(self, step: int, perf_ns: int) -> float:
        """A memory_stats record, when the interval since the last one has passed. Returns the perf_counter_ns
        from which the next one is due (infinity without stats), so the jit step path calls only then."""
        if self.stats is None:
            return math.inf
        last_ns = self._last_stats_perf_ns
        if last_ns is not None and perf_ns - last_ns < self._interval_ns:
            return last_ns + self._interval_ns
        self._last_stats_perf_ns = perf_ns
        runtime = self._runtime
        if runtime.framework == "torch":
            stats = torch_memory_stats_record(sys.modules["torch"], runtime.rank, step)
        else:
            stats = jax_memory_stats_record(sys.modules["jax"], runtime.rank, step)
        if stats is not None:
            self.stats.append(stats)
            runtime.written.add(runtime.artifact(MEMORY_STATS))
        return perf_ns + self._interval_ns

    def snapshot_due(self, finished: int) -> bool:
        """True when the history is on and step ``finished`` is the snapshot step (or past it)."""
        return (
            self.history_on
            and not self.snapshot_written
            and self._snapshot_step is not None
            and finished >= self._snapshot_step
        )

    def take_snapshot(self, step: int | None = None) -> None:
        """Write the snapshot and stop the history (a failed write is the runtime's fault to report), then the
        dump's record. ``step``: the step whose time holds the dump (the one the boundary starts; at exit the step
        in progress)."""
        runtime = self._runtime
        if step is None:
            step = runtime.steps.current_step
        torch = sys.modules["torch"]
        relative = runtime.artifact(SNAPSHOT)
        self.snapshot_written = True
        t_ns, started_ns = time.time_ns(), time.perf_counter_ns()
        try:
            write_snapshot(torch, runtime.in_run_dir(relative))
            runtime.written.add(relative)
        except Exception as e:
            runtime.faults.artifact_failed(relative, "allocator snapshot", e)
        try:
            stop_allocator_history(torch)
        except Exception:
            pass
        self.history_on = False
        self._dump_record(step, t_ns, time.perf_counter_ns() - started_ns)

    def _dump_record(self, step, t_ns: int, elapsed_ns: int) -> None:
        runtime = self._runtime
        try:
            from diagnose.launch.runtime.periodic_work import write_work

            write_work(runtime, WORK_GPUDIAG, step, t_ns, elapsed_ns, None, name=GPUDIAG_SNAPSHOT_DUMP)
        except Exception as e:
            runtime.faults.internal_error("snapshot dump record", e)

    def stop_history_quietly(self) -> None:
        if self.history_on:
            try:
                stop_allocator_history(sys.modules["torch"])
            except Exception:
                pass
            self.history_on = False

    def close(self) -> None:
        if self.stats is not None:
            self.stats.close()


def torch_memory_stats_record(torch, rank: int, step: int) -> dict:
    return record(
        MEMORY_STATS_RECORD,
        rank=rank,
        step=step,
        t_ns=time.time_ns(),
        framework="torch",
        device=torch.cuda.current_device(),
        stats=torch.cuda.memory_stats(),
    )


def jax_memory_stats_record(jax, rank: int, step: int) -> dict | None:
    devices = jax.local_devices()
    if not devices:
        return None
    stats = devices[0].memory_stats()
    if stats is None:  # CPU devices report nothing
        return None
    return record(
        MEMORY_STATS_RECORD,
        rank=rank,
        step=step,
        t_ns=time.time_ns(),
        framework="jax",
        device=devices[0].id,
        stats=dict(stats),
    )


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
