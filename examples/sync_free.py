"""The same training as sync_planted.py with every host sync removed: nothing to flag.

The loss is accumulated on the GPU and read once after the loop; the metric stays
on the device; timing uses CUDA events read after the loop; the mask becomes a
`torch.where` (no data-dependent shape, so no nonzero).

    python examples/sync_free.py [OUT_DIR] [--steps N]
"""

import sys

import torch
import torch.nn as nn


def train_step(model, opt, x, y):
    logits = model(x)
    loss = nn.functional.cross_entropy(logits, y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    confident = torch.where((logits.max(dim=1).values > 0.5)[:, None], logits, 0.0)
    return loss, logits, confident


def main(steps=12):
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 10)
    ).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(2048, 1024, device="cuda")
    y = torch.randint(0, 10, (2048,), device="cuda")
    losses = torch.zeros(steps, device="cuda")
    correct = torch.zeros((), device="cuda")
    for step in range(steps):
        loss, logits, confident = train_step(model, opt, x, y)
        losses[step] = loss.detach()
        correct += (logits.argmax(dim=1) == y).float().mean()
        yield step
    print(f"final loss {losses[-1].item():.4f}")  # one read, after the loop


if __name__ == "__main__":
    import argparse
    import functools

    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from _profiler_window import run_with_profiler

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", nargs="?", help="write a torch.profiler window here (stand-alone capture)")
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    run_with_profiler(functools.partial(main, args.steps), args.out_dir)
