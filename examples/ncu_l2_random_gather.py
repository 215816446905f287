"""Planted problem: a random gather over an embedding-like table far larger than L2.

The H200 has ~60 MB of L2. The table here is 2 GiB of float32 and the 16 M
indices are uniform random, so nearly every 32-byte sector the gather touches is
a miss: expect ``lts__t_sector_hit_rate.pct`` far under 62 % on the
``index_select``/gather kernel, and DRAM busy. The fix a user would make: sort or
bucket the indices, or shrink the table's working set.

    ncu --profile-from-start off ... python examples/ncu_l2_random_gather.py
"""

import torch
from _window import profiled_region

ROWS = 512 * 2**20  # 2 GiB of float32
N_IDX = 16 * 2**20

torch.manual_seed(0)
table = torch.randn(ROWS, device="cuda")
idx = torch.randint(0, ROWS, (N_IDX,), device="cuda")
for _ in range(3):  # warm-up
    out = table.index_select(0, idx)
with profiled_region():
    for _ in range(3):
        out = table.index_select(0, idx)
print("gather checksum", float(out.sum()))
