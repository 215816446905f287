"""Hand-made test script (tests/launch/test_run_budget_records.py, tests/gpu/test_run_budget_records_gpu.py): 12
optimizer steps of a small model, for a trace window whose start and export gpudiag times as its own work (and, on a
GPU, the allocator snapshot's dump). argv: the device (default cpu)."""

import sys

import torch

device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _step in range(12):
    model(torch.randn(32, 64, device=device)).sum().backward()
    opt.step()
    opt.zero_grad()
print("done")
