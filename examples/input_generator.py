"""A training loop fed by a hand-written Python generator, no DataLoader: the GPU waits on the generator.

Many scripts build their batches in a plain generator (reading shards, tokenising, augmenting with
numpy) and loop over it. `batches()` (INPUT-1) "decodes" each batch on the host, about 15-25 ms of
numpy work on one core, while the MLP's step on a GPU takes about a millisecond. The loop fetches
the next batch at INPUT-2. gpudiag cannot hook a generator as it hooks a DataLoader; in the traced
steps it finds the generator's resumes among the Python frames the loop calls (diagnose/derive/trace_input_wait.py).
The fix is to build batches ahead of time: a DataLoader with workers over the same code, or a
background thread with a queue.

    python examples/input_generator.py --steps 40 --device cuda
"""

import argparse

import numpy as np
import torch
import torch.nn as nn


def batches(batch, features, seed=0):  # INPUT-1: the host builds every batch in the loop's own thread
    rng = np.random.default_rng(seed)
    while True:
        raw = rng.standard_normal((batch, features * 4)).astype(np.float32)
        for _ in range(12):  # the "decoding": smoothing passes over the raw rows
            raw = (raw[:, :-2] + raw[:, 1:-1] + raw[:, 2:]) / 3
            raw = np.pad(raw, ((0, 0), (1, 1)), mode="edge")
        x = raw[:, ::4][:, :features]
        x = (x - x.mean(axis=1, keepdims=True)) / (x.std(axis=1, keepdims=True) + 1e-6)
        y = (x[:, :8].sum(axis=1) > 0).astype(np.int64)
        yield torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(y)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--features", type=int, default=1024)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.device == "cpu":
        torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(args.features, 512), nn.ReLU(), nn.Linear(512, 2)).to(args.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for step, (x, y) in enumerate(batches(args.batch, args.features)):  # INPUT-2: waits for the generator
        if step == args.steps:
            break
        x, y = x.to(args.device, non_blocking=True), y.to(args.device, non_blocking=True)
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
