"""GPU time per step from CUDA events, and how often to take it.

A step's GPU time is the elapsed time between CUDA events recorded on the current stream at
its start and its end, read lazily with ``event.query()`` (steps.py), never with a sync. An
event record costs host time: 45-68 µs a call inside a training loop on the H200 host
(2026-12-03, tools/boundary_breakdown.py), 2-3 % of a 2.3 ms step. With --gpu-time-every 0
(auto, the default) the steps are timed on the GPU one in k, k chosen so that the events
cost at most GPU_TIME_BUDGET_PCT of a step's host time; every step when they cost less.
Each choice is written as a ``{"kind": "run", "event": "gpu-time-every", ...}`` record, which
is where the analyzers read the budget from.
"""

from __future__ import annotations

import collections
import math
import sys
import time

from parsers.run_records import GPU_TIME_EVERY, format_record

# 0.5 until 2026-12-06: on the H100 host an event record took 58 µs in char_gpt's loop (its gpu-time-every record's
# event_us), and the events took their whole 0.5 % of each step (benchmarks/light_overhead_interleaved.py's
# no-events arm read -0.49 points of light's +2.60 %, within that benchmark's noise)
GPU_TIME_BUDGET_PCT = 0.2
GPU_TIME_FIRST_CHECK_STEP = 8  # the first choice of k, from the steps before (step 0 and window steps excluded)
GPU_TIME_MIN_STEPS = 6  # uninstrumented steps needed for a choice; until then every step is timed
GPU_TIME_CHECK_EVERY_STEPS = 64  # k is chosen again this often, from the latest steps
GPU_TIME_MAX_EVERY = 256


class GpuTime:
    """The CUDA events of the steps (a process using CUDA has one) and k: steps with step % k == 0 are timed.

    The step boundary reads ``every``, ``next_check`` and ``host_ns`` directly (one attribute each, per step)."""

    def __init__(self, gpu_time_every: int, events, rank: int):
        self.every = max(1, gpu_time_every)
        # with a fixed k there is nothing to choose: the boundary's `step >= next_check` is never true
        self.next_check = GPU_TIME_FIRST_CHECK_STEP if gpu_time_every == 0 else math.inf
        self.event_ns = collections.deque(maxlen=16)  # host ns of the latest CUDA event records
        self.host_ns = collections.deque(maxlen=32)  # host ns of the latest uninstrumented steps (the boundary adds)
        self._events = events
        self._rank = rank

    def record_event(self):
        """A timing CUDA event recorded on the current stream, or None while the stream is being captured
        into a CUDA graph (recording a timing event there is an error). Its host cost is kept for k."""
        torch = sys.modules["torch"]
        started_ns = time.perf_counter_ns()
        if torch.cuda.is_current_stream_capturing():
            return None
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self.event_ns.append(time.perf_counter_ns() - started_ns)
        return event

    def choose(self, step: int) -> None:
        """Choose k again from the latest steps; a new k is written as a gpu-time-every run record."""
        every = gpu_time_every(self.event_ns, self.host_ns, self.every)
        self.next_check = step + (1 if every is None else GPU_TIME_CHECK_EVERY_STEPS)
        if every is None or every == self.every:
            return
        event_ns, host_ns = _median(self.event_ns), _median(self.host_ns)
        self.every = every
        self._events.append_line(
            format_record(
                GPU_TIME_EVERY,
                rank=self._rank,
                from_step=step + 1,
                every=self.every,
                event_us=round(event_ns / 1e3, 3),
                step_host_ms=round(host_ns / 1e6, 6),
                budget_pct=GPU_TIME_BUDGET_PCT,
                t_ns=time.time_ns(),
            )
        )


def gpu_time_every(event_ns, host_ns, current: int) -> int | None:
    """Time one step in k on the GPU: the smallest k that keeps the events within GPU_TIME_BUDGET_PCT of a step.

    ``event_ns``: host ns of recent event records; ``host_ns``: host ns of recent steps. A timed step among
    untimed ones needs two events (its start and its end); with k = 1 one event ends a step and starts the
    next. ``current`` is kept until the choice moves by a factor of 1.5, so k does not flap. None: too few
    samples to choose yet."""
    if not event_ns or len(host_ns) < GPU_TIME_MIN_STEPS:
        return None
    event, host = _median(event_ns), _median(host_ns)
    budget = GPU_TIME_BUDGET_PCT / 100.0 * host
    if event <= budget:
        every = 1
    else:
        every = min(GPU_TIME_MAX_EVERY, max(2, math.ceil(2 * event / max(budget, 1.0))))
    if every != 1 and current != 1 and current / 1.5 < every < current * 1.5:
        return current
    return every


def _median(values) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]
