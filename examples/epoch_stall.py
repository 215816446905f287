"""Epochs over a small dataset whose loader workers are costly to start: the first step of every epoch stalls.

Every epoch makes a new DataLoader iterator, and with `persistent_workers=False` (EPOCH-1) that starts
4 fresh worker processes. Each worker builds its label table when it starts, in `worker_init_fn`
(EPOCH-2: an argsort of 8 M numbers, ~0.3-0.5 s of CPU), before it can hand over its first batch,
so the first step of each epoch waits that long while the other steps take a few ms: slow steps
with a period of --batches-per-epoch (20). The fix: `persistent_workers=True`, or build the table
once in the main process before the loader forks.

    python examples/epoch_stall.py --epochs 5 --device cuda
    python examples/epoch_stall.py --epochs 3 --device cpu
"""

import argparse

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset, get_worker_info

TABLE_SIZE = 8_000_000


class TabledSamples(Dataset):
    def __init__(self, length, features=128, classes=10):
        self.length, self.features, self.classes = length, features, classes
        self.table = None  # built in each worker process when it starts

    def build_table(self):
        order = np.argsort(np.random.default_rng(0).random(TABLE_SIZE, dtype=np.float32))
        self.table = (order % self.classes).astype(np.uint8)

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        if self.table is None:
            self.build_table()  # without workers: built once, in the main process
        x = np.random.default_rng(index).standard_normal(self.features, dtype=np.float32)
        return torch.from_numpy(x), int(self.table[index])


def build_worker_table(worker_id):
    get_worker_info().dataset.build_table()  # EPOCH-2: every worker start pays for the table


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batches-per-epoch", type=int, default=20)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.device == "cpu":
        torch.set_num_threads(1)  # leave the other cores to the loader workers
    dataset = TabledSamples(args.batches_per_epoch * args.batch)
    loader = DataLoader(
        dataset, batch_size=args.batch, shuffle=True, num_workers=args.workers,
        persistent_workers=False,  # EPOCH-1: new worker processes for every epoch
        worker_init_fn=build_worker_table if args.workers > 0 else None,
    )  # fmt: skip
    model = nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    model = model.to(args.device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(args.epochs):
        total = torch.zeros((), device=args.device)
        for x, y in loader:  # the first batch of each epoch waits for the workers to start
            x, y = x.to(args.device, non_blocking=True), y.to(args.device, non_blocking=True)
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            total += loss.detach()
        print(f"epoch {epoch} mean loss {total.item() / len(loader):.4f}")


if __name__ == "__main__":
    main()
