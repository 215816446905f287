"""A GPT-style training loop whose memory/throughput trade-off `gpudiag sweep` maps.

The global batch (``--batch`` sequences) is split into ``--grad-accum`` micro-batches, so
activation memory scales with the micro-batch (batch / accum) while the samples per optimizer
step stay the same; ``--precision`` bf16/fp16 runs the forward under autocast (fp16 with a
GradScaler), which halves most activations and is much faster on tensor cores.

The samples-per-step contract (docs/sweep.md): the script prints, once,

    gpudiag: samples_per_step=<sequences per optimizer step>

and gpudiag's step times (one step = one optimizer.step()) turn it into samples/s.

    python examples/train_sweep.py --grad-accum 4 --precision bf16            # H200 size (~218 M params)
    python examples/train_sweep.py --device cpu --tiny --steps 6               # seconds, on a CPU
    gpudiag sweep --grid accum=1,2,4,8 --grid precision=fp32,bf16,fp16 -- \\
        python examples/train_sweep.py --grad-accum {accum} --precision {precision}

Sizes (default): d_model 1024, 16 layers, sequence 1024, vocab 8192, batch 64: fp32 activations
are about 1.1 GB per sequence, so accum 1 needs about 75 GB and accum 8 about 12 GB on top of the
~3.5 GB of weights, gradients and AdamW state.
"""

from __future__ import annotations

import argparse
import math
import sys

import torch
import torch.nn.functional as F
from torch import nn

SIZES = {  # name: (d_model, layers, heads, seq, vocab, batch)
    "h200": (1024, 16, 16, 1024, 8192, 64),
    "tiny": (32, 2, 2, 16, 64, 8),
}


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).transpose(1, 3).unbind(2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, d: int, layers: int, heads: int, seq: int, vocab: int):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step (divides --batch)")
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    p.add_argument("--steps", type=int, default=15, help="optimizer steps")
    p.add_argument("--batch", type=int, default=None, help="sequences per optimizer step (default: by size)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.add_argument("--tiny", action="store_true", help="a model of a few thousand parameters (CPU tests)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    d, layers, heads, seq, vocab, batch = SIZES["tiny" if args.tiny else "h200"]
    batch = args.batch or batch
    if args.grad_accum < 1 or batch % args.grad_accum:
        p.error(f"--grad-accum {args.grad_accum} must divide --batch {batch}")
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    torch.manual_seed(args.seed)
    model = GPT(d, layers, heads, seq, vocab).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=device.type == "cuda")
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.precision]
    scaler = torch.amp.GradScaler(device.type, enabled=args.precision == "fp16")
    micro = batch // args.grad_accum
    generator = torch.Generator(device=device).manual_seed(args.seed)
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"train_sweep: {n_params:,} params, batch {batch} = {args.grad_accum} x {micro}, "
        f"seq {seq}, {args.precision}, {device.type}",
        flush=True,
    )
    print(f"gpudiag: samples_per_step={batch}", flush=True)
    for step in range(args.steps):
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for _ in range(args.grad_accum):
            idx = torch.randint(0, vocab, (micro, seq + 1), device=device, generator=generator)
            with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                logits = model(idx[:, :-1])
                loss = F.cross_entropy(logits.float().view(-1, vocab), idx[:, 1:].reshape(-1)) / args.grad_accum
            scaler.scale(loss).backward()
            total += loss.detach()
        scaler.step(optimizer)
        scaler.update()
        if step in (0, args.steps - 1):
            value = float(total)  # one host sync at the first and last step only
            if not math.isfinite(value):
                print(f"step {step}: loss is {value}", file=sys.stderr)
                return 1
            print(f"step {step} loss {value:.4f}", flush=True)
    if device.type == "cuda":
        print(
            f"train_sweep: peak reserved {torch.cuda.max_memory_reserved() / 2**30:.2f} GiB, "
            f"peak allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
