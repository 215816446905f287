"""An image classifier fed by a DataLoader whose workers cannot keep up: each item is decoded and augmented on the
CPU (numpy), and a batch takes a worker longer than num_workers training steps take the GPU.

The workers start together and finish their batches together, so the batches arrive in bursts of num_workers:
the loop takes num_workers batches at once and then waits for the next burst, a stall every num_workers steps.
The fix is more workers, cheaper items or prefetching on the GPU; gpudiag should name the stalls, their period and
their summed cost.

--clock-out FILE writes the script's own stopwatch: the wait for each batch (from the end of one iteration to the
start of the next), and the time one __getitem__ takes in this process (20 items, before training).

    python examples/loader_workers.py --workers 4 --steps 240 [--clock-out clocks.json]
"""

import argparse
import atexit
import json
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
parser.add_argument("--workers", type=int, default=4)
parser.add_argument("--steps", type=int, default=240)
parser.add_argument("--batch", type=int, default=32)
parser.add_argument("--size", type=int, default=64)
parser.add_argument("--decode-rounds", type=int, default=6)
parser.add_argument("--clock-out", default=None)
args = parser.parse_args()
torch.manual_seed(0)
clocks = {"waits_ms": [], "getitem_ms": None, "workers": args.workers, "batch": args.batch}
atexit.register(lambda: args.clock_out and json.dump(clocks, open(args.clock_out, "w"), indent=1))


class SyntheticImages(Dataset):
    """Images made from their index: a 'decode' (FFT of a noise field, the CPU cost of reading a JPEG) and a random
    crop and flip, as a transform pipeline would do."""

    def __init__(self, n, size, rounds):
        self.n, self.size, self.rounds = n, size, rounds

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        img = rng.standard_normal((3, self.size + 8, self.size + 8)).astype(np.float32)
        for _ in range(self.rounds):  # the decode
            img = np.real(np.fft.ifft2(np.fft.fft2(img) * 0.99)).astype(np.float32)
        y, x = rng.integers(0, 9, 2)
        img = img[:, y : y + self.size, x : x + self.size]
        if rng.random() < 0.5:
            img = img[:, :, ::-1]
        return torch.from_numpy(np.ascontiguousarray(img)), int(i % 10)


model = nn.Sequential(
    nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
    nn.Conv2d(64, 128, 3, stride=2, padding=1), nn.BatchNorm2d(128), nn.ReLU(),
    nn.Conv2d(128, 256, 3, stride=2, padding=1), nn.BatchNorm2d(256), nn.ReLU(),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 10),
).to(args.device)  # fmt: skip
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
dataset = SyntheticImages(args.steps * args.batch, args.size, args.decode_rounds)
started = time.perf_counter_ns()
for i in range(20):
    dataset[i]
clocks["getitem_ms"] = (time.perf_counter_ns() - started) / 20 / 1e6
loader = DataLoader(dataset, batch_size=args.batch, shuffle=True, num_workers=args.workers, drop_last=True)

step_ended = time.perf_counter_ns()
for step, (images, labels) in enumerate(loader):
    clocks["waits_ms"].append((time.perf_counter_ns() - step_ended) / 1e6)  # the wait for this batch
    images, labels = images.to(args.device, non_blocking=True), labels.to(args.device, non_blocking=True)
    loss = F.cross_entropy(model(images), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if step % 60 == 0:
        print(f"step {step}: loss {loss.item():.3f}", flush=True)
    step_ended = time.perf_counter_ns()
