"""A small convnet whose input pipeline cannot keep up: the GPU waits on the DataLoader most of each step.

Each sample is "decoded" on the CPU in `SyntheticImages.__getitem__` (INPUT-1: a seeded 80x80 image,
10 smoothing passes, a random crop and flip, per-channel normalisation; about 1-2 ms a sample on
one core), and the loader has only 2 workers (INPUT-2), so a batch of 64 takes ~50 ms of worker time
while the convnet's step on a GPU takes a few ms. The loop blocks in the loader's `__next__` at
INPUT-3. The fix is more workers, cheaper decoding, or decoding on the GPU.

    python examples/input_bound.py --steps 40 --device cuda
    python examples/input_bound.py --steps 30 --device cpu --workers 0
"""

import argparse

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class SyntheticImages(Dataset):
    def __init__(self, length, size=64, classes=10):
        self.length, self.size, self.classes = length, size, classes

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        rng = np.random.default_rng(index)
        img = rng.integers(0, 256, (self.size + 16, self.size + 16, 3), dtype=np.uint8).astype(np.float32) / 255
        for _ in range(10):  # INPUT-1: the per-sample CPU work ("decoding" and augmentation)
            img = (img[:-2, :-2] + img[1:-1, 1:-1] + img[2:, 2:] + img[1:-1, :-2] + img[:-2, 1:-1]) / 5
            img = np.pad(img, ((1, 1), (1, 1), (0, 0)), mode="edge")
        top, left = rng.integers(0, 16, 2)
        img = img[top : top + self.size, left : left + self.size]
        if rng.random() < 0.5:
            img = img[:, ::-1]
        img = (img - img.mean(axis=(0, 1))) / (img.std(axis=(0, 1)) + 1e-6)
        return torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1))), index % self.classes


def make_model(classes=10):
    return nn.Sequential(
        nn.Conv2d(3, 16, 4, stride=4), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, classes),
    )  # fmt: skip


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--workers", type=int, default=2)  # INPUT-2: too few workers for the decoding
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.device == "cpu":
        torch.set_num_threads(1)  # leave the other cores to the loader workers (and keep CPU runs steady)
    loader = DataLoader(
        SyntheticImages(args.steps * args.batch), batch_size=args.batch, shuffle=True, num_workers=args.workers
    )
    model = make_model().to(args.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss = None
    for x, y in loader:  # INPUT-3: the loop blocks here until the workers have a batch ready
        x, y = x.to(args.device, non_blocking=True), y.to(args.device, non_blocking=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
