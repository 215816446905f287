"""A thread's CPU time and its wait for a CPU, from Linux's scheduler statistics.

/proc/self/task/<tid>/schedstat holds, since the thread began, the ns it ran on a CPU and the ns it waited on a run
queue: runnable, given no CPU. A training loop whose host is shared with other processes (DataLoader workers with
intra-op threads of their own, other jobs, a busy CI machine) waits there, and no clock of the loop's own shows it:
its steps are only slower. Read at the run's first step and its end (the run start and end records), and at a long
step's first and last sample (long_step_code). Elsewhere than Linux the file is not there and nothing is read.
The start record also says how many CPUs the process may run on, both records how many threads it had: a loop
that waits for a CPU on a host with CPUs to spare waits for its own threads."""

from __future__ import annotations

import os
import threading


def schedstat_ns(native_id: int | None) -> tuple[int, int] | None:
    """(ns on a CPU, ns waiting on a run queue) of thread ``native_id`` of this process since it began; None where
    the file cannot be read."""
    if native_id is None:
        return None
    try:
        with open(f"/proc/self/task/{native_id}/schedstat", "rb") as f:
            fields = f.read().split()
        return int(fields[0]), int(fields[1])
    except (OSError, ValueError, IndexError):
        return None


def run_queue_ns(native_id: int | None) -> int | None:
    """The run-queue part of :func:`schedstat_ns`."""
    read = schedstat_ns(native_id)
    return None if read is None else read[1]


def cpus_allowed() -> dict:
    """The CPUs this process may run on (its affinity: taskset, a container's cpuset, a scheduler's CPU request) and
    the host's, for the run start record; {} where unread. A loop pinned to fewer CPUs than its process has busy
    threads waits for its own threads: char_gpt under ``taskset -c 5`` waited 19.8 % of its run (H100, 2026-12-06)."""
    try:
        return {"cpus_allowed": len(os.sched_getaffinity(0)), "cpus": os.cpu_count()}
    except (AttributeError, OSError):
        return {}


def thread_count() -> dict:
    """This process's threads now (Linux's /proc/self/task), for the run start and end records; {} where unread."""
    try:
        return {"threads": len(os.listdir("/proc/self/task"))}
    except OSError:
        return {}


def main_thread_ms() -> dict:
    """The main thread's ``main_cpu_ms`` and ``main_run_queue_ms`` so far, for a run record; {} where unread."""
    read = schedstat_ns(getattr(threading.main_thread(), "native_id", None))
    if read is None:
        return {}
    return {"main_cpu_ms": round(read[0] / 1e6, 3), "main_run_queue_ms": round(read[1] / 1e6, 3)}
