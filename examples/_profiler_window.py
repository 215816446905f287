"""Stand-alone capture for the sync examples: a torch.profiler window over steady-state
steps, plus the exact lines of every host sync in it.

Kineto's exported trace names Python functions by their first line only, so the
exact calling lines are taken from the profiler's in-memory events
(``FunctionEvent.stack``) and written as gpudiag sync records (docs/contracts.md).
`main` is a generator that yields after each step.
"""

import gzip
import json
import os
import shutil
import time

import torch

WARMUP_STEPS = 3
TRACE_STEPS = 5
SYNC_OPS = {
    "aten::item",
    "aten::_local_scalar_dense",
    "aten::nonzero",
    "aten::to",
    "aten::_to_copy",
    "aten::copy_",
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
    "cudaEventSynchronize",
    "aten::is_nonzero",
}


def _user_frames(stack):
    keep = []
    for frame in stack or []:
        if (
            "site-packages" in frame
            or "/torch/" in frame
            or "_profiler_window" in frame
            or frame.startswith("<built-in")
        ):
            continue
        keep.append(frame)
    return keep


def run_with_profiler(main, out_dir):
    if out_dir is None:
        for _ in main():
            pass
        return
    os.makedirs(out_dir, exist_ok=True)
    prof = torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
        schedule=torch.profiler.schedule(wait=0, warmup=WARMUP_STEPS, active=TRACE_STEPS, repeat=1),
        record_shapes=True,
        with_stack=True,
    )
    with prof:
        for _ in main():
            prof.step()
    raw = os.path.join(out_dir, "trace.json")
    prof.export_chrome_trace(raw)
    with open(raw, "rb") as src, gzip.open(raw + ".gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.unlink(raw)
    # exact lines from the in-memory events
    with open(os.path.join(out_dir, "events.jsonl"), "w") as f:
        f.write(json.dumps({"kind": "run", "rank": 0, "source": "examples/_profiler_window.py"}) + "\n")
        for ev in prof.events():
            if ev.name not in SYNC_OPS:
                continue
            frames = _user_frames(ev.stack)
            if not frames:
                continue
            path_line, _, func = frames[0].partition(": ")
            path, _, line = path_line.rpartition("(")
            f.write(
                json.dumps(
                    {
                        "kind": "sync",
                        "rank": 0,
                        "step": None,
                        "t_ns": None,
                        "t_profiler_us": ev.time_range.start,
                        "dur_ns": int(ev.time_range.elapsed_us() * 1000),
                        "op": ev.name,
                        "file": path,
                        "line": int(line.rstrip(")")) if line else None,
                        "function": func,
                        "stack": frames,
                    }
                )
                + "\n"
            )
    print("wrote", out_dir, time.strftime("%H:%M:%S"))
