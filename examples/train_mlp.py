"""A small seeded PyTorch MLP training loop, CPU or CUDA, with planted, documented bottlenecks.

Planted: ``loss.item()`` every step (a host-device sync per step: the sync analyzer
should name this file and the line marked SYNC below), and a small batch on a wide MLP
(short kernels, launch-bound on a GPU). Failure switches for gpudiag's robustness tests:
--crash-at N (RuntimeError), --oom-at N (torch.cuda.OutOfMemoryError), --memory-error-at N
(MemoryError), --exit-code N (sys.exit at the end), --sleep-ms (slow steps, to interrupt).
--no-optimizer: plain SGD by hand with ``diagnose.step()`` marking the steps.

    python examples/train_mlp.py --steps 30
    gpudiag profile -- python examples/train_mlp.py --steps 30
"""

from __future__ import annotations

import argparse
import random
import sys
import time

import torch
from mlp_model import make_batch, make_model
from torch import nn


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-optimizer", action="store_true", help="SGD by hand; steps marked with diagnose.step()")
    p.add_argument("--crash-at", type=int, default=None)
    p.add_argument("--oom-at", type=int, default=None)
    p.add_argument("--memory-error-at", type=int, default=None)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--exit-code", type=int, default=0)
    p.add_argument("--print-step-times", action="store_true", help="print 'steptime <i> <ms>' (benchmarks)")
    p.add_argument(
        "--torch-profiler",
        action="store_true",
        help="run the whole loop under torch.profiler with Python stacks (benchmarks: its overhead)",
    )
    args = p.parse_args(argv)
    if args.torch_profiler:
        activities = [torch.profiler.ProfilerActivity.CPU] + (
            [torch.profiler.ProfilerActivity.CUDA] if torch.cuda.is_available() else []
        )
        with torch.profiler.profile(activities=activities, with_stack=True):
            return train(args)
    return train(args)


def train(args) -> int:

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    model = make_model(args.width, args.depth).to(device)
    loss_fn = nn.CrossEntropyLoss()
    optimizer = None if args.no_optimizer else torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    last = time.perf_counter()
    for step in range(args.steps):
        if step == args.crash_at:
            raise RuntimeError(f"planted crash at step {step}")
        if step == args.oom_at:
            raise torch.cuda.OutOfMemoryError(f"CUDA out of memory (planted at step {step})")
        if step == args.memory_error_at:
            raise MemoryError(f"planted MemoryError at step {step}")
        x, y = make_batch(generator, args.batch, args.width, device)
        noise = random.random()  # the global RNG is part of the result: gpudiag must not touch it
        loss = loss_fn(model(x), y) * (1.0 + 1e-6 * noise)
        if optimizer is not None:
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        else:
            model.zero_grad(set_to_none=True)
            loss.backward()
            with torch.no_grad():
                for param in model.parameters():
                    param -= 0.05 * param.grad
            import diagnose

            diagnose.step()
        value = loss.item()  # SYNC: planted host-device sync every step
        print(f"step {step} loss {value!r}", flush=True)
        if args.print_step_times:
            now = time.perf_counter()
            print(f"steptime {step} {(now - last) * 1000:.6f}", flush=True)
            last = now
        if args.sleep_ms:
            time.sleep(args.sleep_ms / 1000)
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
