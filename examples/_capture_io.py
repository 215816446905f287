"""Helpers for the example scripts' own captures (used when they run without `gpudiag profile`).

They write the same formats `gpudiag profile` writes (docs/contracts.md), so the
fixtures captured from the examples exercise the same readers.
"""

import json
import os
import time


class JsonlWriter:
    """Append one JSON object per line, flushed, so a crash leaves whole lines."""

    def __init__(self, path):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self.f = open(path, "a", encoding="utf-8")

    def write(self, obj):
        self.f.write(json.dumps(obj, default=str) + "\n")
        self.f.flush()

    def close(self):
        self.f.close()


def memory_stats_record(torch, step, rank=0):
    return {
        "kind": "memory_stats",
        "rank": rank,
        "step": step,
        "t_ns": time.time_ns(),
        "framework": "torch",
        "stats": torch.cuda.memory_stats(),
    }
