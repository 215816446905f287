"""Hand-made test script: a torch loop over a generator that opens a "shard" (300 ms) at the start of every epoch,
then gives 20 items 4 ms apart; 5 epochs, torch.optim.SGD steps, no DataLoader. Under Python 3.12+ light mode
times the loop's for statement, each epoch's first fetch included (diagnose/launch/runtime/loop_input.py)."""

import time

import torch
import torch.nn as nn


def shard(n):
    time.sleep(0.3)  # opening a shard: the first item of every epoch
    for _ in range(n):
        time.sleep(0.004)
        yield torch.randn(64, 128), torch.randint(0, 2, (64,))


model = nn.Linear(128, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _epoch in range(5):
    for x, y in shard(20):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
