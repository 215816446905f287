"""Planted problem: allocator churn from variable-size batches (fragmentation).

A small transformer-like MLP trained on sequences whose length changes every
step (as with unbucketed text batches). Every step asks the caching allocator for
differently sized activations, so large-pool segments are split, cached and new
segments allocated; reserved memory grows well past what is allocated at the
peak. Run with ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` to see the fix.

    python examples/mem_churn.py OUT_DIR [--steps 30] [--max-entries 200000]

Writes OUT_DIR/snapshot.pickle (allocator history), OUT_DIR/stats.jsonl
(per-step torch.cuda.memory_stats in gpudiag's format) and OUT_DIR/losses.json.
"""

import argparse
import json
import os

import torch
import torch.nn as nn
from _capture_io import JsonlWriter, memory_stats_record

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--steps", type=int, default=30)
ap.add_argument("--max-entries", type=int, default=200000)
args = ap.parse_args()
os.makedirs(args.out, exist_ok=True)

torch.manual_seed(0)
d = 1024
model = nn.Sequential(
    nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d), nn.GELU(), nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)
).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
torch.cuda.memory._record_memory_history(max_entries=args.max_entries)
stats = JsonlWriter(os.path.join(args.out, "stats.jsonl"))
losses = []
lengths = [512, 3000, 1100, 4096, 700, 2500, 3900, 900, 1800, 3300]
for step in range(args.steps):
    seq = lengths[step % len(lengths)] * 8  # tokens in this batch: 4k .. 32k
    x = torch.randn(seq, d, device="cuda")
    y = torch.randn(seq, d, device="cuda")
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=False)  # keeps .grad tensors alive (what many scripts do)
    losses.append(loss.detach())
    stats.write(memory_stats_record(torch, step))
torch.cuda.synchronize()
torch.cuda.memory._dump_snapshot(os.path.join(args.out, "snapshot.pickle"))
stats.close()
json.dump(
    {
        "losses": [float(v) for v in losses],
        "final_memory_stats": torch.cuda.memory_stats(),
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
    },
    open(os.path.join(args.out, "losses.json"), "w"),
)
print(
    "mem_churn done: peak reserved",
    torch.cuda.max_memory_reserved(),
    "peak allocated",
    torch.cuda.max_memory_allocated(),
)
