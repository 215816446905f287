"""Planted host syncs, each at a known line (the ground truth for the sync analyzer).

A small classifier trained for a few steps. Each step stalls the GPU queue four
ways, at the lines marked SYNC-1..SYNC-4 below:
  SYNC-1  `loss.item()` for logging                       → aten::item / _local_scalar_dense
  SYNC-2  a metric that calls `.cpu()` on predictions      → aten::to / copy_ (DtoH)
  SYNC-3  `torch.cuda.synchronize()` in a timing helper    → cudaDeviceSynchronize
  SYNC-4  boolean-mask indexing `logits[mask]`             → aten::nonzero
Run under `gpudiag profile`, or stand-alone with a profiler window:

    python examples/sync_planted.py OUT_DIR      # writes OUT_DIR/trace.json.gz and OUT_DIR/events.jsonl
"""

import sys
import time

import torch
import torch.nn as nn


def accuracy(logits, labels):
    preds = logits.argmax(dim=1).cpu()  # SYNC-2
    return (preds == labels.cpu()).float().mean().item()


def timed(fn):
    start = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()  # SYNC-3
    return out, time.perf_counter() - start


def train_step(model, opt, x, y):
    logits = model(x)
    loss = nn.functional.cross_entropy(logits, y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    confident = logits[logits.max(dim=1).values > 0.5]  # SYNC-4
    return loss, logits, confident


def main(steps=12):
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 10)
    ).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(2048, 1024, device="cuda")
    y = torch.randint(0, 10, (2048,), device="cuda")
    history = []
    for step in range(steps):
        (loss, logits, confident), dt = timed(lambda: train_step(model, opt, x, y))
        history.append(loss.item())  # SYNC-1
        acc = accuracy(logits, y)
        yield step
    print(f"final loss {history[-1]:.4f} acc {acc:.3f}")


if __name__ == "__main__":
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from _profiler_window import run_with_profiler

    run_with_profiler(main, sys.argv[1] if len(sys.argv) > 1 else None)
