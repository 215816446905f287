"""Healthy reference: a large, well-tiled bf16 matrix product (cuBLAS).

cuBLAS tiles the operands so every element is reused from L2 many times: expect
an L2 hit rate well above 85 % and high SM throughput. This kernel must NOT be
flagged by the L2 analyzer at a size whose operands fit L2 together (N=2048: 3 × 8 MiB);
at N=8192 each operand is 128 MiB, twice the H200's L2, and the hit rate drops to ~72 %.

    python examples/ncu_matmul_tiled.py [N]      (default 8192)
"""

import sys

import torch
from _window import profiled_region

N = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
torch.manual_seed(0)
a = torch.randn(N, N, device="cuda", dtype=torch.bfloat16)
b = torch.randn(N, N, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    c = a @ b
with profiled_region():
    for _ in range(3):
        c = a @ b
print("matmul checksum", float(c.float().mean()))
