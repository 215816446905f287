"""Where the step boundary's own time goes, in a real training loop (a diagnostic, not a benchmark).

Wraps the boundary's parts with timers and runs examples/train_mlp.py's step under
``diagnose.profile(trace_steps=0, history_max_entries=0, nvml=False)``; prints the median µs of each
part per call and the mean (the step records are written in batches, so ``boundary``'s mean is the
cost per step). The wrappers add a little of their own; the parts are what to compare.

    PYTHONPATH=$PWD python3 tools/boundary_breakdown.py [--device cuda] [--steps 2000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--steps", type=int, default=2000)
    args = p.parse_args(argv)
    import torch
    from light_overhead_paired import make_step

    import diagnose
    from diagnose.launch import event_log
    from diagnose.launch.runtime import gpu_time, memory_capture, nvtx_ranges, steps

    step = make_step(args.device, 1024, 4, 64)
    for _ in range(300):
        step()
    times: dict[str, list[int]] = {}

    def timed(owner, name, label=None):
        original = getattr(owner, name)

        def wrapper(*a, **k):
            t = time.perf_counter_ns()
            try:
                return original(*a, **k)
            finally:
                times.setdefault(label or name, []).append(time.perf_counter_ns() - t)

        setattr(owner, name, wrapper)

    for name in ("boundary", "_due", "drain", "_after_step"):
        timed(steps.Steps, name)
    timed(memory_capture.MemoryCapture, "maybe_stats")
    timed(gpu_time.GpuTime, "record_event")
    timed(gpu_time.GpuTime, "choose")
    timed(steps, "step_line")
    timed(event_log, "write_all")
    for backend in (nvtx_ranges._TorchBackend, nvtx_ranges._NvtxPackageBackend):
        timed(backend, "start", f"nvtx start ({backend.name})")
        timed(backend, "end", f"nvtx end ({backend.name})")
    if args.device != "cpu":
        timed(torch.cuda.Event, "record", "cuda Event.record")
        timed(torch.cuda.Event, "query", "cuda Event.query")
        timed(torch.cuda.Event, "elapsed_time", "cuda Event.elapsed_time")
        timed(torch.cuda, "is_current_stream_capturing")
    with tempfile.TemporaryDirectory() as work:
        with diagnose.profile(out=Path(work) / "run", quiet=True, trace_steps=0, history_max_entries=0, nvml=False):
            t0 = time.perf_counter()
            for _ in range(args.steps):
                step()
            step_ms = (time.perf_counter() - t0) * 1000 / args.steps
    print(
        f"torch {torch.__version__} on {torch.cuda.get_device_name() if args.device != 'cpu' else 'cpu'}: "
        f"{args.steps} steps, {step_ms:.3f} ms/step (mean, wrappers included)"
    )
    for label, values in sorted(times.items(), key=lambda kv: -statistics.median(kv[1])):
        print(
            f"  {label:<34} {len(values):>6} calls  median {statistics.median(values) / 1e3:8.2f} µs  "
            f"mean {statistics.fmean(values) / 1e3:8.2f} µs"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
