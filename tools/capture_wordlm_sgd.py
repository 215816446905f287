"""Capture a real PyTorch profiler trace WITHOUT ProfilerStep of examples/wordlm_sgd.py (issue 28, item 15).

What a user who wraps a few iterations in ``torch.profiler.profile()`` with no schedule and no ``prof.step()``
hands over: a word-level LSTM language model, a hand-written SGD update (no optimizer), one ``loss.item()`` per
iteration, ITERATIONS iterations after WARMUP of warm-up,

    OUT/wordlm_stacks.json.gz     with_stack=True: backward passes visible in the Python frames
    OUT/wordlm_nostacks.json.gz   no stacks: the autograd engine's ops and their sequence numbers only

    PYTHONPATH=$PWD python3 tools/capture_wordlm_sgd.py OUT [cpu|cuda]
"""

from __future__ import annotations

import gzip
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from wordlm_sgd import WordLM, batchify, corpus, train  # noqa: E402

ITERATIONS, WARMUP = 24, 3


def capture(path: str, device: str, with_stack: bool) -> None:
    torch.manual_seed(0)
    if device == "cpu":
        torch.set_num_threads(1)
    ids, vocab = corpus(20_000)
    data = batchify(ids, 16).to(device)
    model = WordLM(vocab, 64, 2).to(device)
    hidden = train(model, data, WARMUP)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        torch.cuda.synchronize()
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities, with_stack=with_stack) as prof:
        train(model, data, ITERATIONS, hidden=hidden)
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(raw)
        with open(raw, "rb") as f, gzip.open(path, "wb", compresslevel=9) as g:
            g.write(f.read())
    print(path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    device = sys.argv[2] if len(sys.argv) > 2 else "cpu"
    capture(os.path.join(out, "wordlm_stacks.json.gz"), device, with_stack=True)
    capture(os.path.join(out, "wordlm_nostacks.json.gz"), device, with_stack=False)
