"""Capture real PyTorch profiler traces WITHOUT ProfilerStep ranges on the GPU machine (issue 17's fixtures).

What a user who calls ``torch.profiler.profile()`` around a few iterations, with no schedule and no
``prof.step()``, hands over: examples/sgd_by_hand.py's model and hand-written SGD update (no optimizer),
8 iterations after 5 of warm-up,

    OUT/sgd_stacks.json.gz     with_stack=True: backward passes visible in the Python frames
    OUT/sgd_nostacks.json.gz   no stacks: no optimizer, no frames, no step markers; the autograd engine's ops repeat

    PYTHONPATH=$PWD python3 tools/capture_no_profilerstep.py OUT
"""

from __future__ import annotations

import gzip
import os
import sys
import tempfile

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from sgd_by_hand import TEXT, CharModel  # noqa: E402

ITERATIONS, WARMUP = 8, 5


def train(model, data, iterations, batch=32, context=64, lr=0.5):
    for _ in range(iterations):
        starts = torch.randint(0, len(data) - context - 1, (batch,), device="cuda")
        offsets = torch.arange(context, device="cuda")
        x, y = data[starts[:, None] + offsets], data[starts[:, None] + offsets + 1]
        loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)
                p.grad = None
        print(f"loss {loss.item():.4f}")


def capture(path, with_stack):
    torch.manual_seed(0)
    chars = sorted(set(TEXT))
    data = torch.tensor([chars.index(c) for c in TEXT], dtype=torch.long, device="cuda")
    model = CharModel(len(chars), 256).cuda()
    train(model, data, WARMUP)
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities, with_stack=with_stack) as prof:
        train(model, data, ITERATIONS)
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(raw)
        with open(raw, "rb") as f, gzip.open(path, "wb", compresslevel=9) as g:
            g.write(f.read())
    print(path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    capture(os.path.join(out, "sgd_stacks.json.gz"), with_stack=True)
    capture(os.path.join(out, "sgd_nostacks.json.gz"), with_stack=False)
