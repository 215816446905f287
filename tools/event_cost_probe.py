"""What one CUDA event record costs on the host, next to one tiny kernel launch (a diagnostic).

Light mode's GPU time rests on one ``torch.cuda.Event.record()`` per timed step. On the H200 host it
took 45 µs a call (2026-12-03, tools/boundary_breakdown.py), far more than a host-side call. This
times, per call (median µs over ``--calls``): the event made and recorded as light mode does it, a
reused event, an event without timing, ``torch.cuda.current_stream()`` alone, the capture check, and
a one-element ``add_`` kernel launch — once on an idle GPU (after a synchronize) and once with GPU
work queued ahead (eight 2048² matmuls, as kernels are still running at a step boundary).

    PYTHONPATH=$PWD python3 tools/event_cost_probe.py [--calls 300]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=300)
    args = p.parse_args(argv)
    import torch
    from light_overhead_paired import make_step

    step = make_step("cuda", 1024, 4, 64)
    for _ in range(300):
        step()
    reused = torch.cuda.Event(enable_timing=True)
    reused.record()
    plain_event = torch.cuda.Event(enable_timing=False)
    tiny = torch.zeros(1, device="cuda")
    square = torch.randn(2048, 2048, device="cuda")
    calls = {
        "Event(enable_timing=True).record()": lambda: torch.cuda.Event(enable_timing=True).record(),
        "reused timing event .record()": lambda: reused.record(),
        "Event(enable_timing=False).record()": lambda: plain_event.record(),
        "torch.cuda.current_stream()": lambda: torch.cuda.current_stream(),
        "is_current_stream_capturing()": lambda: torch.cuda.is_current_stream_capturing(),
        "1-element add_ kernel launch": lambda: tiny.add_(1),
    }
    print(
        f"torch {torch.__version__} cuda {torch.version.cuda} on {torch.cuda.get_device_name()}; "
        f"median µs per call over {args.calls} calls"
    )
    print(f"  {'call':<38} {'idle GPU':>9} {'GPU busy':>9}")
    for name, call in calls.items():
        idle, busy = [], []
        for _ in range(args.calls):
            torch.cuda.synchronize()
            t = time.perf_counter_ns()
            call()
            idle.append(time.perf_counter_ns() - t)
        for _ in range(args.calls):
            torch.cuda.synchronize()
            for _ in range(8):
                square @ square
            t = time.perf_counter_ns()
            call()
            busy.append(time.perf_counter_ns() - t)
        torch.cuda.synchronize()
        print(f"  {name:<38} {statistics.median(idle) / 1e3:>9.2f} {statistics.median(busy) / 1e3:>9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
