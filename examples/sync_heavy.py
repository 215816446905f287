"""A classifier trained with three host syncs in every step, each on its own marked line.

Every step the host stops and waits for the GPU to drain its queue three times:
  SYNC-1  `loss.item()` for the running loss in the log            → aten::item / _local_scalar_dense
  SYNC-2  boolean-mask indexing of the hard examples               → aten::nonzero (data-dependent shape)
  SYNC-3  a metric copied to the host with `.cpu()`                → aten::to / copy_ (DtoH)
The data lives on the device and there is no DataLoader, so the syncs are the host's only waits.
The fix: accumulate on the device and read once per N steps; `torch.where` instead of the mask.

    python examples/sync_heavy.py --steps 40 --device cuda
    python examples/sync_heavy.py --steps 30 --device cpu
"""

import argparse

import torch
import torch.nn as nn


def make_model(width):
    return nn.Sequential(nn.Linear(256, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--width", type=int, default=1024)
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.device == "cpu":
        torch.set_num_threads(1)
    model = make_model(args.width).to(args.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x_all = torch.randn(args.steps * args.batch, 256, device=args.device)
    y_all = (x_all[:, :10].argmax(dim=1) + (x_all[:, 10] > 1).long()) % 10
    running, hard_seen, accuracy = 0.0, 0, 0.0
    for step in range(args.steps):
        x = x_all[step * args.batch : (step + 1) * args.batch]
        y = y_all[step * args.batch : (step + 1) * args.batch]
        logits = model(x)
        per_sample = nn.functional.cross_entropy(logits, y, reduction="none")
        loss = per_sample.mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        running = 0.9 * running + 0.1 * loss.item()  # SYNC-1
        hard = per_sample.detach()[per_sample.detach() > loss.detach()]  # SYNC-2
        hard_seen += hard.numel()
        correct = (logits.argmax(dim=1) == y).float().mean().cpu()  # SYNC-3
        accuracy = 0.9 * accuracy + 0.1 * float(correct)
    print(f"running loss {running:.4f} accuracy {accuracy:.3f} hard examples {hard_seen}")


if __name__ == "__main__":
    main()
