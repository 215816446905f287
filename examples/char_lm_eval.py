"""A character-level language model trained by a module-level loop that evaluates and saves a checkpoint every
--eval-interval iterations (and at the last one), as small training scripts often do.

The loop, the evaluation and the save are module-level code, not functions: the trace and light mode's records name
this file's lines, not a function. Every --eval-interval iterations (EVALUATION) the model runs --eval-batches
batches of the training and the held-out text under torch.no_grad() between model.eval() and model.train(), then
`torch.save` writes the model and AdamW state (CHECKPOINT). Those iterations are much slower than the others:
`gpudiag report` names them every --eval-interval steps (step_budget.periodic) with the line of the evaluation.

    python examples/char_lm_eval.py --iters 600 --eval-interval 200 --device cpu
"""

import argparse
import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
parser.add_argument("--iters", type=int, default=600)
parser.add_argument("--eval-interval", type=int, default=200)
parser.add_argument("--eval-batches", type=int, default=40)
parser.add_argument("--batch", type=int, default=16)
parser.add_argument("--block", type=int, default=32)
parser.add_argument("--embed", type=int, default=64)
args = parser.parse_args()
torch.manual_seed(0)
if args.device == "cpu":
    torch.set_num_threads(1)

# the text: words drawn from a small vocabulary with a fixed seed (our own corpus, no download)
words = "the a gpu step time waits for host input kernel launch sync loss batch model train eval".split()
picks = torch.randint(len(words), (40_000,), generator=torch.Generator().manual_seed(1)).tolist()
text = " ".join(words[i] for i in picks)
chars = sorted(set(text))
index = {c: i for i, c in enumerate(chars)}
data = torch.tensor([index[c] for c in text], dtype=torch.long)
split = int(0.9 * len(data))
train_data, val_data = data[:split], data[split:]

# a per-position MLP over character embeddings: small, so a training iteration takes about a millisecond on a CPU
model = nn.Sequential(
    nn.Embedding(len(chars), args.embed),
    nn.Linear(args.embed, 4 * args.embed),
    nn.GELU(),
    nn.Linear(4 * args.embed, len(chars)),
).to(args.device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
checkpoint = os.path.join(tempfile.mkdtemp(prefix="char_lm_eval_"), "ckpt.pt")

for it in range(args.iters):
    if it % args.eval_interval == 0 or it == args.iters - 1:
        model.eval()  # EVALUATION
        losses = {}
        with torch.no_grad():
            for name, source in (("train", train_data), ("val", val_data)):
                total = 0.0
                for _ in range(args.eval_batches):
                    starts = torch.randint(len(source) - args.block - 1, (args.batch,))
                    x = torch.stack([source[s : s + args.block] for s in starts]).to(args.device)
                    y = torch.stack([source[s + 1 : s + args.block + 1] for s in starts]).to(args.device)
                    total += F.cross_entropy(model(x).flatten(0, 1), y.flatten()).item()
                losses[name] = total / args.eval_batches
        model.train()
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, checkpoint)  # CHECKPOINT
        print(f"iter {it}: train loss {losses['train']:.3f}, val loss {losses['val']:.3f}")
    starts = torch.randint(len(train_data) - args.block - 1, (args.batch,))
    x = torch.stack([train_data[s : s + args.block] for s in starts]).to(args.device)
    y = torch.stack([train_data[s + 1 : s + args.block + 1] for s in starts]).to(args.device)
    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
