"""Hand-made test script: a CPU torch loop that raises torch's sync-debug warning text at a known line.

On a CPU there is no real CUDA sync; the warning below stands in for the one
torch.cuda.set_sync_debug_mode("warn") raises, so the capture path can be tested.
"""

import sys
import warnings

import torch

model = torch.nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(int(sys.argv[1])):
    loss = model(torch.ones(4, 8)).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
    warnings.warn("called a synchronizing CUDA operation", UserWarning)  # noqa: B028  SYNC-LINE (this line is recorded)
