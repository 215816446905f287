"""torch.compile compiling again mid-run (test script for compile_work's dynamo callbacks).

A marked loop (diagnose.step) over batches whose size changes at steps 4 and 8: torch.compile(backend="eager")
compiles `forward` (dynamic=False: one graph per size) at steps 0, 4 and 8, and once before the first step (step -1).
A compile on another thread is not recorded.
"""

import threading

import torch

import diagnose

model = torch.nn.Linear(8, 4)


@torch.compile(backend="eager", dynamic=False)
def forward(x):
    return model(x).relu().sum()


@torch.compile(backend="eager")
def elsewhere(x):
    return (x * 2).sum()


forward(torch.randn(1, 8))  # COMPILE-BEFORE the first step: step -1, written after the run's start record
for step in range(12):
    diagnose.step()
    rows = 2 if step < 4 else 3 if step < 8 else 5
    forward(torch.randn(rows, 8))  # COMPILE-CALL
    if step == 6:
        other = threading.Thread(target=elsewhere, args=(torch.randn(3),))
        other.start()
        other.join()
print("done")
