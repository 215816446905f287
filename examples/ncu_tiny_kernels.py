"""Planted problem: a loop of tiny elementwise kernels (launch-bound).

A per-parameter "optimizer" written as a Python loop over 16 small tensors,
with several elementwise ops each: hundreds of launches that each run for a few
microseconds, about what it costs to launch them. The fix: a fused/foreach
optimizer, torch.compile, or a CUDA graph.
"""

import torch
from _window import profiled_region

torch.manual_seed(0)
params = [torch.randn(1024, device="cuda") for _ in range(16)]
grads = [torch.randn(1024, device="cuda") for _ in range(16)]
moments = [torch.zeros(1024, device="cuda") for _ in range(16)]


def naive_step(lr=1e-3, beta=0.9):
    for p, g, m in zip(params, grads, moments):
        m.mul_(beta)
        m.add_(g, alpha=1 - beta)
        p.add_(m, alpha=-lr)


for _ in range(3):
    naive_step()
with profiled_region():
    naive_step()
print("tiny checksum", float(sum(p.sum() for p in params)))
