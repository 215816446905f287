"""Planted problem: an out-of-memory error that fragmentation, not demand, causes.

The process is capped at 4 GiB with ``torch.cuda.set_per_process_memory_fraction``.
It fills the cap with 5 MiB activations (the caching allocator packs four of them
into each 20 MiB large-pool segment), frees three of every four (so ~3/4 of the
memory is free, but in 15 MiB holes of segments that still hold one live block and
so cannot be released), then asks for one 256 MiB buffer: reserved − allocated
(≈3 GiB) is far larger than the failed request, yet no free block is large enough
and no segment can be returned to the driver, so the allocator raises OOM.

    python examples/mem_oom.py OUT_DIR

Writes OUT_DIR/snapshot.pickle (with the oom entry), OUT_DIR/stats.jsonl, OUT_DIR/oom.json.
"""

import json
import os
import sys

import torch
from _capture_io import JsonlWriter, memory_stats_record

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
total = torch.cuda.get_device_properties(0).total_memory
cap_bytes = 4 * 2**30
torch.cuda.set_per_process_memory_fraction(cap_bytes / total)
torch.cuda.memory._record_memory_history(max_entries=100000)
stats = JsonlWriter(os.path.join(out, "stats.jsonl"))
chunk = 5 * 2**20 // 4  # floats in 5 MiB
blocks = []
try:
    while True:
        blocks.append(torch.empty(chunk, device="cuda"))
except torch.cuda.OutOfMemoryError:
    pass
stats.write(memory_stats_record(torch, 0))
blocks = blocks[::4]  # free 3 of every 4: one live block pins each segment
stats.write(memory_stats_record(torch, 1))
error = None
try:
    big = torch.empty(256 * 2**20 // 4, device="cuda")
except torch.cuda.OutOfMemoryError as e:
    error = str(e)
stats.write(memory_stats_record(torch, 2))
torch.cuda.memory._dump_snapshot(os.path.join(out, "snapshot.pickle"))
stats.close()
json.dump(
    {
        "error": error,
        "cap_bytes": cap_bytes,
        "kept_blocks": len(blocks),
        "reserved": torch.cuda.memory_reserved(),
        "allocated": torch.cuda.memory_allocated(),
    },
    open(os.path.join(out, "oom.json"), "w"),
    indent=1,
)
print("mem_oom done:", "OOM raised" if error else "no OOM (unexpected)")
