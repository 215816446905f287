"""Planted problem: a long kernel launched with fewer blocks than the GPU has SMs.

A softmax over very long rows of a batch of 16: PyTorch's softmax gives each row
one block, so 16 blocks run on a 132-SM H200 and ~88 % of the SMs sit idle for
the whole kernel. The fix: split each row across blocks (a two-pass / split-K
style reduction), batch more rows together, or reshape the problem.
"""

import torch
from _window import profiled_region

torch.manual_seed(0)
x = torch.randn(16, 2**22, device="cuda")
for _ in range(2):
    y = torch.softmax(x, dim=1)
with profiled_region():
    for _ in range(2):
        y = torch.softmax(x, dim=1)
print("softmax checksum", float(y.sum()))
