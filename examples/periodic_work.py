"""An MLP training loop that saves a checkpoint or evaluates every N steps: those steps are slow.

`--work checkpoint` (WORK-CHECKPOINT): every --every steps, `torch.save` of the model and Adam state
(~19 MB: 1.6 M parameters and two moment buffers) into a temporary directory, on the training thread,
so the step that saves waits for the write. `--work evaluation` (WORK-EVALUATION): every --every steps,
`model.eval()`, --eval-batches forward passes under `torch.no_grad()`, `model.train()`. Either way one
step in --every is slower by the save or the evaluation: `gpudiag report` names it (step_budget.periodic)
with the line of the `torch.save` or `model.eval()` call. The fixes: save less often or asynchronously
(torch.distributed.checkpoint.async_save, or a CPU copy written by a background thread); evaluate less
often, on fewer batches, or in another process.

    python examples/periodic_work.py --work checkpoint --every 20 --steps 100
    python examples/periodic_work.py --work evaluation --every 20 --steps 100 --device cpu
"""

import argparse
import os
import tempfile

import torch
import torch.nn as nn


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--work", choices=("checkpoint", "evaluation"), default="checkpoint")
    parser.add_argument("--every", type=int, default=20)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--eval-batches", type=int, default=10)
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.device == "cpu":
        torch.set_num_threads(1)
    model = nn.Sequential(
        nn.Linear(512, args.hidden), nn.ReLU(), nn.Dropout(0.1),
        nn.Linear(args.hidden, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10),
    ).to(args.device)  # fmt: skip
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    eval_x = torch.randn(args.eval_batches, args.batch, 512, device=args.device)
    eval_y = torch.randint(0, 10, (args.eval_batches, args.batch), device=args.device)
    with tempfile.TemporaryDirectory() as checkpoints:
        path = os.path.join(checkpoints, "last.pt")
        model.train()
        for step in range(args.steps):
            x = torch.randn(args.batch, 512, device=args.device)
            y = torch.randint(0, 10, (args.batch,), device=args.device)
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if (step + 1) % args.every == 0 and args.work == "checkpoint":
                state = {"step": step, "model": model.state_dict(), "optimizer": opt.state_dict()}
                torch.save(state, path)  # WORK-CHECKPOINT
                print(f"step {step}: saved {os.path.getsize(path) / 1e6:.1f} MB")
            elif (step + 1) % args.every == 0 and args.work == "evaluation":
                model.eval()  # WORK-EVALUATION
                correct = 0
                with torch.no_grad():
                    for bx, by in zip(eval_x, eval_y):
                        correct += int((model(bx).argmax(dim=1) == by).sum())
                model.train()
                print(f"step {step}: eval accuracy {correct / eval_y.numel():.3f}")


if __name__ == "__main__":
    main()
